"""A user's own operator: a TVM tensor-expression computation, tuned like the built-in families.

A module of the user's declares a function that takes the shape as keyword arguments and
returns an ``Operator``: the computation's input and output tensors (``tvm.te``; floats of 16
to 64 bits or integers of 8 to 64, ``precision.DTYPES``), its operations, and optionally a NumPy
reference::

    # myops.py
    from tvm import te
    from trial_code.operators import Operator

    def scale_rows(rows=1024, cols=1024):
        x = te.placeholder((rows, cols), "float32", name="X")
        s = te.placeholder((rows,), "float32", name="S")
        y = te.compute((rows, cols), lambda i, j: x[i, j] * s[i], name="Y")
        return Operator([x, s], y, flops=rows * cols, reference=lambda x, s: x * s[:, None],
                        library=("NumPy", lambda x, s: lambda: np.multiply(x, s[:, None])))

``nni-opevo launch --operator myops:scale_rows --shape rows=2048 cols=512`` then derives the
template and its search space from the computation (``templates.derived``), runs OpEvo and
exports the best kernel. A module may instead name a ``templates.Template`` subclass: a
hand-written template (its own space, check, compute, schedule and reference), the interface
the built-in MatMul, BatchMatMul and Conv2D templates implement (docs/your-operator.md).

The spec ``module:attribute`` is checked against ``SPEC`` before anything is imported; the
module is imported from the installed packages or the current folder (where the experiment
runs its trials), and every way it can fail is one ``ValueError`` line naming the spec.
"""
from __future__ import annotations

import contextlib
import importlib
import inspect
import math
import numbers
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .indices import IndexRange, index_ranges
from .precision import DTYPES, is_integer, numpy_dtype, type_range

SPEC = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*")
"""``package.module:name``: dotted identifiers, nothing a path or a shell could read otherwise."""
ARGUMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")
"""An operator's shape argument name."""
MAX_ARGUMENTS = 16


@dataclass
class Operator:
    """A computation to tune. ``inputs`` and ``output`` are ``tvm.te`` tensors (``precision.DTYPES``:
    float16 inputs summed in float32 is written ``te.sum(a[i, k].astype("float32") * ...)``); the
    kernel takes the inputs in that order and writes the output. ``flops`` counts one run's
    floating-point operations (a multiply-add is 2): TFLOPS are reported from it. ``reference``,
    when given, computes the output in float64 from NumPy copies of the inputs, float64 for float
    inputs and int64 for integer ones (``table[ids]`` indexes with them); without
    it, trials are checked against TVM's untransformed loop nest on the CPU. ``library``, when
    given, names what a user would call instead (NumPy, PyTorch) and a function that takes the
    inputs and returns a call of it without arguments, its conversions done once: NumPy arrays of
    their types on the CPU; on a GPU, tensors on it (``torch.from_dlpack`` reads either). The
    export and the GPU campaign time the tuned kernel against that call (``anchor``); a function
    that raises ImportError means the library is not installed here. ``values``, when
    given, maps an input's name to the values the check draws it among, ``(low, high)``: floats
    uniform in [low, high), integers low..high, where the defaults (floats in [-1, 1), integers in
    ``precision.integer_range``) leave the computation's domain (a variance under a square root,
    a logarithm's argument); an input that indexes a tensor has its positions derived instead."""

    inputs: list[Any]
    output: Any
    flops: float
    reference: Callable[..., Any] | None = None
    library: tuple[str, Callable[..., Callable[[], Any]]] | None = None
    values: dict[str, tuple[float, float]] | None = None


def check_spec(spec: Any) -> str:
    """``spec`` when it is ``module:attribute`` (``SPEC``), else ValueError saying the rule."""
    if not isinstance(spec, str) or len(spec) > 200 or not SPEC.fullmatch(spec):
        raise ValueError(f"operator {spec!r} must be module:name, e.g. myops:depthwise (dotted identifiers only)")
    return spec


def check_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    """The shape's keyword arguments: at most ``MAX_ARGUMENTS`` identifiers with int, float, bool
    or short word values (they travel in trial commands and file names)."""
    if len(arguments) > MAX_ARGUMENTS:
        raise ValueError(f"an operator takes at most {MAX_ARGUMENTS} shape arguments, got {len(arguments)}")
    for key, value in arguments.items():
        if not ARGUMENT.fullmatch(key):
            raise ValueError(f"operator shape argument {key!r} must be an identifier of at most 40 characters")
        if isinstance(value, str):
            if not re.fullmatch(r"[A-Za-z0-9_.+-]{1,40}", value):
                raise ValueError(f"operator shape argument {key}={value!r}: a word of letters, digits, '_', '.', "
                                 "'+', '-' (at most 40)")
        elif not isinstance(value, (int, float, bool)) or (isinstance(value, float) and not math.isfinite(value)):
            raise ValueError(f"operator shape argument {key}={value!r} must be a finite number, a bool or a word")
    return arguments


def resolve(spec: str) -> Any:
    """The attribute ``spec`` names, imported; ValueError with one line for each way it fails."""
    module_name, _, attribute = check_spec(spec).partition(":")
    here = os.getcwd()
    if here not in sys.path:  # as `python -m` does: a module beside the experiment is found
        sys.path.append(here)
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # whatever the user's module raises is one line, not a traceback
        raise ValueError(f"operator {spec}: importing {module_name} failed ({type(e).__name__}: {e})") from None
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ValueError(f"operator {spec}: module {module_name} has no {attribute!r}") from None


def check_reachable(spec: str, folder: str) -> None:
    """ValueError, one line, where the module ``spec`` names was found only through the current
    folder and an experiment's trials and tuner, started in ``folder``, would not find it: not
    in ``folder``, not on the path a new interpreter has (installed, ``PYTHONPATH``)."""
    module_name = check_spec(spec).partition(":")[0]
    resolve(spec)
    file = getattr(sys.modules[module_name], "__file__", None)
    if not file:  # a namespace package: found the same way from anywhere
        return
    entry = Path(file).resolve().parent
    for _ in range(module_name.count(".") + (Path(file).name == "__init__.py")):
        entry = entry.parent
    here = Path.cwd().resolve()
    reachable = {Path(p).resolve() for p in sys.path if p and Path(p).resolve() != here} | {Path(folder).resolve()}
    if entry not in reachable:
        where = f"{entry}, the current folder," if entry == here else f"{entry}"
        raise ValueError(f"operator {spec}: its module {module_name} is found in {where} but the experiment's trials "
                         f"and tuner run in {folder}: write the experiment there (--root {entry}), or install the "
                         "module (or add its folder to PYTHONPATH)")


# TVM's ``tag_scope`` (behind every TOPI operator) keeps its current tag in a class attribute,
# not per thread: two threads building TOPI computations at once raise "nested op_tag".
_BUILDING = threading.Lock()


@contextlib.contextmanager
def _a_target() -> Iterator[None]:
    """A current TVM target where none is: some TOPI operators ask for one while they only compute
    (``conv2d_NCHWc`` reads it and uses nothing of it) and raise without. The CPU's, whatever the
    kernel's own target: a computation is the same on every target, and the space is derived from
    it for each."""
    from tvm.target import Target

    if Target.current(allow_none=True) is not None:
        yield
        return
    with Target("llvm"):
        yield


def call(spec: str, arguments: dict[str, Any]) -> Operator:
    """The ``Operator`` the function ``spec`` names returns for ``arguments``, checked; built one
    call at a time (``_BUILDING``)."""
    function = resolve(spec)
    if not callable(function) or inspect.isclass(function):
        raise ValueError(f"operator {spec}: {spec.partition(':')[2]} is not a function returning an Operator")
    try:
        with _BUILDING, _a_target():
            found = function(**arguments)
    except TypeError as e:
        if "argument" in str(e):
            raise ValueError(f"operator {spec}: the shape arguments {sorted(arguments)} do not fit its "
                             f"parameters ({e})") from None
        raise ValueError(f"operator {spec} raised TypeError: {e}") from None
    except Exception as e:
        raise ValueError(f"operator {spec} raised {type(e).__name__}: {e}") from None
    if not isinstance(found, Operator):
        raise ValueError(f"operator {spec} returned {type(found).__name__}, not trial_code.operators.Operator")
    _check_operator(spec, found)
    return found


STAGE_KINDS = {"ExternOp": "a te.extern", "ScanOp": "a te.scan"}
"""How a stage that is not a ``te.compute`` is named in the refusal."""
MAX_ITERATIONS = 2**30 - 1
"""A stage's axis at most: TVM's loop unroller (``tirx.UnrollLoop``) counts a serial loop's
steps in 32 bits, and a loop of 2^30 to 2^31 - 1 iterations (the unscheduled nest a reference
is computed from, a tile's loop over a whole axis) overflows that count and is written out
whole, the compiler's memory growing until the machine's is gone."""


def _check_stages(spec: str, op: Operator) -> None:
    """Every stage the output is computed from is a ``te.compute`` or one of the inputs: a
    stage of hand-written loops (``te.extern``: TOPI's sort, top-k and cumsum) has no loop nest
    to derive a space from, a placeholder missing from the inputs is an argument the kernel
    would not take, a reduction's ``where`` condition is lost on the way to TIR, and an axis
    past ``MAX_ITERATIONS`` would exhaust the compiler's memory."""
    from tvm import te, tirx

    inputs = {t.op for t in op.inputs}
    seen, pending = set(), [op.output.op]
    while pending:
        stage = pending.pop()
        if stage in seen:
            continue
        seen.add(stage)
        if isinstance(stage, te.PlaceholderOp):
            if stage not in inputs:
                raise ValueError(f"operator {spec}: it reads {stage.name}, a te.placeholder that is not among its "
                                 f"inputs ({', '.join(t.op.name for t in op.inputs)}): list it in inputs")
        elif isinstance(stage, te.ComputeOp):
            for axis in [*stage.axis, *stage.reduce_axis]:
                extent = axis.dom.extent
                if isinstance(extent, tirx.IntImm) and extent.value > MAX_ITERATIONS:
                    raise ValueError(f"operator {spec}: axis {axis.var.name} of stage {stage.name} has "
                                     f"{extent.value:,} iterations; at most {MAX_ITERATIONS:,} (2^30 - 1), where "
                                     "TVM's loop unroller overflows and compiles without bound")
            if any(isinstance(value, tirx.Reduce) and not _always(value.condition) for value in stage.body):
                raise ValueError(f"operator {spec}: stage {stage.name} reduces under a condition (where=...), which "
                                 "TVM's te.create_prim_func drops, so its kernels would reduce every term: put the "
                                 "condition in the terms instead (te.if_then_else(condition, term, 0) in a sum)")
            pending.extend(t.op for t in stage.input_tensors)
        else:
            kind = STAGE_KINDS.get(type(stage).__name__, type(stage).__name__)
            raise ValueError(f"operator {spec}: stage {stage.name} is {kind}, not a te.compute: its loops are "
                             "written by hand (as TOPI's sort, top-k and cumsum are), with no loop nest to derive "
                             "a search space from")


def _always(condition: Any) -> bool:
    """Whether a reduction's condition is the constant true of a reduction without ``where``."""
    from tvm import tirx

    return isinstance(condition, tirx.IntImm) and bool(condition.value)


def _check_operator(spec: str, op: Operator) -> None:
    from tvm import te

    tensors = [*op.inputs, op.output] if isinstance(op.inputs, (list, tuple)) else []
    if not op.inputs or not all(isinstance(t, te.Tensor) for t in tensors):
        raise ValueError(f"operator {spec}: inputs must be a non-empty list of te tensors and output a te tensor")
    if any(not isinstance(t.op, te.PlaceholderOp) for t in op.inputs):
        raise ValueError(f"operator {spec}: every input must be a te.placeholder")
    listed = [t.op for t in op.inputs]
    for tensor in op.inputs:
        if listed.count(tensor.op) > 1:
            raise ValueError(f"operator {spec}: input {tensor.op.name} is listed {listed.count(tensor.op)} times among "
                             "its inputs: list each tensor once (the kernel takes each argument once)")
    if isinstance(op.output.op, te.PlaceholderOp):
        raise ValueError(f"operator {spec}: the output must be a te.compute, not an input")
    _check_stages(spec, op)
    for tensor in tensors:
        if tensor.dtype not in DTYPES:
            raise ValueError(f"operator {spec}: tensor {tensor.op.name} is {tensor.dtype}; its tensors may be "
                             f"{', '.join(DTYPES)}")
        if not all(isinstance(d, int) or hasattr(d, "value") for d in tensor.shape):
            raise ValueError(f"operator {spec}: tensor {tensor.op.name} has a symbolic shape; give every "
                             "extent as a number")
    try:
        ranges = index_ranges(tensors)
    except ValueError as e:
        raise ValueError(f"operator {spec}: {e}") from None
    _check_values(spec, op, ranges)
    if not isinstance(op.flops, (int, float)) or isinstance(op.flops, bool) or not op.flops > 0:
        raise ValueError(f"operator {spec}: flops must be a positive number, got {op.flops!r}")
    if op.reference is not None and not callable(op.reference):
        raise ValueError(f"operator {spec}: reference must be a function of the inputs (NumPy arrays)")
    if op.library is not None and not (isinstance(op.library, tuple) and len(op.library) == 2
                                       and isinstance(op.library[0], str) and callable(op.library[1])):
        raise ValueError(f"operator {spec}: library must be (name, function of the inputs returning a call)")


def _check_values(spec: str, op: Operator, ranges: list[tuple[IndexRange, ...]]) -> None:
    """``op.values`` names inputs, once each, that index nothing, and gives each a range its type
    holds: two finite numbers, the first below the second (whole numbers for an integer input,
    the second no less than the first)."""
    if op.values is None:
        return
    if not isinstance(op.values, dict):
        raise ValueError(f"operator {spec}: values must be a dict of input names to (low, high), got "
                         f"{type(op.values).__name__}")
    names = [t.op.name for t in op.inputs]
    for name, given in op.values.items():
        if names.count(name) != 1:
            raise ValueError(f"operator {spec}: values names {name!r}, " + (
                f"which {names.count(name)} inputs are named: give them names of their own" if name in names else
                f"not one of its inputs ({', '.join(names)})"))
        position = names.index(name)
        if ranges[position]:
            found = ranges[position][0]
            raise ValueError(f"operator {spec}: values names {name}, which indexes {found.indexes}: the positions "
                             f"it is drawn among are derived ({found.low}..{found.high}), not given")
        dtype = str(op.inputs[position].dtype)
        pair = isinstance(given, (tuple, list)) and len(given) == 2 and all(
            isinstance(v, numbers.Real) and not isinstance(v, bool) and (isinstance(v, numbers.Integral)
                                                                        or math.isfinite(v)) for v in given)
        if not pair:
            raise ValueError(f"operator {spec}: values[{name!r}] must be (low, high), two finite numbers; "
                             f"got {given!r}")
        low, high = given
        least, greatest = type_range(numpy_dtype(dtype))
        if is_integer(dtype):
            if low != int(low) or high != int(high) or low > high:
                raise ValueError(f"operator {spec}: values[{name!r}] of {dtype} must be two whole numbers, low no "
                                 f"more than high (both drawn); got {given!r}")
        elif not low < high:
            raise ValueError(f"operator {spec}: values[{name!r}] must have low below high (drawn in [low, high)); "
                             f"got {given!r}")
        if low < least or high > greatest:
            raise ValueError(f"operator {spec}: values[{name!r}] = {given!r} leaves {dtype}, which holds "
                             f"{least:g} to {greatest:g}")
