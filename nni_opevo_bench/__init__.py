"""The benchmark harness: how tuners are compared.

* ``catalog``: the tuners by short name, with the classArgs the comparisons run;
* ``dispatch``: drives any NNI tuner in-process through the calls NNI 3.0's dispatcher makes,
  on a simulated or a real clock;
* ``objectives`` (with ``synthetic``): what a trial measures: live TVM kernels, replayed
  recordings, synthetic landscapes;
* ``runner`` and ``table``: seeds x tuners x workloads into one resumable CSV;
* ``report``: the paper's figures and tables from that CSV;
* ``overhead``: the tuners' own time and memory per trial against history size.

``python -m nni_opevo_bench --help`` (or ``nni-opevo benchmark``) runs a comparison.
"""
