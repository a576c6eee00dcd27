"""What every operator template provides, and the factor checks they share.

A template owns one operator family: its search space per target kind, its static feasibility
rules (plain arithmetic on the factors and the target's limits, no TVM, so an infeasible
configuration is rejected in milliseconds), its TE compute, its schedule, and a float64
reference for sampled output elements. TVM is imported inside ``compute`` and ``schedule``
only, so the trial's parent process, the space generator and the tuner never load it.
"""
from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from ..targets import MAX_BLOCK_DIM_Z, MAX_CPU_UNROLL, MAX_CPU_VECTOR, MAX_GRID_DIM_YZ, MAX_VTHREADS, Target
from ..workloads import Workload

STAGES = (1, 2, 3, 4)
"""Shared-memory buffers a staged loop cycles through: 1 fills and computes in turn; more fill
``stages - 1`` stages ahead with ``cp.async`` while the registers compute (``pipeline``)."""
ASYNC_COPY_CC = 80
"""``cp.async`` (the pipeline's copies) exists from compute capability 8.0 (Ampere)."""
SPATIAL, REDUCE = 0, 2
"""TIR's iteration types (``IterVar.iter_type``) of a block's axes."""


class Infeasible(ValueError):
    """The configuration cannot instantiate the template (status INSTANTIATION_ERROR)."""


class NotInSpace(Infeasible):
    """The parameters are not of this workload's search space at all (a missing knob, a factor
    of another extent): a trial reports it like any infeasible configuration, but a tuner-side
    constraint treats it as the experiment's mistake, since its search space and its
    ``constraint_args`` then name different workloads or targets."""


class Template(ABC):
    families: tuple[str, ...]

    @abstractmethod
    def space(self, workload: Workload, target_kind: str) -> dict[str, Any]:
        """The NNI search space (with ``factor``/``perm`` types) for this workload on a target kind."""

    @abstractmethod
    def check(self, workload: Workload, params: dict[str, Any], target: Target) -> None:
        """Raise Infeasible, naming the parameter and the limit, if ``params`` cannot run on ``target``."""

    def identity(self, workload: Workload) -> str:
        """What the workload's inputs and reference depend on besides the seed: the key they
        are cached under (``measure.prepare``)."""
        return json.dumps([workload.family, workload.shape], sort_keys=True)

    def values(self, workload: Workload) -> dict[str, tuple[float, float]]:
        """The values the check draws an input among, by the input's name, where the workload
        declares them (``operators.Operator.values``); the others take their type's defaults
        (``precision.random_inputs``)."""
        return {}

    @abstractmethod
    def flops(self, workload: Workload) -> float:
        """Floating-point operations of one run (a multiply-add counts 2)."""

    @abstractmethod
    def compute(self, workload: Workload, split: int = 1) -> list[Any]:
        """TE tensors: the inputs, then the output. ``split`` > 1: the reduction computed in that
        many slices whose partial sums a second stage adds (split-K), where ``split`` allows it."""

    def split(self, workload: Workload, params: dict[str, Any] | None, target: Target) -> int:
        """How many slices ``compute`` splits the reduction into for these parameters (1: none)."""
        return 1

    @abstractmethod
    def schedule(self, sch: Any, workload: Workload, params: dict[str, Any], target: Target) -> None:
        """Apply the configuration to a ``tvm.s_tir.Schedule`` of ``compute``'s PrimFunc."""

    @abstractmethod
    def reference(self, workload: Workload, inputs: list[np.ndarray], index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Float64 values of the output at ``index`` (one row per element, one column per output
        axis), and the sum of absolute products behind each, which scales the tolerance."""


def factors(params: dict[str, Any], name: str, total: int, parts: int) -> list[int]:
    """``params[name]`` as a list of ``parts`` positive ints with product ``total``."""
    value = params.get(name)
    if (not isinstance(value, list) or len(value) != parts
            or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)):
        raise NotInSpace(f"parameter '{name}' must be a list of {parts} positive ints, got {value!r}")
    if math.prod(value) != total:
        raise NotInSpace(f"parameter '{name}' = {value} must multiply to {total}, not {math.prod(value)}")
    return value


def order(params: dict[str, Any], name: str, items: list[str]) -> list[str]:
    """``params[name]`` as a permutation of ``items``."""
    value = params.get(name)
    if not isinstance(value, list) or sorted(map(str, value)) != sorted(items) or len(value) != len(items):
        raise NotInSpace(f"parameter '{name}' must be a permutation of {items}, got {value!r}")
    return [str(v) for v in value]


def one_of(params: dict[str, Any], name: str, allowed: tuple[int, ...]) -> int:
    value = params.get(name)
    if value not in allowed or isinstance(value, bool):
        raise NotInSpace(f"parameter '{name}' must be one of {list(allowed)}, got {value!r}")
    return int(value)


def limit(what: str, value: int, most: int) -> None:
    if value > most:
        raise Infeasible(f"{what} {value} exceeds the limit {most}")


def check_gpu_launch(target: Target, threads: list[int], vthreads: int, shared_bytes: int,
                     grid_yz: list[int], dynamic_shared: bool = False) -> None:
    """The classic GPU limits: threads per block, threadIdx.z, virtual threads, shared memory
    (the opt-in limit for a kernel that uses dynamic shared memory), grid."""
    limit("threads per block", math.prod(threads), target.max_threads_per_block)
    if len(threads) == 3:
        limit("threadIdx.z extent", threads[0], MAX_BLOCK_DIM_Z)
    limit("virtual threads", vthreads, MAX_VTHREADS)
    limit("shared memory bytes per block", shared_bytes,
          target.shared_memory_limit if dynamic_shared else target.max_shared_memory_per_block)
    for extent in grid_yz:
        limit("blockIdx.y/z extent", extent, MAX_GRID_DIM_YZ)


def check_cpu_vector(name: str, lanes: int) -> None:
    limit(f"vector length (last of '{name}')", lanes, MAX_CPU_VECTOR)


def check_cpu_unroll(name: str, extent: int) -> None:
    limit(f"unrolled register-tile extent (last of '{name}')", extent, MAX_CPU_UNROLL)


def check_cpu_register_tile(target: Target, what: str, rows: int, columns: int, itemsize: int = 4) -> None:
    """A register tile of ``rows`` unrolled rows of ``columns`` vectorized values, accumulated
    across the reduction loop inside it: its accumulators (``rows`` x a row's vectors), one
    step's vectors of the other operand and one broadcast value must fit the CPU's vector
    registers (``Target.vector_registers``), or LLVM spills accumulators to the stack inside the
    innermost loop."""
    if not target.vector_registers:
        return
    vectors = -(-columns * itemsize // target.vector_bytes)
    limit(f"vector registers of the register tile ({what})", rows * vectors + vectors + 1, target.vector_registers)


def loops_below(sch: Any, block: Any, anchor: Any) -> list[Any]:
    """The loops ``compute_at``/``reverse_compute_at(block, anchor)`` created for ``block``: those
    below ``anchor``. Axes of extent 1 get no loop, so they are found by position, not by
    counting the buffer's dimensions (the last loop of a one-element block is ``anchor`` itself,
    with everything else under it)."""
    loops = sch.get_loops(block)
    anchor_node = sch.get(anchor)
    position = next(i for i, loop in enumerate(loops) if sch.get(loop).same_as(anchor_node))
    return list(loops[position + 1:])


def leftover(sch: Any, block: Any, cuda: bool) -> None:
    """A stage left at the top: its leading spatial loops in parallel (CPU) or over the GPU's threads."""
    loops = sch.get_loops(block)
    spatial = [loop for loop, iv in zip(loops, sch.get(block).iter_vars) if int(iv.iter_type) == SPATIAL]
    if not spatial:
        return
    fused = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
    if cuda:
        blocks, threads = sch.split(fused, [None, 128])
        sch.bind(blocks, "blockIdx.x")
        sch.bind(threads, "threadIdx.x")
    else:
        sch.parallel(fused)


def cooperative_fetch(sch: Any, block: Any, anchor: Any, threads: list[tuple[int, str]], lanes: int = 1) -> None:
    """Fill a shared-memory tile with all the block's threads, each loading ``lanes`` neighbours
    at a time (one 128-bit load for 4): the copy loops that ``compute_at(block, anchor)`` created,
    fused, then split into (rounds, the thread axes, lanes), so consecutive threads read
    consecutive addresses (coalesced global loads, conflict-free shared stores)."""
    copy_loops = loops_below(sch, block, anchor)
    if not copy_loops:  # a single element: every thread loads it
        return
    fused = sch.fuse(*copy_loops) if len(copy_loops) > 1 else copy_loops[0]
    _, *bound, vector = sch.split(fused, [None, *(extent for extent, _ in threads), lanes])
    for loop, (_, tag) in zip(bound, threads):
        sch.bind(loop, tag)
    if lanes > 1:
        sch.vectorize(vector)


def check_stages(params: dict[str, Any], target: Target, name: str = "stages", allowed: tuple[int, ...] = STAGES) -> int:
    """``params[name]`` (the shared-memory buffers of ``pipeline``), refused below compute
    capability 8.0 when above 1."""
    stages = one_of(params, name, allowed)
    if stages > 1 and target.compute_capability < ASYNC_COPY_CC:
        raise Infeasible(f"{name} {stages} needs cp.async (sm_80 or newer), not {target.arch or 'this target'}")
    return stages


def pipeline(sch: Any, loop: Any, stages: int, fills: int = 2) -> None:
    """Software-pipeline a staged loop whose body is ``fills`` shared-memory fills, then the
    computation: with ``stages`` > 1 the fills run ``stages - 1`` iterations ahead,
    asynchronously (``cp.async``), into as many more buffers."""
    if stages > 1:
        sch.annotate(loop, "software_pipeline_stage", [0] * fills + [stages - 1])
        sch.annotate(loop, "software_pipeline_order", list(range(fills + 1)))
        sch.annotate(loop, "software_pipeline_async_stages", [0])


def shared_scope(shared_bytes: int, target: Target) -> str:
    """Dynamic shared memory only where static cannot hold the tiles (TVM's merging of dynamic
    allocations fails on one-element tiles, which static memory always holds)."""
    return "shared.dyn" if shared_bytes > target.max_shared_memory_per_block else "shared"


def sample_indices(shape: tuple[int, ...], count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` output positions (rows of indices), always including the first and the last; a
    single value's (shape ``()``) is one row of no index."""
    if not shape:
        return np.zeros((1, 0), dtype=np.int64)
    size = math.prod(shape)
    flat = rng.choice(size, size=min(count, size), replace=False)
    flat[:2] = [0, size - 1][: len(flat[:2])]
    return np.stack(np.unravel_index(flat, shape), axis=1)
