"""Which integer inputs of a computation index a tensor, and the values they may then hold.

A gather (an embedding's rows, ``take`` along an axis, a permutation) reads a tensor at
positions another input holds. A trial's random inputs must then be positions inside the tensor
they index, or the kernel reads outside it (wrong numbers on the CPU, a fault on the GPU), and
a program that calls the exported kernel with a position outside it must be told so rather than
get what the memory beyond held. The positions are read from the computation itself: wherever
an integer input's value appears in the index of a load, as ``a * value + b`` with ``a`` a
constant and ``b`` depending on the loop axes only (``table[ids[i], j]``,
``x[i, 2 * idx[j] + 1]``), the values that keep every ``b`` inside the indexed axis are its range, intersected over
its uses of the same part of it (the whole input, or the constant part a load reads: row 0 of
``gather_nd``'s indices for one axis, row 1 for the next). An index the check cannot solve for
the value (two inputs' values added, a clamp, a modulo) must stay inside the axis for every
value the input is drawn with; otherwise it is refused, in one line naming the input, the
tensor and its axis.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import numpy as np

from .precision import integer_range, is_integer, numpy_dtype

TENSOR_LOAD = "te.tensor_load"
"""The operator of a load of a TE tensor (its arguments: the tensor, then one index per axis)."""
BUFFER_LOAD = "ir.TensorLoad"
"""The type of a load of a TIR buffer (TVM 0.27's name for a ``BufferLoad``)."""
ARITHMETIC = {"prim.Add": "__add__", "prim.Sub": "__sub__", "prim.Mul": "__mul__",
              "prim.FloorDiv": "floordiv", "prim.FloorMod": "floormod", "prim.Div": "truncdiv",
              "prim.Mod": "truncmod", "prim.Min": "min", "prim.Max": "max"}
"""The integer index arithmetic an index may use: each node's type and how to rebuild it."""


@dataclass(frozen=True)
class IndexRange:
    """The values the input ``name`` may hold (``low`` to ``high``, both included) at ``where``,
    and what it indexes there."""

    name: str
    low: int
    high: int
    indexes: str
    """The first tensor axis that bounds it, for messages: ``table's axis 0``."""
    where: tuple[int | None, ...] = ()
    """The part of the input one load reads: per axis of the input, a constant position or None
    for every one (TOPI's ``gather_nd`` reads row 0 of its indices for one axis and row 1 for the
    next); empty for the whole input."""

    @property
    def part(self) -> tuple[int | slice, ...]:
        """``where`` as NumPy indexes it."""
        return _numpy_index(self.where)

    @property
    def shown(self) -> str:
        """``where`` as a message writes it: ``[1, :]``, or nothing for the whole input."""
        return "" if all(w is None for w in self.where) else \
            "[" + ", ".join(":" if w is None else str(w) for w in self.where) + "]"

    def check(self, values: np.ndarray) -> None:
        """ValueError naming the input where any of ``values`` (as given, before their conversion
        to the input's type, which would wrap a value past it and turn NaN into any integer) is
        outside the range, or is not a number."""
        held = values[self.part]
        outside = ~((held >= self.low) & (held <= self.high))
        if np.any(outside):
            raise ValueError(f"input {self.name}{self.shown} holds {np.asarray(held)[outside].flat[0]}, outside "
                             f"{self.low}..{self.high}, the positions of {self.indexes} it indexes")


def _numpy_index(where: tuple[int | None, ...]) -> tuple[int | slice, ...]:
    """A part of an input (``IndexRange.where``) as NumPy indexes it."""
    return tuple(slice(None) if w is None else w for w in where)


def bounds(ranges: tuple[IndexRange, ...], shape: tuple[int, ...], dtype: np.dtype
           ) -> tuple[np.ndarray, np.ndarray] | None:
    """Each element's least and greatest value (arrays of ``shape``) for an input of ``dtype`` held
    to ``ranges``: every range over the part it bounds, the values of ``precision.integer_range``
    elsewhere; None where ``ranges`` is empty."""
    if not ranges:
        return None
    default = integer_range(dtype)
    low, high = np.full(shape, default[0], np.int64), np.full(shape, default[1], np.int64)
    covered = np.zeros(shape, bool)
    for found in ranges:
        part = found.part
        low[part] = np.where(covered[part], np.maximum(low[part], found.low), found.low)
        high[part] = np.where(covered[part], np.minimum(high[part], found.high), found.high)
        covered[part] = True
    return low, high


def index_ranges(tensors: list[Any]) -> list[tuple[IndexRange, ...]]:
    """For each input of the TE ``tensors`` (the inputs, then the output): the values it may hold
    where it indexes a tensor, one range for each part of it a load reads (empty where it indexes
    nothing). ValueError, one line, where an input indexes a tensor in a way no value of its type
    or no checkable range keeps inside the tensor."""
    from tvm import te

    inputs, output = tensors[:-1], tensors[-1]
    integer = {t.op: t for t in inputs if is_integer(str(t.dtype))}
    if not integer:
        return [()] * len(inputs)
    solved: dict[tuple[Any, tuple[int | None, ...]], IndexRange] = {}
    unsolved: list[tuple[Any, dict[Any, Any], list[tuple[Any, Any]], int, str]] = []
    for op, axes in _stages(output, te):
        for tensor, indices in _loads(op):
            for axis, index in enumerate(indices):
                extent = int(tensor.shape[axis])
                where = f"{tensor.op.name}'s axis {axis}"
                try:
                    expr, values = _abstract(index, integer)
                except _Opaque:
                    if _reads_integers(index):
                        raise ValueError(f"{where} is indexed through an integer tensor's value in a way "
                                         "the check cannot bound (a reduction's value, a float, a condition): "
                                         "index by an input's value in integer arithmetic, clamped with te.max "
                                         "and te.min where it may leave the axis") from None
                    continue  # an index of the axes alone, or of floats, which no integer input decides
                if not values:
                    continue
                found = _solve(expr, values, axes, extent, where) if len(values) == 1 else None
                if found is None:
                    unsolved.append((expr, values, axes, extent, where))
                    continue
                (placeholder, _), = values.values()
                key = (placeholder, found.where)
                known = solved.get(key)
                if known is not None:
                    found = replace(known, low=max(known.low, found.low), high=min(known.high, found.high))
                solved[key] = found
    found_ranges: dict[Any, tuple[IndexRange, ...]] = {}
    for (placeholder, _), found in solved.items():
        info = np.iinfo(numpy_dtype(str(integer[placeholder].dtype)))
        found_ranges[placeholder] = (*found_ranges.get(placeholder, ()),
                                     replace(found, low=max(found.low, int(info.min)), high=min(found.high, int(info.max))))
    held = {}
    for placeholder, ranges in found_ranges.items():
        tensor = integer[placeholder]
        low, high = bounds(ranges, tuple(int(d) for d in tensor.shape), numpy_dtype(str(tensor.dtype)))
        if np.any(low > high):
            raise ValueError(f"input {placeholder.name} ({tensor.dtype}) indexes {ranges[0].indexes}, but no value of "
                             "it keeps the index inside that axis")
        held[placeholder] = (low, high)
    for expr, values, axes, extent, where in unsolved:
        _check_within(expr, values, axes, integer, held, extent, where)
    return [found_ranges.get(t.op, ()) for t in inputs]


class _Opaque(Exception):
    """An index expression outside the arithmetic the check reads (``ARITHMETIC``)."""


def _stages(output: Any, te: Any) -> Iterator[tuple[Any, list[tuple[Any, Any]]]]:
    """Each compute stage of the computation, with its axes' variables and ranges."""
    seen, stack = set(), [output]
    while stack:
        tensor = stack.pop()
        if not isinstance(tensor.op, te.ComputeOp) or tensor.op in seen:
            continue
        seen.add(tensor.op)
        yield tensor.op, [(axis.var, axis.dom) for axis in (*tensor.op.axis, *tensor.op.reduce_axis)]
        stack.extend(tensor.op.input_tensors)


def _loads(op: Any) -> Iterator[tuple[Any, list[Any]]]:
    """Every load of a tensor in ``op``'s body, nested ones included: the tensor and its indices."""
    for body in op.body:
        for node in _nodes(body):
            if _is_load(node):
                yield node.args[0], list(node.args[1:])


def _nodes(expr: Any) -> Iterator[Any]:
    """Every expression node of ``expr``, itself included (a load's indices, not its tensor)."""
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        if _is_load(node):
            stack.extend(node.args[1:])
            continue
        for field in type(node).__tvm_ffi_type_info__.fields:
            value = getattr(node, field.name)
            if _is_expression(value):
                stack.append(value)
            elif type(value).__name__ == "Array":
                stack.extend(v for v in value if _is_expression(v))


def _is_expression(value: Any) -> bool:
    from tvm import ir, te

    return isinstance(value, ir.Expr) and not isinstance(value, (te.Tensor, ir.Op))


def _is_load(node: Any) -> bool:
    op = getattr(node, "op", None)
    return type(node).__tvm_ffi_type_info__.type_key == "ir.Call" and getattr(op, "name", None) == TENSOR_LOAD


def _abstract(index: Any, integer: dict[Any, Any]) -> tuple[Any, dict[Any, Any]]:
    """``index`` in 64-bit arithmetic with each load of an integer input replaced by a variable
    standing for its value, and which input and which part of it (``IndexRange.where``) each
    variable stands for. A load of an integer
    element-wise stage is replaced by what it computes (``pos[i]`` of ``pos = ids[i] + 1``), and
    integer casts are dropped: a position inside an axis fits every integer type that indexes it.
    _Opaque where the index reads anything else (a reduction's value, a float, a conditional)."""
    from tvm import te, tirx

    values: dict[Any, Any] = {}

    def rebuilt(node: Any, axes: dict[Any, Any]) -> Any:
        key = type(node).__tvm_ffi_type_info__.type_key
        if _is_load(node):
            tensor = node.args[0]
            if tensor.op in integer:
                variable = tirx.Var(f"{tensor.op.name}_value", "int64")
                values[variable] = (tensor.op, tuple(int(i.value) if type(i).__tvm_ffi_type_info__.type_key ==
                                                     "ir.IntImm" else None for i in node.args[1:]))
                return variable
            op = tensor.op
            if not (isinstance(op, te.ComputeOp) and is_integer(str(tensor.dtype)) and not op.reduce_axis):
                raise _Opaque
            inner = {axis.var: rebuilt(i, axes) for axis, i in zip(op.axis, node.args[1:])}
            return rebuilt(op.body[tensor.value_index], inner)
        if key == "ir.IntImm":
            return tirx.const(int(node.value), "int64")
        if key in ("ir.Var", "tirx.Var"):
            if node in axes:
                return axes[node]
            return node if str(node.ty) == "int64" else tirx.Cast("int64", node)
        if key == "prim.Cast" and is_integer(str(node.ty)) and is_integer(str(node.value.ty)):
            return rebuilt(node.value, axes)
        if key in ARITHMETIC:
            a, b = rebuilt(node.a, axes), rebuilt(node.b, axes)
            name = ARITHMETIC[key]
            return getattr(a, name)(b) if name.startswith("__") else getattr(tirx, name)(a, b)
        raise _Opaque

    return rebuilt(index, {}), values


def reads_memory(expr: Any) -> bool:
    """Whether ``expr`` (a TE or TIR expression: a region's start, an index) reads a value from a
    tensor or buffer, as a gather's index does: no range of the loop axes bounds it."""
    return any(_is_load(node) or type(node).__tvm_ffi_type_info__.type_key == BUFFER_LOAD for node in _nodes(expr))


def _reads_integers(index: Any) -> bool:
    """Whether ``index`` reads any integer tensor (an input, or a stage computed from inputs)."""
    return any(_is_load(node) and is_integer(str(node.args[0].dtype)) for node in _nodes(index))


def _solve(expr: Any, values: dict[Any, Any], axes: list[tuple[Any, Any]], extent: int,
           where: str) -> IndexRange | None:
    """Where ``expr`` is ``a * value + b``, a a constant: the values of the input's part that keep
    it in ``[0, extent)`` for every ``b`` the axes reach; else None."""
    from tvm import tirx
    from tvm.sym.pattern import detect_linear_equation

    (variable, (placeholder, part)), = values.items()
    linear = detect_linear_equation(expr, [variable])
    if len(linear) != 2 or not isinstance(linear[0], tirx.IntImm) or int(linear[0]) == 0:
        return None
    base = _analyzer(axes).const_int_bound(linear[1])
    scale = int(linear[0])
    # a * value + b in [0, extent) for every b the axes reach: a * value in [-least b, extent - 1 - greatest b]
    first, last = Fraction(-base.min_value, scale), Fraction(extent - 1 - base.max_value, scale)
    if scale < 0:
        first, last = last, first
    return IndexRange(placeholder.name, math.ceil(first), math.floor(last), where, part)


def _analyzer(axes: list[tuple[Any, Any]]) -> Any:
    """TVM's arithmetic analyzer with each axis variable bound to its range."""
    from tvm.sym.analyzer import Analyzer

    analyzer = Analyzer()
    for var, dom in axes:
        analyzer.bind(var, dom)
    return analyzer


def _check_within(expr: Any, values: dict[Any, Any], axes: list[tuple[Any, Any]], integer: dict[Any, Any],
                  held: dict[Any, tuple[np.ndarray, np.ndarray]], extent: int, where: str) -> None:
    """ValueError unless ``expr`` stays in ``[0, extent)`` for every value each input's part is
    drawn from (``held``: the solved inputs' element bounds; the others' ``integer_range``)."""
    from tvm.ir import Range

    analyzer = _analyzer(axes)
    for variable, (placeholder, part) in values.items():
        if placeholder in held:
            at = _numpy_index(part)
            low, high = int(held[placeholder][0][at].min()), int(held[placeholder][1][at].max())
        else:
            low, high = integer_range(numpy_dtype(str(integer[placeholder].dtype)))
        analyzer.bind(variable, Range(low, high + 1))
    reach = analyzer.const_int_bound(expr)
    if reach.min_value < 0 or reach.max_value >= extent:
        names = " and ".join(sorted({p.name for p, _ in values.values()}))
        raise ValueError(f"{names} index {where} through an expression the check cannot solve for "
                         f"{'their' if len(values) > 1 else 'its'} values and that leaves [0, {extent}): "
                         "index by a constant times one input's value plus the axes, or clamp the index "
                         "with te.max and te.min")
