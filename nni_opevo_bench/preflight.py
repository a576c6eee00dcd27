"""The GPU machine's preflight: what a campaign call needs, checked in seconds before it spends any.

``python3 -m nni_opevo_bench.preflight image`` runs before TVM is unpacked and needs nothing but
the machine's own Python: the bundle's wheels are CPython 3.12 builds, the anchors need PyTorch
with CUDA, TVM compiles CUDA through NVRTC (``cuda.bindings``) with the toolkit's headers and
loads ``libcudart``. ``... preflight smoke`` runs once TVM is unpacked: TVM sees the GPU (its CUDA
runtime fails silently otherwise), one small random MatMul is built, run and checked through the
trial code, and one PyTorch MatMul is checked. Each problem is one line; any problem exits 3, so
``scripts/gpu-call.sh`` stops the call before the campaign spends its minutes on failing trials.
The same MatMul is then exported and called as a program calls it (``library_smoke``), a check of
the exported kernel's GPU path that only reports.
Then the same MatMul runs in a worker forked from a server that has TVM loaded, as the campaign
runs its trials (``trial_code.forked``): where that alone fails, the smoke exits 4 and the call
script runs the campaign with every worker a program of its own (``NNI_OPEVO_FORK=0``).
"""
from __future__ import annotations

import ctypes
import glob
import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trial_code.evaluate import Result
    from trial_code.targets import Target
    from trial_code.workloads import Workload

PYTHON = (3, 12)
"""The Python the bundle's binary wheels are built for (scripts/gpu-bundle.sh)."""
EXIT = 3
FORK_EXIT = 4
"""The smoke's exit where everything passed but a forked worker's kernel (``forked_smoke``)."""


@dataclass
class Machine:
    """What the checks look at; tests replace a part to simulate each failure."""

    python: tuple[int, int] = field(default_factory=lambda: (sys.version_info.major, sys.version_info.minor))
    import_module: Callable[[str], ModuleType] = importlib.import_module
    cuda_path: str = field(default_factory=lambda: os.environ.get("CUDA_PATH") or "/usr/local/cuda")
    load_library: Callable[[str], object] = ctypes.CDLL


def _python(machine: Machine) -> str | None:
    if machine.python != PYTHON:
        return (f"Python {machine.python[0]}.{machine.python[1]} here, and the bundle's wheels (TVM, xgboost) are "
                f"built for {PYTHON[0]}.{PYTHON[1]}: rebuild them for this Python (scripts/gpu-bundle.sh)")
    return None


def _torch(machine: Machine) -> str | None:
    try:
        torch = machine.import_module("torch")
    except Exception as e:  # an import can fail in any way: each is one line
        return f"PyTorch does not import ({type(e).__name__}: {e}): the anchors need it"
    if not torch.cuda.is_available():
        return f"PyTorch {torch.__version__} sees no CUDA device: a CPU build, or no GPU visible"
    return None


def _nvrtc(machine: Machine) -> str | None:
    try:
        nvrtc = machine.import_module("cuda.bindings.nvrtc")
        error, _, _ = nvrtc.nvrtcVersion()
        if error != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return f"NVRTC answers nvrtcVersion with {error}"
    except Exception as e:
        return f"NVRTC does not load through cuda.bindings ({type(e).__name__}: {e}): TVM compiles CUDA with it"
    return None


def _headers(machine: Machine) -> str | None:
    header = os.path.join(machine.cuda_path, "include", "cuda_runtime.h")
    if not os.path.isfile(header):
        return f"no {header}: NVRTC needs the CUDA headers (set CUDA_PATH to the toolkit)"
    return None


def _cudart(machine: Machine) -> str | None:
    names = ["libcudart.so", *sorted(glob.glob(os.path.join(machine.cuda_path, "lib64", "libcudart.so*")))]
    problems = []
    for name in names:
        try:
            machine.load_library(name)
            return None
        except OSError as e:
            problems.append(str(e))
    return f"libcudart does not load ({problems[-1] if problems else 'not found'}): TVM's CUDA runtime needs it"


IMAGE_CHECKS = (_python, _torch, _nvrtc, _headers, _cudart)


def image(machine: Machine | None = None) -> list[str]:
    """The image's problems, one line each; none when a campaign call can go on."""
    machine = machine or Machine()
    return [problem for check in IMAGE_CHECKS if (problem := check(machine))]


def smoke() -> list[str]:
    """TVM's view of the GPU, one trial-code MatMul and one PyTorch MatMul; problems, one line each."""
    import numpy as np
    import torch
    import tvm

    if not tvm.cuda(0).exist:
        return [f"TVM {tvm.__version__} sees no CUDA device: its CUDA runtime did not load"]
    problems = []
    result = _smoke_kernel()
    if result.status.name != "NO_ERROR":
        problems.append(f"a random admitted MM_small kernel ended {result.status.name}: {result.error[-200:]}")
    a = torch.rand(256, 256, device="cuda", dtype=torch.float64)
    if not torch.allclose((a @ a).cpu(), torch.from_numpy(a.cpu().numpy() @ a.cpu().numpy())):
        problems.append("a PyTorch MatMul on the GPU disagrees with NumPy's")
    print(f"preflight: TVM {tvm.__version__}, PyTorch {torch.__version__}, MM_small "
          f"{result.tflops:.2f} TFLOPS ({result.status.name}), NumPy {np.__version__}", flush=True)
    return problems


def _smoke_matmul() -> tuple[Target, Workload, dict[str, Any]]:
    """The smoke's MatMul: the first admitted MM_small configuration of seed 0 on this GPU."""
    from trial_code import constraint, targets
    from trial_code.workloads import lookup

    target, workload = targets.cuda(), lookup("MM_small")
    params, _ = constraint.draw(workload, target, 0)
    return target, workload, params


def _smoke_kernel() -> Result:
    """The smoke's MatMul through the trial code."""
    from trial_code.evaluate import Limits, evaluate

    target, workload, params = _smoke_matmul()
    return evaluate(workload, params, target, Limits(build_timeout=120.0, run_timeout=30.0))


def library_smoke() -> list[str]:
    """The smoke's MatMul as a program takes it (``trial_code.library``): built into a library,
    loaded with its arch checked against the GPU's, and called on NumPy arrays and on PyTorch
    tensors on a stream of PyTorch's own, whose inputs are written only after a long MatMul on
    that stream: a kernel launched on another stream reads them unwritten. Problems, one line
    each; the campaign loads no library, so they do not stop the call."""
    import tempfile

    import numpy as np
    import torch

    from trial_code import kernel, library

    target, workload, params = _smoke_matmul()
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((256, 256)).astype(np.float32) for _ in range(2))
    expected = a.astype(np.float64) @ b
    problems = []
    try:
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "best.so")
            kernel.build(kernel.scheduled(workload, params, target), target).export_library(path)
            loaded = library.load(path, workload, "cuda", target.arch)
            if not np.allclose(loaded(a, b), expected, rtol=1e-3, atol=1e-2):
                problems.append("the exported MM_small kernel called on NumPy arrays disagrees with NumPy")
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                busy = torch.rand(4096, 4096, device="cuda")
                x, y = torch.zeros(256, 256, device="cuda"), torch.zeros(256, 256, device="cuda")
                for _ in range(8):  # some 20 ms of the GPU before the inputs are written, the host not waiting
                    busy = busy @ busy / 4096
                x.copy_(torch.from_numpy(a).pin_memory(), non_blocking=True)
                y.copy_(torch.from_numpy(b).pin_memory(), non_blocking=True)
                out = loaded(x, y, out=torch.empty(256, 256, device="cuda"))
                got = out.cpu().numpy()
            if not np.allclose(got, expected, rtol=1e-3, atol=1e-2):
                problems.append("the exported MM_small kernel called on PyTorch tensors on a side stream disagrees "
                                "with NumPy: it ran on another stream")
    except Exception as e:  # noqa: BLE001 (any failure of the path is the finding, one line)
        problems.append(f"the exported MM_small kernel could not be loaded and called: {type(e).__name__}: "
                        f"{str(e).splitlines()[0] if str(e) else ''}")
    return problems


def forked_smoke() -> list[str]:
    """The smoke's MatMul again, in a worker forked from a server that has TVM loaded."""
    from trial_code import forked

    with forked.workers():
        result = _smoke_kernel()
    if result.status.name == "NO_ERROR":
        return []
    return [f"the MM_small kernel in a forked worker ended {result.status.name}: {result.error[-200:]}; the "
            f"campaign starts its workers as programs ({forked.SWITCH}=0)"]


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv not in (["image"], ["smoke"]):
        print("usage: python3 -m nni_opevo_bench.preflight image|smoke", file=sys.stderr)
        raise SystemExit(2)
    problems = image() if argv == ["image"] else smoke()
    for problem in problems:
        print(f"preflight: {problem}", file=sys.stderr, flush=True)
    if problems:
        raise SystemExit(EXIT)
    for problem in library_smoke() if argv == ["smoke"] else []:
        print(f"preflight: {problem} (the campaign goes on)", file=sys.stderr, flush=True)
    for problem in forked_smoke() if argv == ["smoke"] else []:
        print(f"preflight: {problem}", file=sys.stderr, flush=True)
        raise SystemExit(FORK_EXIT)
    print(f"preflight: {argv[0]} passed", flush=True)


if __name__ == "__main__":
    main()
