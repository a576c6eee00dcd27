"""Build a CUDA kernel for an H100 where no GPU is visible, and read what nvcc makes of it: PTX
and ptxas's report of a plain compile (shared memory, instructions), and local memory from the
cubin of TVM's own compile, the one a trial's kernel gets."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

from feasible import feasible

from nni_opevo_bench.cubin import resources
from trial_code import kernel, targets, workloads
from trial_code.templates import for_workload

H100 = targets.h100()


def cuda_source(workload: workloads.Workload, params: dict[str, Any], checked: bool = True) -> str:
    """The CUDA source of a configuration the static check admits (it raises otherwise), or of
    any configuration the template can schedule when not ``checked``."""
    if checked:
        for_workload(workload).check(workload, params, H100)
    return kernel.source(kernel.build(kernel.scheduled(workload, params, H100), H100), H100)


def ptxas(source: str, tmp_path: Path) -> tuple[str, str]:
    """(PTX, ptxas's resource report) of a kernel's CUDA source."""
    cu = tmp_path / "kernel.cu"
    cu.write_text(source)
    arch = f"-arch={H100.arch}"
    ptx = subprocess.run(["nvcc", "-ptx", arch, "-o", "-", str(cu)], capture_output=True, text=True, check=True).stdout
    report = subprocess.run(["nvcc", "-cubin", arch, "-Xptxas", "-v", "-o", str(tmp_path / "kernel.cubin"), str(cu)],
                            capture_output=True, text=True, check=True).stderr
    return ptx, report


def cp_async_copies(source: str) -> int:
    """The ``cp.async`` copy statements in CUDA source (calls of TVM's helpers, not their definitions)."""
    return len(re.findall(r"^\s+ptx_cp_async\w*\(", source, re.MULTILINE))


def local_memory(source: str) -> int:
    """Bytes of local memory a thread of the source's kernels uses at most (spill slots and arrays
    indexed at run time), in the cubin TVM's own compile makes of it (``nni_opevo_bench.cubin``)."""
    return max(found.local_bytes for found in resources(kernel.compile_cuda_source(source, H100)).values())


def registers_only(workload: workloads.Workload, params: dict[str, Any]) -> str:
    """The CUDA source of a configuration the check admits, after asserting that TVM's compile
    keeps it free of local memory."""
    source = cuda_source(workload, params)
    assert local_memory(source) == 0, params
    return source


def admitted_draws_use_no_local_memory(name: str, seeds: int = 6) -> None:
    """Build ``seeds`` random configurations the check admits and read each through ptxas: the
    register estimate must keep every one of them free of local memory."""
    workload = workloads.lookup(name)
    for seed in range(seeds):
        registers_only(workload, feasible(workload, H100, seed=seed))
