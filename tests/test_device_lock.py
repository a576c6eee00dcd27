"""Measurements on one device take turns across trial processes; a killed holder frees the device."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from trial_code.device_lock import exclusive

ROOT = Path(__file__).parent.parent
HOLD = """
import sys, time
from trial_code.device_lock import exclusive
with exclusive(sys.argv[1]):
    start = time.time()
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
    print(start, time.time(), flush=True)
"""


def _holder(device: str, seconds: float, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", HOLD, device, str(seconds)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, text=True)


def test_same_device_measurements_never_overlap(tmp_path, monkeypatch):
    monkeypatch.setenv("NNI_OPEVO_LOCK_DIR", str(tmp_path))
    import os
    procs = [_holder("cuda-0", 0.5, dict(os.environ)) for _ in range(3)]
    spans = []
    for proc in procs:
        out, _ = proc.communicate(timeout=30)
        start, end = map(float, out.split("\n")[1].split())
        spans.append((start, end))
    spans.sort()
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))


def test_other_devices_are_not_blocked(tmp_path, monkeypatch):
    monkeypatch.setenv("NNI_OPEVO_LOCK_DIR", str(tmp_path))
    import os
    holder = _holder("cuda-0", 30, dict(os.environ))
    try:
        assert holder.stdout.readline().strip() == "held"
        start = time.perf_counter()
        with exclusive("cuda-1"):
            assert time.perf_counter() - start < 1
    finally:
        holder.kill()
        holder.wait()


def test_a_killed_holder_releases_the_device(tmp_path, monkeypatch):
    monkeypatch.setenv("NNI_OPEVO_LOCK_DIR", str(tmp_path))
    import os
    holder = _holder("cpu", 300, dict(os.environ))
    assert holder.stdout.readline().strip() == "held"
    holder.kill()
    holder.wait()
    start = time.perf_counter()
    with exclusive("cpu"):
        assert time.perf_counter() - start < 5
