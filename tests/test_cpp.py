"""An export's kernel called from C++ (``examples/cpp/call_kernel.cc``, built by its
``build.sh`` against the installed TVM FFI and runtime): best.json's ``arguments`` tell it the
DLTensors ``main`` takes, and it computes what ``load_kernel`` computes, bit for bit, or refuses
in one line. A whole network's export is called the same way in
``tests/test_network_graph.py``."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from call_kernel import built, call
from feasible import exported

from trial_code import kernel, library, targets, workloads
from trial_code.library import Kernel

CPU = targets.cpu()
pytestmark = pytest.mark.slow(seconds=8)  # a C++ build, then a kernel's build per test


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> str:
    return built(tmp_path_factory.mktemp("cpp") / "call_kernel")


def _export(workload: workloads.Workload, folder: Path) -> Kernel:
    """A built configuration of ``workload`` in ``folder`` as an export lays it out: best.so, and
    the fields of best.json a program in another language reads (the library, the target, the
    arguments, the instructions), as the export writes them."""
    folder.mkdir()
    loaded = exported(workload, CPU, str(folder / "best.so"))
    built_for = kernel.for_host(CPU).to_json()
    (folder / "best.json").write_text(json.dumps({"schema": "nni-opevo/best/2", "library": "best.so",
                                                  "target": built_for, "arguments": library.arguments(workload),
                                                  "instructions": library.instruction_flags(built_for)}))
    return loaded


def _call(program: str, folder: Path, inputs: list[np.ndarray]) -> subprocess.CompletedProcess:
    return call(program, folder, inputs, folder, "--repeat", "5")[0]


def test_a_cpp_program_computes_what_the_loaded_kernel_computes(program, tmp_path):
    workload = workloads.lookup("MM_small")
    kernel = _export(workload, tmp_path / "export")
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((256, 256)).astype(np.float32) for _ in range(2))
    done = _call(program, tmp_path / "export", [a, b])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("median of 5 calls: ")
    out = np.fromfile(tmp_path / "export" / "out.bin", np.float32).reshape(256, 256)
    np.testing.assert_array_equal(out, kernel(a, b))
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


def test_a_cpp_program_holds_a_gathers_positions_to_their_range(program, tmp_path):
    """An embedding bag's ids index the table's rows: in range it sums the rows load_kernel sums;
    one id past the table is refused before the kernel would read beyond it."""
    workload = workloads.make("operator", operator="examples.operators:embedding_bag", bags=16, per_bag=4, vocab=100,
                              dim=8)
    kernel = _export(workload, tmp_path / "export")
    rng = np.random.default_rng(1)
    ids, table = rng.integers(0, 100, (16, 4)), rng.standard_normal((100, 8)).astype(np.float32)
    done = _call(program, tmp_path / "export", [ids, table])
    assert done.returncode == 0, done.stderr
    out = np.fromfile(tmp_path / "export" / "out.bin", np.float32).reshape(16, 8)
    np.testing.assert_array_equal(out, kernel(ids, table))
    ids[3, 2] = 100
    refused = _call(program, tmp_path / "export", [ids, table])
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr == (f"call_kernel: input ids ({tmp_path / 'export' / 'in0.bin'}) holds 100, outside 0..99, "
                              "the positions of table's axis 0 it indexes\n")


def test_a_cpp_program_refuses_what_it_cannot_call_in_one_line(program, tmp_path):
    folder = tmp_path / "export"
    _export(workloads.lookup("MM_small"), folder)
    a = np.zeros((256, 256), np.float32)
    cases = {
        "call_kernel: the kernel takes 2 inputs and gives an output: give 3 files, got 2": [a],
        f"call_kernel: input B ({folder / 'in1.bin'}) must hold 262144 bytes (float32 of its shape), got 131072":
            [a, a.astype(np.float16)],
    }
    for message, inputs in cases.items():
        done = _call(program, folder, inputs)
        assert (done.returncode, done.stderr) == (2, message + "\n")
    best = json.loads((folder / "best.json").read_text())
    (folder / "best.json").write_text(json.dumps({**best, "target": {**best["target"], "kind": "cuda"}}))
    done = _call(program, folder, [a, a])
    assert (done.returncode, done.stderr) == (2, f"call_kernel: {folder} holds a kernel built for cuda; this program "
                                                 "calls CPU ones\n")
    (folder / "best.json").write_text(json.dumps({**best, "instructions": [*best["instructions"], "avx1024"]}))
    done = _call(program, folder, [a, a])
    assert (done.returncode, done.stderr) == (2, f"call_kernel: {folder} was built for a CPU with avx1024, which this "
                                                 "CPU lacks (its code would stop with an illegal instruction): tune "
                                                 "it again here\n")
    network = tmp_path / "network"  # a network's export whose network could not be built whole
    network.mkdir()
    (network / "network.json").write_text(json.dumps({"schema": "nni-opevo/network/1", "target": best["target"],
                                                      "library": None, "arguments": best["arguments"]}))
    done = _call(program, network, [a, a])
    assert (done.returncode, done.stderr) == (2, f"call_kernel: {network / 'network.json'} names no library: the "
                                                 "network could not be built where it was exported\n")
    (folder / "best.json").write_text(json.dumps({key: value for key, value in best.items() if key != "arguments"}))
    done = _call(program, folder, [a, a])
    assert (done.returncode, done.stderr) == (2, f"call_kernel: {folder / 'best.json'} has no field 'arguments': "
                                                 "export it again with this version\n")
