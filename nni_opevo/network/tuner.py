"""A whole network's layers in one NNI experiment: one inner tuner per layer, and an allocator
that decides which layer each trial goes to.

Why one experiment for all rather than one per layer: the budget is shared, and deciding where
the next trial goes needs every layer's progress at once, which only a tuner that sees every
result has; NNI runs one tuner per experiment, so separate experiments could only be steered
from outside, stopping and resuming them (seconds of NNI start-up each time). One experiment
also gives one web UI, one trial table and one ``maxTrialNumber`` for the network, and lets
layers of one template learn from each other (``transfer``): with ~10 trials a layer, a layer
tuned alone is still in its random start when its budget ends, while its kin have already
measured where this template's kernels run well.

The search space is one top-level nested ``choice`` whose options are the layers, each option
``{"_name": <layer>, ...that layer's parameters...}``; a trial receives
``{<key>: {"_name": <layer>, ...}}`` and tunes that layer. Each layer gets its own tuner (any
tuner of this package, ``tuner`` and ``tuner_args``) over its own sub-space, with the
network's constraint called with ``layer=<name>`` added to ``constraint_args``; the allocator
(``allocation``: Ansor's gradient scheduler or round-robin) picks the layer, weighing each by
``weights`` (how many times the network runs it, default 1). What the allocator minimizes is
the network's latency, sum over layers of weight x best latency: a result's ``latency_ms`` when
it reports one, else its value (``optimize_mode: minimize``) or 1 / its value (maximize).

A layer whose tuner has nothing left to propose is skipped; when every layer is done the
tuner raises NoMoreTrialError and NNI ends the experiment. ``import_data`` (``nnictl resume``)
gives each layer's tuner its own results, and the network keeps the one proposal journal, so a
resume repeats no trial.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from nni import NoMoreTrialError
from nni.tuner import Tuner

from .. import fatal, registry
from ..base import PopulationTuner, parse_records
from ..class_args import SearchArgs, arg, document, fail, flag, mapping, one_of, seed_or_drawn
from ..fitness import objective
from ..journal import Journal
from ..space.parameters import SpaceError
from . import allocation

_logger = logging.getLogger(__name__)

LAYER_TUNER = "OpEvo"
"""The registry's tuner of every layer unless the ``tuner`` classArg names another."""


def inner_tuner(name: str, value: Any) -> str:
    if value not in registry.layer_tuners():
        raise fail(name, f"must name a tuner of this package ({', '.join(sorted(registry.layer_tuners()))})", value)
    return str(value)


def positive_weights(name: str, value: Any) -> dict[str, float]:
    weights = mapping(name, value)
    for layer, weight in weights.items():
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight <= 0:
            raise fail(name, f"must give each layer a positive number (layer {layer!r})", value)
    return {layer: float(weight) for layer, weight in weights.items()}


def _tuner_class(name: str) -> type[PopulationTuner]:
    """The layers' tuner class, by the class name the ``tuner`` classArg gives."""
    return registry.layer_tuners()[name].load()


@dataclass(frozen=True)
class NetworkArgs(SearchArgs):
    tuner: str = arg(registry.get(LAYER_TUNER).class_name, inner_tuner, "the tuner of every layer, by class name")
    tuner_args: dict = arg({}, mapping, "its classArgs (every layer's tuner gets the same; seeds differ by layer)")
    allocator: str = arg("gradient", one_of(*allocation.ALLOCATORS),
                         "'gradient' (Ansor's task scheduler) or 'round-robin': which layer gets the next trial")
    weights: dict = arg({}, positive_weights, "layer -> how many times the network runs it (default 1 each)")
    transfer: bool = arg(True, flag, "layers whose parameters mean the same (one template) learn from each other's "
                                     "measurements, where the tuner has a model to pool them (OpEvo)")

    def check(self) -> None:
        own = {"constraint", "constraint_args", "optimize_mode", "seed"} & set(self.tuner_args)
        if own:
            raise fail("tuner_args", f"must not set {sorted(own)[0]!r}: the network's own classArg is passed on",
                       self.tuner_args)
        _tuner_class(self.tuner).Args.parse(self.tuner_args)



class NetworkTuner(Tuner):
    """Tunes every layer of a network under one budget (see the module docstring)."""

    Args = NetworkArgs

    def __init__(self, **class_args: Any) -> None:
        self.args = fatal.parse_or_defer(self, lambda: NetworkArgs.parse(class_args), lambda: NetworkArgs.parse({}))
        self.seed = seed_or_drawn(self.args.seed)
        self.key: str | None = None  # the top-level parameter whose options are the layers
        self.layers: dict[str, PopulationTuner] = {}
        self.allocator: allocation.Allocator | None = None
        self.layer_of: dict[int, str] = {}  # NNI parameter id -> layer
        self.reported: set[int] = set()  # parameter ids with a result (a trial may end without one)
        self.journal = Journal(self.get_checkpoint_path())
        self._resumed: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ space

    @fatal.guard
    def update_search_space(self, search_space: dict[str, Any]) -> None:
        key, options = _layers_of(search_space)
        unknown = sorted(set(self.args.weights) - set(options))
        if unknown:
            raise ValueError(f"classArg 'weights' names layer {unknown[0]!r}, which the search space does not have "
                             f"(its layers: {', '.join(options)})")
        if self.key is not None and (key, list(options)) != (self.key, list(self.layers)):
            raise ValueError("a network's search space cannot change its layers while it runs")
        self.key = key
        cls = _tuner_class(self.args.tuner)
        for index, (name, space) in enumerate(options.items()):
            if name not in self.layers:
                self.layers[name] = cls(**self.args.tuner_args, optimize_mode=self.args.optimize_mode,
                                        seed=self.seed + index, constraint=self.args.constraint,
                                        constraint_args={**self.args.constraint_args, "layer": name}
                                        if self.args.constraint else {})
                self.layers[name].embed()  # the network journals whole proposals (below)
            self.layers[name].update_search_space(space)
        if self.args.transfer:
            self._introduce_kin()
        if self.allocator is None:
            weights = {name: self.args.weights.get(name, 1.0) for name in options}
            self.allocator = allocation.make(self.args.allocator, weights, np.random.default_rng(self.seed))
        if self._resumed:
            self._replay_journal()

    def _introduce_kin(self) -> None:
        """Tell each layer's tuner which other layers' measurements mean the same to it
        (``transfer``: ``PopulationTuner.kinship`` and ``learn_from``)."""
        families: dict[Any, list[str]] = {}
        for name, tuner in self.layers.items():
            kinship = tuner.kinship()
            if kinship is not None:
                families.setdefault(kinship, []).append(name)
        for family in families.values():
            for name in family:
                self.layers[name].learn_from([self.layers[k] for k in family if k != name])
        shared = [family for family in families.values() if len(family) > 1]
        if shared:
            _logger.info("network: layers learning from each other: %s", "; ".join(", ".join(f) for f in shared))

    def load_checkpoint(self) -> None:
        self._resumed = self.journal.read()

    def _replay_journal(self) -> None:
        """Hand each layer's tuner its journalled proposals, which it counts as failures until
        their results are imported (``PopulationTuner.resume``)."""
        per_layer: dict[str, list[dict[str, Any]]] = {}
        for params in self._resumed:
            split = self._split(params)
            if split is not None:
                per_layer.setdefault(split[0], []).append(split[1])
        for name, proposals in per_layer.items():
            self.layers[name].resume(proposals)
        self._resumed = []

    # ------------------------------------------------------------------ proposals

    @fatal.guard
    def generate_parameters(self, parameter_id: int, **kwargs: Any) -> dict[str, Any]:
        assert self.allocator is not None and self.key is not None, "update_search_space comes first"
        while True:
            try:
                name = self.allocator.next()
            except ValueError:
                raise NoMoreTrialError("every layer of the network has been tuned through its search space") from None
            try:
                inner = self.layers[name].generate_parameters(parameter_id, **kwargs)
            except NoMoreTrialError:
                _logger.info("network: layer %s has nothing left to propose", name)
                self.allocator.close(name)
                continue
            self.allocator.proposed(name)
            self.layer_of[parameter_id] = name
            params = {self.key: {"_name": name, **inner}}
            self.journal.append(parameter_id, params)
            return params

    # ------------------------------------------------------------------ results

    @fatal.guard
    def receive_trial_result(self, parameter_id: int, parameters: dict[str, Any], value: Any, **kwargs: Any) -> None:
        split = self._split(parameters)
        if split is None or self.allocator is None:
            _logger.warning("network: result of parameter %s names no layer of the network; ignored", parameter_id)
            return
        name, inner = split
        self.layers[name].receive_trial_result(parameter_id, inner, value, **kwargs)
        self.allocator.observe(name, self._latency(value))
        self.reported.add(parameter_id)

    @fatal.guard
    def trial_end(self, parameter_id: int, success: bool, **kwargs: Any) -> None:
        name = self.layer_of.pop(parameter_id, None)
        if name is None:
            return
        self.layers[name].trial_end(parameter_id, success, **kwargs)
        if parameter_id not in self.reported and self.allocator is not None:
            self.allocator.observe(name, None)  # ended without a result: a failure for the allocator too
        self.reported.discard(parameter_id)

    @fatal.guard
    def import_data(self, data: Any) -> None:
        records, skipped = parse_records(data)
        grouped: dict[str, list[dict[str, Any]]] = {}
        for record in records:
            split = self._split(record["parameter"])
            if split is None:
                skipped += 1
                continue
            grouped.setdefault(split[0], []).append({**record, "parameter": split[1]})
            if self.allocator is not None:
                self.allocator.proposed(split[0])
                self.allocator.observe(split[0], self._latency(record.get("value")))
        for name, layer_records in grouped.items():
            self.layers[name].import_data(layer_records)
        if skipped:
            _logger.warning("network: import_data skipped %d records that name no layer of the network", skipped)

    # ------------------------------------------------------------------ helpers

    def _split(self, parameters: Any) -> tuple[str, dict[str, Any]] | None:
        """(layer, its parameters) of a network trial's parameters, or None."""
        chosen = parameters.get(self.key) if isinstance(parameters, dict) else None
        if not isinstance(chosen, dict) or chosen.get("_name") not in self.layers:
            return None
        return chosen["_name"], {k: v for k, v in chosen.items() if k != "_name"}

    def _latency(self, value: Any) -> float | None:
        """The cost the allocator weighs (see the module docstring); None for a failure."""
        if isinstance(value, dict) and isinstance(value.get("latency_ms"), (int, float)) and value["latency_ms"] > 0:
            return float(value["latency_ms"])
        score = objective(value)
        if score is None or score <= 0:
            return None
        return score if self.args.optimize_mode == "minimize" else 1.0 / score


document(NetworkTuner, NetworkArgs)


def _layers_of(space: Any) -> tuple[str, dict[str, dict[str, Any]]]:
    """(the key, {layer: its sub-space}) of a network search space; SpaceError naming the rule."""
    if not isinstance(space, dict) or len(space) != 1:
        raise SpaceError("(top level)", "a network's search space has exactly one top-level parameter, a choice of "
                                        "its layers")
    (key, spec), = space.items()
    options = spec.get("_value") if isinstance(spec, dict) and spec.get("_type") == "choice" else None
    if not isinstance(options, list) or not options or not all(isinstance(o, dict) and "_name" in o for o in options):
        raise SpaceError(str(key), "must be a choice whose options are the layers, each {\"_name\": <layer>, ...}")
    layers: dict[str, dict[str, Any]] = {}
    for option in options:
        name = option["_name"]
        if not isinstance(name, str) or name in layers:
            raise SpaceError(str(key), f"layer names must be distinct strings, got {name!r} twice or not a string")
        layers[name] = {k: v for k, v in option.items() if k != "_name"}
    return key, layers
