"""The template of a user's computation, derived from its tensor expression (``operators``).

The computation's stages become one loop nest to tile. Element-wise stages (padding, bias,
activations, casts of layout) are inlined into the stages that read them. What remains is the
*main* stage, the last reduction (a MatMul's product, a convolution's sum, softmax's sum of
exponentials), or the output when nothing reduces; stages after it (an epilogue that could not
be inlined, a normalization's division) are computed inside its tiles from the values they
produced there, and reductions before it (softmax's maximum, a layer norm's mean) are computed
inside its outermost tiles for the rows those tiles need.

The main stage's axes give the search space, in the shape of the built-in GEMM and Conv2D spaces:

- CPU: each spatial axis split in 3 (parallel, cache block, register tile) and each reduction
  axis in 2 (cache block, inner) as ``tile_<axis>`` factors; ``order`` permutes the cache-block
  loops. The register tile's last axis is vectorized, the others unrolled, and it accumulates in
  a buffer of its own at the innermost cache-block loop above the first reduction (the stages
  after the main one take its place when there are any). For a MatMul this is the hand-written
  GEMM template's loop nest exactly (``tests/test_operators.py``). Where several stages read one
  element-wise stage (softmax's exponentials), ``compute_once`` chooses between computing it
  once per parallel tile into a buffer and inlining it into each reader. A reduction before the
  main stage of which each main value reads many, along its innermost axis (attention's scores,
  a dot product per key), is a GEMM's register tile across its columns: ``column_rows`` rows by
  a vector of ``columns`` columns at a time, from a copy of the input it reads along them laid
  out with them last; where no width divides its columns, it sums in ``BEFORE_LANES`` partial
  results, one per vector lane, which it then combines. A normalization's
  (``_normalizes``) reductions run a row per vector lane, as many rows as the register tile
  (``row_sums`` 0), or along each row in ``row_sums`` partial results, one per lane; but one
  with columns of its own (the scores before their softmax, a dense layer before its layer
  norm) is the same register tile across its columns.
- CUDA: each spatial axis split in 4 (blocks, virtual threads, threads, per-thread tile) and
  each reduction axis in 3 (shared-memory stage, register stage, inner); ``inner_order``
  permutes the per-thread loops, ``shared`` stages the inputs' tiles in shared memory filled by
  all the block's threads (2-4: that many buffers, filled by ``cp.async`` up to three reduction
  stages ahead, the GEMM template's ``stages``, over one loop of the stages of every reduction),
  ``unroll`` is TVM's explicit unroll limit. Accumulators live in registers, and so do the
  values of the stages before the main one that each thread computes for its tile (softmax's
  maxima and sums), whose reductions stay loops whatever ``unroll`` says; a stage of which each
  value of the main stage reads a whole axis (attention's scores) is a kernel of its own, run
  first. A normalization's stage with columns of its own is held in
  each thread's registers for its rows, or with ``apart`` is such a kernel of its own; where
  every stage but the output computes one value a row, ``row_threads`` threads share each row,
  combining their parts of its reductions across warps (``_share_rows_cuda``). The
  static check bounds threads, virtual threads (more than 32 only within ``unroll``), shared
  memory (each input's footprint from its affine index expressions) and registers.

A reduction to a single value (a dot product, a loss) has no spatial axis to tile: its own
space and schedules, in partial results, are ``totals``'.

Everything is read from the computation with TVM, once per workload and process (``structure``):
the tuner's constraint loads TVM for an operator of the user's, unlike the built-in families.
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..indices import reads_memory
from ..precision import itemsize, numpy_dtype, stage_types
from ..targets import Target, import_tvm, registers_per_thread
from ..workloads import Workload, check_bytes
from . import totals
from .base import (
    REDUCE,
    SPATIAL,
    STAGES,
    Infeasible,
    Template,
    check_cpu_register_tile,
    check_cpu_unroll,
    check_cpu_vector,
    check_gpu_launch,
    check_stages,
    factors,
    leftover,
    limit,
    loops_below,
    one_of,
    order,
    pipeline,
)

UNROLL_STEPS = (0, 16, 64, 512)
ROW_SUMS = (8, 16)
"""A normalization's partial sums along each row on the CPU (``row_sums``): one vector register or
two of them; more gained nothing on AVX-512."""
BEFORE_LANES = 8
"""On the CPU, the partial results of a reduction before the main stage along its row (attention's
scores, each a dot product) where ``columns`` is not in the space: one 256-bit vector of them. Two
(16) ran attention at a third of the speed on AVX2; none (a scalar sum per score) at a quarter."""
COLUMN_WIDTHS = (8, 16, 32, 64)
"""On the CPU, ``columns``: the vector a reduction with columns of its own (``Structure.columns``:
attention's scores) computes at once along them, each lane a column's sum; those that divide its
columns."""
COLUMN_ROWS = (1, 2, 4)
"""On the CPU, ``column_rows``: the rows of that reduction computed at once for each such vector,
each input value broadcast across its lanes, the register tile of a GEMM."""
TRANSPOSE_TILE = 16
"""On the CPU, the square tile in which a packed input (``_pack_columns``) is copied: a tile's
rows and columns stay in L1 while each is read along one and written along the other. Copied
element by element, the copy of a dense layer's 768 x 768 weights held the layer norm after it
to 144 GFLOPS, in tiles 195 (docs/results/operators: OpEvo's best of 64 trials)."""
MAX_AXES = 12
"""Axes of the main stage at most (a 3-D convolution has 9, a convolution of a blocked layout
such as NCHW8c 8): each is tiled, and ``order`` and ``inner_order`` permute them all, which
OpEvo searches by swaps; 12-axis computations build and check on the CPU and compile for the GPU
in a second or two."""
MAX_ROWS_PER_THREAD = 16
"""A normalization's rows one GPU thread reduces: their running values stay in registers."""
ROW_THREADS = (1, 32, 64, 128, 256, 512, 1024)
"""On the GPU, ``row_threads``: the threads that share each row of a normalization whose stages
compute one value a row (softmax's maximum and sum, a layer norm's mean and variance), each
reducing every ``row_threads``-th column and combining across the threads (TVM's cross-thread
reduction: warp shuffles, then shared memory between warps), then writing every
``row_threads``-th column, so that a warp reads and writes a row's consecutive columns. 1 is a
thread per row, reading its row alone: a warp's loads then fall 32 rows apart, and 1,024 rows
keep at most 1,024 threads busy. Those up to the row's length (at least 32) are offered."""
REGISTER_OVERHEAD = 40
"""Registers a CUDA thread needs besides its accumulators (addresses, loop counters)."""
VTHREAD_UNROLLED = 32
"""Virtual threads whose loop a thread's registers survive: TVM writes 16 or more as a loop
around each statement, which ``unroll`` writes out when it covers them and NVVM did up to 32;
past that, of 23 admitted draws below ``unroll`` (of 1,200), 9 kept their accumulators in local
memory (24-560 bytes)."""
COLUMN_REGISTERS = 1.5
"""Registers per value of a row a normalization's GPU thread keeps (the value, and the operands
ptxas keeps to compute it): calibrated so that no configuration the check admits spills (ptxas
used 80 registers for 64 scores, 168 for 128, and spilled at 256)."""


@dataclass(frozen=True)
class Axis:
    name: str
    """The parameter-safe name (``tile_<name>``), from the computation's own axis name."""
    extent: int
    reduction: bool


@dataclass(frozen=True)
class Footprint:
    """How the main stage reads one input: per dimension, the coefficient of each main axis in
    the index (None: not affine, the whole dimension is read by any tile)."""

    name: str
    shape: tuple[int, ...]
    coefficients: tuple[tuple[int, ...] | None, ...]
    itemsize: int
    """Bytes of one of its elements: what a tile's copy in shared memory takes per element."""
    gathered: bool = False
    """Read at positions another input holds (an embedding's table): TVM cannot bound a tile's
    region of it, so it is read from global memory, never staged in shared memory."""

    def elements(self, extents: list[int]) -> int:
        """Elements of this input a tile of ``extents`` (one per main axis) reads."""
        total = 1
        for size, row in zip(self.shape, self.coefficients):
            reach = size if row is None else sum(abs(c) * (e - 1) for c, e in zip(row, extents)) + 1
            total *= min(size, reach)
        return total


@dataclass(frozen=True)
class Structure:
    """What the schedule and the check need of a computation, read once with TVM."""

    axes: tuple[Axis, ...]
    inputs: tuple[Footprint, ...]
    rows: bool
    """A normalization (``_normalizes``): scheduled row by row (``_schedule_rows_cpu``,
    ``_schedule_rows_cuda``)."""
    row_values: int
    """In a normalization, the registers a GPU thread needs per row it computes: one per
    reduction (a mean, a maximum; one per value of a tuple's, an argmax's index and maximum),
    ``COLUMN_REGISTERS`` per value of a stage with columns of its own (the scores of an
    attention before their softmax)."""
    row_length: int
    """In a normalization, the longest axis of a stage besides the rows (a row's columns): an
    ``unroll`` of at least this writes each row's loops out, and ptxas then holds as many loads
    per row in registers."""
    column_values: int
    """In a normalization, the part of ``row_values`` that the stages of ``columns`` take: what a
    GPU thread no longer holds when ``apart`` makes them kernels of their own."""
    separate: tuple[str, ...]
    """Stages before the main one of which one value of the main stage needs many (attention's
    scores, an output reading its row's scores over every key): on the GPU each is a kernel of
    its own, run before the main stage's, not recomputed by every thread into an array that
    spills (``_before_main``)."""
    columns: tuple[tuple[str, int], ...]
    """The stages before the main one with columns of their own that reduce along their innermost
    axis (attention's scores, a dot product per key; a linear layer's outputs before their layer
    norm), each with its columns' extent (its last spatial axis): a separate stage, or in a
    normalization one with more than one value a row. On the CPU ``columns`` and ``column_rows``
    tile each as a GEMM's register tile across its columns (``_columns_in_vectors``)."""
    kept_before: tuple[tuple[str, ...], ...]
    """For each other stage before the main one, the main stage's spatial axes its values follow
    (a row's maximum: the rows' axes). A GPU thread holds one of its values in a register per
    virtual thread and point of its tile along them, beside its accumulators, and one more per
    row for the term the main stage computes from them at each step (softmax's exponential
    over its sum): the estimate counts both."""
    shared: bool
    """An element-wise stage that several stages read (softmax's exponentials): on the CPU the
    ``compute_once`` knob computes it once into a buffer (1) or inlines it into each reader (0)."""
    identity: str
    """A digest of the computation (its TIR), its reference's source and the shape's arguments
    (which the reference may read without the TIR showing them): the inputs' cache key."""
    total: bool = False
    """A reduction to a single value (no spatial axis longer than 1): scheduled in partial
    results (``totals``)."""
    value_registers: int = 1
    """32-bit registers one computed value takes on the GPU: 2 where a stage computes in a 64-bit
    type (float64, int64); a narrower value takes one as well, unless ptxas packs two."""
    carried: int = 1
    """Values the main stage's reduction carries for each point of its output, each in an
    accumulator of its own: 2 for a reduction by a tuple such as an argmax (the index beside the
    maximum), 1 for a sum."""
    row_columns: int = 0
    """The columns of a row that a GPU block's threads may share (``row_threads``): in a
    normalization whose every other stage computes one value a row (softmax, a layer norm, an RMS
    norm; not attention's scores, many a row), the output's values a row; in a reduction to a
    single value, the longest row reduced before it (a loss's log-softmax over its classes). 0
    where no rows are shared."""

    @property
    def spatial(self) -> list[Axis]:
        return [a for a in self.axes if not a.reduction]

    @property
    def row_axes(self) -> list[Axis]:
        """A normalization's rows: the main stage's spatial axes longer than one. An axis of one
        (a reduction's kept dimension, ``keepdims=True``; a batch of one) has nothing to split,
        and the output may spread it over its columns."""
        return [a for a in self.spatial if a.extent > 1]

    @property
    def reductions(self) -> list[Axis]:
        return [a for a in self.axes if a.reduction]

    @property
    def reduction_extents(self) -> dict[str, int]:
        return {a.name: a.extent for a in self.reductions}

    @property
    def holds_registers(self) -> bool:
        """Whether a GPU thread of the main stage holds values in registers across its tile
        (accumulators, or a kept stage's values): the check estimates them, and the schedule
        writes out every loop that indexes them. An element-wise stage holds none."""
        return bool(self.reductions or self.kept_before)


class DerivedTemplate(Template):
    """The template of the operator function ``spec`` (``operators.call``); the workload's shape
    holds ``operator`` (the spec) and the function's keyword arguments."""

    families = ("operator",)

    def __init__(self, spec: str) -> None:
        self.spec = spec

    # -- what the computation is ---------------------------------------------------------------
    def operator(self, workload: Workload) -> Any:
        return _operator(self.spec, _arguments(workload))

    def structure(self, workload: Workload) -> Structure:
        return _structure(self.spec, _arguments(workload))

    def identity(self, workload: Workload) -> str:
        return self.structure(workload).identity

    def values(self, workload: Workload) -> dict[str, tuple[float, float]]:
        """The operator's ``values``, each bound a Python number (NumPy's scalars as they convert)."""
        return {name: tuple(int(v) if isinstance(v, numbers.Integral) else float(v) for v in pair)
                for name, pair in (self.operator(workload).values or {}).items()}

    def flops(self, workload: Workload) -> float:
        return float(self.operator(workload).flops)

    def compute(self, workload: Workload, split: int = 1) -> list[Any]:
        op = self.operator(workload)
        return [*op.inputs, op.output]

    # -- the space and the check -----------------------------------------------------------------
    def space(self, workload: Workload, target_kind: str) -> dict[str, Any]:
        found = self.structure(workload)
        cuda = target_kind == "cuda"
        if found.total:
            return {**totals.space(found.reduction_extents, cuda),
                    **({"row_threads": {"_type": "discrete", "_value": _row_threads(found)}}
                       if cuda and found.row_columns else {})}
        space: dict[str, Any] = {
            f"tile_{a.name}": {"_type": "factor", "_value": [a.extent, (3 if cuda else 2) if a.reduction
                                                              else (4 if cuda else 3)]}
            for a in found.axes}
        names = [a.name for a in found.axes]
        if not cuda:
            space["order"] = {"_type": "perm", "_value": names}
            if found.rows:
                space["row_sums"] = {"_type": "choice", "_value": _row_sums(found)}
            if found.shared:
                space["compute_once"] = {"_type": "choice", "_value": [0, 1]}
            if _column_widths(found):
                space["columns"] = {"_type": "choice", "_value": _column_widths(found)}
                space["column_rows"] = {"_type": "choice", "_value": list(COLUMN_ROWS)}
            return space
        if found.rows:  # blocks, threads (or groups of row_threads), rows per thread (or group)
            return {**{f"tile_{a.name}": {"_type": "factor", "_value": [a.extent, 3]} for a in found.spatial},
                    "unroll": {"_type": "discrete", "_value": list(UNROLL_STEPS)},
                    **({"apart": {"_type": "choice", "_value": [0, 1]}} if found.columns else {}),
                    **({"row_threads": {"_type": "discrete", "_value": _row_threads(found)}}
                       if found.row_columns else {})}
        space["inner_order"] = {"_type": "perm", "_value": names}
        space["unroll"] = {"_type": "discrete", "_value": list(UNROLL_STEPS)}
        if found.reductions:
            space["shared"] = {"_type": "choice", "_value": [0, *STAGES]}
        return space

    def check(self, workload: Workload, params: dict[str, Any], target: Target) -> None:
        found = self.structure(workload)
        cuda = target.kind == "cuda"
        if found.total:
            totals.check(found.reduction_extents, params, target)
            if cuda and found.row_columns:
                one_of(params, "row_threads", tuple(_row_threads(found)))
            return
        if cuda and found.rows:
            rows = {a.name: factors(params, f"tile_{a.name}", a.extent, 3) for a in found.spatial}
            unroll = one_of(params, "unroll", UNROLL_STEPS)
            sharing = one_of(params, "row_threads", tuple(_row_threads(found))) if found.row_columns else 1
            threads, per_thread = math.prod(t[1] for t in rows.values()), math.prod(t[2] for t in rows.values())
            # Shared rows: each reduced value staged once per warp and broadcast once per row.
            staged = 4 * found.value_registers * found.row_values * threads * (-(-sharing // 32) + 1) \
                if sharing > 1 else 0
            check_gpu_launch(target, [threads, sharing], 1, staged, [])
            limit("rows per thread", per_thread, MAX_ROWS_PER_THREAD)
            apart = one_of(params, "apart", (0, 1)) if found.columns else 0
            length = found.row_length
            if sharing > 1:  # a group's rows one after another, a thread's share of each row's columns
                per_thread, length = 1, -(-found.row_columns // sharing)
            per_row = found.row_values - apart * found.column_values + (length if unroll >= length else 0)
            limit("estimated registers per thread", per_thread * per_row * found.value_registers + REGISTER_OVERHEAD,
                  registers_per_thread(threads * sharing))
            return
        tiles = {a.name: factors(params, f"tile_{a.name}", a.extent,
                                 (3 if cuda else 2) if a.reduction else (4 if cuda else 3)) for a in found.axes}
        names = [a.name for a in found.axes]
        spatial = [a.name for a in (found.row_axes if found.rows else found.spatial)]
        if not cuda:
            order(params, "order", names)
            if found.rows:
                one_of(params, "row_sums", tuple(_row_sums(found)))
            if found.shared:
                one_of(params, "compute_once", (0, 1))
            itemsize = 4 * found.value_registers
            if _column_widths(found):
                columns = one_of(params, "columns", tuple(_column_widths(found)))
                rows = one_of(params, "column_rows", COLUMN_ROWS)
                check_cpu_register_tile(target, "'column_rows' by 'columns'", rows, columns, itemsize)
            if spatial:
                check_cpu_vector(f"tile_{spatial[-1]}", tiles[spatial[-1]][2])
                rows = math.prod(tiles[name][2] for name in spatial[:-1])
                check_cpu_unroll("the register tile of the other spatial axes", rows)
                if found.reductions:
                    check_cpu_register_tile(target, "the last factors of the spatial tile_*", rows * found.carried,
                                            tiles[spatial[-1]][2], itemsize)
            return
        order(params, "inner_order", names)
        unroll = one_of(params, "unroll", UNROLL_STEPS)
        if found.reductions:
            check_stages(params, target, "shared", (0, *STAGES))
        threads = math.prod(tiles[name][2] for name in spatial)
        vthreads = math.prod(tiles[name][1] for name in spatial)
        check_gpu_launch(target, [threads], vthreads, _shared_bytes(found, params), [])
        accumulators = found.carried * math.prod(tiles[name][1] * tiles[name][3] for name in spatial) \
            if found.reductions else 0
        # Virtual threads each compute their own copy of a kept stage's values, whichever axes it follows.
        kept = [vthreads * math.prod(tiles[name][3] for name in axes) for axes in found.kept_before]
        kept = sum(kept) + max(kept, default=0)
        if found.holds_registers:
            if vthreads > max(VTHREAD_UNROLLED, unroll):
                raise Infeasible(f"virtual threads {vthreads} (the second factors of the spatial tile_*) exceed "
                                 f"{VTHREAD_UNROLLED} and 'unroll' {unroll}: their loop would hold its registers in "
                                 "local memory")
            limit("estimated registers per thread", (accumulators + kept) * found.value_registers + REGISTER_OVERHEAD,
                  registers_per_thread(threads))

    # -- the schedule ------------------------------------------------------------------------------
    def schedule(self, sch: Any, workload: Workload, params: dict[str, Any], target: Target) -> None:
        found = self.structure(workload)
        cpu = target.kind != "cuda"
        if found.total:
            stages = _stages(sch)
            single = tuple(b for b in stages.before if _spatial_elements(sch, b) == 1)  # a log-sum-exp's maximum
            scheduled = totals.schedule_cpu if cpu else totals.schedule_cuda
            scheduled(sch, stages.main, stages.after, found.reduction_extents, params, single)
            # Reductions along rows (a loss's log-softmax) after: rfactor fails beside a stage
            # without loops, which the single value's schedule gives a loop first.
            for before in stages.before:
                if before not in single:
                    _reduce_each_row(sch, before, cpu, params.get("row_threads", 1))
            return
        stages = _stages(sch, keep_input_stages=cpu or bool(params.get("shared")),
                         keep_shared=cpu and bool(params.get("compute_once")))
        if target.kind == "cuda":
            _schedule_cuda(sch, stages, found, params)
        else:
            _schedule_cpu(sch, stages, found, params)

    # -- the reference -----------------------------------------------------------------------------
    def reference(self, workload: Workload, inputs: list[np.ndarray], index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The output at ``index`` from the operator's reference in float64 (given float64 copies of
        float inputs and int64 copies of integer ones; or TVM's unscheduled loop nest on the CPU);
        the tolerance scale is each value's size plus the output's root mean square, as a sum's
        rounding error follows its terms and not its (possibly cancelled) total."""
        op = self.operator(workload)
        if op.reference is not None:
            full = np.asarray(op.reference(*(x.astype(np.int64 if np.issubdtype(x.dtype, np.integer) else np.float64)
                                             for x in inputs)), dtype=np.float64)
            expected_shape = tuple(int(d) for d in op.output.shape)
            if full.shape != expected_shape:
                raise ValueError(f"operator {self.spec}: its reference returned shape {full.shape}, "
                                 f"the output is {expected_shape}")
        else:
            full = _unscheduled(self.compute(workload), inputs)
        bad = np.isnan(full)
        if bad.any():  # a comparison with NaN is false: the check would pass whatever the kernel wrote
            at = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), full.shape))
            raise ValueError(f"operator {self.spec}: its {'reference' if op.reference else 'output as written'} is "
                             f"NaN at {int(bad.sum()):,} of {full.size:,} output elements (output{at} first) on the "
                             "inputs the check draws (floats in [-1, 1) unless values= says otherwise), where no "
                             "kernel can be checked: give Operator(values={name: (low, high)}) for the inputs whose "
                             "draws leave the computation's domain")
        expected = np.atleast_1d(full[tuple(index.T)])  # a single value's index has no axis
        finite = full[np.isfinite(full)]  # an infinity (a masked score) is compared exactly, at no scale
        scale = float(np.sqrt(np.mean(np.square(finite)))) if finite.size else 0.0
        return expected, np.where(np.isinf(expected), 0.0, np.abs(expected) + scale)


def _row_sums(found: Structure) -> list[int]:
    """``row_sums``'s values: 0 (a row per vector lane) and the ``ROW_SUMS`` that split a row."""
    return [0, *(n for n in ROW_SUMS if _splits(found.reductions[-1].extent, n))]


def _row_threads(found: Structure) -> list[int]:
    """``row_threads``' values: the ``ROW_THREADS`` up to a row's columns (at least 32)."""
    return [n for n in ROW_THREADS if n <= max(32, found.row_columns)]


def _column_widths(found: Structure) -> list[int]:
    """``columns``' values: the ``COLUMN_WIDTHS`` that divide the columns of every stage
    ``Structure.columns`` names (none where there is none: such a stage then reduces as before)."""
    if not found.columns:
        return []
    return [n for n in COLUMN_WIDTHS if all(extent % n == 0 for _, extent in found.columns)]


def _splits(row: int, lanes: int) -> bool:
    """Whether a row of ``row`` terms sums in ``lanes`` partial results of more than one term each."""
    return row % lanes == 0 and row > lanes


def _arguments(workload: Workload) -> dict[str, Any]:
    return {k: v for k, v in workload.shape.items() if k != "operator"}


@functools.cache
def _operator_cached(spec: str, key: tuple) -> Any:
    from .. import operators

    return operators.call(spec, dict(key))


def _operator(spec: str, arguments: dict[str, Any]) -> Any:
    import_tvm()
    return _operator_cached(spec, tuple(sorted(arguments.items())))


def _structure(spec: str, arguments: dict[str, Any]) -> Structure:
    return _structure_cached(spec, tuple(sorted(arguments.items())))


@functools.cache
def _structure_cached(spec: str, key: tuple) -> Structure:
    """The main stage's axes and input footprints; ValueError naming what is not supported."""
    tvm = import_tvm()
    from tvm import s_tir, te, tirx
    from tvm.sym.pattern import detect_linear_equation

    op = _operator(spec, dict(key))
    tensors = [*op.inputs, op.output]
    size = sum(itemsize(str(t.dtype)) * math.prod(int(d) for d in t.shape) for t in tensors)
    check_bytes(f"operator {spec}", size)
    try:
        function = te.create_prim_func(tensors)
        sch = s_tir.Schedule(tvm.IRModule({"main": function}))
    except Exception as e:
        raise ValueError(f"operator {spec}: TVM cannot make a function of it ({type(e).__name__}: "
                         f"{str(e).strip().splitlines()[-1]})") from None
    stages = _stages(sch)
    block = sch.get(stages.main)
    if len(block.iter_vars) > MAX_AXES:
        raise ValueError(f"operator {spec}: its main stage {block.name_hint} has {len(block.iter_vars)} axes; "
                         f"at most {MAX_AXES} are supported")
    if any(int(iv.iter_type) not in (SPATIAL, REDUCE) for iv in block.iter_vars):
        raise ValueError(f"operator {spec}: stage {block.name_hint} has an axis that is neither spatial nor a "
                         "reduction (a scan or an opaque loop): not supported")
    axes, seen = [], set()
    for position, iv in enumerate(block.iter_vars):
        name = _safe(iv.var.name.removeprefix("v_"), position, seen)
        seen.add(name)
        axes.append(Axis(name, int(iv.dom.extent), int(iv.iter_type) == REDUCE))
    total = math.prod(a.extent for a in axes if not a.reduction) == 1
    if total and not any(a.reduction for a in axes):
        raise ValueError(f"operator {spec}: its main stage {block.name_hint} computes a single value without "
                         "reducing: there is nothing to tune")
    extents = [a.extent for a in axes if a.reduction]
    unlike = next((b for b in stages.before if _spatial_elements(sch, b) == 1 and _reduction_extents(sch, b) != extents),
                  None) if total else None
    if unlike is not None:
        raise ValueError(f"operator {spec}: its reduction to a single value {block.name_hint} reads stage "
                         f"{sch.get(unlike).name_hint}, a single value reduced over {_reduction_extents(sch, unlike)} "
                         f"before it, where it reduces over {extents}: single values reduced one after another are "
                         "supported only over the same extents (as a log-sum-exp's maximum and sum are)")
    variables = [iv.var for iv in block.iter_vars]
    params = {t.op.name for t in op.inputs}
    footprints: dict[str, Footprint] = {}
    for region in block.reads:  # each read as TVM infers it: per dimension, where it starts and its extent
        buffer = region.source
        if buffer.name not in params or buffer.name in footprints:
            continue
        rows, gathered = [], False
        for dimension in region.region:
            gathered = gathered or reads_memory(dimension.min) or reads_memory(dimension.extent)
            found = detect_linear_equation(dimension.min, variables)
            point = isinstance(dimension.extent, tirx.IntImm) and int(dimension.extent) == 1
            affine = len(found) == len(variables) + 1 and all(isinstance(c, tirx.IntImm) for c in found[:-1])
            rows.append(tuple(int(c) for c in found[:-1]) if point and affine else None)
        footprints[buffer.name] = Footprint(buffer.name, tuple(int(d) for d in buffer.shape), tuple(rows),
                                            itemsize(str(buffer.dtype)), gathered)
    reference = op.reference
    try:
        reference_source = inspect.getsource(reference) if reference is not None else ""
    except (OSError, TypeError):
        reference_source = repr(reference)
    identity = hashlib.sha256((function.script() + reference_source + repr(key)).encode()).hexdigest()[:24]
    value_registers = max(-(-itemsize(dtype) // 4) for dtype, _ in stage_types(op.output))
    if total:  # rows reduced before the single value (a loss's log-softmax) may be shared by threads
        rows = [b for b in stages.before if _spatial_elements(sch, b) > 1]
        longest = max((math.prod(_reduction_extents(sch, b)) for b in rows), default=0)
        return Structure(tuple(axes), (), False, 0, 0, 0, (), (), (), False, identity, total=True,
                         value_registers=value_registers, row_columns=longest if longest > 1 else 0)
    row_extents = _long([a.extent for a in axes if not a.reduction])
    normalizes = _normalizes(sch, stages, row_extents)
    if normalizes:
        output = _long([int(iv.dom.extent) for iv in sch.get(stages.after[-1]).iter_vars])
        if output[:len(row_extents)] != row_extents:
            raise ValueError(f"operator {spec}: its output's leading axes {output[:len(row_extents)]} are not its main "
                             f"stage's spatial axes {row_extents}: stages that reduce before and after another are "
                             "supported only row by row, reducing the last axes (softmax, normalizations)")
    separate, kept = ((), ()) if normalizes else _before_main(s_tir.Schedule(tvm.IRModule({"main": function})))
    kept_before = tuple(tuple(axes[i].name for i in positions) for positions in kept)
    across = [sch.get(b) for b in stages.before if _spatial_elements(sch, b) > math.prod(row_extents)] \
        if normalizes else [sch.get(sch.get_sblock(name)) for name in separate]
    columns = tuple((stmt.name_hint, int(_columns(stmt).dom.extent)) for stmt in across if _columns(stmt) is not None)
    row_values, row_length, column_values = _row_registers(sch, stages, row_extents, {n for n, _ in columns}) \
        if normalizes else (0, 0, 0)
    row_columns = _spatial_elements(sch, stages.after[-1]) // math.prod(row_extents) if normalizes and \
        all(_spatial_elements(sch, b) <= math.prod(row_extents) for b in [*stages.before, stages.main, *stages.after[:-1]]) \
        else 0
    return Structure(tuple(axes), tuple(footprints.values()), normalizes, row_values, row_length, column_values,
                     separate, columns, kept_before, bool(stages.shared), identity, value_registers=value_registers,
                     carried=len(block.writes), row_columns=row_columns if row_columns > 1 else 0)


def _columns(block: Any) -> Any | None:
    """The iteration variable of ``block``'s columns, its last spatial axis, where its innermost
    axis is a reduction along them (attention's scores: a dot product per key); else None."""
    kinds = [int(iv.iter_type) for iv in block.iter_vars]
    if not kinds or kinds[-1] != REDUCE or SPATIAL not in kinds:
        return None
    return block.iter_vars[max(i for i, kind in enumerate(kinds) if kind == SPATIAL)]


def _normalizes(sch: Any, stages: _Stages, rows: list[int]) -> bool:
    """Whether the computation is a normalization, scheduled row by row: reductions before the
    main stage and stages after it (softmax, a layer norm), or stages after it that spread each of
    its results over a row (an RMS norm's scaling by its one reduction), the output being laid
    out by the main stage's ``rows`` (axes of one aside, ``_long``) and longer."""
    if not stages.after:
        return False
    if stages.before:
        return True
    output = _long([int(iv.dom.extent) for iv in sch.get(stages.after[-1]).iter_vars])
    return len(output) > len(rows) and output[:len(rows)] == rows


def _long(extents: list[int]) -> list[int]:
    """The extents longer than one: what lays out a normalization's rows and columns, whichever
    axes of one a stage keeps beside them (``Structure.row_axes``)."""
    return [e for e in extents if e > 1]


def _row_registers(sch: Any, stages: _Stages, rows: list[int], columns: set[str]) -> tuple[int, int, int]:
    """A normalization's ``Structure.row_values``, ``row_length`` and ``column_values`` (the part
    of the first that the stages named in ``columns`` take)."""
    inside = [*stages.before, stages.main, *stages.after[:-1]]
    values = {sch.get(b).name_hint: (_spatial_elements(sch, b) // math.prod(rows), len(sch.get(b).writes))
              for b in inside}  # a reduction by a tuple (an argmax) holds each of its values
    values = {name: carried * (1 if n == 1 else math.ceil(COLUMN_REGISTERS * n))
              for name, (n, carried) in values.items()}
    length = max((e for b in [*inside, stages.after[-1]]
                  for e in _long([int(iv.dom.extent) for iv in sch.get(b).iter_vars])[len(rows):]), default=0)
    return sum(values.values()), length, sum(n for name, n in values.items() if name in columns)


def _before_main(sch: Any) -> tuple[tuple[str, ...], tuple[tuple[int, ...], ...]]:
    """``Structure.separate``, and for the other stages before the main one the positions of the
    main stage's axes their values follow: each such stage computed for one value of the main
    stage (under its innermost spatial loop, its reductions inside), separate where that takes
    more than one of its values."""
    stages = _stages(sch)
    loops = sch.get_loops(stages.main)
    kinds = [int(iv.iter_type) for iv in sch.get(stages.main).iter_vars]
    spatial = [loop for loop, kind in zip(loops, kinds) if kind == SPATIAL]
    sch.reorder(*spatial, *(loop for loop, kind in zip(loops, kinds) if kind != SPATIAL))
    variables = [sch.get(loop).loop_var for loop in loops]
    separate, kept = [], []
    for block in reversed(stages.before):
        try:
            sch.compute_at(block, spatial[-1])
        except Exception:  # noqa: BLE001 (TVM's ScheduleError: the schedule leaves it at the top anyway)
            continue
        values = [iv for iv in sch.get(block).iter_vars if int(iv.iter_type) == SPATIAL]
        if math.prod(int(sch.get(loop).extent) for loop in _loops_binding(sch, block, spatial[-1], values)) > 1:
            separate.append(sch.get(block).name_hint)
        else:
            followed = _variables_binding(sch, block, values)
            kept.append(tuple(i for i, v in enumerate(variables) if any(v.same_as(f) for f in followed)))
    return tuple(reversed(separate)), tuple(reversed(kept))


def _spatial_elements(sch: Any, block: Any) -> int:
    """The values a stage computes: the product of its spatial axes' extents."""
    return math.prod(int(iv.dom.extent) for iv in sch.get(block).iter_vars if int(iv.iter_type) == SPATIAL)


def _reduction_extents(sch: Any, block: Any) -> list[int]:
    """The extents of a stage's reduction axes, in order."""
    return [int(iv.dom.extent) for iv in sch.get(block).iter_vars if int(iv.iter_type) == REDUCE]


def _safe(name: str, position: int, seen: set[str]) -> str:
    """An axis name fit for a parameter name, unique in its stage."""
    cleaned = "".join(c if c.isalnum() or c == "_" else "_" for c in name)[:20] or f"axis{position}"
    return cleaned if cleaned not in seen else f"{cleaned}{position}"


@dataclass
class _Stages:
    main: Any
    before: list[Any]
    """Stages before the main one that are not inlined (reductions, shared stages kept), in order."""
    after: list[Any]
    """Stages after it (they read what it produced), in order; the last is the output."""
    kept: list[Any]
    """Element-wise stages reading only inputs that feed the main one (a convolution's padding):
    inlined into the main stage, their guard would sit in its innermost loop (no vector loads on
    the CPU) and leave TVM unable to bound a shared-memory copy's footprint (CUDA). The CPU
    computes them per parallel tile; CUDA's shared-memory copies absorb them."""
    shared: list[str]
    """Element-wise stages that several stages read, inlined or not (``keep_shared``)."""


def _stages(sch: Any, keep_input_stages: bool = False, keep_shared: bool = False) -> _Stages:
    """Inline every element-wise stage that is not the output (but, with ``keep_input_stages``,
    those that ``_Stages.kept`` describes, and with ``keep_shared`` those that several stages read:
    computed once, not once per reader), then name the main stage."""
    root = sch.get_sblock("root")
    blocks = list(sch.get_child_blocks(root))
    reducing = [b for b in blocks if _reduces(sch, b)]
    main = reducing[-1] if reducing else blocks[-1]
    kept, shared = [], []
    for block in blocks[:-1]:
        if block.same_as(main) or _reduces(sch, block):
            continue
        if len(sch.get_consumers(block)) > 1:
            shared.append(sch.get(block).name_hint)
            if keep_shared:
                continue
        if keep_input_stages and not sch.get_producers(block) and \
                [sch.get(c).name_hint for c in sch.get_consumers(block)] == [sch.get(main).name_hint]:
            kept.append(block)
            continue
        try:
            sch.compute_inline(block)
        except Exception:  # noqa: BLE001 (TVM's ScheduleError: the stage stays a stage of its own)
            pass
    blocks = list(sch.get_child_blocks(root))
    names = [sch.get(b).name_hint for b in blocks]
    at = names.index(sch.get(main).name_hint)
    kept_names = {sch.get(b).name_hint for b in kept}
    return _Stages(main, [b for b in blocks[:at] if names[blocks.index(b)] not in kept_names], blocks[at + 1:], kept,
                   shared)


def _move_before(sch: Any, stages: _Stages, loop: Any, scope: str | None) -> None:
    """The stages before the main one computed under ``loop`` (for the region its iterations
    need), in ``scope``; one that cannot be stays where it is, whole (``leftover``)."""
    for block in reversed(stages.before):
        try:
            sch.compute_at(block, loop)
            if scope:
                _accumulate_in(sch, block, scope)
            elif not _reduces(sch, block):  # a shared stage kept on the CPU: whole vectors
                _vectorize_last(sch, block, loop, 0)
        except Exception:  # noqa: BLE001 (TVM's ScheduleError)
            leftover(sch, block, scope is not None)


def _accumulate_in(sch: Any, block: Any, scope: str) -> list[Any]:
    """``block``'s values kept in ``scope`` while it computes them: where it writes the output,
    into a copy that a stage of its own writes back (returned), and the computation's own buffers
    it writes set to ``scope``. A reduction by a tuple (an argmax's index beside its maximum)
    writes one buffer per value; one left in global memory inside a CUDA kernel is memory the
    kernel cannot allocate, and TVM refuses to build it."""
    def own(position: int) -> bool:
        source = sch.get(block).writes[position].source
        return any(source.same_as(b) for b in sch.get(sch.get_sblock("root")).alloc_buffers)

    count = len(sch.get(block).writes)
    written_back = [sch.cache_write(block, i, scope) for i in range(count) if not own(i)]
    for i in range(count):
        if sch.get(block).writes[i].source.scope() != scope:
            sch.set_scope(block, i, scope)
    return written_back


def _under(sch: Any, block: Any, loop: Any) -> bool:
    """Whether ``block`` is computed under ``loop`` (``_move_before`` leaves a stage it cannot move at the top)."""
    return any(sch.get(outer).same_as(sch.get(loop)) for outer in sch.get_loops(block))


def _reduces(sch: Any, block: Any) -> bool:
    return any(int(iv.iter_type) == REDUCE for iv in sch.get(block).iter_vars)


def _vector_lanes(extent: int, preferred: int) -> int:
    """``preferred`` when given and it divides ``extent``, else the largest power of two that
    does, at most 16."""
    if preferred and extent % preferred == 0:
        return preferred
    lanes = 1
    while lanes < 16 and extent % (lanes * 2) == 0:
        lanes *= 2
    return lanes


def _vectorize_last(sch: Any, block: Any, anchor: Any, preferred: int) -> None:
    """The innermost loop of ``block`` below ``anchor`` stores whole vectors."""
    store = loops_below(sch, block, anchor)
    extent = int(sch.get(store[-1]).extent) if store else 1
    if extent > 1:
        sch.vectorize(sch.split(store[-1], [None, _vector_lanes(extent, preferred)])[1])


def _tile_cpu(sch: Any, block: Any, loops: list[Any], axes: list[Axis], params: dict[str, Any], levels: slice
              ) -> tuple[dict[str, list[Any]], list[Any]]:
    """The main stage's ``loops``, one for each of ``axes``, split by its tiles' ``levels`` and
    ordered: the cache-block loops in ``order``, then the reductions' inner loops, then the
    register tile (unrolled, its last axis vectorized). The parts of each axis, and the
    cache-block loops in order."""
    spatial = [a.name for a in axes if not a.reduction]
    reductions = [a.name for a in axes if a.reduction]
    parts = {a.name: list(sch.split(loop, params[f"tile_{a.name}"][levels if not a.reduction else slice(None)]))
             for a, loop in zip(axes, loops)}
    middle = [parts[name][-2] if name in spatial else parts[name][0] for name in params["order"] if name in parts]
    sch.reorder(*(parts[name][0] for name in spatial if len(parts[name]) == 3), *middle,
                *(parts[name][1] for name in reductions), *(parts[name][-1] for name in spatial))
    for name in spatial[:-1]:
        sch.unroll(parts[name][-1])
    sch.vectorize(parts[spatial[-1]][-1])
    return parts, middle


def _schedule_cpu(sch: Any, stages: _Stages, found: Structure, params: dict[str, Any]) -> None:
    if found.rows:
        _schedule_rows_cpu(sch, stages, found, params)
        return
    block = stages.main
    spatial = [a.name for a in found.spatial]
    reductions = [a.name for a in found.reductions]
    parts, middle = _tile_cpu(sch, block, sch.get_loops(block), list(found.axes), params, slice(None))
    outer = [parts[name][0] for name in spatial]
    parallel = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    sch.parallel(parallel)
    first_reduction = next((i for i, name in enumerate(params["order"]) if name in reductions), None)
    above = middle[:first_reduction] if first_reduction is not None else middle
    anchor = above[-1] if above else parallel
    vector = params[f"tile_{spatial[-1]}"][2]
    writers = []
    if stages.after:
        for after in stages.after:
            try:
                sch.reverse_compute_at(after, anchor)
                writers.append(after)
            except Exception:  # noqa: BLE001 (TVM's ScheduleError)
                leftover(sch, after, cuda=False)
    elif reductions:
        for accumulate in _accumulate_in(sch, block, "global"):
            sch.reverse_compute_at(accumulate, anchor)
            writers.append(accumulate)
    # The write-back's columns: the register tile's, and the cache block's too unless the last
    # axis's cache-block loop is above the anchor.
    last_above = spatial[-1] in params["order"][:len(above)]
    if vector * (1 if last_above else params[f"tile_{spatial[-1]}"][1]) > 1:
        for writer in writers:
            _vectorize_last(sch, writer, anchor, vector)
    partial, across = [], _packed_for_columns(sch, stages.before, found, params)
    for before in list(stages.before):  # a reduction along its inputs' rows (attention's scores): whole vectors
        if any(before.same_as(a) for a in across):
            continue
        factored = _factor_in_lanes(sch, before, _vector_lanes(int(sch.get(before).iter_vars[-1].dom.extent),
                                                              BEFORE_LANES))
        if factored is not None:
            partial.append(factored)
            stages.before.insert(stages.before.index(before), factored)
    _move_before(sch, stages, parallel, None)
    for factored in partial:
        if _under(sch, factored, parallel):
            _vectorize_lanes(sch, factored, parallel)
    for before in across:
        if _under(sch, before, parallel):
            _columns_in_vectors(sch, before, parallel, params["columns"], params["column_rows"])
    for kept in stages.kept:  # the padded input of each parallel tile, made before its loops read it
        sch.compute_at(kept, parallel)
    if reductions:
        sch.decompose_reduction(block, middle[first_reduction])


def _schedule_rows_cpu(sch: Any, stages: _Stages, found: Structure, params: dict[str, Any]) -> None:
    """Normalizations (``_normalizes``: softmax, a layer norm, an RMS norm). The output's leading
    axes (the main stage's spatial ones, the rows) are split by the main stage's tiles and their
    outer parts run in parallel; every other stage is computed inside, for its rows, and the main
    stage tiled there by the rest of its tiles."""
    output = stages.after[-1]
    spatial = found.row_axes
    rows = _row_loops(sch, output, spatial)
    parts = [sch.split(loop, params[f"tile_{a.name}"]) for loop, a in zip(rows, spatial)]
    sch.reorder(*(p[0] for p in parts), *(p[1] for p in parts), *(p[2] for p in parts))
    outer = [p[0] for p in parts]
    parallel = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    sch.parallel(parallel)
    across = _packed_for_columns(sch, stages.before, found, params)
    if params["row_sums"]:
        _sum_along_rows(sch, stages, parallel, params["row_sums"], across)
    else:
        _rows_per_lane(sch, stages, found, params, parallel, across)
    for block in across:
        _columns_in_vectors(sch, block, parallel, params["columns"], params["column_rows"])
    for block in stages.before:
        if not _reduces(sch, block):  # a shared stage kept: whole vectors along its rows
            _vectorize_last(sch, block, parallel, 0)
    _vectorize_last(sch, output, parallel, 0)


def _rows_per_lane(sch: Any, stages: _Stages, found: Structure, params: dict[str, Any], anchor: Any,
                   across: list[Any]) -> None:
    """Every stage but the output computed under ``anchor``; the reductions before the main stage
    a row per vector lane (but those ``across`` their columns), the main stage tiled by the rest
    of its tiles."""
    for block in [*reversed(stages.after[:-1]), stages.main, *reversed(stages.before)]:
        sch.compute_at(block, anchor)
    for block in stages.before:
        if _reduces(sch, block) and not any(block.same_as(a) for a in across):
            _reduce_rows_in_vectors(sch, block, anchor, params[f"tile_{found.row_axes[-1].name}"][2])
    main_loops = loops_below(sch, stages.main, anchor)
    axes = [*found.row_axes, *found.reductions]  # a spatial axis of one has no loop here
    if len(main_loops) == len(axes):  # a row tile of one leaves none either: such a tile stays as it is
        _, middle = _tile_cpu(sch, stages.main, main_loops, axes, params, slice(1, None))
        ordered = [name for name in params["order"] if name in {a.name for a in axes}]
        first_reduction = next(i for i, name in enumerate(ordered) if name in {a.name for a in found.reductions})
        sch.decompose_reduction(stages.main, middle[first_reduction])


def _sum_along_rows(sch: Any, stages: _Stages, anchor: Any, lanes: int, across: list[Any]) -> None:
    """Every reduction of a normalization, those before the main stage (but those ``across``
    their columns) and the main one, run along each row in ``lanes`` partial results, one per
    vector lane (TVM's ``rfactor``), which are then combined: each row read in whole vectors,
    where a row per lane gathers. A reduction whose row ``lanes`` does not split (``_splits``)
    runs a row at a time. Every stage but the output is computed under ``anchor``."""
    order, partial = [], []
    for block in [*stages.before, stages.main]:
        factored = None if any(block.same_as(a) for a in across) else _factor_in_lanes(sch, block, lanes)
        if factored is not None:
            partial.append(factored)
            order.append(factored)
        order.append(block)
    for block in [*reversed(stages.after[:-1]), *reversed(order)]:
        sch.compute_at(block, anchor)
    for block in partial:
        _vectorize_lanes(sch, block, anchor)


def _packed_for_columns(sch: Any, blocks: list[Any], found: Structure, params: dict[str, Any]) -> list[Any]:
    """The stages of ``blocks`` to schedule across their columns (``Structure.columns``, where the
    space has ``columns``), after packing the inputs each reads along them (``_pack_columns``),
    the copies run in parallel at the top."""
    across = [b for b in blocks if params.get("columns") and sch.get(b).name_hint in dict(found.columns)]
    for block in across:
        for packed, along in _pack_columns(sch, block):
            _copied_in_tiles(sch, packed, along)
    return across


def _pack_columns(sch: Any, block: Any) -> list[tuple[Any, int]]:
    """Copies of the inputs ``block`` (a reduction with columns, ``_columns``) reads along its columns
    in another dimension than their last (attention's K, read ``K[h, j, d]`` for column ``j``), laid
    out with that dimension last, which ``block`` then reads: a vector of its columns is then one
    contiguous load. Returns the copies' blocks, which stay at the top (one copy per call), each
    with the dimension moved last; a stage read along the columns is read where it lies."""
    from tvm.sym.pattern import detect_linear_equation
    from tvm.tirx.analysis import undefined_vars

    stmt = sch.get(block)
    column = _columns(stmt).var
    staged = {buffer.name for buffer in sch.get(sch.get_sblock("root")).alloc_buffers}
    copies = []
    for position, region in enumerate(stmt.reads):
        if region.source.name in staged:
            continue  # its own values, or a stage's computed later in the tiles than a copy at the top
        along = [d for d, r in enumerate(region.region) if any(v.same_as(column) for v in undefined_vars(r.min))]
        if len(along) != 1 or along[0] == len(region.region) - 1:
            continue
        step = detect_linear_equation(region.region[along[0]].min, [column])
        if len(step) != 2 or not hasattr(step[0], "value") or int(step[0].value) != 1:
            continue  # a stride along the columns: a copy would not make their vector contiguous
        copy = sch.cache_read(block, position, "global")
        sch.transform_layout(copy, ("write", 0), _moved_last(along[0], len(region.region)))
        copies.append((copy, along[0]))
    return copies


def _copied_in_tiles(sch: Any, copy: Any, moved: int) -> None:
    """A packed input's copy (``_pack_columns``), whose dimension ``moved`` goes last: a transpose
    of that dimension and the last, in ``TRANSPOSE_TILE`` square tiles run in parallel, each
    written a vector at a time along the moved dimension. Left a parallel loop nest where either
    dimension is not a multiple of the tile."""
    loops = sch.get_loops(copy)
    extents = [int(sch.get(loop).extent) for loop in loops]
    if len(loops) != len(sch.get(copy).iter_vars) or extents[moved] % TRANSPOSE_TILE or extents[-1] % TRANSPOSE_TILE:
        leftover(sch, copy, cuda=False)
        return
    moved_outer, moved_inner = sch.split(loops[moved], [None, TRANSPOSE_TILE])
    last_outer, last_inner = sch.split(loops[-1], [None, TRANSPOSE_TILE])
    others = [loop for i, loop in enumerate(loops[:-1]) if i != moved]
    sch.reorder(*others, moved_outer, last_outer, last_inner, moved_inner)
    sch.parallel(sch.fuse(*others, moved_outer, last_outer))
    sch.vectorize(moved_inner)


def _moved_last(dimension: int, ndim: int) -> Any:
    """The layout of ``ndim`` dimensions with ``dimension`` moved last, the others in order."""
    from tvm.tirx import IndexMap

    order = [d for d in range(ndim) if d != dimension] + [dimension]
    return IndexMap.from_func(lambda *dims: [dims[d] for d in order], ndim=ndim)


def _columns_in_vectors(sch: Any, block: Any, anchor: Any, width: int, rows: int) -> None:
    """A reduction with columns of its own (attention's scores) computed under ``anchor`` as a
    GEMM's register tile: ``rows`` rows (its innermost spatial loop besides the columns) by
    ``width`` columns at a time, the columns a vector, the rows written out, its reductions around
    them; each step reads one value per row, broadcast across the lanes, and one vector of the
    packed input (``_pack_columns``). Left a plain loop nest where the columns do not split by
    ``width``."""
    stmt = sch.get(block)
    reduced = [iv for iv in stmt.iter_vars if int(iv.iter_type) == REDUCE]
    column = _loops_binding(sch, block, anchor, [_columns(stmt)])
    reductions = _loops_binding(sch, block, anchor, reduced)
    if len(column) != 1 or int(sch.get(column[0]).extent) % width or not reductions:
        return
    taken = [sch.get(loop) for loop in (*column, *reductions)]
    others = [loop for loop in loops_below(sch, block, anchor) if not any(sch.get(loop).same_as(t) for t in taken)]
    column_outer, column_inner = sch.split(column[0], [None, width])
    inner = []
    if others:
        extent = int(sch.get(others[-1]).extent)
        step = max(r for r in range(1, rows + 1) if extent % r == 0)
        row_outer, row_inner = sch.split(others[-1], [None, step])
        others[-1:] = [row_outer]
        inner = [row_inner]
    sch.reorder(*others, column_outer, *reductions, *inner, column_inner)
    for loop in inner:
        sch.unroll(loop)
    sch.vectorize(column_inner)
    sch.decompose_reduction(block, reductions[0])


def _factor_in_lanes(sch: Any, block: Any, lanes: int) -> Any | None:
    """The partial results of ``block``'s innermost reduction, ``lanes`` of them, one per vector
    lane (TVM's ``rfactor``): a stage of their own, which ``block`` then combines. None where its
    innermost axis is not a reduction that ``lanes`` splits (``_splits``): it stays as it is."""
    last = sch.get(block).iter_vars[-1]
    if int(last.iter_type) != REDUCE or not _splits(int(last.dom.extent), lanes):
        return None
    return sch.rfactor(sch.split(sch.get_loops(block)[-1], [None, lanes])[1], 0)


def _vectorize_lanes(sch: Any, block: Any, anchor: Any) -> None:
    """A stage of partial results (``_factor_in_lanes``) computed under ``anchor``: its lane
    loop innermost and vectorized, each row's terms read in whole vectors."""
    # Its loops under the anchor: the lane, the rows (those of one row in the tile have
    # none), the row's terms; the lane and the terms always span more than one.
    terms = sum(1 for iv in sch.get(block).iter_vars if int(iv.iter_type) == REDUCE and int(iv.dom.extent) > 1)
    lane, *others = loops_below(sch, block, anchor)
    sch.reorder(*others, lane)
    sch.vectorize(lane)
    sch.decompose_reduction(block, others[len(others) - terms])


def _reduce_each_row(sch: Any, block: Any, cpu: bool, sharing: int = 1) -> None:
    """A reduction along rows, a stage of its own: its rows in parallel; on the CPU each row
    summed in ``BEFORE_LANES`` partial results read as whole vectors where they split it, then
    combined; on the GPU a thread a row, or with ``sharing`` above 1 a block a row, each of its
    ``sharing`` threads reducing every ``sharing``-th column (coalesced), combined across them."""
    if not cpu and sharing > 1:
        loops, kinds = sch.get_loops(block), [int(iv.iter_type) for iv in sch.get(block).iter_vars]
        rows = [loop for loop, kind in zip(loops, kinds) if kind == SPATIAL]
        sch.bind(sch.fuse(*rows) if len(rows) > 1 else rows[0], "blockIdx.x")
        _split_among_threads(sch, [loop for loop, kind in zip(loops, kinds) if kind == REDUCE], sharing)
        return
    factored = _factor_in_lanes(sch, block, _vector_lanes(int(sch.get(block).iter_vars[-1].dom.extent),
                                                          BEFORE_LANES)) if cpu else None
    if factored is None:
        leftover(sch, block, cuda=not cpu)
        return
    # The combining stage's loops are its rows', then the lanes' (its iterators list the lanes first).
    spatial = sum(1 for iv in sch.get(block).iter_vars if int(iv.iter_type) == SPATIAL)
    loops = sch.get_loops(block)[:spatial]
    rows = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    sch.parallel(rows)
    sch.compute_at(factored, rows)
    _vectorize_lanes(sch, factored, rows)


def _reduce_rows_in_vectors(sch: Any, block: Any, anchor: Any, lanes: int) -> None:
    """A reduction before the main stage (a row's maximum, its mean) run for ``lanes`` rows at a
    time, one vector lane each, as the main stage's register tile runs them: a row's terms are
    then summed in ``lanes`` independent chains, not one."""
    loops = loops_below(sch, block, anchor)
    kinds = [int(iv.iter_type) for iv in sch.get(block).iter_vars]
    if lanes <= 1 or len(loops) != len(kinds) or kinds[0] != SPATIAL or REDUCE not in kinds:
        return
    row = max(i for i, kind in enumerate(kinds) if kind == SPATIAL)
    if int(sch.get(loops[row]).extent) % lanes:
        return
    outer, inner = sch.split(loops[row], [None, lanes])
    reductions = [loop for loop, kind in zip(loops, kinds) if kind == REDUCE]
    sch.reorder(outer, *reductions, inner)
    sch.vectorize(inner)
    sch.decompose_reduction(block, reductions[0])


def _row_loops(sch: Any, output: Any, spatial: list[Axis]) -> list[Any]:
    """The output's leading loops longer than one, one per row axis of the main stage
    (``Structure.row_axes``), of the same extents (``_structure_cached`` refuses an output laid
    out otherwise)."""
    return [loop for loop in sch.get_loops(output) if int(sch.get(loop).extent) > 1][:len(spatial)]


def _shared_bytes(found: Structure, params: dict[str, Any]) -> int:
    """A CUDA block's shared memory: each staged input's footprint over one reduction stage of
    the block's tile (from its affine index expressions), once per buffer of ``shared``."""
    if not params.get("shared"):
        return 0
    extents = [math.prod(params[f"tile_{a.name}"][1:]) for a in found.axes]
    return params["shared"] * sum(f.itemsize * f.elements(extents) for f in found.inputs if not f.gathered)


def _schedule_cuda(sch: Any, stages: _Stages, found: Structure, params: dict[str, Any]) -> None:
    if found.rows:
        _schedule_rows_cuda(sch, stages, found, params)
        return
    _kernels_of_their_own(sch, stages, set(found.separate))
    block = stages.main
    loops = dict(zip((a.name for a in found.axes), sch.get_loops(block)))
    parts = {a.name: sch.split(loops[a.name], params[f"tile_{a.name}"]) for a in found.axes}
    spatial = [a.name for a in found.spatial]
    reductions = [a.name for a in found.reductions]
    inner = {name: parts[name][-1] for name in parts}
    sch.reorder(*(parts[name][level] for level in range(3) for name in spatial),
                *(parts[name][level] for level in range(2) for name in reductions),
                *(inner[name] for name in params["inner_order"]))
    bound = []
    for level, tag in enumerate(("blockIdx.x", "vthread.x", "threadIdx.x")):
        axis = [parts[name][level] for name in spatial]
        fused = sch.fuse(*axis) if len(axis) > 1 else axis[0]
        sch.bind(fused, tag)
        bound.append(fused)
    threads = bound[2]
    thread_count = math.prod(params[f"tile_{name}"][2] for name in spatial)
    written = []
    if reductions:
        written_back = _accumulate_in(sch, block, "local")
        stages.after = stages.after or written_back
    for after in stages.after:
        try:
            sch.reverse_compute_at(after, threads)
            written += _register_loops(sch, after, threads)
        except Exception:  # noqa: BLE001 (TVM's ScheduleError)
            leftover(sch, after, cuda=True)
    outermost = parts[reductions[0]][0] if reductions else None
    if reductions and params["shared"]:
        stage = parts[reductions[-1]][0]
        if params["shared"] > 1 and len(reductions) > 1:
            # One loop over the shared-memory stages, so that the pipeline fills ahead across the
            # whole reduction: pipelined inside the other reductions' outer loops, it started
            # again at each of their steps, its first and last stages written out each time (a
            # group norm's 64 registers became 255 and 3 KB of local memory).
            outermost = stage = sch.fuse(*(parts[name][0] for name in reductions))
        sources = {f.name for f in found.inputs if not f.gathered} | {sch.get(b).name_hint for b in stages.kept}
        reads = sch.get(block).reads
        copies = []
        for position in [i for i, region in enumerate(reads) if region.source.name in sources]:
            cached = sch.cache_read(block, position, "shared", consumer_blocks=[block])
            copies.append(cached)
            sch.compute_at(cached, stage)
            copy = loops_below(sch, cached, stage)
            if copy:
                _split_among_threads(sch, copy, thread_count)
        for kept in stages.kept:  # now read by its shared-memory copy only: computed there
            sch.compute_inline(kept)
        pipeline(sch, stage, params["shared"], fills=len(copies))
    _move_before(sch, stages, threads, "local")
    for before in stages.before:  # a thread's values of it in registers, each step of a reduction updating them all
        if _under(sch, before, threads):
            for loop in _register_loops(sch, before, threads):
                sch.unroll(loop)
            _reduce_outside_columns(sch, before, threads, 0)
            _keep_reduction_a_loop(sch, before, threads)
    # Registers indexed by a loop variable would live in local memory: every loop that indexes
    # them is written out. An element-wise stage holds none, and its tile, which the check does
    # not bound, stays a loop that ``unroll`` may write out (a thread's 8,192 values written out
    # took TVM 101 s to lower and nvcc past a trial's limit).
    if found.holds_registers:
        for name in spatial:
            sch.unroll(inner[name])
    for loop in written:
        sch.unroll(loop)
    _annotate_unroll(sch, bound[0], params)
    if reductions:
        above = [sch.get(loop) for loop in sch.get_loops(block)]
        prefix = next(i for i, loop in enumerate(above) if loop.same_as(sch.get(outermost)))
        initial = sch.decompose_reduction(block, outermost)
        for loop in sch.get_loops(initial)[prefix:]:  # the accumulators' zeroing, in registers too
            sch.unroll(loop)


def _kernels_of_their_own(sch: Any, stages: _Stages, names: set[str]) -> None:
    """The stages before the main one named in ``names``, each a GPU kernel of its own run first
    (``leftover``, its values in global memory), taken out of ``stages.before``."""
    for block in [b for b in stages.before if sch.get(b).name_hint in names]:
        leftover(sch, block, cuda=True)
    stages.before = [b for b in stages.before if sch.get(b).name_hint not in names]


def _register_loops(sch: Any, block: Any, anchor: Any) -> list[Any]:
    """The loops of ``block`` under ``anchor`` that index the registers it writes or reads (its
    own values, a reduction's per-thread results): an array indexed by a loop variable lives in
    local memory, so these are written out, and only these (a row of 512 columns stays a loop)."""
    from tvm.tirx.analysis import undefined_vars

    stmt = sch.get(block)
    indices = [v for region in [*stmt.reads, *stmt.writes] if region.source.scope() == "local"
               for r in region.region for v in undefined_vars(r.min)]
    return _loops_binding(sch, block, anchor, [iv for iv in stmt.iter_vars if any(iv.var.same_as(i) for i in indices)])


def _loops_binding(sch: Any, block: Any, anchor: Any, iter_vars: list[Any]) -> list[Any]:
    """The loops of ``block`` under ``anchor`` whose variables the values of ``iter_vars`` (some
    of the block's own) are computed from."""
    bound = _variables_binding(sch, block, iter_vars)
    return [loop for loop in loops_below(sch, block, anchor) if any(sch.get(loop).loop_var.same_as(v) for v in bound)]


def _variables_binding(sch: Any, block: Any, iter_vars: list[Any]) -> list[Any]:
    """The loop variables the values of ``iter_vars`` (some of ``block``'s own) are computed from."""
    tvm = import_tvm()
    from tvm.tirx.analysis import undefined_vars

    realize = tvm.get_global_func("s_tir.schedule.GetSBlockRealize")(sch, block)
    return [v for iv, value in zip(sch.get(block).iter_vars, realize.iter_values)
            if any(iv.same_as(wanted) for wanted in iter_vars) for v in undefined_vars(value)]


def _keep_reduction_a_loop(sch: Any, block: Any, anchor: Any) -> None:
    """The reduction of a stage each GPU thread computes before the main one (a layer norm's mean
    of its rows) stays a loop, outside ``unroll``'s reach over the block: written out, ptxas held
    its loads in registers (4 rows' means over 128 columns: 512 loads, 232 bytes spilled)."""
    reducing = _reducing_loops(sch, block, anchor)
    if reducing:
        sch.annotate(reducing[0], "pragma_auto_unroll_max_step", 0)


def _reducing_loops(sch: Any, block: Any, anchor: Any) -> list[Any]:
    """The loops of ``block`` under ``anchor`` that its reductions run over, outermost first."""
    reduced = [iv for iv in sch.get(block).iter_vars if int(iv.iter_type) == REDUCE]
    return _loops_binding(sch, block, anchor, reduced)


def _annotate_unroll(sch: Any, loop: Any, params: dict[str, Any]) -> None:
    if params["unroll"]:
        sch.annotate(loop, "pragma_auto_unroll_max_step", params["unroll"])
        sch.annotate(loop, "pragma_unroll_explicit", 1)


def _schedule_rows_cuda(sch: Any, stages: _Stages, found: Structure, params: dict[str, Any]) -> None:
    """Normalizations on the GPU: the output's rows split in blocks, threads and each thread's
    rows; every other stage computed by each thread for its rows, in registers (its loops over
    the rows written out), a stage with columns of its own reducing outside them, or with
    ``apart`` a kernel of its own, run first, its values in global memory."""
    if params.get("apart"):
        _kernels_of_their_own(sch, stages, {name for name, _ in found.columns})
    output = stages.after[-1]
    parts = [sch.split(loop, params[f"tile_{a.name}"]) for loop, a in zip(_row_loops(sch, output, found.row_axes),
                                                                           found.row_axes)]
    sharing = params.get("row_threads", 1)
    split = [sch.get(loop) for part in parts for loop in part]
    columns = [loop for loop in sch.get_loops(output) if not any(sch.get(loop).same_as(s) for s in split)] \
        if sharing > 1 else []
    sch.reorder(*(p[level] for level in range(3) for p in parts), *columns)
    blocks = sch.fuse(*(p[0] for p in parts)) if len(parts) > 1 else parts[0][0]
    threads = sch.fuse(*(p[1] for p in parts)) if len(parts) > 1 else parts[0][1]
    sch.bind(blocks, "blockIdx.x")
    if sharing > 1:
        sch.bind(threads, "threadIdx.y")
        _share_rows_cuda(sch, stages, [p[2] for p in parts], columns, params)
        return
    sch.bind(threads, "threadIdx.x")
    for part in parts:
        sch.unroll(part[2])
    inside = [*reversed(stages.after[:-1]), stages.main, *reversed(stages.before)]
    for block in inside:
        sch.compute_at(block, threads)
        _accumulate_in(sch, block, "local")
    for block in [*inside, output]:  # its rows, and a row's columns only where registers hold them
        for loop in _register_loops(sch, block, threads):
            sch.unroll(loop)
    rows = math.prod(a.extent for a in found.spatial)
    for block in inside:
        _reduce_outside_columns(sch, block, threads, rows)
    _annotate_unroll(sch, blocks, params)


def _share_rows_cuda(sch: Any, stages: _Stages, rows: list[Any], columns: list[Any], params: dict[str, Any]) -> None:
    """A normalization's rows each shared by ``row_threads`` threads (``threadIdx.x``; ``rows``,
    the loops over a group's rows, one after another): every stage before the output computed
    per row, its reduction over the row's columns split among the threads, every
    ``row_threads``-th column each, and combined across them (TVM lowers a reduction loop bound
    to threads to warp shuffles and a round through shared memory, its result given to every
    thread); the output written by the same threads, consecutive columns by consecutive threads.
    ``unroll`` reaches a thread's columns, never the rows around them: a combination across the
    threads written out twice fails TVM's lowering (``load_remap_``)."""
    sharing = params["row_threads"]
    each_thread = [_split_among_threads(sch, columns, sharing)]
    for block in [*reversed(stages.after[:-1]), stages.main, *reversed(stages.before)]:
        sch.compute_at(block, rows[-1])
        _accumulate_in(sch, block, "local")
        reducing = _reducing_loops(sch, block, rows[-1])
        if reducing:  # else a row's value computed from others: each thread computes it for itself
            each_thread.append(_split_among_threads(sch, reducing, sharing))
    for loop in rows:
        sch.annotate(loop, "pragma_auto_unroll_max_step", 0)
    for loop in each_thread:
        _annotate_unroll(sch, loop, params)


def _split_among_threads(sch: Any, loops: list[Any], threads: int) -> Any:
    """``loops`` fused, then split among ``threads`` threads (``threadIdx.x``), each taking every
    ``threads``-th iteration, consecutive ones on consecutive threads (a coalesced copy into
    shared memory); returns each thread's loop. Over a reduction's loops, TVM combines the
    threads' parts across them."""
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    own, shared = sch.split(fused, [None, threads])
    sch.bind(shared, "threadIdx.x")
    return own


def _reduce_outside_columns(sch: Any, block: Any, anchor: Any, rows: int) -> None:
    """A stage that reduces into columns of its own (attention's scores, each a dot product) runs
    its reduction loops outside its written-out rows and columns: each step updates every
    column's register, in one loop over the reduced axis. Reduced inside each column, that loop
    is repeated once per column, and NVVM unrolls every copy whole: 64 columns of 32 steps made
    over 2,000 loads of straight-line code, which took cicc 8-15 s a kernel, and two rows a
    thread spilled."""
    if _spatial_elements(sch, block) <= rows:  # no columns: a row's maximum or sum, its loop already the only one
        return
    reducing = _reducing_loops(sch, block, anchor)
    loops = loops_below(sch, block, anchor)
    if not reducing or all(sch.get(a).same_as(sch.get(b)) for a, b in zip(loops, reducing)):
        return
    try:
        sch.reorder(*reducing, *(loop for loop in loops if not any(sch.get(loop).same_as(sch.get(r)) for r in reducing)))
        initial = sch.decompose_reduction(block, reducing[0])
    except Exception:  # noqa: BLE001 (TVM's ScheduleError: the stage keeps its order, a valid kernel still)
        return
    for loop in loops_below(sch, initial, anchor):  # the zeroing of the columns' registers, written out
        sch.unroll(loop)


def _unscheduled(tensors: list[Any], inputs: list[np.ndarray]) -> np.ndarray:
    """The output of the computation as it is written, compiled for the CPU without a schedule."""
    tvm = import_tvm()
    from tvm import te

    executable = tvm.compile(tvm.IRModule({"main": te.create_prim_func(tensors)}), target="llvm")
    device = tvm.cpu(0)
    arguments = [tvm.runtime.tensor(np.asarray(x, dtype=numpy_dtype(str(t.dtype)), order="C"), device)
                 for x, t in zip(inputs, tensors)]
    output = tvm.runtime.empty(tuple(int(d) for d in tensors[-1].shape), str(tensors[-1].dtype), device)
    executable["main"](*arguments, output)
    return output.numpy().astype(np.float64)
