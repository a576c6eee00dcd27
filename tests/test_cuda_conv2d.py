"""The CUDA convolution's pipeline, fetch and registers, read from the code nvcc generates (no
GPU needed): ``cp.async`` stages with the padding written as zero, coalesced fills, the
per-thread tile in registers, and no local memory for any configuration the check admits."""
from __future__ import annotations

import re
import shutil

import pytest
from cuda_build import H100, admitted_draws_use_no_local_memory, cuda_source, local_memory, ptxas

from trial_code import targets, workloads
from trial_code.templates import Infeasible, for_workload
from trial_code.templates.conv2d import _shared_bytes

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (the CUDA toolkit) is not on PATH")
C2 = workloads.lookup("C2")  # 5 x 5 kernel, padding 2: the fills' edges are padding
# 8 output channels by a 9 x 9 patch a block, 2 x 1 x 3 outputs a thread, 4 input channels and a
# kernel row a stage.
TILE = {"tile_f": [24, 2, 4, 1], "tile_y": [3, 1, 9, 1], "tile_x": [3, 1, 3, 3], "tile_rc": [16, 4],
        "tile_ry": [5, 1], "tile_rx": [1, 5], "reduce_order": ["rc", "ry", "rx"], "unroll_explicit": 1,
        "auto_unroll_max_step": 125, "stages": 1}


@pytest.mark.parametrize("stages", [2, 4])
@pytest.mark.slow(seconds=5)
def test_stages_fetch_the_input_window_and_kernel_tile_ahead_with_cp_async(tmp_path, stages):
    """``stages`` buffers of one stage's input window (4 channels of 9 x 13 with the halo) and
    kernel tile (8 x 4 x 5), filled by ``cp.async`` up to ``stages - 1`` stages ahead; a padding
    element's copy is predicated off and zero is stored instead."""
    source = cuda_source(C2, {**TILE, "stages": stages})
    ptx, report = ptxas(source, tmp_path)
    assert re.search(r"cp\.async\.c[ag]\.shared\.global(\.L2::\d+B)? \[[^]]+\], \[[^]]+\], 4", ptx)
    assert {int(n) for n in re.findall(r"cp\.async\.wait_group (\d+)", ptx)} == set(range(stages))
    assert "ptx_cp_async_legacy_pred" in source and re.search(r"@!p st\.shared", source)
    aligned = sum(-(-4 * stages * elements // 64) * 64 for elements in (4 * 9 * 13, 8 * 4 * 5))  # alignas(64) each
    assert _shared_bytes(C2.shape, TILE, stages) == aligned
    assert f"{aligned} bytes smem" in report and local_memory(source) == 0


def test_threads_fill_shared_memory_in_coalesced_rounds():
    """Consecutive threads load consecutive input elements: every load of the input window is
    indexed by the block's linear thread id (4 x 9 x 3 threads) unscaled, never by a thread's
    own run of elements."""
    source = cuda_source(C2, TILE)  # one stage: plain loads, no cp.async
    assert "cp_async" not in source
    loads = [line for line in source.splitlines() if "data_ptr[" in line]
    linear = "(((int)threadIdx.z) * 27) + (((int)threadIdx.y) * 3)) + ((int)threadIdx.x))"
    assert loads and all(linear in line for line in loads)
    assert not any(re.search(r"\(\(int\)threadIdx\.x\) \*", line) for line in loads)


@pytest.mark.slow(seconds=5)
def test_the_per_thread_tile_stays_in_registers_whatever_the_unroll_knobs():
    """A 27-long per-thread column left to nvcc's ``#pragma unroll`` (``unroll_explicit`` 0) put
    the accumulators in local memory; they are written out in every mode."""
    column = {**TILE, "tile_y": [1, 1, 1, 27], "tile_x": [1, 3, 9, 1], "tile_f": [12, 1, 16, 1],
              "tile_rc": [8, 8], "tile_ry": [1, 5], "tile_rx": [1, 5]}
    for explicit, step in ((0, 0), (0, 256), (1, 0)):
        assert local_memory(cuda_source(C2, {**column, "unroll_explicit": explicit, "auto_unroll_max_step": step})) == 0, \
            (explicit, step)


def test_a_stage_filled_in_one_round_is_pipelined_too():
    """64 threads along the output channels and one kernel element a stage: the kernel tile's
    fill is a single round per thread, and still becomes ``cp.async``."""
    c1 = workloads.lookup("C1")
    single = {"tile_f": [1, 1, 64, 1], "tile_y": [11, 1, 1, 5], "tile_x": [5, 1, 1, 11], "tile_rc": [3, 1],
              "tile_ry": [11, 1], "tile_rx": [11, 1], "reduce_order": ["rx", "rc", "ry"], "unroll_explicit": 1,
              "auto_unroll_max_step": 0, "stages": 2}
    source = cuda_source(c1, single)
    assert "kernel_shared" in source and re.search(r"ptx_cp_async\w*\(kernel_shared", source)


def test_deep_pipelines_need_the_explicit_unroll():
    """Past two stages the pipeline's last stages wait for copy counts that only a written-out
    loop makes constants (TVM refuses the build otherwise)."""
    for_workload(C2).check(C2, {**TILE, "stages": 2, "unroll_explicit": 0}, H100)
    with pytest.raises(Infeasible, match="stages 3 needs unroll_explicit 1"):
        for_workload(C2).check(C2, {**TILE, "stages": 3, "unroll_explicit": 0}, H100)


@pytest.mark.slow(seconds=5)
def test_stages_past_48_kb_use_dynamic_shared_memory():
    wide = {**TILE, "tile_rc": [2, 32]}  # 32 channels a stage: 4 x 32 x (9 x 13 + 8 x 5) = 20 KB a stage
    source = cuda_source(C2, {**wide, "stages": 3})
    assert "extern __shared__" in source and _shared_bytes(C2.shape, wide, 3) > H100.max_shared_memory_per_block
    assert local_memory(source) == 0


@pytest.mark.parametrize("name", [pytest.param("C1", marks=pytest.mark.slow(seconds=10)),
                                  pytest.param("C2", marks=pytest.mark.slow(seconds=15))])
def test_no_configuration_the_check_admits_uses_local_memory(name):
    """Registers are estimated from the per-thread tile and the fill rounds written out (each an
    address nvcc keeps live): every admitted configuration drawn here keeps all of them in
    registers, with no spills and no stack frame."""
    admitted_draws_use_no_local_memory(name)


@pytest.mark.slow(seconds=5)
def test_the_registers_command_reads_a_one_thread_block():
    """A block of one thread gets no ``__launch_bounds__`` from TVM: its budget is one thread's."""
    from nni_opevo_bench import registers

    one = {**TILE, "tile_f": [4, 8, 1, 2], "tile_y": [55, 1, 1, 1], "tile_x": [11, 5, 1, 1], "tile_rc": [3, 1],
           "tile_ry": [1, 11], "tile_rx": [11, 1], "stages": 2}
    c1 = workloads.lookup("C1")
    for_workload(c1).check(c1, one, H100)
    found = registers.compiled(one, c1)
    assert found["budget"] == targets.MAX_REGISTERS_PER_THREAD and found["local"] == 0
