"""Faults injected into real trials, workers, locks and tuners: what the user sees, and that
nothing is lost, repeated or left running (docs/reliability.md tabulates the same faults).

Kernel faults (a segfault, a hang) are injected into the real worker through a
``sitecustomize`` module on its PYTHONPATH, which replaces the timing call the worker makes
when the worker imports it."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from nni_experiment import worker_servers

from trial_code import workloads
from trial_code.device_lock import DeviceBusy, exclusive

ROOT = Path(__file__).resolve().parent.parent
PARAMS = {"tile_n": [8, 8, 4], "tile_m": [4, 4, 16], "tile_k": [64, 4], "block_order": ["n", "k", "m"]}
SEGFAULT = """
import ctypes
def patch(m):
    m.time_kernel = lambda *a, **k: ctypes.string_at(0)
"""
HANG = """
import os, time
def patch(m):
    def forever(*a, **k):
        open(os.environ["NNI_OPEVO_TEST_TIMING"], "w").close()
        while True:
            time.sleep(1)
    m.time_kernel = forever
"""


NATIVE_HANG = """
import os
def patch(m):
    real = m.time_kernel
    def forever(module, args, device, repeat, min_repeat_ms, **timing):
        open(os.environ["NNI_OPEVO_TEST_TIMING"], "w").close()
        return real(module, args, device, 1000, 600_000)  # ten minutes inside TVM's time evaluator (C++)
    m.time_kernel = forever
"""
ON_IMPORT = """
import importlib.abc, importlib.util, sys

class _Patcher(importlib.abc.MetaPathFinder):
    \"\"\"Applies ``patch`` to trial_code.measure once something imports it, so that the processes
    that never time a kernel (the trial's parent) do not import TVM here, and the worker loads it
    its own way.\"\"\"

    def find_spec(self, name, path, target=None):
        if name != "trial_code.measure":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            patch(module)

        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, _Patcher())
"""


@pytest.fixture
def env(tmp_path, monkeypatch):
    """This test's own lock folder (and the variables a fault needs), for the trial and its worker."""
    monkeypatch.setenv("NNI_OPEVO_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("NNI_OPEVO_TEST_TIMING", str(tmp_path / "timing"))  # HANG's kernel touches it
    return dict(os.environ)


def inject(tmp_path: Path, env: dict, code: str) -> dict:
    folder = tmp_path / "fault"
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text(code + ON_IMPORT)
    return {**env, "PYTHONPATH": f"{folder}{os.pathsep}{env.get('PYTHONPATH', '')}"}


def trial_command(*flags: str) -> list[str]:
    return [sys.executable, "-m", "trial_code.trial", "--workload", "MM_small", "--target", "cpu",
            "--params", json.dumps(PARAMS), *flags]


def trial(env: dict, *flags: str) -> subprocess.Popen:
    return subprocess.Popen(trial_command(*flags), env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def workers(lock_dir: str) -> list[psutil.Process]:
    """This test's worker processes (by the lock folder in their environment): started as
    programs, or forked (``trial_code.fork_server``: the servers, their waiters and the workers)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            command = " ".join(process.info["cmdline"] or [])
            if ("trial_code.worker" in command or "trial_code.fork_server" in command) and \
                    process.environ().get("NNI_OPEVO_LOCK_DIR") == lock_dir:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def wait_until_measuring(env: dict, timeout: float = 120) -> None:
    """Until a worker times HANG's kernel with the CPU's measurement lock held. Not as soon as
    the lock is held: on the CPU a trial takes it before it loads TVM and builds, and a worker
    killed then dies building (COMPILE_HOST), which a loaded machine made likely."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if os.path.exists(env["NNI_OPEVO_TEST_TIMING"]):
            try:
                with exclusive("cpu", timeout=0.05):
                    pass
            except DeviceBusy:
                return
        time.sleep(0.2)
    raise TimeoutError("no worker started timing the kernel with the device lock held")


def gone(lock_dir: str, timeout: float = 10) -> bool:
    deadline = time.time() + timeout
    while workers(lock_dir):
        if time.time() > deadline:
            return False
        time.sleep(0.1)
    return True


FORKED = """
import json, sys
from trial_code import forked, targets, workloads
from trial_code.evaluate import Limits, evaluate
params, times, run_timeout, shared = json.loads(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4] or None
forked.IDLE_S = float(sys.argv[5])
with forked.workers(shared=shared):
    for _ in range(times):
        result = evaluate(workloads.lookup("MM_small"), params, targets.resolve("cpu"), Limits(run_timeout=run_timeout))
        print(json.dumps({"status": result.status.name, "error": result.error, "tflops": result.tflops}), flush=True)
"""


def forked_evaluations(env: dict, times: int, run_timeout: float = 60, shared: str | None = None,
                       idle_s: float = 2) -> subprocess.Popen:
    """A parent that evaluates MM_small ``times`` times with forked workers, a line of JSON each:
    from servers of its own, or from those of the experiment ``shared`` names (as a trial under
    NNI does), which end ``idle_s`` after their last connection closes."""
    return subprocess.Popen([sys.executable, "-c", FORKED, json.dumps(PARAMS), str(times), str(run_timeout),
                             shared or "", str(idle_s)],
                            env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def servers(lock_dir: str) -> set[int]:
    """The experiments' servers among this test's worker processes."""
    return worker_servers("NNI_OPEVO_LOCK_DIR", lock_dir)


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=["kill-9", "term", "int"])
def test_the_worker_dies_with_its_trial_and_frees_the_device(tmp_path, env, how):
    """NNI stops a trial with SIGINT then SIGKILL; a user may kill -9 it. However it ends, its
    worker (in a session of its own, timing a kernel) goes too and the device lock is free."""
    lock_dir = env["NNI_OPEVO_LOCK_DIR"]
    process = trial(inject(tmp_path, env, HANG), "--run-timeout", "600")
    wait_until_measuring(env)
    assert len(workers(lock_dir)) == 1
    process.send_signal(how)
    process.wait(timeout=30)
    assert gone(lock_dir), "the worker outlived its trial"
    with exclusive("cpu", timeout=5):
        pass


@pytest.mark.parametrize("parent", ["trial", *(pytest.param(p, marks=pytest.mark.slow(seconds=5))
                                                for p in ("forked", "shared"))])
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "term"])
def test_a_worker_inside_native_code_dies_with_its_trial(tmp_path, env, how, parent):
    """The worker timing a kernel in TVM's C++ time evaluator, where no Python signal handler
    runs: killing the trial still ends it at once (its watcher kills its session), and the
    device lock is free for the next trial. The same for a parent of forked workers, whose
    server also ends when the parent's end of its socket closes, and for a trial of an
    experiment, whose server ends once no trial has been connected for its idle time."""
    lock_dir = env["NNI_OPEVO_LOCK_DIR"]
    injected = inject(tmp_path, env, NATIVE_HANG)
    process = trial(injected, "--run-timeout", "600") if parent == "trial" else \
        forked_evaluations(injected, 1, 600, shared=f"killed-{tmp_path.name}" if parent == "shared" else None)
    wait_until_measuring(env)
    time.sleep(1)  # well inside the evaluator's loop
    process.send_signal(how)
    process.wait(timeout=30)
    # 15 s against the 600 s the worker would otherwise run: room for a loaded 2-core machine.
    assert gone(lock_dir, timeout=15), "the worker outlived its trial inside native code"
    with exclusive("cpu", timeout=15):
        pass


@pytest.mark.slow(seconds=5)
def test_the_device_wait_follows_the_run_timeout(tmp_path, env):
    """Without --lock-timeout, a trial behind a holder that never lets go waits 3 x its run
    timeout plus its build timeout, not a fixed quarter of an hour."""
    with exclusive("cpu"):
        started = time.time()
        process = trial(env, "--run-timeout", "1", "--build-timeout", "1")
        out, _ = process.communicate(timeout=300)
    report = json.loads(out)
    assert report["status"] == "DEVICE_BUSY" and "for 4 s" in report["error"], report
    assert time.time() - started < 60


@pytest.mark.parametrize("fault", ["none", "segfault", "hang"])
@pytest.mark.slow(seconds=15)
def test_a_forked_worker_reports_as_a_worker_program_does(tmp_path, env, fault):
    """A worker forked from a server that has TVM loaded gives the statuses a worker started as a
    program gives: kernels measured, a segfault as the signal that ended it, a hang killed at the
    run timeout with its session; and the server ends with its parent's ``workers()`` block."""
    code = {"none": "", "segfault": SEGFAULT, "hang": HANG}[fault]
    out, err = forked_evaluations(inject(tmp_path, env, code) if code else env, 2, run_timeout=3).communicate(
        timeout=300)
    reports = [json.loads(line) for line in out.splitlines()]
    assert len(reports) == 2, err
    for report in reports:
        if fault == "none":
            assert report["status"] == "NO_ERROR" and report["tflops"] > 0, report
        elif fault == "segfault":
            assert report["status"] == "RUNTIME_DEVICE" and "worker died (signal 11, SIGSEGV)" in report["error"], report
        else:
            assert report["status"] == "RUN_TIMEOUT" and "3 s limit" in report["error"], report
    assert gone(env["NNI_OPEVO_LOCK_DIR"])


SEEN = """
import json, os
def patch(m):
    real = m.verify
    def verify(*a, **k):
        with open(os.environ["NNI_OPEVO_TEST_TIMING"] + ".seen", "a") as seen:
            seen.write(os.environ["NNI_TRIAL_JOB_ID"] + "\\n")
        return real(*a, **k)
    m.verify = verify
"""


@pytest.mark.slow(seconds=15)
def test_an_experiments_trials_share_one_server_that_ends_after_the_last(tmp_path, env):
    """Trials of one experiment (``workers(shared=...)``, as ``trial`` runs under NNI), one after
    another, fork their workers from one server, each worker in its own trial's environment;
    the server ends once no trial has been connected for its idle time."""
    lock_dir = env["NNI_OPEVO_LOCK_DIR"]
    injected = inject(tmp_path, env, SEEN)
    seen = []
    for trial_id in ("a", "b", "c"):
        out, err = forked_evaluations({**injected, "NNI_TRIAL_JOB_ID": trial_id}, 1, shared=f"exp-{tmp_path.name}",
                                      idle_s=8).communicate(timeout=300)
        assert json.loads(out)["status"] == "NO_ERROR", err
        seen.append(servers(lock_dir))
    assert len(seen[0]) == 1 and seen[0] == seen[1] == seen[2], f"one server for the three trials: {seen}"
    assert Path(env["NNI_OPEVO_TEST_TIMING"] + ".seen").read_text().split() == ["a", "b", "c"]
    assert gone(lock_dir, timeout=30), "the experiment's server outlived its idle time"


def test_under_the_switch_workers_stay_programs(monkeypatch):
    """``NNI_OPEVO_FORK=0``: ``workers()`` starts no server, and each worker is a program."""
    from trial_code import forked

    monkeypatch.setenv(forked.SWITCH, "0")
    with forked.workers():
        assert forked._servers is None
        assert forked.start({"target": {"kind": "llvm"}}, 2, 0, {}) is None


@pytest.mark.parametrize("experiment, platform, forks", [(None, "linux", False), ("e1", "linux", True),
                                                        ("e1", "darwin", False)])
def test_only_a_trial_of_an_experiment_on_linux_forks_its_worker(monkeypatch, experiment, platform, forks):
    """A trial forks its worker from its experiment's server under NNI (``NNI_EXP_ID``) on Linux;
    run by hand, or where the servers' abstract sockets do not exist, its worker is a program."""
    from trial_code import forked

    if experiment:
        monkeypatch.setenv("NNI_EXP_ID", experiment)
    else:
        monkeypatch.delenv("NNI_EXP_ID", raising=False)
    monkeypatch.delenv(forked.SWITCH, raising=False)
    monkeypatch.setattr(sys, "platform", platform)
    with forked.experiment_workers():
        assert forked.active() is forks


@pytest.mark.parametrize("shared", [False, True], ids=["own", "experiment"])
@pytest.mark.slow(seconds=8)
def test_a_dead_worker_server_is_replaced(tmp_path, env, monkeypatch, shared):
    """A server killed between two evaluations, a parent's own or the experiment's: the next
    evaluation starts another and measures."""
    from trial_code import forked, targets
    from trial_code.evaluate import evaluate

    monkeypatch.setattr(forked, "IDLE_S", 1.0)
    lock_dir = env["NNI_OPEVO_LOCK_DIR"]
    small, cpu = workloads.lookup("MM_small"), targets.resolve("cpu")
    with forked.workers(shared=f"replaced-{tmp_path.name}" if shared else None):
        assert evaluate(small, PARAMS, cpu).status.name == "NO_ERROR"
        first = psutil.Process(*servers(lock_dir)) if shared else forked._servers[True].process
        first.kill()
        first.wait()
        result = evaluate(small, PARAMS, cpu)
        assert result.status.name == "NO_ERROR", result.error
        assert (servers(lock_dir) if shared else {forked._servers[True].process.pid}) - {first.pid}
    assert gone(lock_dir)


def test_a_killed_worker_is_a_reported_failure(tmp_path, env):
    lock_dir = env["NNI_OPEVO_LOCK_DIR"]
    process = trial(inject(tmp_path, env, HANG), "--run-timeout", "600")
    wait_until_measuring(env)
    workers(lock_dir)[0].kill()
    out, _ = process.communicate(timeout=60)
    report = json.loads(out)
    assert report["status"] == "RUNTIME_DEVICE" and "worker died (signal 9, SIGKILL)" in report["error"]
    assert report["default"] == 0.0


def test_a_segfaulting_kernel_is_a_reported_failure(tmp_path, env):
    out = subprocess.run(trial_command(), env=inject(tmp_path, env, SEGFAULT), cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    report = json.loads(out.stdout)
    assert report["status"] == "RUNTIME_DEVICE" and "worker died (signal 11, SIGSEGV)" in report["error"], report


@pytest.mark.slow(seconds=5)
def test_a_hanging_kernel_is_killed_at_the_run_timeout(tmp_path, env):
    process = trial(inject(tmp_path, env, HANG), "--run-timeout", "3")
    out, _ = process.communicate(timeout=300)
    report = json.loads(out)
    assert report["status"] == "RUN_TIMEOUT" and "3 s limit" in report["error"]
    assert gone(env["NNI_OPEVO_LOCK_DIR"])


def test_a_device_held_elsewhere_is_device_busy_within_the_lock_timeout(tmp_path, env):
    with exclusive("cpu"):
        process = trial(env, "--lock-timeout", "2")
        out, _ = process.communicate(timeout=300)
    report = json.loads(out)
    assert report["status"] == "DEVICE_BUSY" and "stayed busy" in report["error"] and "for 2 s" in report["error"]
    assert report["default"] == 0.0
    # A CPU trial waits for the device before it builds: its build would share the cores that
    # the holder's kernel is timed on.
    assert report["build_s"] is None


QUEUE = """
import sys, time
from trial_code.device_lock import exclusive, lock_path
turns, hold = int(sys.argv[1]), float(sys.argv[2])
with exclusive("cpu"):
    print("held", flush=True)
    for turn in range(turns):
        time.sleep(hold)
        with open(lock_path("cpu"), "r+b") as lock:  # the next trial's token, as its turn would write it
            lock.truncate(0)
            lock.write(f"queued {turn} {time.time_ns()}".encode())
    time.sleep(hold)
"""


@pytest.mark.slow(seconds=10)
def test_a_trial_queued_behind_other_trials_waits_its_turn(env, monkeypatch):
    """Four trials ahead of this one take the device in turn, 1.5 s each (one process playing
    them, so none can slip in between): about 5 s of waiting, past the trial's --lock-timeout of
    2.5 s and past its parent's watch (that and a margin, made 0.5 s here). The wait is per
    holder, and the worker tells its parent of each turn, so the trial waits its turn and
    measures instead of failing DEVICE_BUSY or being killed."""
    from trial_code import evaluate as evaluating
    from trial_code import targets

    monkeypatch.setattr(evaluating, "LOCK_MARGIN_S", 0.5)
    queue = subprocess.Popen([sys.executable, "-c", QUEUE, "3", "1.5"], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert queue.stdout.readline().strip() == "held"
        result = evaluating.evaluate(workloads.lookup("MM_small"), PARAMS, targets.resolve("cpu"),
                                     evaluating.Limits(lock_timeout=2.5))
    finally:
        queue.kill()
        queue.wait()
    assert result.status.name == "NO_ERROR", result.error
    assert result.wait_s > 3.0, result


def test_bad_trial_options_name_the_option():
    for flags, message in ((["--build-timeout", "nan"], "--build-timeout: must be a number from 0.01 to 86400, got 'nan'"),
                           (["--params", "{bad"], "--params: is not JSON"),
                           (["--repeat", "0"], "--repeat: must be an integer from 1 to 10000, got '0'")):
        out = subprocess.run([sys.executable, "-m", "trial_code.trial", "--workload", "MM_small", *flags],
                             cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr, out.stderr


# ------------------------------------------------------------------ tuners


TUNER_NAMES = ["opevo", "gbfs", "na2c", "autotvm", "nose", "tpe"]


@pytest.mark.parametrize("name", TUNER_NAMES)
def test_an_exception_inside_a_tuner_is_reported_to_nni_and_ends_the_dispatcher(name, monkeypatch):
    """Inside NNI's dispatcher a tuner's exception goes to the NNI manager as an error report
    (which ends the experiment in ERROR) and ends the process, instead of leaving the
    experiment RUNNING forever; in-process it is simply raised."""
    from nni_opevo import catalog, fatal

    reports, exits = [], []

    class Dispatcher:
        def report_error(self, message):
            reports.append(message)

    tuner = catalog.build(name, seed=0)
    tuner.update_search_space({"x": {"_type": "randint", "_value": [0, 10]}})
    boom = RuntimeError("injected fault")
    target = tuner.inner if hasattr(tuner, "inner") else tuner
    monkeypatch.setattr(target, "_propose" if not hasattr(tuner, "inner") else "generate_parameters",
                        lambda *a, **k: (_ for _ in ()).throw(boom))
    with pytest.raises(RuntimeError, match="injected fault"):
        tuner.generate_parameters(0)  # in-process: raised
    monkeypatch.setenv("NNI_TUNER_COMMAND_CHANNEL", "ws://127.0.0.1:1/tuner")
    monkeypatch.setattr(fatal, "_dispatcher", lambda: Dispatcher())
    monkeypatch.setattr(fatal, "REPORT_GRACE_S", 0)
    monkeypatch.setattr(fatal.os, "_exit", lambda code: exits.append(code) or (_ for _ in ()).throw(SystemExit(code)))
    with pytest.raises(SystemExit):
        tuner.generate_parameters(1)
    assert exits == [1] and reports == ["nni-opevo tuner stopped the experiment: RuntimeError: injected fault"]


@pytest.mark.parametrize("name", TUNER_NAMES)
def test_import_skips_malformed_and_off_space_records(name):
    from nni_opevo import catalog

    tuner = catalog.build(name, seed=0)
    tuner.update_search_space({"x": {"_type": "randint", "_value": [0, 10]}, "c": {"_type": "choice", "_value": ["a", "b"]}})
    good = {"parameter": {"x": 3, "c": "a"}, "value": 1.0}
    tuner.import_data(["{not json", good, {"parameter": {"x": 99, "c": "a"}, "value": 2.0}, 5, {"no": 1},
                       json.dumps({"parameter": {"x": 4, "c": "b"}, "value": 3.0}), {"parameter": {"x": 5}}])
    assert tuner.generate_parameters(0)  # still proposes


def test_a_resumed_tuner_never_proposes_a_configuration_the_stop_cancelled(tmp_path, monkeypatch):
    from nni_opevo import OpEvoTuner

    monkeypatch.setenv("NNI_CHECKPOINT_DIRECTORY", str(tmp_path))
    space = {"x": {"_type": "randint", "_value": [0, 30]}}
    before = OpEvoTuner(seed=0)
    before.update_search_space(space)
    proposed = [before.generate_parameters(i) for i in range(10)]
    for i in range(4):  # four finished; six were running when the experiment was stopped
        before.receive_trial_result(i, proposed[i], float(proposed[i]["x"]))
    after = OpEvoTuner(seed=0)  # the same seed: without the journal it would propose the same ones again
    after.load_checkpoint()
    after.update_search_space(space)
    after.import_data([{"parameter": proposed[i], "value": float(proposed[i]["x"])} for i in range(4)])
    again = [after.generate_parameters(100 + i) for i in range(20)]
    assert not {p["x"] for p in again} & {p["x"] for p in proposed}
    assert after.population.best()[1] == max(float(p["x"]) for p in proposed[:4])


def test_a_journal_cut_mid_line_keeps_every_later_proposal_readable(tmp_path, monkeypatch):
    """A crash cut the journal's last line; the resumed tuner's next record starts on a line of
    its own, so a second resume still reads it (before, it was glued to the torn line and lost)."""
    from nni_opevo import OpEvoTuner
    from nni_opevo.journal import FILE, Journal

    monkeypatch.setenv("NNI_CHECKPOINT_DIRECTORY", str(tmp_path))
    space = {"x": {"_type": "randint", "_value": [0, 1000]}}
    first = OpEvoTuner(seed=0)
    first.update_search_space(space)
    for i in range(3):
        first.generate_parameters(i)
    journal = tmp_path / FILE
    journal.write_text(journal.read_text()[:-7])  # the third record torn
    second = OpEvoTuner(seed=1)
    second.load_checkpoint()
    second.update_search_space(space)
    after_resume = second.generate_parameters(3)
    third = Journal(str(tmp_path)).read()
    assert len(third) == 3 and third[-1] == after_resume


def test_a_journal_path_that_is_a_folder_is_logged_and_the_resume_goes_on(tmp_path, monkeypatch, caplog):
    from nni_opevo import OpEvoTuner
    from nni_opevo.journal import FILE

    monkeypatch.setenv("NNI_CHECKPOINT_DIRECTORY", str(tmp_path))
    (tmp_path / FILE).mkdir()
    tuner = OpEvoTuner(seed=0)
    with caplog.at_level("ERROR"):
        tuner.load_checkpoint()
        tuner.update_search_space({"x": {"_type": "randint", "_value": [0, 30]}})
        assert tuner.generate_parameters(0)
    assert any("cannot read the proposal journal" in r.message for r in caplog.records)


def test_an_unwritable_journal_is_logged_once_and_the_tuning_goes_on(tmp_path, monkeypatch, caplog):
    from nni_opevo import OpEvoTuner
    from nni_opevo.journal import FILE

    monkeypatch.setenv("NNI_CHECKPOINT_DIRECTORY", str(tmp_path))
    (tmp_path / FILE).symlink_to("/dev/full")  # every write fails with ENOSPC: a full disk
    tuner = OpEvoTuner(seed=0)
    tuner.update_search_space({"x": {"_type": "randint", "_value": [0, 30]}})
    with caplog.at_level("ERROR"):
        proposed = [tuner.generate_parameters(i) for i in range(5)]
    assert len({p["x"] for p in proposed}) == 5
    assert [r.message for r in caplog.records].count(
        f"cannot write the proposal journal {tmp_path / FILE} ([Errno 28] No space left on device): a resume may "
        "propose these trials again") == 1


@pytest.fixture
def small_disk(tmp_path):
    """A 64 KB filesystem of the test's own (tmpfs); skipped where mounting is not allowed."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()}")
    yield disk
    subprocess.run(["umount", str(disk)], check=False)


@pytest.mark.slow(seconds=10)
def test_a_full_disk_stops_a_benchmark_with_the_file_named_and_resume_repeats_nothing(tmp_path, small_disk):
    import shutil

    from nni_opevo_bench.__main__ import main

    argv = ["--objective", "synthetic", "--workloads", "SYN1", "SYN2", "--tuners", "opevo", "gbfs", "--seeds", "2",
            "--budget", "150", "--no-progress"]
    with pytest.raises(OSError, match="cannot write .*trials.csv: No space left on device; every trial written"):
        main([*argv, "--out", str(small_disk)])
    kept = tmp_path / "kept"
    kept.mkdir()
    shutil.copy(small_disk / "trials.csv", kept / "trials.csv")  # made room: the same rows, elsewhere
    written = (kept / "trials.csv").read_text()
    main([*argv, "--out", str(kept)])
    import csv

    with open(kept / "trials.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert (kept / "trials.csv").read_text().startswith(written[: written.rfind("\n") + 1])
    assert len(rows) == 2 * 2 * 2 * 150
    runs: dict = {}
    for row in rows:
        runs.setdefault((row["workload"], row["tuner"], row["seed"]), []).append(row)
    for run in runs.values():
        assert sorted(int(r["index"]) for r in run) == list(range(150))
        assert len({r["configuration"] for r in run}) == 150, "a configuration measured twice"


@pytest.mark.slow(seconds=5)
def test_a_disk_that_fills_while_a_runs_record_is_written_leaves_the_earlier_record(tmp_path, small_disk):
    """``run.json`` (and every record a run reads back: optima, defaults, library comparisons) is
    written beside and renamed into place: a full disk leaves the earlier record whole."""
    import errno
    import shutil

    from nni_opevo_bench.__main__ import main

    argv = ["--objective", "synthetic", "--workloads", "SYN1", "--tuners", "opevo", "--seeds", "1", "--budget", "4",
            "--no-progress"]
    main([*argv, "--out", str(tmp_path / "first")])
    shutil.copy(tmp_path / "first" / "run.json", small_disk / "run.json")
    before = (small_disk / "run.json").read_text()
    with open(small_disk / "filler", "wb", buffering=0) as filler, pytest.raises(OSError) as full:
        while True:
            filler.write(b"x" * 4096)
    assert full.value.errno == errno.ENOSPC
    with pytest.raises(OSError, match=f"No space left on device: '{small_disk / 'run.json'}'$"):
        main([*argv, "--out", str(small_disk)])  # the file the user knows, not its temporary name
    assert (small_disk / "run.json").read_text() == before
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "run.json"]


def test_a_temporary_file_a_killed_writer_left_does_not_block_the_next_write(tmp_path):
    """A writer killed between writing its temporary file and renaming it leaves that file; the
    next writer, of any process id, writes under a name of its own."""
    from trial_code.files import replace_text

    (tmp_path / f".run.json.{os.getpid()}.tmp").write_text("[")
    replace_text(tmp_path / "run.json", "[]\n")
    assert (tmp_path / "run.json").read_text() == "[]\n"


@pytest.mark.parametrize("cut", ["between_cr_and_lf", "mid_row"])
def test_a_row_cut_short_is_kept_if_whole_and_measured_again_if_not(tmp_path, cut):
    """A disk that fills (or a kill) can stop a row anywhere: between the carriage return and
    the line feed of its ending its trial is whole and kept, not measured again; anywhere before,
    the row is dropped and its trial measured again. Either way every other row stays as it was."""
    from nni_opevo_bench.__main__ import main

    argv = ["--objective", "synthetic", "--workloads", "SYN1", "--tuners", "opevo", "--seeds", "1", "--budget", "12",
            "--concurrency", "1", "--no-progress", "--out", str(tmp_path)]
    main(argv)
    whole = (tmp_path / "trials.csv").read_bytes()
    rows = whole.split(b"\r\n")[:-1]
    kept = b"".join(row + b"\r\n" for row in rows[:-1])
    (tmp_path / "trials.csv").write_bytes(kept + (rows[-1] + b"\r" if cut == "between_cr_and_lf" else rows[-1][:-7]))
    main(argv)
    resumed = (tmp_path / "trials.csv").read_bytes()
    assert resumed.startswith(kept) and resumed.count(b"\r\n") == 13  # the header and 12 trials
    if cut == "between_cr_and_lf":
        assert resumed == whole  # the whole row kept, not measured again


def test_a_network_row_appended_after_a_cut_one_is_a_row_of_its_own(tmp_path):
    """The networks' CSVs (end-to-end times, profiles) append through the same check: a row cut
    short is dropped, never run into the next."""
    from nni_opevo_bench.table import append_rows, read_rows

    path = tmp_path / "end_to_end.csv"
    append_rows(path, ["network", "seed"], [{"network": "resnet18", "seed": 0}])
    path.write_bytes(path.read_bytes() + b"alexnet,")  # killed mid-row
    append_rows(path, ["network", "seed"], [{"network": "alexnet", "seed": 1}])
    assert read_rows(path) == [{"network": "resnet18", "seed": "0"}, {"network": "alexnet", "seed": "1"}]


@pytest.mark.slow(seconds=5)
def test_extreme_results_never_poison_a_tuner():
    import itertools

    from nni_opevo import catalog
    from nni_opevo.testing.dispatch import drive
    from nni_opevo.testing.landscapes import tiled_matmul

    space, _ = tiled_matmul(256, 256, 256, seed=1)
    for mode in ("maximize", "minimize"):
        for name in ("opevo", "gbfs", "na2c", "autotvm:plan_size=8,sa_steps=20", "nose:population_size=8"):
            values = itertools.cycle([1e308, -1e308, 3.5e38, 5e-324, 0.0, 1.0, -5e-324])
            run = drive(catalog.build(name, seed=0, optimize_mode=mode), space, lambda p, v=values: next(v), 60,
                        concurrency=2, charge_tuner_time=False)
            assert len(run.trials) == 60, (mode, name)


def test_search_space_sizes_are_bounded_before_anything_is_allocated():
    from nni_opevo import SearchSpace, SpaceError

    nested: dict = {"x": {"_type": "choice", "_value": [{"_name": "a"}]}}
    level = nested["x"]["_value"][0]
    for _ in range(200):
        level["y"] = {"_type": "choice", "_value": [{"_name": "b"}]}
        level = level["y"]["_value"][0]
    cases = [({"x": {"_type": "perm", "_value": 10**9}}, "perm: n must be <= 256"),
             ({"x": {"_type": "perm", "_value": list(range(300))}}, "perm: at most 256 items"),
             ({"x": {"_type": "choice", "_value": list(range(200_000))}}, "at most 100,000 options"),
             ({"x": {"_type": "factor", "_value": [2**40, 1000]}}, "nu must be <= 64"),
             ({"x": {"_type": "quniform", "_value": [0, 1e300, 1e-300]}}, "at most 2**53 points"),
             ({"x": {"_type": "qlognormal", "_value": [1000, 1, 1]}}, "exp overflows"),
             ({"x": {"_type": "uniform", "_value": [-1e308, 1e308]}}, "high - low must be a finite number"),
             (nested, "choices may nest at most 32 deep")]
    for space, message in cases:
        started = time.perf_counter()
        with pytest.raises(SpaceError, match=message.replace("*", r"\*").replace("(", r"\(")):
            SearchSpace(space)
        assert time.perf_counter() - started < 1.0
    # Large but allowed: sizes are computed once, in linear time.
    started = time.perf_counter()
    space = SearchSpace({"p": {"_type": "perm", "_value": 256}, "c": {"_type": "choice", "_value": list(range(30_000))},
                         "f": {"_type": "factor", "_value": [2**40, 8]}})
    assert space.size == float("inf") and time.perf_counter() - started < 1.0


def test_gbfs_and_na2c_start_on_a_huge_factor_without_listing_it():
    from nni_opevo import GBFSTuner, NA2CTuner

    for tuner in (GBFSTuner(seed=0), NA2CTuner(seed=0)):
        started = time.perf_counter()
        tuner.update_search_space({"f": {"_type": "factor", "_value": [2**40, 8]}})
        assert tuner.generate_parameters(0) == {"f": [2**40, 1, 1, 1, 1, 1, 1, 1]}
        tuner.receive_trial_result(0, {"f": [2**40, 1, 1, 1, 1, 1, 1, 1]}, 1.0)
        assert tuner.generate_parameters(1)
        assert time.perf_counter() - started < 5.0


def test_workloads_named_in_this_suite_exist():
    assert workloads.lookup("MM_small").family == "matmul"


@pytest.mark.parametrize("name", ["../../escaped", "x;touch MARKER", ".hidden", "a/b", "$(touch MARKER)"])
def test_a_name_that_would_leave_the_root_or_reach_the_shell_is_refused(tmp_path, name):
    """Names become file names and words of the trial command NNI runs through a shell."""
    root = tmp_path / "root"
    out = subprocess.run([sys.executable, "-m", "nni_opevo_tools.console", "spaces", "--family", "matmul", "--shape",
                          "n=8", "m=8", "k=8", "--name", name, "--root", str(root)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode != 0 and f"workload name {name!r} may hold only letters" in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert not root.exists() and not (tmp_path / "escaped").exists() and not (tmp_path / "MARKER").exists()


QUICKSTART_DB = ROOT / "tests" / "data" / "quickstart.sqlite"
"""The database of a real quickstart experiment (48 CPU MatMul trials under nnictl), recorded on
a machine with AVX2, whose register tiles fit every CPU the suite runs on (the test below)."""


@pytest.mark.parametrize("instructions", ["avx512f", "avx", "asimd"])
def test_every_trial_of_the_quickstart_database_builds_on_every_cpu_the_suite_runs_on(instructions):
    """Export rebuilds the database's top trials on the machine that runs the tests: a trial whose
    register tile only an AVX-512 machine holds would make every export test fail on AVX2 and Arm
    ("none of the top configurations builds here any more")."""
    import sqlite3

    from trial_code.targets import Target, vectors_of
    from trial_code.templates import for_workload

    workload = workloads.lookup("MM_small")
    template, target = for_workload(workload), Target("llvm", **vectors_of(instructions))
    with sqlite3.connect(QUICKSTART_DB) as db:
        started = db.execute("SELECT data FROM TrialJobEvent WHERE event = 'RUNNING'").fetchall()
    assert len(started) == 48
    for (data,) in started:
        template.check(workload, json.loads(data)["parameters"], target)


def _experiment(tmp_path: Path, damage=None, recorded: Path = QUICKSTART_DB) -> Path:
    import shutil
    import sqlite3

    folder = tmp_path / "exp"
    (folder / "db").mkdir(parents=True)
    database = folder / "db" / "nni.sqlite"
    shutil.copyfile(recorded, database)
    if damage is not None:
        if callable(damage):
            with sqlite3.connect(database) as db:
                damage(db)
        else:
            database.write_bytes(damage(database.read_bytes()) if callable(damage) else damage)
    return folder


def _export(folder: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nni_opevo_tools.export", str(folder), "--top-k", "1", "--repeat", "2",
                           "--min-repeat-ms", "5", *flags], cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("damage,message", [
    (b"", "no such table"),
    (os.urandom(4096), "file is not a database"),
    (QUICKSTART_DB.read_bytes()[:QUICKSTART_DB.stat().st_size // 2], "cannot read"),
    ("no-db", "is not an NNI experiment folder: it has no db/nni.sqlite"),
    (lambda db: db.execute("UPDATE ExperimentProfile SET params = '{\"experimentName\": \"x\"}'"),
     "its profile names no trialCommand"),
], ids=["empty", "random-bytes", "cut-in-half", "no-db", "no-trial-command"])
def test_export_of_a_damaged_experiment_is_one_line_and_a_failure(tmp_path, damage, message):
    if damage == "no-db":
        folder = tmp_path / "exp"
        folder.mkdir()
    else:
        folder = _experiment(tmp_path, damage)
    out = _export(folder)
    assert out.returncode != 0 and message in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


@pytest.mark.slow(seconds=15)
def test_export_skips_and_counts_unreadable_records(tmp_path):
    folder = _experiment(tmp_path, lambda db: db.execute(
        "UPDATE MetricData SET data = '{not json' WHERE rowid IN (SELECT rowid FROM MetricData LIMIT 2)"))
    out = _export(folder)
    assert out.returncode == 0, out.stderr
    assert "2 unreadable records" in out.stdout and (folder / "export" / "best.json").exists()


def test_export_to_a_folder_it_cannot_write_is_one_line(tmp_path):
    """An --out that cannot be made (a file where its parent folder should be: even root cannot)."""
    folder = _experiment(tmp_path)
    (tmp_path / "a-file").write_text("")
    out = _export(folder, "--out", str(tmp_path / "a-file" / "export"))
    assert out.returncode != 0 and "cannot write" in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def _exported(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """An experiment exported once, and its export's files (name -> bytes)."""
    folder = _experiment(tmp_path)
    first = _export(folder)
    assert first.returncode == 0, first.stderr
    return folder, _files(folder / "export")


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def _export_in_process(folder: Path, monkeypatch, capsys, fault) -> tuple[SystemExit, str]:
    """``export --force`` in this process with ``fault`` patched in; the SystemExit and stderr."""
    from nni_opevo_tools import export

    fault(monkeypatch, export)
    with pytest.raises(SystemExit) as ended:
        export.main([str(folder), "--top-k", "1", "--repeat", "2", "--min-repeat-ms", "5", "--force"])
    return ended.value, capsys.readouterr().err


@pytest.mark.slow(seconds=40)
def test_an_export_interrupted_by_ctrl_c_leaves_the_earlier_one_intact(tmp_path, monkeypatch, capsys):
    """Ctrl-C while the new winner is compared with the library (its best.so and source already
    written): one line, exit 130, the earlier export byte for byte, no scratch folder left."""
    folder, before = _exported(tmp_path)

    def interrupt(monkeypatch, export):
        def compare(*args, **kwargs):
            raise KeyboardInterrupt
        monkeypatch.setattr(export, "versus_vendor", compare)

    ended, err = _export_in_process(folder, monkeypatch, capsys, interrupt)
    assert ended.code == 130 and err.strip() == f"export: interrupted; the earlier export in {folder / 'export'} is intact"
    assert _files(folder / "export") == before
    assert sorted(p.name for p in folder.iterdir()) == [".export.lock", "db", "export"]  # no scratch folder left


@pytest.mark.slow(seconds=45)
def test_a_disk_that_fills_while_best_json_is_written_leaves_the_earlier_export(tmp_path, monkeypatch, capsys):
    import errno

    folder, before = _exported(tmp_path)

    def full(monkeypatch, export):
        def write(self, out):
            (Path(out) / "best.json").write_text("")  # what a full disk leaves: an empty file
            raise OSError(errno.ENOSPC, "No space left on device", str(Path(out) / "best.json"))
        monkeypatch.setattr(export.Best, "write", write)

    ended, _ = _export_in_process(folder, monkeypatch, capsys, full)
    assert "No space left on device; the earlier export in" in str(ended.code) and "\n" not in str(ended.code)
    assert _files(folder / "export") == before
    again = _export(folder, "--force")  # and a later export is not refused by an empty best.json
    assert again.returncode == 0, again.stderr


@pytest.mark.slow(seconds=15)
def test_two_exports_into_one_folder_do_not_both_write_it(tmp_path):
    import fcntl

    folder, before = _exported(tmp_path)
    with open(folder / ".export.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        second = _export(folder, "--force")
    assert second.returncode == 1 and second.stderr.strip() == (
        f"export: another process is writing {folder / 'export'}: wait for it to finish")
    assert _files(folder / "export") == before


def test_an_export_refuses_to_replace_a_folder_of_other_files(tmp_path):
    folder = _experiment(tmp_path)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    out = _export(folder, "--out", str(tmp_path / "mine"), "--force")
    assert out.returncode == 1 and "holds files but no earlier export" in out.stderr
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


@pytest.fixture(scope="module")
def export_once(tmp_path_factory) -> Path:
    """A real export of the quickstart experiment, made once for the loading tests to damage copies of."""
    folder, _ = _exported(tmp_path_factory.mktemp("export-once"))
    return folder / "export"


def _damaged(export_once: Path, tmp_path: Path, change) -> Path:
    import shutil

    copy = tmp_path / "export"
    shutil.copytree(export_once, copy)
    change(copy)
    return copy


def _edit(**fields):
    def change(folder: Path) -> None:
        data = json.loads((folder / "best.json").read_text())
        data.update(fields)
        for name in [k for k, v in fields.items() if v is _DROP]:
            del data[name]
        (folder / "best.json").write_text(json.dumps(data))
    return change


_DROP = object()


@pytest.mark.slow(seconds=5)
@pytest.mark.parametrize("change, message", [
    (_edit(library="/usr/lib/x86_64-linux-gnu/libc.so.6"), "field 'library' must name a file next to best.json"),
    (_edit(library="../../evil.so"), "field 'library' must name a file next to best.json"),
    (_edit(parameter_id="7"), "field 'parameter_id' must be int, got str"),
    (_edit(workload=_DROP), "field 'workload' is missing"),
    (_edit(workload={"name": "x"}), "its workload or target cannot be read"),
    (_edit(target={"kind": "tpu"}), "its workload or target cannot be read"),
    (lambda f: (f / "best.json").write_text((f / "best.json").read_text()[:200]), "is not JSON"),
    (lambda f: (f / "best.so").write_bytes((f / "best.so").read_bytes()[:5000]), "is cut short"),
    (lambda f: (f / "best.so").write_bytes(b"not a library"), "is not a 64-bit little-endian ELF library"),
], ids=["absolute-library", "climbing-library", "wrong-type", "missing-field", "bad-workload", "bad-target", "cut-json",
        "cut-library", "not-elf"])
def test_loading_a_damaged_export_is_one_value_error_naming_the_file(export_once, tmp_path, change, message):
    """In a process of its own: a library cut short must not kill the caller with SIGBUS."""
    folder = _damaged(export_once, tmp_path, change)
    code = ("from nni_opevo_tools.best import load_kernel\n"
            f"try:\n    load_kernel({str(folder)!r})\nexcept ValueError as e:\n    print('REFUSED', e)\n")
    found = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert found.returncode == 0 and found.stdout.startswith("REFUSED ") and message in found.stdout, found
    assert str(folder) in found.stdout and len(found.stdout.strip().splitlines()) == 1


@pytest.mark.parametrize("timed", [True, False], ids=["timed", "untimed"])
def test_trials_of_reused_parameter_ids_all_rank(tmp_path, timed):
    """After a dispatcher crash and ``nnictl resume``, NNI hands parameter ids 1-3 out again to
    new trial jobs: every trial is ranked (by id alone, 3 of 51 would hide), each with the
    parameters it ran: the record of its id made last before its result, or, in records
    without times, the record of its own job."""
    from nni_opevo_tools.experiment_client import ExperimentDatabase

    resumed = {**PARAMS, "tile_k": [32, 8]}

    def resume(db):
        (later,) = db.execute("SELECT max(timestamp) + 1000 FROM TrialJobEvent").fetchone()
        for job, pid in (("re1", 1), ("re2", 2), ("re3", 3)):
            data = json.dumps({"parameter_id": pid, "parameter_source": "algorithm",
                               "parameters": resumed, "parameter_index": 0})
            made = later + 10 * pid if timed else None
            db.execute("INSERT INTO TrialJobEvent (timestamp, trialJobId, event, data) VALUES (?, ?, 'WAITING', ?)",
                       (made, job, data))
            db.execute("INSERT INTO MetricData (timestamp, trialJobId, parameterId, type, sequence, data) "
                       "VALUES (?, ?, ?, 'FINAL', 0, ?)",
                       (made and made + 5, job, str(pid), json.dumps(json.dumps({"default": 0.5 + pid}))))

    folder = _experiment(tmp_path)
    first = {t.trial_job: t.parameters for t in ExperimentDatabase(str(folder)).ranked()}
    _experiment(tmp_path / "resumed", resume)
    ranked = ExperimentDatabase(str(tmp_path / "resumed" / "exp")).ranked()
    assert len(ranked) == 48 + 3 and len({t.trial_job for t in ranked}) == 51
    assert [(t.parameter_id, t.trial_job) for t in ranked[:3]] == [(3, "re3"), (2, "re2"), (1, "re1")]
    assert all(t.parameters == resumed for t in ranked[:3])
    assert all(t.parameters == first[t.trial_job] for t in ranked[3:])


SWAPPED_JOBS_DB = ROOT / "tests" / "data" / "quickstart-swapped-jobs.sqlite"
"""The database of an earlier quickstart experiment, whose trials took the record NNI 3.0 handed
them (before ``trial_code/nni_channel.py`` read each job's own): two of them ran each other's."""


def test_each_result_takes_the_parameters_of_its_own_parameter_id_where_nni_swapped_the_jobs(tmp_path):
    """In a quickstart's real database NNI 3.0 attached parameter 1's record to the job that ran
    parameter 0 and 0's to the one that ran 1 (microsoft/nni#5726; two trials started 8 ms apart).
    Each result is ranked with the parameters of the id it reported: matched by job, the export had
    re-measured and shipped another trial's configuration under the fastest one's TFLOPS."""
    import sqlite3

    from nni_opevo_tools.experiment_client import ExperimentDatabase

    folder = _experiment(tmp_path, recorded=SWAPPED_JOBS_DB)
    with sqlite3.connect(folder / "db" / "nni.sqlite") as db:
        carried = {job: json.loads(data) for job, data in db.execute(
            "SELECT trialJobId, data FROM TrialJobEvent WHERE event = 'RUNNING' AND data IS NOT NULL")}
        reported = dict(db.execute("SELECT trialJobId, CAST(parameterId AS INTEGER) FROM MetricData "
                                   "WHERE type = 'FINAL'"))
    swapped = sorted(job for job in reported if carried[job]["parameter_id"] != reported[job])
    assert swapped == ["gbMze", "yaziM"]  # the database as NNI wrote it
    generated = {record["parameter_id"]: record["parameters"] for record in carried.values()}
    ranked = ExperimentDatabase(str(folder)).ranked()
    assert len(ranked) == 48
    assert all(t.parameters == generated[t.parameter_id] for t in ranked)
    by_job = {t.trial_job: t for t in ranked}
    assert [by_job[job].parameter_id for job in swapped] == [0, 1]
    assert by_job["gbMze"].parameters == carried["yaziM"]["parameters"] != carried["gbMze"]["parameters"]


NESTED_TWO_DEEP = {"top": {"_type": "choice", "_value": [
    {"_name": "a", "mid": {"_type": "choice", "_value": [
        {"_name": "x", "c": {"_type": "choice", "_value": [1, 2, 3]}, "t": {"_type": "factor", "_value": [16, 2]}},
        {"_name": "y"}]}},
    {"_name": "b", "d": {"_type": "uniform", "_value": [0, 1]}}]}}


@pytest.mark.parametrize("builtin", ["TPE", "Random", "Anneal"])
def test_nni_builtins_through_choice_view_take_choices_nested_two_deep(builtin):
    """NNI 3.0's built-ins raise KeyError(('top', 0, 'mid')) on such a space once a trial took
    the other branch; through the view they tune it to the end."""
    from nni_opevo import ChoiceViewTuner, SearchSpace

    tuner = ChoiceViewTuner(tuner=builtin, tuner_args={} if builtin == "Anneal" else {"seed": 0})
    tuner.update_search_space(NESTED_TWO_DEEP)
    space = SearchSpace(NESTED_TWO_DEEP)
    for i in range(30):
        params = tuner.generate_parameters(i)
        space.from_trial(params)  # a valid configuration of the nested space
        tuner.receive_trial_result(i, params, float(i % 5))
        tuner.trial_end(i, True)


@pytest.mark.parametrize("builtin", ["TPE", "Evolution", "Anneal", "Random"])
def test_nni_builtins_through_choice_view_count_a_result_without_a_number_as_a_failure(builtin):
    """NNI's TPE and Evolution raised on {'x': 1}, None or a string and the experiment ended in
    ERROR; through the view such a result ends the trial as failed, and imported records
    without a number are skipped, as docs/reliability.md says of every tuner."""
    from nni_opevo import ChoiceViewTuner

    args = {"Anneal": {}, "Evolution": {"population_size": 4, "optimize_mode": "maximize"}}.get(builtin, {"seed": 0})
    tuner = ChoiceViewTuner(tuner=builtin, tuner_args=args)
    space = {"a": {"_type": "choice", "_value": [1, 2, 3, 4, 5]}, "b": {"_type": "uniform", "_value": [0, 1]}}
    tuner.update_search_space(space)
    unusable = [{"x": 1}, None, "fast", {"default": "1.0"}, float("nan")]
    for i in range(25):
        params = tuner.generate_parameters(i)
        tuner.receive_trial_result(i, params, unusable[i % 5] if i % 2 else float(i))
        tuner.trial_end(i, True)
    tuner.import_data([{"parameter": {"a": 1, "b": 0.5}, "value": value} for value in unusable]
                      + [{"parameter": {"a": 2, "b": 0.25}, "value": 3.0}])
    tuner.generate_parameters(100)


def test_a_bulk_import_fits_autotvms_model_once(monkeypatch):
    """10,000 imported results (``nnictl resume`` of a long experiment): one fit, not one per
    plan_size records (157 fits took minutes), and the tuner then proposes from that model."""
    from nni_opevo import AutoTVMTuner
    from nni_opevo.peers import autotvm

    fits = []
    real = autotvm.XGBoostCostModel.fit
    monkeypatch.setattr(autotvm.XGBoostCostModel, "fit", lambda self, x, y: (fits.append(len(y)), real(self, x, y)))
    space = {"t": {"_type": "factor", "_value": [2 ** 10 * 3 ** 4, 4]}, "o": {"_type": "perm", "_value": list("abc")}}
    tuner = AutoTVMTuner(seed=0, plan_size=64)
    tuner.update_search_space(space)
    rng = np.random.default_rng(0)
    from nni_opevo import SearchSpace

    searched = SearchSpace(space)
    records = [{"parameter": searched.to_trial(searched.sample(rng)), "value": float(rng.random())}
               for _ in range(10_000)]
    tuner.import_data(records)
    assert len(fits) == 1 and fits[0] > 1000
    tuner.generate_parameters(0)


def test_a_slow_constraint_that_refuses_almost_everything_is_logged_and_given_up_on(monkeypatch, caplog):
    """A space of 150,000 configurations whose constraint refuses each in 2 ms: the first proposal
    would list them all (5 minutes, no log line); it logs its count while looking and gives up
    after the bound, with the count and the time per call in the message."""
    import logging

    from nni_opevo import OpEvoTuner
    from nni_opevo import constraint as hook

    monkeypatch.setattr(hook, "PROPOSAL_S", 1.0)
    monkeypatch.setattr(hook, "LOG_EVERY_S", 0.25)
    tuner = OpEvoTuner(seed=0, constraint="constraints:slow_refusal")
    tuner.update_search_space({"x": {"_type": "randint", "_value": [0, 150_000]}})
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="nni_opevo.constraint"), pytest.raises(hook.ConstraintGaveUp) as gave_up:
        tuner.generate_parameters(0)
    assert time.monotonic() - started < 10
    assert re.search(r"refused (\d+) of \1 candidates in 1 s while looking for one trial's configuration "
                     r"\(\d+\.\d ms a call\)", str(gave_up.value)), str(gave_up.value)
    assert sum("still looking for one trial's configuration" in r.message for r in caplog.records) >= 2


def test_tpe_through_choice_view_survives_a_changed_search_space():
    """TPE mixed the old space's history into the new one (ValueError: a and p must have same
    size); the view rebuilds it on the new space with the results that fit."""
    from nni_opevo import ChoiceViewTuner

    tuner = ChoiceViewTuner(tuner="TPE", tuner_args={"seed": 0})
    before = {"a": {"_type": "choice", "_value": [1, 2, 3, 4, 5]}, "b": {"_type": "uniform", "_value": [0, 1]}}
    tuner.update_search_space(before)
    for i in range(30):
        params = tuner.generate_parameters(i)
        tuner.receive_trial_result(i, params, float(i % 7))
    tuner.update_search_space({"a": {"_type": "choice", "_value": [1, 2]}, "b": {"_type": "uniform", "_value": [0, 1]}})
    for i in range(100, 110):
        params = tuner.generate_parameters(i)
        assert params["a"] in (1, 2)
        tuner.receive_trial_result(i, params, 1.0)


def test_choice_view_skips_imported_records_without_a_value_and_keeps_a_top_level_name():
    from nni_opevo import ChoiceViewTuner

    tuner = ChoiceViewTuner(tuner="TPE", tuner_args={"seed": 0})
    tuner.update_search_space({"_name": {"_type": "choice", "_value": [1, 2]}, "b": {"_type": "choice", "_value": [3, 4]}})
    tuner.import_data([{"parameter": {"_name": 1, "b": 3}}, {"parameter": {"_name": 2, "b": 4}, "value": 1.0}])
    params = tuner.generate_parameters(0)
    assert set(params) == {"_name", "b"}, params
