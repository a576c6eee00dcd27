"""A computation that reduces to a single value (a dot product, a sum of squares, a loss, a
norm): its space, check and schedules, for the derived template (``derived``).

Such a reduction has no output axis to spread over cores or threads, so it runs in partial
results, a stage of their own (TVM's ``rfactor``), which a last step combines:

- CPU: each reduction axis split in 3 (parallel, serial, lanes) as ``tile_<axis>``. Each
  parallel chunk sums its serial steps into one partial result per lane, the lanes a vector
  (``lanes`` of 32 or 64: two or four independent vector chains); the chunks' vectors are then
  added up in one loop.
- CUDA: each reduction axis split in 3 (serial steps, blocks, threads). Each thread sums its
  serial steps in a register, reading, step by step, the addresses next to its neighbours' (a
  grid-stride loop: coalesced); a second kernel of one block combines the threads' results
  across its threads (TVM's cross-thread reduction: warp shuffles, then shared memory).
  ``unroll`` is TVM's explicit unroll limit over the first kernel.

Stages after the reduction that compute single values (a mean's division, a norm's square root)
run in the combining step; any that spread the value over a tensor (dividing by a total) are
stages of their own, in parallel over their elements. A single value reduced before it over the
same extents (a log-sum-exp's maximum) runs the same way, over the same tiles, first.
"""
from __future__ import annotations

import math
from typing import Any

from ..targets import MAX_CPU_VECTOR, Target
from .base import check_gpu_launch, factors, leftover, limit, one_of

UNROLL_STEPS = (0, 16, 64, 512)
COMBINE_THREADS = 256
"""Threads of the CUDA kernel that combines the partial results: a warp's shuffles then one
round through shared memory; a power of two that splits most counts of partial results."""


def space(reductions: dict[str, int], cuda: bool) -> dict[str, Any]:
    """``tile_<axis>`` for each reduction axis (``reductions``: name to extent), and on CUDA ``unroll``."""
    tiles: dict[str, Any] = {f"tile_{name}": {"_type": "factor", "_value": [extent, 3]}
                             for name, extent in reductions.items()}
    return {**tiles, "unroll": {"_type": "discrete", "_value": list(UNROLL_STEPS)}} if cuda else tiles


def check(reductions: dict[str, int], params: dict[str, Any], target: Target) -> None:
    tiles = [factors(params, f"tile_{name}", extent, 3) for name, extent in reductions.items()]
    if target.kind == "cuda":
        one_of(params, "unroll", UNROLL_STEPS)
        check_gpu_launch(target, [math.prod(t[2] for t in tiles)], 1, 0, [])
    else:
        limit("vector length (the last factors of the tile_* multiplied)", math.prod(t[2] for t in tiles),
              MAX_CPU_VECTOR)


def schedule_cpu(sch: Any, main: Any, after: list[Any], reductions: dict[str, int], params: dict[str, Any],
                 before: tuple[Any, ...] = ()) -> None:
    """The reduction ``main`` (its single value's stages ``after`` it), and each single value
    ``before`` it over the same extents (a log-sum-exp's maximum), in parallel chunks of vector lanes."""
    _add_loops(sch, after)
    for block in [*before, main]:
        _partials_cpu(sch, block, reductions, params)
    for block in after:
        if _elements(sch, block) > 1:
            leftover(sch, block, cuda=False)


def _partials_cpu(sch: Any, block: Any, reductions: dict[str, int], params: dict[str, Any]) -> None:
    """``block``'s reduction in a partial result per parallel chunk and vector lane, added up after."""
    loops = _reduction_loops(sch, block, len(reductions))
    parts = [sch.split(loop, params[f"tile_{name}"]) for loop, name in zip(loops, reductions)]
    chunks, lanes = [p[0] for p in parts], [p[2] for p in parts]
    partial = _factor(sch, block, [*chunks, *lanes], [p[1] for p in parts])
    lane_count = math.prod(params[f"tile_{name}"][2] for name in reductions)
    results, *steps = _partial_loops(sch, partial, len(reductions))
    parallel, vector = sch.split(results, [None, lane_count])
    sch.reorder(parallel, *steps, vector)
    sch.parallel(parallel)
    sch.vectorize(vector)
    for registers in _cached(sch, partial, "global"):  # each chunk's lanes, a buffer of its own
        sch.reverse_compute_at(registers, parallel)
    sch.decompose_reduction(partial, steps[0])


def schedule_cuda(sch: Any, main: Any, after: list[Any], reductions: dict[str, int], params: dict[str, Any],
                  before: tuple[Any, ...] = ()) -> None:
    """The reduction ``main`` in one partial result per thread, combined across one block's
    threads; each single value ``before`` it over the same extents likewise, in kernels of its own."""
    _add_loops(sch, after)
    for block in before:
        _partials_cuda(sch, block, reductions, params)
        _combine(sch, block)
    _partials_cuda(sch, main, reductions, params)
    # The combining kernel: one block, whose every thread sums a share of the partial results;
    # stages of single values after it run in the same kernel, those of tensors in their own.
    single = [_elements(sch, b) == 1 for b in after]
    if after and all(single):
        kernel = sch.get_loops(after[-1])[0]
        sch.bind(kernel, "blockIdx.x")
        for block in [*reversed(after[:-1]), main]:
            sch.compute_at(block, kernel)
    else:
        for block, one in zip(after, single):
            if one:
                sch.bind(sch.get_loops(block)[0], "threadIdx.x")
            else:
                leftover(sch, block, cuda=True)
    _combine(sch, main)


def _partials_cuda(sch: Any, block: Any, reductions: dict[str, int], params: dict[str, Any]) -> None:
    """``block``'s reduction in one partial result per thread, a kernel of its own."""
    loops = _reduction_loops(sch, block, len(reductions))
    parts = [sch.split(loop, params[f"tile_{name}"]) for loop, name in zip(loops, reductions)]
    partial = _factor(sch, block, [p[1] for p in parts] + [p[2] for p in parts], [p[0] for p in parts])
    threads = math.prod(params[f"tile_{name}"][2] for name in reductions)
    results, *steps = _partial_loops(sch, partial, len(reductions))
    blocks, thread = sch.split(results, [None, threads])
    sch.bind(blocks, "blockIdx.x")
    sch.bind(thread, "threadIdx.x")
    for register in _cached(sch, partial, "local"):
        sch.reverse_compute_at(register, thread)
    sch.decompose_reduction(partial, steps[0])
    if params["unroll"]:
        sch.annotate(blocks, "pragma_auto_unroll_max_step", params["unroll"])
        sch.annotate(blocks, "pragma_unroll_explicit", 1)


def _combine(sch: Any, block: Any) -> None:
    """The partial results of ``block`` summed across one block's threads."""
    count = int(sch.get(sch.get_loops(block)[-1]).extent)
    _, combine = sch.split(sch.get_loops(block)[-1], [None, min(count, COMBINE_THREADS)])
    sch.bind(combine, "threadIdx.x")


def _add_loops(sch: Any, blocks: list[Any]) -> None:
    """A loop of one iteration above each stage that has none (a single value's): TVM's
    ``rfactor`` fails beside a stage without loops, and a GPU thread binds a loop."""
    for block in blocks:
        if not sch.get_loops(block):
            sch.add_unit_loop(block)


def _reduction_loops(sch: Any, block: Any, count: int) -> list[Any]:
    """The ``count`` innermost loops of ``block``, its reductions (after axes of extent 1, a
    one-element output's)."""
    return list(sch.get_loops(block)[-count:])


def _partial_loops(sch: Any, block: Any, count: int) -> list[Any]:
    """The loops of a stage of partial results (``_factor``) over its results, then its ``count``
    serial steps (below any axis of extent 1)."""
    return list(sch.get_loops(block)[-count - 1:])


def _factor(sch: Any, block: Any, results: list[Any], steps: list[Any]) -> Any:
    """The partial results of ``block``, one per iteration of ``results`` (loops of its reduction
    axes), each summing ``steps``: a stage of their own (``rfactor``), which ``block`` combines."""
    sch.reorder(*results, *steps)
    fused = sch.fuse(*results) if len(results) > 1 else results[0]
    return sch.rfactor(fused, 0)


def _elements(sch: Any, block: Any) -> int:
    return math.prod(int(iv.dom.extent) for iv in sch.get(block).iter_vars)


def _cached(sch: Any, partial: Any, scope: str) -> list[Any]:
    """The partial results accumulated in ``scope`` and written back once: one buffer per value
    the reduction carries (a tuple's, an argmax's index beside its maximum, each its own)."""
    return [sch.cache_write(partial, i, scope) for i in range(len(sch.get(partial).writes))]
