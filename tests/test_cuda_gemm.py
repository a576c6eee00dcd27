"""The CUDA GEMM space's speed knobs, read from the code nvcc generates (no GPU needed): 128-bit
vector loads, ``cp.async`` double buffering, dynamic shared memory past 48 KB, split-K, the
unrolled register stage, and no local memory for any tile the static check admits."""
from __future__ import annotations

import contextlib
import itertools
import json
import re
import shutil
from pathlib import Path

import pytest
from cuda_build import (
    H100,
    admitted_draws_use_no_local_memory,
    cp_async_copies,
    cuda_source,
    local_memory,
    ptxas,
    registers_only,
)

from trial_code import targets, workloads
from trial_code.constraint import draw
from trial_code.templates import Infeasible, for_workload
from trial_code.templates.gemm import WRITTEN_OUT, written_out

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (the CUDA toolkit) is not on PATH")
MM1 = workloads.lookup("MM1")
# 128 threads of 8 x 8 outputs, K staged 8 at a time: the classic fast fp32 tile.
TILE = {"tile_n": [8, 2, 8, 4], "tile_m": [8, 2, 16, 4], "tile_k": [1, 128, 8, 1], "inner_order": ["k", "n", "m"],
        "unroll": 512, "vector": 4, "stages": 1, "pad": 0, "raster": 0}


@pytest.mark.slow(seconds=5)
def test_vector_4_loads_global_memory_128_bits_at_a_time(tmp_path):
    ptx, _ = ptxas(cuda_source(MM1, TILE), tmp_path)
    assert re.search(r"ld\.global(\.nc)?\.v4\.[fub]32", ptx)
    assert re.search(r"ld\.shared\.v4\.[fub]32", ptx)  # the register stage reads shared memory 128 bits at a time
    scalar, _ = ptxas(cuda_source(MM1, {**TILE, "vector": 1}), tmp_path)
    assert not re.search(r"ld\.global(\.nc)?\.v[24]", scalar)


@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.slow(seconds=10)
def test_a_pipeline_of_stages_fills_that_many_buffers_with_cp_async(tmp_path, stages):
    """``stages`` shared-memory buffers per operand, filled 16 bytes at a time by ``cp.async``
    up to ``stages - 1`` K stages ahead (the waits count down from ``stages - 1`` groups in flight)."""
    ptx, report = ptxas(cuda_source(MM1, {**TILE, "stages": stages}), tmp_path)
    assert re.search(r"cp\.async\.c[ag]\.shared\.global(\.L2::\d+B)? \[[^]]+\], \[[^]]+\], 16", ptx)  # 16 bytes each
    assert {int(n) for n in re.findall(r"cp\.async\.wait_group (\d+)", ptx)} == set(range(stages))
    plain_bytes = 4 * (64 * 8 + 8 * 128)  # one stage of the A (64 x 8) and B (8 x 128) tiles
    assert f"{stages * plain_bytes} bytes smem" in report
    plain, _ = ptxas(cuda_source(MM1, TILE), tmp_path)
    assert "cp.async" not in plain


def test_padding_makes_the_shared_tiles_rows_bank_conflict_free(tmp_path):
    """With ``pad`` the A tile's rows of 8 floats are stored 12 apart and B's of 128 floats 132
    apart: consecutive rows start 4 banks apart; the check counts exactly the padded bytes."""
    source = cuda_source(MM1, {**TILE, "pad": 1})
    _, report = ptxas(source, tmp_path)
    padded = 4 * (64 * 12 + 8 * 132)
    assert f"{padded} bytes smem" in report and local_memory(source) == 0
    from trial_code.templates import gemm

    assert gemm._shared_bytes({**TILE, "pad": 1}, "NN") == padded


def test_raster_orders_the_blocks_in_groups_of_column_blocks(tmp_path):
    """``raster`` 4: one block index over the grid, four column blocks per group; refused where
    it does not divide the column blocks or leaves a single group."""
    source = cuda_source(MM1, {**TILE, "raster": 4})
    assert "blockIdx.y" not in source and "blockIdx.x" in source
    ptxas(source, tmp_path)
    with pytest.raises(Infeasible, match="raster 8 must divide the column blocks"):
        for_workload(MM1).check(MM1, {**TILE, "tile_m": [4, 4, 16, 4], "raster": 8}, H100)


def test_a_pipeline_needs_ampere_or_newer():
    volta = targets.Target("cuda", arch="sm_70", max_threads_per_block=1024, max_shared_memory_per_block=49152,
                           device="cuda-none", has_device=False)
    with pytest.raises(Infeasible, match="stages 2 needs cp.async"):
        for_workload(MM1).check(MM1, {**TILE, "stages": 2}, volta)


def test_shared_memory_past_48_kb_is_dynamic_and_admitted_up_to_the_opt_in_limit(tmp_path):
    big = {**TILE, "tile_n": [4, 2, 16, 4], "tile_m": [8, 2, 16, 4], "tile_k": [1, 16, 64, 1]}  # 64 KB
    source = cuda_source(MM1, big)
    assert "extern __shared__" in source
    _, report = ptxas(source, tmp_path)
    assert re.search(r"Used \d+ registers", report)
    doubled = {**big, "stages": 2}  # 128 KB: within an H100's 227 KB
    for_workload(MM1).check(MM1, doubled, H100)
    with pytest.raises(Infeasible, match="shared memory bytes per block 262144 exceeds the limit 232448"):
        for_workload(MM1).check(MM1, {**doubled, "tile_k": [1, 8, 128, 1]}, H100)


def test_a_pipeline_of_one_thread_a_block_fills_shared_memory_with_cp_async():
    """TVM's DMA lowering (``kernel.SKIPPED_PASSES``) took a one-thread block's pipelined copies for
    a DMA engine's and the build failed on ``dma_start_group``; built without it they are
    ``cp.async`` with their waits, as in a block of two threads, and stay out of local memory."""
    bmm1 = workloads.lookup("BMM1")
    lone = {"tile_b": [24, 40], "tile_n": [128, 1, 1, 1], "tile_m": [8, 4, 1, 2], "tile_k": [8, 4, 4, 1],
            "inner_order": ["k", "m", "n"], "unroll": 0, "vector": 1, "stages": 4, "pad": 0, "raster": 4}
    pair = {**lone, "tile_m": [8, 2, 2, 2]}
    sources = [registers_only(bmm1, params) for params in (lone, pair)]
    for source in sources:
        assert "dma_start_group" not in source and "cp.async.wait_group 3" in source
    assert [cp_async_copies(source) for source in sources] == [8, 8]  # 4 stages x 2 operands


def test_split_k_adds_a_kernel_for_the_partial_sums():
    source = cuda_source(MM1, {**TILE, "tile_k": [4, 32, 8, 1]})
    assert len(re.findall(r"__global__[^;{]*\{", source)) == 2
    with pytest.raises(Infeasible, match="split-K blocks"):
        for_workload(MM1).check(MM1, {**TILE, "tile_k": [32, 4, 8, 1]}, H100)


def multiply_adds(source: str) -> int:
    """The multiply-add statements in a GEMM kernel's CUDA source (a loop's body counted once)."""
    return len(re.findall(r"(C\w*_local_ptr)\[[^]]+\] = \(\1\[[^]]+\] \+", source))


def test_unroll_writes_out_the_register_stage():
    """8 x 8 outputs per thread (4 virtual threads of 4 x 4) over 8 K steps: 512 multiply-adds,
    all written out at unroll 512; below it, one K step's 64 (the thread's tile, always written
    out so that it stays in registers) in a loop over the 8 steps."""
    sources = {step: cuda_source(MM1, {**TILE, "unroll": step}) for step in (512, 64, 0)}
    assert [multiply_adds(sources[step]) for step in (512, 64, 0)] == [512, 64, 64]
    assert "for (int k_1 = 0; k_1 < 8; ++k_1)" not in sources[512]
    assert all("for (int k_1 = 0; k_1 < 8; ++k_1)" in sources[step] for step in (64, 0))


@pytest.mark.slow(seconds=2)
@pytest.mark.parametrize("name", ["MM1", "BMM1"])
def test_the_check_counts_the_multiply_adds_tvm_writes_into_the_kernel(name):
    """The count the check bounds (virtual threads copied, a pipeline's stages, the register
    stage written whole) is the count in TVM's CUDA source, for admitted tiles of more than 512
    and for tiles it refuses by that count."""
    workload = workloads.lookup(name)
    admitted = (params for seed in itertools.count() for params in [draw(workload, H100, seed)[0]]
                if written_out(params) > 512)
    refused = (params for seed in itertools.count()
               for params in [draw(workload, H100, seed, refused_by=("multiply-adds written out",))[0]]
               if written_out(params) <= 4 * WRITTEN_OUT)
    tiles = [*itertools.islice(admitted, 4), *itertools.islice(refused, 2)]
    assert {params["stages"] > 1 for params in tiles} == {True, False}
    for params in tiles:
        assert multiply_adds(cuda_source(workload, params, checked=False)) == written_out(params), params


def test_a_tile_that_nvcc_compiles_for_minutes_is_refused():
    """256 K steps of 8 x 2 outputs over 4 virtual threads: 16,384 multiply-adds of straight-line
    code, which nvcc compiled for more than 300 s."""
    tile = {"tile_n": [8, 1, 8, 8], "tile_m": [32, 4, 4, 2], "tile_k": [2, 1, 2, 256], "inner_order": ["k", "n", "m"],
            "unroll": 512, "vector": 2, "stages": 1, "pad": 0, "raster": 4}
    with pytest.raises(Infeasible, match="^multiply-adds written out per thread 16384 exceeds the limit 2048$"):
        for_workload(MM1).check(MM1, tile, H100)


def test_vector_width_must_divide_the_tile_and_the_rows():
    with pytest.raises(Infeasible, match="vector 4 does not divide the contiguous extent of the A tile"):
        for_workload(MM1).check(MM1, {**TILE, "tile_k": [1, 512, 2, 1]}, H100)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["MM1", "BMM1", "BMM2", "BMM3"])
def test_no_configuration_the_check_admits_uses_local_memory(name):
    """Registers are estimated from the tiles (accumulators, operand fragments, a calibrated
    overhead): every admitted configuration drawn here keeps all of them in registers, with no
    spills and no stack frame."""
    admitted_draws_use_no_local_memory(name)


@pytest.mark.slow(seconds=10)
def test_the_register_estimate_counts_the_operand_values_the_loop_order_holds():
    """8 x 16 outputs a thread, two stages of cp.async. K outermost over 2 steps: a thread holds
    one A value and a K step's B values, and ptxas keeps all in registers (counting every step's
    fragments twice over had refused it: 264 registers). K innermost over 8 steps: every step's B
    fragment stays live across the rows (128 values); the check refuses it and ptxas spills."""
    tile = {**TILE, "tile_n": [8, 2, 8, 4], "tile_m": [8, 4, 8, 4], "tile_k": [1, 128, 4, 2], "unroll": 0,
            "stages": 2}
    registers_only(MM1, tile)
    held = {**tile, "tile_k": [1, 32, 4, 8], "inner_order": ["n", "m", "k"]}
    with pytest.raises(Infeasible, match="estimated registers per thread 400 exceeds the limit 255"):
        for_workload(MM1).check(MM1, held, H100)
    assert local_memory(cuda_source(MM1, held, checked=False)) > 0


@pytest.mark.slow(seconds=10)
def test_a_tile_one_row_high_holds_no_operand_values_across_its_rows():
    """512 threads (a budget of 128 registers), each one row of 8 columns, K innermost after the
    rows: each B value serves a single row, so none is held across the row loop (counting the
    64 there had refused this tile, 149 registers), and ptxas keeps it in registers (32)."""
    registers_only(MM1, {"tile_n": [32, 1, 16, 1], "tile_m": [4, 8, 32, 1], "tile_k": [2, 32, 2, 8],
                         "inner_order": ["n", "k", "m"], "unroll": 512, "vector": 4, "stages": 2, "pad": 1, "raster": 2})


@pytest.mark.parametrize("threads, budget", [(256, 255), (288, 168), (440, 128), (1024, 64)])
@pytest.mark.slow(seconds=5)
def test_the_register_budget_is_what_ptxas_gives_a_block(tmp_path, threads, budget):
    """``registers_per_thread`` against ptxas itself: a kernel that wants more registers than
    the budget gets at most the budget under ``__launch_bounds__(threads)`` (288 threads: 168,
    not 65536 / 288 = 227, since ptxas counts the warps as a multiple of four), and one that
    wants fewer compiles within it without spilling."""
    assert targets.registers_per_thread(threads) == budget

    def compiled(live: int, bounds: str) -> tuple[int, int]:
        """(registers used, bytes spilled) of a kernel keeping ``live`` values across a loop."""
        names = [f"a{i}" for i in range(live)]
        source = (f'extern "C" __global__ void {bounds} '
                  'k(float* __restrict__ x, float* __restrict__ b, float* __restrict__ y, int n) {\n'
                  + "".join(f"  float {a} = x[{i}];\n" for i, a in enumerate(names))
                  + "  for (int i = 0; i < n; ++i) {\n    float v = x[i];\n"
                  + "".join(f"    {a} = fmaf({a}, v, b[{i % 7}]);\n" for i, a in enumerate(names))
                  + f"  }}\n  y[threadIdx.x] = {' + '.join(names)};\n}}\n")
        _, report = ptxas(source, tmp_path)
        return (int(re.search(r"Used (\d+) registers", report).group(1)),
                int(re.search(r"(\d+) bytes spill stores", report).group(1)))

    bounded = f"__launch_bounds__({threads})"
    if budget < targets.MAX_REGISTERS_PER_THREAD:  # else the budget is the hardware's own limit
        wanted, _ = compiled(budget + 32, "")
        assert wanted > budget and compiled(budget + 32, bounded)[0] <= budget
    fits, spilled = compiled(budget - 24, bounded)
    assert spilled == 0 and fits <= budget


def test_the_registers_command_sets_the_estimate_against_ptxas(tmp_path, capsys):
    """``nni-opevo registers`` compiles admitted draws and refusals near the limit and tells, per
    workload, the share of the space the check admits and how many of each draw ptxas keeps free
    of local memory, on its output and on a results page that names the command, the machine and
    nvcc."""
    from nni_opevo_bench import registers
    from trial_code.constraint import admitted_share

    registers.main(["--workloads", "MM_small", "--draws", "1", "--near", "1.2", "--space-draws", "300",
                    "--out", str(tmp_path), "--rows", str(tmp_path / "rows.jsonl")])
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert {row["kind"] for row in rows} == {"admitted", "refused"}
    assert all(row["registers"] <= row["budget"] <= targets.MAX_REGISTERS_PER_THREAD and row["local"] >= 0 for row in rows)
    assert all(0 < row["seconds"] < 120 for row in rows)  # TVM's lowering and nvcc, timed
    refused = next(row for row in rows if row["kind"] == "refused")
    assert refused["rule"].startswith("estimated registers per thread")
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| MM_small |"))
    share = admitted_share(workloads.lookup("MM_small"), H100, 300)
    assert 0 < share < 1 and line.split("|")[2].strip() == f"{100 * share:.2f} %"
    assert line.split("|")[3].strip() == "1"
    page = (tmp_path / "README.md").read_text()
    assert line in page.splitlines()
    assert "Command: `nni-opevo registers --workloads MM_small --draws 1" in page and "nvcc 13" in page
    assert page.startswith("# The CUDA static check against ptxas and nvcc's time\n\n## The rule \"estimated registers")
    seconds = line.split("|")[10].strip()  # the admitted draw's build, as median / max
    assert re.fullmatch(r"(\d+\.\d) / \1", seconds)
    with pytest.raises(SystemExit, match=r"^registers: --rule 'no such rule': the static check refuses none of "):
        registers.main(["--workloads", "MM_small", "--rule", "no such rule"])


def test_the_registers_page_holds_a_section_per_rule_each_replaced_by_its_own_run():
    """A run for one rule replaces that rule's section of the page and keeps the others."""
    from nni_opevo_bench import registers

    def run(rule: str, text: str) -> str:
        return f'## The rule "{rule}"\n\n{text}'

    both = registers.page(registers.page("", "b rule", run("b rule", "first b")), "a rule", run("a rule", "first a"))
    again = registers.page(both, "b rule", run("b rule", "second b"))
    assert again == (f"{registers.TITLE}\n\n{run('a rule', 'first a')}\n\n{run('b rule', 'second b')}\n")


@pytest.mark.slow(seconds=8)
def test_the_registers_command_sets_a_users_operator_against_ptxas(tmp_path, capsys, monkeypatch):
    """A workload named ``module:function`` is a user's operator at its default shape, its
    template derived from the computation; a name that imports nothing stops the command in one
    line naming it."""
    from nni_opevo_bench import registers

    monkeypatch.chdir(Path(__file__).resolve().parent.parent)  # `examples` is imported from the repository root
    registers.main(["--workloads", "examples.operators:matmul", "--draws", "1", "--near", "1.5", "--space-draws",
                    "300", "--rows", str(tmp_path / "rows.jsonl")])
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    admitted = next(row for row in rows if row["kind"] == "admitted")
    assert admitted["workload"] == "examples.operators:matmul" and admitted["local"] == 0
    assert "tile_k" in admitted["params"] and "inner_order" in admitted["params"]  # the derived space
    assert any(line.startswith("| examples.operators:matmul |") for line in capsys.readouterr().out.splitlines())
    with pytest.raises(SystemExit, match=r"^registers: --workloads nosuch:op: "):
        registers.main(["--workloads", "nosuch:op"])


def test_a_registers_compile_past_its_limit_is_a_row_and_leaves_nothing_running(monkeypatch):
    """A compile stopped at its limit is reported as such, its program and compilers killed: no
    process of the compile's session is left but the dead (the suite's other worker may be
    compiling in sessions of its own meanwhile)."""
    from nni_opevo_bench import registers
    from trial_code.constraint import draw

    killed = []
    kill_session = registers._kill_session
    monkeypatch.setattr(registers, "_kill_session", lambda process: (killed.append(process.pid), kill_session(process)))
    small = workloads.lookup("MM_small")
    row = registers.compiled_within("MM_small", draw(small, H100, 0)[0], limit_s=0.5)
    assert row == {"error": "compile past 0.5 s", "timeout": True, "seconds": 0.5} and len(killed) == 1
    left = []
    for path in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):  # a process that ended meanwhile
            state, _, _, session = path.read_text().rsplit(")", 1)[1].split()[:4]
            if int(session) == killed[0] and state != "Z":
                left.append(path.parent.name)
    assert not left
