"""Where a tuned network's time goes: each finished run's final kernels timed again, alone and in the network.

``nni-opevo profile --out DIR`` (``python -m nni_opevo_bench.network_profile``) times them in one session.

A network benchmark reports two latencies per run: the sum over layers of count x the best
latency its trials measured, and the whole network built with those kernels and timed once
when the run ended (``network_end_to_end``). They can differ for four reasons, which this
tells apart, layer by layer:

* **selection**: a layer's best is the best of many noisy measurements, so it is optimistic;
  ``alone_ms`` times the chosen kernel again as a trial did (alone, its data hot in cache);
* **context**: inside the network a kernel runs between others, its weights cold;
  ``in_network_ms`` is its share of one inference, every VM call timed (``Program.time_calls``);
* **the rest**: the operators no template covers (bias, ReLU, pooling, residual additions) and
  the VM's own work, ``(other)``;
* **when**: on a shared machine, runs timed hours apart are not comparable; here every run is
  timed in every round, in a rotated order, and the tables give the median over rounds. Within
  a round the tuners alternate (seed by seed), so a slow spell of a few minutes falls on every
  tuner's runs alike: with each tuner's runs in one block, such spells moved all six seeds of
  one tuner together (the block-ordered rounds: docs/results/networks/*/profile-blocks.csv in git
  history, up to commit 9b09e39).

TVM's default schedule in every layer is timed the same way where the benchmark recorded it
(``defaults.json``): a control, since no search picked those kernels, whose recorded against
alone shows how far the machine itself has drifted since the benchmark ran. A weak one on the
CPU: its loop nests run on one thread, and a shared machine's drift can reach multi-threaded
kernels alone (one ResNet-18 session found 1.03x for it, 1.2-1.35x for the
tuned kernels, then an hour later 0.94x and 0.91-1.05x). Compare runs timed in one session.

Every round's figures go to ``profile.csv`` as they are taken (a repeated command adds the
rounds still missing; nothing is timed twice) and ``profile.md`` tabulates them. Our tuners' runs
are rebuilt from their best configurations in ``trials.csv``; MetaSchedule's kernels lived only in
its run's database and are left out (the table says so).
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trial_code import networks, targets
from trial_code.cli import add_number, description, epilog
from trial_code.evaluate import Limits
from trial_code.targets import Target
from trial_code.templates import for_workload
from trial_code.trial import MAX_REPEAT, MAX_REPEAT_MS

from . import metaschedule
from .network_end_to_end import DEFAULT, best_params
from .network_report import recorded_defaults
from .table import append_rows, read_rows

FILE = "profile.csv"
TABLE = "profile.md"
COLUMNS = ["network", "target", "tuner", "seed", "round", "layer", "count", "recorded_ms", "alone_ms",
           "in_network_ms"]
WHOLE = "(whole)"
"""The row of a round holding the whole inference timed by TVM's time evaluator."""


@dataclass(frozen=True)
class Run:
    tuner: str
    seed: str
    params: dict[str, dict[str, Any]]
    """layer -> its best configuration (a layer no trial made work runs at TVM's default schedule)."""
    recorded_ms: dict[str, float]
    """layer -> the best latency (ms per call) its trials measured."""


def finished_runs(rows: list[dict[str, str]], network: str, target: str) -> tuple[list[Run], list[str]]:
    """Our tuners' runs of ``network`` on ``target`` in a benchmark CSV, and the tuners left out."""
    layers = {x.name: x.workload for x in networks.lookup(network)}
    grouped: dict[tuple[str, str], list[dict[str, str]]] = defaultdict(list)
    for row in rows:
        if row["objective"] == "network" and row["workload"] == network and row["target"] == target:
            grouped[(row["tuner"], row["seed"])].append(row)
    runs, skipped = [], set()
    for (tuner, seed), members in sorted(grouped.items(), key=_interleaved):
        if metaschedule.is_peer(tuner):
            skipped.add(tuner)
            continue
        recorded: dict[str, float] = {}
        for row in members:
            tflops = float(row["tflops"] or 0.0)
            name, _ = networks.split(json.loads(row["configuration"]))
            if tflops > 0:
                ms = for_workload(layers[name]).flops(layers[name]) / tflops / 1e9
                recorded[name] = min(recorded.get(name, ms), ms)
        runs.append(Run(tuner, seed, best_params(members), recorded))
    return runs, sorted(skipped)


def _interleaved(item: tuple[tuple[str, str], Any]) -> tuple[int, str, str]:
    """Seed before tuner (numeric seeds in number order), so the tuners alternate in a round."""
    (tuner, seed), _ = item
    return (int(seed) if seed.isdigit() else -1, seed, tuner)


def done_rounds(out: Path) -> set[tuple[str, str, str, str, int]]:
    """(network, target, tuner, seed, round) already in ``profile.csv``."""
    return {(r["network"], r["target"], r["tuner"], r["seed"], int(r["round"]))
            for r in read_rows(out / FILE) if r["layer"] == WHOLE}


class Session:
    """The kernels and programs of every run, built once, timed round after round with the
    device's lock held."""

    def __init__(self, network: str, target: Target, limits: Limits) -> None:
        self.network, self.target, self.limits = network, target, limits
        self.layers = networks.lookup(network)
        self.alone: dict[tuple[str, str], Any] = {}
        self.programs: dict[tuple[str, str], Any] = {}

    def _kernel(self, layer: networks.Layer, params: dict[str, Any] | None) -> Any:
        """The layer's configuration built alone, with its checked arguments (shared by runs that chose it)."""
        from trial_code import kernel
        from trial_code.measure import arguments, device_of, verify

        key = (layer.name, json.dumps(params, sort_keys=True))
        if key not in self.alone:
            target = kernel.for_host(self.target)
            executable = kernel.build(kernel.scheduled(layer.workload, params, target), target)
            device = device_of(target)
            host, args = arguments(layer.workload, device, self.limits.seed)
            verify(layer.workload, executable["main"], host, args, device, self.limits.seed)
            self.alone[key] = (executable.mod, args, device)
        return self.alone[key]

    def time_round(self, run: Run) -> list[dict[str, Any]]:
        """One round of ``run``: each layer alone, the network's calls, the whole inference."""
        from trial_code.measure import time_kernel
        from trial_code.networks import graph as network_graph

        key = (run.tuner, run.seed)
        if key not in self.programs:
            kernels = network_graph.kernels(self.network, run.params, self.target)
            self.programs[key] = network_graph.Program(self.network, kernels, self.target).load(self.limits.seed)
        program = self.programs[key]
        alone = {}
        for layer in self.layers:
            built, args, device = self._kernel(layer, run.params.get(layer.name))
            alone[layer.name] = time_kernel(built, args, device, self.limits.repeat,
                                            self.limits.min_repeat_ms).latency_s * 1e3
        passes = [program.time_calls() for _ in range(self.limits.repeat)]
        calls = {name: float(np.median([p.get(name, 0.0) for p in passes])) for name in {*passes[0], *alone}}
        whole = float(np.median(program.time(self.limits)))
        rows = [{"layer": x.name, "count": x.count, "recorded_ms": run.recorded_ms.get(x.name, ""),
                 "alone_ms": alone[x.name], "in_network_ms": calls.get(x.name, 0.0) / x.count} for x in self.layers]
        rows.append({"layer": network_graph.OTHER, "count": 1, "in_network_ms": calls.get(network_graph.OTHER, 0.0)})
        rows.append({"layer": WHOLE, "count": 1, "in_network_ms": whole})
        return rows


def profile(out: Path, network: str, target: Target, rounds: int, limits: Limits) -> None:
    """Time every finished run of ``network`` in ``out/trials.csv`` for ``rounds`` rounds
    (those not yet in ``profile.csv``), then write ``profile.md``."""
    from trial_code.device_lock import exclusive

    runs, _ = finished_runs(read_rows(out / "trials.csv"), network, target.kind)
    if not runs:
        raise SystemExit(f"{out / 'trials.csv'} has no finished run of {network} on {target.kind} by our tuners")
    defaults = recorded_defaults(out, network, target.kind)
    if defaults:  # the control: no search picked these kernels (see the module docstring)
        runs.append(Run(DEFAULT, "", {}, {name: ms for name, ms in defaults.items() if ms}))
    done = done_rounds(out)
    session = Session(network, target, limits)
    for round_ in range(rounds):
        order = runs[round_ % len(runs):] + runs[:round_ % len(runs)]  # each run first in some round
        for run in order:
            if (network, target.kind, run.tuner, run.seed, round_) in done:
                continue
            print(f"round {round_}: {run.tuner} seed {run.seed}", flush=True)
            with exclusive(target.device, limits.lock_wait):
                rows = session.time_round(run)
            append_rows(out / FILE, COLUMNS, [
                {"network": network, "target": target.kind, "tuner": run.tuner, "seed": run.seed, "round": round_,
                 **{k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()}} for row in rows])
    write_table(out, network, target.kind)


def medians(rows: list[dict[str, str]]) -> dict[tuple[str, str], dict[str, dict[str, float]]]:
    """(tuner, seed) -> layer -> column -> median over rounds (ms per call; counts kept)."""
    values: dict[tuple[str, str], dict[str, dict[str, list[float]]]] = defaultdict(lambda: defaultdict(
        lambda: defaultdict(list)))
    for row in rows:
        for column in ("count", "recorded_ms", "alone_ms", "in_network_ms"):
            if row[column]:
                values[(row["tuner"], row["seed"])][row["layer"]][column].append(float(row[column]))
    return {run: {layer: {c: float(np.median(v)) for c, v in columns.items()} for layer, columns in layers.items()}
            for run, layers in values.items()}


def _total(layers: dict[str, dict[str, float]], column: str) -> float:
    """Sum over tunable layers of count x the column (NaN where a layer lacks it)."""
    from trial_code.networks.graph import OTHER

    return sum(m["count"] * m.get(column, np.nan) for name, m in layers.items() if name not in (OTHER, WHOLE))


def _mean_std(values: list[float]) -> str:
    """Mean ± sample std (the mean alone for one value)."""
    if len(values) < 2:
        return f"{values[0]:.2f}"
    return f"{np.mean(values):.2f} ± {np.std(values, ddof=1):.2f}"


def write_table(out: Path, network: str, target: str) -> None:
    from trial_code.networks.graph import OTHER

    rows = [r for r in read_rows(out / FILE) if r["network"] == network and r["target"] == target]
    found = medians(rows)
    rounds = len({r["round"] for r in rows})
    _, skipped = finished_runs(read_rows(out / "trials.csv"), network, target)
    wholes: dict[tuple[str, str], list[float]] = defaultdict(list)
    for row in rows:
        if row["layer"] == WHOLE:
            wholes[(row["tuner"], row["seed"])].append(float(row["in_network_ms"]))
    tuners = sorted({t for t, _ in found})
    lines = [f"# {network} on {target}: where each run's time goes", "",
             f"Every run's final kernels timed again in one session, {rounds} round(s), medians over rounds "
             f"(`python -m nni_opevo_bench.network_profile`; its docstring says how). ms per inference: the sum "
             f"over layers of count x ms as the trials recorded it and as timed alone again; the whole "
             f"network as one program.", "",
             "| tuner | runs | recorded sum | alone sum | whole network | whole / recorded |", "|---|---|---|---|---|---|"]
    for tuner in tuners:
        runs = [layers for (t, _), layers in found.items() if t == tuner]
        cells = [_mean_std([_total(x, "recorded_ms") for x in runs]), _mean_std([_total(x, "alone_ms") for x in runs]),
                 _mean_std([x[WHOLE]["in_network_ms"] for x in runs]),
                 _mean_std([x[WHOLE]["in_network_ms"] / _total(x, "recorded_ms") for x in runs])]
        lines.append(f"| {tuner} | {len(runs)} | " + " | ".join(cells) + " |")
    lines += ["", "Each run: the tunable layers' share of one inference timed call by call, the rest "
              "(Relax's own operators, the VM), and the whole inference's range over rounds.", "",
              "| tuner | seed | recorded sum | alone sum | layers in the network | (other) | whole network "
              "| whole, lowest-highest round | whole / recorded |", "|---|---|---|---|---|---|---|---|---|"]
    for (tuner, seed), layers in sorted(found.items()):
        recorded = _total(layers, "recorded_ms")
        whole = layers[WHOLE]["in_network_ms"]
        lines.append(f"| {tuner} | {seed} | {recorded:.2f} | {_total(layers, 'alone_ms'):.2f} | "
                     f"{_total(layers, 'in_network_ms'):.2f} | {layers[OTHER]['in_network_ms']:.2f} | {whole:.2f} | "
                     f"{min(wholes[(tuner, seed)]):.1f}-{max(wholes[(tuner, seed)]):.1f} | {whole / recorded:.2f} |")
    lines += ["", "Per layer, mean over seeds of count x ms: recorded / alone / in the network.", "",
              "| layer | count | " + " | ".join(tuners) + " |", "|---|---|" + "---|" * len(tuners)]
    names = [x.name for x in networks.lookup(network)]
    for name in names:
        cells = []
        for tuner in tuners:
            seeds = [layers[name] for (t, _), layers in found.items() if t == tuner and name in layers]
            cells.append(" / ".join(f"{np.mean([s['count'] * s.get(c, np.nan) for s in seeds]):.2f}"
                                    for c in ("recorded_ms", "alone_ms", "in_network_ms")))
        count = next(iter(found.values()))[name]["count"]
        lines.append(f"| {name} | {count:g} | " + " | ".join(cells) + " |")
    if skipped:
        lines += ["", f"Not profiled: {', '.join(skipped)} (its kernels lived only in its run's database)."]
    (out / TABLE).write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="nni-opevo profile", description=description(__doc__),
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=epilog(__doc__))
    parser.add_argument("--out", type=Path, required=True, help="a network benchmark's folder (its trials.csv)")
    parser.add_argument("--network", default="resnet18", help="a named network with a graph: alexnet, resnet18")
    parser.add_argument("--target", default="cpu", help="cpu or cuda (auto: CUDA when a GPU is visible)")
    add_number(parser, "--rounds", int, 1, 100, "times every run is timed", default=3)
    add_number(parser, "--repeat", int, 1, MAX_REPEAT, "repeats per timing (median)", default=Limits.repeat)
    add_number(parser, "--min-repeat-ms", int, 0, MAX_REPEAT_MS, "each repeat lasts at least this long",
               default=Limits.min_repeat_ms)
    args = parser.parse_args(argv)
    from trial_code.networks import graph as network_graph

    if not network_graph.has_graph(args.network):
        raise SystemExit(f"--network {args.network}: only {', '.join(network_graph.GRAPHS)} are built whole")
    limits = Limits(repeat=args.repeat, min_repeat_ms=args.min_repeat_ms)
    profile(args.out, args.network, targets.resolve(args.target), args.rounds, limits)
    print(args.out / TABLE)


if __name__ == "__main__":
    main()
