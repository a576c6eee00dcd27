"""Powers by a whole number written out as multiplications in CUDA kernels.

TVM compiles every CUDA kernel with ``--use_fast_math`` (NVRTC always, nvcc unless an environment
variable says otherwise), and fast math turns ``powf(x, y)`` into ``__powf``, which is
``exp2(y * log2(x))``: NaN for every negative ``x``, even where ``y`` is 2, and a few units in the
last place off elsewhere. A computation that squares a difference, as a layer norm's variance
does with ``te.power(x - mean, 2.0)``, then gives NaN for half its elements on the GPU while the
CPU and the float64 reference agree. So a power whose exponent is a constant whole number of at
most ``MAX_EXPONENT`` is lowered for CUDA into multiplications (a negative one into the reciprocal
of them), exact for every sign and faster; any other power is left to TVM's own lowering.
"""
from __future__ import annotations

from typing import Any

MAX_EXPONENT = 8
"""The largest whole exponent written out (one multiplication fewer than it in the kernel)."""
PRIORITY = 20
"""Above TVM's own CUDA lowering of ``pow`` (priority 10), which it thus replaces."""


def lower_power(call: Any) -> Any:
    """``pow(x, n)`` for a constant whole ``n`` with 0 < abs(n) <= MAX_EXPONENT as ``x * ... * x``
    (``1 / (x * ... * x)`` for a negative ``n``), ``pow(x, 0)`` as 1; any other call as it is,
    which CUDA's code generator then writes as ``powf``."""
    from tvm import tirx

    base, exponent = call.args
    if not isinstance(exponent, (tirx.FloatImm, tirx.IntImm)) or not float(exponent.value).is_integer() \
            or abs(exponent.value) > MAX_EXPONENT:
        return call
    power = int(exponent.value)
    one = tirx.const(1.0, str(call.ty))
    if power == 0:
        return one
    product = base
    for _ in range(abs(power) - 1):
        product = product * base
    return product if power > 0 else one / product


def register(tvm: Any) -> None:
    """Make ``lower_power`` TVM's CUDA lowering of ``pow`` in this process."""
    tvm.tirx.op.register_intrin_lowering("tirx.pow", "cuda", f=lower_power, level=PRIORITY)
