"""Which device a trial runs on, and its limits, decided without importing TVM.

``auto`` picks CUDA when the CUDA driver sees a GPU (honouring CUDA_VISIBLE_DEVICES, as NNI
sets it per trial) and the CPU otherwise. The limits feed the templates' static feasibility
checks, so infeasible configurations are rejected in milliseconds, before any build.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

# CUDA hardware limits that no target attribute carries (CUDA programming guide, table 21).
MAX_BLOCK_DIM_Z = 64
MAX_GRID_DIM_YZ = 65535
# Virtual threads multiply code size and registers; TVM's GPU checks and the H100 study cap them here.
MAX_VTHREADS = 64
# A vectorized CPU loop longer than this is unrolled into huge code for no gain.
MAX_CPU_VECTOR = 64
# Likewise for an unrolled register-tile loop: its body is repeated this many times in the code.
MAX_CPU_UNROLL = 64

LLVM_FAST_MATH = {"fast-math-arcp": True}
"""LLVM may divide by multiplying with the reciprocal (``x / 768`` as ``x * (1 / 768)``), the CPU's
counterpart of the fast math TVM compiles CUDA with: within 1.5 units in the last place where a
division is within 0.5, and a vector division costs several multiplications' throughput. A mean
written as TE writes one (``te.sum(x / n)``) divides every element: the layer-norm example spent
a fifth of its time there. Only division is relaxed; no other rounding, NaN or infinity rule
changes, and a kernel that divides by no constant compiles to the same instructions."""

# Registers: 255 per thread at most, and 64 K per block (CUDA programming guide, table 21).
MAX_REGISTERS_PER_THREAD = 255
REGISTERS_PER_BLOCK = 65536
WARP_SIZE = 32
WARP_GROUP = 4
REGISTER_STEP = 8
"""ptxas budgets a block's registers as if its warps were a multiple of ``WARP_GROUP`` (an SM's
four schedulers), in steps of ``REGISTER_STEP`` registers a thread: a block of 288 threads
(9 warps) gets 65536 / (12 x 32) -> 168 registers a thread, not 65536 / 288 (ptxas -v, sm_90a,
nvcc 13)."""


def registers_per_thread(threads: int) -> int:
    """The registers ptxas gives each thread of a kernel launched with ``threads`` a block
    (TVM's ``__launch_bounds__``): past this it spills to local memory."""
    warps = -(-threads // WARP_SIZE)
    budgeted = -(-warps // WARP_GROUP) * WARP_GROUP
    per_thread = REGISTERS_PER_BLOCK // (budgeted * WARP_SIZE)
    return min(MAX_REGISTERS_PER_THREAD, per_thread // REGISTER_STEP * REGISTER_STEP)

# What an H100 reports, for compiling CUDA where no GPU is visible (CI, nvcc-only machines).
H100 = {"arch": "sm_90a", "max_threads_per_block": 1024, "max_shared_memory_per_block": 49152,
        "max_shared_memory_optin": 232448}


CUDA_ARCH = re.compile(r"sm_(\d+)(a?)")
"""A CUDA arch: its compute capability (90 for 9.0) and "a" where it is arch-specific."""


@dataclass(frozen=True)
class Target:
    kind: str  # "cuda" or "llvm"
    arch: str = ""  # CUDA: "sm_90a"
    max_threads_per_block: int = 0
    max_shared_memory_per_block: int = 0
    """Static shared memory a block may declare (48 KB on every GPU since Kepler)."""
    max_shared_memory_optin: int = 0
    """Dynamic shared memory a block may use once the kernel opts in (227 KB on an H100); TVM's
    CUDA runtime opts in for kernels that use more than 48 KB. 0: as the static limit."""
    device: str = "cpu"  # names the device's measurement lock: "cpu" or "cuda-<visible id>"
    has_device: bool = True  # False: CUDA code can be built but not run here
    mcpu: str = ""
    """LLVM's name of the CPU the code is for ("znver4", "sapphirerapids"). Empty: the machine's
    own, filled in by the worker (``kernel.for_host``), which loads LLVM anyway; without it LLVM
    emits baseline x86-64 code (no AVX2, no AVX-512), 3x slower on the development machine."""
    vector_registers: int = 0
    vector_bytes: int = 0
    """The CPU's vector registers and the bytes of each (``cpu_vectors``), which bound a register
    tile that LLVM keeps whole in registers; 0: unknown, no such bound."""

    def tvm_target(self) -> dict[str, Any]:
        """The target as the dict ``tvm.target.Target`` takes (option strings are rejected in 0.27)."""
        if self.kind == "llvm":
            return {"kind": "llvm", "num-cores": cpu_threads(), **({"mcpu": self.mcpu} if self.mcpu else {}),
                    **LLVM_FAST_MATH}
        return {"kind": "cuda", "arch": self.arch, "max_threads_per_block": self.max_threads_per_block,
                "max_num_threads": self.max_threads_per_block,
                "max_shared_memory_per_block": self.max_shared_memory_per_block, "thread_warp_size": 32}

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def shared_memory_limit(self) -> int:
        """The most shared memory a block of a kernel using dynamic shared memory may have."""
        return max(self.max_shared_memory_optin, self.max_shared_memory_per_block)

    @property
    def compute_capability(self) -> int:
        """90 for sm_90a, 80 for sm_80; 0 for the CPU or an arch string that names none."""
        found = CUDA_ARCH.match(self.arch)
        return int(found.group(1)) if found else 0

    @property
    def arch_name(self) -> str:
        """What the kernel was built for: the CUDA arch or the CPU (empty until known)."""
        return self.arch if self.kind == "cuda" else self.mcpu

    @staticmethod
    def from_json(data: dict[str, Any]) -> Target:
        return Target(**data)


def cpu_threads() -> int:
    """The cores this process may run on (its affinity, as NNI, taskset or a container set it).

    TVM's CPU runtime starts half of ``hardware_concurrency`` threads unless ``TVM_NUM_THREADS``
    says otherwise, on the guess that x86 cores are hyper-threaded: on a machine whose cores are
    not (cloud vCPUs, a 2-core VM), every parallel kernel ran on half the cores. ``kernel``
    sets ``TVM_NUM_THREADS`` from this before TVM starts its threads, where the user has not."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def import_tvm() -> Any:
    """TVM, its CPU thread pool sized by ``cpu_threads`` first (a user's own TVM_NUM_THREADS is
    kept): every module that loads TVM does so through this."""
    os.environ.setdefault("TVM_NUM_THREADS", str(cpu_threads()))
    import tvm

    return tvm


@contextlib.contextmanager
def off_pinned_cores() -> Iterator[None]:
    """The calling thread kept, within the block, off the cores another thread of this process is
    pinned to (Linux; elsewhere, or where that would leave it no core, nothing changes).

    TVM's CPU runtime pins each worker thread of its pool to a core of its own and leaves the
    thread that calls a kernel, which does the first share of the work, free to run anywhere. A
    caller that sleeps between calls (``anchor.compare``'s pauses) was woken on a pinned worker's
    core for many windows running, and the kernel ran at half speed on the 2-core machine while
    the library it was set against did not: a ratio of 0.6 where the kernel was 1.2x OpenBLAS,
    its rounds agreeing (docs/decisions.md)."""
    try:
        allowed = os.sched_getaffinity(0)
        me = threading.get_native_id()
        pinned: set[int] = set()
        for task in map(int, os.listdir("/proc/self/task")):
            if task == me:
                continue
            try:
                cores = os.sched_getaffinity(task)
            except OSError:  # the thread ended meanwhile
                continue
            if len(cores) == 1:
                pinned |= cores
    except (AttributeError, OSError):  # not Linux
        yield
        return
    free = allowed - pinned
    if not free or free == allowed:
        yield
        return
    os.sched_setaffinity(0, free)
    try:
        yield
    finally:
        os.sched_setaffinity(0, allowed)


def cpu() -> Target:
    return Target("llvm", **cpu_vectors())


VECTOR_SETS = {"avx512f": (32, 64), "avx": (16, 32), "sse2": (16, 16), "asimd": (32, 16)}
"""The vector registers and the bytes of each that an instruction set gives, by the flag Linux
reports for it in /proc/cpuinfo, widest first: AVX-512; AVX or AVX2; SSE; Arm's Advanced SIMD."""


def vectors_of(flag: str) -> dict[str, int]:
    """The ``Target`` fields of the instruction set /proc/cpuinfo reports as ``flag``."""
    registers, size = VECTOR_SETS[flag]
    return {"vector_registers": registers, "vector_bytes": size}


@functools.cache
def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str] | None:
    """The instruction sets the kernel reports for this machine's CPU (/proc/cpuinfo's flags or,
    on Arm, Features), or None where it reports none (not Linux)."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as info:
            return next((frozenset(line.split(":", 1)[1].split()) for line in info
                         if line.split(":", 1)[0].strip() in ("flags", "Features")), None)
    except OSError:
        return None


def cpu_vectors(cpuinfo: str = "/proc/cpuinfo") -> dict[str, int]:
    """This machine's vector registers and their bytes, from the widest instruction set of
    ``VECTOR_SETS`` the kernel reports (LLVM compiles for the machine's own CPU); none where it
    reports none of them (not Linux), which sets no bound."""
    features = cpu_flags(cpuinfo) or frozenset()
    return next((vectors_of(flag) for flag in VECTOR_SETS if flag in features), {})


INSTRUCTION_FLAGS = {"sse4.1": "sse4_1", "sse4.2": "sse4_2", "ssse3": "ssse3", "popcnt": "popcnt", "avx": "avx",
                     "avx2": "avx2", "fma": "fma", "f16c": "f16c", "bmi": "bmi1", "bmi2": "bmi2",
                     "avx512f": "avx512f", "avx512vl": "avx512vl", "avx512bw": "avx512bw", "avx512dq": "avx512dq",
                     "avx512cd": "avx512cd"}
"""The x86 instruction sets LLVM draws on for float kernels, by LLVM's feature name, with the
flag Linux reports for each: a library built for a CPU with one of them stops with an illegal
instruction on a CPU without it."""


def h100() -> Target:
    """An H100's limits, to build for where none is visible (nvcc only)."""
    return Target("cuda", device="cuda-none", has_device=False, **H100)


def cuda() -> Target:
    """The visible GPU's target, or an H100's limits (build only) when none is visible."""
    found = _visible_gpu()
    if found is None:
        return h100()
    return Target("cuda", device=f"cuda-{_physical_id()}", **found)


def cubin_runs_on(built: str, gpu: str) -> bool:
    """Whether code built for CUDA arch ``built`` ("sm_90a") runs on a GPU of arch ``gpu``: a
    cubin runs on its own major version at its minor or later, an arch-specific one ("a") on
    its own arch alone."""
    made, there = CUDA_ARCH.fullmatch(built), CUDA_ARCH.fullmatch(gpu)
    if made is None or there is None:
        return built == gpu
    version, on = int(made.group(1)), int(there.group(1))
    if made.group(2):
        return version == on
    return version // 10 == on // 10 and version <= on


def resolve(name: str) -> Target:
    """``auto``, ``cpu``/``llvm`` or ``cuda``."""
    if name == "auto":
        return cuda() if _visible_gpu() is not None else cpu()
    if name in ("cpu", "llvm"):
        return cpu()
    if name == "cuda":
        return cuda()
    raise ValueError(f"target must be auto, cpu or cuda, got {name!r}")


def _physical_id() -> str:
    """The GPU's id as NNI names it (first of CUDA_VISIBLE_DEVICES), so trials on different GPUs
    take different locks and trials on the same GPU share one."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return visible or "0"


@functools.cache
def _visible_gpu() -> dict[str, Any] | None:
    """Limits of CUDA device 0 as the driver reports them, or None without a driver or GPU."""
    try:
        cuda_lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    count = ctypes.c_int(0)
    if cuda_lib.cuInit(0) != 0 or cuda_lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
        return None
    device = ctypes.c_int(0)
    if cuda_lib.cuDeviceGet(ctypes.byref(device), 0) != 0:
        return None

    def attribute(code: int) -> int:
        value = ctypes.c_int(0)
        cuda_lib.cuDeviceGetAttribute(ctypes.byref(value), code, device)
        return value.value

    # CU_DEVICE_ATTRIBUTE_: 1 MAX_THREADS_PER_BLOCK, 8 MAX_SHARED_MEMORY_PER_BLOCK, 75/76 CC major/minor,
    # 97 MAX_SHARED_MEMORY_PER_BLOCK_OPTIN.
    major, minor = attribute(75), attribute(76)
    suffix = "a" if (major, minor) == (9, 0) else ""
    return {"arch": f"sm_{major}{minor}{suffix}", "max_threads_per_block": attribute(1),
            "max_shared_memory_per_block": attribute(8), "max_shared_memory_optin": attribute(97)}
