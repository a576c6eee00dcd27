"""A user's operator in float16, bfloat16, float64 and integers (``trial_code.precision``): its
kernels build, run and match the float64 reference on the CPU within a tolerance its types set
(exactly, in integers alone), compile for the GPU without local memory, take inputs of its types
from the cache and from a program, and a wrong or partly unwritten kernel is still a wrong answer."""
from __future__ import annotations

import math
import re
import shutil

import numpy as np
import pytest
from cuda_build import H100, registers_only
from feasible import exported, runs_and_matches

from trial_code import constraint, measure, precision, targets, workloads
from trial_code.evaluate import Limits, evaluate
from trial_code.templates import for_workload

pytestmark = pytest.mark.usefixtures("forked_workers")
NEEDS_NVCC = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (the CUDA toolkit) is not on PATH")
CPU = targets.cpu()

MIXED = """
    import numpy as np
    from tvm import te
    from trial_code.operators import Operator

    def matmul(n=64, k=128, m=64, inputs="float16", sums="float32", output="float16"):
        a = te.placeholder((n, k), inputs, name="A")
        b = te.placeholder((k, m), inputs, name="B")
        r = te.reduce_axis((0, k), name="k")
        c = te.compute((n, m), lambda i, j: te.sum(a[i, r].astype(sums) * b[r, j].astype(sums), axis=r), name="C")
        y = te.compute((n, m), lambda i, j: c[i, j].astype(output), name="Y")
        return Operator([a, b], y, flops=2 * n * m * k, reference=lambda a, b: a @ b)

    def softmax(rows=32, cols=128, dtype="float64"):
        x = te.placeholder((rows, cols), dtype, name="X")
        k, k2 = te.reduce_axis((0, cols), name="k"), te.reduce_axis((0, cols), name="k2")
        top = te.compute((rows,), lambda i: te.max(x[i, k], axis=k), name="top")
        e = te.compute((rows, cols), lambda i, j: te.exp(x[i, j] - top[i]), name="E")
        s = te.compute((rows,), lambda i: te.sum(e[i, k2], axis=k2), name="S")
        def reference(x):
            z = np.exp(x - x.max(axis=1, keepdims=True))
            return z / z.sum(axis=1, keepdims=True)
        return Operator([x], te.compute((rows, cols), lambda i, j: e[i, j] / s[i], name="Y"), flops=4 * rows * cols,
                        reference=reference)

    def dot(n=1 << 14, dtype="float16"):
        x, y = te.placeholder((n,), dtype, name="X"), te.placeholder((n,), dtype, name="Y")
        k = te.reduce_axis((0, n), name="k")
        return Operator([x, y], te.compute((), lambda: te.sum(x[k] * y[k], axis=k), name="S"), flops=2 * n,
                        reference=np.dot)

    def quantize(n=4096, scale=0.01):
        x = te.placeholder((n,), "float32", name="X")
        q = te.compute((n,), lambda i: te.max(te.min(te.round(x[i] / scale), 127.0), -128.0).astype("int8"), name="Q")
        return Operator([x], q, flops=3 * n, reference=lambda x: np.clip(np.round(x / scale), -128, 127))

    def requantize(n=4096, scale=0.37):  # integers in and out, floats between
        x = te.placeholder((n,), "int32", name="X")
        q = te.compute((n,), lambda i: te.round(x[i].astype("float32") * scale).astype("int8"), name="Q")
        return Operator([x], q, flops=2 * n, reference=lambda x: np.round(x * np.float32(scale)))

    def double(n=256, dtype="float16", factor=3):
        x = te.placeholder((n,), dtype, name="X")
        return Operator([x], te.compute((n,), lambda i: x[i] * te.const(2, dtype), name="Y"), flops=n,
                        reference=lambda x: x * factor)
"""
CASES = {  # name -> the operator function, its shape, and the CUDA name of a type of its pointers
    "fp16-in-fp32-sums": ("matmul", {}, "half"),
    "fp16-throughout": ("matmul", {"sums": "float16"}, "half"),
    "bf16-in-fp32-sums": ("matmul", {"inputs": "bfloat16", "output": "bfloat16"}, "nv_bfloat16"),
    "fp64-matmul": ("matmul", {"inputs": "float64", "sums": "float64", "output": "float64"}, "double"),
    "fp64-softmax": ("softmax", {}, "double"),
    "fp16-softmax": ("softmax", {"dtype": "float16"}, "half"),
    "fp16-dot": ("dot", {}, "half"),
    "bf16-dot": ("dot", {"dtype": "bfloat16"}, "nv_bfloat16"),
    "int8-in-int32-sums": ("matmul", {"inputs": "int8", "sums": "int32", "output": "int32"}, "signed char"),
    "int8-dequantized": ("matmul", {"inputs": "int8", "sums": "int32", "output": "float32"}, "signed char"),
    "uint8-in-int32-sums": ("matmul", {"inputs": "uint8", "sums": "int32", "output": "int32"}, "uchar"),
    "int64-dot": ("dot", {"dtype": "int64"}, "int64_t"),
    "quantized-to-int8": ("quantize", {}, "signed char"),
    "requantized": ("requantize", {}, "signed char"),
}


@pytest.fixture
def mixed(operator_module):
    """``mixed``: operators in types other than float32, importable from the test's folder."""
    return operator_module("mixed", MIXED)


def test_the_tolerance_is_float32s_unless_a_stage_computes_in_a_narrower_type_or_in_integers(mixed):
    """float32 and float64 stages leave the check as it was; each float16 or bfloat16 stage adds
    its rounding: an element-wise one two units, a sum of n terms four times sqrt(n) units. A
    computation in integers alone is exact, and an integer rounded from floats may be one off."""
    half, bf16 = 2.0 ** -11, 2.0 ** -8
    float32 = precision.Tolerance(precision.RELATIVE_TOLERANCE, precision.FLOAT_FLOOR)

    def tolerance(name, **shape):
        return precision.tolerance(for_workload(w := mixed(name, **shape)).compute(w))

    assert tolerance("matmul", inputs="float32", output="float32") == float32
    assert tolerance("matmul", inputs="float64", sums="float64", output="float64") == float32
    assert measure.signature(workloads.lookup("MM_small")).tolerance == float32
    assert tolerance("matmul").relative == pytest.approx(1e-3 + 2 * half)
    assert tolerance("matmul", sums="float16").relative == pytest.approx(1e-3 + 4 * math.sqrt(128) * half + 2 * half)
    assert tolerance("matmul", inputs="bfloat16", output="bfloat16").relative == pytest.approx(1e-3 + 2 * bf16)
    assert tolerance("matmul", inputs="int8", sums="int32", output="int32") == precision.Tolerance(0.0, 0.0)
    assert tolerance("matmul", inputs="int8", sums="int32", output="float32") == float32
    assert tolerance("quantize") == tolerance("requantize") == precision.Tolerance(precision.RELATIVE_TOLERANCE, 1.0)


@pytest.mark.slow(seconds=6)
@pytest.mark.parametrize("case", list(CASES))
def test_a_kernel_in_other_types_runs_and_matches_its_reference_on_the_cpu(mixed, case):
    """Two admitted configurations of each, built, run on inputs of its types and checked against
    the float64 reference from exactly those inputs."""
    name, shape, _ = CASES[case]
    workload = mixed(name, **shape)
    for seed in range(2):
        runs_and_matches(workload, CPU, seed)


@pytest.mark.slow(seconds=6)
@NEEDS_NVCC
@pytest.mark.parametrize("case", list(CASES))
def test_a_kernel_in_other_types_compiles_for_the_gpu_without_local_memory(mixed, case):
    """An admitted CUDA configuration of each, through TVM's own nvcc compile: no spill (a
    float64 value counts two registers in the estimate), its loads and sums in its types."""
    name, shape, cuda_type = CASES[case]
    workload = mixed(name, **shape)
    source = registers_only(workload, constraint.draw(workload, H100, 0)[0])
    assert f"{cuda_type}* __restrict__" in source, source[:3000]


def test_a_float64_stage_counts_two_registers_a_value_and_shared_memory_counts_each_inputs_bytes(mixed):
    """The register estimate doubles float64's values; a tile of float16 inputs staged in shared
    memory takes half the bytes of float32's, so the check admits twice the tile."""
    wide, half = mixed("matmul", inputs="float64", sums="float64", output="float64"), mixed("matmul")
    single = mixed("matmul", inputs="float32", output="float32")
    assert for_workload(wide).structure(wide).value_registers == 2
    assert for_workload(half).structure(half).value_registers == for_workload(single).structure(single).value_registers == 1
    assert [f.itemsize for f in for_workload(half).structure(half).inputs] == [2, 2]
    params = {"tile_i": [1, 1, 16, 4], "tile_j": [1, 1, 16, 4], "tile_k": [1, 16, 8], "inner_order": ["i", "j", "k"],
              "unroll": 0, "shared": 1}  # a block's tiles of A and B, 64 x 128 each: 64 KiB in float32, 32 in float16
    with pytest.raises(ValueError, match="shared memory bytes per block 65536 exceeds the limit 49152"):
        for_workload(single).check(single, params, H100)
    for_workload(half).check(half, params, H100)


def test_inputs_of_each_type_are_made_once_read_back_as_that_type_and_remade_for_another(mixed, tmp_path, monkeypatch):
    """The cache keeps a bfloat16 input (NumPy writes it as raw bytes) and gives it back as
    bfloat16; an input cached for another type of the same computation is made anew."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    workload = mixed("matmul", inputs="bfloat16", output="bfloat16")
    first = measure.prepare(workload, seed=0)
    again = measure.prepare(workload, seed=0)
    assert [a.dtype for a in again.host] == [precision.numpy_dtype("bfloat16")] * 2
    for a, b in zip(first.host, again.host):
        np.testing.assert_array_equal(a.astype(np.float32), b.astype(np.float32))
    assert again.signature.output[1] == precision.numpy_dtype("bfloat16")
    (path,) = (tmp_path / "cache/nni-opevo/inputs").glob("*.npz")
    np.savez(path, index=again.index, expected=again.expected, magnitude=again.magnitude,
             **{f"input{i}": a.astype(np.float32) for i, a in enumerate(again.host)})  # a float32 computation's
    remade = measure.prepare(workload, seed=0)
    assert [a.dtype for a in remade.host] == [precision.numpy_dtype("bfloat16")] * 2


def test_a_loaded_half_precision_kernel_takes_and_gives_its_types(mixed, tmp_path):
    """The exported library of a float16 MatMul, loaded as a program loads it: float16 in (a
    float32 array is converted), float16 out, within the check's tolerance of the product."""
    workload = mixed("matmul")
    loaded = exported(workload, CPU, str(tmp_path / "k.so"))
    rng = np.random.default_rng(0)
    a, b = (rng.random(shape, dtype=np.float32).astype(np.float16) for shape in ((64, 128), (128, 64)))
    out = loaded(a, b.astype(np.float32))
    assert out.dtype == np.float16 and out.shape == (64, 64)
    expected = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(out, expected, rtol=measure.signature(workload).tolerance.relative)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64", "int8", "int32"])
def test_a_kernel_that_disagrees_with_the_reference_in_other_types_is_a_wrong_answer(mixed, dtype):
    """The wider tolerance of narrow types still catches a wrong kernel: doubling where the
    reference triples fails, and agreeing with it passes."""
    params, _ = constraint.draw(mixed("double", dtype=dtype), CPU, 0)
    for factor, status in ((3, "WRONG_ANSWER"), (2, "NO_ERROR")):
        result = evaluate(mixed("double", dtype=dtype, factor=factor), params, CPU, Limits(repeat=1, min_repeat_ms=1))
        assert result.status.name == status, result.error


def test_integer_inputs_are_small_values_of_their_type(mixed):
    """Signed integers in [-8, 8), unsigned in [0, 16): int8 products summed in int32 stay exact."""
    for dtype, low in (("int8", -8), ("uint8", 0), ("int64", -8)):
        host = measure.prepare(mixed("dot", n=4096, dtype=dtype), seed=0).host
        assert all(a.dtype == np.dtype(dtype) and a.min() == low and a.max() == low + 15 for a in host)


def test_an_integer_output_left_partly_unwritten_is_a_wrong_answer():
    """Integers have no NaN to poison the output with: the elements still holding the least value
    after a run are run again under the greatest, and those holding that too were never written;
    an element whose value really is the least is written."""
    import tvm

    device = tvm.cpu(0)
    least = np.iinfo(np.int32).min
    for written in (8, 5):
        out = tvm.runtime.tensor(np.full(8, least, dtype=np.int32), device)

        def kernel_writing_some(output, written=written):
            values = output.numpy()
            values[:written] = [least, *range(1, written)]
            output.copyfrom(values)

        kernel_writing_some(out)  # the check's first run
        if written == 8:
            measure._check_all_written(kernel_writing_some, [out], device, out.numpy())
        else:
            with pytest.raises(measure.WrongAnswer, match="3 of 8 output elements were not written"):
                measure._check_all_written(kernel_writing_some, [out], device, out.numpy())


def test_a_float_element_computed_as_nan_is_told_from_one_left_unwritten():
    """A float output's NaN poison cannot tell an element the kernel never wrote from one it
    computed as NaN: the suspects are run again under the greatest finite value, and those holding
    it were never written; the others were computed so, and are refused as such. An infinity (a
    masked score) is written, and left to the comparison with the reference."""
    import tvm

    device = tvm.cpu(0)
    for dtype in ("float32", "float16", "bfloat16"):
        kind = precision.numpy_dtype(dtype)
        for computed, message in ((np.nan, "2 of 8 output elements were computed as NaN (output(1,))"),
                                  (-np.inf, None),
                                  (None, "2 of 8 output elements were not written")):
            out = tvm.runtime.tensor(np.full(8, np.nan, dtype=kind), device)

            def kernel(output, computed=computed):
                values = output.numpy()
                values[[0, 2, 3, 4, 5, 6]] = 1.5
                if computed is not None:
                    values[[1, 7]] = computed
                output.copyfrom(values)

            kernel(out)  # the check's first run
            if message is None:
                measure._check_all_written(kernel, [out], device, out.numpy())
                continue
            with pytest.raises(measure.WrongAnswer, match=re.escape(message)):
                measure._check_all_written(kernel, [out], device, out.numpy())


def test_a_reduction_whose_extent_is_an_expression_counts_its_greatest_window():
    """TOPI writes a pooling window's extent as an expression (its end less its start), of the
    output's index where the windows differ (adaptive pooling): its greatest value over the
    output's axes bounds the terms, so a float16 pooling gets a tolerance, not a crash or none."""
    from tvm import te, topi

    x = te.placeholder((1, 4, 7, 9), "float16", name="X")
    for pooled in (topi.nn.global_pool(x, "avg"), topi.nn.adaptive_pool(x, (3, 4), "avg")):
        terms = max(n for _, n in precision.stage_types(pooled))
        assert 9 <= terms <= 7 * 9 * 2
        assert precision.tolerance([x, pooled]).relative < 0.05


def test_a_loaded_integer_kernel_refuses_arrays_whose_conversion_would_change_their_values(mixed, tmp_path):
    """NumPy arrays are converted to the kernel's types only as NumPy's same-kind casting allows,
    and integers narrowed only within range: a float or complex array, or 300 for an int8, is one
    ValueError naming the input and the rule, where the conversion truncated, dropped the
    imaginary part or wrapped 300 around to 44 and the kernel answered for other values."""
    workload = mixed("matmul", inputs="int8", sums="int32", output="int32")
    loaded = exported(workload, CPU, str(tmp_path / "k.so"))
    rng = np.random.default_rng(0)
    a, b = (rng.integers(-8, 8, shape).astype(np.int8) for shape in ((64, 128), (128, 64)))
    expected = a.astype(np.int64) @ b
    np.testing.assert_array_equal(loaded(a, b), expected)
    np.testing.assert_array_equal(loaded(a.astype(np.int64), b.tolist()), expected)  # within int8: converted
    wide = a.astype(np.int64)
    wide[3, 5] = 300
    refused = {
        f"^input 0 of {workload.name} holds 300, outside int8's -128..127$": wide,
        "^input 0 of .* must be int8 or convert to it by NumPy's same-kind casting .*, got float64: convert it "
        "yourself$": a + 0.5,
        "^input 0 of .* must be int8 .*, got complex128": a + 1j,
    }
    for message, given in refused.items():
        with pytest.raises(ValueError, match=message):
            loaded(given, b)
