"""The package's tuners by short name, with their papers' settings: one list that experiment
configs (``trial_code.make_spaces``), the comparison benchmark and the overhead benchmark
all read, so a comparison always runs the tuners users get.

A name may carry classArg overrides after a colon, e.g. ``opevo:mutate_rate=0.3,parents_size=4``
(the sensitivity sweeps); values are read as JSON, else kept as strings.
"""
from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field
from typing import Any

from nni.tuner import Tuner


@dataclass(frozen=True)
class Entry:
    description: str
    class_name: str  # in nni_opevo
    class_args: dict[str, Any] = field(default_factory=dict)
    takes_mode: bool = True  # whether optimize_mode and seed are its own classArgs


CATALOG: dict[str, Entry] = {
    "opevo": Entry("OpEvo", "OpEvoTuner", {"parents_size": 8, "offspring_size": 8, "mutate_rate": 0.5}),
    "opevo-prescreen": Entry("OpEvo with k-NN pre-screening", "OpEvoTuner",
                             {"parents_size": 8, "offspring_size": 8, "mutate_rate": 0.5, "prescreen": 5}),
    "gbfs": Entry("G-BFS", "GBFSTuner", {"num_samples": 5}),
    "na2c": Entry("N-A2C", "NA2CTuner", {"max_steps": 3}),
    "autotvm": Entry("AutoTVM XGBoost+SA", "AutoTVMTuner", {"plan_size": 64}),
    "nose": Entry("NoSE", "NoSETuner", {"population_size": 100}),
    "tpe": Entry("NNI TPE", "ChoiceViewTuner", {"tuner": "TPE"}, takes_mode=False),
    "random": Entry("NNI Random", "ChoiceViewTuner", {"tuner": "Random"}, takes_mode=False),
    "evolution": Entry("NNI Evolution", "ChoiceViewTuner", {"tuner": "Evolution"}, takes_mode=False),
}
BUILTIN_MODE = {"TPE": True, "Random": False, "Evolution": True}
"""Whether the NNI built-in behind a ChoiceView entry takes optimize_mode (all take a seed but Evolution)."""


def parse(spec: str) -> tuple[str, dict[str, Any]]:
    """``name[:key=value,...]`` -> (catalog name, overrides); ValueError for an unknown name."""
    name, _, rest = spec.partition(":")
    if name not in CATALOG:
        raise ValueError(f"unknown tuner {name!r}; known: {', '.join(CATALOG)}")
    overrides: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, eq, raw = item.partition("=")
        if not eq:
            raise ValueError(f"tuner {spec!r}: override {item!r} is not key=value")
        try:
            overrides[key] = json.loads(raw)
        except json.JSONDecodeError:
            overrides[key] = raw
    return name, overrides


def class_args(spec: str, optimize_mode: str = "maximize", seed: int | None = None) -> tuple[str, dict[str, Any]]:
    """(class name, classArgs) for an NNI experiment config or for building the tuner."""
    name, overrides = parse(spec)
    entry = CATALOG[name]
    args = {**entry.class_args, **overrides}
    mode = {"optimize_mode": optimize_mode, **({"seed": seed} if seed is not None else {})}
    if entry.takes_mode:
        return entry.class_name, {"optimize_mode": optimize_mode, **args, **mode}
    builtin = args["tuner"]
    inner = {**({"optimize_mode": optimize_mode} if BUILTIN_MODE.get(builtin, True) else {}),
             **({"seed": seed} if seed is not None and builtin != "Evolution" else {}), **args.get("tuner_args", {})}
    return entry.class_name, {**args, "tuner_args": inner}


def build(spec: str, seed: int | None = None, optimize_mode: str = "maximize") -> Tuner:
    """A new tuner for ``spec`` (see the module docstring)."""
    class_name, kwargs = class_args(spec, optimize_mode, seed)
    return getattr(importlib.import_module("nni_opevo"), class_name)(**kwargs)
