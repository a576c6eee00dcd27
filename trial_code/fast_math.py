"""How TVM lowers powers, ``exp`` and ``erf`` in the kernels built here.

Powers by a whole number, both targets: TVM compiles every CUDA kernel with ``--use_fast_math``
(NVRTC always, nvcc unless an environment variable says otherwise), and fast math turns
``powf(x, y)`` into ``__powf``, which is ``exp2(y * log2(x))``: NaN for every negative ``x``, even
where ``y`` is 2. A computation that squares a difference, as a layer norm's variance does with
``te.power(x - mean, 2.0)``, then gives NaN for half its elements on the GPU while the CPU and the
float64 reference agree; on the CPU, LLVM calls the C library's ``powf`` once per vector lane for
any whole power but 2 (a tanh GELU's cube). So a power whose exponent is a constant whole number
of at most ``MAX_EXPONENT`` is written out as multiplications (a negative one as the reciprocal of
them), exact for every sign and faster; any other power is left to TVM's own lowering.

``exp`` and ``erf`` of float32 on the CPU: LLVM has no vector form of either, so a vectorized
loop calls the C library's ``expf`` or ``erff`` once per lane, about 2 and 3 ns per element on the
2-core development machine against 0.3 for a polynomial the vector units evaluate; a softmax
spent most of its time there and a MatMul's GELU epilogue two thirds of it. They are written as
such polynomials here, the CPU's counterpart of CUDA's fast math (``__expf``), a few units in
the last place from the exact value (``tests/test_fast_math.py`` bounds each over its range), with
IEEE's answers at the edges: infinities, NaN, and subnormal results of ``exp``. Other element
types keep LLVM's intrinsics.
"""
from __future__ import annotations

import math
from typing import Any

MAX_EXPONENT = 8
"""The largest whole exponent written out (one multiplication fewer than it in the kernel)."""
PRIORITY = 20
"""Above TVM's own lowerings (priority 10), which these thus replace."""

EXP_LOW, EXP_HIGH = -104.0, 89.0
"""The arguments are clamped to these: float32's exp of the one is 0 (its least subnormal is
exp(-103.28)) and of the other infinite (ln of the largest float32 is 88.7228), so the polynomial
gives every argument beyond them its answer too."""
LN2_HIGH, LN2_LOW = 0.693359375, -2.12194440e-4
"""ln 2 in two parts (Cody and Waite): ``n * LN2_HIGH`` is exact for the ``n`` that occur, so the
reduced argument keeps float32's precision."""
EXP_TAYLOR = tuple(1 / math.factorial(k) for k in range(8))
"""exp(f) for |f| <= ln(2) / 2 by its Taylor polynomial of degree 7: the remainder, below
f^8 / 8!, is under a tenth of float32's unit in the last place."""
ERF_CLAMP = 4.0
"""float32's erf is +-1 beyond +-3.92."""
ERF_NUMERATOR = (1.128379095, 0.20728615878, 0.051546987813, 0.0039984894399, 0.00014753761935,
                 -1.9442844938e-06, 1.9121462514e-08)
ERF_DENOMINATOR = (1.0, 0.51703382502, 0.11803797325, 0.014972956025, 0.0010232559236)
"""erf(x) = x P(x^2) / Q(x^2) on |x| <= 4, coefficients from the lowest power: a least-squares fit
of the relative error reweighted toward its largest values (Lawson's iteration), 8e-8 from erf
in float64."""


def lower_power(call: Any) -> Any:
    """``pow(x, n)`` for a constant whole ``n`` with 0 < abs(n) <= MAX_EXPONENT as ``x * ... * x``
    (``1 / (x * ... * x)`` for a negative ``n``), ``pow(x, 0)`` as 1; any other call as it is,
    which CUDA's code generator writes as ``powf``."""
    product = _whole_power(call)
    return call if product is None else product


def lower_power_llvm(call: Any) -> Any:
    """``lower_power`` on the CPU, where any other power is LLVM's ``pow``."""
    from tvm import tirx

    product = _whole_power(call)
    return tirx.call_llvm_pure_intrin(str(call.ty), "llvm.pow", *call.args) if product is None else product


def _whole_power(call: Any) -> Any | None:
    from tvm import tirx

    base, exponent = call.args
    if isinstance(exponent, tirx.Broadcast):  # a vectorized loop's power
        exponent = exponent.value
    if not isinstance(exponent, (tirx.FloatImm, tirx.IntImm)) or not float(exponent.value).is_integer() \
            or abs(exponent.value) > MAX_EXPONENT:
        return None
    power = int(exponent.value)
    one = tirx.const(1.0, str(call.ty))
    if power == 0:
        return one
    product = base
    for _ in range(abs(power) - 1):
        product = product * base
    return product if power > 0 else one / product


def _float32(call: Any) -> tuple[Any, str] | None:
    """The argument and the type (``float32`` or ``float32xN``) of a one-argument float32 call;
    None for other element types."""
    dtype = str(call.ty)
    return (call.args[0], dtype) if dtype.partition("x")[0] == "float32" else None


def _const(value: float, dtype: str) -> Any:
    """A float32 constant of ``dtype``'s lanes (a ``Select``'s sides take no scalar for a vector)."""
    from tvm import tirx

    element, _, lanes = dtype.partition("x")
    scalar = tirx.const(value, element)
    return tirx.Broadcast(scalar, int(lanes)) if lanes else scalar


def _clamp(x: Any, low: float, high: float, dtype: str) -> Any:
    """``x`` within [low, high], NaN taken as ``high`` (a comparison with NaN is false): the
    polynomials then never see NaN, whose conversion to an integer LLVM leaves undefined."""
    from tvm import tirx

    return tirx.Select(x < high, tirx.Select(x > low, x, _const(low, dtype)), _const(high, dtype))


def _horner(coefficients: tuple[float, ...], x: Any) -> Any:
    from tvm import tirx

    value = tirx.const(coefficients[-1], "float32")
    for c in reversed(coefficients[:-1]):
        value = value * x + tirx.const(c, "float32")
    return value


def _with_nan(x: Any, value: Any) -> Any:
    """``value``, or NaN where ``x`` is NaN."""
    from tvm import tirx

    return tirx.Select(tirx.isnan(x), x, value)


def lower_exp(call: Any) -> Any:
    """float32 ``exp(x)`` as ``2^n exp(f)``, ``x = n ln 2 + f``: ``exp(f)`` by ``EXP_TAYLOR``, ``2^n``
    as two powers of two put in the exponent bits (one would leave float32's exponent range for
    the subnormal results). Other types keep LLVM's ``exp``."""
    from tvm import tirx

    found = _float32(call)
    if found is None:
        return tirx.call_llvm_pure_intrin(str(call.ty), "llvm.exp", *call.args)
    x, dtype = found
    reduced = _clamp(x, EXP_LOW, EXP_HIGH, dtype)
    n = tirx.floor(reduced * tirx.const(1 / math.log(2), "float32") + tirx.const(0.5, "float32"))
    f = (reduced - n * tirx.const(LN2_HIGH, "float32")) - n * tirx.const(LN2_LOW, "float32")
    whole = tirx.Cast(dtype.replace("float32", "int32"), n)
    half = tirx.shift_right(whole, tirx.const(1, "int32"))
    return _with_nan(x, _horner(EXP_TAYLOR, f) * _power_of_two(half, dtype) * _power_of_two(whole - half, dtype))


def _power_of_two(n: Any, dtype: str) -> Any:
    """2^n for whole ``n`` within float32's normal exponents, from its bits."""
    from tvm import tirx

    return tirx.reinterpret(dtype, tirx.shift_left(n + tirx.const(127, "int32"), tirx.const(23, "int32")))


def lower_erf(call: Any) -> Any:
    """float32 ``erf(x)`` as ``x P(x^2) / Q(x^2)`` (``ERF_NUMERATOR``, ``ERF_DENOMINATOR``) with ``x``
    within +-``ERF_CLAMP``, kept within [-1, 1]. Other types keep TVM's own lowering (the C
    library's ``erf``)."""
    from tvm import tirx

    found = _float32(call)
    if found is None:
        return tirx.call_pure_extern(str(call.ty), "erf" if str(call.ty).startswith("float64") else "erff",
                                     *call.args)
    x, dtype = found
    bounded = _clamp(x, -ERF_CLAMP, ERF_CLAMP, dtype)
    square = bounded * bounded
    value = bounded * _horner(ERF_NUMERATOR, square) / _horner(ERF_DENOMINATOR, square)
    return _with_nan(x, tirx.Select(value > 1.0, _const(1.0, dtype), tirx.Select(value < -1.0, _const(-1.0, dtype), value)))


def register(tvm: Any) -> None:
    """Make these TVM's lowerings in this process: whole powers on both targets, ``exp`` and
    ``erf`` on the CPU."""
    register_intrin = tvm.tirx.op.register_intrin_lowering
    register_intrin("tirx.pow", "cuda", f=lower_power, level=PRIORITY)
    register_intrin("tirx.pow", "llvm", f=lower_power_llvm, level=PRIORITY)
    register_intrin("tirx.exp", "llvm", f=lower_exp, level=PRIORITY)
    register_intrin("tirx.erf", "llvm", f=lower_erf, level=PRIORITY)
