"""The catalog: the tuners by short name, as experiments and comparisons run them. Generated
experiment configs (``nni_opevo_tools.make_spaces``, the launcher's ``--tuner``), the comparison
benchmark and the overhead benchmark all read it, so a comparison always runs the tuners users get.

An entry names a tuner of the registry (``registry``) and only the classArgs it sets beyond the
tuner's own defaults;
the full classArgs come from the tuner's declaration (``nni_opevo.class_args``), so a default
lives in one place. A name may carry classArg overrides after a colon, e.g.
``opevo:mutate_rate=0.3,parents_size=4`` (the sensitivity sweeps); values are read as JSON,
else kept as strings. A network's tuner takes the network tuner's own classArgs after an ``@``,
a bare word naming the allocator: ``opevo@round-robin``, ``opevo@gradient,transfer=false``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import registry
from .suggest import unknown

if TYPE_CHECKING:  # importing nni takes seconds; the catalog names tuners for command lines that build none
    from nni.tuner import Tuner

BUILTINS = "ChoiceView"
"""The registry's tuner that carries NNI's built-ins (its ``tuner`` classArg names one)."""


@dataclass(frozen=True)
class Entry:
    description: str
    tuner: str  # the registry's name
    class_args: dict[str, Any] = field(default_factory=dict)  # beyond the class's defaults
    compared: bool = False  # one of the paper's comparison (the benchmark's default tuners)

    @property
    def class_name(self) -> str:
        return registry.get(self.tuner).class_name

    @property
    def tuner_class(self) -> type:
        return registry.get(self.tuner).load()

    @property
    def builtin(self) -> str | None:
        """The NNI built-in behind a ChoiceView entry."""
        return self.class_args.get("tuner") if self.tuner == BUILTINS else None


CATALOG: dict[str, Entry] = {
    "opevo": Entry("OpEvo", "OpEvo", compared=True),
    "opevo-paper": Entry("OpEvo as published", "OpEvo", {"variant": "paper"}),
    "gbfs": Entry("G-BFS", "GBFS", compared=True),
    "na2c": Entry("N-A2C", "NA2C", compared=True),
    "autotvm": Entry("AutoTVM XGBoost+SA", "AutoTVM", compared=True),
    "nose": Entry("NoSE", "NoSE", compared=True),
    "tpe": Entry("NNI TPE", BUILTINS, {"tuner": "TPE"}, compared=True),
    "random": Entry("NNI Random", BUILTINS, {"tuner": "Random"}),
    "evolution": Entry("NNI Evolution", BUILTINS, {"tuner": "Evolution"}),
}
COMPARED = [name for name, entry in CATALOG.items() if entry.compared]
"""The paper's comparison: OpEvo against G-BFS, N-A2C, AutoTVM, NoSE and NNI's TPE."""
BUILTIN_MODE = {"TPE": True, "Random": False, "Evolution": True}
"""Whether the NNI built-in behind a ChoiceView entry takes optimize_mode (all take a seed but Evolution)."""


def parse(spec: str) -> tuple[str, dict[str, Any]]:
    """``name[:key=value,...]`` -> (catalog name, overrides); ValueError for an unknown name."""
    name, _, rest = spec.partition(":")
    if name not in CATALOG:
        raise ValueError(unknown("tuner", name, CATALOG))
    return name, _overrides(spec, rest)


def _overrides(spec: str, rest: str, bare: str | None = None) -> dict[str, Any]:
    """``key=value,...`` -> {key: value} (values read as JSON, else kept as strings); an item
    without ``=`` sets classArg ``bare`` where one is given, else it is an error naming ``spec``."""
    overrides: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, eq, raw = item.partition("=")
        if not eq:
            if bare is None:
                raise ValueError(f"tuner {spec!r}: override {item!r} is not key=value")
            key, raw = bare, item
        try:
            overrides[key] = json.loads(raw)
        except json.JSONDecodeError:
            overrides[key] = raw
    return overrides


def class_args(spec: str, optimize_mode: str = "maximize", seed: int | None = None,
               extra: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """(class name, every classArg with its value) for an NNI experiment config or for building
    the tuner; ``extra`` adds classArgs of the experiment's own (a constraint); ValueError naming
    a bad override."""
    name, overrides = parse(spec)
    entry = CATALOG[name]
    given = {**entry.class_args, **(extra or {}), **overrides}
    if entry.builtin is None:
        given = {**given, "optimize_mode": optimize_mode, **({"seed": seed} if seed is not None else {})}
        values = entry.tuner_class.Args.parse(given).values()
        if values.get("seed") is None:
            values.pop("seed", None)  # NNI's YAML then reads as "draw one"
        return entry.class_name, values
    builtin = given.get("tuner", entry.builtin)
    inner = {**({"optimize_mode": optimize_mode} if BUILTIN_MODE.get(builtin, True) else {}),
             **({"seed": seed} if seed is not None and builtin != "Evolution" else {}), **given.get("tuner_args", {})}
    return entry.class_name, entry.tuner_class.Args.parse({**given, "tuner_args": inner}).values()


def default(spec: str, key: str) -> Any:
    """The value of classArg ``key`` that ``spec`` runs with."""
    return class_args(spec)[1].get(key)


def build(spec: str, seed: int | None = None, optimize_mode: str = "maximize",
          extra: dict[str, Any] | None = None) -> Tuner:
    """A new tuner for ``spec`` (see the module docstring)."""
    _, kwargs = class_args(spec, optimize_mode, seed, extra)
    return CATALOG[parse(spec)[0]].tuner_class(**kwargs)


# --------------------------------------------------------------------------- networks

NETWORK = "Network"
"""The registry's tuner of a whole network."""
ALLOCATOR_MARK = "@"
SHARED_ARGS = ("optimize_mode", "seed", "constraint", "constraint_args")
"""classArgs the network tuner passes on to every layer's tuner itself."""


def network_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``opevo@round-robin,transfer=false`` -> (the layers' catalog tuner, the network tuner's own
    classArgs: a bare word names the allocator)."""
    tuner, _, rest = spec.partition(ALLOCATOR_MARK)
    return tuner, _overrides(spec, rest, bare="allocator")


def network_class_args(spec: str, weights: dict[str, float], seed: int | None = None,
                       extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every classArg of the network tuner running catalog tuner ``spec`` (with ``@allocator``) on
    each layer; ValueError naming a bad one (a built-in behind ChoiceView cannot be a layer's)."""
    tuner, network_args = network_spec(spec)
    class_name, values = class_args(tuner)
    if CATALOG[parse(tuner)[0]].builtin is not None:
        raise ValueError(f"{tuner}: a network's layers are tuned by tuners of this package, not NNI's built-ins")
    inner = {k: v for k, v in values.items() if k not in SHARED_ARGS}
    given = {"tuner": class_name, "tuner_args": inner, "weights": weights, **network_args, **(extra or {}),
             **({"seed": seed} if seed is not None else {})}
    values = registry.get(NETWORK).load().Args.parse(given).values()
    if values.get("seed") is None:
        values.pop("seed", None)  # NNI's YAML then reads as "draw one"
    return values


def network_class_name() -> str:
    """The network tuner's class name, as an experiment config's ``className`` ends."""
    return registry.get(NETWORK).class_name


def build_network(spec: str, weights: dict[str, float], seed: int | None = None,
                  extra: dict[str, Any] | None = None) -> Tuner:
    return registry.get(NETWORK).load()(**network_class_args(spec, weights, seed, extra))
