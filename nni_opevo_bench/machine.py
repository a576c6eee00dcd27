"""The one line a results page names its machine by: the CPU's model, the cores this process may
run on, and Python's version."""
from __future__ import annotations

import platform

from trial_code import targets


def describe() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            cpu = next(line.split(":", 1)[1].strip() for line in handle if line.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor() or platform.machine()
    return f"{cpu}, {targets.cpu_threads()} cores, Python {platform.python_version()}"
