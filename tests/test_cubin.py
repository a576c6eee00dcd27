"""Reading a cubin's registers and local memory: what ptxas recorded for each kernel."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from cuda_build import H100

from nni_opevo_bench.cubin import resources
from trial_code import kernel

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")

SOURCE = """
extern "C" __global__ void __launch_bounds__(128) plain(float* __restrict__ x, float* __restrict__ y) {
  y[threadIdx.x] = x[threadIdx.x] * 2.0f;
}
extern "C" __global__ void __launch_bounds__(128) indexed(float* __restrict__ x, int* __restrict__ i,
                                                          float* __restrict__ y) {
  float a[64];
  for (int j = 0; j < 64; ++j) a[j] = x[j * 128 + threadIdx.x];
  a[i[threadIdx.x] & 63] += 1.0f;
  float s = 0.0f;
  for (int j = 0; j < 64; ++j) s += a[j] * a[(j * 7 + i[j]) & 63];
  y[threadIdx.x] = s;
}
"""


def test_each_kernel_gets_the_registers_and_local_memory_ptxas_reports(tmp_path):
    """Both kernels by name, with what ``ptxas -v`` printed for the cubin read; an array indexed
    at run time lives in a 256-byte stack frame, in TVM's compile too."""
    cu, cubin = tmp_path / "kernels.cu", tmp_path / "kernels.cubin"
    cu.write_text(SOURCE)
    report = subprocess.run(["nvcc", "-cubin", f"-arch={H100.arch}", "-Xptxas", "-v", "-o", str(cubin), str(cu)],
                            capture_output=True, text=True, check=True).stderr
    printed = re.findall(r"Compiling entry function '(\w+)'.*?(\d+) bytes stack frame.*?Used (\d+) registers",
                         report, re.S)
    found = resources(cubin.read_bytes())
    assert {name: (each.registers, each.local_bytes) for name, each in found.items()} == {
        name: (int(registers), int(frame)) for name, frame, registers in printed}
    assert found["plain"].local_bytes == 0 and found["indexed"].local_bytes == 256
    tvm_compiled = resources(kernel.compile_cuda_source(SOURCE, H100))
    assert {name: each.local_bytes for name, each in tvm_compiled.items()} == {"plain": 0, "indexed": 256}


def test_anything_but_a_cubin_is_refused():
    with pytest.raises(ValueError, match="not a cubin"):
        resources(b"not an ELF file")
