"""What every registered tuner must do under the calls NNI's dispatcher makes: one contract suite.

``tests/test_contract.py`` runs each behaviour of ``BEHAVIOURS`` over ``registry.TUNERS``, so a
new tuner gets the whole suite from its one registry line. A tuner takes the contract as its
entry's ``contract`` says:

- ``population``: a tuner of this package's ``PopulationTuner``: no configuration twice, every
  refusal of the constraint learnt as a failure and never proposed again, an exhausted space
  ending with ``NoMoreTrialError``;
- ``view``: NNI's built-ins behind the registry's ``ChoiceView``, which propose what they propose (they may
  repeat themselves); the view keeps them to the space and the constraint, and must never break;
- ``network``: the registry's ``Network`` tuner, given the space as a network of one layer.

Each behaviour is a function of a factory (``make(seed=..., **class_args)``) and the contract
kind, and raises AssertionError when the tuner breaks it. The runs are short and deterministic
(a simulated clock that ignores the tuner's own time).
"""
from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from typing import Any

from nni import NoMoreTrialError

from ..constraint import ConstraintError
from ..space.search_space import SearchSpace
from .dispatch import Run, drive
from .landscapes import tiled_matmul

Factory = Callable[..., Any]
LAYER = "only"
"""The one layer of the network the ``network`` contract wraps a space in."""

run = functools.partial(drive, charge_tuner_time=False)

MIXED = {
    "f": {"_type": "factor", "_value": [64, 3]},
    "p": {"_type": "perm", "_value": 3},
    "c": {"_type": "choice", "_value": [{"_name": "a"}, {"_name": "b", "u": {"_type": "randint", "_value": [0, 4]}}]},
    "q": {"_type": "quniform", "_value": [0, 3, 0.5]},
    "d": {"_type": "discrete", "_value": [1, 2, 4, 8]},
    "l": {"_type": "loguniform", "_value": [1e-3, 1.0]},
    "n": {"_type": "qnormal", "_value": [0, 1, 0.25]},
}
"""Every parameter type: factor, perm, nested choice, quantized and plain ranges, discrete."""


def factory(registered: Any) -> Factory:
    """``make(seed=..., **class_args)`` for a registry entry: its ``quick`` classArgs (a short
    run's settings) under the given ones; the view's seed goes to its built-in."""
    cls = registered.load()

    def make(seed: int = 0, **class_args: Any) -> Any:
        args = {**registered.quick, **class_args}
        if registered.contract == "view":
            inner = dict(args.pop("tuner_args", {}))
            if "optimize_mode" in args:
                inner["optimize_mode"] = args.pop("optimize_mode")
            return cls(**args, tuner_args={**inner, "seed": seed})
        return cls(**args, seed=seed)

    return make


def _space(kind: str, space: dict[str, Any]) -> dict[str, Any]:
    return {"layer": {"_type": "choice", "_value": [{"_name": LAYER, **space}]}} if kind == "network" else space


def _params(kind: str, params: dict[str, Any]) -> dict[str, Any]:
    """A trial's parameters as the wrapped space's own (the network's layer unwrapped)."""
    if kind != "network":
        return params
    inner = dict(params["layer"])
    assert inner.pop("_name") == LAYER, params
    return inner


def _wrapped(kind: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"layer": {"_name": LAYER, **params}} if kind == "network" else params


def _drive(make: Factory, kind: str, space: dict[str, Any], objective: Callable[[dict[str, Any]], Any], budget: int,
           concurrency: int, seed: int, **class_args: Any) -> tuple[Any, Run]:
    tuner = make(seed=seed, **class_args)
    found = run(tuner, _space(kind, space), lambda p: objective(_params(kind, p)), budget, concurrency=concurrency,
                seed=seed)
    return tuner, found


def _key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True)


def _constraint(kind: str, name: str, **args: Any) -> dict[str, Any]:
    """classArgs setting ``contract_constraints:<name>`` (a network's constraint also gets the layer)."""
    return {"constraint": f"nni_opevo.testing.contract_constraints:{name}", "constraint_args": args}


# ------------------------------------------------------------------ the behaviours


def failures_and_results_without_a_number(make: Factory, kind: str) -> None:
    """Half the trials fail in every way a trial can (no result, NaN, a string, a dict without
    'default', None in 'default'): the tuner goes on inside the space; a population tuner
    never proposes a configuration twice."""
    space, f = tiled_matmul(256, 256, 256, seed=1)
    failures = [None, float("nan"), "oops", {"x": 1}, {"default": None}, float("inf")]
    count = [0]

    def flaky(params: dict[str, Any]) -> Any:
        count[0] += 1
        return f(params) if count[0] % 2 else failures[count[0] // 2 % len(failures)]

    _, found = _drive(make, kind, space, flaky, 60, 4, 0)
    parsed = SearchSpace(space)
    assert len(found.trials) == 60 and not found.exhausted
    assert all(parsed.contains(parsed.from_trial(_params(kind, t.parameters))) for t in found.trials)
    if kind != "view":
        assert len({_key(t.parameters) for t in found.trials}) == 60, "a configuration was proposed twice"


def every_parameter_type(make: Factory, kind: str) -> None:
    """Factor, perm, a nested choice, quantized, log and normal ranges, discrete: every proposal
    is a configuration of the space, in the types a trial expects."""
    parsed = SearchSpace(MIXED)
    _, found = _drive(make, kind, MIXED, lambda p: float(p["f"][0] + p["q"]), 40, 3, 1)
    assert len(found.trials) == 40
    for trial in found.trials:
        params = _params(kind, trial.parameters)
        assert parsed.contains(parsed.from_trial(params)), params
        assert isinstance(params["f"], list) and math.prod(params["f"]) == 64 and sorted(params["p"]) == [0, 1, 2]


def unknown_ids_late_results_and_import(make: Factory, kind: str) -> None:
    """NNI 3.0 mixes up ids (microsoft/nni#5726): ends of ids never proposed, an end before its
    result, results of customized trials and off-space parameters, then an import with junk in
    it: the tuner keeps proposing configurations of the space; a population tuner never one it
    was told of."""
    tuner = make(seed=0)
    space = _space(kind, MIXED)
    tuner.update_search_space(space)
    first = tuner.generate_parameters(0)
    tuner.trial_end(99, False)
    tuner.trial_end(0, True)
    tuner.receive_trial_result(0, first, 3.0)
    custom = _wrapped(kind, {"f": [4, 4, 4], "p": [2, 1, 0], "c": {"_name": "a"}, "q": 1.5, "d": 2, "l": 0.5,
                             "n": 0.25})
    tuner.receive_trial_result(77, custom, 10.0)
    tuner.receive_trial_result(78, _wrapped(kind, {"f": [3, 3, 3]}), 50.0)  # off the space: ignored
    imported = _wrapped(kind, {**_params(kind, custom), "q": 2.0})
    tuner.import_data(["{not json", 5, {"no": 1}, {"parameter": imported, "value": {"default": 20.0}},
                       {"parameter": _wrapped(kind, {"f": [64]}), "value": 1.0},
                       {"parameter": imported, "value": "not a number"}])
    parsed = SearchSpace(MIXED)
    proposals = [tuner.generate_parameters(i) for i in range(1, 30)]
    assert all(parsed.contains(parsed.from_trial(_params(kind, p))) for p in proposals)
    if kind != "view":
        told = {_key(custom), _key(imported), _key(first)}
        assert not told & {_key(p) for p in proposals} and len({_key(p) for p in proposals}) == 29


def a_small_space_runs_to_exhaustion(make: Factory, kind: str) -> None:
    """A nested mixed space of 120 configurations: a population tuner proposes each exactly
    once, then has no more trials; a view keeps to the space."""
    small = {"f": {"_type": "factor", "_value": [8, 2]}, "p": {"_type": "perm", "_value": 2}, "c": MIXED["c"],
             "q": {"_type": "quniform", "_value": [0, 1, 0.5]}}
    size = SearchSpace(small).size
    assert size == 4 * 2 * 5 * 3
    budget = size + 50 if kind != "view" else 60
    _, found = _drive(make, kind, small, lambda p: float(p["f"][0] + p["q"]), budget, 3, 1)
    parsed = SearchSpace(small)
    assert all(parsed.contains(parsed.from_trial(_params(kind, t.parameters))) for t in found.trials)
    if kind != "view":
        assert found.exhausted and len(found.trials) == size == len({_key(t.parameters) for t in found.trials})


def a_changed_search_space(make: Factory, kind: str) -> None:
    """``update_search_space`` again mid-run (NNI's ``nnictl update searchspace``): every later
    proposal is of the new space."""
    tuner = make(seed=0)
    before = {"a": {"_type": "choice", "_value": [1, 2, 3, 4, 5]}, "f": {"_type": "factor", "_value": [16, 2]}}
    after = {"a": {"_type": "choice", "_value": [6, 7, 8]}, "f": {"_type": "factor", "_value": [36, 2]}}
    tuner.update_search_space(_space(kind, before))
    for i in range(8):
        params = tuner.generate_parameters(i)
        tuner.receive_trial_result(i, params, float(_params(kind, params)["a"]))
        tuner.trial_end(i, True)
    tuner.update_search_space(_space(kind, after))
    parsed = SearchSpace(after)
    for i in range(8, 20):
        params = tuner.generate_parameters(i)
        assert parsed.contains(parsed.from_trial(_params(kind, params))), params
        tuner.receive_trial_result(i, params, float(_params(kind, params)["a"]))
        tuner.trial_end(i, True)


def the_constraint_decides_what_becomes_a_trial(make: Factory, kind: str) -> None:
    """About 92 % of this space breaks the launch limits: none of it is proposed, every measured
    kernel is valid; a population tuner learns each refusal as a failure and never proposes it."""
    space, f = tiled_matmul(256, 256, 256, seed=1)
    tuner, found = _drive(make, kind, space, f, 60, 4, 0, **_constraint(kind, "tiled_limits"))
    from . import contract_constraints

    assert len(found.trials) == 60
    assert all(contract_constraints.tiled_limits(_params(kind, t.parameters)) for t in found.trials)
    assert all(t.result > 0 for t in found.trials), "every measured kernel is valid"
    if kind == "population":
        population = tuner.population
        refused = [k for k, r in population.records.items() if r.rejected]
        assert len(refused) == population.n_rejected > 0 and tuner.constraint.rejected >= population.n_rejected
        proposed = {_key(t.parameters) for t in found.trials}
        parsed = SearchSpace(space)
        assert not proposed & {_key(parsed.to_trial(population.records[k].config)) for k in refused}
        assert len(proposed) == 60


def an_exhausted_space_ends_cleanly(make: Factory, kind: str) -> None:
    """Factor (64, 3) has 28 factorizations, 18 with a first entry of at most 4: a population
    tuner proposes exactly those, then has no more trials; a view proposes only those."""
    space = {"f": {"_type": "factor", "_value": [64, 3]}}
    tuner, found = _drive(make, kind, space, lambda p: float(sum(p["f"][1:])), 40, 2, 0,
                          **_constraint(kind, "first_factor_at_most", most=4))
    assert found.trials and all(_params(kind, t.parameters)["f"][0] <= 4 for t in found.trials)
    if kind == "view":
        return
    assert found.exhausted and len(found.trials) == 18 == len({_key(t.parameters) for t in found.trials})
    try:
        tuner.generate_parameters(999)
    except NoMoreTrialError:
        return
    raise AssertionError("a proposal after the space was exhausted")


def a_misbehaving_constraint_stops_the_tuner(make: Factory, kind: str) -> None:
    """A constraint that raises, or answers other than a bool, stops the tuner with its error."""
    for name, message in (("raises", "raised KeyError: 'no such knob'"), ("not_a_bool", "must return True or False")):
        tuner = make(seed=0, **_constraint(kind, name))
        tuner.update_search_space(_space(kind, {"f": {"_type": "factor", "_value": [64, 3]}}))
        try:
            tuner.generate_parameters(0)
        except ConstraintError as e:
            assert message in str(e), str(e)
            continue
        raise AssertionError(f"the constraint {name} did not stop the tuner")


def the_same_seed_the_same_proposals(make: Factory, kind: str) -> None:
    """Two runs with one seed and the same results propose the same configurations, in order."""
    space, f = tiled_matmul(256, 256, 256, seed=2)
    runs = [_drive(make, kind, space, f, 40, 4, 5)[1] for _ in range(2)]
    assert [t.parameters for t in runs[0].trials] == [t.parameters for t in runs[1].trials]


BEHAVIOURS: tuple[Callable[[Factory, str], None], ...] = (
    failures_and_results_without_a_number, every_parameter_type, unknown_ids_late_results_and_import,
    a_small_space_runs_to_exhaustion, a_changed_search_space, the_constraint_decides_what_becomes_a_trial,
    an_exhausted_space_ends_cleanly, a_misbehaving_constraint_stops_the_tuner, the_same_seed_the_same_proposals)
