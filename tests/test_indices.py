"""A user's operator that indexes a tensor by an input's values (``trial_code.indices``): an
embedding's rows, an embedding bag's sums, columns picked by position, a strided or shifted
index, a permutation of the indices. The positions each such input may hold are read from the
computation; trials draw inputs among them, their kernels build, run and match the reference on
the CPU and compile for the GPU, a loaded kernel refuses a position outside its tensor, and an
index the check cannot bound is refused in one line."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from cuda_build import H100, registers_only
from feasible import exported, runs_and_matches

from trial_code import constraint, kernel, measure, operators, targets, workloads
from trial_code.indices import IndexRange, index_ranges
from trial_code.templates import for_workload

pytestmark = pytest.mark.usefixtures("forked_workers")
NEEDS_NVCC = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (the CUDA toolkit) is not on PATH")
CPU = targets.cpu()

INDEXED = """
    import numpy as np
    from tvm import te, topi
    from trial_code.operators import Operator

    def embedding(tokens=64, vocab=1000, dim=32, ids="int32"):
        i = te.placeholder((tokens,), ids, name="ids")
        table = te.placeholder((vocab, dim), "float32", name="table")
        y = te.compute((tokens, dim), lambda t, d: table[i[t], d] * 2.0, name="Y")
        return Operator([i, table], y, flops=tokens * dim, reference=lambda i, table: table[i] * 2)

    def embedding_bag(bags=16, per_bag=4, vocab=500, dim=32):
        i = te.placeholder((bags, per_bag), "int64", name="ids")
        table = te.placeholder((vocab, dim), "float32", name="table")
        k = te.reduce_axis((0, per_bag), name="k")
        y = te.compute((bags, dim), lambda b, d: te.sum(table[i[b, k], d], axis=k), name="Y")
        return Operator([i, table], y, flops=bags * per_bag * dim, reference=lambda i, table: table[i].sum(axis=1))

    def columns(rows=32, cols=64, picks=16):
        x = te.placeholder((rows, cols), "float32", name="X")
        p = te.placeholder((picks,), "int32", name="picks")
        y = te.compute((rows, picks), lambda r, c: x[r, p[c]], name="Y")
        return Operator([x, p], y, flops=rows * picks, reference=lambda x, p: x[:, p])

    def strided(tokens=32, rows=101, dim=16):
        i = te.placeholder((tokens,), "int32", name="ids")
        x = te.placeholder((rows, dim), "float32", name="X")
        y = te.compute((tokens, dim), lambda t, d: x[2 * i[t] + 1, d] + x[i[t], d], name="Y")
        return Operator([i, x], y, flops=tokens * dim, reference=lambda i, x: x[2 * i + 1] + x[i])

    def shifted(tokens=32, vocab=100, dim=16):
        i = te.placeholder((tokens,), "int32", name="ids")
        table = te.placeholder((vocab, dim), "float32", name="table")
        position = te.compute((tokens,), lambda t: i[t] + 1, name="position")
        y = te.compute((tokens, dim), lambda t, d: table[position[t], d], name="Y")
        return Operator([i, table], y, flops=tokens * dim, reference=lambda i, table: table[i + 1])

    def permuted(tokens=32, vocab=100, dim=16):
        i = te.placeholder((tokens,), "int32", name="ids")
        order = te.placeholder((tokens,), "int64", name="order")
        table = te.placeholder((vocab, dim), "float32", name="table")
        y = te.compute((tokens, dim), lambda t, d: table[i[order[t]], d], name="Y")
        return Operator([i, order, table], y, flops=tokens * dim, reference=lambda i, o, table: table[i[o]])

    def clamped(tokens=32, vocab=100, dim=16):
        i = te.placeholder((tokens,), "int32", name="ids")
        table = te.placeholder((vocab, dim), "float32", name="table")
        y = te.compute((tokens, dim), lambda t, d: table[te.min(te.max(i[t], 0), vocab - 1), d], name="Y")
        return Operator([i, table], y, flops=tokens * dim, reference=lambda i, table: table[np.clip(i, 0, vocab - 1)])

    def offsets(tokens=32, vocab=100, dim=16):
        i = te.placeholder((tokens,), "int32", name="ids")
        o = te.placeholder((tokens,), "int32", name="offsets")
        table = te.placeholder((vocab, dim), "float32", name="table")
        y = te.compute((tokens, dim), lambda t, d: table[i[t] + o[t], d], name="Y")
        return Operator([i, o, table], y, flops=tokens * dim)

    def conditional(tokens=32, vocab=100, dim=16):
        i = te.placeholder((tokens,), "int32", name="ids")
        table = te.placeholder((vocab, dim), "float32", name="table")
        y = te.compute((tokens, dim), lambda t, d: table[te.if_then_else(i[t] < 0, 0, i[t]), d], name="Y")
        return Operator([i, table], y, flops=tokens * dim)

    def gather_nd(picks=48, rows=32, cols=64):
        x = te.placeholder((rows, cols), "float32", name="X")
        i = te.placeholder((2, picks), "int32", name="idx")
        return Operator([x, i], topi.gather_nd(x, i), flops=picks, reference=lambda x, i: x[i[0], i[1]])

    def narrow(tokens=32, vocab=300, dim=16, shift=500):
        i = te.placeholder((tokens,), "int8", name="ids")
        table = te.placeholder((vocab, dim), "float32", name="table")
        y = te.compute((tokens, dim), lambda t, d: table[i[t] + shift, d], name="Y")
        return Operator([i, table], y, flops=tokens * dim)
"""
GATHERS = ("embedding", "embedding_bag", "columns", "strided", "shifted", "permuted", "clamped", "gather_nd")


@pytest.fixture
def indexed(operator_module):
    """``indexed``: operators that index a tensor by an input, importable from the test's folder."""
    return operator_module("indexed", INDEXED)


def _ranges(workload: workloads.Workload) -> list:
    """Each input's positions: None where it indexes nothing, (least, greatest) where one range
    holds for all of it, else each part's (where, least, greatest)."""
    found = []
    for parts in measure.signature(workload).ranges:
        whole = len(parts) == 1 and all(w is None for w in parts[0].where)
        found.append(None if not parts else (parts[0].low, parts[0].high) if whole else
                     sorted((r.where, r.low, r.high) for r in parts))
    return found


def test_each_input_that_indexes_a_tensor_holds_the_positions_that_keep_every_index_inside_it(indexed):
    """``a * value + b``: the values that keep every ``b`` the axes reach inside the axis,
    intersected over the input's uses, within its type; a clamped or wrapped index needs none."""
    assert _ranges(indexed("embedding")) == [(0, 999), None]
    assert _ranges(indexed("embedding", ids="int8")) == [(0, 127), None]  # the type's values that index
    assert _ranges(indexed("embedding_bag")) == [(0, 499), None]
    assert _ranges(indexed("columns")) == [None, (0, 63)]
    assert _ranges(indexed("strided")) == [(0, 49), None]  # 2 * 49 + 1 = 99 < 101, and i itself < 101
    assert _ranges(indexed("shifted")) == [(-1, 98), None]  # through the stage that adds 1
    assert _ranges(indexed("permuted")) == [(0, 99), (0, 31), None]  # order indexes ids, ids the table
    assert _ranges(indexed("clamped")) == [None, None]
    assert measure.signature(workloads.lookup("MM_small")).ranges == ((), ())
    # TOPI's gather_nd: row 0 of the indices indexes the rows, row 1 the columns
    assert _ranges(indexed("gather_nd")) == [None, [((0, None), 0, 31), ((1, None), 0, 63)]]


@pytest.mark.parametrize("name, message", [
    ("offsets", "ids and offsets index table's axis 0 through an expression the check cannot solve for their "
                "values and that leaves \\[0, 100\\)"),
    ("conditional", "table's axis 0 is indexed through an integer tensor's value in a way the check cannot bound"),
    ("narrow", "input ids \\(int8\\) indexes table's axis 0, but no value of it keeps the index inside that axis"),
])
def test_an_index_the_check_cannot_bound_is_refused_in_one_line(indexed, name, message):
    with pytest.raises(ValueError, match=f"^operator indexed:{name}: {message}") as refused:
        operators.call(f"indexed:{name}", {})
    assert "\n" not in str(refused.value)


def test_trials_draw_an_index_among_its_positions_and_the_reference_gets_integers(indexed):
    """The positions are drawn across their whole range; the reference indexes with int64 copies."""
    prepared = measure.prepare(indexed("embedding"), seed=0)
    ids = prepared.host[0]
    assert ids.dtype == np.int32 and ids.min() >= 0 and ids.max() <= 999 and ids.max() - ids.min() > 500
    prepared = measure.prepare(indexed("shifted", tokens=4096), seed=0)
    assert prepared.host[0].min() == -1 and prepared.host[0].max() == 98


@pytest.mark.slow(seconds=2)
@pytest.mark.parametrize("name", GATHERS)
def test_a_gather_runs_and_matches_its_reference_on_the_cpu(indexed, name):
    """Two admitted configurations of each, built, run on drawn positions and checked."""
    workload = indexed(name)
    for seed in range(2):
        runs_and_matches(workload, CPU, seed)


@pytest.mark.slow(seconds=2)
@NEEDS_NVCC
@pytest.mark.parametrize("name", ["embedding", "embedding_bag", "columns", "permuted"])
def test_a_gather_compiles_for_the_gpu_without_local_memory(indexed, name):
    """An admitted CUDA configuration of each through TVM's own nvcc compile, shared memory too
    where the space offers it (an indexed table's tile spans its whole indexed axis)."""
    workload = indexed(name)
    for seed in range(2):
        registers_only(workload, constraint.draw(workload, H100, seed)[0])


@NEEDS_NVCC
def test_a_gathered_tensor_is_read_from_global_memory_and_its_index_staged_in_shared(indexed):
    """TVM cannot bound which rows of the table a block's positions reach, so ``shared`` stages
    the positions alone: the check counts their bytes, and the kernel reads the table's rows
    where the positions point, with no local memory."""
    workload = indexed("embedding_bag")
    found = {f.name: f for f in for_workload(workload).structure(workload).inputs}
    assert found["table"].gathered and not found["ids"].gathered
    params = {"tile_b": [4, 1, 4, 1], "tile_d": [1, 1, 8, 4], "tile_k": [1, 1, 4], "inner_order": ["b", "d", "k"],
              "unroll": 0, "shared": 1}  # the table's 500 rows of 32 columns would not fit in 48 KiB
    source = registers_only(workload, params)
    assert "int64_t ids_shared" in source and "table_shared" not in source, source


def test_a_loaded_gather_refuses_a_position_outside_its_tensor(indexed, tmp_path):
    """The exported library, loaded as a program loads it, gathers the rows it is given and
    refuses, in one line naming the input and its positions, an index past the table, where the
    kernel would read the memory beyond it: given as NumPy arrays or as tensors it reads in place."""
    from trial_code.kernel import tvm

    workload = indexed("embedding")
    loaded = exported(workload, CPU, str(tmp_path / "k.so"))
    rng = np.random.default_rng(0)
    table = rng.random((1000, 32), dtype=np.float32)
    ids = rng.integers(0, 1000, 64)
    np.testing.assert_array_equal(loaded(ids, table), table[ids] * 2)
    np.testing.assert_array_equal(loaded(tvm.runtime.tensor(ids.astype(np.int32)), table).numpy(), table[ids] * 2)
    for wrong in (-1, 1000):
        ids[7] = wrong
        for given in (ids, tvm.runtime.tensor(ids.astype(np.int32))):
            with pytest.raises(ValueError, match=f"^{workload.name}: input ids holds {wrong}, outside 0..999, the "
                                                 "positions of table's axis 0 it indexes$"):
                loaded(given, table)


def test_a_range_check_names_the_first_value_outside_as_given():
    """Checked before the conversion to the input's type, where 2^32 + 3 would wrap to 3 in an
    int32 and NaN become any integer; a range of a part of the input checks that part."""
    row = IndexRange("idx", 0, 31, "X's axis 0", (0, None))
    row.check(np.array([[31, 0], [63, 63]]))
    with pytest.raises(ValueError, match=r"^input idx\[0, :\] holds 63, outside 0..31, the positions of X's axis 0"):
        row.check(np.array([[1, 63], [2, 2]]))
    found = IndexRange("ids", 0, 9, "table's axis 0")
    found.check(np.arange(10))
    found.check(np.array([0.0, 9.0]))
    for given, named in ((np.array([3, 12, -4]), "12"), (np.array([2 ** 32 + 3]), str(2 ** 32 + 3)),
                         (np.array([1.0, np.nan]), "nan"), (np.array([np.inf]), "inf")):
        with pytest.raises(ValueError, match=f"^input ids holds {named}, outside 0..9"):
            found.check(given)


def test_a_computation_of_floats_alone_has_no_index_to_read():
    from tvm import te

    x = te.placeholder((8, 8), "float32", name="X")
    assert index_ranges([x, te.compute((8,), lambda i: x[i, 7 - i], name="Y")]) == [()]


@pytest.mark.slow(seconds=8)
def test_metaschedule_runs_a_gathers_kernel_on_positions_inside_the_table(indexed, tmp_path):
    """The operators page's peer gets what the trials get: its runner, given the table that
    ``metaschedule._tune`` gives it, runs a gather's kernel on ids inside the table; with TVM's own
    fill, which writes the bits of floats into the ids, the kernel reads outside it and fails."""
    import functools

    import tvm
    from tvm import te
    from tvm.s_tir import meta_schedule as ms

    from nni_opevo_bench import metaschedule

    workload = indexed("embedding_bag")
    positions = metaschedule.index_positions([workload, workloads.lookup("MM_small")])
    (((low, high), table),) = positions.values()  # the gather's ids; nothing of the MatMul's
    assert table is None and low.shape == high.shape == (16, 4) and (low == 0).all() and (high == 499).all()
    function = te.create_prim_func(for_workload(workload).compute(workload))
    tvm.compile(tvm.IRModule({"main": function}), target=kernel.for_host(CPU).tvm_target()).export_library(
        str(tmp_path / "k.so"))
    arguments = ms.arg_info.ArgInfo.from_prim_func(function)
    for allocate, ran in ((functools.partial(metaschedule.allocate_with_positions, positions), True), (None, False)):
        runner = ms.runner.LocalRunner(timeout_sec=60, f_alloc_argument=allocate)
        (future,) = runner.run([ms.runner.RunnerInput(str(tmp_path / "k.so"), "cpu", arguments)])
        result = future.result()
        assert (result.error_msg is None and len(result.run_secs) > 0) == ran, result.error_msg


def test_the_launcher_says_which_positions_each_index_is_drawn_among(indexed, capsys):
    """Before NNI starts, the user reads what the check read of the computation."""
    from nni_opevo_tools import launch

    workload = indexed("permuted")
    launch.first_trial(workload, "cpu")
    out = capsys.readouterr().out
    assert f"{workload.name}: input ids is drawn among 0..99, the positions of table's axis 0 it indexes" in out
    assert f"{workload.name}: input order is drawn among 0..31, the positions of ids's axis 0 it indexes" in out
    assert out.index("drawn among") < out.index("a first configuration built and matched its reference")
