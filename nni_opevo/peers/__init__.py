"""The tuners OpEvo is compared with, one module each: G-BFS (``gbfs``), N-A2C (``na2c`` with its
``actor_critic``), AutoTVM's XGBoost and simulated annealing (``autotvm`` with ``cost_model``,
``annealing``, ``diversity``), NoSE (``nose`` with its ``knn`` surrogate), and NNI's built-ins on
this package's spaces (``choice_view``)."""
