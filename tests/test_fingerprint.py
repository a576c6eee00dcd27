"""The proposal fingerprint (nni_opevo_bench/fingerprint.py) holds: every catalog tuner proposes on the
synthetic landscapes (and the network of them) exactly what it proposed when the record was made,
on whatever CPU. The caches' runs are checked by the script itself where the caches are at hand."""
import os
import subprocess
import sys

import numpy as np
import pytest

from nni_opevo_bench import fingerprint

SYNTHETIC = ["check", "--only", "SYN", "network", "--seeds", "1", "--hub", "/nonexistent", "--held-out", "/nonexistent"]


@pytest.mark.slow(seconds=65)
def test_synthetic_landscapes_propose_as_recorded(capsys):
    assert fingerprint.main(SYNTHETIC) == 0
    assert "25 of 25 runs propose as recorded" in capsys.readouterr().out


def _dispatched() -> list[str]:
    """The SIMD extensions beyond its baseline that numpy found on this CPU and computes with."""
    from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__

    return [name for name in __cpu_dispatch__ if __cpu_features__.get(name)]


@pytest.mark.slow(seconds=65)
def test_proposals_do_not_depend_on_the_simd_extensions_numpy_computes_with():
    """The record holds with numpy on its baseline instructions only: a model's twin candidates
    score alike up to rounding that differs between numpy's AVX-512, AVX2 and baseline loops, and
    the tuners rank them in their own order (``nni_opevo.scores``)."""
    found = _dispatched()
    if not found:
        pytest.skip(f"numpy {np.__version__} computes with its baseline instructions only on this CPU")
    env = {**os.environ, "NPY_DISABLE_CPU_FEATURES": " ".join(found)}
    out = subprocess.run([sys.executable, "-m", "nni_opevo_bench.fingerprint", *SYNTHETIC], env=env,
                         capture_output=True, text=True, timeout=600)
    assert "25 of 25 runs propose as recorded" in out.stdout, out.stdout + out.stderr
