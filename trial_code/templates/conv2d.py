"""Direct NCHW 2D convolution (OpEvo paper, appendix B.3, after TVM's classic conv2d_direct).

CUDA: C_out, H_out and W_out split in 4 (blocks, virtual threads, threads, per-thread tile),
C_in, H_k and W_k in 2 (shared-memory stage, inner); ``unroll_explicit`` {0, 1} and
``auto_unroll_max_step`` {0, 125, 256} as in the paper; ``reduce_order`` orders the outer
reduction loops, which moves where the shared-memory stages are refilled. Those loops are one
loop over the stages, which ``stages`` pipelines as the GEMM's K loop: up to three stages' input
windows and kernel tiles fetched ahead with ``cp.async`` (a padding element written as zero),
into as many more buffers, dynamic shared memory past 48 KB. The threads fill a stage in
coalesced rounds (consecutive threads, consecutive addresses), and the per-thread tile stays in
registers, within a register estimate that keeps every admitted tile from spilling.
CPU: C_out, H_out in 2 (parallel, register tile), W_out in 2 (its inner part vectorized),
C_in in 2, the same ``reduce_order`` and ``auto_unroll_max_step``; the output tile accumulates
in a buffer of its own below the reduction loops, and the padded input is materialized first.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..targets import Target, registers_per_thread
from ..workloads import Workload, conv2d_output_hw
from .base import (
    STAGES,
    Infeasible,
    Template,
    check_cpu_vector,
    check_gpu_launch,
    check_stages,
    cooperative_fetch,
    factors,
    limit,
    loops_below,
    one_of,
    order,
    pipeline,
    shared_scope,
)

REDUCE = ["rc", "ry", "rx"]
UNROLL_STEPS = (0, 125, 256)
SHARED_ALIGN = 64
"""Bytes each shared-memory buffer is aligned to (``alignas(64)`` in TVM's CUDA)."""
REGISTER_OVERHEAD = 40
"""Registers a thread needs besides its accumulators and fill rounds (operands, addresses, loop
counters): calibrated so that no configuration the check admits runs out of them (``tests``: the cubin TVM's
compile makes, ``nni_opevo_bench.cubin``)."""
REGISTERS_PER_STAGE = 8
"""Registers each pipeline stage past the first adds (the offsets of the copies in flight):
without them, 2 of 28 admitted 4-stage draws spilled 8-40 bytes (ResNet-18's R7)."""


class Conv2dTemplate(Template):
    families = ("conv2d",)

    def space(self, workload: Workload, target_kind: str) -> dict[str, Any]:
        s = workload.shape
        out_h, out_w = conv2d_output_hw(s)
        if target_kind == "cuda":
            return {
                "tile_f": {"_type": "factor", "_value": [s["out_channels"], 4]},
                "tile_y": {"_type": "factor", "_value": [out_h, 4]},
                "tile_x": {"_type": "factor", "_value": [out_w, 4]},
                "tile_rc": {"_type": "factor", "_value": [s["in_channels"], 2]},
                "tile_ry": {"_type": "factor", "_value": [s["kernel_h"], 2]},
                "tile_rx": {"_type": "factor", "_value": [s["kernel_w"], 2]},
                "reduce_order": {"_type": "perm", "_value": REDUCE},
                "unroll_explicit": {"_type": "choice", "_value": [0, 1]},
                "auto_unroll_max_step": {"_type": "discrete", "_value": list(UNROLL_STEPS)},
                "stages": {"_type": "choice", "_value": list(STAGES)},
            }
        return {
            "tile_f": {"_type": "factor", "_value": [s["out_channels"], 2]},
            "tile_y": {"_type": "factor", "_value": [out_h, 2]},
            "tile_x": {"_type": "factor", "_value": [out_w, 2]},
            "tile_rc": {"_type": "factor", "_value": [s["in_channels"], 2]},
            "reduce_order": {"_type": "perm", "_value": REDUCE},
            "auto_unroll_max_step": {"_type": "discrete", "_value": list(UNROLL_STEPS)},
        }

    def check(self, workload: Workload, params: dict[str, Any], target: Target) -> None:
        s = workload.shape
        out_h, out_w = conv2d_output_hw(s)
        one_of(params, "auto_unroll_max_step", UNROLL_STEPS)
        order(params, "reduce_order", REDUCE)
        if target.kind == "cuda":
            f = factors(params, "tile_f", s["out_channels"], 4)
            y = factors(params, "tile_y", out_h, 4)
            x = factors(params, "tile_x", out_w, 4)
            factors(params, "tile_rc", s["in_channels"], 2)
            factors(params, "tile_ry", s["kernel_h"], 2)
            factors(params, "tile_rx", s["kernel_w"], 2)
            explicit = one_of(params, "unroll_explicit", (0, 1))
            stages = check_stages(params, target)
            if stages > 2 and not explicit:
                raise Infeasible(f"stages {stages} needs unroll_explicit 1: the pipeline's last stages wait for "
                                 "counts of copies that only a written-out loop makes constants")
            threads = f[2] * y[2] * x[2]
            check_gpu_launch(target, [f[2], y[2], x[2]], f[1] * y[1] * x[1], _shared_bytes(s, params, stages),
                             [s["batch"] * f[0], y[0]], dynamic_shared=True)
            limit("estimated registers per thread", _registers(s, params), registers_per_thread(threads))
        else:
            factors(params, "tile_f", s["out_channels"], 2)
            factors(params, "tile_y", out_h, 2)
            x = factors(params, "tile_x", out_w, 2)
            factors(params, "tile_rc", s["in_channels"], 2)
            check_cpu_vector("tile_x", x[1])

    def flops(self, workload: Workload) -> float:
        s = workload.shape
        out_h, out_w = conv2d_output_hw(s)
        return 2.0 * s["batch"] * s["out_channels"] * out_h * out_w * s["in_channels"] * s["kernel_h"] * s["kernel_w"]

    def compute(self, workload: Workload, split: int = 1) -> list[Any]:
        from tvm import te, tirx

        s = workload.shape
        p, stride = s["padding"], s["stride"]
        out_h, out_w = conv2d_output_hw(s)
        data = te.placeholder((s["batch"], s["in_channels"], s["height"], s["width"]), "float32", name="data")
        kernel = te.placeholder((s["out_channels"], s["in_channels"], s["kernel_h"], s["kernel_w"]), "float32",
                                name="kernel")
        padded = te.compute(
            (s["batch"], s["in_channels"], s["height"] + 2 * p, s["width"] + 2 * p),
            lambda n, c, y, x: tirx.if_then_else(
                tirx.all(y >= p, y < s["height"] + p, x >= p, x < s["width"] + p),
                data[n, c, y - p, x - p], tirx.const(0.0, "float32")),
            name="pad")
        rc = te.reduce_axis((0, s["in_channels"]), name="rc")
        ry = te.reduce_axis((0, s["kernel_h"]), name="ry")
        rx = te.reduce_axis((0, s["kernel_w"]), name="rx")
        out = te.compute(
            (s["batch"], s["out_channels"], out_h, out_w),
            lambda n, f, y, x: te.sum(padded[n, rc, y * stride + ry, x * stride + rx] * kernel[f, rc, ry, rx],
                                      axis=[rc, ry, rx]),
            name="conv")
        return [data, kernel, out]

    def schedule(self, sch: Any, workload: Workload, params: dict[str, Any], target: Target) -> None:
        block = sch.get_sblock("conv")
        loops = tuple(sch.get_loops(block))
        if target.kind == "cuda":
            self._schedule_cuda(sch, block, loops, params, workload, target)
        else:
            self._schedule_cpu(sch, block, loops, params, workload)

    @staticmethod
    def _schedule_cuda(sch: Any, block: Any, loops: tuple[Any, ...], params: dict[str, Any], workload: Workload,
                       target: Target) -> None:
        n, f, y, x, rc, ry, rx = loops
        bf, vf, tf, fi = sch.split(f, params["tile_f"])
        by, vy, ty, yi = sch.split(y, params["tile_y"])
        bx, vx, tx, xi = sch.split(x, params["tile_x"])
        rco, rci = sch.split(rc, params["tile_rc"])
        ryo, ryi = sch.split(ry, params["tile_ry"])
        rxo, rxi = sch.split(rx, params["tile_rx"])
        outer = [{"rc": rco, "ry": ryo, "rx": rxo}[name] for name in params["reduce_order"]]
        sch.reorder(n, bf, by, bx, vf, vy, vx, tf, ty, tx, *outer, rci, ryi, rxi, fi, yi, xi)
        # One loop over the shared-memory stages, in ``reduce_order``: what the pipeline runs ahead in.
        step = sch.fuse(*outer)
        bz = sch.fuse(n, bf)
        for loop, tag in ((bz, "blockIdx.z"), (by, "blockIdx.y"), (bx, "blockIdx.x"), (vf, "vthread.z"),
                          (vy, "vthread.y"), (vx, "vthread.x"), (tf, "threadIdx.z"), (ty, "threadIdx.y"),
                          (tx, "threadIdx.x")):
            sch.bind(loop, tag)
        accumulate = sch.cache_write(block, 0, "local")
        sch.reverse_compute_at(accumulate, tx)
        # The per-thread tile's loops and the write-back's are written out: an accumulator array
        # indexed by a loop variable lives in local memory instead of registers.
        _write_out(sch, [fi, yi, xi])
        _write_out(sch, loops_below(sch, accumulate, tx))
        threads = [(params["tile_f"][2], "threadIdx.z"), (params["tile_y"][2], "threadIdx.y"),
                   (params["tile_x"][2], "threadIdx.x")]
        scope = shared_scope(_shared_bytes(workload.shape, params, params["stages"]), target)
        for operand in (0, 1):
            shared = sch.cache_read(block, operand, scope)
            sch.compute_at(shared, step)
            cooperative_fetch(sch, shared, step, threads)
            # A fill the auto-unroll step covers is written out by TVM in either unroll mode:
            # left to nvcc's ``#pragma unroll``, its rounds' addresses spill (C1, 440 threads).
            # A single round is no loop to unroll, and an annotated one-round loop stops TVM
            # turning the pipelined fill into cp.async.
            rounds = [loop for loop in loops_below(sch, shared, step)[:1] if int(sch.get(loop).extent) > 1]
            for loop in rounds:
                sch.annotate(loop, "pragma_unroll_explicit", 1)
        sch.annotate(bz, "pragma_auto_unroll_max_step", params["auto_unroll_max_step"])
        sch.annotate(bz, "pragma_unroll_explicit", params["unroll_explicit"])
        pipeline(sch, step, params["stages"])
        initial = sch.decompose_reduction(block, step)
        _write_out(sch, loops_below(sch, initial, tx))  # the accumulators' zeroing, in registers too
        # Padding is computed where the padded data is read: into the shared-memory tile (so the
        # tile is exactly the halo'd window and the inner loop has no bounds test); a pipelined
        # fill of a padding element writes zero instead of copying.
        sch.compute_inline(sch.get_sblock("pad"))

    @staticmethod
    def _schedule_cpu(sch: Any, block: Any, loops: tuple[Any, ...], params: dict[str, Any], workload: Workload) -> None:
        n, f, y, x, rc, ry, rx = loops
        f0, f1 = sch.split(f, params["tile_f"])
        y0, y1 = sch.split(y, params["tile_y"])
        x0, x1 = sch.split(x, params["tile_x"])
        rc0, rc1 = sch.split(rc, params["tile_rc"])
        outer = [{"rc": rc0, "ry": ry, "rx": rx}[name] for name in params["reduce_order"]]
        sch.reorder(n, f0, y0, x0, *outer, rc1, f1, y1, x1)
        fused = sch.fuse(n, f0, y0)
        sch.parallel(fused)
        accumulate = sch.cache_write(block, 0, "global")
        sch.reverse_compute_at(accumulate, x0)
        store = loops_below(sch, accumulate, x0)
        if params["tile_x"][1] > 1:  # the write-back's row loop (absent for one column) stores whole vectors
            sch.vectorize(store[-1])
        sch.vectorize(x1)
        sch.annotate(fused, "pragma_auto_unroll_max_step", params["auto_unroll_max_step"])
        sch.decompose_reduction(block, outer[0])
        # The padded input is written once, in parallel, before the convolution: read in place,
        # its bounds test would sit in the innermost loop and stop its vectorization (2.8x
        # slower on C_small). Without padding the copy is the input itself and is inlined.
        pad = sch.get_sblock("pad")
        if workload.shape["padding"]:
            pad_n, pad_c, *_ = sch.get_loops(pad)
            sch.parallel(sch.fuse(pad_n, pad_c))
        else:
            sch.compute_inline(pad)

    def reference(self, workload: Workload, inputs: list[np.ndarray], index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s = workload.shape
        data, kernel = inputs
        p, stride = s["padding"], s["stride"]
        n, f, y, x = (index[:, i][:, None, None, None] for i in range(4))
        c = np.arange(s["in_channels"])[None, :, None, None]
        ry = np.arange(s["kernel_h"])[None, None, :, None]
        rx = np.arange(s["kernel_w"])[None, None, None, :]
        iy, ix = y * stride + ry - p, x * stride + rx - p  # positions in the unpadded input
        inside = (iy >= 0) & (iy < s["height"]) & (ix >= 0) & (ix < s["width"])
        window = data[n, c, np.clip(iy, 0, s["height"] - 1), np.clip(ix, 0, s["width"] - 1)].astype(np.float64)
        products = np.where(inside, window, 0.0) * kernel[f[:, 0, 0, 0]].astype(np.float64)
        axes = (1, 2, 3)
        return products.sum(axis=axes), np.abs(products).sum(axis=axes)


def _write_out(sch: Any, loops: list[Any]) -> None:
    """Unroll ``loops`` in the generated code itself, whatever ``unroll_explicit`` says for the
    loops around them (with 0, TVM leaves unrolling to nvcc's ``#pragma unroll``, which does not
    always unroll a 27-long loop, and an accumulator it indexes then lives in local memory)."""
    for loop in loops:
        sch.unroll(loop)
    if loops:
        sch.annotate(loops[0], "pragma_unroll_explicit", 1)


def _stage_elements(shape: dict[str, Any], params: dict[str, Any]) -> tuple[int, int]:
    """The elements one shared-memory stage holds: the input window (the output tile's rows and
    columns with their halo, over the stage's input channels) and the kernel tile."""
    f, y, x = params["tile_f"], params["tile_y"], params["tile_x"]
    rc, ry, rx = params["tile_rc"][1], params["tile_ry"][1], params["tile_rx"][1]
    in_h = (y[1] * y[2] * y[3] - 1) * shape["stride"] + ry
    in_w = (x[1] * x[2] * x[3] - 1) * shape["stride"] + rx
    return rc * in_h * in_w, f[1] * f[2] * f[3] * rc * ry * rx


def _shared_bytes(shape: dict[str, Any], params: dict[str, Any], stages: int) -> int:
    """A CUDA block's shared memory: one stage's input window and kernel tile, once per pipeline
    stage, each buffer starting on a ``SHARED_ALIGN`` boundary as TVM declares them."""
    return sum(-(-4 * stages * elements // SHARED_ALIGN) * SHARED_ALIGN for elements in _stage_elements(shape, params))


def _registers(shape: dict[str, Any], params: dict[str, Any]) -> int:
    """A thread's estimated registers: its accumulators, one for each round of a stage's fill
    that is written out (the auto-unroll step covers it: nvcc keeps each round's address, or its
    loaded value, live), ``REGISTERS_PER_STAGE`` for each pipeline stage past the first, and
    ``REGISTER_OVERHEAD``."""
    f, y, x = params["tile_f"], params["tile_y"], params["tile_x"]
    threads = f[2] * y[2] * x[2]
    rounds = [-(-elements // threads) for elements in _stage_elements(shape, params)]
    written = sum(r for r in rounds if r <= params["auto_unroll_max_step"])
    pipelined = REGISTERS_PER_STAGE * (params["stages"] - 1)
    return f[1] * f[3] * y[1] * y[3] * x[1] * x[3] + written + pipelined + REGISTER_OVERHEAD
