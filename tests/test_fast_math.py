"""The CPU kernels' ``exp`` and ``erf`` (``trial_code.fast_math``), built by TVM as the trials build
them: within a few units in the last place of float64's values over float32's whole range, IEEE's
answers at the edges, evaluated in the vector units (no call to the C library in a vectorized
loop), other element types left to the library; and whole powers written out on the CPU too."""
from __future__ import annotations

import re

import numpy as np
import pytest
from scipy.special import erf

from trial_code import kernel
from trial_code.targets import cpu

tvm = kernel.tvm
from tvm import s_tir, te, tirx  # noqa: E402

EDGES = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-30, 1e-10, 88.72, 88.73, -87.5, -103.0, -104.5,
                  -200.0, 3.9, -4.5, 5.0], np.float32)


def _built(function, dtype: str, lanes: int, size: int) -> tuple[object, str]:
    """``function`` of each element of a vector of ``size``, its loop vectorized by ``lanes``."""
    x = te.placeholder((size,), dtype, name="x")
    y = te.compute((size,), lambda i: function(x[i]), name="y")
    sch = s_tir.Schedule(te.create_prim_func([x, y]))
    if lanes > 1:
        (loop,) = sch.get_loops(sch.get_sblock("y"))
        sch.vectorize(sch.split(loop, [None, lanes])[1])
    executable = kernel.build(sch.mod, kernel.for_host(cpu()))
    return executable, kernel.source(executable, cpu())


def _apply(function, values: np.ndarray, lanes: int) -> tuple[np.ndarray, str]:
    executable, source = _built(function, str(values.dtype), lanes, len(values))
    out = tvm.runtime.tensor(np.zeros_like(values))
    executable["main"](tvm.runtime.tensor(values), out)
    return out.numpy(), source


def _ulps(found: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """|found - exact| in units of float32's last place at ``exact``."""
    return np.abs(found.astype(np.float64) - exact) / np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)


@pytest.mark.parametrize("lanes", [1, 16])
def test_exp_is_within_two_units_in_the_last_place_and_subnormals_are_kept(lanes):
    values = np.linspace(-110.0, 88.7, 1_000_000, dtype=np.float32)
    found, _ = _apply(tirx.exp, values, lanes)
    exact = np.exp(values.astype(np.float64))
    normal = exact >= np.finfo(np.float32).tiny
    assert _ulps(found[normal], exact[normal]).max() <= 2.0
    assert np.abs(found[~normal] - exact[~normal]).max() <= 2 * np.finfo(np.float32).smallest_subnormal


@pytest.mark.parametrize("lanes", [1, 16])
def test_erf_is_within_eight_units_in_the_last_place_and_never_beyond_one(lanes):
    values = np.concatenate([np.linspace(-6.0, 6.0, 1_000_001, dtype=np.float32),
                             np.float32(1e-3) * np.linspace(-1.0, 1.0, 10_001, dtype=np.float32)])
    found, _ = _apply(tirx.erf, values, lanes)
    exact = erf(values.astype(np.float64))
    assert _ulps(found[values != 0], exact[values != 0]).max() <= 8.0
    assert np.abs(found).max() <= 1.0


@pytest.mark.parametrize("function, exact", [(tirx.exp, np.exp), (tirx.erf, erf)], ids=["exp", "erf"])
@pytest.mark.parametrize("lanes", [1, 17])
def test_the_edges_are_ieees(function, exact, lanes):
    """NaN stays NaN, infinities and zeros come out as IEEE says (17 lanes: a loop's tail too)."""
    found, _ = _apply(function, EDGES, lanes)
    with np.errstate(over="ignore"):
        rounded = exact(EDGES.astype(np.float64)).astype(np.float32)  # float32's answer: inf beyond its largest
    np.testing.assert_allclose(found, rounded, rtol=1e-6, atol=np.finfo(np.float32).smallest_subnormal)
    numbers = ~np.isnan(EDGES)
    assert np.array_equal(np.isnan(found), ~numbers) and np.array_equal(np.signbit(found[numbers]),
                                                                       np.signbit(rounded[numbers]))  # erf(-0) is -0


@pytest.mark.parametrize("function", [tirx.exp, tirx.erf], ids=["exp", "erf"])
def test_every_nan_stays_nan(function):
    """Quiet and signalling NaNs of either sign and any payload: the exponential's rounding and
    powers of two are made from its bits, and NaN's bits must not make a number."""
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FA00000],
                    np.uint32).view(np.float32)
    for lanes in (1, 16):
        found, _ = _apply(function, np.tile(nans, 3), lanes)
        assert np.isnan(found).all(), found


@pytest.mark.parametrize("function, library", [(tirx.exp, "expf"), (tirx.erf, "erff"), (tirx.tanh, "expf"),
                                               (tirx.sigmoid, "expf")], ids=["exp", "erf", "tanh", "sigmoid"])
def test_a_vectorized_loop_computes_in_the_vector_units(function, library):
    """LLVM has no vector ``exp`` or ``erf``: a call in a vectorized loop is one call per lane."""
    _, source = _built(function, "float32", 16, 4096)
    calls = set(re.findall(r"call [^@]*@([\w.]+)", source))
    assert library not in calls and not any(c.startswith(("llvm.exp", "erf")) for c in calls), calls


def test_other_element_types_keep_the_librarys_functions():
    values = np.linspace(-20.0, 20.0, 4001)
    for function, exact in ((tirx.exp, np.exp), (tirx.erf, erf)):
        found, _ = _apply(function, values, 8)
        np.testing.assert_allclose(found, exact(values), rtol=1e-15, atol=1e-300)


def test_whole_powers_are_written_out_in_vectorized_loops_and_exact_for_negative_bases():
    """A tanh GELU's cube: LLVM would call ``powf`` once per lane."""
    values = np.linspace(-3.0, 3.0, 4096, dtype=np.float32)
    found, source = _apply(lambda v: tirx.pow(v, tirx.const(3.0, "float32")) + tirx.pow(v, tirx.const(-2.0, "float32")),
                           values, 16)
    assert "llvm.pow" not in source and "powf" not in source
    np.testing.assert_allclose(found, values.astype(np.float64) ** 3 + values.astype(np.float64) ** -2.0, rtol=1e-6,
                               atol=1e-5)
    found, source = _apply(lambda v: tirx.pow(v, tirx.const(1.5, "float32")), np.abs(values), 16)
    assert "llvm.pow" in source  # any other power stays LLVM's
    np.testing.assert_allclose(found, np.abs(values).astype(np.float64) ** 1.5, rtol=1e-6)


@pytest.mark.parametrize("lanes", [1, 16])
def test_a_cpu_kernel_divides_by_a_constant_as_a_multiplication_by_its_reciprocal(lanes):
    """A mean's ``x / n`` (``trial_code.targets.LLVM_FAST_MATH``): no division left in the kernel,
    each value within 1.5 units in the last place of the exact quotient."""
    values = np.linspace(-1e6, 1e6, 100_003, dtype=np.float32)
    found, source = _apply(lambda x: x / tirx.const(768.0, "float32"), values, lanes)
    assert "fdiv" not in source and "fmul" in source
    exact = values.astype(np.float64) / 768.0
    nonzero = exact != 0
    assert _ulps(found[nonzero], exact[nonzero]).max() <= 1.5
