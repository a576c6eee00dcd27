"""Run a tuning experiment to the end and show the best kernel: the README's main command.

    python -m trial_code.launch                       # GPU: MM1 (512 trials); no GPU: the CPU quickstart
    python -m trial_code.launch --config experiments/C2/opevo.yml --port 8081

It starts the experiment with ``nnictl create``, prints the web UI's address, reports progress
until the experiment ends, then prints the best configuration with its TFLOPS and writes it to
``best.json`` in the experiment's folder. The experiment stays up for the web UI until
``nnictl stop <id>``; ``python -m trial_code.export <id>`` then writes the kernel's source.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from collections import Counter

from . import REPO_ROOT, targets
from .experiment_client import NNICTL, ExperimentClient, created_id


def default_config() -> str:
    kind = targets.resolve("auto").kind
    name = "MM1/opevo.yml" if kind == "cuda" else "quickstart/opevo.yml"
    return os.path.join(REPO_ROOT, "experiments", name)


def start(config: str, port: int) -> str:
    """``nnictl create``; returns the experiment id."""
    out = subprocess.run([*NNICTL, "create", "--config", config, "--port", str(port)], capture_output=True, text=True)
    experiment_id = created_id(out.stdout + out.stderr)
    if experiment_id is None:
        raise SystemExit(f"nnictl create failed:\n{out.stdout}{out.stderr}")
    return experiment_id


def follow(client: ExperimentClient, every: float) -> dict:
    """Print progress until the experiment ends."""
    while True:
        status = client.status()
        results = client.results()
        counts = Counter(r.get("status", "?") if isinstance(r, dict) else "?" for r in results.values())
        best = max((r.get("default", 0) for r in results.values() if isinstance(r, dict)), default=0.0)
        print(f"{time.strftime('%H:%M:%S')} {status['status']:<20} {len(results):>4} trials reported, best "
              f"{best:.4f} TFLOPS  ({', '.join(f'{k} {v}' for k, v in counts.most_common())})", flush=True)
        if client.ended(status):
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
    value, _, params, result = ranked[0]
    folder = os.path.join(os.path.expanduser("~/nni-experiments"), experiment_id)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "best.json")
    with open(path, "w") as handle:
        json.dump({"config": os.path.relpath(config, REPO_ROOT), "parameters": params, "result": result}, handle, indent=2)
    print(f"best: {value:.4f} TFLOPS, {result.get('latency_ms', 0) or 0:.4f} ms")
    print(f"parameters: {json.dumps(params)}")
    print(f"saved to {path}; the web UI stays up until `nnictl stop {experiment_id}`")
    print(f"the kernel's source, with the top 5 re-measured: python -m trial_code.export {experiment_id}")


if __name__ == "__main__":
    main()
