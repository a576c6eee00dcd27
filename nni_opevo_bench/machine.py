"""The one line a results page names its machine by: the CPU's model and its widest vector
extension (one model name comes with AVX2 or AVX-512, and CPU kernels' figures differ between
them), the cores this process may run on, and Python's version; and, beside it, the target whose
limits a run's kernels were checked under, as every ``run.json`` records them."""
from __future__ import annotations

import platform
from typing import Any

from trial_code import targets
from trial_code.targets import Target

VECTOR_EXTENSIONS = (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX"), ("sve", "SVE"), ("asimd", "NEON"),
                     ("neon", "NEON"))
"""``/proc/cpuinfo`` flags, widest first, and the names a reader knows them by."""


def vector_extension(flags: set[str]) -> str:
    """The widest vector extension among a CPU's flags ('' when none is known)."""
    return next((name for flag, name in VECTOR_EXTENSIONS if flag in flags), "")


def describe() -> str:
    cpu, flags = "", set()
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and not cpu:
                    cpu = value.strip()
                elif key.strip() in ("flags", "Features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    cpu = cpu or platform.processor() or platform.machine()
    extension = vector_extension(flags)
    named = f"{cpu} ({extension})" if extension else cpu
    return f"{named}, {targets.cpu_threads()} cores, Python {platform.python_version()}"


def recorded(target: Target | None) -> dict[str, Any]:
    """A run's record of where it ran: the machine in words and, for a run of kernels, its target
    with the CPU LLVM builds for named (``nni-opevo recheck`` reads the limits back from it)."""
    if target is None:
        return {"machine": describe()}
    from trial_code import kernel  # loads TVM, which only a run of kernels needs

    return {"machine": describe(), "target": kernel.for_host(target).to_json()}
