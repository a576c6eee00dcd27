"""What a benchmark trial measures: live kernels, a replay of recorded measurements, a
brute-forced tuning cache, or a synthetic landscape. Each objective has a search space and
turns trial parameters into the report a trial would send (``default`` TFLOPS, ``status``) plus
``seconds``, the time the trial took (measured for live kernels, recorded for replays and
caches, modelled for synthetic ones), which the simulated clock uses for wall-clock
comparisons. An objective may also carry a constraint (the classArgs every tuner gets) and
the optimum its scores are read against.
"""
from __future__ import annotations

import json
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from nni_opevo.testing.landscapes import tiled_matmul
from trial_code import constraint, networks
from trial_code.evaluate import Limits, evaluate
from trial_code.targets import Target
from trial_code.templates import for_workload
from trial_code.workloads import lookup, named_or_operator

from . import tuning_cache
from .table import read_rows

UNRECORDED = "UNRECORDED"
"""Status of a replayed configuration that no recorded run measured (reported as a failure)."""
SYNTHETIC = {"SYN1": dict(seed=1), "SYN2": dict(seed=2), "SYN3": dict(seed=3)}
"""Synthetic tiled-MatMul landscapes (1024^3, optimum placed by the seed)."""


def config_key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True)


class Objective(ABC):
    kind: str  # synthetic | live | recorded | cache | network
    live = False  # measured in real time (the runner runs trials in parallel threads)
    constraint: dict[str, Any] = {}
    """classArgs (``constraint``, ``constraint_args``) that tell a tuner which configurations may be measured."""
    layers: list[networks.Layer] = []
    """A network's layers (``Network``): its tuner is the network tuner over them."""
    optimum: float | None = None
    """The best score there is, where it is known (a brute-forced cache)."""

    def __init__(self, workload: str, target: str, space: dict[str, Any]) -> None:
        self.workload, self.target, self.space = workload, target, space

    def recorded(self, row: dict[str, str]) -> Any:
        """The result a tuner resumed from the CSV gets back for ``row`` (``import_data``)."""
        return float(row["tflops"])

    @abstractmethod
    def __call__(self, params: dict[str, Any]) -> dict[str, Any]:
        """The trial's report with ``seconds``."""


class Synthetic(Objective):
    kind = "synthetic"
    VALID_S, INVALID_S = 1.0, 0.05  # a build-and-measure vs a static rejection

    def __init__(self, workload: str) -> None:
        if workload not in SYNTHETIC:
            raise ValueError(f"unknown synthetic workload {workload!r}; known: {', '.join(SYNTHETIC)}")
        space, self._f = tiled_matmul(**SYNTHETIC[workload])
        super().__init__(workload, "synthetic", space)

    def __call__(self, params: dict[str, Any]) -> dict[str, Any]:
        v = self._f(params)
        return {"default": v, "status": "NO_ERROR" if v > 0 else "INSTANTIATION_ERROR",
                "seconds": self.VALID_S if v > 0 else self.INVALID_S}


class Live(Objective):
    kind = "live"
    live = True

    def __init__(self, workload: str, target: Target, limits: Limits, build_only: bool = False) -> None:
        """``build_only``: build (and nvcc-compile CUDA) without running: a dry run's trials."""
        self.operator = named_or_operator(workload)
        self.device, self.limits, self.build_only = target, limits, build_only
        super().__init__(workload, target.kind, for_workload(self.operator).space(self.operator, target.kind))
        # What every generated experiment gives its tuner (``trial_code.constraint``).
        self.constraint = constraint.class_args(self.operator, target.kind)

    def __call__(self, params: dict[str, Any]) -> dict[str, Any]:
        result = evaluate(self.operator, params, self.device, self.limits, build_only=self.build_only)
        return {**result.report(), "seconds": result.total_s}


class Network(Objective):
    """Every layer of a network (``trial_code.networks``) as one live objective: a trial's
    parameters name the layer (``{"layer": {"_name": ..., ...}}``, the network tuner's space) and it
    is measured as that layer's workload. ``defaults()`` measures each layer at TVM's default
    schedule once, what the network's latency counts for a layer no trial has tuned yet."""

    kind = "network"
    live = True

    def __init__(self, network: str, target: Target, limits: Limits) -> None:
        self.layers = networks.lookup(network)
        self.device, self.limits = target, limits
        self.constraint = {"constraint": "trial_code.constraint:feasible",
                           "constraint_args": {"network": network, "target": target.kind}}
        super().__init__(network, target.kind, networks.space(network, target.kind))

    def __call__(self, params: dict[str, Any]) -> dict[str, Any]:
        name, inner = networks.split(params)
        result = evaluate(networks.layer(self.workload, name).workload, inner, self.device, self.limits)
        return {**result.report(), "seconds": result.total_s}

    def recorded(self, row: dict[str, str]) -> Any:
        """With the latency the allocator weighs layers by, from the layer's FLOPs."""
        tflops = float(row["tflops"])
        name, _ = networks.split(json.loads(row["configuration"]))
        workload = networks.layer(self.workload, name).workload
        latency = for_workload(workload).flops(workload) / tflops / 1e9 if tflops > 0 else None
        return {"default": tflops, "latency_ms": latency}

    def defaults(self) -> dict[str, float | None]:
        """layer -> latency (ms) at TVM's default schedule, None where it cannot run here."""
        out = {}
        for layer in self.layers:
            result = evaluate(layer.workload, None, self.device, self.limits)
            out[layer.name] = result.latency_ms if result.status.name == "NO_ERROR" else None
        return out


class Recorded(Objective):
    """Replays the trials of earlier benchmark CSVs for one workload and target: every tuner is
    compared on identical measurements. A configuration no run measured is reported as a
    failure with status UNRECORDED; the report counts them, so read a replay's ranking with
    its coverage."""

    kind = "recorded"

    def __init__(self, workload: str, target: str, tables: list[Path]) -> None:
        self._rows: dict[str, dict[str, Any]] = {}
        for table in tables:
            for row in read_rows(table):
                if row["workload"] == workload and row["target"] == target and row["status"] != UNRECORDED:
                    self._rows.setdefault(row["configuration"], row)  # the first measurement of a configuration
        if not self._rows:
            raise ValueError(f"no recorded trials of {workload} on {target} in {', '.join(map(str, tables))}")
        space = for_workload(lookup(workload)).space(lookup(workload), target) if target != "synthetic" \
            else Synthetic(workload).space
        super().__init__(workload, target, space)

    def __len__(self) -> int:
        return len(self._rows)

    def __call__(self, params: dict[str, Any]) -> dict[str, Any]:
        row = self._rows.get(config_key(params))
        if row is None:
            return {"default": 0.0, "status": UNRECORDED, "seconds": 0.0}
        return {"default": float(row["tflops"]), "status": row["status"], "seconds": float(row["seconds"])}


class Cache(Objective):
    """A Kernel Tuner cache (``tuning_cache``): the score of a configuration is a look-up, and the
    trial's seconds are what compiling, verifying and timing it cost on the real GPU. The score
    goes to the report's TFLOPS column as GFLOP/s / 1000 (or 1/time where the cache has no
    GFLOP/s); results read as a fraction of ``optimum``. ``constrained``: every tuner is given the
    kernel's restrictions as its constraint and never measures a restricted configuration;
    without it (a user with no static check) a restricted configuration is a failed trial
    (status ``RESTRICTED``) that costs an evaluation and ``restricted_seconds``."""

    kind = "cache"

    def __init__(self, path: str, constrained: bool = True) -> None:
        self.cache = tuning_cache.load(path)
        self.constrained = constrained
        self.constraint = {"constraint": "nni_opevo_bench.tuning_cache:feasible",
                           "constraint_args": {"cache": path}} if constrained else {}
        self.optimum = self.cache.optimum / 1e3
        super().__init__(self.cache.name, f"{self.cache.kernel} on {self.cache.device or 'an unnamed GPU'}",
                         self.cache.space)

    def __call__(self, params: dict[str, Any]) -> dict[str, Any]:
        entry = self.cache.entries.get(self.cache.key(params))
        if entry is None:  # constrained, the constraint keeps tuners from this; a tuner that ignores it pays a trial
            return {"default": 0.0, "status": "RESTRICTED", "seconds": self.cache.restricted_seconds}
        if entry.score is None:
            return {"default": 0.0, "status": entry.status, "seconds": entry.seconds}
        return {"default": entry.score / 1e3, "status": "NO_ERROR", "seconds": entry.seconds}
