"""Run a tuning experiment to the end and show the best kernel: the README's main command.

    python -m trial_code.launch                       # GPU: MM1 (512 trials); no GPU: the CPU quickstart
    python -m trial_code.launch --config experiments/C2/opevo.yml --port 8081

It starts the experiment with ``nnictl create``, prints the web UI's address, reports progress
until the experiment ends, then prints the best configuration with its TFLOPS and writes it to
``best.json`` in the experiment's folder. The experiment stays up for the web UI until
``nnictl stop <id>``.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter

from . import targets
from .experiment_client import ExperimentClient

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NNICTL = [sys.executable, "-m", "nni.tools.nnictl.nnictl"]
ENDED = ("DONE", "ERROR", "STOPPED")


def default_config() -> str:
    kind = targets.resolve("auto").kind
    name = "MM1/opevo.yml" if kind == "cuda" else "quickstart/opevo.yml"
    return os.path.join(REPO_ROOT, "experiments", name)


def start(config: str, port: int) -> str:
    """``nnictl create``; returns the experiment id."""
    out = subprocess.run([*NNICTL, "create", "--config", config, "--port", str(port)], capture_output=True, text=True)
    found = re.search(r"nnictl stop (\w+)", out.stdout + out.stderr)
    if not found:
        raise SystemExit(f"nnictl create failed:\n{out.stdout}{out.stderr}")
    return found.group(1)


def follow(client: ExperimentClient, every: float) -> dict:
    """Print progress until the experiment ends (an exhausted tuner never says DONE in NNI 3.0)."""
    while True:
        status = client.status()
        results = client.results()
        counts = Counter(r.get("status", "?") if isinstance(r, dict) else "?" for r in results.values())
        best = max((r.get("default", 0) for r in results.values() if isinstance(r, dict)), default=0.0)
        print(f"{time.strftime('%H:%M:%S')} {status['status']:<20} {len(results):>4} trials reported, best "
              f"{best:.4f} TFLOPS  ({', '.join(f'{k} {v}' for k, v in counts.most_common())})", flush=True)
        if status["status"] in ENDED or (status["status"] in ("NO_MORE_TRIAL", "TUNER_NO_MORE_TRIAL")
                                          and not client.running_trials()):
            return status
        time.sleep(every)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=None, help="an experiment YAML (default: by whether a GPU is visible)")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--every", type=float, default=10.0, help="seconds between progress lines")
    args = parser.parse_args()
    config = os.path.abspath(args.config or default_config())
    experiment_id = start(config, args.port)
    print(f"experiment {experiment_id} ({os.path.relpath(config, REPO_ROOT)}): watch it at http://127.0.0.1:{args.port}")
    client = ExperimentClient(args.port)
    status = follow(client, args.every)
    if status.get("errors"):
        print(f"the experiment reported errors: {status['errors']}")
    ranked = client.ranked()
    if not ranked:
        raise SystemExit("no trial reported a result; see the trial logs in the web UI")
    value, params, result = ranked[0]
    folder = os.path.join(os.path.expanduser("~/nni-experiments"), experiment_id)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "best.json")
    with open(path, "w") as handle:
        json.dump({"config": os.path.relpath(config, REPO_ROOT), "parameters": params, "result": result}, handle, indent=2)
    print(f"best: {value:.4f} TFLOPS, {result.get('latency_ms', 0) or 0:.4f} ms")
    print(f"parameters: {json.dumps(params)}")
    print(f"saved to {path}; the web UI stays up until `nnictl stop {experiment_id}`")


if __name__ == "__main__":
    main()
