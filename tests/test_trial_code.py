"""Trial code on real TVM kernels: CUDA generated and compiled to cubin by nvcc, CPU kernels
built, run and checked against NumPy, and every failure status from a matching bad input."""
from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from feasible import feasible

from trial_code import kernel, measure, targets, workloads
from trial_code.evaluate import Limits, evaluate
from trial_code.status import Status
from trial_code.templates import Infeasible, for_workload
from trial_code.trial import parse, run

ROOT = Path(__file__).resolve().parent.parent
CPU = targets.cpu()
CUDA = targets.Target("cuda", device="cuda-none", has_device=False, **targets.H100)
SMALL = [
    workloads.lookup("MM_small"),
    *(workloads.make("batch_matmul", name=f"BMM_{layout}", batch=4, n=48, k=32, m=40, layout=layout)
      for layout in workloads.GEMM_LAYOUTS),
    workloads.lookup("C_small"),
    workloads.make("conv2d", name="conv_s2", batch=2, in_channels=5, height=17, width=15, out_channels=12,
                   kernel_h=3, kernel_w=5, stride=2, padding=2),
    workloads.make("conv2d", name="conv_p0", batch=1, in_channels=3, height=9, width=10, out_channels=4,
                   kernel_h=3, kernel_w=2, stride=1, padding=0),
]
CUDA_WORKLOADS = SMALL + [workloads.lookup(name) for name in ("MM1", "BMM2", "C1", "C2")]
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (the CUDA toolkit) is not on PATH")


@needs_nvcc
@pytest.mark.parametrize("workload", CUDA_WORKLOADS, ids=lambda w: w.name)
def test_cuda_kernel_generates_and_compiles_to_cubin(workload):
    params = feasible(workload, CUDA, seed=1)
    executable = kernel.build(kernel.scheduled(workload, params, CUDA), CUDA)
    source = kernel.source(executable, CUDA)
    assert '__global__' in source and "__shared__" in source
    cubin = kernel.compile_cuda_binary(executable, CUDA)
    assert cubin[:4] == b"\x7fELF"  # a CUDA binary for sm_90a


@needs_nvcc
def test_cuda_shared_memory_matches_the_static_estimate():
    """The static check's shared-memory figure is what the lowered kernel allocates (the GEMM's
    and the convolution's, once per pipeline stage, the GEMM's rows padded or not), so
    feasibility is decided right without building. The padded figure is the schedule's own
    rule (``gemm._shared_bytes``); the others are counted here from the tiles."""
    import re

    import tvm

    from trial_code.templates import gemm

    for workload, stages, pad in ((workloads.lookup("C2"), 1, 0), (workloads.lookup("C2"), 3, 0),
                                  (workloads.lookup("MM1"), 1, 0),
                                  (workloads.lookup("MM1"), 2, 0), (workloads.lookup("BMM3"), 2, 0),
                                  (workloads.lookup("MM1"), 3, 1), (workloads.lookup("BMM2"), 1, 1)):
        params = {**feasible(workload, CUDA, seed=5), "stages": stages}
        if workload.family != "conv2d":
            params.update(pad=pad)
        tvm_target = tvm.target.Target(CUDA.tvm_target())
        lower, _, _ = tvm.tirx.get_default_tir_pipeline(tvm_target)
        with tvm_target, kernel.build_context():
            script = lower(tvm.tirx.transform.BindTarget(tvm_target)(kernel.scheduled(workload, params, CUDA))).script()
        allocated = sum(int(size) for size in re.findall(r'alloc_buffer\(\((\d+),\), "uint8", scope="shared.dyn"\)',
                                                         script))
        allocated += 4 * sum(int(size) for size in re.findall(r'alloc_shared\(\((\d+),\)', script))
        s = workload.shape
        if workload.family == "conv2d":
            f, y, x, rc, ry, rx = (params[k] for k in ("tile_f", "tile_y", "tile_x", "tile_rc", "tile_ry", "tile_rx"))
            in_h = (y[1] * y[2] * y[3] - 1) * s["stride"] + ry[1]
            in_w = (x[1] * x[2] * x[3] - 1) * s["stride"] + rx[1]
            expected = 4 * rc[1] * (in_h * in_w + f[1] * f[2] * f[3] * ry[1] * rx[1]) * stages
        elif pad:
            expected = gemm._shared_bytes(params, s["layout"])
        else:
            n, m, k = params["tile_n"], params["tile_m"], params["tile_k"]
            expected = 4 * (n[1] * n[2] * n[3] + m[1] * m[2] * m[3]) * k[2] * k[3] * stages
        assert allocated == expected, (workload.name, params)


@pytest.mark.parametrize("target, cases", [
    (CUDA, [("BMM3", 0), ("BMM3", 1), ("C1", 2), ("MM1", 2), ("C_small", 0)]),  # stages 2, 4, 2, 3 and 1
    (CPU, [("MM_small", 0), ("C_small", 0)])], ids=["cuda", "cpu"])
def test_the_pass_a_kernel_is_built_without_changes_no_source(target, cases):
    """``kernel.build`` skips the DMA lowering that ``tirx.use_async_copy`` turns on (seconds for a
    pipelined Conv2D): with it, pipelined GEMMs and Conv2Ds (``cp.async``) and CPU kernels are
    the same source, character for character."""
    import re

    import tvm

    def source(executable) -> str:  # LLVM IR names its type-based alias metadata by a pointer of the build
        return re.sub(r'"0x[0-9a-f]+', '"0x', kernel.source(executable, target))

    for name, seed in cases:
        workload = workloads.lookup(name)
        module = kernel.scheduled(workload, feasible(workload, target, seed=seed), target)
        with tvm.transform.PassContext(config=kernel.ASYNC_COPY):
            every_pass = source(tvm.compile(module, target=tvm.target.Target(target.tvm_target())))
        assert source(kernel.build(module, target)) == every_pass, (name, seed)
        assert target.kind != "cuda" or ("cp.async" in every_pass) == (name != "C_small"), (name, seed)


@pytest.mark.parametrize("workload", SMALL, ids=lambda w: w.name)
def test_cpu_kernel_matches_numpy_on_every_output(workload):
    template = for_workload(workload)
    for seed in (0, 1):
        params = feasible(workload, CPU, seed=seed)
        function = kernel.build(kernel.scheduled(workload, params, CPU), CPU)["main"]
        device = measure.device_of(CPU)
        host, args = measure.arguments(workload, device, seed=3)
        function(*args)
        out = args[-1].numpy()
        index = np.stack(np.unravel_index(np.arange(out.size), out.shape), axis=1)
        expected, _ = template.reference(workload, host, index)
        np.testing.assert_allclose(out.reshape(-1), expected, rtol=1e-4, atol=1e-4)
        assert _numpy_full(workload, host).reshape(-1) == pytest.approx(expected, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("tiles", [([2, 3, 8], [2, 4, 5]), ([48, 1, 1], [4, 10, 1]), ([48, 1, 1], [40, 1, 1])],
                         ids=["tiles", "one-column", "one-element"])
@pytest.mark.parametrize("block_order", [list(p) for p in itertools.permutations(["k", "n", "m"])], ids="".join)
def test_cpu_gemm_is_right_wherever_block_order_puts_its_accumulator(block_order, tiles):
    """The register tile's accumulator sits at the innermost cache-block loop above the first
    K loop, or at the parallel loop when K comes first: every order computes the product, down
    to a one-element tile (whose write-back has no loop of its own to vectorize)."""
    workload = SMALL[1]  # batch 4, n 48, k 32, m 40
    params = {"tile_n": tiles[0], "tile_m": tiles[1], "tile_k": [4, 8], "block_order": block_order}
    function = kernel.build(kernel.scheduled(workload, params, CPU), CPU)["main"]
    host, args = measure.arguments(workload, measure.device_of(CPU), seed=4)
    function(*args)
    np.testing.assert_allclose(args[-1].numpy(), _numpy_full(workload, host), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("registers, size, rows, columns, refused", [
    (16, 32, 4, 16, ""), (16, 32, 4, 32, "21 exceeds the limit 16"), (16, 32, 16, 8, "18 exceeds the limit 16"),
    (32, 64, 4, 64, ""), (32, 64, 16, 32, "35 exceeds the limit 32"), (0, 0, 64, 64, "")],
    ids=["avx2", "avx2-wide", "avx2-tall", "avx512", "avx512-tall", "unknown"])
def test_a_cpu_register_tile_past_the_vector_registers_is_refused(registers, size, rows, columns, refused):
    """A thread's register tile of ``rows`` x ``columns`` floats: its accumulators, a step's
    vectors of B and a broadcast value of A must fit the CPU's vector registers (AVX2: 16 of 8
    floats; AVX-512: 32 of 16); a machine whose registers are unknown sets no bound."""
    workload = workloads.lookup("MM_small")
    target = dataclasses.replace(CPU, vector_registers=registers, vector_bytes=size)
    params = {"tile_n": [4, 64 // rows, rows], "tile_m": [4, 64 // columns, columns], "tile_k": [16, 16],
              "block_order": ["n", "m", "k"]}
    if refused:
        with pytest.raises(Infeasible, match=r"^vector registers of the register tile \(last of 'tile_n' by last of "
                                             rf"'tile_m'\) {refused}$"):
            for_workload(workload).check(workload, params, target)
    else:
        for_workload(workload).check(workload, params, target)


@pytest.mark.parametrize("flags, vectors", [
    ("flags\t\t: fpu sse sse2 avx avx2 fma", {"vector_registers": 16, "vector_bytes": 32}),
    ("flags\t\t: fpu sse2 avx2 avx512f avx512vl", {"vector_registers": 32, "vector_bytes": 64}),
    ("flags\t\t: fpu sse sse2", {"vector_registers": 16, "vector_bytes": 16}),
    ("Features\t: fp asimd evtstrm", {"vector_registers": 32, "vector_bytes": 16}),
    ("model name\t: a CPU of no vector unit", {})], ids=["avx2", "avx512", "sse", "arm", "none"])
def test_the_cpu_vector_registers_are_read_from_the_flags_the_kernel_reports(tmp_path, flags, vectors):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\n{flags}\n\nprocessor\t: 1\n{flags}\n")
    assert targets.cpu_vectors(str(cpuinfo)) == vectors
    assert targets.cpu_vectors(str(tmp_path / "absent")) == {}


@pytest.mark.parametrize("tile_x", [[28, 1], [14, 2]], ids=["one-element", "two-columns"])
def test_cpu_conv2d_with_a_one_element_output_tile_is_right(tile_x):
    """C_small's tiles with f, y (and x) inner parts of 1: the accumulator's write-back then
    has no loop of its own, and vectorizing the loop around it would vectorize the reduction
    (this reported WRONG_ANSWER in a benchmark run before the fix)."""
    workload = workloads.lookup("C_small")
    params = {"auto_unroll_max_step": 0, "reduce_order": ["rc", "ry", "rx"], "tile_f": [32, 1], "tile_rc": [16, 1],
              "tile_x": tile_x, "tile_y": [28, 1]}
    function = kernel.build(kernel.scheduled(workload, params, CPU), CPU)["main"]
    host, args = measure.arguments(workload, measure.device_of(CPU), seed=4)
    function(*args)
    np.testing.assert_allclose(args[-1].numpy(), _numpy_full(workload, host), rtol=1e-4, atol=1e-4)


@pytest.mark.slow(seconds=5)
def test_cpu_kernels_run_on_every_core_the_process_may_use():
    """TVM's runtime would start half as many threads as there are cores (it takes x86 cores to
    be hyper-threaded); the kernel module gives it the cores this process may use, unless the
    user chose a number."""
    import os

    code = "from trial_code import kernel; import tvm; print(tvm.get_global_func('runtime.NumThreads')())"
    env = {k: v for k, v in os.environ.items() if k != "TVM_NUM_THREADS"}
    ours = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    assert int(ours.stdout.split()[-1]) == len(os.sched_getaffinity(0))
    theirs = subprocess.run([sys.executable, "-c", code], env={**env, "TVM_NUM_THREADS": "1"}, cwd=ROOT,
                            capture_output=True, text=True, check=True)
    assert int(theirs.stdout.split()[-1]) == 1


def _numpy_full(workload, host):
    """An independent float64 NumPy result, to check the sampled reference itself."""
    s = workload.shape
    if workload.family == "conv2d":
        data, kernel_ = (x.astype(np.float64) for x in host)
        p, st = s["padding"], s["stride"]
        padded = np.pad(data, ((0, 0), (0, 0), (p, p), (p, p)))
        oh, ow = workloads.conv2d_output_hw(s)
        out = np.zeros((s["batch"], s["out_channels"], oh, ow))
        for ry in range(s["kernel_h"]):
            for rx in range(s["kernel_w"]):
                window = padded[:, :, ry:ry + st * oh:st, rx:rx + st * ow:st]
                out += np.einsum("nchw,fc->nfhw", window, kernel_[:, :, ry, rx])
        return out
    a, b = (x.astype(np.float64) for x in host)
    if s["layout"][0] == "T":
        a = np.swapaxes(a, -1, -2)
    if s["layout"][1] == "T":
        b = np.swapaxes(b, -1, -2)
    return a @ b


@pytest.mark.usefixtures("forked_workers")
@pytest.mark.parametrize("workload", SMALL, ids=lambda w: w.name)
def test_cpu_trial_reports_tflops(workload):
    result = evaluate(workload, feasible(workload, CPU, seed=2), CPU, Limits(min_repeat_ms=5))
    assert result.status is Status.NO_ERROR, result.error
    assert result.tflops > 0 and result.latency_ms > 0 and result.build_s > 0
    report = result.report()
    assert set(report) == {"default", "latency_ms", "status", "build_s", "error", "arch"}
    assert json.loads(json.dumps(report)) == report


def test_the_vendor_library_anchors_cpu_matmuls_only():
    """NumPy's BLAS on the same shapes and layouts (BatchMatMul and a transposed layout
    included), timed like a kernel; no CPU anchor for Conv2D, none for a GPU target here."""
    from trial_code import anchor

    for name in ("MM_small", "BMM_small"):
        found = anchor.measure(workloads.lookup(name), CPU, repeat=3, min_repeat_ms=5)
        assert found is not None and found.library.startswith("NumPy") and found.tflops > 0 and found.repeats == 3
    transposed = workloads.make("batch_matmul", name="TN64", batch=2, n=64, m=32, k=16, layout="TN")
    assert anchor.measure(transposed, CPU, repeat=1, min_repeat_ms=1).tflops > 0
    assert anchor.measure(workloads.lookup("C_small"), CPU) is None
    assert anchor.measure(workloads.lookup("MM_small"), targets.cuda()) is None


@pytest.mark.usefixtures("forked_workers")
def test_cpu_kernels_are_built_for_the_host_cpu(tmp_path):
    """The target names the machine's CPU (LLVM's name for it), so LLVM may use its vector
    units; the result says which CPU the kernel was built for."""
    import tvm

    host = str(tvm.target.codegen.llvm_get_system_cpu())
    workload = SMALL[0]
    source = tmp_path / "kernel.ll"
    result = evaluate(workload, feasible(workload, CPU, seed=3), CPU, Limits(min_repeat_ms=5), source_path=str(source))
    assert result.status is Status.NO_ERROR, result.error
    assert result.arch == host and result.report()["arch"] == host
    assert f'"target-cpu"="{host}"' in source.read_text()


# ------------------------------------------------------------------ failure statuses


def test_statically_infeasible_config_is_rejected_without_building():
    workload = workloads.lookup("MM1")
    params = {"tile_n": [1, 1, 64, 8], "tile_m": [1, 1, 32, 32], "tile_k": [1, 1024, 1, 1], "inner_order": ["k", "n", "m"],
              "unroll": 0, "vector": 1, "stages": 1, "pad": 0,
              "raster": 0}
    result = evaluate(workload, params, CUDA)
    assert result.status is Status.INSTANTIATION_ERROR and result.build_s is None  # no worker was started
    assert "threads per block 2048 exceeds the limit 1024" in result.error


@pytest.mark.parametrize("params, message", [
    ({"tile_n": [2, 2, 32], "tile_m": [1, 16, 16], "tile_k": [64, 4], "block_order": ["k", "n", "m"]},
     "'tile_n' = [2, 2, 32] must multiply to 256, not 128"),
    ({"tile_n": [4, 4, 16], "tile_m": [1, 1, 256], "tile_k": [64, 4], "block_order": ["k", "n", "m"]},
     "vector length (last of 'tile_m') 256 exceeds the limit 64"),
    ({"tile_n": [4, 4, 16], "tile_m": [1, 16, 16], "tile_k": [64, 4], "block_order": ["k", "n"]},
     "'block_order' must be a permutation"),
    ({"tile_n": [4, 4, 16], "tile_m": [1, 16, 16], "block_order": ["k", "n", "m"]}, "'tile_k' must be a list of 2"),
])
def test_bad_parameters_name_the_parameter(params, message):
    result = evaluate(workloads.lookup("MM_small"), params, CPU)
    assert result.status is Status.INSTANTIATION_ERROR and message in result.error


def test_build_timeout_kills_the_build():
    workload = workloads.lookup("C_small")
    result = evaluate(workload, feasible(workload, CPU), CPU, Limits(build_timeout=0.3))
    assert result.status is Status.BUILD_TIMEOUT and "0.3 s" in result.error


@pytest.mark.slow(seconds=5)
def test_run_timeout_kills_a_kernel_that_runs_too_long():
    # Each timing repeat must last 60 s: far beyond the 3 s run limit.
    workload = workloads.lookup("MM_small")
    result = evaluate(workload, feasible(workload, CPU), CPU, Limits(run_timeout=3, min_repeat_ms=60_000))
    assert result.status is Status.RUN_TIMEOUT and result.build_s is not None


@pytest.mark.usefixtures("forked_workers")
def test_a_reference_that_computes_past_the_run_limit_ends_the_trial_naming_it(operator_module):
    """The expected outputs are computed after the build (or read from the cache an earlier
    trial filled): an operator without a reference has TVM's unscheduled loop nest compute
    them, which a large shape keeps at it for minutes. That phase has the run limit, and a trial
    past it is RUN_TIMEOUT saying what ran over, where it ran on to the device's wait limit
    (330 s) and was called DEVICE_BUSY ("the device stayed busy")."""
    make = operator_module("slow_reference", """
        import time
        from tvm import te
        from trial_code.operators import Operator
        def doubled(n=64):
            x = te.placeholder((n,), "float32", name="X")
            def reference(x):
                time.sleep(600)
                return 2 * x
            return Operator([x], te.compute((n,), lambda i: x[i] * 2, name="Y"), flops=n, reference=reference)
    """)
    workload = make("doubled")
    started = time.monotonic()
    result = evaluate(workload, feasible(workload, CPU), CPU, Limits(run_timeout=2))
    assert result.status is Status.RUN_TIMEOUT and result.build_s is not None
    assert result.error.startswith("computing the reference the kernel is checked against took past the 2 s limit")
    assert time.monotonic() - started < 60


@pytest.mark.usefixtures("forked_workers")
@pytest.mark.skipif(targets.cuda().has_device, reason="a GPU is visible here")
def test_cuda_trial_without_a_gpu_reports_runtime_device():
    workload = workloads.lookup("MM_small")
    result = evaluate(workload, feasible(workload, CUDA), CUDA)
    assert result.status is Status.RUNTIME_DEVICE and "no CUDA device" in result.error


def _cuda_for(arch: str) -> targets.Target:
    return targets.Target("cuda", arch=arch, max_threads_per_block=1024, max_shared_memory_per_block=49152,
                          device="cuda-none", has_device=False)


@pytest.mark.usefixtures("forked_workers")
def test_target_tvm_cannot_generate_for_is_compile_host():
    workload = workloads.lookup("MM_small")
    result = evaluate(workload, {**feasible(workload, CUDA), "stages": 1}, _cuda_for("sm_1"), build_only=True)
    assert result.status is Status.COMPILE_HOST and "sm_1" in result.error


@pytest.mark.usefixtures("forked_workers")
@needs_nvcc
def test_cuda_code_nvcc_rejects_is_compile_device():
    # TVM generates CUDA C for sm_20; no nvcc of the last decade compiles for it (and, without
    # cp.async there, the configuration has no pipeline).
    workload = workloads.lookup("MM_small")
    result = evaluate(workload, {**feasible(workload, CUDA), "stages": 1}, _cuda_for("sm_20"), build_only=True)
    assert result.status is Status.COMPILE_DEVICE and "nvcc fatal" in result.error
    assert "__global__" not in result.error  # the reason, not the whole source


def test_wrong_output_is_wrong_answer():
    """A real kernel that computes A^T B is checked as A B: the square shapes make the call valid."""
    wrong = workloads.make("batch_matmul", batch=2, n=32, k=32, m=32, layout="TN")
    right = workloads.make("batch_matmul", batch=2, n=32, k=32, m=32, layout="NN")
    function = kernel.build(kernel.scheduled(wrong, feasible(wrong, CPU), CPU), CPU)["main"]
    device = measure.device_of(CPU)
    host, args = measure.arguments(right, device, seed=0)
    with pytest.raises(measure.WrongAnswer, match="reference"):
        measure.verify(right, function, host, args, device, seed=0)


def test_unwritten_output_is_wrong_answer():
    """The NaN poison catches outputs the kernel never writes, wherever they are."""
    small = workloads.make("matmul", n=16, k=8, m=16)
    function = kernel.build(kernel.scheduled(small, feasible(small, CPU), CPU), CPU)["main"]
    device = measure.device_of(CPU)
    host, args = measure.arguments(small, device, seed=0)

    def partial(a, b, c):  # every element but the diagonal written: the diagonal keeps what it held
        before = c.numpy()
        function(a, b, c)
        c.copyfrom(np.where(np.eye(16) > 0, before, c.numpy()).astype("float32"))

    with pytest.raises(measure.WrongAnswer, match="16 of 256 output elements were not written"):
        measure.verify(small, partial, host, args, device, seed=0)


def test_our_own_failure_is_reported_as_unknown_error():
    args = parse(["--workload", "MM_small", "--target", "cpu"])
    args.target = "tpu"  # past the parser: an error of ours from here on
    result = run(args, {})
    assert result.status is Status.UNKNOWN_ERROR and "target must be auto, cpu or cuda" in result.error


def test_an_unknown_workload_is_refused_by_the_parser_with_the_closest_names():
    from trial_code.trial import BadArguments

    with pytest.raises(BadArguments, match=r"unknown workload 'MM_smal' \(did you mean MM_small"):
        parse(["--workload", "MM_smal", "--target", "cpu"])


@pytest.mark.slow(seconds=5)
def test_standalone_trial_prints_its_report():
    workload = workloads.lookup("MM_small")
    out = subprocess.run([sys.executable, "-m", "trial_code.trial", "--workload", "MM_small", "--target", "cpu",
                          "--params", json.dumps(feasible(workload, CPU))], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=True)
    report = json.loads(out.stdout)
    assert report["status"] == "NO_ERROR" and report["default"] > 0


# ------------------------------------------------------------------ spaces, targets, packaging


def test_every_named_workload_has_a_parseable_space_with_feasible_points():
    from nni_opevo import SearchSpace

    for workload in workloads.NAMED.values():
        for target in (CUDA, CPU):
            space = for_workload(workload).space(workload, target.kind)
            SearchSpace(space)
            label = "cuda" if target.kind == "cuda" else "cpu"
            path = ROOT / "search_spaces" / f"{workload.name}.{label}.json"
            assert json.loads(path.read_text()) == space, f"{path} is stale: run python -m nni_opevo_tools.make_spaces"
            feasible(workload, target)


def test_make_spaces_for_a_custom_shape_and_a_peer_tuner(tmp_path):
    out = subprocess.run([sys.executable, "-m", "nni_opevo_tools.make_spaces", "--family", "batch_matmul", "--name",
                          "pytest_custom", "--shape", "batch=3", "n=12", "m=20", "k=8", "layout=NT",
                          "--tuner", "opevo", "gbfs", "--root", str(tmp_path)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True)
    written = out.stdout.split()
    assert written == ["search_spaces/pytest_custom.cuda.json", "search_spaces/pytest_custom.cpu.json",
                       "experiments/pytest_custom/opevo.yml", "experiments/pytest_custom/opevo-cpu.yml",
                       "experiments/pytest_custom/gbfs.yml", "experiments/pytest_custom/gbfs-cpu.yml"]
    space = json.loads((tmp_path / "search_spaces/pytest_custom.cuda.json").read_text())
    assert space["tile_b"]["_value"] == [3, 2] and space["tile_k"]["_value"] == [8, 4]
    import yaml

    config = yaml.safe_load((tmp_path / "experiments/pytest_custom/gbfs.yml").read_text())
    # Outside the checkout: the installed trial code, run by the interpreter that wrote the config.
    assert config["trialCommand"] == (f"{sys.executable} -m trial_code.trial --family batch_matmul --name "
                                      "pytest_custom --shape batch=3 n=12 m=20 k=8 layout=NT --target cuda")
    assert config["tuner"]["className"] == "nni_opevo.GBFSTuner"
    assert config["searchSpaceFile"] == str(tmp_path / "search_spaces/pytest_custom.cuda.json")
    assert config["trialCodeDirectory"] == str(tmp_path)


def test_make_spaces_refuses_an_unknown_tuner(tmp_path):
    out = subprocess.run([sys.executable, "-m", "nni_opevo_tools.make_spaces", "--workload", "MM1", "--tuner", "nosee",
                          "--root", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--tuner nosee: unknown tuner 'nosee'" in out.stderr
    assert not any(tmp_path.iterdir())


def test_bad_workload_shapes_are_clear_errors():
    with pytest.raises(ValueError, match="shape 'n' must be a positive int"):
        workloads.make("matmul", n=0, m=4, k=4)
    with pytest.raises(ValueError, match="layout must be one of"):
        workloads.make("batch_matmul", n=4, m=4, k=4, layout="TT")
    with pytest.raises(ValueError, match="kernel does not fit"):
        workloads.make("conv2d", in_channels=1, height=2, width=2, out_channels=1, kernel_h=5)


@pytest.mark.parametrize("family, shape", [
    ("matmul", {"n": 150000, "k": 150000, "m": 150000}),
    ("batch_matmul", {"batch": 3, "n": 20000, "k": 10000, "m": 10000, "layout": "TN"}),
    ("conv2d", {"batch": 32, "in_channels": 256, "height": 400, "width": 300, "out_channels": 512, "kernel_h": 3,
                "kernel_w": 5, "stride": 2, "padding": 2})])
def test_a_shape_whose_tensors_take_more_than_4_gib_is_refused_before_anything_is_allocated(family, shape):
    """Every trial of a custom shape allocates its tensors (on the host and the device) and
    computes its reference over them: ``nni-opevo spaces --family matmul --shape n=150000 ...``
    wrote an experiment whose every trial would have asked for 251.5 GiB. The family's shape is
    bounded as an operator's is, by the bytes its template's tensors take."""
    with pytest.raises(ValueError) as refused:
        workloads.make(family, **shape)
    signature = measure.signature(workloads.Workload("huge", family, {"batch": 1, "layout": "NN", "stride": 1,
                                                                      "padding": 0, **shape}))
    taken = sum(math.prod(s) * np.dtype(d).itemsize for s, d in [*signature.inputs, signature.output])
    assert taken > workloads.MAX_BYTES
    assert str(refused.value) == f"workload {family}: its inputs and output take {taken / 2**30:.1f} GiB; at most 4 GiB"


def test_target_auto_is_the_gpu_when_visible_else_the_cpu():
    gpu = targets.cuda()
    assert targets.resolve("auto") == (gpu if gpu.has_device else CPU)
    assert targets.resolve("cuda").kind == "cuda" and targets.resolve("cpu") == CPU
    with pytest.raises(ValueError, match="target must be auto, cpu or cuda"):
        targets.resolve("tpu")


def test_tuner_package_never_imports_tvm():
    code = "import sys, nni_opevo, nni_opevo.testing, nni_opevo.testing.landscapes; assert 'tvm' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_trial_parent_process_does_not_import_tvm():
    code = ("import sys; from trial_code import evaluate, trial; from nni_opevo_tools import make_spaces; "
            "assert 'tvm' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)


def test_inputs_and_reference_are_made_once_and_read_back(tmp_path, monkeypatch):
    """The first trial of a workload writes its inputs and float64 reference to the cache; the
    next reads the same arrays; a file cut short is made anew; a cache folder that is a link is
    not used (the trial makes its inputs itself)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    workload = workloads.lookup("MM_small")
    first = measure.prepare(workload, seed=3)
    files = list((tmp_path / "cache/nni-opevo/inputs").glob("*.npz"))
    assert len(files) == 1
    again = measure.prepare(workload, seed=3)
    for a, b in zip([*first.host, first.expected, first.index], [*again.host, again.expected, again.index]):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(measure.prepare(workload, seed=4).host[0], first.host[0])
    files[0].write_bytes(files[0].read_bytes()[:1000])  # a write cut off
    np.testing.assert_array_equal(measure.prepare(workload, seed=3).expected, first.expected)
    host, _ = measure.arguments(workload, measure.device_of(CPU), seed=3)
    np.testing.assert_array_equal(host[0], first.host[0])  # the same inputs as trials always had

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "elsewhere"))
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere/nni-opevo").symlink_to(tmp_path / "cache/nni-opevo")
    np.testing.assert_array_equal(measure.prepare(workload, seed=5).host[1],
                                  measure.arguments(workload, measure.device_of(CPU), seed=5)[0][1])
    assert len(list((tmp_path / "cache/nni-opevo/inputs").glob("*.npz"))) == 2  # seeds 3 and 4, not 5


def test_adaptive_timing_runs_a_fixed_number_per_repeat():
    workload = workloads.lookup("MM_small")
    executable = kernel.build(kernel.scheduled(workload, feasible(workload, CPU), CPU), CPU)
    prepared = measure.prepare(workload, seed=0)
    args = measure.upload(prepared, measure.device_of(CPU))
    timing = measure.time_kernel(executable.mod, args, measure.device_of(CPU), repeat=3, min_repeat_ms=20,
                                 adaptive=True)
    assert len(timing.repeats_s) == 3 and timing.latency_s > 0


def test_a_kernel_whose_one_run_fills_the_window_is_timed_in_the_runs_the_limit_leaves():
    """A run of 0.5 s against a 50 ms window: one run a repeat, as many repeats as 80 % of the
    seconds left hold after the evaluator's warm-up run (none of a ten-run probe); with too
    little left for two runs, that run is the measurement. A check's run that lasted the window
    is timed again, since it may have included loading the kernel."""
    workload = workloads.lookup("MM_small")
    executable = kernel.build(kernel.scheduled(workload, feasible(workload, CPU), CPU), CPU)
    device = measure.device_of(CPU)
    args = measure.upload(measure.prepare(workload, seed=0), device)

    def repeats(left_s: float) -> list[float]:
        return measure.time_kernel(executable.mod, args, device, repeat=5, min_repeat_ms=50, adaptive=True,
                                   run_s=0.5, left_s=left_s).repeats_s

    assert [len(repeats(left_s)) for left_s in (math.inf, 10.0, 2.0, 1.3)] == [5, 5, 2, 1]
    assert repeats(1.2) == [0.5]
    assert all(0 < run < 0.5 for run in repeats(2.0))  # MM_small's real runs, timed
    # The check's run, if it lasted the window, may have loaded the module: a second run decides.
    function = executable["main"]
    assert measure.one_run(function, args, device, first_s=0.001, min_repeat_ms=50) == 0.001
    assert 0 < measure.one_run(function, args, device, first_s=0.5, min_repeat_ms=50) < 0.05


def _spin(stop) -> None:
    while not stop.is_set():
        pass


@pytest.mark.slow(seconds=15)
def test_a_busy_machine_gets_no_ratio_to_the_vendor_library(tmp_path):
    """With a process spinning on every core, the kernel and OpenBLAS are slowed unequally from
    round to round: the comparison says the machine is busy instead of printing a ratio, and any
    ratio it does print is that of median rounds near each side's fastest."""
    import multiprocessing
    import re

    from trial_code import anchor, library

    workload, target = workloads.lookup("MM_small"), kernel.for_host(CPU)
    kernel.build(kernel.scheduled(workload, feasible(workload, CPU, seed=2), target), target).export_library(
        str(tmp_path / "k.so"))
    loaded = library.load(str(tmp_path / "k.so"), workload, "cpu")
    call = loaded.caller(*measure.prepare(workload, seed=0).host)
    stop = multiprocessing.Event()
    spinners = [multiprocessing.Process(target=_spin, args=(stop,)) for _ in range(os.cpu_count() or 2)]
    for spinner in spinners:
        spinner.start()
    try:
        found = [anchor.compare(workload, target, call, loaded.device.sync, min_repeat_ms=50) for _ in range(2)]
    finally:
        stop.set()
        for spinner in spinners:
            spinner.join()
    for comparison in found:
        text = comparison.versus()
        printed = re.search(r"(\d+\.\d+)x NumPy", text)
        if comparison.busy:
            assert printed is None and "the machine was busy" in text
        else:  # each side's median round near its fastest, and the ratio theirs
            assert printed and max(comparison.spreads) <= anchor.BUSY_SPREAD
            assert float(printed.group(1)) == pytest.approx(comparison.ratio, abs=0.005)
    assert any(c.busy for c in found), [(c.kernel_s, c.library_s) for c in found]



def _pinned_thread(core, stop):
    """A thread pinned to ``core``, as TVM's CPU runtime pins each worker of its pool."""
    import threading

    ready = threading.Event()

    def body():
        os.sched_setaffinity(0, {core})
        ready.set()
        stop.wait()

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    ready.wait()
    return thread


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_the_caller_of_a_cpu_kernel_is_kept_off_the_cores_of_pinned_threads():
    """``targets.off_pinned_cores``: within the block the calling thread may run on every core it
    had but those another thread is pinned to, and on all of them again after it; where that
    would leave it none, nothing changes."""
    import threading

    allowed = os.sched_getaffinity(0)
    stop = threading.Event()
    pinned = _pinned_thread(max(allowed), stop)
    try:
        with targets.off_pinned_cores():
            assert os.sched_getaffinity(0) == allowed - {max(allowed)}
        assert os.sched_getaffinity(0) == allowed
        os.sched_setaffinity(0, {max(allowed)})
        try:
            with targets.off_pinned_cores():  # the pinned thread's core is all it has
                assert os.sched_getaffinity(0) == {max(allowed)}
        finally:
            os.sched_setaffinity(0, allowed)
    finally:
        stop.set()
        pinned.join()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_the_vendor_comparison_times_a_cpu_kernel_off_the_cores_of_its_runtimes_pinned_threads():
    """``anchor.compare`` on the CPU: every timed call of the kernel runs off the core a worker
    thread is pinned to (TVM's pool pins its workers; the caller woke on their core and halved the
    kernel's speed for many rounds), and the library's calls run where the process may."""
    import threading

    from trial_code import anchor

    allowed = os.sched_getaffinity(0)
    seen = []
    stop = threading.Event()
    pinned = _pinned_thread(max(allowed), stop)
    try:
        comparison = anchor.compare(workloads.lookup("MM_small"), kernel.for_host(CPU),
                                    lambda: seen.append(os.sched_getaffinity(0)), lambda: None, rounds=2,
                                    min_repeat_ms=1)
    finally:
        stop.set()
        pinned.join()
    assert comparison is not None and len(comparison.ratios) == 2 and os.sched_getaffinity(0) == allowed
    free = allowed - {max(allowed)}
    windows = seen[seen.index(free):]  # after the calls that size a window, every call of the rounds
    assert len(windows) >= 2 and all(cores == free for cores in windows) and set(map(frozenset, seen)) == {
        frozenset(allowed), frozenset(free)}

def test_a_cpu_trial_loads_tvm_without_pytorch_and_leaves_it_importable(tmp_path, monkeypatch):
    """tvm_ffi imports PyTorch whenever it is installed, seconds of every CPU trial inside the
    device lock: the worker keeps it out of TVM's import, and the user's operator module, imported
    after TVM, still imports it. A stand-in ``torch`` on the worker's path logs who imports it (and,
    lacking torch.Tensor, would break TVM's import if TVM imported it)."""
    log = tmp_path / "log"
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "torch.py").write_text(f"import os\nopen({str(log)!r}, 'a').write(f'torch {{os.getpid()}}\\n')\n")
    (tmp_path / "myops.py").write_text(
        "import os, sys\n"
        f"open({str(log)!r}, 'a').write(f'myops {{os.getpid()}} {{\"torch\" in sys.modules}}\\n')\n"
        "try:\n    import torch  # noqa: F401\nexcept ImportError:\n    pass\n"
        + (ROOT / "docs" / "your-operator.md").read_text().split("```python\n", 1)[1].split("```", 1)[0])
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(fake))  # the worker's path only: this process keeps its own
    workload = workloads.make("operator", operator="myops:depthwise", channels=4, height=9, width=9)
    result = evaluate(workload, None, targets.cpu(), Limits(repeat=1, min_repeat_ms=1))
    assert result.status is Status.NO_ERROR, result.error
    lines = [line.split() for line in log.read_text().splitlines()]
    workers = {pid for what, pid, *_ in lines if what == "myops" and pid != str(os.getpid())}
    assert len(workers) == 1, lines
    (worker,) = workers
    assert ["myops", worker, "False"] in lines and ["torch", worker] in lines, lines
    assert lines.index(["myops", worker, "False"]) < lines.index(["torch", worker])
