"""A real NNI experiment on loopback, driven through ``nnictl`` and NNI's REST API.

Reads results through ``nni_opevo_tools.experiment_client``, which matches them to configurations
by parameter id (NNI 3.0's job listings mismatch them: microsoft/nni#5726).
"""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil
import yaml

from nni_opevo_tools.experiment_client import (
    MISSED_CONNECT,
    NNICTL,
    STARTS,
    CreateFailed,
    ExperimentClient,
    create,
    start,
)

LOG_WAIT_S = 10.0
"""How long a log may take to show a line: a user looks for an error within seconds."""
STOP_TIMEOUT_S = 120.0
"""How long an experiment's manager may take to end once stopped."""
_stopping: list[tuple[str, psutil.Process]] = []


def stop_in_background(experiment_id: str, env: dict[str, str]) -> None:
    """Stop an experiment a test is done with as ``nnictl stop`` does, without waiting for it to
    end. NNI 3.0's stop reads the manager's pid from ``~/nni-experiments/.experiment`` (``HOME`` in
    ``env``), sends it SIGTERM and waits for it, and the manager ends its tuner and trials; here
    the test sends the signal itself, because a ``nnictl`` process spends 1.8 s of CPU importing
    NNI (some 50 s of the suite's, on two cores). The tests of stopping itself run ``nnictl stop``
    (``Experiment.stop``). NNI's manager takes 3-6 s to end: it polls its tuner's process every
    second, and the tuner's command threads poll their queue every 3 s before they see the stop.
    ``stops_finished`` waits for them all when the session ends (``conftest.experiments_stopped``)."""
    registry = Path(env.get("HOME", "~")).expanduser() / "nni-experiments" / ".experiment"
    try:
        pid = json.loads(registry.read_text())[experiment_id]["pid"]
        if not isinstance(pid, int):  # psutil.Process(None) would be this process
            return
        manager = psutil.Process(pid)
        if experiment_id not in manager.cmdline():  # the pid of an experiment that has already ended
            return
        manager.terminate()
    except (OSError, ValueError, KeyError, TypeError, psutil.Error):
        return  # no record of it, or it has ended: nothing to stop
    _stopping.append((experiment_id, manager))


def stops_finished() -> list[str]:
    """Waits for every ``stop_in_background``; the experiments whose managers still ran after
    ``STOP_TIMEOUT_S`` (killed then), so that the session fails on a stop that hangs."""
    hung = []
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while _stopping:
        experiment_id, manager = _stopping.pop()
        try:
            manager.wait(timeout=max(0.0, deadline - time.monotonic()))
        except psutil.TimeoutExpired:
            manager.kill()
            hung.append(experiment_id)
        except psutil.NoSuchProcess:
            pass
    return hung


def launched_ids(stdout: str) -> list[str]:
    """The experiments ``nni-opevo launch`` started, in order (it starts one again whose tuner
    missed NNI's deadline to connect)."""
    return re.findall(r"^experiment (\w+) \(", stdout, re.MULTILINE)


def launched_id(stdout: str) -> str | None:
    """The experiment ``nni-opevo launch`` ran to its end: the last one it started."""
    started = launched_ids(stdout)
    return started[-1] if started else None


def nnictl(*args: str, env: dict[str, str], cwd: str | Path | None = None, timeout: float = 120) -> str:
    """``nnictl <args>``: everything it printed."""
    out = subprocess.run([*NNICTL, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    return out.stdout + out.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_servers(variable: str, value: str) -> set[int]:
    """The experiments' worker servers (``trial_code.fork_server`` under a name) whose environment sets
    ``variable`` to ``value``; their waiters and workers, forked from them, carry the same command
    line, and are told apart by their parent."""
    found = {}
    for process in psutil.process_iter(["cmdline"]):
        try:
            command = process.info["cmdline"] or []
            if "trial_code.fork_server" in command and "--listen" in command and process.environ().get(variable) == value:
                found[process.pid] = process.ppid()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return {pid for pid, parent in found.items() if parent not in found}


class Experiment:
    def __init__(self, workdir: Path, config: dict[str, Any], env: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.client = ExperimentClient(self.port)
        # A HOME of the test's own: nnictl keeps its registry of experiments in ~/nni-experiments
        # behind a lock that is not atomic, so experiments created at once by parallel test
        # workers could overwrite each other's entries; and the tests stay out of the real home.
        home = workdir / "home"
        home.mkdir(exist_ok=True)
        self.env = {**os.environ, "HOME": str(home), **(env or {})}
        config = {"experimentWorkingDirectory": str(workdir / "nni"), **config}
        self.config_path = workdir / "config.yml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.id: str | None = None
        self.starts = 0
        self.stopped = False

    def nnictl(self, *args: str, timeout: float = 120) -> str:
        return nnictl(*args, env=self.env, cwd=self.workdir, timeout=timeout)

    def __enter__(self) -> Experiment:
        self.starts += 1
        try:
            self.id = create(str(self.config_path), self.port, env=self.env, cwd=str(self.workdir))
        except CreateFailed as failed:
            raise AssertionError(f"nnictl create failed:\n{failed.printed}") from None
        return self

    def resume(self) -> None:
        """``nnictl resume`` the stopped experiment on the same port, once its server answers."""
        out = start(["resume", str(self.id), "--port", str(self.port)], env=self.env, cwd=str(self.workdir),
                    timeout=120)
        assert "Web portal URLs" in out, f"nnictl resume failed:\n{out}"
        self.stopped = False
        deadline = time.time() + 60
        while True:
            try:
                self.get("check-status")
                return
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.5)

    def __exit__(self, *exc: Any) -> None:
        if self.id and not self.stopped:
            stop_in_background(self.id, self.env)

    def stop(self) -> None:
        """``nnictl stop``, waiting for NNI to end: for a test that reads the stopped
        experiment's files, or whose servers (SSH) the stop still talks to."""
        self.nnictl("stop", str(self.id), timeout=STOP_TIMEOUT_S)
        self.stopped = True

    def get(self, path: str) -> Any:
        return self.client.get(path)

    def wait(self, timeout: float = 300) -> dict[str, Any]:
        """Poll until the experiment has ended (``ExperimentClient.ended``); returns the final check-status."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            status = self.client.status()
            if self.client.ended(status) and not self._started_again(status):
                return status
            time.sleep(0.25)
        raise TimeoutError(f"experiment {self.id} still running after {timeout} s: {self.get('check-status')}")

    def wait_for_results(self, n: int, timeout: float = 300, until_ended: bool = True) -> None:
        """Poll until ``n`` final results are in (e.g. after raising maxTrialNumber), and, with
        ``until_ended``, until the experiment has ended."""
        deadline = time.time() + timeout
        while len(self.results()) < n:
            self._started_again(self.client.status())
            if time.time() > deadline:
                raise TimeoutError(f"only {len(self.results())} of {n} results after {timeout} s")
            time.sleep(0.5)
        if until_ended:
            self.wait(timeout)

    def _started_again(self, status: dict[str, Any]) -> bool:
        """Whether the experiment's tuner missed NNI's 10-s deadline to connect (a loaded
        machine; nothing ran) and it was stopped and created again, as ``nni-opevo launch``
        does, up to ``STARTS`` times."""
        if status["status"] != "ERROR" or MISSED_CONNECT not in str(status.get("errors")) or self.starts >= STARTS:
            return False
        self.nnictl("stop", str(self.id))
        self.__enter__()
        return True

    def worker_servers(self) -> set[int]:
        """The processes this experiment's trials now fork their workers from."""
        return worker_servers("NNI_EXP_ID", str(self.id))

    def running_trials(self) -> int:
        return self.client.running_trials()

    def parameters(self) -> dict[int, dict[str, Any]]:
        return self.client.parameters()

    def results(self) -> dict[int, Any]:
        return self.client.results()

    def dispatcher_log(self, containing: str | None = None) -> str:
        """The tuner's log (``_log``: ``containing``)."""
        return self._log("dispatcher.log", containing)

    def manager_log(self, containing: str | None = None) -> str:
        """NNI manager's log: where NNI 3.0 writes an error a tuner reports (its check-status,
        shown by nnictl and the web UI, says only 'Dispatcher stream error'); ``_log``:
        ``containing``."""
        return self._log("nnimanager.log", containing)

    def _log(self, name: str, containing: str | None, timeout: float = LOG_WAIT_S) -> str:
        """The experiment's log ``name``; with ``containing``, read again until it holds that
        text or ``timeout`` seconds pass. NNI's manager buffers its log: the experiment's status
        can read ERROR a moment before the line saying why reaches the file."""
        path = self.workdir / "nni" / str(self.id) / "log" / name
        deadline = time.time() + timeout
        while True:
            text = path.read_text() if path.exists() else ""
            if containing is None or containing in text or time.time() > deadline:
                return text
            time.sleep(0.2)
