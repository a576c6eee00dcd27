"""The vendor library's speed on the same workload and machine: what "fast" means for a kernel.

A best kernel's TFLOPS say little alone; the library a user would call instead does. On the
CPU that is NumPy's matmul, which calls the BLAS NumPy was built with (OpenBLAS in the wheels),
for MatMul and BatchMatMul in float32 with the workload's layout; NumPy has no convolution, so
Conv2D has no CPU anchor. On a GPU it is cuBLAS (MatMul, BatchMatMul) and cuDNN (Conv2D)
through PyTorch, where PyTorch is installed: fp32 with TF32 off, the class of our kernels, or
TF32 on (tensor cores) for reference. cuDNN picks its own algorithm, which may be Winograd or
FFT rather than a direct convolution (C2), so its "TFLOPS" count direct-convolution FLOPs.
The anchor is timed like a trial (median of repeats, each at least a minimum time) while
holding the device's measurement lock, so it never overlaps a trial's measurement.

``compare`` sets a built kernel against the library the way a ratio can be trusted: both timed
in the same process, interleaved, round after round, so a load that comes and goes hits both
alike; the ratio is that of the two sides' median rounds. Other work on the cores only ever
slows a round, and a side's median round stands for its idle speed while fewer than half of its
rounds were slowed: so where a side's median round is more than ``BUSY_SPREAD`` slower than its
fastest, the machine was too busy for a ratio, and none is given (on a 2-core machine with
other work, one-shot timings of the same 256^3 MatMul gave 0.03x and 59x).
"""
from __future__ import annotations

import contextlib
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .device_lock import exclusive
from .targets import Target, off_pinned_cores
from .templates import for_workload
from .workloads import Workload

BUSY_SPREAD = 0.1
"""How much slower than its fastest round a side's median round may be for a ratio to be given.
Idle, the development machine (2 shared vCPUs) runs MM_small and OpenBLAS within a few percent
of their fastest rounds but for stray rounds at half speed (a fifth of OpenBLAS's on a noisy
day, which the medians ignore); with a process spinning on every core the same rounds lie 30 %
to 10x apart (``tests/test_trial_code.py``), and no single ratio stands for them."""
ROUNDS = 7


@dataclass(frozen=True)
class Anchor:
    library: str
    tflops: float
    latency_ms: float
    repeats: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Comparison:
    """A kernel against the vendor library, timed interleaved (``compare``): each round's window
    of each side, in seconds per call."""

    library: str
    flops: float
    kernel_s: list[float]
    library_s: list[float]

    @property
    def kernel_tflops(self) -> float:
        return self.flops / statistics.median(self.kernel_s) / 1e12

    @property
    def vendor_tflops(self) -> float:
        return self.flops / statistics.median(self.library_s) / 1e12

    @property
    def ratio(self) -> float:
        """The kernel's speed over the library's, their median rounds'."""
        return statistics.median(self.library_s) / statistics.median(self.kernel_s)

    @property
    def ratios(self) -> list[float]:
        """Each round's kernel speed over the library's."""
        return [library / kernel for kernel, library in zip(self.kernel_s, self.library_s)]

    @property
    def spreads(self) -> tuple[float, float]:
        """How much slower than its fastest round the kernel's median round is, and the library's."""
        def spread(rounds: list[float]) -> float:
            return statistics.median(rounds) / min(rounds) - 1

        return spread(self.kernel_s), spread(self.library_s)

    @property
    def busy(self) -> bool:
        return max(self.spreads) > BUSY_SPREAD

    def versus(self) -> str:
        """'1.28x NumPy (OpenBLAS) at 171.8 GFLOPS (median rounds of 7, 2% and 4% above each side's
        fastest)', or why not."""
        kernel, library = self.spreads
        rounds = f"median rounds of {len(self.kernel_s)}, {kernel:.0%} and {library:.0%} above each side's fastest"
        if self.busy:
            return (f"no ratio to {self.library}: the machine was busy (interleaved, the kernel's and the library's "
                    f"{rounds}, more than {BUSY_SPREAD:.0%}); compare again when it is idle")
        return f"{self.ratio:.2f}x {self.library} at {self.vendor_tflops * 1e3:.1f} GFLOPS ({rounds})"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "kernel_tflops": self.kernel_tflops, "vendor_tflops": self.vendor_tflops,
                "busy": self.busy, "ratio": None if self.busy else self.ratio}

    @staticmethod
    def from_json(data: dict[str, Any]) -> Comparison:
        return Comparison(data["library"], data["flops"], list(data["kernel_s"]), list(data["library_s"]))


@dataclass(frozen=True)
class Vendor:
    """The library's call on prepared inputs, how to wait for it to finish, and whether PyTorch
    may use TF32 tensor cores for it (``tf32_for``)."""

    name: str
    run: Callable[[], Any]
    sync: Callable[[], Any]
    tf32: bool = False


def tf32_switches(torch: Any) -> list[tuple[Any, str, tuple[Any, Any]]]:
    """PyTorch's process-wide TF32 switches for cuBLAS's float32 products and cuDNN's
    convolutions: (object, attribute, (value off, value on)). PyTorch 2.9 and later name them
    ``fp32_precision``; reading the older ``allow_tf32`` after a library set the newer one raises
    there, so the newer are used wherever they exist."""
    cuda, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    if hasattr(cuda, "fp32_precision") and hasattr(getattr(cudnn, "conv", None), "fp32_precision"):
        return [(cuda, "fp32_precision", ("ieee", "tf32")), (cudnn.conv, "fp32_precision", ("ieee", "tf32"))]
    return [(cuda, "allow_tf32", (False, True)), (cudnn, "allow_tf32", (False, True))]


@contextlib.contextmanager
def tf32_for(library: Vendor) -> Iterator[None]:
    """PyTorch's TF32 switches as ``library.tf32`` says while the library runs, and as they were
    after. They are process-wide, so a TF32 anchor would otherwise leave TF32 on for every library
    timed after it in the process (a user's operator's PyTorch products on tensor cores beside a
    table that says fp32), and cuDNN's convolutions use TF32 unless told not to. Nothing is done
    where the library has not imported PyTorch."""
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    switches = tf32_switches(torch)
    before = [getattr(owner, attribute) for owner, attribute, _ in switches]
    for owner, attribute, values in switches:
        setattr(owner, attribute, values[library.tf32])
    try:
        yield
    finally:
        for (owner, attribute, _), value in zip(switches, before):
            setattr(owner, attribute, value)


def _blas_name() -> str:
    try:
        config = np.show_config(mode="dicts")
        return str(config["Build Dependencies"]["blas"]["name"])
    except Exception:  # older NumPy, or a build that does not say
        return "BLAS"


def vendor(workload: Workload, target: Target, tf32: bool = False) -> Vendor | None:
    """The library a user would call instead of the kernel, or None where there is none here."""
    if workload.family == "operator":
        return _declared(workload, target)
    if target.kind == "cuda":
        return _torch(workload, target, tf32)
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
    return Vendor(f"NumPy ({_blas_name()})", lambda: np.matmul(a_view, b_view, out=out), lambda: None)


def _declared(workload: Workload, target: Target) -> Vendor | None:
    """A user's operator: the library its ``Operator`` names, called on the trials' inputs (NumPy
    arrays on the CPU; on a GPU, tensors on it, which ``torch.from_dlpack`` reads as it reads the
    arrays), waited for by synchronizing the device; None where it names none, it is not installed
    here (its function raised ImportError) or no GPU is visible. On a GPU the call is made once
    first: one that fails on the GPU's tensors (a NumPy library), or returns its result on another
    device (a copy to the host), is a ValueError naming the operator, never a ratio. It runs with
    PyTorch's TF32 off (``tf32_for``), in float32 as the kernel computes."""
    from . import measure

    operator = getattr(for_workload(workload), "operator", None)
    declared = operator(workload).library if operator is not None else None
    if declared is None or (target.kind == "cuda" and not target.has_device):
        return None
    name, prepare = declared
    prepared = measure.prepare(workload, seed=0)
    if target.kind == "cuda":
        device = measure.device_of(target)
        inputs, sync = measure.upload(prepared, device)[:-1], device.sync
    else:
        inputs, sync = prepared.host, lambda: None
    try:
        library = Vendor(name, prepare(*inputs), sync)
        if target.kind == "cuda":
            with tf32_for(library):
                result = library.run()  # once: a library that cannot read the GPU's tensors fails here
    except ImportError:
        return None
    except Exception as e:  # noqa: BLE001 (the user's code, on tensors it may not read)
        if target.kind != "cuda":
            raise
        raise ValueError(f"{workload.name}: its library {name!r} failed on the GPU's inputs (tensors on the GPU, "
                         f"read through DLPack: torch.from_dlpack(x)): {type(e).__name__}: {e}") from None
    if target.kind == "cuda" and hasattr(result, "__dlpack_device__") and \
            result.__dlpack_device__()[0] != device.dlpack_device_type():
        raise ValueError(f"{workload.name}: its library {name!r} returned its result off the GPU (DLPack device "
                         f"{result.__dlpack_device__()}): the kernel is not timed against another device's computation")
    return library


def _torch(workload: Workload, target: Target, tf32: bool) -> Vendor | None:
    """cuBLAS or cuDNN through PyTorch; None without PyTorch or a GPU. ``tf32`` lets them use
    TF32 tensor cores (a reference, not a peer); cuDNN times its algorithms once and keeps the fastest."""
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

    torch.backends.cudnn.benchmark = True
    kind = f"PyTorch {torch.__version__.split('+')[0]}, {'TF32' if tf32 else 'fp32'}"
    if workload.family == "conv2d":
        data = random(s["batch"], s["in_channels"], s["height"], s["width"])
        weight = random(s["out_channels"], s["in_channels"], s["kernel_h"], s["kernel_w"])
        return Vendor(f"cuDNN ({kind})", lambda: torch.nn.functional.conv2d(
            data, weight, stride=s["stride"], padding=s["padding"]), torch.cuda.synchronize, tf32)
    lead = (s["batch"],) if workload.family == "batch_matmul" else ()
    a = random(*lead, *((s["k"], s["n"]) if s["layout"][0] == "T" else (s["n"], s["k"])))
    b = random(*lead, *((s["m"], s["k"]) if s["layout"][1] == "T" else (s["k"], s["m"])))
    a_view = a.transpose(-1, -2) if s["layout"][0] == "T" else a
    b_view = b.transpose(-1, -2) if s["layout"][1] == "T" else b
    return Vendor(f"cuBLAS ({kind})", lambda: torch.matmul(a_view, b_view), torch.cuda.synchronize, tf32)


def _runs_per_window(run: Callable[[], Any], sync: Callable[[], Any], min_repeat_ms: float) -> int:
    """How many calls make a window of ``min_repeat_ms`` (after a warm-up: threads started, pages
    touched, handles made)."""
    for _ in range(2):
        run()
    sync()
    start = time.perf_counter()
    run()
    sync()
    return max(1, math.ceil(min_repeat_ms / 1e3 / max(time.perf_counter() - start, 1e-7)))


SETTLE_S = 0.5
"""Pause before each window: the other runtime's worker threads (TVM's pool, OpenBLAS's) spin
for a while after their last call and take cores from this window's; after 0.1 s, OpenBLAS
still ran MM_small 50x slower in some windows, after 0.5 s in none."""


def _seconds_per_run(run: Callable[[], Any], sync: Callable[[], Any], number: int, settle: float = 0.0) -> float:
    """Seconds per call over ``number`` calls, after ``settle`` seconds of pause (``SETTLE_S``)."""
    sync()
    time.sleep(settle)
    run()  # wakes this runtime's threads
    sync()
    start = time.perf_counter()
    for _ in range(number):
        run()
    sync()
    return (time.perf_counter() - start) / number


def measure(workload: Workload, target: Target, repeat: int = 5, min_repeat_ms: float = 50.0,
            lock_timeout: float | None = 900.0, tf32: bool = False) -> Anchor | None:
    """The vendor library alone on ``workload`` (median of ``repeat`` windows), or None where
    there is none for it on this target."""
    library = vendor(workload, target, tf32)
    if library is None:
        return None
    with exclusive(target.device, lock_timeout), tf32_for(library):
        number = _runs_per_window(library.run, library.sync, min_repeat_ms)
        runs = [_seconds_per_run(library.run, library.sync, number) for _ in range(repeat)]
    latency = statistics.median(runs)
    return Anchor(library.name, for_workload(workload).flops(workload) / latency / 1e12, latency * 1e3, repeat)


def compare(workload: Workload, target: Target, kernel: Callable[[], Any], kernel_sync: Callable[[], Any],
            rounds: int = ROUNDS, min_repeat_ms: float = 50.0, lock_timeout: float | None = 900.0) -> Comparison | None:
    """``kernel`` (a call of the built kernel on prepared arguments) against the vendor library:
    each round times a window of each, one after the other; None where there is no library."""
    library = vendor(workload, target)
    if library is None:
        return None
    flops = for_workload(workload).flops(workload)

    def kernel_window(number: int) -> float:
        # On the CPU, off the cores TVM's pool has pinned its workers to (``targets.off_pinned_cores``).
        with off_pinned_cores() if target.kind == "llvm" else contextlib.nullcontext():
            return _seconds_per_run(kernel, kernel_sync, number, SETTLE_S)

    with exclusive(target.device, lock_timeout), tf32_for(library):
        numbers = (_runs_per_window(kernel, kernel_sync, min_repeat_ms),
                   _runs_per_window(library.run, library.sync, min_repeat_ms))
        pairs = [(kernel_window(numbers[0]), _seconds_per_run(library.run, library.sync, numbers[1], SETTLE_S))
                 for _ in range(rounds)]
    return Comparison(library.name, flops, [k for k, _ in pairs], [v for _, v in pairs])
