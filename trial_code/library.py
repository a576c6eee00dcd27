"""A tuned kernel as a program uses it: load the compiled library and call it on NumPy arrays.

    from trial_code import library, workloads
    matmul = library.load("export/best.so", workloads.lookup("MM_small"), "cpu")
    c = matmul(a, b)          # NumPy arrays in the workload's layout and types; the product comes back

``nni-opevo export`` (and the launcher) write the winner as ``best.so`` next to ``best.json``
(``executable.export_library``: the host code and, for CUDA, the device module in one file);
``nni_opevo_tools.best.load_kernel(folder)`` reads both and calls ``load``. A network's export
writes the whole network, built with its tuned kernels, as ``network.so``, which
``load_network`` runs: it takes the image, then every weight and bias
(``networks.graph.input_shapes`` gives their shapes). A library runs on the kind of device it
was built for, and on the CPU only on one that has the instructions of the CPU it was built for
(``best.json``'s target names it).
"""
from __future__ import annotations

import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .kernel import tvm  # through kernel: TVM's CPU threads sized to this process's cores first
from .measure import Signature, signature
from .workloads import Workload


@dataclass
class Kernel:
    workload: Workload
    function: Any
    device: Any
    signature: Signature

    def __call__(self, *inputs: np.ndarray) -> np.ndarray:
        """The workload's output for ``inputs`` (the workload's shapes, converted to its types), as a new array."""
        arguments = self._arguments(inputs)
        self.function(*arguments)
        self.device.sync()
        return arguments[-1].numpy()

    def caller(self, *inputs: np.ndarray) -> Callable[[], Any]:
        """A call of the kernel on device copies of ``inputs`` made once, for timing it
        (``anchor.compare``); ``self.device.sync`` waits for it."""
        arguments = self._arguments(inputs)
        return lambda: self.function(*arguments)

    def _arguments(self, inputs: tuple[np.ndarray, ...]) -> list[Any]:
        expected = self.signature.inputs
        if len(inputs) != len(expected):
            raise ValueError(f"{self.workload.name} takes {len(expected)} arrays, got {len(inputs)}")
        for position, (given, (shape, _), positions) in enumerate(zip(inputs, expected, self.signature.ranges)):
            if tuple(np.shape(given)) != shape:
                raise ValueError(f"input {position} of {self.workload.name} must have shape {shape}, "
                                 f"got {tuple(np.shape(given))}")
            for part in positions:  # an index outside its tensor would read memory beyond it, not raise
                try:
                    part.check(np.asarray(given))
                except ValueError as e:
                    raise ValueError(f"{self.workload.name}: {e}") from None
        arguments = [tvm.runtime.tensor(np.ascontiguousarray(x, dtype=dtype), self.device)
                     for x, (_, dtype) in zip(inputs, expected)]
        shape, dtype = self.signature.output
        return arguments + [tvm.runtime.empty(shape, str(dtype), self.device)]


def check_library(path: str) -> None:
    """ValueError naming ``path`` unless it is a whole 64-bit ELF shared library: mapping a file
    cut short (an interrupted copy) kills the process with SIGBUS instead of raising, so the
    header's program and section tables must lie inside the file before it is loaded."""
    try:
        with open(path, "rb") as handle:
            header = handle.read(64)
            size = os.fstat(handle.fileno()).st_size
    except OSError as e:
        raise ValueError(f"cannot read the kernel library {path}: {e.strerror or e}") from None
    if len(header) < 64 or header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
        raise ValueError(f"{path} is not a 64-bit little-endian ELF library ({size} bytes): re-export the kernel")
    phoff, shoff = struct.unpack_from("<QQ", header, 32)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", header, 54)
    with open(path, "rb") as handle:
        handle.seek(phoff)
        tables = handle.read(phentsize * phnum)
    ends = [phoff + phentsize * phnum, shoff + shentsize * shnum]
    for index in range(phnum if len(tables) == phentsize * phnum else 0):
        offset, _, _, filesz = struct.unpack_from("<QQQQ", tables, index * phentsize + 8)
        ends.append(offset + filesz)
    if max(ends) > size or len(tables) != phentsize * phnum:
        raise ValueError(f"{path} is cut short ({size} bytes, its headers reach {max(ends)}): re-export the kernel")


def load(path: str, workload: Workload, device: str = "cpu") -> Kernel:
    """The kernel of the library at ``path`` for ``workload``, on ``device`` ("cpu" or "cuda")."""
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be cpu or cuda, got {device!r}")
    check_library(path)
    module = tvm.runtime.load_module(path)
    return Kernel(workload, module["main"], tvm.cuda(0) if device == "cuda" else tvm.cpu(0), signature(workload))


def load_network(path: str, device: str = "cpu") -> Callable[..., np.ndarray]:
    """The whole network of the library at ``path``: a callable on NumPy arrays (the image, then
    the weights and biases) that returns the network's output."""
    from tvm import relax

    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be cpu or cuda, got {device!r}")
    where = tvm.cuda(0) if device == "cuda" else tvm.cpu(0)
    check_library(path)
    machine = relax.VirtualMachine(tvm.runtime.load_module(path), where)

    def run(*arrays: np.ndarray) -> np.ndarray:
        tensors = [tvm.runtime.tensor(np.ascontiguousarray(a, dtype=np.float32), where) for a in arrays]
        return machine["main"](*tensors).numpy()

    return run
