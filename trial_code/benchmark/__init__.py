"""The comparison benchmark: seeds x tuners x workloads, each tuner driven through the calls
NNI's dispatcher makes (``nni_opevo.dispatch``), on live kernels, recorded measurements or
synthetic landscapes; every trial goes to a CSV, from which ``report`` draws the paper's
figures and tables. ``python -m trial_code.benchmark --help``."""
