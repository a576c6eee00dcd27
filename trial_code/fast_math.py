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
2-core development machine against 0.2-0.3 for a polynomial the vector units evaluate; a softmax
spent most of its time there and a MatMul's GELU epilogue two thirds of it. They are written as
such polynomials here, the CPU's counterpart of CUDA's fast math (``__expf``), a few units in
the last place from the exact value (``tests/test_fast_math.py`` bounds each over its range), with
IEEE's answers at the edges: infinities, NaN, and subnormal results of ``exp``. Other element
types keep LLVM's intrinsics.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

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
ROUNDING = 12582912.0
"""1.5 * 2^23: added to ``x / ln 2``, the sum's last bit is a unit, so the sum is rounded to the
nearest whole ``n`` and its bits are ``n`` plus those of ``ROUNDING`` (an even number), where a
floor and a conversion to an integer take two more instructions. LLVM keeps the sum and the
difference as written: the kernels are built without its reassociation (``targets.LLVM_FAST_MATH``)."""
EXP_DEGREE = 6
"""exp(f) for |f| <= ln(2) / 2 by a polynomial of this degree (``EXP_POLYNOMIAL``): its error with
float32 coefficients is under a quarter of a unit in the last place, where Taylor's polynomial of
degree 6 is two units off (it needs degree 7, one more multiply-add) and a fit of degree 5 too."""
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


def _clamp_keeping_nan(x: Any, low: float, high: float, dtype: str) -> Any:
    """``x`` within [low, high], NaN kept (a comparison with NaN is false, so it meets neither
    bound): two instructions, a maximum and a minimum, where ``_clamp`` and ``_with_nan`` take five."""
    from tvm import tirx

    above_low = tirx.Select(x < low, _const(low, dtype), x)
    return tirx.Select(above_low > high, _const(high, dtype), above_low)


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


def _exp_polynomial(degree: int) -> tuple[float, ...]:
    """The coefficients, lowest power first, of exp's least-squares fit on Chebyshev points of
    [-ln(2) / 2, ln(2) / 2], close to the best uniform fit, rounded to float32."""
    half = math.log(2) / 2
    points = half * np.cos((2 * np.arange(64) + 1) * np.pi / 128)
    coefficients = np.polynomial.polynomial.polyfit(points, np.exp(points), degree)
    return tuple(float(c) for c in coefficients.astype(np.float32))


EXP_POLYNOMIAL = _exp_polynomial(EXP_DEGREE)


def lower_exp(call: Any) -> Any:
    """float32 ``exp(x)`` as ``2^n exp(f)``, ``x = n ln 2 + f``: ``n`` rounded with ``ROUNDING``,
    ``exp(f)`` by ``EXP_POLYNOMIAL``, ``2^n`` as two powers of two put in the exponent bits (one
    would leave float32's exponent range for the subnormal results). The clamp lets NaN through,
    and every step keeps it (its bits make some power of two, which times NaN is NaN). Other types
    keep LLVM's ``exp``."""
    from tvm import tirx

    found = _float32(call)
    if found is None:
        return tirx.call_llvm_pure_intrin(str(call.ty), "llvm.exp", *call.args)
    x, dtype = found
    integer = dtype.replace("float32", "int32")
    bounded = _clamp_keeping_nan(x, EXP_LOW, EXP_HIGH, dtype)
    rounded = bounded * tirx.const(1 / math.log(2), "float32") + tirx.const(ROUNDING, "float32")
    n = rounded - tirx.const(ROUNDING, "float32")
    f = (bounded - n * tirx.const(LN2_HIGH, "float32")) - n * tirx.const(LN2_LOW, "float32")
    # With b the bits of ``rounded``, n + bits(ROUNDING): floor(n / 2) + 127 is b / 2 + bias, and
    # n - floor(n / 2) + 127 is b - b / 2 + bias.
    bits = tirx.reinterpret(integer, rounded)
    half = tirx.shift_right(bits, tirx.const(1, "int32"))
    bias = tirx.const(127 - _bits(ROUNDING) // 2, "int32")
    return _horner(EXP_POLYNOMIAL, f) * _exponent(half + bias, dtype) * _exponent(bits - half + bias, dtype)


def _bits(value: float) -> int:
    """float32 ``value``'s bits as an integer."""
    return int(np.float32(value).view(np.int32))


def _exponent(biased: Any, dtype: str) -> Any:
    """The float32 whose exponent field is ``biased`` and whose mantissa is 0 (2^(biased - 127)
    for 0 < biased < 255)."""
    from tvm import tirx

    return tirx.reinterpret(dtype, tirx.shift_left(biased, tirx.const(23, "int32")))


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
