"""Trial outcome categories: TVM's measurement error codes as tabulated by NoSE (Gatopoulos
et al., table I), so tuner benchmarks can count failures by kind and their cost."""
from __future__ import annotations

from enum import IntEnum


class Status(IntEnum):
    NO_ERROR = 0  # valid kernel, timed
    INSTANTIATION_ERROR = 1  # the configuration cannot instantiate the template (static checks, schedule)
    COMPILE_HOST = 2  # TVM lowering / host code generation failed
    COMPILE_DEVICE = 3  # CUDA compilation (nvcc/NVRTC) or loading onto the device failed
    RUNTIME_DEVICE = 4  # the kernel failed or crashed while running
    WRONG_ANSWER = 5  # the output differs from the float64 reference
    BUILD_TIMEOUT = 6  # building exceeded its time limit
    RUN_TIMEOUT = 7  # running exceeded its time limit
    UNKNOWN_ERROR = 8  # anything else (the worker could not start, died without saying why, ...)
    DEVICE_BUSY = 9  # one other process kept the device's measurement lock for the whole --lock-timeout (ours, not TVM's)
