"""Run seeds x tuners x objectives and append every trial to one CSV as it finishes.

A run (objective, tuner, seed) with rows already in the CSV is not redone: a complete one is
skipped, and an interrupted one is resumed, its tuner rebuilt from those rows through
``import_data`` (as ``nnictl resume`` would) and driven for the rest of the budget.

NNI tuners (catalog names), and Optuna's samplers behind an NNI tuner (``optuna:<sampler>``,
``optuna_peers``), are driven through NNI's calls (``nni_opevo.testing``) and get the
objective's constraint as classArgs. Kernel Tuner's strategies (``kt:<name>``, on a cache
objective) run in Kernel Tuner itself (``kernel_tuner_strategies``), one evaluation at a time
on the simulated clock. TVM MetaSchedule (``metaschedule``, on a live objective) tunes in TVM
itself on the real clock. Neither can be resumed, so their rows are written when the run ends
(``written_when_it_ends``): rows in the CSV are a whole run, kept even when its search ended
before the budget, and a run cut short left none and is run again whole.
"""
from __future__ import annotations

import csv
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from nni_opevo import catalog
from nni_opevo.testing.dispatch import Trial, drive
from trial_code import forked, networks

from . import kernel_tuner_strategies, metaschedule, network_end_to_end, optuna_peers, tuner_specs
from .objectives import Cache, Live, Network, Objective, config_key
from .table import drop_partial_row, read_rows

COLUMNS = ["objective", "workload", "target", "tuner", "seed", "index", "parameter_id", "started_s", "finished_s",
           "tuner_ms", "tflops", "status", "seconds", "configuration"]


@dataclass
class Plan:
    objectives: list[Objective]
    tuners: list[str]  # catalog specs, e.g. "opevo" or "opevo:mutate_rate=0.3"
    seeds: list[int]
    budget: int
    concurrency: int
    deadline: float | None = None
    """``time.monotonic()`` after which no trial starts (those running finish and are written):
    the same command later resumes where this one stopped."""
    published: frozenset[tuple[str, str, int]] = frozenset()
    """Runs (workload, tuner, seed) whose results a report already holds: not run again."""
    prior: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Measurements of a workload made outside the plan's runs (``import_data``'s ``{"parameter",
    "value"}`` entries), which each run of that workload is told before its own rows: its tuner
    starts from them; they are neither written nor counted against the budget."""

    def past_deadline(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline


class Progress:
    """One status line on a terminal (rewritten in place), a line per run otherwise."""

    def __init__(self, stream: TextIO, total_runs: int) -> None:
        self.stream, self.total_runs, self.done_runs = stream, total_runs, 0
        self.tty = stream.isatty()

    def update(self, label: str, done: int, budget: int, best: float, started: float) -> None:
        if self.tty:
            elapsed = time.strftime("%H:%M:%S", time.gmtime(time.time() - started))
            bar = "#" * (20 * done // budget) + "." * (20 - 20 * done // budget)
            self.stream.write(f"\r[{self.done_runs + 1}/{self.total_runs}] {label} [{bar}] {done}/{budget}"
                              f" best {best:.4g} TFLOPS {elapsed} ")
            self.stream.flush()

    def finished(self, label: str, done: int, best: float, started: float) -> None:
        self.done_runs += 1
        end = "\n" if self.tty else ""
        self.stream.write(f"{end}[{self.done_runs}/{self.total_runs}] {label}: {done} trials, best {best:.4g} TFLOPS,"
                          f" {time.time() - started:.0f} s\n")
        self.stream.flush()


def run(plan: Plan, csv_path: Path, progress: bool = True) -> bool:
    """Whether every run is complete (False: the plan's deadline stopped it first)."""
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    existing: dict[tuple[str, str, str], list[dict[str, str]]] = {}
    drop_partial_row(csv_path)
    for row in read_rows(csv_path):
        existing.setdefault((row["workload"], row["tuner"], row["seed"]), []).append(row)
    fresh = not csv_path.exists()
    runs = [(o, t, s) for o in plan.objectives for t in plan.tuners for s in plan.seeds
            if (o.workload, t, s) not in plan.published]
    bar = Progress(sys.stderr if progress else open("/dev/null", "w"), len(runs))
    try:
        with open(csv_path, "a", newline="") as handle, forked.workers():
            writer = csv.DictWriter(handle, COLUMNS)
            if fresh:
                writer.writeheader()
            for objective, tuner_spec, seed in runs:
                rows = sorted(existing.get((objective.workload, tuner_spec, str(seed)), []),
                              key=lambda r: int(r["index"]))
                if plan.past_deadline() or not _one(plan, objective, tuner_spec, seed, rows, writer, handle, bar,
                                                    csv_path.parent):
                    return False
            return True
    except OSError as e:
        raise OSError(e.errno, f"cannot write {csv_path}: {e.strerror}; every trial written before is kept: make "
                               "room and run the same command again to resume") from e


def written_when_it_ends(spec: str) -> bool:
    """Whether ``spec``'s rows are written once its run has ended (Kernel Tuner's strategies and
    MetaSchedule, neither of which can be resumed): its rows in the CSV are then a whole run,
    however short of the budget, since its search ended there."""
    return kernel_tuner_strategies.is_strategy(spec) or metaschedule.is_peer(spec)


def _one(plan: Plan, objective: Objective, tuner_spec: str, seed: int, rows: list[dict[str, str]],
         writer: csv.DictWriter, handle: TextIO, bar: Progress, out: Path) -> bool:
    """Whether the run is complete (its budget spent or its space exhausted)."""
    label = f"{objective.workload} {tuner_spec} seed {seed}"
    done = len(rows)
    best = max((float(r["tflops"]) for r in rows), default=0.0)
    started = time.time()
    if done >= plan.budget:
        bar.finished(label + " (already in the CSV)", done, best, started)
        if isinstance(objective, Network) and not metaschedule.is_peer(tuner_spec):
            _end_to_end(objective, tuner_spec, seed, out, params=network_end_to_end.best_params(rows))
        return True
    if done and written_when_it_ends(tuner_spec):
        bar.finished(label + " (already in the CSV; its search ended early)", done, best, started)
        return True
    if kernel_tuner_strategies.is_strategy(tuner_spec):
        _one_kernel_tuner(plan, objective, tuner_spec, seed, writer, handle, bar, label)
        return True
    if metaschedule.is_peer(tuner_spec):
        _one_metaschedule(plan, objective, tuner_spec, seed, writer, handle, bar, label, out)
        return True
    if objective.layers:  # a network: one tuner per layer behind the network tuner, weighted by the layers' counts
        weights = {layer.name: layer.count for layer in objective.layers}
        tuner = catalog.build_network(tuner_spec, weights, seed, extra=objective.constraint)
    elif optuna_peers.is_peer(tuner_spec):
        tuner = optuna_peers.build(tuner_spec, seed, extra=objective.constraint)
    else:
        tuner = catalog.build(tuner_spec, seed, extra=objective.constraint)
    history = [*plan.prior.get(objective.workload, []),
               *({"parameter": json.loads(r["configuration"]), "value": objective.recorded(r)} for r in rows)]
    offset = max((float(r["finished_s"]) for r in rows), default=0.0)
    first_id = max((int(r["parameter_id"]) for r in rows), default=-1) + 1

    written = list(rows)

    def record(trial: Trial) -> None:
        nonlocal best
        report: dict[str, Any] = trial.result or {}
        best = max(best, float(report.get("default") or 0.0))
        written.append({"tflops": str(report.get("default") or 0.0), "configuration": config_key(trial.parameters)})
        writer.writerow({
            "objective": objective.kind, "workload": objective.workload, "target": objective.target,
            "tuner": tuner_spec, "seed": seed, "index": done + trial.finish_order, "parameter_id": trial.parameter_id,
            "started_s": f"{offset + trial.started:.3f}", "finished_s": f"{offset + trial.finished:.3f}",
            "tuner_ms": f"{trial.tuner_seconds * 1e3:.3f}", "tflops": report.get("default") or 0.0,
            "status": report.get("status", "NO_RESULT"), "seconds": f"{float(report.get('seconds', 0.0)):.3f}",
            "configuration": config_key(trial.parameters),
        })
        handle.flush()
        bar.update(label, done + trial.finish_order + 1, plan.budget, best, started)

    pool = ThreadPoolExecutor(plan.concurrency) if objective.live else None
    try:
        result = drive(tuner, objective.space, objective, plan.budget - done, plan.concurrency, seed=seed,
                       duration=lambda params, report: float(report["seconds"]), pool=pool, on_finish=record,
                       first_id=first_id, history=history, stop=plan.past_deadline if objective.live else None)
    finally:
        if pool is not None:
            pool.shutdown()
    complete = result.exhausted or done + len(result.trials) >= plan.budget
    note = " (space exhausted)" if result.exhausted else "" if complete else " (stopped at the deadline)"
    bar.finished(label + note, done + len(result.trials), best, started)
    if isinstance(objective, Network) and complete:
        _end_to_end(objective, tuner_spec, seed, out, params=network_end_to_end.best_params(written))
    return complete


def _end_to_end(objective: Network, tuner_spec: str, seed: int, out: Path, **kernels: Any) -> None:
    """The run's kernels built into the whole network and timed (``network_end_to_end``)."""
    network_end_to_end.record(out, objective.workload, objective.device, tuner_spec, str(seed), objective.limits,
                              **kernels)


def _one_kernel_tuner(plan: Plan, objective: Objective, spec: str, seed: int, writer: csv.DictWriter,
                      handle: TextIO, bar: Progress, label: str) -> None:
    """One run of a Kernel Tuner strategy, its rows written once the strategy has ended. It is
    never resumed: some strategies stop before the budget and do not repeat their run with the
    same seed (dual_annealing, firefly_algorithm), so a second call would continue another run."""
    if not isinstance(objective, Cache):
        raise ValueError(f"{spec}: Kernel Tuner's strategies run on cache objectives only, not {objective.kind}")
    started = time.time()
    clock, best = 0.0, 0.0
    evaluations = kernel_tuner_strategies.run(objective.cache, spec, seed, plan.budget, objective.constrained)
    for index, evaluation in enumerate(evaluations):
        report = objective(evaluation.parameters)
        begin, clock = clock + evaluation.strategy_ms / 1e3, clock + evaluation.strategy_ms / 1e3 + report["seconds"]
        best = max(best, float(report["default"]))
        writer.writerow({
            "objective": objective.kind, "workload": objective.workload, "target": objective.target,
            "tuner": spec, "seed": seed, "index": index, "parameter_id": index, "started_s": f"{begin:.3f}",
            "finished_s": f"{clock:.3f}", "tuner_ms": f"{evaluation.strategy_ms:.3f}", "tflops": report["default"],
            "status": report["status"], "seconds": f"{report['seconds']:.3f}",
            "configuration": config_key(evaluation.parameters),
        })
        bar.update(label, index + 1, plan.budget, best, started)
    handle.flush()
    stopped = " (the strategy stopped early)" if len(evaluations) < plan.budget else ""
    bar.finished(label + stopped, len(evaluations), best, started)


def _one_metaschedule(plan: Plan, objective: Objective, spec: str, seed: int, writer: csv.DictWriter,
                      handle: TextIO, bar: Progress, label: str, out: Path) -> None:
    started = time.time()
    scheduled = None
    tuner_specs.check(spec, objective.kind)  # a plan made in code meets the rule a command line does
    if isinstance(objective, Network):
        measured, scheduled = metaschedule.run_network(objective.layers, objective.device, objective.limits, spec,
                                                       seed, plan.budget)
    else:
        assert isinstance(objective, Live)
        measured = metaschedule.run(objective.operator, objective.device, objective.limits, spec, seed, plan.budget)
    previous = batch_start = 0.0  # a candidate's result is known when its batch is measured
    for index, m in enumerate(measured):
        if m.finished_s != previous:
            batch_start = previous
        writer.writerow({
            "objective": objective.kind, "workload": objective.workload, "target": objective.target,
            "tuner": spec, "seed": seed, "index": index, "parameter_id": index, "started_s": f"{batch_start:.3f}",
            "finished_s": f"{m.finished_s:.3f}", "tuner_ms": "nan", "tflops": m.tflops, "status": m.status,
            "seconds": f"{m.finished_s - batch_start:.3f}",
            "configuration": json.dumps({"metaschedule": m.configuration} if not m.task else
                                        {networks.KEY: {"_name": m.task, "metaschedule": m.configuration}}),
        })
        previous = m.finished_s
    handle.flush()
    best = max((m.tflops for m in measured), default=0.0)
    bar.finished(label, len(measured), best, started)
    if isinstance(objective, Network):
        _end_to_end(objective, spec, seed, out, scheduled=scheduled)
