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
import re
import types
import typing
from dataclasses import MISSING, asdict, dataclass, fields
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
    (``anchor.Comparison``: each side's rounds, the ratio, and whether the machine was too busy for
    one), or null where there is none (Conv2D on the CPU, a GPU experiment read where no GPU is
    visible)."""
    separation: dict[str, Any] | None = None
    """Whether the winner beat the runner-up beyond noise (``remeasure.separation``), or null."""
    library: str | None = None
    """The file (next to best.json) holding the compiled kernel, which ``load_kernel`` loads."""
    arguments: list[dict[str, Any]] | None = None
    """The DLTensors the library's ``main`` takes, inputs then output (``library.arguments``):
    what a program in another language needs to call it (``examples/cpp/call_kernel.cc``)."""
    instructions: list[str] | None = None
    """The /proc/cpuinfo flags a CPU must report to run the library (``library.instruction_flags``),
    or null where unknown (a GPU's): a program in another language checks them before the call,
    which would stop with an illegal instruction."""
    computation: str | None = None
    """A digest of the workload's TE computation when it was exported (``library.computation``):
    ``load_kernel`` refuses the library where the operator now computes otherwise."""

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
            # An export of an earlier version kept its comparison's rounds as ratios alone: not shown.
            versus = f"; {Comparison.from_json(self.anchor).versus()}" if self.anchor and "kernel_s" in self.anchor else ""
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


FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")
"""What ``source`` and ``library`` may be: a file next to best.json, never a path elsewhere."""


def is_file_name(value: Any) -> bool:
    """Whether ``value`` names a file next to the export's JSON (``FILE_NAME``)."""
    return isinstance(value, str) and FILE_NAME.fullmatch(value) is not None and value not in (".", "..")


def read_export(path: str, schema: str) -> dict[str, Any]:
    """The JSON object of the export file ``path``, written under ``schema``; ValueError naming
    the file where it is damaged or of another schema."""
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not JSON ({e}): a damaged export, export again") from None
    if not isinstance(data, dict) or data.get("schema") != schema:
        raise ValueError(f"{path} is not a {schema} file")
    return data


def read(path: str) -> Best:
    """``best.json`` checked against ``Best``'s fields and their types (fields it does not know are
    ignored, a later version's); every problem one ValueError naming the file and the field."""
    data = read_export(path, SCHEMA)
    hints = typing.get_type_hints(Best)
    found: dict[str, Any] = {}
    for field in fields(Best):
        if field.name not in data:
            if field.default is MISSING:
                raise ValueError(f"{path}: field '{field.name}' is missing")
            continue
        if not _fits(data[field.name], hints[field.name]):
            raise ValueError(f"{path}: field '{field.name}' must be {_shown(hints[field.name])}, got "
                             f"{type(data[field.name]).__name__}")
        found[field.name] = data[field.name]
    for name in ("source", "library"):
        if found.get(name) is not None and not is_file_name(found[name]):
            raise ValueError(f"{path}: field '{name}' must name a file next to best.json, got {found[name]!r}")
    return Best(**found)


def _fits(value: Any, hint: Any) -> bool:
    """Whether a JSON value fits a field's type (``X | None``, ``dict[...]``, ``list[...]``, ``Any``)."""
    if hint is Any:
        return True
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return any(_fits(value, option) for option in typing.get_args(hint))
    if hint is type(None):
        return value is None
    origin = typing.get_origin(hint) or hint
    if origin is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if origin is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, origin)


def _shown(hint: Any) -> str:
    return " or ".join((typing.get_origin(h) or h).__name__ for h in typing.get_args(hint)) \
        if typing.get_args(hint) and (isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union) \
        else (typing.get_origin(hint) or hint).__name__


def load_kernel(folder: str) -> Any:
    """The exported kernel of ``folder`` (where ``export`` wrote best.json and best.so), ready to
    call on NumPy arrays or tensors (``trial_code.library``)."""
    from trial_code import library
    from trial_code.workloads import Workload

    path = os.path.join(os.path.expanduser(folder), "best.json")
    best = read(path)
    if not best.library:
        raise ValueError(f"{path} names no compiled library (exported by an older version)")
    try:
        workload = Workload.from_json(best.workload)
        device, built_for = device_of(best.target)
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{path}: its workload or target cannot be read ({type(e).__name__}: {e})") from None
    if best.computation is not None and best.computation != library.computation(workload):
        raise ValueError(f"{path}: {workload.name} computes otherwise than when its kernel was exported (its TE "
                         f"computation changed): export it again")
    return library.load(os.path.join(os.path.dirname(path), best.library), workload, device, built_for)


def device_of(target: dict[str, Any]) -> tuple[str, str]:
    """The device an export's library runs on ("cpu" or "cuda") and what it was built for (the
    CUDA arch or LLVM's name of the CPU; empty where unknown), from its target as written
    (``Target.to_json``; fields a later version adds are ignored)."""
    device = {"llvm": "cpu", "cuda": "cuda"}[target["kind"]]
    built_for = target.get("arch" if device == "cuda" else "mcpu") or ""
    if not isinstance(built_for, str):
        raise TypeError(f"the target's {'arch' if device == 'cuda' else 'mcpu'} must be a string")
    return device, built_for


def refuse_to_replace(folder: str, name: str, force: bool) -> None:
    """SystemExit when ``folder/name`` holds an earlier export and ``force`` is not given: a second
    export may name another winner (kernels this close swap places by noise), and the first is
    evidence too."""
    path = os.path.join(folder, name)
    if os.path.exists(path) and not force:
        raise SystemExit(f"{path} holds an earlier export: pass --force to replace it, or --out another folder "
                         "to keep both")
