"""The tools around the trial code: run an experiment to the end and show the best kernel
(``launch``), write search spaces and experiment configs (``make_spaces``), re-measure and export
an experiment's best kernel (``export``, ``network_export``), and the ``nni-opevo`` command
(``console``). They read experiments through ``experiment_client`` and write ``best.json`` (``best``)."""
