"""OpEvo (Gao et al., AAAI 2021) as an NNI tuner.

* ``tuner``: the NNI tuner around the two variants;
* ``paper``: Algorithm 1 as published; ``screened``: the default, the paper's children screened by
  a surrogate, with restarts and local steps; both over ``variant``'s shared contract;
* shared operators: ``operators`` (recombination and the q-random walk), ``surrogate`` (the
  Gaussian process), ``atoms`` (how the surrogate sees a configuration), ``kin`` (what a network's
  layer learns from the others of its template);
* ``args`` (the classArgs) and ``settings`` (every value chosen on benchmark spaces, with why).
"""
