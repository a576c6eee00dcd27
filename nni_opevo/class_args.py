"""Each tuner's classArgs, declared once.

A tuner declares its classArgs as a frozen dataclass whose fields are made by ``arg``: the
name, the default, the rule a value must follow and what it means. Everything else is derived
from that one declaration, so a default or a rule cannot drift apart between copies:

* the tuner's constructor: ``Tuner(**class_args)`` parses them with ``ClassArgs.parse``, and
  its signature and the "Parameters" section of its docstring are generated (``document``);
* its NNI ``ClassArgsValidator`` (``validator_for``; the registry exports it). NNI 3.0's
  ``nnictl create`` does not call a registered validator, so constructors run the same parse:
  a bad classArg fails the experiment at once with a message that names it, instead of
  surfacing as an odd error deep in the search;
* the benchmark catalog's full classArgs for the experiments it writes (``ClassArgs.values``);
* the classArgs tables of ``docs/tuners.md`` (``markdown``; ``tables`` rewrites them with
  ``nni-opevo docs``, and a test keeps them current).
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import numpy as np
from nni import ClassArgsValidator

from .constraint import spec_rule

Rule = Callable[[str, Any], Any]
"""(classArg name, given value) -> the value to use; raises ValueError naming the classArg."""
A = TypeVar("A", bound="ClassArgs")


def fail(name: str, rule: str, value: Any) -> ValueError:
    return ValueError(f"classArg '{name}' {rule}, got {value!r}")


# --------------------------------------------------------------------------- rules


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating)) \
        and math.isfinite(value)


def positive_int(name: str, value: Any) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        raise fail(name, "must be an integer >= 1", value)
    return int(value)


def int_in(low: int, high: int) -> Rule:
    """An integer from ``low`` to ``high``. Every count a tuner allocates or loops over by has an
    upper bound, so no classArg can make a proposal take unbounded time or memory."""
    def rule(name: str, value: Any) -> int:
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or not low <= value <= high:
            raise fail(name, f"must be an integer from {low} to {high}", value)
        return int(value)
    return rule


def real_in(low: float, high: float) -> Rule:
    """A number above ``low`` and at most ``high``."""
    def rule(name: str, value: Any) -> float:
        if not _is_number(value) or not low < value <= high:
            raise fail(name, f"must be a number above {low:g} and at most {high:g}", value)
        return float(value)
    return rule


def open_unit(name: str, value: Any) -> float:
    """A rate strictly between 0 and 1."""
    if not _is_number(value) or not 0 < value < 1:
        raise fail(name, "must be a number strictly between 0 and 1", value)
    return float(value)


def unit(name: str, value: Any) -> float:
    """A probability in [0, 1]."""
    if not _is_number(value) or not 0 <= value <= 1:
        raise fail(name, "must be a number between 0 and 1", value)
    return float(value)


def positive_real(name: str, value: Any) -> float:
    if not _is_number(value) or not value > 0:
        raise fail(name, "must be a number > 0", value)
    return float(value)


def at_least(low: float, note: str = "", high: float = 1e6) -> Rule:
    """A number from ``low`` to ``high``; ``note`` says what the lower bound means."""
    def rule(name: str, value: Any) -> float:
        if not _is_number(value) or not low <= value <= high:
            raise fail(name, f"must be a number from {low:g}{note} to {high:g}", value)
        return float(value)
    return rule


def one_of(*options: str) -> Rule:
    def rule(name: str, value: Any) -> str:
        if value not in options:
            raise fail(name, "must be " + " or ".join(repr(o) for o in options), value)
        return str(value)
    return rule


def flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise fail(name, "must be true or false", value)
    return value


def optional_seed(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
        raise fail(name, "must be a non-negative integer or null", value)
    return int(value)


def seed_or_drawn(seed: int | None) -> int:
    """The ``seed`` classArg's value, or one drawn from the OS when it was left out."""
    return seed if seed is not None else int(np.random.default_rng().integers(2**31))


def mapping(name: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise fail(name, "must be a mapping of names to values", value)
    return dict(value)


def text(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise fail(name, "must be a non-empty string", value)
    return value


# --------------------------------------------------------------------------- declarations


def arg(default: Any, rule: Rule, doc: str) -> Any:
    """One classArg of a ``ClassArgs`` dataclass. Mutable defaults (a dict) are copied per instance."""
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata={"rule": rule, "doc": doc})
    return field(default=default, metadata={"rule": rule, "doc": doc})


@dataclass(frozen=True)
class ClassArgs:
    """Base of every tuner's classArgs dataclass (see the module docstring)."""

    def check(self) -> None:
        """Rules between classArgs, or on the environment a tuner needs; ValueError naming one."""

    @classmethod
    def parse(cls: type[A], given: Mapping[str, Any]) -> A:
        """The classArgs ``given`` (as NNI passes them) checked, normalized and completed with defaults."""
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise ValueError(f"classArg '{unknown[0]}' is not known; known classArgs: {', '.join(sorted(known))}")
        values = {}
        for f in dataclasses.fields(cls):
            value = given[f.name] if f.name in given else _default(f)
            values[f.name] = f.metadata["rule"](f.name, value)
        parsed = cls(**values)
        parsed.check()
        return parsed

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {f.name: _default(f) for f in dataclasses.fields(cls)}

    def values(self) -> dict[str, Any]:
        """Every classArg with its value, the tuner's own first (for an experiment's YAML)."""
        return {f.name: getattr(self, f.name) for f in _ordered(type(self))}


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]


@dataclass(frozen=True)
class ConstraintArgs(ClassArgs):
    """The constraint hook every tuner of this package takes (``constraint``)."""

    constraint: str | None = arg(None, spec_rule, "\"package.module:function\" that receives the parameters as a "
                                                  "trial would and returns True when they may be measured; a "
                                                  "configuration it refuses never becomes a trial")
    constraint_args: dict = arg({}, mapping, "keyword arguments for the constraint function")


@dataclass(frozen=True)
class SearchArgs(ConstraintArgs):
    """The classArgs every tuner of this package shares (NNI's built-ins behind ChoiceView take theirs)."""

    optimize_mode: str = arg("maximize", one_of("maximize", "minimize"),
                             "'maximize' (e.g. TFLOPS) or 'minimize' (e.g. latency)")
    seed: int | None = arg(None, optional_seed, "seeds every random choice: the same seed and the same results give the "
                                       "same proposals; omitted, one is drawn and logged")


class Validator(ClassArgsValidator):
    """NNI's classArgs validator of one tuner: the parse of its declaration (``validator_for``)."""

    args: ClassVar[type[ClassArgs]]

    def validate_class_args(self, **kwargs: Any) -> None:
        self.args.parse(kwargs)


@functools.cache
def validator_for(args: type[ClassArgs], name: str) -> type[Validator]:
    """The ``Validator`` of a declaration, as the class ``nni_opevo.<name>`` that NNI loads."""
    return type(name, (Validator,), {"args": args, "__module__": "nni_opevo", "__qualname__": name})


# --------------------------------------------------------------------------- derived text


def _ordered(cls: type[ClassArgs]) -> list[dataclasses.Field]:
    """Fields as users read them: the tuner's own first, then the shared ones."""
    shared = {f.name for f in dataclasses.fields(SearchArgs)}
    fs = dataclasses.fields(cls)
    return [f for f in fs if f.name not in shared] + [f for f in fs if f.name in shared]


def _shown(value: Any) -> str:
    return "null" if value is None else repr(value) if isinstance(value, str) else str(value)


def document(tuner: type, args: type[ClassArgs]) -> None:
    """Give ``tuner`` the signature and docstring "Parameters" section of ``args``."""
    parameters = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=_default(f), annotation=f.type)
                  for f in _ordered(args)]
    tuner.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    lines = ["", "Parameters (classArgs)", "----------------------"]
    for f in _ordered(args):
        lines += [f"{f.name}: default {_shown(_default(f))}", f"    {f.metadata['doc']}"]
    tuner.__doc__ = inspect.cleandoc(tuner.__doc__ or "") + "\n" + "\n".join(lines) + "\n"


def markdown(args: type[ClassArgs]) -> str:
    """The classArgs table of docs/tuners.md."""
    rows = ["| classArg | default | meaning |", "|---|---|---|"]
    rows += [f"| `{f.name}` | `{_shown(_default(f))}` | {f.metadata['doc']} |" for f in _ordered(args)]
    return "\n".join(rows) + "\n"
