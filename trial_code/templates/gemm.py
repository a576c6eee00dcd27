"""MatMul and BatchMatMul: one template, the batch axis being absent for MatMul.

CUDA follows TVM's classic dense template (OpEvo paper, appendix B.1-B.2): N and M split in 4
(blocks, virtual threads, threads, per-thread tile), K in 3 (shared-memory stage, register
stage, inner), the batch in 2 (blocks, per-thread batches). ``inner_order`` permutes the
per-thread loops (k inner, n tile, m tile), which changes the register-level code.
The CPU variant tiles N and M in 3 (parallel, cache block, register tile) and K in 2, with
``block_order`` permuting the cache-block loops. The register tile is the micro-kernel of the
fast CPU GEMMs: its N rows unrolled, its M columns vectorized, accumulated in a buffer of its own
that the K loops below it never leave, so LLVM keeps it in vector registers and stores C once.
That buffer sits at the innermost cache-block loop above the first K loop: with ``block_order``
n, m, k it is one register tile; with k first it is the whole parallel block, re-read from L1
between K steps (the BLIS way).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..targets import Target
from ..workloads import Workload
from .base import (
    Template,
    check_cpu_unroll,
    check_cpu_vector,
    check_gpu_launch,
    cooperative_fetch,
    factors,
    loops_below,
    order,
)

GPU_INNER = ["k", "n", "m"]
CPU_BLOCK = ["k", "n", "m"]


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
                "tile_k": {"_type": "factor", "_value": [s["k"], 3]},
                "inner_order": {"_type": "perm", "_value": GPU_INNER},
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
            b = factors(params, "tile_b", s["batch"], 2) if workload.family == "batch_matmul" else [1, 1]
            n = factors(params, "tile_n", s["n"], 4)
            m = factors(params, "tile_m", s["m"], 4)
            k = factors(params, "tile_k", s["k"], 3)
            order(params, "inner_order", GPU_INNER)
            # Shared tiles are staged per batch: the per-thread batch loop encloses the K stages.
            shared = 4 * (n[1] * n[2] * n[3] + m[1] * m[2] * m[3]) * k[1] * k[2]
            check_gpu_launch(target, [n[2], m[2]], n[1] * m[1], shared, [n[0], b[0]])
        else:
            n = factors(params, "tile_n", s["n"], 3)
            m = factors(params, "tile_m", s["m"], 3)
            factors(params, "tile_k", s["k"], 2)
            order(params, "block_order", CPU_BLOCK)
            check_cpu_unroll("tile_n", n[2])
            check_cpu_vector("tile_m", m[2])

    def flops(self, workload: Workload) -> float:
        s = workload.shape
        return 2.0 * s["batch"] * s["n"] * s["m"] * s["k"]

    def compute(self, workload: Workload) -> list[Any]:
        from tvm import te

        s = workload.shape
        n, m, k, layout = s["n"], s["m"], s["k"], s["layout"]
        lead = (s["batch"],) if workload.family == "batch_matmul" else ()
        a = te.placeholder(lead + ((k, n) if layout[0] == "T" else (n, k)), "float32", name="A")
        b = te.placeholder(lead + ((m, k) if layout[1] == "T" else (k, m)), "float32", name="B")
        r = te.reduce_axis((0, k), name="k")

        def body(*axes: Any) -> Any:
            *bat, i, j = axes
            x = a[(*bat, r, i)] if layout[0] == "T" else a[(*bat, i, r)]
            y = b[(*bat, j, r)] if layout[1] == "T" else b[(*bat, r, j)]
            return te.sum(x * y, axis=r)

        c = te.compute(lead + (n, m), body, name="C")
        return [a, b, c]

    def schedule(self, sch: Any, workload: Workload, params: dict[str, Any], target: Target) -> None:
        block = sch.get_sblock("C")
        *batch, i, j, k = sch.get_loops(block)
        if target.kind == "cuda":
            self._schedule_cuda(sch, block, batch, i, j, k, params)
        else:
            self._schedule_cpu(sch, block, batch, i, j, k, params)

    @staticmethod
    def _schedule_cuda(sch: Any, block: Any, batch: list[Any], i: Any, j: Any, k: Any, params: dict[str, Any]) -> None:
        n0, n1, n2, n3 = sch.split(i, params["tile_n"])
        m0, m1, m2, m3 = sch.split(j, params["tile_m"])
        k0, k1, k2 = sch.split(k, params["tile_k"])
        inner = {"k": k2, "n": n3, "m": m3}
        outer_b, inner_b = sch.split(batch[0], params["tile_b"]) if batch else (None, None)
        sch.reorder(*[loop for loop in (outer_b, n0, m0, n1, m1, n2, m2, inner_b, k0, k1) if loop is not None],
                    *[inner[name] for name in params["inner_order"]])
        if outer_b is not None:
            sch.bind(outer_b, "blockIdx.z")
        sch.bind(n0, "blockIdx.y")
        sch.bind(m0, "blockIdx.x")
        sch.bind(n1, "vthread.y")
        sch.bind(m1, "vthread.x")
        sch.bind(n2, "threadIdx.y")
        sch.bind(m2, "threadIdx.x")
        accumulate = sch.cache_write(block, 0, "local")
        sch.reverse_compute_at(accumulate, m2)
        threads = [(params["tile_n"][2], "threadIdx.y"), (params["tile_m"][2], "threadIdx.x")]
        for operand in (0, 1):
            shared = sch.cache_read(block, operand, "shared")
            sch.compute_at(shared, k0)
            cooperative_fetch(sch, shared, k0, threads)
            local = sch.cache_read(block, operand, "local")
            sch.compute_at(local, k1)
        sch.decompose_reduction(block, k0)

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
