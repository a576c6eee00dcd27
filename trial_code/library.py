"""A tuned kernel as a program uses it: load the compiled library and call it on NumPy arrays.

    from trial_code import library, workloads
    matmul = library.load("export/best.so", workloads.lookup("MM_small"), "cpu")
    c = matmul(a, b)          # NumPy arrays in the workload's shapes; the product comes back
    matmul(x, y, out=z)       # PyTorch (or any DLPack) tensors on the kernel's device, used in place

``nni-opevo export`` (and the launcher) write the winner as ``best.so`` next to ``best.json``
(``executable.export_library``: the host code and, for CUDA, the device module in one file);
``nni_opevo_tools.best.load_kernel(folder)`` reads both and calls ``load``. A network's export
writes the whole network, built with its tuned kernels, as ``network.so``, which
``load_network`` runs: it takes the image, then every weight and bias
(``networks.graph.input_shapes`` gives their shapes). A library runs on the kind of device it
was built for, and on the CPU only on one that has the instructions of the CPU it was built for
(``best.json``'s target names it); ``load`` refuses one this machine cannot run.
"""
from __future__ import annotations

import hashlib
import os
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import cpu_pool, targets
from .indices import index_ranges
from .kernel import tvm  # through kernel: TVM's CPU threads sized to this process's cores first
from .measure import Signature, signature
from .templates import for_workload
from .workloads import Workload

_CPU, _CUDA = 1, 2
"""DLPack's device types (``DLDeviceType``) of the kernels' devices."""

ALIGNMENT = 64
"""Bytes a tensor passed without a copy must be aligned to, as ``tvm.runtime.from_dlpack``
requires: TVM declares its kernels' buffers so aligned and its CPU code reads them with aligned
vector loads, so a misaligned one kills the process instead of raising."""


def _is_tensor(given: Any) -> bool:
    """Whether ``given`` is another library's tensor (PyTorch, CuPy, TVM...), which a kernel reads
    and writes in place through DLPack, rather than what NumPy takes."""
    return hasattr(given, "__dlpack_device__") and not isinstance(given, np.ndarray)


def _library_result(like: Any, result: Any) -> Any:
    """``result`` (a TVM tensor) as a tensor of ``like``'s library, through the ``from_dlpack``
    its top module offers (``torch.from_dlpack``, ``cupy.from_dlpack``), or as is without one."""
    module = sys.modules.get(type(like).__module__.partition(".")[0])
    convert = getattr(module, "from_dlpack", None)
    return result if convert is None else convert(result)


@dataclass
class Kernel:
    workload: Workload
    function: Any
    device: Any
    signature: Signature
    path: str
    """The library it was loaded from (absolute, so a process that unpickles the kernel finds it)."""
    built_for: str = ""
    """The CUDA arch or CPU it was built for, where known (``load`` checks it against this machine)."""

    def __reduce__(self) -> tuple[Callable[..., Kernel], tuple[str, Workload, str, str]]:
        """Pickled as what ``load`` takes, and loaded again (and checked) where it is unpickled:
        a process pool's worker (``multiprocessing``'s spawn and forkserver, the default on macOS
        and, from Python 3.14, on Linux) receives a kernel so. TVM's functions do not pickle."""
        return load, (self.path, self.workload, "cpu" if self._on_cpu else "cuda", self.built_for)

    def __call__(self, *inputs: Any, out: Any = None) -> Any:
        """The workload's output for ``inputs``, in the workload's shapes.

        NumPy arrays (or what NumPy takes) are converted to the workload's types and copied where
        the kernel cannot read them as they are (on a GPU, or not contiguous, aligned and of the
        type); the result is a new NumPy array, or ``out``. Tensors of a library that speaks
        DLPack (PyTorch, CuPy, TVM) are read and written in place: each must be on the kernel's
        device, of the workload's type, contiguous and ``ALIGNMENT``-byte aligned; the result is
        a new tensor of the first one's library, or ``out`` (then a tensor too), and on a GPU the
        kernel runs on that library's current stream without the host waiting for it."""
        tensors = any(_is_tensor(x) for x in (*inputs, out))
        arguments, views = self._inputs(inputs)
        written, in_place = self._output(out, tensors, views)
        _run(self.function, self._on_cpu, *arguments, out if tensors and out is not None else written)
        if tensors:
            return out if out is not None else _library_result(next(x for x in inputs if _is_tensor(x)), written)
        self.device.sync()
        if out is None:
            return np.from_dlpack(written) if self._on_cpu else written.numpy()
        if not in_place:
            out[...] = written.numpy()
        return out

    def caller(self, *inputs: np.ndarray) -> Callable[[], Any]:
        """A call of the kernel on ``inputs`` made ready once, for timing it (``anchor.compare``);
        ``self.device.sync`` waits for it."""
        arguments, _ = self._inputs(inputs)
        written, _ = self._output(None, False, [])
        return lambda: _run(self.function, self._on_cpu, *arguments, written)

    @property
    def _on_cpu(self) -> bool:
        return self.device.dlpack_device_type() == _CPU

    def _inputs(self, inputs: tuple[Any, ...]) -> tuple[list[Any], list[Any]]:
        """The arguments the kernel is called with for ``inputs``, and each one's TVM tensor."""
        if len(inputs) != len(self.signature.inputs):
            raise ValueError(f"{self.workload.name} takes {len(self.signature.inputs)} arrays, got {len(inputs)}")
        arguments, views = [], []
        for position, given in enumerate(inputs):
            argument, view = self._input(position, given)
            arguments.append(argument)
            views.append(view)
        return arguments, views

    def _input(self, position: int, given: Any) -> tuple[Any, Any]:
        """Input ``position`` as the kernel takes it (a tensor as given, for its library's stream;
        a NumPy array as a TVM tensor), and its TVM tensor, after its shape and, for an input
        that indexes a tensor, its values are checked (an index outside its tensor would read
        memory beyond it, not raise)."""
        shape, dtype = self.signature.inputs[position]
        what = f"input {position} of {self.workload.name}"
        if tuple(np.shape(given)) != shape:
            raise ValueError(f"{what} must have shape {shape}, got {tuple(np.shape(given))}")
        ranges = self.signature.ranges[position]
        if _is_tensor(given):
            view = _view(what, given, dtype, self.device)
            host = np.from_dlpack(given, device="cpu") if ranges else None
        else:
            host = _keeping_values(what, given, dtype)
        for part in ranges:
            try:
                part.check(host)
            except ValueError as e:
                raise ValueError(f"{self.workload.name}: {e}") from None
        if _is_tensor(given):
            return given, view
        view = _from_host(host, dtype, self.device)
        return view, view

    def _output(self, out: Any, tensors: bool, views: list[Any]) -> tuple[Any, bool]:
        """The TVM tensor the kernel writes, and whether it is ``out``'s memory (else a new
        tensor, copied into ``out`` after the call), after ``out`` is checked. A NumPy ``out``
        that is also an input is written after the call, as NumPy's own ``out`` is; a tensor
        ``out`` that shares memory with an input is refused, since it is written in place."""
        shape, dtype = self.signature.output
        what = f"out of {self.workload.name}"

        def new() -> tuple[Any, bool]:
            return tvm.runtime.empty(shape, str(dtype), self.device), False

        if out is None:
            return new()
        if tuple(np.shape(out)) != shape:
            raise ValueError(f"{what} must have shape {shape}, got {tuple(np.shape(out))}")
        if tensors != _is_tensor(out):
            raise ValueError(f"{what} must be a tensor where an input is one, and a NumPy array where they are "
                             f"NumPy arrays, got {type(out).__name__}")
        if not tensors and (problem := _not_writable_as(out, dtype)):
            raise ValueError(f"{what} must be a writable NumPy array of {dtype}, got {problem}")
        if not tensors and not (self._on_cpu and _in_place(out, dtype)):
            return new()
        written = _view(what, out, dtype, self.device) if tensors else tvm.runtime.from_dlpack(out)
        shared = next((position for position, view in enumerate(views) if _overlap(written, view)), None)
        if shared is None:
            return written, True
        if not tensors:
            return new()
        raise ValueError(f"{what} shares memory with input {shared}: the kernel would overwrite what it still reads")


def _not_writable_as(out: Any, dtype: np.dtype) -> str:
    """What keeps a NumPy ``out`` from receiving a result of ``dtype`` ("" when nothing does): the
    caller is told what it passed, a big-endian float32 (``>f4``) included, which prints alike."""
    if not isinstance(out, np.ndarray):
        return type(out).__name__
    if out.dtype != dtype:
        swapped = out.dtype.newbyteorder() == dtype
        return f"{out.dtype.str} (a {out.dtype.name} of the other byte order)" if swapped else str(out.dtype)
    return "" if out.flags.writeable else "a read-only array"


def _run(function: Any, on_cpu: bool, *arguments: Any) -> Any:
    """A library's ``function`` called on ``arguments``; on the CPU, on a thread whose TVM pool
    has its workers in a process forked after this thread ran kernels (``cpu_pool``)."""
    return cpu_pool.run(function, *arguments) if on_cpu else function(*arguments)


def _view(what: str, given: Any, dtype: np.dtype, device: Any) -> Any:
    """The TVM tensor over ``given``'s memory, a tensor of another library, or a ValueError
    naming the rule it breaks."""
    kind, index = (int(v) for v in given.__dlpack_device__())
    if (kind, index) != (device.dlpack_device_type(), device.index):
        where = tvm.runtime.Device(kind, index) if kind in (_CPU, _CUDA) else f"DLPack device {kind}:{index}"
        raise ValueError(f"{what} is on {where}, the kernel runs on {device}")
    try:
        view = tvm.runtime.from_dlpack(given)
    except (BufferError, RuntimeError, TypeError, ValueError) as e:
        raise ValueError(f"{what} must be contiguous and start at a multiple of {ALIGNMENT} bytes to be "
                         f"read in place ({str(e).strip()}): pass a copy") from None
    if str(view.dtype) != str(dtype):
        raise ValueError(f"{what} must be {dtype}, got {view.dtype}")
    return view


def _keeping_values(what: str, given: Any, dtype: np.dtype) -> np.ndarray:
    """``given`` as a NumPy array, unless its conversion to ``dtype`` would change its values by
    more than a float's narrowing does: then a ValueError naming ``what`` and the rule, NumPy's
    same-kind casting (a wider float narrowed, an integer or a bool taken as a float; no complex
    number as a real, no float as an integer), an integer narrowed only within the narrower
    type's range, where NumPy would wrap it around, and no masked value, which the array's data
    holds as any other. (ml_dtypes lets a complex number become a bfloat16 by same-kind casting;
    it is refused here too.)"""
    if np.ma.is_masked(given):
        raise ValueError(f"{what} has masked values, which the kernel would read as any other: pass its filled() "
                         "array or its data")
    host = np.asarray(given)
    if not np.can_cast(host.dtype, dtype, "same_kind") or (host.dtype.kind == "c" and dtype.kind != "c"):
        raise ValueError(f"{what} must be {dtype} or convert to it by NumPy's same-kind casting (no complex number as "
                         f"a real, no float as an integer), got {host.dtype}: convert it yourself")
    if dtype.kind in "iu" and host.size and not np.can_cast(host.dtype, dtype, "safe"):
        limits = np.iinfo(dtype)
        outside = host[(host < limits.min) | (host > limits.max)]
        if outside.size:
            raise ValueError(f"{what} holds {outside[0]}, outside {dtype}'s {limits.min}..{limits.max}")
    return host


def _from_host(host: np.ndarray, dtype: np.dtype, device: Any) -> Any:
    """``host`` as a TVM tensor of ``dtype`` on ``device``: its own memory where the kernel can
    read it as it lies, else a copy."""
    if device.dlpack_device_type() == _CPU and _in_place(host, dtype):
        return tvm.runtime.from_dlpack(host)
    return tvm.runtime.tensor(np.asarray(host, dtype=dtype, order="C"), device)


def _in_place(array: np.ndarray, dtype: np.dtype) -> bool:
    """Whether the kernel can read and write ``array``'s memory as it is (DLPack cannot pass a
    read-only array)."""
    return (array.dtype == dtype and array.flags.c_contiguous and array.flags.writeable
            and array.ctypes.data % ALIGNMENT == 0)


def _overlap(a: Any, b: Any) -> bool:
    """Whether TVM tensors ``a`` and ``b`` share memory on one device."""
    def span(t: Any) -> tuple[int, int]:
        return t.data_ptr(), t.data_ptr() + t.numel() * np.dtype(str(t.dtype)).itemsize

    (a_start, a_end), (b_start, b_end) = span(a), span(b)
    return a.device == b.device and a_start < b_end and b_start < a_end


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


def arguments(workload: Workload) -> list[dict[str, Any]]:
    """How a program in any language calls a library's ``main``: its DLTensor arguments in order,
    each input and then the output, by name, shape and type (best.json's ``arguments``), and for an
    input that indexes a tensor the positions it may hold (``positions``: the range, the axis it
    indexes, and the part of the input it bounds, ``where``: per axis a position or null for all;
    empty for the whole input), outside of which the kernel reads past the tensor."""
    tensors = for_workload(workload).compute(workload)
    ranges = index_ranges(tensors)
    described = [{"name": t.op.name, "shape": [int(d) for d in t.shape], "dtype": str(t.dtype)} for t in tensors]
    for entry, bound in zip(described, ranges):
        if bound:
            entry["positions"] = [{"low": r.low, "high": r.high, "indexes": r.indexes, "where": list(r.where)}
                                  for r in bound]
    return described


def computation(workload: Workload) -> str:
    """A digest of ``workload``'s TE computation as TVM writes it out (``te.create_prim_func``):
    best.json keeps the exported kernel's, and ``load_kernel`` refuses a library whose operator
    computes otherwise now (a user's operator edited since), which it would run unawares."""
    text = tvm.te.create_prim_func(for_workload(workload).compute(workload)).script()
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _device(name: str) -> Any:
    """TVM's device 0 of kind ``name`` ("cpu" or "cuda")."""
    return tvm.cuda(0) if name == "cuda" else tvm.cpu(0)


def load(path: str, workload: Workload, device: str = "cpu", built_for: str = "") -> Kernel:
    """The kernel of the library at ``path`` for ``workload``, on ``device`` ("cpu" or "cuda");
    ``built_for``, the CUDA arch or CPU it was built for where known (``Target.arch_name``), is
    checked against this machine's."""
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be cpu or cuda, got {device!r}")
    check_runs_here(path, device, built_for)
    module = tvm.runtime.load_module(path)
    return Kernel(workload, module["main"], _device(device), signature(workload), os.path.abspath(path), built_for)


def check_runs_here(path: str, device: str, built_for: str) -> None:
    """ValueError naming ``path`` unless it is a whole library (``check_library``) that this
    machine's ``device`` can run, as far as ``built_for`` (``Target.arch_name``) tells."""
    check_library(path)
    if device == "cuda":
        check_gpu(path, built_for)
    else:
        check_cpu(path, built_for)


def check_gpu(path: str, arch: str = "") -> None:
    """ValueError naming ``path`` unless a GPU is visible that runs code built for ``arch``
    (a cubin, as TVM's NVRTC builds it; ``targets.cubin_runs_on``): without one, loading the
    library fails deep in TVM, and a GPU of another arch fails at the first call."""
    gpu = targets.cuda()
    if not gpu.has_device:
        raise ValueError(f"{path} is loaded to run on a GPU and none is visible here: load it where one is")
    if arch and not targets.cubin_runs_on(arch, gpu.arch):
        raise ValueError(f"{path} was built for {arch}, which this GPU ({gpu.arch}) cannot run: tune it again here")


def check_cpu(path: str, mcpu: str) -> None:
    """ValueError naming ``path`` where the CPU it was built for (LLVM's name) has an instruction
    set of ``targets.INSTRUCTION_FLAGS`` that this one lacks: its code would stop the process with
    an illegal instruction at the first call. Nothing is checked where either is unknown (LLVM
    knows no CPU of that name, or the OS reports no instruction sets)."""
    flags, needs = targets.cpu_flags(), cpu_instructions(mcpu)
    if flags is None or needs is None:
        return
    missing = sorted(feature for feature, flag in needs.items() if flag not in flags)
    if missing:
        raise ValueError(f"{path} was built for {mcpu}, whose {', '.join(missing)} this CPU lacks (its code would "
                         "stop with an illegal instruction): tune it again here")


def cpu_instructions(mcpu: str) -> dict[str, str] | None:
    """The instruction sets of ``targets.INSTRUCTION_FLAGS`` that code built for the CPU ``mcpu``
    (LLVM's name) may use, LLVM's feature name -> the flag Linux reports for it (best.json's
    ``instructions`` are the flags, for a program in another language to check); None where
    either is unknown (no name, or one LLVM does not know)."""
    llvm = tvm.target.codegen
    if not mcpu or not llvm.llvm_is_valid_cpu(mcpu, llvm.llvm_get_system_triple()):
        return None
    needs = {str(f) for f in llvm.llvm_get_cpu_features(tvm.target.Target({"kind": "llvm", "mcpu": mcpu}))}
    return {feature: flag for feature, flag in targets.INSTRUCTION_FLAGS.items() if feature in needs}


def instruction_flags(target: dict[str, Any]) -> list[str] | None:
    """The /proc/cpuinfo flags a CPU must report to run a library built for ``target`` (as an
    export writes it: ``Target.to_json``), or None where that is not known (a GPU's, or an
    unnamed CPU)."""
    needs = cpu_instructions(target.get("mcpu") or "") if target.get("kind") == "llvm" else None
    return None if needs is None else sorted(needs.values())


@dataclass
class Network:
    """A whole network's library, loaded (``load_network``): called on the image, then the weights
    and biases, it returns the network's output."""

    path: str
    device: str
    built_for: str
    machine: Any

    def __call__(self, *arrays: Any) -> Any:
        """As a kernel's call: NumPy arrays are converted to float32 and copied where they cannot
        be read as they lie, and give a NumPy array; tensors of another library are read in place
        under the same rules, and give a tensor of the first one's library (so weights kept on the
        device are not copied at every call)."""
        where, float32 = _device(self.device), np.dtype(np.float32)
        tensors = [a for a in arrays if _is_tensor(a)]
        for position, given in enumerate(arrays):
            if _is_tensor(given):
                _view(f"array {position} of the network", given, float32, where)
        given = [a if _is_tensor(a) else
                 _from_host(_keeping_values(f"array {position} of the network", a, float32), float32, where)
                 for position, a in enumerate(arrays)]
        result = _run(self.machine["main"], self.device == "cpu", *given)
        return _library_result(tensors[0], result) if tensors else result.numpy()

    def __reduce__(self) -> tuple[Callable[..., Network], tuple[str, str, str]]:
        """Pickled as what ``load_network`` takes, and loaded again where it is unpickled, as a
        ``Kernel`` is."""
        return load_network, (self.path, self.device, self.built_for)


def load_network(path: str, device: str = "cpu", built_for: str = "") -> Network:
    """The whole network of the library at ``path`` on ``device`` ("cpu" or "cuda"); ``built_for``
    is checked as ``load`` checks it."""
    from tvm import relax

    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be cpu or cuda, got {device!r}")
    check_runs_here(path, device, built_for)
    machine = relax.VirtualMachine(tvm.runtime.load_module(path), _device(device))
    return Network(os.path.abspath(path), device, built_for, machine)
