"""Registers and local memory of each kernel in a cubin, as ptxas recorded them in it.

A build-only check of a CUDA kernel must read the binary that TVM's own compile makes (fast math,
ptxas's register-usage level: ``kernel.compile_cuda_source``): a plain ``nvcc -Xptxas -v`` of the same
source gives a different register count for about a third of the GEMM space's kernels, and local
memory to some that TVM's compile keeps in registers. ptxas writes what ``-v`` would print into
the cubin's ``.nv.info`` section, one attribute a kernel (what ``cuobjdump -res-usage`` shows,
a tool the CUDA toolkit does not always install), so it is read from there, with pyelftools.
"""
from __future__ import annotations

import io
import struct
from dataclasses import dataclass

SIZED = 0x04
"""An attribute's format byte when a 16-bit size and that many bytes follow; any other format
carries its value in the 16 bits after the attribute byte."""
REGISTER_COUNT = 0x2F
FRAME_SIZE = 0x11
"""``EIATTR_REGCOUNT`` and ``EIATTR_FRAME_SIZE``: (symbol index, value), 32 bits each. The frame
is the thread's local memory: the spill slots and any array indexed at run time."""


@dataclass(frozen=True)
class Resources:
    registers: int
    local_bytes: int


def _attributes(data: bytes) -> list[tuple[int, bytes]]:
    """(attribute, value) of each entry of an ``.nv.info`` section."""
    found, at = [], 0
    while at + 4 <= len(data):
        form, attribute, size = struct.unpack_from("<BBH", data, at)
        if form == SIZED:
            found.append((attribute, data[at + 4:at + 4 + size]))
            at += 4 + size
        else:
            found.append((attribute, data[at + 2:at + 4]))
            at += 4
    return found


def resources(cubin: bytes) -> dict[str, Resources]:
    """Each kernel's registers a thread and bytes of local memory a thread, by kernel name."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        elf = ELFFile(io.BytesIO(cubin))
    except ELFError as error:
        raise ValueError(f"not a cubin: {error}") from None
    symbols = elf.get_section_by_name(".symtab")
    info = elf.get_section_by_name(".nv.info")
    if symbols is None or info is None:
        raise ValueError("not a cubin: no .symtab or .nv.info section")
    values: dict[int, dict[int, int]] = {}
    for attribute, value in _attributes(info.data()):
        if attribute in (REGISTER_COUNT, FRAME_SIZE):
            symbol, number = struct.unpack("<II", value)
            values.setdefault(symbol, {})[attribute] = number
    return {symbols.get_symbol(symbol).name: Resources(found.get(REGISTER_COUNT, 0), found.get(FRAME_SIZE, 0))
            for symbol, found in values.items() if REGISTER_COUNT in found}
