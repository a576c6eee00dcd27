"""MatMul and BatchMatMul: one template, the batch axis being absent for MatMul.

CUDA follows TVM's classic dense template (OpEvo paper, appendix B.1-B.2), with what fast fp32
GEMMs add to it. N and M split in 4 (blocks, virtual threads, threads, per-thread tile); the
batch in 2 (blocks, per-thread batches); K in 4: split-K blocks (each computes a partial sum over
its slice of K, and a second kernel adds them, for shapes with too few output tiles to fill the
GPU), then the shared-memory stage loop, the register stage, and the inner loop. ``inner_order``
permutes the per-thread loops (k inner, n tile, m tile). ``vector`` is the width of the global
loads that fill shared memory (4: 128-bit ``ld.global.v4``); ``stages`` pipelines those loads up to
three stages ahead with ``cp.async`` (sm_80 and newer); ``pad`` pads the shared tiles' rows against
bank conflicts; ``raster`` orders the blocks in groups of column blocks that sweep every row block
(a swizzle for L2 reuse); ``unroll`` is TVM's explicit unroll
limit for the block's loops, and unrolls the register stage whole when its multiply-adds fit.
Tiles past the 48 KB of static shared memory go to dynamic shared memory, up to the opt-in
limit (227 KB on an H100).
The CPU variant tiles N and M in 3 (parallel, cache block, register tile) and K in 2, with
``block_order`` permuting the cache-block loops. The register tile is the micro-kernel of the
fast CPU GEMMs: its N rows unrolled, its M columns vectorized, accumulated in a buffer of its own
that the K loops below it never leave, so LLVM keeps it in vector registers and stores C once.
That buffer sits at the innermost cache-block loop above the first K loop: with ``block_order``
n, m, k it is one register tile; with k first it is the whole parallel block, re-read from L1
between K steps (the BLIS way).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..targets import Target, registers_per_thread
from ..workloads import Workload
from .base import (
    STAGES,
    Infeasible,
    Template,
    check_cpu_register_tile,
    check_cpu_unroll,
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

GPU_INNER = ["k", "n", "m"]
CPU_BLOCK = ["k", "n", "m"]
UNROLL_STEPS = (0, 16, 64, 512)
VECTOR_LANES = (1, 2, 4)
MAX_SPLIT_K = 16
"""Split-K blocks at most: the partial sums take this many times the output's memory."""
REGISTER_OVERHEAD = 40
"""Registers a thread needs besides its accumulators and operand tiles (addresses, loop
counters): calibrated so that no configuration the check admits runs out of them (``tests``: the cubin TVM's
compile makes, ``nni_opevo_bench.cubin``)."""
HOISTED_STEPS = 4
"""K steps of operand fragments ptxas loads ahead of their use, at most (measured by
``nni-opevo registers``: with fewer, tiles of many K steps that the estimate admitted spilled)."""
VTHREAD_LOOP = 16
"""Virtual threads along one axis from which TVM writes them as a loop rather than one copy of
each statement per virtual thread (``InjectVirtualThread``)."""
WRITTEN_OUT = 2048
"""Multiply-adds a thread's code may hold written out (``written_out``): nvcc's time grows faster
than the code it compiles. Admitted MatMul and BatchMatMul tiles built in 0.5-3.4 s, tiles of
2,049-8,192 in 5-67 s (median 17) and one of 16,384 in more than 300 s (``nni-opevo registers
--rule "multiply-adds written out"``, docs/results/cuda-registers); it refuses none of the trials
of the H200's goal runs or the H100's comparison (``nni-opevo recheck docs/results/h200/goals.csv
docs/results/h100/trials.csv``)."""
RASTER_GROUPS = (0, 2, 4, 8)
"""Column blocks per group of the block order (0: the plain 2-D grid)."""
BANKS = 32
PAD = 4
"""Shared memory's banks, and the floats a padded row's stride exceeds a multiple of them by
(four keeps the 128-bit loads aligned)."""
KNOBS = ("stages", "pad", "raster")
"""The knobs of the shared-memory pipeline and the block order, which a tuned tile keeps its
meaning under (the GPU campaign's ``knobs`` stage measures each tile under all of them)."""


class GemmTemplate(Template):
    families = ("matmul", "batch_matmul")

    def space(self, workload: Workload, target_kind: str) -> dict[str, Any]:
        s = workload.shape
        batched = workload.family == "batch_matmul"
        if target_kind == "cuda":
            space = {"tile_b": {"_type": "factor", "_value": [s["batch"], 2]}} if batched else {}
            space.update({
                "tile_n": {"_type": "factor", "_value": [s["n"], 4]},
                "tile_m": {"_type": "factor", "_value": [s["m"], 4]},
                "tile_k": {"_type": "factor", "_value": [s["k"], 4]},
                "inner_order": {"_type": "perm", "_value": GPU_INNER},
                "unroll": {"_type": "discrete", "_value": list(UNROLL_STEPS)},
                "vector": {"_type": "discrete", "_value": list(VECTOR_LANES)},
                "stages": {"_type": "choice", "_value": list(STAGES)},
                "pad": {"_type": "choice", "_value": [0, 1]},
                "raster": {"_type": "choice", "_value": list(RASTER_GROUPS)},
            })
            return space
        return {
            "tile_n": {"_type": "factor", "_value": [s["n"], 3]},
            "tile_m": {"_type": "factor", "_value": [s["m"], 3]},
            "tile_k": {"_type": "factor", "_value": [s["k"], 2]},
            "block_order": {"_type": "perm", "_value": CPU_BLOCK},
        }

    def check(self, workload: Workload, params: dict[str, Any], target: Target) -> None:
        s = workload.shape
        if target.kind == "cuda":
            self._check_cuda(workload, params, target)
        else:
            n = factors(params, "tile_n", s["n"], 3)
            m = factors(params, "tile_m", s["m"], 3)
            factors(params, "tile_k", s["k"], 2)
            order(params, "block_order", CPU_BLOCK)
            check_cpu_unroll("tile_n", n[2])
            check_cpu_vector("tile_m", m[2])
            check_cpu_register_tile(target, "last of 'tile_n' by last of 'tile_m'", n[2], m[2])

    @staticmethod
    def _check_cuda(workload: Workload, params: dict[str, Any], target: Target) -> None:
        s = workload.shape
        b = factors(params, "tile_b", s["batch"], 2) if workload.family == "batch_matmul" else [1, 1]
        n = factors(params, "tile_n", s["n"], 4)
        m = factors(params, "tile_m", s["m"], 4)
        k = factors(params, "tile_k", s["k"], 4)
        order(params, "inner_order", GPU_INNER)
        one_of(params, "unroll", UNROLL_STEPS)
        lanes = one_of(params, "vector", VECTOR_LANES)
        check_stages(params, target)
        one_of(params, "pad", (0, 1))
        group = one_of(params, "raster", RASTER_GROUPS)
        limit("split-K blocks (first of 'tile_k')", k[0], MAX_SPLIT_K)
        if group and (m[0] % group or m[0] == group):
            raise Infeasible(f"raster {group} must divide the column blocks ({m[0]}, first of 'tile_m') and leave "
                             "more than one group")
        tile_n, tile_m, stage_k = n[1] * n[2] * n[3], m[1] * m[2] * m[3], k[2] * k[3]
        shared = _shared_bytes(params, s["layout"])
        threads = n[2] * m[2]
        check_gpu_launch(target, [n[2], m[2]], n[1] * m[1], shared, [b[0] * k[0]] + ([] if group else [n[0]]),
                         dynamic_shared=True)
        # A vector load reads ``lanes`` neighbours of a shared tile's contiguous axis, aligned when
        # that axis and the global row it comes from are multiples of ``lanes``.
        transposed_a, transposed_b = (letter == "T" for letter in s["layout"])
        runs = {"A": (tile_n, s["n"]) if transposed_a else (stage_k, s["k"]),
                "B": (stage_k, s["k"]) if transposed_b else (tile_m, s["m"])}
        for operand, (run, row) in runs.items():
            if run % lanes or row % lanes:
                raise Infeasible(f"vector {lanes} does not divide the contiguous extent of the {operand} tile "
                                 f"({run}) and of its rows in memory ({row})")
        # The accumulators, and the operand values the register stage holds at once.
        registers = n[1] * n[3] * m[1] * m[3] + _live_fragments(params) + REGISTER_OVERHEAD
        limit("estimated registers per thread", registers, registers_per_thread(threads))
        limit("multiply-adds written out per thread", written_out(params), WRITTEN_OUT)

    def split(self, workload: Workload, params: dict[str, Any] | None, target: Target) -> int:
        """Split-K: the first factor of ``tile_k`` on CUDA."""
        return int(params["tile_k"][0]) if params is not None and target.kind == "cuda" else 1

    def flops(self, workload: Workload) -> float:
        s = workload.shape
        return 2.0 * s["batch"] * s["n"] * s["m"] * s["k"]

    def compute(self, workload: Workload, split: int = 1) -> list[Any]:
        from tvm import te

        s = workload.shape
        n, m, k, layout = s["n"], s["m"], s["k"], s["layout"]
        lead = (s["batch"],) if workload.family == "batch_matmul" else ()
        a = te.placeholder(lead + ((k, n) if layout[0] == "T" else (n, k)), "float32", name="A")
        b = te.placeholder(lead + ((m, k) if layout[1] == "T" else (k, m)), "float32", name="B")
        part = k // split
        r = te.reduce_axis((0, part), name="k")

        def product(bat: list[Any], i: Any, j: Any, kk: Any) -> Any:
            x = a[(*bat, kk, i)] if layout[0] == "T" else a[(*bat, i, kk)]
            y = b[(*bat, j, kk)] if layout[1] == "T" else b[(*bat, kk, j)]
            return x * y

        if split == 1:
            c = te.compute(lead + (n, m), lambda *ax: te.sum(product(ax[:-2], *ax[-2:], r), axis=r), name="C")
            return [a, b, c]
        # Split-K: partial sums over each slice of K, then their sum.
        partial = te.compute((split, *lead, n, m),
                             lambda p, *ax: te.sum(product(ax[:-2], *ax[-2:], p * part + r), axis=r), name="C_split")
        q = te.reduce_axis((0, split), name="p")
        c = te.compute(lead + (n, m), lambda *ax: te.sum(partial[(q, *ax)], axis=q), name="C")
        return [a, b, c]

    def schedule(self, sch: Any, workload: Workload, params: dict[str, Any], target: Target) -> None:
        if target.kind == "cuda":
            self._schedule_cuda(sch, workload, params, target)
            return
        block = sch.get_sblock("C")
        *batch, i, j, k = sch.get_loops(block)
        self._schedule_cpu(sch, block, batch, i, j, k, params)

    @staticmethod
    def _schedule_cuda(sch: Any, workload: Workload, params: dict[str, Any], target: Target) -> None:
        split = params["tile_k"][0]
        block = sch.get_sblock("C_split" if split > 1 else "C")
        loops = sch.get_loops(block)
        *outer, i, j, k = loops
        if split > 1:
            _add_partial_sums(sch, sch.get_sblock("C"))
        n0, n1, n2, n3 = sch.split(i, params["tile_n"])
        m0, m1, m2, m3 = sch.split(j, params["tile_m"])
        k0, k1, k2 = sch.split(k, params["tile_k"][1:])
        inner = {"k": k2, "n": n3, "m": m3}
        # outer: the split-K slice (when split), then the batch (when batched).
        batch = outer[-1] if workload.family == "batch_matmul" else None
        outer_b, inner_b = sch.split(batch, params["tile_b"]) if batch is not None else (None, None)
        blocks_z = [loop for loop in (outer[0] if split > 1 else None, outer_b) if loop is not None]
        sch.reorder(*blocks_z, n0, m0, n1, m1, n2, m2, *([inner_b] if inner_b is not None else []), k0, k1,
                    *[inner[name] for name in params["inner_order"]])
        if blocks_z:
            sch.bind(sch.fuse(*blocks_z) if len(blocks_z) > 1 else blocks_z[0], "blockIdx.z")
        if params["raster"]:
            # Blocks in groups of ``raster`` column blocks, each group sweeping every row block
            # before the next: consecutive blocks share B's columns and A's rows in L2.
            group_of, in_group = sch.split(m0, [None, params["raster"]])
            sch.reorder(group_of, n0, in_group)
            sch.bind(sch.fuse(group_of, n0, in_group), "blockIdx.x")
        else:
            sch.bind(n0, "blockIdx.y")
            sch.bind(m0, "blockIdx.x")
        sch.bind(n1, "vthread.y")
        sch.bind(m1, "vthread.x")
        sch.bind(n2, "threadIdx.y")
        sch.bind(m2, "threadIdx.x")
        # The accumulators hold one batch's tile: indexed by the per-thread batch loop (which
        # encloses the K loops and is never unrolled) they would live in local memory.
        accumulate = sch.cache_write(block, 0, "local")
        sch.reverse_compute_at(accumulate, inner_b if inner_b is not None else m2)
        threads = [(params["tile_n"][2], "threadIdx.y"), (params["tile_m"][2], "threadIdx.x")]
        scope = shared_scope(_shared_bytes(params, workload.shape["layout"]), target)
        # Every loop that indexes a thread's registers (the operand fragments, the accumulators
        # and their write-back, the per-thread tile itself) is written out: a register array
        # indexed by a loop variable lives in local memory instead.
        in_registers = [inner["k"], inner["n"], inner["m"], *loops_below(sch, accumulate, inner_b or m2)]
        for operand in (0, 1):
            shared = sch.cache_read(block, operand, scope)
            sch.compute_at(shared, k0)
            if params["pad"]:  # rows padded so that a column's elements fall in different banks
                _, length = _tiles(params, workload.shape["layout"])[operand]
                sch.storage_align(shared, 0, axis=-2, factor=_bank_period(length), offset=PAD)
            cooperative_fetch(sch, shared, k0, threads, params["vector"])
            local = sch.cache_read(block, operand, "local")
            sch.compute_at(local, k1)
            in_registers += loops_below(sch, local, k1)
        for loop in in_registers:
            sch.unroll(loop)
        top = sch.get_loops(block)[0]
        if params["unroll"]:
            sch.annotate(top, "pragma_auto_unroll_max_step", params["unroll"])
            sch.annotate(top, "pragma_unroll_explicit", 1)
            if _stage_written_out(params):
                sch.unroll(k1)
        pipeline(sch, k0, params["stages"])  # k0's body: the two shared-memory fills, then the register stages
        above = [sch.get(loop) for loop in sch.get_loops(block)]
        shared_prefix = next(i for i, loop in enumerate(above) if loop.same_as(sch.get(k0)))
        initial = sch.decompose_reduction(block, k0)
        for loop in sch.get_loops(initial)[shared_prefix:]:  # the accumulators' zeroing, in registers too
            sch.unroll(loop)

    @staticmethod
    def _schedule_cpu(sch: Any, block: Any, batch: list[Any], i: Any, j: Any, k: Any, params: dict[str, Any]) -> None:
        n0, n1, n2 = sch.split(i, params["tile_n"])
        m0, m1, m2 = sch.split(j, params["tile_m"])
        k0, k1 = sch.split(k, params["tile_k"])
        middle = {"k": k0, "n": n1, "m": m1}
        ordered = [middle[name] for name in params["block_order"]]
        sch.reorder(*batch, n0, m0, *ordered, k1, n2, m2)
        parallel = sch.fuse(*batch, n0, m0)
        sch.parallel(parallel)
        above_k = ordered[:params["block_order"].index("k")]
        anchor = above_k[-1] if above_k else parallel
        accumulate = sch.cache_write(block, 0, "global")
        sch.reverse_compute_at(accumulate, anchor)
        # The buffer spans the M parts below its anchor: the register tile's, and the cache block's too
        # unless the M cache-block loop is above the anchor.
        m_above = "m" in params["block_order"][:len(above_k)]
        columns = params["tile_m"][2] * (1 if m_above else params["tile_m"][1])
        store = loops_below(sch, accumulate, anchor)
        if columns > 1:  # the write-back's column loop (absent for a single column) stores whole vectors
            sch.vectorize(sch.split(store[-1], [None, params["tile_m"][2]])[1])
        sch.unroll(n2)
        sch.vectorize(m2)
        sch.decompose_reduction(block, k0)

    def reference(self, workload: Workload, inputs: list[np.ndarray], index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s = workload.shape
        a, b = (x.astype(np.float64).reshape((-1,) + x.shape[-2:]) for x in inputs)
        if s["layout"][0] == "T":
            a = a.transpose(0, 2, 1)
        if s["layout"][1] == "T":
            b = b.transpose(0, 2, 1)
        if index.shape[1] == 2:
            index = np.concatenate([np.zeros((len(index), 1), dtype=index.dtype), index], axis=1)
        rows = a[index[:, 0], index[:, 1], :]  # (S, K)
        cols = b[index[:, 0], :, index[:, 2]]  # (S, K)
        products = rows * cols
        return products.sum(axis=1), np.abs(products).sum(axis=1)


def _stage_written_out(params: dict[str, Any]) -> bool:
    """Whether the register stage is written out whole (an 8 x 8 tile over 8 K steps: 512
    multiply-adds and no loop): when its multiply-adds are within ``unroll``. TVM's own count
    includes the loads, and stops short of it."""
    n, m, k = params["tile_n"], params["tile_m"], params["tile_k"]
    return 0 < k[2] * k[3] * n[1] * n[3] * m[1] * m[3] <= params["unroll"]


def written_out(params: dict[str, Any]) -> int:
    """The multiply-adds a thread's kernel holds as straight-line code: what nvcc's time grows
    with. The inner K loop and the thread's tile are always written out (their registers are
    indexed by them); TVM copies each statement once per virtual thread along an axis shorter
    than ``VTHREAD_LOOP`` or within ``unroll``, writes the register stage out whole under
    ``_stage_written_out``, and a pipeline of ``stages`` holds that many register stages (its
    body and the last stages' epilogue). Equal to the count in TVM's CUDA source for every tile
    of more than 512 drawn (``tests``); TVM's auto-unroll may write out more of a tile whose
    body is small, never past ``unroll``."""
    n, m, k = params["tile_n"], params["tile_m"], params["tile_k"]
    copies = math.prod(vthreads for vthreads in (n[1], m[1]) if vthreads < VTHREAD_LOOP or vthreads <= params["unroll"])
    pipelined = min(params["stages"], k[1])
    return k[3] * n[3] * m[3] * copies * pipelined * (k[2] if _stage_written_out(params) else 1)


def _live_fragments(params: dict[str, Any]) -> int:
    """The operand values a thread holds at once in its register stage. The order of its loops
    (``inner_order``) holds some: an A value (row n, step k) serves every column of the thread's
    tile, so it stays live across the m loop, together with every A value the loops inside that
    loop index; B's values likewise across the n loop. A loop of one step (a tile one row or one
    column wide) uses each value once and holds none. ptxas moves each load next to its use,
    ahead by up to ``HOISTED_STEPS`` K steps' fragments to hide shared memory's latency. Counting
    every K step's fragments whatever the order refused most of the tiles that ptxas keeps in
    registers (``nni-opevo registers``). TVM writes a virtual-thread axis of ``VTHREAD_LOOP`` or
    more as a loop, which the order no longer governs: then every fragment counts."""
    n, m, k = params["tile_n"], params["tile_m"], params["tile_k"]
    extents = {"n": n[1] * n[3], "m": m[1] * m[3], "k": k[3]}
    step = extents["n"] + extents["m"]
    if max(n[1], m[1]) >= VTHREAD_LOOP:
        return k[3] * step
    order = params["inner_order"]

    def held(indices: str, across: str) -> int:
        if extents[across] == 1:
            return 0
        return int(np.prod([extents[loop] for loop in order[order.index(across) + 1:] if loop in indices]))

    return held("nk", "m") + held("km", "n") + min(k[3], HOISTED_STEPS) * step


def _tiles(params: dict[str, Any], layout: str) -> list[tuple[int, int]]:
    """(rows, row length) of the A and B tiles of one K stage as shared memory stores them: A is
    N x K (K x N when transposed), B is K x M (M x K when transposed)."""
    n, m, k = params["tile_n"], params["tile_m"], params["tile_k"]
    tile_n, tile_m, stage_k = n[1] * n[2] * n[3], m[1] * m[2] * m[3], k[2] * k[3]
    return [(stage_k, tile_n) if layout[0] == "T" else (tile_n, stage_k),
            (tile_m, stage_k) if layout[1] == "T" else (stage_k, tile_m)]


def _shared_bytes(params: dict[str, Any], layout: str) -> int:
    """A CUDA block's shared memory: the A and B tiles of one K stage, once per pipeline stage,
    their rows padded (``_padded``) with ``pad``. The tiles are staged per batch: the per-thread
    batch loop encloses the K stages."""
    elements = sum(rows * (_padded(length) if params["pad"] else length) for rows, length in _tiles(params, layout))
    return 4 * elements * params["stages"]


def _bank_period(length: int) -> int:
    """The stride period a padded row of ``length`` floats aligns to: the banks (32), or the least
    power of two above the row when it is shorter (a short row padded to 36 floats wastes most)."""
    period = 2 * PAD
    while period < min(length, BANKS):
        period *= 2
    return period


def _padded(length: int) -> int:
    """A row's stride after ``storage_align(factor=_bank_period, offset=PAD)``: the least >=
    ``length`` that is ``PAD`` more than a multiple of the period, so consecutive rows start in
    banks ``PAD`` apart and a column's elements fall in different banks."""
    period = _bank_period(length)
    return length + (PAD - length) % period


SUM_THREADS = 256
"""Threads per block of the kernel that adds the split-K partial sums (a memory-bound sweep)."""


def _add_partial_sums(sch: Any, block: Any) -> None:
    """The split-K sum: one thread per output element, the slices added in a loop."""
    *spatial, _ = sch.get_loops(block)
    fused = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
    blocks, threads = sch.split(fused, [None, SUM_THREADS])
    sch.bind(blocks, "blockIdx.x")
    sch.bind(threads, "threadIdx.x")
