"""Rebuild and re-time an experiment's top configurations, and pick the winner: the steps
``export`` takes for one workload and ``network_export`` for each layer of a network. A trial
times a kernel briefly, so close configurations swap places by noise; re-measuring them one at
a time with more repetitions settles the ranking."""
from __future__ import annotations

import os

from trial_code import forked
from trial_code.evaluate import Limits, Result, evaluate
from trial_code.status import Status
from trial_code.targets import Target
from trial_code.workloads import Workload

from .experiment_client import Trial


def remeasure(trials: list[Trial], workload: Workload, target: Target, limits: Limits, measured: bool,
              kernels: str) -> list[tuple[Trial, Result, str]]:
    """Rebuild (and with ``measured``, re-time) each configuration, writing its source and its
    compiled library (``library_of``) under ``kernels``."""
    extension = "cu" if target.kind == "cuda" else "ll"
    os.makedirs(kernels, exist_ok=True)
    out = []
    with forked.workers():
        for rank, trial in enumerate(trials, 1):
            source = os.path.join(kernels, f"p{trial.parameter_id}.{extension}")
            result = evaluate(workload, trial.parameters, target, limits, build_only=not measured, source_path=source,
                              library_path=library_of(source))
            spread = (f", {min(result.repeats_ms):.4f}-{max(result.repeats_ms):.4f} ms over {len(result.repeats_ms)}"
                      if result.repeats_ms else "")
            print(f"  {rank}/{len(trials)} parameter {trial.parameter_id}: reported {trial.value:.4f} TFLOPS, "
                  f"now {result.status.name} {result.tflops:.4f} TFLOPS{spread}", flush=True)
            out.append((trial, result, source))
    return out


def library_of(source: str) -> str:
    """The compiled library written beside a kernel's source: ``kernels/p12.so`` for ``p12.ll``."""
    return os.path.splitext(source)[0] + ".so"


def best_of(rows: list[tuple[Trial, Result, str]], measured: bool) -> tuple[Trial, Result, str]:
    """The winner: by re-measured TFLOPS where re-measured, else the best reported that still builds."""
    built = [row for row in rows if row[1].status is Status.NO_ERROR]
    if not built:
        raise SystemExit("none of the top configurations builds here any more: " +
                         "; ".join(f"parameter {t.parameter_id}: {r.status.name} {r.error}" for t, r, _ in rows))
    return max(built, key=lambda row: row[1].tflops) if measured else built[0]


SEPARATION_P = 0.05
"""The one-sided Mann-Whitney p-value under which the winner's repeats count as faster than the runner-up's."""


def separation(rows: list[tuple[Trial, Result, str]], winner: Result) -> dict | None:
    """Whether the winner's re-measured latencies are lower than the runner-up's beyond noise:
    ``{"runner_up", "p_value", "separated"}``, or None with fewer than two re-measured kernels."""
    from scipy.stats import mannwhitneyu

    others = sorted((row for row in rows if row[1].status is Status.NO_ERROR and row[1].repeats_ms
                     and row[1] is not winner), key=lambda row: -row[1].tflops)
    if not others or not winner.repeats_ms:
        return None
    trial, runner_up, _ = others[0]
    p_value = float(mannwhitneyu(winner.repeats_ms, runner_up.repeats_ms, alternative="less").pvalue)
    return {"runner_up": trial.parameter_id, "p_value": p_value, "separated": p_value < SEPARATION_P}
