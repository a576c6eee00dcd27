"""The package's tuners, declared once.

Each entry names a tuner as NNI knows it (``tuner: {name: OpEvo}`` once registered), the class
that implements it and what it needs beyond the package's own dependencies. Everything else is
derived from this list: the package's exports (``nni_opevo.OpEvoTuner`` and its
``OpEvoClassArgsValidator``), ``registration.yml`` (``register``), the tuners a network's layers
may use (``network``), the catalog's presets (``catalog``) and, through it, the benchmark, the
overhead tool and the command line. A class is named by its import path and loaded on first use,
so this module imports no tuner and every tuner may import it.
"""
from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .class_args import Validator


@dataclass(frozen=True)
class Registered:
    """One tuner of the package."""

    name: str
    """NNI's name for it (``builtinName`` in ``registration.yml``)."""
    target: str
    """``module:Class`` of its implementation."""
    summary: str
    """What it is, in a line."""
    extra: str | None = None
    """The pip extra it needs beyond the package's dependencies (``pip install 'nni-opevo[extra]'``)."""
    layer: bool = True
    """Whether a network's layers may be tuned by it (``NetworkTuner``'s ``tuner`` classArg)."""
    contract: str = "population"
    """Which guarantees of the shared contract it gives (``testing.contract``): ``population``,
    ``view`` (NNI's built-ins, which may repeat themselves) or ``network``."""
    quick: dict[str, Any] = field(default_factory=dict)
    """classArgs that keep a short run short: the contract suite's."""

    @property
    def class_name(self) -> str:
        return self.target.partition(":")[2]

    @property
    def validator_name(self) -> str:
        return f"{self.name}ClassArgsValidator"

    def load(self) -> type:
        """The tuner class (its module is imported on first use)."""
        module, _, name = self.target.partition(":")
        return getattr(importlib.import_module(module), name)

    def validator(self) -> type[Validator]:
        """NNI's classArgs validator of the tuner: the parse of its declaration. Imported here, as
        the tuner is: its base class is NNI's, and importing ``nni`` takes seconds that a command
        line which never builds a tuner (``nni-opevo --help``) should not wait for."""
        from .class_args import validator_for

        return validator_for(self.load().Args, self.validator_name)


TUNERS: tuple[Registered, ...] = (
    Registered("OpEvo", "nni_opevo.opevo.tuner:OpEvoTuner",
               "OpEvo (Gao et al. 2021), screened by a surrogate or as published",
               quick={"parents_size": 4, "offspring_size": 4}),
    Registered("GBFS", "nni_opevo.peers.gbfs:GBFSTuner",
               "G-BFS, greedy best-first search over the topology (Zhang et al. 2019)"),
    Registered("NA2C", "nni_opevo.peers.na2c:NA2CTuner", "N-A2C, an advantage actor-critic walking the topology"),
    Registered("AutoTVM", "nni_opevo.peers.autotvm:AutoTVMTuner", "AutoTVM's XGBoost cost model and simulated annealing",
               extra="xgboost", quick={"plan_size": 16, "sa_chains": 32, "sa_steps": 60}),
    Registered("NoSE", "nni_opevo.peers.nose:NoSETuner", "NoSE, evolution screened by a k-NN surrogate (Gatopoulos et al.)",
               quick={"population_size": 16}),
    Registered("ChoiceView", "nni_opevo.peers.choice_view:ChoiceViewTuner",
               "NNI's built-in tuners (TPE, Random, ...) on spaces with factor, perm and discrete", layer=False,
               contract="view", quick={"tuner": "TPE", "tuner_args": {"optimize_mode": "maximize"}}),
    Registered("Network", "nni_opevo.network.tuner:NetworkTuner",
               "every layer of a network in one experiment, one tuner per layer", layer=False, contract="network",
               quick={"tuner_args": {"parents_size": 4, "offspring_size": 4}}),
)
BY_NAME = {t.name: t for t in TUNERS}


def get(name: str) -> Registered:
    """The tuner NNI knows as ``name``; KeyError naming the known ones."""
    if name not in BY_NAME:
        raise KeyError(f"no tuner {name!r} in nni_opevo; known: {', '.join(BY_NAME)}")
    return BY_NAME[name]


def layer_tuners() -> dict[str, Registered]:
    """The tuners a network's layers may use, by class name (the ``tuner`` classArg's values)."""
    return {t.class_name: t for t in TUNERS if t.layer}


@functools.cache
def exports() -> dict[str, Registered]:
    """The package's exported names (each tuner class and its validator) -> their tuner."""
    return {**{t.class_name: t for t in TUNERS}, **{t.validator_name: t for t in TUNERS}}


def export(name: str) -> type:
    """The class exported as ``nni_opevo.<name>``; AttributeError when there is none."""
    tuner = exports().get(name)
    if tuner is None:
        raise AttributeError(f"module 'nni_opevo' has no attribute {name!r}")
    return tuner.load() if name == tuner.class_name else tuner.validator()


def registration_yaml() -> str:
    """``registration.yml``: what ``nnictl algo register --meta`` reads."""
    lines = ["# Generated from nni_opevo/registry.py (a test keeps it current). Register with:",
             "#   python -m nni_opevo.register   (= nnictl algo register --meta <this file>)",
             "# then use e.g. `tuner: {name: OpEvo, classArgs: {...}}`; `nnictl algo list` shows them.",
             "algorithms:"]
    for t in TUNERS:
        lines += ["  - algoType: tuner", f"    builtinName: {t.name}", f"    className: nni_opevo.{t.class_name}",
                  f"    classArgsValidator: nni_opevo.{t.validator_name}"]
    return "\n".join(lines) + "\n"
