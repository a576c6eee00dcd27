"""A real NNI experiment on loopback, driven through ``nnictl`` and NNI's REST API.

Results are read by the parameter id of each FINAL metric: NNI 3.0 may attach
hyper-parameters to the wrong trial job in its listings (microsoft/nni#5726), but the
metric's parameter id is the one the trial really ran.
"""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

NNICTL = [sys.executable, "-m", "nni.tools.nnictl.nnictl"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Experiment:
    def __init__(self, workdir: Path, config: dict[str, Any], env: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.env = {**os.environ, **(env or {})}
        config = {"experimentWorkingDirectory": str(workdir / "nni"), **config}
        self.config_path = workdir / "config.yml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.id: str | None = None

    def nnictl(self, *args: str, timeout: float = 120) -> str:
        out = subprocess.run([*NNICTL, *args], env=self.env, cwd=self.workdir, capture_output=True, text=True, timeout=timeout)
        return out.stdout + out.stderr

    def __enter__(self) -> Experiment:
        out = self.nnictl("create", "--config", str(self.config_path), "--port", str(self.port))
        found = re.search(r"nnictl stop (\w+)", out)
        assert found, f"nnictl create failed:\n{out}"
        self.id = found.group(1)
        return self

    def resume(self) -> None:
        """``nnictl resume`` the stopped experiment on the same port, once its server answers."""
        out = self.nnictl("resume", str(self.id), "--port", str(self.port))
        assert "Web portal URLs" in out, f"nnictl resume failed:\n{out}"
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
        if self.id:
            self.nnictl("stop", self.id)

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v1/nni/{path}", timeout=10) as r:
            return json.load(r)

    def wait(self, timeout: float = 300) -> dict[str, Any]:
        """Poll until the experiment stops running; returns the final check-status.

        An experiment whose tuner ran out of configurations stays in TUNER_NO_MORE_TRIAL for
        good in NNI 3.0 (it never turns DONE): finished once no trial is left running."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            status = self.get("check-status")
            if status["status"] in ("DONE", "ERROR", "STOPPED"):
                return status
            if status["status"] in ("NO_MORE_TRIAL", "TUNER_NO_MORE_TRIAL") and not self.running_trials():
                return status
            time.sleep(1)
        raise TimeoutError(f"experiment {self.id} still running after {timeout} s: {self.get('check-status')}")

    def wait_for_results(self, n: int, timeout: float = 300) -> None:
        """Poll until ``n`` final results are in (e.g. after raising maxTrialNumber)."""
        deadline = time.time() + timeout
        while len(self.results()) < n:
            if time.time() > deadline:
                raise TimeoutError(f"only {len(self.results())} of {n} results after {timeout} s")
            time.sleep(1)
        self.wait(timeout)

    def running_trials(self) -> int:
        return sum(t["status"] in ("WAITING", "RUNNING") for t in self.get("trial-jobs"))

    def parameters(self) -> dict[int, dict[str, Any]]:
        """parameter id -> the parameters the tuner generated for it."""
        out = {}
        for trial in self.get("trial-jobs"):
            for hp in trial.get("hyperParameters", []):
                hp = json.loads(hp)
                out[int(hp["parameter_id"])] = hp["parameters"]
        return out

    def results(self) -> dict[int, Any]:
        """parameter id -> the final result its trial reported."""
        out = {}
        for metric in self.get("metric-data"):
            if metric["type"] == "FINAL":
                out[int(metric["parameterId"])] = json.loads(json.loads(metric["data"]))
        return out

    def dispatcher_log(self) -> str:
        path = self.workdir / "nni" / str(self.id) / "log" / "dispatcher.log"
        return path.read_text() if path.exists() else ""
