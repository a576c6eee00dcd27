"""The CUDA GEMM space's speed knobs, read from the code nvcc generates (no GPU needed): 128-bit
vector loads, ``cp.async`` double buffering, dynamic shared memory past 48 KB, split-K, the
unrolled register stage, and no local memory for any tile the static check admits."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from feasible import feasible

from trial_code import kernel, targets, workloads
from trial_code.templates import Infeasible, for_workload

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (the CUDA toolkit) is not on PATH")
H100 = targets.Target("cuda", device="cuda-none", has_device=False, **targets.H100)
MM1 = workloads.lookup("MM1")
# 128 threads of 8 x 8 outputs, K staged 8 at a time: the classic fast fp32 tile.
TILE = {"tile_n": [8, 2, 8, 4], "tile_m": [8, 2, 16, 4], "tile_k": [1, 128, 8, 1], "inner_order": ["k", "n", "m"],
        "unroll": 512, "vector": 4, "stages": 1, "pad": 0, "raster": 0}


def _source(workload: workloads.Workload, params: dict[str, Any]) -> str:
    for_workload(workload).check(workload, params, H100)
    return kernel.source(kernel.build(kernel.scheduled(workload, params, H100), H100), H100)


def _ptxas(source: str, tmp_path: Path) -> tuple[str, str]:
    """(PTX, ptxas's resource report) of a kernel's CUDA source."""
    cu = tmp_path / "kernel.cu"
    cu.write_text(source)
    arch = f"-arch={H100.arch}"
    ptx = subprocess.run(["nvcc", "-ptx", arch, "-o", "-", str(cu)], capture_output=True, text=True, check=True).stdout
    report = subprocess.run(["nvcc", "-cubin", arch, "-Xptxas", "-v", "-o", str(tmp_path / "kernel.cubin"), str(cu)],
                            capture_output=True, text=True, check=True).stderr
    return ptx, report


def test_vector_4_loads_global_memory_128_bits_at_a_time(tmp_path):
    ptx, _ = _ptxas(_source(MM1, TILE), tmp_path)
    assert re.search(r"ld\.global(\.nc)?\.v4\.[fub]32", ptx)
    assert re.search(r"ld\.shared\.v4\.[fub]32", ptx)  # the register stage reads shared memory 128 bits at a time
    scalar, _ = _ptxas(_source(MM1, {**TILE, "vector": 1}), tmp_path)
    assert not re.search(r"ld\.global(\.nc)?\.v[24]", scalar)


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_a_pipeline_of_stages_fills_that_many_buffers_with_cp_async(tmp_path, stages):
    """``stages`` shared-memory buffers per operand, filled 16 bytes at a time by ``cp.async``
    up to ``stages - 1`` K stages ahead (the waits count down from ``stages - 1`` groups in flight)."""
    ptx, report = _ptxas(_source(MM1, {**TILE, "stages": stages}), tmp_path)
    assert re.search(r"cp\.async\.c[ag]\.shared\.global(\.L2::\d+B)? \[[^]]+\], \[[^]]+\], 16", ptx)  # 16 bytes each
    assert {int(n) for n in re.findall(r"cp\.async\.wait_group (\d+)", ptx)} == set(range(stages))
    plain_bytes = 4 * (64 * 8 + 8 * 128)  # one stage of the A (64 x 8) and B (8 x 128) tiles
    assert f"{stages * plain_bytes} bytes smem" in report
    plain, _ = _ptxas(_source(MM1, TILE), tmp_path)
    assert "cp.async" not in plain


def test_padding_makes_the_shared_tiles_rows_bank_conflict_free(tmp_path):
    """With ``pad`` the A tile's rows of 8 floats are stored 12 apart and B's of 128 floats 132
    apart: consecutive rows start 4 banks apart; the check counts exactly the padded bytes."""
    _, report = _ptxas(_source(MM1, {**TILE, "pad": 1}), tmp_path)
    padded = 4 * (64 * 12 + 8 * 132)
    assert f"{padded} bytes smem" in report and "0 bytes spill stores" in report
    from trial_code.templates import gemm

    assert gemm._shared_bytes({**TILE, "pad": 1}, "NN") == padded


def test_raster_orders_the_blocks_in_groups_of_column_blocks(tmp_path):
    """``raster`` 4: one block index over the grid, four column blocks per group; refused where
    it does not divide the column blocks or leaves a single group."""
    source = _source(MM1, {**TILE, "raster": 4})
    assert "blockIdx.y" not in source and "blockIdx.x" in source
    _ptxas(source, tmp_path)
    with pytest.raises(Infeasible, match="raster 8 must divide the column blocks"):
        for_workload(MM1).check(MM1, {**TILE, "tile_m": [4, 4, 16, 4], "raster": 8}, H100)


def test_a_pipeline_needs_ampere_or_newer():
    volta = targets.Target("cuda", arch="sm_70", max_threads_per_block=1024, max_shared_memory_per_block=49152,
                           device="cuda-none", has_device=False)
    with pytest.raises(Infeasible, match="stages 2 needs cp.async"):
        for_workload(MM1).check(MM1, {**TILE, "stages": 2}, volta)


def test_shared_memory_past_48_kb_is_dynamic_and_admitted_up_to_the_opt_in_limit(tmp_path):
    big = {**TILE, "tile_n": [4, 2, 16, 4], "tile_m": [8, 2, 16, 4], "tile_k": [1, 16, 64, 1]}  # 64 KB
    source = _source(MM1, big)
    assert "extern __shared__" in source
    _, report = _ptxas(source, tmp_path)
    assert re.search(r"Used \d+ registers", report)
    doubled = {**big, "stages": 2}  # 128 KB: within an H100's 227 KB
    for_workload(MM1).check(MM1, doubled, H100)
    with pytest.raises(Infeasible, match="shared memory bytes per block 262144 exceeds the limit 232448"):
        for_workload(MM1).check(MM1, {**doubled, "tile_k": [1, 8, 128, 1]}, H100)


def test_split_k_adds_a_kernel_for_the_partial_sums():
    source = _source(MM1, {**TILE, "tile_k": [4, 32, 8, 1]})
    assert len(re.findall(r"__global__[^;{]*\{", source)) == 2
    with pytest.raises(Infeasible, match="split-K blocks"):
        for_workload(MM1).check(MM1, {**TILE, "tile_k": [32, 4, 8, 1]}, H100)


def test_unroll_writes_out_the_register_stage():
    """8 x 8 outputs per thread (4 virtual threads of 4 x 4) over 8 K steps: 512 multiply-adds,
    all written out at unroll 512; below it, one K step's 64 (the thread's tile, always written
    out so that it stays in registers) in a loop over the 8 steps."""
    def multiply_adds(source: str) -> int:
        return len(re.findall(r"C_local_ptr\[\d+\] = \(C_local_ptr\[\d+\] \+", source))

    sources = {step: _source(MM1, {**TILE, "unroll": step}) for step in (512, 64, 0)}
    assert [multiply_adds(sources[step]) for step in (512, 64, 0)] == [512, 64, 64]
    assert "for (int k_1 = 0; k_1 < 8; ++k_1)" not in sources[512]
    assert all("for (int k_1 = 0; k_1 < 8; ++k_1)" in sources[step] for step in (64, 0))


def test_vector_width_must_divide_the_tile_and_the_rows():
    with pytest.raises(Infeasible, match="vector 4 does not divide the contiguous extent of the A tile"):
        for_workload(MM1).check(MM1, {**TILE, "tile_k": [1, 512, 2, 1]}, H100)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["MM1", "BMM1", "BMM2", "BMM3"])
def test_no_configuration_the_check_admits_uses_local_memory(name, tmp_path):
    """Registers are estimated from the tiles (accumulators, operand fragments, a calibrated
    overhead): every admitted configuration drawn here keeps all of them in registers, with no
    spills and no stack frame."""
    workload = workloads.lookup(name)
    for seed in range(6):
        params = feasible(workload, H100, seed=seed)
        _, report = _ptxas(_source(workload, params), tmp_path)
        spills = [int(b) for b in re.findall(r"(\d+) bytes spill (?:stores|loads)", report)]
        frames = [int(b) for b in re.findall(r"(\d+) bytes stack frame", report)]
        assert spills and not any(spills) and not any(frames), (params, report)
