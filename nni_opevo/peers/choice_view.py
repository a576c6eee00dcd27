"""NNI's built-in tuners (TPE, Random, Evolution, Anneal, ...) on spaces with ``factor``,
``perm`` and ``discrete`` parameters, the types NNI does not know: the space they see lists
every factorization and every order as a ``choice`` of labels (the value as JSON text, e.g.
"[64, 2, 4, 2]": NNI's tuners accept only numbers and strings as options), and the label they
pick reaches the trial as the exact factor or perm value (a list), checked against the space.
A ``discrete`` set of numbers becomes a ``choice`` of those numbers (NNI would otherwise read
an unknown type as a uniform range between its first two values).

Listing is only sensible for small sets: a parameter with more values than ``max_choices``
is refused with its name, its size and what to use instead. Every other type, nested choices
included, is passed through to the built-in tuner unchanged, and the built-in tuner keeps its
own handling of results; this view only adds what NNI 3.0 needs of every tuner here: trial
ends and results for ids it never issued (microsoft/nni#5726, customized trials) are dropped
instead of crashing the built-in tuner. It also works around three faults of NNI 3.0's
built-ins: a choice nested two or more deep (NNI's ``ParameterSpec.is_activated_in`` looks up
the parent of an option that was not chosen: KeyError; fixed for the built-in's calls, see
``_nested_fix``), a search space changed mid-experiment (TPE mixes the old space's history
into the new: the built-in is rebuilt on the new space and given the results that fit it),
and imported records without a value (skipped and counted, as every tuner here does).
"""
from __future__ import annotations

import contextlib
import itertools
import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from nni import NoMoreTrialError
from nni.common.hpo_utils import formatting
from nni.tools.package_utils import tuner_factory
from nni.tuner import Tuner

from .. import fatal
from ..base import PROPOSALS_PER_TRIAL, RANDOM_DRAWS, REPORT_EVERY, parse_class_args, parse_records
from ..class_args import ConstraintArgs, arg, document, fail, int_in, mapping
from ..fitness import objective
from ..space.parameters import ChoiceParameter, DiscreteParameter, FactorParameter, Parameter, PermParameter, SpaceError
from ..space.search_space import SearchSpace

_logger = logging.getLogger(__name__)

LISTED = (FactorParameter, PermParameter)
NAME_ALIAS = "_name (parameter)"
"""What the built-in sees for a top-level parameter named ``_name``, which NNI takes for an option's label."""


def builtin_name(name: str, value: Any) -> str:
    known = tuner_factory._get_all_builtin_names("tuners")
    if not isinstance(value, str) or value.lower() not in known:
        raise fail(name, f"must name an NNI built-in tuner ({', '.join(sorted(known))})", value)
    return value


@dataclass(frozen=True)
class ChoiceViewArgs(ConstraintArgs):
    tuner: str = arg("TPE", builtin_name, "the built-in tuner's name, as in `tuner: {name: ...}`")
    tuner_args: dict = arg({}, mapping, "its classArgs, e.g. `{optimize_mode: maximize, seed: 1}`")
    max_choices: int = arg(10_000, int_in(1, 1_000_000),
                           "the most values a factor or perm may have to be listed as a choice")

    def check(self) -> None:
        _builtin(self)


def _builtin(args: ChoiceViewArgs) -> Tuner:
    """The built-in tuner the classArgs name, built with its own classArgs; ValueError naming
    the classArg when either is wrong."""
    try:
        validator = tuner_factory.create_validator_instance("tuners", args.tuner)
    except ImportError as e:
        raise ValueError(f"classArg 'tuner': NNI's {args.tuner} needs the '{e.name}' package, which is not "
                         f"installed: pip install {e.name}") from e
    try:
        # NNI's validators raise schema errors; a built-in without one (TPE) checks in its constructor.
        if validator is not None:
            validator.validate_class_args(**args.tuner_args)
        return tuner_factory.create_builtin_class_instance(args.tuner, dict(args.tuner_args), "tuners")
    except Exception as e:
        raise ValueError(f"classArg 'tuner_args' is not valid for {args.tuner}: {type(e).__name__}: {e}") from e



@contextlib.contextmanager
def _nested_fix() -> Iterator[None]:
    """NNI's ``is_activated_in`` with its fault fixed, while a built-in runs: an option of a
    nested choice is active only where its parent choice was reached and chose it (NNI indexes
    the parent's value, which is missing when the parent itself sits in an option not chosen)."""
    original = formatting.ParameterSpec.is_activated_in

    def is_activated_in(spec: Any, partial_parameters: Any) -> bool:
        return not spec.is_nested() or partial_parameters.get(spec.key[:-2]) == spec.key[-2]

    formatting.ParameterSpec.is_activated_in = is_activated_in
    try:
        yield
    finally:
        formatting.ParameterSpec.is_activated_in = original


class ChoiceViewTuner(Tuner):
    """Runs an NNI built-in tuner on a space with factor/perm parameters (see the module docstring)."""

    Args = ChoiceViewArgs

    def __init__(self, **class_args: Any) -> None:
        self.args, self.constraint = fatal.parse_or_defer(self, lambda: parse_class_args(ChoiceViewArgs, class_args),
                                                          lambda: (ChoiceViewArgs.parse({"tuner": "Random"}), None))
        self.name = self.args.tuner
        self.max_choices = self.args.max_choices
        self.inner = _builtin(self.args)
        self.space: SearchSpace | None = None
        self._issued: set[int] = set()  # NNI ids whose trial the built-in proposed (results go back to it)
        self._drawn: set[int] = set()  # NNI ids of the view's own random draws (the built-in never hears of them)
        self._inner_id: dict[int, int] = {}  # NNI id -> the id the built-in proposed it under
        self._ended: set[int] = set()  # NNI ids whose trial_end the built-in has been told
        self._reported: set[int] = set()  # NNI ids whose result the built-in has been told
        self._held: set[int] = set()  # NNI ids whose successful end came before their result (held back)
        self._refused: set[str] = set()  # configurations the constraint refused (as JSON)
        self._private_ids = itertools.count(-1, -1)  # the built-in's ids for candidates that never became trials
        self._rng = np.random.default_rng(class_args.get("tuner_args", {}).get("seed"))
        self._history: list[dict[str, Any]] = []  # every result received or imported, for a changed space

    # ------------------------------------------------------------------ space

    @fatal.guard
    def update_search_space(self, search_space: dict[str, Any]) -> None:
        changed = self.space is not None and self.space.raw != search_space
        self.space = SearchSpace(search_space)
        if changed:  # a built-in fresh on the new space, given the results that fit it
            self.inner = _builtin(self.args)
            self._issued, self._reported, self._ended, self._held = set(), set(), set(), set()
            self._inner_id.clear()
        with _nested_fix():
            self.inner.update_search_space(self._listed(search_space, self.space, ()))
        if changed:
            fitting = [entry for entry in self._history if self._fits(entry["parameter"])]
            with _nested_fix():
                self.inner.import_data([{**entry, "parameter": self._to_inner(entry["parameter"])} for entry in fitting])
            _logger.info("search space changed: %s rebuilt with the %d of %d results that fit it", self.name,
                         len(fitting), len(self._history))

    def _fits(self, params: Any) -> bool:
        assert self.space is not None
        try:
            self.space.from_trial(params)
            return True
        except (ValueError, TypeError, KeyError):
            return False

    def _listed(self, raw: dict[str, Any], space: SearchSpace, prefix: tuple) -> dict[str, Any]:
        """``raw`` with every factor and perm, at any depth, replaced by a choice of its values."""
        out: dict[str, Any] = {}
        for name, spec in raw.items():
            if name == "_name":
                if prefix:  # an option's label
                    out[name] = spec
                    continue
                name = NAME_ALIAS  # a top-level parameter named `_name`, which NNI's formatting drops
            param = space.by_key[(*prefix, "_name" if name == NAME_ALIAS else name)].param
            if isinstance(param, LISTED):
                out[name] = {"_type": "choice", "_value": self._values(param)}
            elif isinstance(param, DiscreteParameter):
                out[name] = {"_type": "choice", "_value": list(param.values)}
            elif isinstance(param, ChoiceParameter) and param.nested:
                options = [self._listed(option, space, (*prefix, name, i)) for i, option in enumerate(spec["_value"])]
                out[name] = {**spec, "_value": options}
            else:
                out[name] = spec
        return out

    def _values(self, param: Parameter) -> list[Any]:
        if param.size > self.max_choices:
            raise SpaceError(param.path, f"{param.type_name} has {param.size:,.0f} values, more than max_choices="
                             f"{self.max_choices:,} can list as a choice for {self.name}; raise max_choices or use "
                             "a tuner that searches factor/perm natively (OpEvo, G-BFS, N-A2C, AutoTVM, NoSE)")
        return [_label(param.to_trial(v)) for v in param.enumerate()]

    # ------------------------------------------------------------------ proposals

    def _to_trial(self, params: dict[str, Any]) -> dict[str, Any]:
        """The built-in tuner's pick with each label turned back into its factor/perm value."""
        named = {("_name" if key == NAME_ALIAS else key): value for key, value in params.items()}
        return self._map(named, (), lambda param, label: param.to_trial(param.from_trial(json.loads(label))))

    def _to_inner(self, params: Any) -> Any:
        """Trial parameters (imported, or reported back) in the built-in tuner's labels."""
        if not isinstance(params, dict):
            return params
        out = self._map(params, (), lambda param, value: _label(param.to_trial(param.from_trial(value))))
        return {(NAME_ALIAS if key == "_name" else key): value for key, value in out.items()}

    def _map(self, params: dict[str, Any], prefix: tuple, convert: Callable[[Parameter, Any], Any]) -> dict[str, Any]:
        assert self.space is not None
        out = dict(params)
        for name, value in params.items():
            slot = self.space.by_key.get((*prefix, name))
            if slot is None:
                continue
            if isinstance(slot.param, LISTED):
                out[name] = convert(slot.param, value)
            elif isinstance(slot.param, ChoiceParameter) and slot.param.nested and isinstance(value, dict):
                out[name] = self._map(value, (*prefix, name, slot.param.from_trial(value)), convert)
        return out

    @fatal.guard
    def generate_parameters(self, parameter_id: int, **kwargs: Any) -> dict[str, Any]:
        if self.constraint is None:
            with _nested_fix():
                params = self._to_trial(self.inner.generate_parameters(parameter_id, **kwargs))
            self._issued.add(parameter_id)
            return params
        return self._feasible_parameters(parameter_id, **kwargs)

    def _feasible_parameters(self, parameter_id: int, **kwargs: Any) -> dict[str, Any]:
        """The built-in's first proposal the constraint accepts. Each refused one is ended as a
        failed trial for the built-in (what NNI tells it of a trial that failed), under an id of
        its own, and never proposed; after ``PROPOSALS_PER_TRIAL`` refusals, a random feasible
        configuration that the built-in does not hear about."""
        assert self.space is not None and self.constraint is not None
        for attempt in range(PROPOSALS_PER_TRIAL):
            inner_id = parameter_id if attempt == 0 else next(self._private_ids)
            with _nested_fix():
                params = self._to_trial(self.inner.generate_parameters(inner_id, **kwargs))
            label = json.dumps(params, sort_keys=True)
            if label not in self._refused and self.constraint(params):
                self._issued.add(parameter_id)
                self._inner_id[parameter_id] = inner_id
                self._report(parameter_id)
                return params
            self._refused.add(label)
            self.inner.trial_end(inner_id, False)
        for _ in range(RANDOM_DRAWS):
            params = self.space.to_trial(self.space.sample(self._rng))
            label = json.dumps(params, sort_keys=True)
            if label not in self._refused and self.constraint(params):
                self._drawn.add(parameter_id)
                return params
            self._refused.add(label)
        raise NoMoreTrialError(f"{self.name} and {RANDOM_DRAWS} random draws found no configuration the constraint "
                               "accepts")

    def _report(self, parameter_id: int) -> None:
        if self.constraint is not None and len(self._issued) % REPORT_EVERY == 0:
            _logger.info("ChoiceView(%s): the constraint refused %d of %d candidates (%d trials proposed)",
                         self.name, self.constraint.rejected, self.constraint.calls, len(self._issued))

    @fatal.guard
    def generate_multiple_parameters(self, parameter_id_list: list[int], **kwargs: Any) -> list[dict[str, Any]]:
        if self.constraint is not None:  # one at a time, each checked (a built-in's own batching is bypassed)
            out = []
            for parameter_id in parameter_id_list:
                try:
                    out.append(self.generate_parameters(parameter_id))
                except NoMoreTrialError:
                    break
            return out
        callback: Callable[..., Any] | None = kwargs.get("st_callback")
        if callback is not None:  # trials a built-in tuner sends later (Evolution) pass through the view too
            def send(parameter_id: int, params: dict[str, Any], *args: Any, **kw: Any) -> Any:
                self._issued.add(parameter_id)
                return callback(parameter_id, self._to_trial(params), *args, **kw)

            kwargs["st_callback"] = send
        with _nested_fix():
            out = [self._to_trial(p) for p in self.inner.generate_multiple_parameters(parameter_id_list, **kwargs)]
        self._issued.update(parameter_id_list[: len(out)])
        return out

    # ------------------------------------------------------------------ results

    @fatal.guard
    def receive_trial_result(self, parameter_id: int, parameters: Any, value: Any, **kwargs: Any) -> None:
        self._history.append({"parameter": parameters, "value": value})
        if parameter_id in self._drawn:
            return
        if parameter_id not in self._issued:
            _logger.warning("result for parameter id %s that %s never proposed: ignored", parameter_id, self.name)
            return
        if parameter_id in self._reported or parameter_id in self._ended:
            # NNI 3.0 mixes up ids (microsoft/nni#5726): a second result, or one after the trial's
            # end was passed on, reaches a built-in that has forgotten the id (TPE raises KeyError).
            _logger.warning("result for parameter id %s after its result or its end: not passed to %s",
                            parameter_id, self.name)
            return
        self._reported.add(parameter_id)
        if objective(value) is None:  # no usable number: a failure (the built-ins raise on it)
            _logger.info("result %r of parameter id %s has no number: ended as a failed trial", value, parameter_id)
            self._end(parameter_id, False)
            return
        inner_id = self._inner_id.get(parameter_id, parameter_id)
        with _nested_fix():
            self.inner.receive_trial_result(inner_id, self._to_inner(parameters), value, **kwargs)
        if parameter_id in self._held:
            self._end(parameter_id, True)

    @fatal.guard
    def trial_end(self, parameter_id: int, success: bool, **kwargs: Any) -> None:
        """Passed on, except a successful end before the trial's result: held back until the
        result comes (NNI 3.0's ends may carry another trial's id, microsoft/nni#5726, and a
        built-in told of an end forgets the trial, so its result would then crash it)."""
        if parameter_id not in self._issued or parameter_id in self._ended:
            _logger.debug("trial_end for parameter id %s not in flight: ignored", parameter_id)
            return
        if success and parameter_id not in self._reported:
            self._held.add(parameter_id)
            return
        self._end(parameter_id, success, **kwargs)

    def _end(self, parameter_id: int, success: bool, **kwargs: Any) -> None:
        self._held.discard(parameter_id)
        self._ended.add(parameter_id)
        self.inner.trial_end(self._inner_id.get(parameter_id, parameter_id), success, **kwargs)

    @fatal.guard
    def import_data(self, data: Any) -> None:
        """Earlier trials in the built-in's labels; malformed and off-space records, and those
        without a number, are skipped and counted (the built-ins crash on them)."""
        assert self.space is not None
        records, skipped = parse_records(data)
        converted = []
        for entry in records:
            if objective(entry.get("value")) is None or not self._fits(entry["parameter"]):
                skipped += 1
                continue
            self._history.append({"parameter": entry["parameter"], "value": entry["value"]})
            converted.append({**entry, "parameter": self._to_inner(entry["parameter"])})
        with _nested_fix():
            self.inner.import_data(converted)
        _logger.info("imported %d earlier trials into %s; skipped %d malformed or off-space records",
                     len(converted), self.name, skipped)


def _label(value: list[Any]) -> str:
    return json.dumps(value)


document(ChoiceViewTuner, ChoiceViewArgs)
