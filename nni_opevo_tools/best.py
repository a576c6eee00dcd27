"""An experiment's best kernel as ``best.json``: one schema and one writer for the launcher and
the export command, so both name the same winner and say whether it was re-measured.

The winner is the configuration with the highest TFLOPS after re-measurement where this
machine can time kernels of the experiment's target; elsewhere (a CUDA experiment read where
no GPU is visible) it is the best reported configuration that still builds, and
``remeasured`` is null with ``not_remeasured`` saying why.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Any

from trial_code.anchor import Comparison

SCHEMA = "nni-opevo/best/2"


@dataclass(frozen=True)
class Best:
    experiment: str
    """The experiment id."""
    trial_command: str
    workload: dict[str, Any]
    target: dict[str, Any]
    """The target the kernel was built for (``Target.to_json``, the CPU model included)."""
    parameter_id: int
    parameters: dict[str, Any]
    reported: Any
    """What the configuration's trial reported during the experiment."""
    remeasured: dict[str, Any] | None
    """tflops, latency_ms_median/min/max/stdev and repeats of the re-measurement, or null."""
    not_remeasured: str | None
    """Why there is no re-measurement, or null."""
    source: str | None
    """The file (next to best.json) holding the kernel's generated source."""
    ranking: list[dict[str, Any]]
    """Every configuration considered: parameter id, reported and re-measured TFLOPS, status."""
    anchor: dict[str, Any] | None = None
    """The winner against the vendor library, timed interleaved in the same process
    (``anchor.Comparison``: its rounds' ratios, and whether the machine was too busy for one), or
    null where there is none (Conv2D on the CPU, a GPU experiment read where no GPU is visible)."""
    separation: dict[str, Any] | None = None
    """Whether the winner beat the runner-up beyond noise (``remeasure.separation``), or null."""
    library: str | None = None
    """The file (next to best.json) holding the compiled kernel, which ``load_kernel`` loads."""

    @property
    def tflops(self) -> float:
        """Re-measured TFLOPS where re-measured, else the reported ones."""
        if self.remeasured is not None:
            return float(self.remeasured["tflops"])
        value = self.reported.get("default") if isinstance(self.reported, dict) else self.reported
        return float(value or 0.0)

    def headline(self) -> str:
        """One line for the terminal: the winner's speed and how trustworthy it is."""
        if self.remeasured is not None:
            r = self.remeasured
            versus = f"; {Comparison.from_json(self.anchor).versus()}" if self.anchor else ""
            tie = ""
            if self.separation and not self.separation["separated"]:
                tie = (f"; not faster than parameter {self.separation['runner_up']} beyond noise (Mann-Whitney "
                       f"p={self.separation['p_value']:.2f}): either will do")
            return (f"best: {r['tflops']:.4f} TFLOPS ({r['tflops'] * 1e3:.1f} GFLOPS), {r['latency_ms_median']:.4f} ms, "
                    f"re-measured over {r['repeats']} repeats (parameter {self.parameter_id}){tie}{versus}")
        return f"best: {self.tflops:.4f} TFLOPS as reported, not re-measured ({self.not_remeasured}) " \
               f"(parameter {self.parameter_id})"

    def write(self, folder: str) -> str:
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, "best.json")
        with open(path, "w") as handle:
            json.dump({"schema": SCHEMA, **asdict(self)}, handle, indent=2)
            handle.write("\n")
        return path


def read(path: str) -> Best:
    with open(path) as handle:
        data = json.load(handle)
    if data.pop("schema", None) != SCHEMA:
        raise ValueError(f"{path} is not a {SCHEMA} file")
    return Best(**data)


def load_kernel(folder: str) -> Any:
    """The exported kernel of ``folder`` (where ``export`` wrote best.json and best.so), ready to
    call on NumPy arrays (``trial_code.library``)."""
    from trial_code import library
    from trial_code.workloads import Workload

    best = read(os.path.join(folder, "best.json"))
    if not best.library:
        raise ValueError(f"{folder}/best.json names no compiled library (exported by an older version)")
    return library.load(os.path.join(folder, best.library), Workload.from_json(best.workload), best.target["kind"]
                        .replace("llvm", "cpu"))


def refuse_to_replace(folder: str, name: str, force: bool) -> None:
    """SystemExit when ``folder/name`` holds an earlier export and ``force`` is not given: a second
    export may name another winner (kernels this close swap places by noise), and the first is
    evidence too."""
    path = os.path.join(folder, name)
    if os.path.exists(path) and not force:
        raise SystemExit(f"{path} holds an earlier export: pass --force to replace it, or --out another folder "
                         "to keep both")
