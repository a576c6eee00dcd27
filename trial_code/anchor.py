"""The vendor library's speed on the same workload and machine: what "fast" means for a kernel.

A best kernel's TFLOPS say little alone; the library a user would call instead does. On the
CPU that is NumPy's matmul, which calls the BLAS NumPy was built with (OpenBLAS in the wheels),
for MatMul and BatchMatMul in float32 with the workload's layout; NumPy has no convolution, so
Conv2D has no CPU anchor. The anchor is timed like a trial (median of repeats, each at least a
minimum time) while holding the device's measurement lock, so it never overlaps a trial's
measurement, and in the same run as the kernels it is compared with.
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
            lock_timeout: float | None = 900.0) -> Anchor | None:
    """The vendor library on ``workload``, or None where there is none for it on this target."""
    if target.kind != "llvm" or workload.family not in ("matmul", "batch_matmul"):
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
