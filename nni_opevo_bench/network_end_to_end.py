"""Each finished network run's kernels built into the whole network and timed as one program
(``trial_code.networks.graph``), beside the sum over layers that the curves show.

Measured once per run when it ends (for our tuners from the best configuration of each layer in
the CSV, so a run finished before can be measured later; for MetaSchedule from its database,
which lives only as long as its run) and once per network with TVM's default schedule in every
layer. Kept in ``end_to_end.csv``; a failure is a row too, with its error, so the report says
what could not be built instead of leaving a hole.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from trial_code import networks
from trial_code.evaluate import Limits
from trial_code.targets import Target

from .table import append_rows

FILE = "end_to_end.csv"
COLUMNS = ["network", "target", "tuner", "seed", "end_to_end_ms", "max_error", "build_s", "error"]
DEFAULT = "default"
"""The ``tuner`` of the row measured with TVM's default schedule in every layer."""


def read(out: Path) -> dict[tuple[str, str, str, str], dict[str, str]]:
    """(network, target, tuner, seed) -> its row."""
    path = out / FILE
    if not path.exists():
        return {}
    with open(path, newline="") as handle:
        return {(r["network"], r["target"], r["tuner"], r["seed"]): r for r in csv.DictReader(handle)}


def best_params(rows: list[dict[str, str]]) -> dict[str, dict[str, Any]]:
    """layer -> the configuration of its fastest working trial among a run's CSV rows."""
    best: dict[str, tuple[float, dict[str, Any]]] = {}
    for row in rows:
        tflops = float(row["tflops"] or 0.0)
        name, inner = networks.split(json.loads(row["configuration"]))
        if tflops > 0 and tflops > best.get(name, (0.0, {}))[0]:
            best[name] = (tflops, inner)
    return {name: params for name, (_, params) in best.items()}


def record(out: Path, network: str, target: Target, tuner: str, seed: str, limits: Limits,
           params: dict[str, dict[str, Any]] | None = None, scheduled: dict[str, Any] | None = None) -> None:
    """Build and time ``network`` with each layer's kernel from ``scheduled`` (layer -> PrimFunc)
    or ``params`` (layer -> configuration), else at TVM's default schedule, and append its row
    unless it has one."""
    from trial_code.networks import graph as network_graph

    if not network_graph.has_graph(network) or (network, target.kind, tuner, seed) in read(out):
        return
    row = {"network": network, "target": target.kind, "tuner": tuner, "seed": seed}
    try:
        layer_kernels = network_graph.kernels(network, params or {}, target, scheduled)
        found = network_graph.measure(network, layer_kernels, target, limits)
        row.update(end_to_end_ms=f"{found.latency_ms:.6f}", max_error=f"{found.max_error:.3g}",
                   build_s=f"{found.build_s:.1f}")
    except Exception as e:  # a row says what failed: the report shows it rather than a gap
        row["error"] = network_graph.describe(e)[:500]
    append_rows(out / FILE, COLUMNS, [row])
