"""Evaluate one configuration end to end, never hanging and never raising: the trial's parent side.

Static feasibility is checked here, in milliseconds and without TVM; a user's operator's, whose
template loads TVM with the user's module, in the worker (on the CPU under the device's lock, where
the import cannot slow another trial's measurement). Everything else runs in a
``worker`` child process in its own session (a program of its own, or within ``forked.workers()``
forked from a process that has TVM loaded), so a build that exceeds ``build_timeout`` or a
kernel that exceeds ``run_timeout`` (counted from when the device lock is held, so waiting for
other trials' measurements never counts) is killed with its compilers, and a crash is turned
into a status from the phase it happened in. Waiting for the device lock is bounded too
(``lock_timeout`` behind any one holder: DEVICE_BUSY). The worker dies with this process, whatever ends it: its
watcher kills the worker's session when this process's end closes their pipe (``worker``).
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from . import forked
from .status import Status
from .targets import Target
from .templates import Infeasible, for_workload, loads_tvm
from .worker import WATCH_ENV
from .workloads import Workload


@dataclass
class Result:
    status: Status
    tflops: float = 0.0
    latency_ms: float | None = None
    build_s: float | None = None
    error: str = ""
    total_s: float = 0.0
    repeats_ms: tuple[float, ...] = ()
    arch: str = ""
    """What the kernel was built for (CUDA arch or LLVM CPU name): a kernel tuned for one CPU or
    GPU is not the best, or not valid, on another; empty when nothing was built."""
    wait_s: float | None = None
    """Seconds the built kernel waited for the device's lock (None: it never waited for it)."""
    measure_s: float | None = None
    """Seconds the device was held to upload, check and time the kernel."""

    def report(self) -> dict[str, Any]:
        """The dict for ``nni.report_final_result``: 'default' is TFLOPS, 0.0 on any failure."""
        return {"default": self.tflops, "latency_ms": self.latency_ms, "status": self.status.name,
                "build_s": self.build_s, "error": self.error, "arch": self.arch}


@dataclass(frozen=True)
class Limits:
    build_timeout: float = 120.0
    run_timeout: float = 60.0
    repeat: int = 5
    min_repeat_ms: int = 50
    seed: int = 0
    lock_timeout: float | None = None
    """Seconds a trial may wait while one other process holds the device's measurement lock,
    before DEVICE_BUSY (on a GPU with its kernel built; on the CPU before building, see
    ``worker.run``); each turn of another holder starts the wait again. None: ``lock_wait``."""

    @property
    def lock_wait(self) -> float:
        """The wait behind one holder of the device: ``lock_timeout``, else ``LOCK_WAITS`` x
        ``run_timeout`` plus ``build_timeout``. A holder keeps the lock for at most two of its run
        timeouts (computing the reference, then measuring), and on the CPU its build too (its
        watcher kills it with its trial, and the OS frees a dead holder's lock at once), so only a
        holder past any trial's limits (another user's job, a stuck process) outlasts it; a queue
        of trials in flight does not, as the wait starts again at each turn
        (``device_lock.exclusive``)."""
        if self.lock_timeout is not None:
            return self.lock_timeout
        return LOCK_WAITS * self.run_timeout + self.build_timeout


LOCK_WAITS = 3


DEFAULT_LIMITS = Limits()
def evaluate(workload: Workload, params: dict[str, Any] | None, target: Target, limits: Limits = DEFAULT_LIMITS,
             build_only: bool = False, source_path: str | None = None, unchecked: bool = False,
             library_path: str | None = None) -> Result:
    """``source_path``: where to write the generated kernel source (CUDA C or LLVM IR) once built;
    ``library_path``: where to write it compiled, as a library ``trial_code.library`` loads.
    ``params`` None evaluates TVM's default schedule (``kernel.scheduled``). ``unchecked``: skip
    the static feasibility check and let the device decide (how the GPU campaign compares the
    check's limits with what the GPU accepts)."""
    start = time.perf_counter()
    result = _evaluate(workload, params, target, limits, build_only, source_path, unchecked, library_path)
    result.total_s = time.perf_counter() - start
    return result


def _evaluate(workload: Workload, params: dict[str, Any] | None, target: Target, limits: Limits, build_only: bool,
              source_path: str | None, unchecked: bool, library_path: str | None) -> Result:
    checked = params is not None and not unchecked
    in_worker = checked and loads_tvm(workload)  # this process stays light: the worker loads the user's module
    try:
        if checked and not in_worker:
            for_workload(workload).check(workload, params, target)
    except Infeasible as exc:
        return Result(Status.INSTANTIATION_ERROR, error=str(exc))
    if target.kind == "cuda" and not target.has_device and not build_only:
        return Result(Status.RUNTIME_DEVICE, error="no CUDA device is visible here "
                      f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); use target cpu")
    job = {"workload": workload.to_json(), "params": params, "target": target.to_json(), "seed": limits.seed,
           "repeat": limits.repeat, "min_repeat_ms": limits.min_repeat_ms, "run_timeout": limits.run_timeout,
           "build_only": build_only,
           "source_path": source_path, "library_path": library_path, "lock_timeout": limits.lock_wait,
           "check": in_worker}
    with tempfile.TemporaryFile("w+") as stderr:
        events, returncode, timed_out = _run_worker(job, limits, stderr)
        ended = time.monotonic()
        stderr.seek(0)
        tail = stderr.read()[-1500:].strip()
    built = next((e for e in events if e["event"] == "built"), None)
    build_s = built["build_s"] if built else None
    result = _verdict(workload, limits, events, returncode, timed_out, build_s, tail)
    result.arch = built["arch"] if built else ""
    at = {e["event"]: e["at"] for e in events}
    if "locked" in at:  # the CPU: the lock is taken before the build
        result.wait_s = at["locked"] - at["waiting"]
    elif "measuring" in at and "built" in at:
        result.wait_s = at["measuring"] - at["built"]
    if "measuring" in at:
        result.measure_s = (at.get("done") or at.get("failed") or ended) - at["measuring"]
    return result


def _verdict(workload: Workload, limits: Limits, events: list[dict[str, Any]], returncode: int, timed_out: bool,
             build_s: float | None, tail: str) -> Result:
    """The Result the worker's events, exit and time limits amount to."""
    phases = {e["event"] for e in events}
    if timed_out:
        if "measuring" in phases:
            return Result(Status.RUN_TIMEOUT, build_s=build_s, error=f"killed after the {limits.run_timeout:g} s limit")
        if "preparing" in phases and "prepared" not in phases:
            return Result(Status.RUN_TIMEOUT, build_s=build_s, error=(
                f"computing the reference the kernel is checked against took past the {limits.run_timeout:g} s "
                "limit (an operator without a reference runs TVM's unscheduled loop nest for it: give it a "
                "NumPy reference, or a smaller shape)"))
        if "built" in phases or ("waiting" in phases and "locked" not in phases):
            return Result(Status.DEVICE_BUSY, build_s=build_s,
                          error=f"the device stayed busy for {limits.lock_wait:g} s (and the worker did not say so)")
        return Result(Status.BUILD_TIMEOUT, build_s=build_s, error=f"killed after the {limits.build_timeout:g} s limit")
    last = events[-1] if events else {}
    if last.get("event") == "failed":
        return Result(Status[last["status"]], build_s=build_s, error=last["error"])
    if last.get("event") == "done":
        if last["latency_s"] is None:  # build only
            return Result(Status.NO_ERROR, build_s=build_s)
        latency = last["latency_s"]
        return Result(Status.NO_ERROR, tflops=last["flops"] / latency / 1e12,
                      latency_ms=latency * 1e3,
                      build_s=build_s, repeats_ms=tuple(r * 1e3 for r in last["repeats_s"]))
    # The worker died without a verdict: a crash inside TVM, the compiler or the kernel.
    how = _signalled(-returncode) if returncode < 0 else f"exit code {returncode}"
    status = (Status.RUNTIME_DEVICE if "measuring" in phases
              else Status.UNKNOWN_ERROR if "built" in phases else Status.COMPILE_HOST)
    return Result(status, build_s=build_s, error=f"worker died ({how}): {tail[-800:]}")


SIGNAL_CAUSES = {signal.SIGFPE: "an integer division by zero (or of the least integer by -1) in the computation: "
                                 "declare the divisor's values without zero, Operator(values={name: (1, high)})"}
"""What a signal that kills a worker most likely means, where the user can act on it."""


def _signalled(number: int) -> str:
    """``signal 8, SIGFPE: <its likely cause>``, or the number alone for one Python does not name."""
    try:
        found = signal.Signals(number)
    except ValueError:
        return f"signal {number}"
    cause = SIGNAL_CAUSES.get(found)
    return f"signal {number}, {found.name}" + (f": {cause}" if cause else "")


def _run_worker(job: dict[str, Any], limits: Limits, stderr: Any) -> tuple[list[dict[str, Any]], int, bool]:
    """(events, return code, whether a time limit killed it). Events are read straight from the
    pipe's descriptor: a buffered reader could hold a second event the selector never reports,
    and the deadline of that phase would then not be kept."""
    env = dict(os.environ)
    env["PYTHONPATH"] = PACKAGES + os.pathsep + env.get("PYTHONPATH", "")
    # The worker's watcher reads this pipe; only this process writes it, so it closes when this
    # process ends, however that happens, and the watcher then kills the worker's session.
    watch_read, watch_write = os.pipe()
    try:
        process: subprocess.Popen | forked.Forked | None = forked.start(job, stderr.fileno(), watch_read, env)
        if process is None:  # outside ``forked.workers()``: the worker is a program of its own
            process = subprocess.Popen([sys.executable, "-m", "trial_code.worker"], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=stderr, env={**env, WATCH_ENV: str(watch_read)},
                                       start_new_session=True, pass_fds=(watch_read,))
    finally:
        os.close(watch_read)
    try:
        return _follow_worker(process, job, limits)
    finally:
        os.close(watch_write)  # the worker has ended: its watcher now sweeps what it left


def _follow_worker(process: subprocess.Popen | forked.Forked, job: dict[str, Any], limits: Limits
                   ) -> tuple[list[dict[str, Any]], int, bool]:
    assert process.stdout is not None
    events: list[dict[str, Any]] = []
    timed_out = False
    try:
        if process.stdin is not None:  # a forked worker has its job already
            process.stdin.write(json.dumps(job).encode())
            process.stdin.close()
        fd = process.stdout.fileno()
        deadline: float | None = time.monotonic() + limits.build_timeout
        pending = b""
        ended = False
        while not ended:
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([fd], [], [], wait)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            ended = not chunk
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                event = json.loads(line)
                event["at"] = time.monotonic()
                events.append(event)
                # Each phase has its own limit from when it starts: building, computing the
                # inputs and reference (the run limit), waiting for the device (a margin past the
                # worker's own lock timeout, which starts again at each turn of another holder; on
                # the CPU before the build, see ``worker.run``), measuring.
                waiting = time.monotonic() + limits.lock_wait + LOCK_MARGIN_S
                running = time.monotonic() + limits.run_timeout
                deadline = {"waiting": waiting, "locked": time.monotonic() + limits.build_timeout,
                            "built": waiting, "preparing": running, "prepared": waiting, "turn": waiting,
                            "measuring": running}.get(event["event"], deadline)
    except BaseException:
        _kill(process, grace=0)  # interrupted (SIGINT, an error of ours): the worker goes with us
        raise
    finally:
        if timed_out or process.poll() is None:
            _kill(process, grace=0 if timed_out else 5)
    return events, process.wait(), timed_out


PACKAGES = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
"""The folder that holds ``trial_code`` (a checkout or site-packages): the worker imports the same
trial code as this process, wherever that process was started."""
LOCK_MARGIN_S = 30.0
"""Past the worker's lock timeout, how long the parent waits for it to report DEVICE_BUSY itself."""


def _kill(process: subprocess.Popen | forked.Forked, grace: float) -> None:
    """Kill the worker's whole session (it may have nvcc or a linker running), after ``grace`` s."""
    if grace:
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
