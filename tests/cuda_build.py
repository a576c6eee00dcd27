"""Build a CUDA kernel for an H100 where no GPU is visible, and read what nvcc makes of it."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

from feasible import feasible

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


def local_memory(report: str) -> int:
    """Bytes of local memory a ptxas report shows: spill stores and loads, and the stack frame
    (an array indexed at run time). It must show them: a report without them is no evidence."""
    found = [int(b) for b in re.findall(r"(\d+) bytes (?:spill stores|spill loads|stack frame)", report)]
    assert found, report
    return sum(found)


def registers_only(workload: workloads.Workload, params: dict[str, Any], tmp_path: Path) -> str:
    """The CUDA source of a configuration the check admits, after asserting that ptxas keeps it
    free of local memory."""
    source = cuda_source(workload, params)
    _, report = ptxas(source, tmp_path)
    assert local_memory(report) == 0, (params, report)
    return source


def admitted_draws_use_no_local_memory(name: str, tmp_path: Path, seeds: int = 6) -> None:
    """Build ``seeds`` random configurations the check admits and read each through ptxas: the
    register estimate must keep every one of them free of local memory."""
    workload = workloads.lookup(name)
    for seed in range(seeds):
        registers_only(workload, feasible(workload, H100, seed=seed), tmp_path)
