"""Measurements on one device take turns across trial processes; a killed holder frees the device."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from trial_code.device_lock import DeviceBusy, exclusive

ROOT = Path(__file__).parent.parent
HOLD = """
import sys, time
from trial_code.device_lock import DeviceBusy, exclusive
with exclusive(sys.argv[1]):
    start = time.time()
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
    print(start, time.time(), flush=True)
"""


def _holder(device: str, seconds: float, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", HOLD, device, str(seconds)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, text=True)


@contextmanager
def held(device: str, seconds: float) -> Iterator[None]:
    """Another process holds ``device``'s lock (for at most ``seconds``) inside the block."""
    holder = _holder(device, seconds, dict(os.environ))
    try:
        assert holder.stdout.readline().strip() == "held"
        yield
    finally:
        holder.kill()
        holder.wait()


def test_same_device_measurements_never_overlap(tmp_path, monkeypatch):
    monkeypatch.setenv("NNI_OPEVO_LOCK_DIR", str(tmp_path))
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
    with held("cuda-0", 30):
        with exclusive("cuda-1", timeout=0):  # one try: DeviceBusy if cuda-0's holder blocked it
            pass


def test_a_killed_holder_releases_the_device(tmp_path, monkeypatch):
    monkeypatch.setenv("NNI_OPEVO_LOCK_DIR", str(tmp_path))
    holder = _holder("cpu", 300, dict(os.environ))
    assert holder.stdout.readline().strip() == "held"
    holder.kill()
    holder.wait()
    with exclusive("cpu", timeout=0):  # free at once: DeviceBusy if the dead holder kept it
        pass


def test_waiting_for_a_held_device_is_bounded(tmp_path, monkeypatch):
    import pytest

    from trial_code.device_lock import DeviceBusy

    monkeypatch.setenv("NNI_OPEVO_LOCK_DIR", str(tmp_path))
    with held("cpu", 60):
        with pytest.raises(DeviceBusy, match="device cpu stayed busy .* for 0.5 s"):
            with exclusive("cpu", timeout=0.5):
                pass


def test_the_default_lock_folder_is_the_users_own(tmp_path, monkeypatch):
    import stat

    from trial_code.device_lock import lock_folder

    monkeypatch.delenv("NNI_OPEVO_LOCK_DIR", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)
    folder = lock_folder()
    assert folder == str(tmp_path / f"nni-opevo-locks-{os.getuid()}")
    info = os.lstat(folder)
    assert stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == os.getuid()


def test_a_planted_link_or_someone_elses_folder_is_refused(tmp_path, monkeypatch):
    import pytest

    from trial_code.device_lock import UnsafeLockFolder

    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "locks"
    link.symlink_to(target)
    monkeypatch.setenv("NNI_OPEVO_LOCK_DIR", str(link))
    with pytest.raises(UnsafeLockFolder, match="is a link or not a directory"):
        with exclusive("cpu"):
            pass
    assert not list(target.iterdir()), "nothing was created through the link"
    if os.getuid() == 0:  # as root the test can hand a folder to another user
        theirs = tmp_path / "theirs"
        theirs.mkdir()
        os.chown(theirs, 65534, 65534)
        monkeypatch.setenv("NNI_OPEVO_LOCK_DIR", str(theirs))
        with pytest.raises(UnsafeLockFolder, match="belongs to user 65534"):
            with exclusive("cpu"):
                pass


def test_a_lock_folder_others_may_write_is_refused(tmp_path, monkeypatch):
    """A folder given by the user with mode 0777: anyone could plant a link or a file in it."""
    import pytest

    from trial_code.device_lock import UnsafeLockFolder

    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    monkeypatch.setenv("NNI_OPEVO_LOCK_DIR", str(shared))
    with pytest.raises(UnsafeLockFolder, match=r"may be written by others \(mode 0777\): `chmod go-w"):
        with exclusive("cpu"):
            pass
    assert not list(shared.iterdir())


def test_a_planted_link_as_the_lock_file_is_not_followed(tmp_path, monkeypatch):
    import pytest

    monkeypatch.setenv("NNI_OPEVO_LOCK_DIR", str(tmp_path))
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (tmp_path / "cpu.lock").symlink_to(victim)
    with pytest.raises(OSError):
        with exclusive("cpu"):
            pass
    assert victim.read_text() == "keep me"


def test_each_holder_leaves_its_own_token(tmp_path, monkeypatch):
    """What a waiter reads to tell one holder from the next (``exclusive`` starts its wait
    again when the token changes): each hold writes a new one, and a holder that keeps the
    device past the wait is DeviceBusy."""
    monkeypatch.setenv("NNI_OPEVO_LOCK_DIR", str(tmp_path))
    tokens = []
    for _ in range(2):
        with exclusive("cuda-0"):
            tokens.append(Path(tmp_path, "cuda-0.lock").read_text())
    assert tokens[0] != tokens[1] and all(t.startswith(f"{os.getpid()} ") for t in tokens), tokens
    with held("cuda-0", 30):
        started = time.monotonic()
        with pytest.raises(DeviceBusy, match="for 1.5 s"):
            with exclusive("cuda-0", timeout=1.5):
                pass
        assert time.monotonic() - started < 10
