"""The C++ example (``examples/cpp/call_kernel.cc``) as the tests build and call it."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def built(path: Path) -> str:
    """The example built at ``path`` by its ``build.sh``, with this interpreter's packages."""
    subprocess.run(["bash", str(ROOT / "examples" / "cpp" / "build.sh"), str(path)], check=True, timeout=300,
                   env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable})
    return str(path)


def call(program: str, export: Path, inputs: list[np.ndarray], scratch: Path, *options: str
         ) -> tuple[subprocess.CompletedProcess, Path]:
    """The program run on the export in ``export`` with ``inputs`` written to ``scratch/in<i>.bin``:
    its run and the file it writes the output to (``scratch/out.bin``)."""
    files = [scratch / f"in{position}.bin" for position in range(len(inputs))]
    for values, file in zip(inputs, files):
        values.tofile(file)
    out = scratch / "out.bin"
    done = subprocess.run([program, str(export), *map(str, files), str(out), *options], capture_output=True, text=True,
                          timeout=120)
    return done, out
