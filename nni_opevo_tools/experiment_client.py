"""Create an NNI 3.0 experiment and read it: live through its REST API, or from its own database file.

Results are matched to configurations by the parameter id of each FINAL metric: NNI 3.0 may
attach hyper-parameters to the wrong trial job in its listings and events (microsoft/nni#5726:
of two trials started together, each job's record names the other's parameters), but a
metric's parameter id, and the id inside each hyper-parameter record, are the ones that ran.
Both sources hold the same records, so one ``Ranking`` reads either.
"""
from __future__ import annotations

import json
import math
import os
import re
import sqlite3
import subprocess
import sys
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

NNICTL = [sys.executable, "-m", "nni.tools.nnictl.nnictl"]
ENDED = ("DONE", "ERROR", "STOPPED")
NO_MORE = ("NO_MORE_TRIAL", "TUNER_NO_MORE_TRIAL")
FINAL_EVENTS = ("SUCCEEDED", "FAILED", "USER_CANCELED", "SYS_CANCELED", "EARLY_STOPPED")
"""The trial events NNI records once a trial has ended."""


STARTS = 3
"""How many times an experiment is started when NNI's start-up misses one of its own deadlines
(a loaded machine) before anything ran."""
MISSED_CONNECT = "Tuner did not connect"
"""What NNI 3.0's manager reports when the tuner's process has not connected 10 s after it
started it (a constant of NNI's code). On a loaded machine, importing NNI alone can take that
long; the experiment then ends in ERROR before its first trial, so starting it again loses
and repeats nothing."""


def created_id(nnictl_create_output: str) -> str | None:
    """The experiment id ``nnictl create`` printed, or None when it failed."""
    found = re.search(r"nnictl stop (\w+)", nnictl_create_output)
    return found.group(1) if found else None


def web_server_missed(nnictl_output: str) -> bool:
    """Whether ``nnictl create`` (or ``resume``) gave up on NNI's web server before it answered:
    NNI 3.0's launcher asks it four times a second apart, which node can miss on a loaded machine,
    and then kills the manager before it registered or ran anything, so starting again repeats
    nothing. The launcher logs the first line on starting the server and the second once it answered."""
    return "Starting web server..." in nnictl_output and "Setting up..." not in nnictl_output


class CreateFailed(RuntimeError):
    """``nnictl create`` failed: the message is the one line saying why (the exception nnictl's
    traceback ends with, else its last line); ``printed`` is everything it printed."""

    def __init__(self, printed: str) -> None:
        lines = [line.strip() for line in printed.splitlines() if line.strip()]
        raised = [line for line in lines if re.match(r"[\w.]+(Error|Exception): ", line)]
        super().__init__((raised or lines or ["it printed nothing"])[-1])
        self.printed = printed


def start(args: list[str], *, env: dict[str, str] | None = None, cwd: str | None = None,
          say: Callable[[str], None] | None = None, timeout: float | None = None) -> str:
    """``nnictl create ...`` or ``nnictl resume ...`` (``args``); everything it printed. Run
    again, up to ``STARTS`` times in all, while NNI's web server misses nnictl's deadline
    (``web_server_missed``), each time with a line to ``say``."""
    again = {"create": "creating", "resume": "resuming"}[args[0]]
    attempt = 1
    while True:
        out = subprocess.run([*NNICTL, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
        printed = out.stdout + out.stderr
        if attempt == STARTS or not web_server_missed(printed):
            return printed
        attempt += 1
        if say is not None:
            say(f"NNI's web server did not answer nnictl within its 3 s (a loaded machine); {again} the "
                f"experiment again ({attempt} of {STARTS})")


def create(config: str, port: int, *, env: dict[str, str] | None = None, cwd: str | None = None,
           say: Callable[[str], None] | None = None) -> str:
    """``nnictl create`` the experiment ``config`` describes on ``port`` (``start``: again while
    the web server misses nnictl's deadline); returns its id, or raises ``CreateFailed``."""
    printed = start(["create", "--config", config, "--port", str(port)], env=env, cwd=cwd, say=say)
    experiment_id = created_id(printed)
    if experiment_id is None:
        raise CreateFailed(printed)
    return experiment_id


class Trial(NamedTuple):
    """One reported trial: its 'default' value (-inf when it has none), configuration and full result."""
    value: float
    parameter_id: int
    parameters: dict[str, Any]
    result: Any
    trial_job: str = ""


class Ranking(ABC):
    """Matching parameters to results, shared by both sources; they supply the raw records.

    A result takes the parameters of the record with its own parameter id, never those of the
    record its trial job carries, which NNI may have swapped with another job's. After a
    dispatcher crash and ``nnictl resume``, NNI hands some parameter ids out a second time: of
    the records of one id, a result takes the newest made before it, else (records without
    times) the one of its own job; every result keeps a row of its own, so the later trials of a
    reused id do not hide the earlier ones. A record that cannot be read (a cut or garbled row
    of a damaged database) is skipped and counted in ``skipped``."""

    skipped = 0

    @abstractmethod
    def parameter_records(self) -> Iterable[tuple[str, str, float | None]]:
        """(trial job, record, milliseconds or None) of every hyper-parameter record (JSON with
        ``parameter_id`` and ``parameters``), with when NNI made it where the source says."""

    @abstractmethod
    def final_metrics(self) -> Iterable[tuple[str, str, str, float | None]]:
        """(trial job, parameter id, data, milliseconds or None) of every FINAL metric, data as NNI
        stores it (JSON of a JSON string)."""

    def _records(self) -> dict[int, list[Record]]:
        """parameter id -> its hyper-parameter records, oldest first."""
        out: dict[int, list[Record]] = {}
        for job, text, made in self.parameter_records():
            try:
                record = json.loads(text)
                out.setdefault(int(record["parameter_id"]), []).append(
                    Record(job, dict(record["parameters"]), made))
            except (ValueError, TypeError, KeyError):
                self.skipped += 1
        for records in out.values():
            records.sort(key=lambda r: -math.inf if r.made is None else r.made)
        return out

    def _finals(self) -> list[Final]:
        out = []
        for job, pid, data, made in self.final_metrics():
            try:
                out.append(Final(job, int(pid), json.loads(json.loads(data)), made))
            except (ValueError, TypeError):
                self.skipped += 1
        return out

    def parameters(self) -> dict[int, dict[str, Any]]:
        """parameter id -> the parameters the tuner generated for it (the latest, for a reused id)."""
        return {pid: records[-1].parameters for pid, records in self._records().items()}

    def results(self) -> dict[int, Any]:
        """parameter id -> the final result its trial reported (the latest, for a reused id)."""
        return {final.parameter_id: final.result for final in self._finals()}

    def ranked(self) -> list[Trial]:
        """Every reported trial, highest 'default' (TFLOPS) first."""
        records = self._records()
        rows = []
        for final in self._finals():
            record = _record_of(records.get(final.parameter_id, []), final)
            if record is not None:
                rows.append(Trial(_default(final.result), final.parameter_id, record.parameters, final.result,
                                  final.job))
        return sorted(rows, key=lambda row: -row.value)


class Record(NamedTuple):
    """A hyper-parameter record: the job NNI attached it to, its parameters, when it was made."""
    job: str
    parameters: dict[str, Any]
    made: float | None


class Final(NamedTuple):
    """A FINAL metric: the job that reported it, the parameter id it ran, its result, when."""
    job: str
    parameter_id: int
    result: Any
    made: float | None


def _record_of(records: list[Record], final: Final) -> Record | None:
    """Which of one parameter id's records (oldest first) ``final`` ran: the only one; else the
    newest made before it; else, where the times are missing, the one of its own job; else the newest."""
    if len(records) <= 1:
        return records[0] if records else None
    if final.made is not None:
        before = [r for r in records if r.made is not None and r.made <= final.made]
        if before:
            return before[-1]
    own = [r for r in records if r.job == final.job]
    return (own or records)[-1]


class ExperimentClient(Ranking):
    """A running experiment (or a stopped one shown again by ``nnictl view``) on ``port``."""

    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self.base = f"http://{host}:{port}/api/v1/nni/"

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.base + path, timeout=10) as response:
            return json.load(response)

    def status(self) -> dict[str, Any]:
        return self.get("check-status")

    def running_trials(self) -> int:
        return sum(t["status"] in ("WAITING", "RUNNING") for t in self.get("trial-jobs"))

    def ended(self, status: dict[str, Any]) -> bool:
        """Whether an experiment with this check-status has finished. An experiment whose tuner
        ran out of configurations stays in TUNER_NO_MORE_TRIAL for good in NNI 3.0 (it never
        turns DONE): it has finished once no trial is left running."""
        return status["status"] in ENDED or (status["status"] in NO_MORE and not self.running_trials())

    def parameter_records(self) -> Iterable[tuple[str, str, float | None]]:
        for trial in self.get("trial-jobs"):
            for record in trial.get("hyperParameters", []):
                yield trial.get("trialJobId", ""), record, _milliseconds(trial.get("startTime"))

    def final_metrics(self) -> Iterable[tuple[str, str, str, float | None]]:
        return [(m.get("trialJobId", ""), m["parameterId"], m["data"], _milliseconds(m.get("timestamp")))
                for m in self.get("metric-data") if m["type"] == "FINAL"]


class ExperimentDatabase(Ranking):
    """An experiment's folder (``<experimentWorkingDirectory>/<id>``), read from ``db/nni.sqlite``
    without NNI running: a finished experiment can be exported long after ``nnictl stop``, and a
    running one read while NNI writes (SQLite readers see committed rows only)."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.path = os.path.join(folder, "db", "nni.sqlite")
        if not os.path.isfile(self.path):
            raise ValueError(f"{folder} is not an NNI experiment folder: it has no db/nni.sqlite")
        self.db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)

    def _query(self, sql: str) -> list[tuple]:
        """Rows of ``sql``; a damaged database is a one-line ValueError naming the file."""
        try:
            return self.db.execute(sql).fetchall()
        except sqlite3.Error as e:
            raise ValueError(f"cannot read {self.path}: {e} (not an NNI database, or a damaged one)") from None

    def profile(self) -> dict[str, Any]:
        """The experiment's configuration (its newest revision): trialCommand, searchSpace, tuner..."""
        rows = self._query("SELECT params FROM ExperimentProfile ORDER BY revision DESC LIMIT 1")
        if not rows:
            raise ValueError(f"experiment {self.folder} has no profile in its database yet")
        try:
            profile = json.loads(rows[0][0])
        except (ValueError, TypeError):
            raise ValueError(f"experiment {self.folder}: its profile in {self.path} is not JSON") from None
        if not isinstance(profile, dict) or not isinstance(profile.get("trialCommand"), str):
            raise ValueError(f"experiment {self.folder}: its profile names no trialCommand")
        return profile

    def parameter_records(self) -> Iterable[tuple[str, str, float | None]]:
        rows = self._query("SELECT trialJobId, data, timestamp FROM TrialJobEvent "
                           "WHERE event IN ('WAITING', 'RUNNING') AND data IS NOT NULL")
        return [(job, data, _milliseconds(made)) for job, data, made in rows
                if isinstance(data, str) and '"parameter_id"' in data]

    def final_metrics(self) -> Iterable[tuple[str, str, str, float | None]]:
        rows = self._query("SELECT trialJobId, parameterId, data, timestamp FROM MetricData WHERE type = 'FINAL'")
        return [(job, pid, data, _milliseconds(made)) for job, pid, data, made in rows]

    def trial_spans(self) -> list[tuple[float, float]]:
        """(start, end) in seconds of each trial that ran to an end, from NNI's records of its
        RUNNING and its final event: what a trial costs, and how fast trials pass."""
        spans: dict[str, list[float | None]] = {}
        for job, event, milliseconds in self._query("SELECT trialJobId, event, timestamp FROM TrialJobEvent "
                                                     "ORDER BY timestamp"):
            span = spans.setdefault(job, [None, None])
            if event == "RUNNING" and span[0] is None:
                span[0] = milliseconds / 1e3
            elif event in FINAL_EVENTS and span[0] is not None and span[1] is None:
                span[1] = milliseconds / 1e3
        return [(start, end) for start, end in spans.values() if start is not None and end is not None]


def _milliseconds(value: Any) -> float | None:
    """A record's time as NNI stores it (milliseconds since the epoch), or None where it is missing."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _default(result: Any) -> float:
    value = result.get("default") if isinstance(result, dict) else result
    return float(value) if isinstance(value, (int, float)) else float("-inf")
