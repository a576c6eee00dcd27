"""The vendor library's speed on the same workload and machine: what "fast" means for a kernel.

A best kernel's TFLOPS say little alone; the library a user would call instead does. On the
CPU that is NumPy's matmul, which calls the BLAS NumPy was built with (OpenBLAS in the wheels),
for MatMul and BatchMatMul in float32 with the workload's layout; NumPy has no convolution, so
Conv2D has no CPU anchor. On a GPU it is cuBLAS (MatMul, BatchMatMul) and cuDNN (Conv2D)
through PyTorch, where PyTorch is installed: fp32 with TF32 off, the class of our kernels, or
TF32 on (tensor cores) for reference. cuDNN picks its own algorithm, which may be Winograd or
FFT rather than a direct convolution (C2), so its "TFLOPS" count direct-convolution FLOPs.
The anchor is timed like a trial (median of repeats, each at least a minimum time) while
holding the device's measurement lock, so it never overlaps a trial's measurement, and in the
same run as the kernels it is compared with.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .device_lock import exclusive
from .targets import Target
from .templates import for_workload
from .workloads import Workload


@dataclass(frozen=True)
class Anchor:
    library: str
    tflops: float
    latency_ms: float
    repeats: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def versus(self, tflops: float) -> str:
        """'0.93x NumPy (OpenBLAS) at 171.8 GFLOPS' for a kernel of ``tflops``."""
        return f"{tflops / self.tflops:.2f}x {self.library} at {self.tflops * 1e3:.1f} GFLOPS"


def _blas_name() -> str:
    try:
        config = np.show_config(mode="dicts")
        return str(config["Build Dependencies"]["blas"]["name"])
    except Exception:  # older NumPy, or a build that does not say
        return "BLAS"


def measure(workload: Workload, target: Target, repeat: int = 5, min_repeat_ms: float = 50.0,
            lock_timeout: float | None = 900.0, tf32: bool = False) -> Anchor | None:
    """The vendor library on ``workload``, or None where there is none for it on this target.
    ``tf32``: on a GPU, let cuBLAS/cuDNN use TF32 tensor cores (a reference, not a peer)."""
    if target.kind == "cuda":
        return _cuda(workload, target, repeat, min_repeat_ms, lock_timeout, tf32)
    if workload.family not in ("matmul", "batch_matmul"):
        return None
    s = workload.shape
    rng = np.random.default_rng(0)
    lead = (s["batch"],) if workload.family == "batch_matmul" else ()
    # Stored as the workload's layout says; the transposed views are what the kernel computes with.
    a = rng.standard_normal(lead + ((s["k"], s["n"]) if s["layout"][0] == "T" else (s["n"], s["k"])), np.float32)
    b = rng.standard_normal(lead + ((s["m"], s["k"]) if s["layout"][1] == "T" else (s["k"], s["m"])), np.float32)
    a_view = np.swapaxes(a, -1, -2) if s["layout"][0] == "T" else a
    b_view = np.swapaxes(b, -1, -2) if s["layout"][1] == "T" else b
    out = np.empty(lead + (s["n"], s["m"]), np.float32)
    with exclusive(target.device, lock_timeout):
        np.matmul(a_view, b_view, out=out)  # warm-up: threads started, pages touched
        start = time.perf_counter()
        np.matmul(a_view, b_view, out=out)
        once = max(time.perf_counter() - start, 1e-7)
        number = max(1, int(np.ceil(min_repeat_ms / 1e3 / once)))
        runs = []
        for _ in range(repeat):
            start = time.perf_counter()
            for _ in range(number):
                np.matmul(a_view, b_view, out=out)
            runs.append((time.perf_counter() - start) / number)
    latency = statistics.median(runs)
    return Anchor(f"NumPy ({_blas_name()})", for_workload(workload).flops(workload) / latency / 1e12, latency * 1e3,
                  repeat)


def _cuda(workload: Workload, target: Target, repeat: int, min_repeat_ms: float, lock_timeout: float | None,
          tf32: bool) -> Anchor | None:
    """cuBLAS or cuDNN through PyTorch, timed with CUDA events; None without PyTorch or a GPU."""
    try:
        import torch
    except ImportError:
        return None
    if not target.has_device or not torch.cuda.is_available():
        return None
    s = workload.shape
    generator = torch.Generator(device="cuda").manual_seed(0)

    def random(*shape: int) -> Any:
        return torch.randn(*shape, device="cuda", dtype=torch.float32, generator=generator)

    if workload.family == "conv2d":
        data = random(s["batch"], s["in_channels"], s["height"], s["width"])
        weight = random(s["out_channels"], s["in_channels"], s["kernel_h"], s["kernel_w"])
        library = "cuDNN"

        def run() -> Any:
            return torch.nn.functional.conv2d(data, weight, stride=s["stride"], padding=s["padding"])
    else:
        lead = (s["batch"],) if workload.family == "batch_matmul" else ()
        a = random(*lead, *((s["k"], s["n"]) if s["layout"][0] == "T" else (s["n"], s["k"])))
        b = random(*lead, *((s["m"], s["k"]) if s["layout"][1] == "T" else (s["k"], s["m"])))
        a_view = a.transpose(-1, -2) if s["layout"][0] == "T" else a
        b_view = b.transpose(-1, -2) if s["layout"][1] == "T" else b
        library = "cuBLAS"

        def run() -> Any:
            return torch.matmul(a_view, b_view)
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True  # cuDNN times its algorithms once and keeps the fastest
    try:
        with exclusive(target.device, lock_timeout):
            for _ in range(3):  # warm-up: handles created, algorithms chosen
                run()
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            number = max(1, int(np.ceil(min_repeat_ms / max(start.elapsed_time(end), 1e-4))))
            runs = []
            for _ in range(repeat):
                start.record()
                for _ in range(number):
                    run()
                end.record()
                end.synchronize()
                runs.append(start.elapsed_time(end) / 1e3 / number)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark = saved
    latency = statistics.median(runs)
    name = f"{library} (PyTorch {torch.__version__.split('+')[0]}, {'TF32' if tf32 else 'fp32'})"
    return Anchor(name, for_workload(workload).flops(workload) / latency / 1e12, latency * 1e3, repeat)
