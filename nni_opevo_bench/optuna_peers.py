"""Optuna's samplers as peers, behind an NNI tuner: ``optuna:tpe``, ``optuna:gp``, ``optuna:cmaes``.

Optuna is what a hyperparameter-optimization user reaches for first, so the comparison runs its
samplers under the same driver and rules as every NNI tuner (``nni_opevo.testing.drive``), through
Optuna's ask-and-tell interface:

* ``tpe``: ``TPESampler(multivariate=True, group=True, constant_liar=True)``: the trials in
  flight count as the worst results so far, so eight proposals out at once spread (what Optuna
  advises for parallel studies); ``gp``: ``GPSampler``; ``cmaes``: ``CmaEsSampler(with_margin=True)``, the
  CMA-ES variant for discrete parameters. Each takes the run's seed; ``optuna:tpe:n_startup_trials=20``
  overrides a sampler's keyword.
* The space: a ``discrete`` parameter (numbers in order) becomes an integer index over its values,
  so the samplers' models see the order; ``choice`` a categorical; NNI's ``randint``, ``uniform``,
  ``quniform``, ``loguniform`` and ``qloguniform`` Optuna's integer and float distributions. A
  ``factor`` or ``perm`` parameter is refused, naming it (list them as ``choice`` first).
* A result: its number (or ``default``) is told as the trial's value; a trial that ends without
  a usable number is told failed, which Optuna's samplers skip.
* The constraint (the classArgs every tuner of a comparison gets): a configuration it refuses is
  dropped (told failed, which Optuna's samplers skip) and the sampler asked again, so, like our
  tuners, Optuna never spends an evaluation on a configuration the constraint rules out. (Telling
  refusals as values would teach the model where the feasible region is, but every refusal then
  joins the model's history: on a space four fifths infeasible a run of 200 evaluations took a
  minute of TPE's time, for no evaluation saved, refusals being free.)
* No evaluation is spent on a repeat either (every tuner here proposes each configuration once,
  and Kernel Tuner's strategies get a repeat free): a configuration measured or in flight that is
  proposed again is dropped the same way. After
  ``MAX_ASKS`` such asks for one proposal, the proposal is drawn at random among the
  configurations not yet tried (what a user does when a sampler keeps repeating itself, as GP's
  and CMA-ES's do with trials in flight); a finite space with none left ends the run.

Optuna is an optional dependency: ``pip install -e '.[optuna]'``.
"""
from __future__ import annotations

import json
import math
import warnings
from typing import Any

import numpy as np
from nni import NoMoreTrialError
from nni.tuner import Tuner

from nni_opevo import constraint

PREFIX = "optuna:"
SAMPLERS = ("tpe", "gp", "cmaes")
MAX_ASKS = 10
"""Asks for one proposal that may come back refused or repeated before the proposal is drawn at random."""


def is_peer(spec: str) -> bool:
    return spec.startswith(PREFIX)


def import_optuna() -> Any:
    try:
        import optuna
    except ImportError as e:
        raise ImportError("Optuna's samplers need the optuna package: pip install -e '.[optuna]'") from e
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # group, with_margin and GPSampler are marked experimental; the comparison names them on purpose.
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    return optuna


def parse(spec: str) -> tuple[str, dict[str, Any]]:
    """``optuna:tpe:n_startup_trials=20`` -> ("tpe", {"n_startup_trials": 20}); ValueError naming
    an unknown sampler."""
    name, _, rest = spec.removeprefix(PREFIX).partition(":")
    if name not in SAMPLERS:
        raise ValueError(f"unknown Optuna sampler {name!r} in {spec!r}; known: {', '.join(SAMPLERS)}")
    overrides: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, eq, raw = item.partition("=")
        if not eq:
            raise ValueError(f"{spec!r}: override {item!r} is not key=value")
        try:
            overrides[key] = json.loads(raw)
        except json.JSONDecodeError:
            overrides[key] = raw
    return name, overrides


def check(spec: str) -> None:
    """ImportError or ValueError before anything runs (GPSampler imports PyTorch only when first asked)."""
    import_optuna()
    build(spec, 0)
    if parse(spec)[0] == "gp":
        try:
            import torch  # noqa: F401
        except ImportError:
            raise ImportError(f"{spec}: Optuna's GPSampler fits its model with PyTorch: pip install torch") from None


def _sampler(name: str, seed: int | None, overrides: dict[str, Any]) -> Any:
    optuna = import_optuna()

    if name == "tpe":
        return optuna.samplers.TPESampler(**{"multivariate": True, "group": True, "constant_liar": True, "seed": seed,
                                             **overrides})
    if name == "gp":
        return optuna.samplers.GPSampler(**{"seed": seed, **overrides})
    return optuna.samplers.CmaEsSampler(**{"seed": seed, "with_margin": True, **overrides})


def build(spec: str, seed: int | None, extra: dict[str, Any] | None = None) -> OptunaTuner:
    """The tuner for ``spec``; ``extra``: the comparison's classArgs (``constraint``, ``constraint_args``)."""
    name, overrides = parse(spec)
    extra = extra or {}
    try:
        sampler = _sampler(name, seed, overrides)
    except TypeError as e:
        raise ValueError(f"{spec!r}: {e}") from None
    return OptunaTuner(sampler, seed, constraint.load(extra.get("constraint"), extra.get("constraint_args") or {}))


class _Parameter:
    """One NNI parameter as an Optuna distribution, and back."""

    def __init__(self, name: str, spec: dict[str, Any]) -> None:
        optuna = import_optuna()
        kind, values = spec.get("_type"), spec.get("_value")
        self.name, self.kind = name, kind
        self.values: list[Any] | None = None
        self.q: float | None = None  # qloguniform's step, applied to the value drawn
        if kind == "discrete":
            self.values = sorted(values)
            self.distribution = optuna.distributions.IntDistribution(0, len(self.values) - 1)
        elif kind == "choice":
            self.values = list(values)
            self.distribution = optuna.distributions.CategoricalDistribution(list(range(len(values))))
        elif kind == "randint":
            self.distribution = optuna.distributions.IntDistribution(int(values[0]), int(values[1]) - 1)
        elif kind in ("uniform", "quniform", "loguniform", "qloguniform"):
            low, high = float(values[0]), float(values[1])
            step = float(values[2]) if kind.startswith("q") else None
            self.distribution = optuna.distributions.FloatDistribution(low, high, log=kind.endswith("loguniform"),
                                                                       step=None if kind.endswith("loguniform") else step)
            self.q = step if kind == "qloguniform" else None
        else:
            raise ValueError(f"parameter {name!r}: Optuna's samplers take discrete, choice, randint, uniform, "
                             f"quniform, loguniform and qloguniform parameters, not {kind!r}")

    def value(self, internal: Any) -> Any:
        if self.values is not None:
            return self.values[int(internal)]
        if self.q:
            return round(internal / self.q) * self.q
        return internal

    def internal(self, value: Any) -> Any:
        return self.values.index(value) if self.values is not None else value


def _score(result: Any) -> float | None:
    value = result.get("default") if isinstance(result, dict) else result
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


class OptunaTuner(Tuner):
    """An Optuna study driven as NNI drives a tuner (see the module docstring)."""

    def __init__(self, sampler: Any, seed: int | None, constraint: constraint.Constraint | None) -> None:
        self.optuna = import_optuna()
        self.sampler, self.constraint = sampler, constraint
        self.study = self.optuna.create_study(direction="maximize", sampler=sampler)
        self.parameters: list[_Parameter] = []
        self.rng = np.random.default_rng(seed)
        self.running: dict[int, Any] = {}  # NNI id -> Optuna trial
        self.keys: dict[int, tuple] = {}  # NNI id -> its configuration's key
        self.values: dict[tuple, float] = {}  # measured configuration -> its value
        self.tried: set[tuple] = set()  # measured, failed or in flight
        self.refused: set[tuple] = set()

    def update_search_space(self, search_space: dict[str, Any]) -> None:
        self.parameters = [_Parameter(name, spec) for name, spec in search_space.items()]

    @property
    def _distributions(self) -> dict[str, Any]:
        return {p.name: p.distribution for p in self.parameters}

    def _config(self, internal: dict[str, Any]) -> dict[str, Any]:
        return {p.name: p.value(internal[p.name]) for p in self.parameters}

    def _key(self, config: dict[str, Any]) -> tuple:
        return tuple(json.dumps(config[p.name]) for p in self.parameters)

    def _feasible(self, config: dict[str, Any]) -> bool:
        return self.constraint is None or self.constraint(config)

    def generate_parameters(self, parameter_id: int, **kwargs: Any) -> dict[str, Any]:
        trial = None
        for _ in range(MAX_ASKS):
            trial = self.study.ask(self._distributions)
            config = self._config(trial.params)
            key = self._key(config)
            if key in self.tried or key in self.refused or not self._feasible(config):
                self.refused.update([] if key in self.tried else [key])
                self.study.tell(trial, state=self.optuna.trial.TrialState.FAIL)  # dropped, the model unchanged
            else:
                break
        else:
            config = self._random()
            key = self._key(config)
            self.study.enqueue_trial({p.name: p.internal(config[p.name]) for p in self.parameters})
            trial = self.study.ask(self._distributions)  # carries the drawn configuration
        self.running[parameter_id], self.keys[parameter_id] = trial, key
        self.tried.add(key)
        return config

    def _random(self) -> dict[str, Any]:
        """A configuration not yet tried and not refused, drawn uniformly (NoMoreTrialError when none is left)."""
        finite = all(p.values is not None for p in self.parameters)
        size = math.prod(len(p.values) for p in self.parameters) if finite else math.inf
        for _ in range(10_000):
            config = {p.name: p.value(self._draw(p)) for p in self.parameters}
            key = self._key(config)
            if key not in self.tried and key not in self.refused and self._feasible(config):
                return config
            self.refused.update([] if key in self.tried or key in self.refused else [key])
            if len(self.tried) + len(self.refused) >= size:
                break
        raise NoMoreTrialError("Optuna: every configuration has been tried or refused")

    def _draw(self, parameter: _Parameter) -> Any:
        d = parameter.distribution
        if parameter.values is not None:
            return int(self.rng.integers(len(parameter.values)))
        if isinstance(d, self.optuna.distributions.IntDistribution):
            return int(self.rng.integers(d.low, d.high + 1))
        if d.log:
            return float(math.exp(self.rng.uniform(math.log(d.low), math.log(d.high))))
        return float(self.rng.uniform(d.low, d.high))

    def receive_trial_result(self, parameter_id: int, parameters: dict[str, Any], value: Any, **kwargs: Any) -> None:
        trial, score = self.running.pop(parameter_id, None), _score(value)
        if trial is None:
            return
        key = self.keys.pop(parameter_id)
        if score is None:
            self.study.tell(trial, state=self.optuna.trial.TrialState.FAIL)
            return
        self.values[key] = score
        self.study.tell(trial, score)

    def trial_end(self, parameter_id: int, success: bool, **kwargs: Any) -> None:
        trial = self.running.pop(parameter_id, None)
        if trial is not None:  # ended without a result
            self.keys.pop(parameter_id, None)
            self.study.tell(trial, state=self.optuna.trial.TrialState.FAIL)

    def import_data(self, data: list[dict[str, Any]]) -> None:
        for record in data:
            config, score = record["parameter"], _score(record["value"])
            key = self._key(config)
            self.tried.add(key)
            if score is None:
                continue
            self.values[key] = score
            self.study.add_trial(self.optuna.trial.create_trial(
                params={p.name: p.internal(config[p.name]) for p in self.parameters},
                distributions=self._distributions, value=score))

