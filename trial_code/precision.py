"""The element types a kernel's tensors may have, and how closely a kernel computing in them must
match the float64 reference.

A user's operator may take and give float16, bfloat16, float32 or float64 tensors, or integers of
8 to 64 bits, and compute its stages in any of them (float16 inputs summed in float32, written
back as float16, is the usual mixed precision; int8 products summed in int32, a quantized
layer's). A computation in integers alone is checked exactly. Otherwise the check against the
reference (``measure.verify``), which exists to catch a wrong schedule that misses or repeats
whole partial sums, must still let through what a correct kernel's own rounding does. In
float32 and float64 that is far below ``RELATIVE_TOLERANCE``; each stage computed in a narrower
type adds its own share, by how rounding errors grow: a few units of its rounding for an
element-wise stage, and for a reduction of ``n`` terms a random walk of ``n`` roundings of
partial sums, about ``sqrt(n)`` units of the result's scale (Higham, *Accuracy and Stability of
Numerical Algorithms*, ch. 4), times a margin that a correct sum does not reach.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

FLOATS = ("float16", "bfloat16", "float32", "float64")
INTEGERS = ("int8", "uint8", "int16", "int32", "int64")
DTYPES = FLOATS + INTEGERS
"""The element types of a user's operator's tensors (``operators.Operator``)."""
INTEGER_INPUTS = 8
"""Integer inputs are drawn in [-8, 8), unsigned ones in [0, 16): int8 products summed in int32
stay exact for 2^25 terms, and the float64 reference computes them exactly. An input the
computation indexes a tensor by is drawn from the positions inside it instead (``indices``)."""
RELATIVE_TOLERANCE = 1e-3
"""Of each output element's scale: float32's and float64's rounding is far below it, and a wrong
tile misses whole partial sums."""
UNIT_ROUNDOFF = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}
"""Half the distance from 1 to the next number, of the types whose rounding ``RELATIVE_TOLERANCE``
does not already cover."""
ELEMENT_WISE_UNITS = 2.0
"""An element-wise stage's rounding: its own result's and its argument's, rounded before it."""
SUM_SPREAD = 4.0
"""A reduction's rounding errors, in units of ``sqrt(terms)`` roundings: four standard
deviations of their random walk."""
FLOAT_TYPE = re.compile(r"\b(b?float(16|32|64))\b")
"""A float type named in TVMScript (a buffer's, a cast's, a constant's)."""


@dataclass(frozen=True)
class Tolerance:
    """An output element passes when it is within ``relative`` of its scale (the sum of absolute
    products behind it) plus ``absolute`` of the reference."""

    relative: float
    absolute: float


FLOAT_FLOOR = 1e-6
"""A float output's absolute tolerance: a value whose terms cancel to about zero."""
ROUNDED_TO_INTEGER = 1.0
"""An integer output computed through floats (a quantized result, rounded): one unit either way,
where float rounding puts a value on the other side of a rounding boundary."""


def numpy_dtype(name: str) -> np.dtype:
    """NumPy's type for one of ``DTYPES`` (bfloat16 is ml_dtypes', which TVM reads and writes)."""
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def itemsize(name: str) -> int:
    """Bytes of one element of ``name`` (a TVM or NumPy type name)."""
    return numpy_dtype(name).itemsize


def stage_types(output: Any) -> list[tuple[str, int]]:
    """Each stage the TE tensor ``output`` is computed in (itself and every computed tensor it
    reads, not the inputs): its element type and the terms each of its values reduces (0 for an
    element-wise stage)."""
    from tvm import te
    from tvm.sym.analyzer import Analyzer

    bounds = Analyzer()
    found, seen, stack = [], set(), [output]
    while stack:
        tensor = stack.pop()
        if not isinstance(tensor.op, te.ComputeOp) or tensor.op in seen:
            continue
        seen.add(tensor.op)
        axes = tensor.op.reduce_axis
        # An extent as TOPI writes it may be an expression (a pooling window's end less its
        # start), even one of the output's index: its greatest value over the output's axes.
        for axis in tensor.op.axis:
            bounds.bind(axis.var, axis.dom, allow_override=True)
        terms = math.prod(bounds.const_int_bound(axis.dom.extent).max_value for axis in axes)
        found.append((str(tensor.dtype), terms if axes else 0))
        stack.extend(tensor.op.input_tensors)
    return found


def is_integer(name: str) -> bool:
    """Whether ``name`` is one of the integer ``DTYPES``."""
    return name in INTEGERS


def integer_range(dtype: np.dtype) -> tuple[int, int]:
    """The least and greatest value an integer input is drawn with (``INTEGER_INPUTS``)."""
    low = 0 if np.issubdtype(dtype, np.unsignedinteger) else -INTEGER_INPUTS
    return low, low + 2 * INTEGER_INPUTS - 1


def type_range(dtype: np.dtype) -> tuple[float, float]:
    """The least and greatest finite value of ``dtype`` (bfloat16's through ml_dtypes)."""
    if np.issubdtype(dtype, np.integer):
        return int(np.iinfo(dtype).min), int(np.iinfo(dtype).max)
    import ml_dtypes

    found = ml_dtypes.finfo(dtype)
    return float(found.min), float(found.max)


def random_inputs(inputs: list[tuple[tuple[int, ...], np.dtype]], rng: np.random.Generator,
                  ranges: list[tuple[Any, Any] | None] | None = None) -> list[np.ndarray]:
    """Inputs of the given shapes and types: floats uniform in their ``ranges`` entry [low, high)
    or else [-1, 1) (float32 and float64 drawn in their type, float16 and bfloat16 drawn as
    float32 and rounded, so the reference starts from exactly the values the kernel reads),
    integers uniform in their ``ranges`` entry (least and greatest, numbers or arrays of each
    element's: the positions an index may hold, ``indices.bounds``) or else ``integer_range``."""
    found = []
    for (shape, dtype), given in zip(inputs, ranges or [None] * len(inputs)):
        if np.issubdtype(dtype, np.integer):
            low, high = given or integer_range(dtype)
            found.append(rng.integers(low, high, shape, dtype=dtype, endpoint=True))
        else:
            low, high = given or (-1.0, 1.0)
            drawn = rng.random(shape, dtype=np.float64 if dtype == np.float64 else np.float32)
            found.append((drawn * (high - low) + low).astype(dtype))
    return found


def poison(dtype: np.dtype) -> tuple[Any, Any]:
    """Two values to fill an output with before a run: an element still holding the first, filled
    with the second for a second run and still holding that, was never written. For floats NaN
    (what the check refuses in any case) and the greatest finite value, which tells an element
    left unwritten from one the kernel computed as NaN; for integers, which have no NaN, the least
    and the greatest."""
    least, greatest = type_range(dtype)
    if np.issubdtype(dtype, np.integer):
        return least, greatest
    return np.nan, greatest



def tolerance(tensors: list[Any]) -> Tolerance:
    """How closely a kernel computing the TE ``tensors`` (the inputs, then the output) must match
    the float64 reference: exactly where no value of the computation is a float (its TVMScript,
    which names the type of every buffer, cast and constant, names none); else
    ``RELATIVE_TOLERANCE`` plus each stage's share by its type (``UNIT_ROUNDOFF``), an element-wise
    stage ``ELEMENT_WISE_UNITS`` units and a reduction of ``n`` terms ``SUM_SPREAD * sqrt(n)``, and
    an absolute floor by the output's type."""
    from tvm import te

    output = tensors[-1]
    stages = stage_types(output)
    # The stages' types first: the script is made only where they are all integers.
    if all(is_integer(dtype) for dtype, _ in stages) and not FLOAT_TYPE.search(te.create_prim_func(tensors).script()):
        return Tolerance(0.0, 0.0)
    relative = RELATIVE_TOLERANCE + sum(
        UNIT_ROUNDOFF.get(dtype, 0.0) * (SUM_SPREAD * math.sqrt(terms) if terms else ELEMENT_WISE_UNITS)
        for dtype, terms in stages)
    return Tolerance(relative, ROUNDED_TO_INTEGER if is_integer(str(output.dtype)) else FLOAT_FLOOR)
