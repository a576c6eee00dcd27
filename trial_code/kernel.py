"""Build a kernel: workload + parameters -> scheduled TVM module -> compiled executable.

Also gives the generated source (CUDA C or LLVM IR), which is what ``export`` writes next to
the best configuration, and the CUDA compile-to-cubin check used where no GPU is visible.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from . import fast_math
from .targets import Target, import_tvm
from .templates import for_workload
from .workloads import Workload

tvm = import_tvm()  # before TVM's runtime starts its CPU thread pool (``targets.cpu_threads``)
from tvm import s_tir, te  # noqa: E402

fast_math.register(tvm)


def for_host(target: Target) -> Target:
    """The target with the CPU named when it is left to the machine (``Target.mcpu``)."""
    if target.kind == "llvm" and not target.mcpu:
        return dataclasses.replace(target, mcpu=str(tvm.target.codegen.llvm_get_system_cpu()))
    return target


def scheduled(workload: Workload, params: dict[str, Any] | None, target: Target) -> Any:
    """The scheduled IRModule; template or TVM schedule errors propagate (INSTANTIATION_ERROR).
    ``params`` None: TVM's default schedule, what a layer nobody tuned runs (the loop nest as
    the compute states it on the CPU; dlight's fallback, which binds it to threads, on CUDA)."""
    template = for_workload(workload)
    tensors = template.compute(workload, template.split(workload, params, target))
    module = tvm.IRModule({"main": te.create_prim_func(tensors)})
    if params is None:
        if target.kind != "cuda":
            return module
        from tvm.s_tir import dlight

        with tvm.target.Target(target.tvm_target()):
            return dlight.ApplyDefaultSchedule(dlight.gpu.Fallback())(module)
    sch = s_tir.Schedule(module)
    template.schedule(sch, workload, params, target)
    return sch.mod


ASYNC_COPY = {"tirx.use_async_copy": True}
"""Shared-memory fills that a schedule pipelines asynchronously become ``cp.async``
(``InjectPTXAsyncCopy``)."""
SKIPPED_PASSES = ["s_tir.LowerAsyncDMA"]
"""``tirx.use_async_copy`` also turns this pass on, which rewrites asynchronous copies for
targets with a DMA engine (Hexagon). On CUDA it leaves the copies of a block's threads as they
were, at a cost: a pipelined Conv2D's input window (indices of ``y * stride + ry``) took it 4-9 s
of a 0.1-0.2 s build on the development machine (``tests/test_trial_code.py`` checks that
skipping it changes no such source); and it took the copies of a block of one thread for a DMA
engine's (``dma_start_group``, which CUDA cannot build), which without it are ``cp.async`` as
any other block's (``tests/test_cuda_gemm.py``)."""


def build_context() -> Any:
    """The PassContext every kernel is built in (``build``)."""
    return tvm.transform.PassContext(config=ASYNC_COPY, disabled_pass=SKIPPED_PASSES)


def build(module: Any, target: Target) -> Any:
    """Compile to an executable, in ``build_context``. With a GPU visible this also compiles the
    CUDA code (NVRTC)."""
    with build_context():
        return tvm.compile(module, target=tvm.target.Target(target.tvm_target()))


def source(executable: Any, target: Target) -> str:
    """The generated device source: CUDA C for CUDA, LLVM IR for the CPU."""
    if target.kind == "cuda":
        return executable.mod.imports[0].inspect_source("cuda")
    return executable.mod.inspect_source("ll")


def compile_cuda_binary(executable: Any, target: Target) -> bytes:
    """Compile the CUDA source to a cubin with the machine's nvcc: the proof that a kernel builds
    where no GPU (and so no NVRTC module creation) is available."""
    return compile_cuda_source(source(executable, target), target)


def compile_cuda_source(code: str, target: Target) -> bytes:
    """A cubin of CUDA source, compiled by TVM's own nvcc command (its fast math and ptxas
    options, which NVRTC mirrors on a GPU), so that what it shows of registers and local memory
    is what a trial's kernel gets."""
    from tvm.support import nvcc

    with tvm.target.Target(target.tvm_target()):
        return bytes(nvcc.compile_cuda(code, target_format="cubin", arch=target.arch, compiler="nvcc"))
