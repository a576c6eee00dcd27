"""Read a running (or finished, not yet stopped) NNI 3.0 experiment through its REST API.

Results are matched to configurations by the parameter id of each FINAL metric: NNI 3.0 may
attach hyper-parameters to the wrong trial job in its listings (microsoft/nni#5726), but a
metric's parameter id, and the id inside each hyper-parameter record, are the ones that ran.
"""
from __future__ import annotations

import json
import re
import sys
import urllib.request
from typing import Any

NNICTL = [sys.executable, "-m", "nni.tools.nnictl.nnictl"]
ENDED = ("DONE", "ERROR", "STOPPED")
NO_MORE = ("NO_MORE_TRIAL", "TUNER_NO_MORE_TRIAL")


def created_id(nnictl_create_output: str) -> str | None:
    """The experiment id ``nnictl create`` printed, or None when it failed."""
    found = re.search(r"nnictl stop (\w+)", nnictl_create_output)
    return found.group(1) if found else None


class ExperimentClient:
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

    def parameters(self) -> dict[int, dict[str, Any]]:
        """parameter id -> the parameters the tuner generated for it."""
        out = {}
        for trial in self.get("trial-jobs"):
            for record in trial.get("hyperParameters", []):
                record = json.loads(record)
                out[int(record["parameter_id"])] = record["parameters"]
        return out

    def results(self) -> dict[int, Any]:
        """parameter id -> the final result its trial reported."""
        out = {}
        for metric in self.get("metric-data"):
            if metric["type"] == "FINAL":
                out[int(metric["parameterId"])] = json.loads(json.loads(metric["data"]))
        return out

    def ranked(self) -> list[tuple[float, dict[str, Any], Any]]:
        """(default value, parameters, full result) of every reported trial, best first."""
        params, results = self.parameters(), self.results()
        rows = [(_default(result), params[pid], result) for pid, result in results.items() if pid in params]
        return sorted(rows, key=lambda row: row[0], reverse=True)


def _default(result: Any) -> float:
    value = result.get("default") if isinstance(result, dict) else result
    return float(value) if isinstance(value, (int, float)) else float("-inf")
