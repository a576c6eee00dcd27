"""NNI trial code: turn a tuner's parameters into a real Apache TVM kernel, check it, time it, report.

Data flows one way: workload (``workloads``) + parameters -> operator template
(``templates``: static feasibility, TE compute, schedule) -> build (``kernel``) -> verify and
time (``measure``, in a worker process under timeouts, ``evaluate``) -> NNI report (``trial``).
Only ``kernel``, ``measure`` and ``worker`` import TVM, so the parent trial process stays light.
"""
