"""A tuned kernel called as a program calls it (``trial_code.library.Kernel``): on NumPy arrays,
copied where the kernel cannot read them as they are, and on another library's tensors, read
and written in place or refused in one line naming the input and the rule."""
from __future__ import annotations

import multiprocessing
import os
import pickle
import re
import subprocess
import sys
import threading
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from feasible import exported, feasible
from forking import in_a_child

from trial_code import library, targets, workloads
from trial_code.kernel import tvm

CPU = targets.cpu()
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def matmul(tmp_path_factory: pytest.TempPathFactory) -> library.Kernel:
    return exported(workloads.lookup("MM_small"), CPU, str(tmp_path_factory.mktemp("lib") / "k.so"))


def _aligned(array: np.ndarray) -> np.ndarray:
    """A copy of ``array`` at an address the kernel can read in place (a multiple of 64 bytes)."""
    copy = np.from_dlpack(tvm.runtime.empty(array.shape, str(array.dtype), tvm.cpu(0)))
    copy[...] = array
    return copy


def _misaligned(array: np.ndarray) -> np.ndarray:
    """A copy of ``array`` 4 bytes past a multiple of 64."""
    space = np.empty(array.nbytes + 128, np.uint8)
    start = (-space.ctypes.data) % 64 + 4
    copy = space[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
    copy[...] = array
    return copy


@pytest.fixture(scope="module")
def operands() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((256, 256)).astype(np.float32) for _ in range(2))
    return a, b, a.astype(np.float64) @ b


class _OnTheGpu:
    """What a GPU tensor of the MatMul's shape shows before it is read."""

    shape = (256, 256)

    def __dlpack_device__(self) -> tuple[int, int]:
        return 2, 0  # kDLCUDA, device 0


def _close(got: np.ndarray, expected: np.ndarray) -> None:
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-3)


def test_numpy_arrays_of_any_layout_and_type_give_the_product(matmul, operands):
    """Aligned, misaligned, strided, float64 and list inputs give one answer, a new float32 array;
    ``out`` receives it however it is laid out, and may be an input, as NumPy's own ``out``."""
    a, b, product = operands
    for left in (a, _aligned(a), _misaligned(a), np.asfortranarray(a), a.astype(np.float64), a.tolist()):
        got = matmul(left, b)
        assert isinstance(got, np.ndarray) and got.dtype == np.float32
        _close(got, product)
    for out in (np.empty((256, 256), np.float32), _aligned(np.zeros((256, 256), np.float32)),
                _misaligned(np.zeros((256, 256), np.float32)), np.empty((256, 257), np.float32)[:, :256]):
        assert matmul(a, b, out=out) is out
        _close(out, product)
    left = _aligned(a)
    assert matmul(left, _aligned(b), out=left) is left
    _close(left, product)


def test_tensors_of_another_library_are_read_and_written_in_place(matmul, operands):
    """TVM tensors in give a TVM tensor out; ``out`` is written where it lies and returned."""
    a, b, product = operands
    left, right = tvm.runtime.tensor(a), tvm.runtime.tensor(b)
    got = matmul(left, right)
    assert isinstance(got, tvm.runtime.Tensor)
    _close(got.numpy(), product)
    out = tvm.runtime.empty((256, 256), "float32", tvm.cpu(0))
    assert matmul(left, b, out=out) is out  # a NumPy input beside a tensor is copied
    _close(out.numpy(), product)
    assert matmul(a, b, out=out) is out


def test_pytorch_tensors_give_a_pytorch_tensor_sharing_out(matmul, operands):
    """PyTorch's own allocations (64-byte aligned) are read in place; a view that is not is refused."""
    torch = pytest.importorskip("torch")
    a, b, product = operands
    got = matmul(torch.tensor(a), torch.tensor(b))
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
    _close(got.numpy(), product)
    out = torch.zeros(256, 256)
    assert matmul(torch.tensor(a), torch.tensor(b), out=out) is out
    _close(out.numpy(), product)
    with pytest.raises(ValueError, match="^input 0 of MM_small must be contiguous and start at a multiple of 64 bytes"):
        matmul(torch.tensor(a).T, torch.tensor(b))


def test_a_tensor_the_kernel_cannot_use_in_place_is_one_value_error_naming_it_and_the_rule(matmul, operands):
    """Where a tensor read in place would be read wrongly (strided), kill the process (TVM's CPU
    code reads with aligned vector loads) or be overwritten while read, nothing runs."""
    import tvm_ffi

    a, b, _ = operands
    right = tvm.runtime.tensor(b)
    layout = "must be contiguous and start at a multiple of 64 bytes to be read in place"
    refused = {
        f"^input 1 of MM_small {layout} \\(.*not aligned to 64 bytes.*\\): pass a copy$":
            lambda: matmul(a, tvm_ffi.from_dlpack(_misaligned(b))),  # passed as is, it kills the process
        f"^input 0 of MM_small {layout} \\(.*not contiguous.*\\): pass a copy$":
            lambda: matmul(tvm_ffi.from_dlpack(_aligned(a).T), right),
        "^input 0 of MM_small must be float32, got float64$":
            lambda: matmul(tvm.runtime.tensor(a.astype(np.float64)), right),
        r"^input 0 of MM_small must have shape \(256, 256\), got \(128, 256\)$":
            lambda: matmul(tvm.runtime.tensor(a[:128]), right),
        "^out of MM_small must be a tensor where an input is one, and a NumPy array where they are NumPy arrays, "
        "got ndarray$": lambda: matmul(a, right, out=np.empty((256, 256), np.float32)),
        "^out of MM_small must be a writable NumPy array of float32, got float64$":
            lambda: matmul(a, b, out=np.empty((256, 256))),
        r"^out of MM_small must be a writable NumPy array of float32, got >f4 \(a float32 of the other byte order\)$":
            lambda: matmul(a, b, out=np.empty((256, 256), ">f4")),
        "^out of MM_small must be a writable NumPy array of float32, got a read-only array$":
            lambda: matmul(a, b, out=np.broadcast_to(np.float32(0), (256, 256))),
        "^out of MM_small shares memory with input 1: the kernel would overwrite what it still reads$":
            lambda: matmul(a, right, out=right),
        "^MM_small takes 2 arrays, got 1$": lambda: matmul(right),
        "^input 0 of MM_small is on cuda:0, the kernel runs on cpu:0$": lambda: matmul(_OnTheGpu(), right),
    }
    for message, call in refused.items():
        with pytest.raises(ValueError, match=message):
            call()
    np.testing.assert_array_equal(right.numpy(), b)


def test_a_complex_or_masked_array_is_one_value_error_naming_it(matmul, operands):
    """Converted, a complex array would lose its imaginary part and a masked one its mask, and the
    kernel answer for other values; a masked array with nothing masked is its data."""
    a, b, product = operands
    with pytest.raises(ValueError, match="^input 1 of MM_small must be float32 or convert to it by NumPy's same-kind "
                                         r"casting \(no complex number as a real, no float as an integer\), got "
                                         "complex64: convert it yourself$"):
        matmul(a, b + 1j)
    with pytest.raises(ValueError, match="^input 0 of MM_small has masked values, which the kernel would read as any "
                                         r"other: pass its filled\(\) array or its data$"):
        matmul(np.ma.masked_greater(a, 2.0), b)
    _close(matmul(np.ma.masked_array(a, mask=False), b), product)


@pytest.mark.skipif(targets.cuda().has_device, reason="a GPU is visible")
def test_a_cuda_kernel_where_no_gpu_is_visible_is_one_value_error_naming_it(tmp_path):
    """Where TVM would fail deep in its module loader (no CUDA runtime without a driver)."""
    from trial_code import kernel

    workload, gpu = workloads.lookup("MM_small"), targets.h100()
    path = str(tmp_path / "best.so")
    kernel.build(kernel.scheduled(workload, feasible(workload, gpu), gpu), gpu).export_library(path)
    with pytest.raises(ValueError, match=f"^{re.escape(path)} is loaded to run on a GPU and none is visible here"):
        library.load(path, workload, "cuda", gpu.arch)


def test_a_cubin_runs_on_its_own_arch_and_later_minors_of_its_major_alone():
    runs = {("sm_90a", "sm_90a"), ("sm_80", "sm_80"), ("sm_80", "sm_86"), ("sm_80", "sm_89"), ("sm_120", "sm_121")}
    refused = {("sm_86", "sm_80"), ("sm_80", "sm_90a"), ("sm_90a", "sm_100a"), ("sm_100a", "sm_103a"), ("sm_90", "sm_80")}
    assert {pair for pair in runs | refused if targets.cubin_runs_on(*pair)} == runs


def test_a_library_for_a_cpu_with_instructions_this_one_lacks_is_one_value_error(monkeypatch, tmp_path):
    """Its first call would stop the process with an illegal instruction; on a CPU of the
    instructions it was built for, it loads."""
    from trial_code import kernel

    path = str(tmp_path / "k.so")
    workload, host = workloads.lookup("MM_small"), kernel.for_host(CPU)
    kernel.build(kernel.scheduled(workload, feasible(workload, CPU), host), host).export_library(path)
    avx2 = frozenset("fpu sse sse2 ssse3 sse4_1 sse4_2 popcnt avx avx2 fma f16c bmi1 bmi2".split())
    monkeypatch.setattr(targets, "cpu_flags", lambda: avx2)
    with pytest.raises(ValueError, match=f"^{re.escape(path)} was built for skylake-avx512, whose avx512bw, avx512cd, "
                                         "avx512dq, avx512f, avx512vl this CPU lacks"):
        library.load(path, workload, "cpu", "skylake-avx512")
    assert library.load(path, workload, "cpu", "haswell").workload == workload


def test_a_process_forked_after_its_parent_ran_the_kernel_runs_it_too(matmul, operands):
    """A fork copies the calling thread but not the workers of TVM's CPU pool that the parent's
    calls started: the child's call from that thread once waited for them forever (as
    ``multiprocessing``'s default start method, a DataLoader's workers or a pre-forking server
    would have it). Threads of the child start pools of their own; so does the parent again."""
    a, b, product = operands
    _close(matmul(a, b), product)  # the parent's pool has workers

    def from_the_forking_thread() -> bool:
        return bool(np.allclose(matmul(a, b), product, rtol=1e-4, atol=1e-3))

    def twice_and_from_a_new_thread() -> bool:
        found: list[bool] = []
        thread = threading.Thread(target=lambda: found.append(from_the_forking_thread()))
        thread.start()
        thread.join()
        return found == [True] and from_the_forking_thread() and from_the_forking_thread()

    assert in_a_child(from_the_forking_thread) == "right"
    assert in_a_child(twice_and_from_a_new_thread) == "right"
    assert in_a_child(lambda: in_a_child(from_the_forking_thread) == "right" and from_the_forking_thread()) == "right"
    _close(matmul(a, b), product)



@pytest.mark.slow(seconds=8)
def test_a_kernel_goes_to_a_process_pools_spawned_worker_and_back_whole(matmul, operands):
    """Pickled, a kernel is its library's path, workload, device and target, loaded again (and
    checked) where it is unpickled: a pool of spawned or forkserver workers (the default on macOS
    and, from Python 3.14, on Linux) receives it so; TVM's functions themselves do not pickle."""
    a, b, product = operands
    again = pickle.loads(pickle.dumps(matmul))
    assert (again.path, again.workload, again.built_for) == (matmul.path, matmul.workload, matmul.built_for)
    _close(again(a, b), product)
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        _close(pool.submit(matmul, a, b).result(timeout=300), product)


_EDITED = '''
from tvm import te
from trial_code.operators import Operator

def combine(n=64):
    a, b = te.placeholder((n,), "float32", name="A"), te.placeholder((n,), "float32", name="B")
    return Operator([a, b], te.compute((n,), lambda i: a[i] {} b[i], name="Y"), flops=n)
'''


@pytest.mark.slow(seconds=8)  # a kernel's build, then two processes that load TVM
def test_an_operator_edited_since_its_export_is_refused_by_load_kernel(tmp_path, monkeypatch):
    """best.json keeps a digest of the operator's TE computation (``library.computation``): a
    program that loads the export after the operator was changed to compute something else, of
    the same shapes and types, gets one ValueError instead of the old kernel's answers."""
    from nni_opevo_tools.best import Best

    (tmp_path / "edited_ops.py").write_text(_EDITED.format("+"))
    monkeypatch.syspath_prepend(str(tmp_path))
    workload = workloads.make("operator", operator="edited_ops:combine", n=64)
    folder = tmp_path / "export"
    folder.mkdir()
    exported(workload, CPU, str(folder / "best.so"))
    Best(experiment="e", trial_command="", workload=workload.to_json(), target=CPU.to_json(), parameter_id=0,
         parameters={}, reported=None, remeasured=None, not_remeasured="made by the test", source=None, ranking=[],
         library="best.so", computation=library.computation(workload)).write(str(folder))
    program = ("import numpy as np\nfrom nni_opevo_tools.best import load_kernel\n"
               f"try:\n    k = load_kernel({str(folder)!r})\n"
               "    print('SUM', k(np.ones(64, np.float32), np.full(64, 2, np.float32))[0])\n"
               "except ValueError as e:\n    print('REFUSED', e)\n")

    def load() -> str:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
        done = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert load() == "SUM 3.0"
    (tmp_path / "edited_ops.py").write_text(_EDITED.format("*"))
    assert load() == (f"REFUSED {folder / 'best.json'}: {workload.name} computes otherwise than when its kernel was "
                      "exported (its TE computation changed): export it again")
