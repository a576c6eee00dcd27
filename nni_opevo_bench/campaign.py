"""The GPU campaign: correctness, vendor anchors, the tuners' comparison and throughput, in resumable calls.

``nni-opevo campaign --out DIR`` (or ``python -m nni_opevo_bench.campaign``).

One command for the rare, short loans of a GPU machine (docs/gpu-campaign.md): each call runs
for at most ``--minutes``, appends what it measured under ``DIR``, and the same command resumes
where the last call stopped; a stage once complete is skipped. The stages, in order:

1. ``correctness``: random configurations the static check admits, for every named workload
   and layout, built and run through the trial code and checked against float64; and
   configurations it refuses for a launch limit (shared memory, registers, threads), run
   without the check, so the check's limits are compared with what the GPU accepts (an admitted
   configuration the GPU refuses is a bug in the check; a refused one that runs is lost space).
2. ``anchors``: cuBLAS and cuDNN through PyTorch on the same shapes, fp32 with TF32 off (our
   kernels' class) and TF32 on for reference (``trial_code.anchor``).
3. ``comparison``: the paper's comparison in steps that each give a complete figure: MM1 with
   OpEvo, G-BFS, N-A2C, AutoTVM, NoSE and TPE at 256 trials and one seed, then BMM1, then C2,
   then three seeds at 512 trials; builds in parallel, measurements one at a time.
4. ``throughput``: trials per minute, the build times, and the shares of a trial's time spent
   building, waiting for the GPU and measuring.

``--dry-run`` walks every stage where no GPU is visible: CUDA builds compiled by nvcc, nothing
run, a tiny budget; it writes the files the real run writes. ``DIR/README.md`` is regenerated
after every call from what the folder holds.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trial_code import anchor, constraint, targets
from trial_code.evaluate import Limits, Result, evaluate
from trial_code.status import Status
from trial_code.workloads import NAMED, lookup

from .objectives import Live
from .runner import Plan
from .runner import run as run_plan

TUNERS = ("opevo", "gbfs", "na2c", "autotvm", "nose", "tpe")
STAGES = ("correctness", "anchors", "comparison", "throughput")
LIMITS = Limits(build_timeout=60.0, run_timeout=30.0)
"""A campaign trial's limits: a build or a kernel past these is not worth the loan's minutes."""
RESERVE_S = 75.0
"""Seconds kept at the end of a call: trials in flight finish (a build's limit) and the README is written."""
LAUNCH_LIMITS = ("shared memory", "registers", "threads per block", "virtual threads", "threadIdx.z")
"""The check's rules that stand for what the GPU would refuse (or spill), which probes test."""
DRAWS = 200_000
"""Random draws tried for one configuration of a kind (admitted, or refused by a launch limit)."""


@dataclass(frozen=True)
class Step:
    workloads: tuple[str, ...]
    seeds: int
    budget: int

    @property
    def name(self) -> str:
        return f"{'+'.join(self.workloads)} x{self.seeds} seed(s) @{self.budget}"


@dataclass(frozen=True)
class Scale:
    correctness: tuple[str, ...]
    admitted: int
    probes: int
    anchors: tuple[str, ...]
    steps: tuple[Step, ...]
    throughput: int


PAPER = ("MM1", "MM2", "MM3", "BMM1", "BMM2", "BMM3", "C1", "C2")
REAL = Scale(correctness=tuple(NAMED), admitted=3, probes=2, anchors=PAPER,
             steps=(Step(("MM1",), 1, 256), Step(("BMM1",), 1, 256), Step(("C2",), 1, 256),
                    Step(("MM1", "BMM1", "C2"), 3, 512)),
             throughput=64)
DRY = Scale(correctness=("MM_small", "BMM_small", "C_small", "MM1", "BMM2", "BMM3", "C1"), admitted=1, probes=1,
            anchors=("MM1", "C1"),
            steps=(Step(("MM1",), 1, 2), Step(("BMM1",), 1, 1), Step(("C2",), 1, 1), Step(("MM1",), 2, 2)),
            throughput=4)


class Campaign:
    """One call of the campaign over ``out``: what is done is read from there, what this call
    does is appended there, and ``campaign.json`` records each call and each stage's end."""

    def __init__(self, out: Path, dry_run: bool, deadline: float, concurrency: int) -> None:
        self.out, self.dry_run, self.deadline, self.concurrency = out, dry_run, deadline, concurrency
        self.scale = DRY if dry_run else REAL
        self.target = targets.cuda()
        self.state_path = out / "campaign.json"
        self.state: dict[str, Any] = (json.loads(self.state_path.read_text()) if self.state_path.exists()
                                      else {"dry_run": dry_run, "stages": {}, "calls": []})
        if self.state.get("dry_run") != dry_run:
            raise SystemExit(f"{out} holds a {'dry' if self.state.get('dry_run') else 'real'} campaign; "
                             "use another --out")
        self.lock = threading.Lock()

    def past_deadline(self) -> bool:
        return time.monotonic() >= self.deadline

    def save(self) -> None:
        _write_atomic(self.state_path, json.dumps(self.state, indent=2) + "\n")

    def run(self, stages: tuple[str, ...], command: str) -> None:
        call = {"command": command, "started": _now(), "device": device_description(self.target), "stages": []}
        self.state["calls"].append(call)
        self.save()
        for stage in stages:
            if self.state["stages"].get(stage, {}).get("complete"):
                continue
            if self.past_deadline():
                break
            print(f"campaign: {stage}", flush=True)
            complete = getattr(self, stage)()
            call["stages"].append(stage)
            if complete:
                self.state["stages"][stage] = {"complete": True, "finished": _now()}
            self.save()
            if not complete:
                break
        call["ended"] = _now()
        self.save()
        write_readme(self.out, self.state)

    # -- correctness -------------------------------------------------------------------------
    def correctness(self) -> bool:
        path = self.out / "correctness.jsonl"
        done = {(r["workload"], r["kind"], r["index"]) for r in _read_jsonl(path)}
        todo = [(name, kind, index) for name in self.scale.correctness
                for kind, count in (("admitted", self.scale.admitted), ("probe", self.scale.probes))
                for index in range(count) if (name, kind, index) not in done]

        def one(item: tuple[str, str, int]) -> dict[str, Any]:
            name, kind, index = item
            workload = lookup(name)
            seed = 1000 * list(NAMED).index(name) + index
            params, rule = draw(name, self.target, seed, admitted=kind == "admitted")
            if params is None:
                return {"workload": name, "kind": kind, "index": index, "params": None, "rule": rule,
                        "status": "NOT_DRAWN", "error": f"none found in {DRAWS} draws"}
            result = evaluate(workload, params, self.target, LIMITS, build_only=self.dry_run,
                              unchecked=kind == "probe")
            return {"workload": name, "kind": kind, "index": index, "params": params, "rule": rule,
                    **_result_fields(result)}

        return self._each(todo, one, path)

    # -- anchors -----------------------------------------------------------------------------
    def anchors(self) -> bool:
        path = self.out / "anchors.json"
        found = json.loads(path.read_text()) if path.exists() else []
        done = {(a["workload"], a["tf32"]) for a in found}
        for name in self.scale.anchors:
            for tf32 in (False, True):
                if (name, tf32) in done:
                    continue
                if self.past_deadline():
                    return False
                measured = anchor.measure(lookup(name), self.target, tf32=tf32)
                found.append({"workload": name, "tf32": tf32, **(measured.to_json() if measured else {
                    "library": None, "why": "no PyTorch with a visible GPU here (a dry run)" if self.dry_run
                    else "no PyTorch with a visible GPU here"})})
                _write_atomic(path, json.dumps(found, indent=2) + "\n")
        return True

    # -- comparison --------------------------------------------------------------------------
    def comparison(self) -> bool:
        steps = self.state.setdefault("comparison_steps", [])
        for step in self.scale.steps:
            if step.name in steps:
                continue
            print(f"campaign: comparison {step.name}", flush=True)
            plan = Plan([Live(name, self.target, LIMITS, build_only=self.dry_run) for name in step.workloads],
                        list(TUNERS), list(range(step.seeds)), step.budget, self.concurrency, deadline=self.deadline)
            if not run_plan(plan, self.out / "trials.csv", progress=False):
                return False
            steps.append(step.name)
            self.save()
        return True

    # -- throughput --------------------------------------------------------------------------
    def throughput(self) -> bool:
        path = self.out / "throughput.jsonl"
        done = {r["index"] for r in _read_jsonl(path) if "index" in r}
        todo = [index for index in range(self.scale.throughput) if index not in done]
        started = time.monotonic()

        def one(index: int) -> dict[str, Any]:
            params, _ = draw("MM1", self.target, 50_000 + index, admitted=True)
            result = evaluate(lookup("MM1"), params, self.target, LIMITS, build_only=self.dry_run)
            return {"index": index, **_result_fields(result)}

        complete = self._each(todo, one, path)
        with self.lock, open(path, "a") as handle:  # this call's share of the wall clock
            handle.write(json.dumps({"segment_s": time.monotonic() - started, "trials": len(todo)}) + "\n")
        return complete

    def _each(self, todo: list[Any], one: Callable[[Any], dict[str, Any]], path: Path) -> bool:
        """``one`` over ``todo``, ``concurrency`` at a time, each line appended as it ends; none
        started past the deadline. Whether every item was done."""
        with ThreadPoolExecutor(self.concurrency) as pool, open(path, "a") as handle:
            pending: set[Future] = set()
            items = iter(todo)
            started = 0
            while True:
                while len(pending) < self.concurrency and not self.past_deadline():
                    item = next(items, None)
                    if item is None:
                        break
                    pending.add(pool.submit(one, item))
                    started += 1
                if not pending:
                    break
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    handle.write(json.dumps(future.result()) + "\n")
                    handle.flush()
        return started == len(todo)


def draw(name: str, target: targets.Target, seed: int, admitted: bool) -> tuple[dict[str, Any] | None, str]:
    """A random configuration the static check admits, or (a probe) one it refuses for a launch
    limit only, with the rule that refused it (``constraint.draw``)."""
    return constraint.draw(lookup(name), target, seed, () if admitted else LAUNCH_LIMITS, tries=DRAWS)


def device_description(target: targets.Target) -> str:
    """The GPU as nvidia-smi names it, with its driver, or why there is none."""
    if shutil.which("nvidia-smi"):
        found = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=30)
        if found.returncode == 0 and found.stdout.strip():
            return f"{found.stdout.strip().splitlines()[0]} ({target.arch})"
    return f"no GPU visible: builds for {target.arch} only"


def _result_fields(result: Result) -> dict[str, Any]:
    return {"status": result.status.name, "tflops": result.tflops, "latency_ms": result.latency_ms,
            "build_s": result.build_s, "wait_s": result.wait_s, "measure_s": result.measure_s,
            "total_s": result.total_s, "error": result.error[-300:]}


def _read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Whole lines only: a line cut off by a killed call is dropped (its item is done again)."""
    if not path.exists():
        return
    for line in path.read_text().splitlines():
        try:
            yield json.loads(line)
        except json.JSONDecodeError:
            continue


def _write_atomic(path: Path, text: str) -> None:
    temporary = path.with_suffix(path.suffix + ".tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())


# -- the README ----------------------------------------------------------------------------------
FAILED = (Status.COMPILE_DEVICE.name, Status.RUNTIME_DEVICE.name, Status.WRONG_ANSWER.name, Status.RUN_TIMEOUT.name)


def write_readme(out: Path, state: dict[str, Any]) -> None:
    """``out/README.md``: each stage's table from the files beside it."""
    calls = state.get("calls", [])
    lines = ["# GPU campaign" + (" (dry run: builds only, nothing measured)" if state.get("dry_run") else ""), "",
             f"Device: {calls[-1]['device'] if calls else 'none yet'}. Calls: {len(calls)}, "
             f"first {calls[0]['started'] if calls else '-'}, last {calls[-1]['started'] if calls else '-'}.",
             f"Command: `{calls[-1]['command'] if calls else ''}`. Stages complete: "
             f"{', '.join(s for s in STAGES if state.get('stages', {}).get(s, {}).get('complete')) or 'none'}.", ""]
    lines += _correctness_table(list(_read_jsonl(out / "correctness.jsonl")))
    anchors = json.loads((out / "anchors.json").read_text()) if (out / "anchors.json").exists() else []
    lines += _anchor_table(anchors)
    lines += _comparison_table(out / "trials.csv", anchors)
    lines += _throughput_table(list(_read_jsonl(out / "throughput.jsonl")))
    _write_atomic(out / "README.md", "\n".join(lines) + "\n")


def _correctness_table(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    lines = ["## Correctness and the static limits", "",
             "| workload | admitted: statuses | refused by a launch limit, run anyway: statuses |", "|---|---|---|"]
    for name in dict.fromkeys(r["workload"] for r in rows):
        cells = []
        for kind in ("admitted", "probe"):
            counts = Counter(r["status"] for r in rows if r["workload"] == name and r["kind"] == kind)
            cells.append(", ".join(f"{status} {n}" for status, n in sorted(counts.items())) or "-")
        lines.append(f"| {name} | {cells[0]} | {cells[1]} |")
    bugs = [r for r in rows if r["kind"] == "admitted" and r["status"] in FAILED]
    lost = [r for r in rows if r["kind"] == "probe" and r["status"] == Status.NO_ERROR.name]
    unbuilt = [r for r in rows if r["status"] != Status.NO_ERROR.name and r["kind"] == "admitted"]
    if rows and all(r["latency_ms"] is None for r in rows):  # a dry run: built, nothing ran
        return lines + ["", f"Dry run: admitted configurations that failed to build: {len(unbuilt)}.", ""]
    lines += ["", f"Admitted but failed on the device (a bug in the check or a template): {len(bugs)}. "
                  f"Refused but ran (space the check loses): {len(lost)}"
                  + (f", by rule: {dict(Counter(r['rule'].split(' exceeds')[0] for r in lost))}" if lost else "")
                  + ".", ""]
    return lines


def _anchor_table(anchors: list[dict[str, Any]]) -> list[str]:
    if not anchors:
        return []
    lines = ["## Vendor libraries", "", "| workload | fp32 (TF32 off) TFLOPS | TF32 TFLOPS | library |", "|---|---|---|---|"]
    for name in dict.fromkeys(a["workload"] for a in anchors):
        by = {a["tf32"]: a for a in anchors if a["workload"] == name}
        cells = [f"{by[t]['tflops']:.1f}" if by.get(t, {}).get("library") else "-" for t in (False, True)]
        library = (by.get(False) or {}).get("library") or (by.get(False) or {}).get("why", "-")
        lines.append(f"| {name} | {cells[0]} | {cells[1]} | {library} |")
    return lines + [""]


def _comparison_table(csv_path: Path, anchors: list[dict[str, Any]]) -> list[str]:
    from .table import read_rows

    if not csv_path.exists():
        return []
    rows = read_rows(csv_path)
    vendor = {a["workload"]: a["tflops"] for a in anchors if not a["tf32"] and a.get("library")}
    lines = ["## Comparison", "", "Best TFLOPS per run (median over seeds, with min-max), and as a fraction of the "
             "vendor library at fp32.", "", "| workload | tuner | seeds | trials per seed | best TFLOPS | "
             "/ vendor |", "|---|---|---|---|---|---|"]
    runs: dict[tuple[str, str], dict[str, list[float]]] = {}
    for row in rows:
        runs.setdefault((row["workload"], row["tuner"]), {}).setdefault(row["seed"], []).append(float(row["tflops"]))
    for (workload, tuner), seeds in sorted(runs.items()):
        best = [max(values) for values in seeds.values()]
        trials = sorted({len(values) for values in seeds.values()})
        median = float(np.median(best))
        ratio = f"{median / vendor[workload]:.2f}" if workload in vendor and vendor[workload] > 0 else "-"
        lines.append(f"| {workload} | {tuner} | {len(seeds)} | {'/'.join(map(str, trials))} | {median:.2f} "
                     f"({min(best):.2f}-{max(best):.2f}) | {ratio} |")
    return lines + [""]


def _throughput_table(rows: list[dict[str, Any]]) -> list[str]:
    trials = [r for r in rows if "index" in r]
    wall = sum(r["segment_s"] for r in rows if "segment_s" in r)
    if not trials or wall <= 0:
        return []
    builds = np.array([r["build_s"] for r in trials if r["build_s"] is not None] or [math.nan])
    total = sum(r["total_s"] for r in trials)
    shares = {phase: sum(r[f"{phase}_s"] or 0.0 for r in trials) / total for phase in ("build", "wait", "measure")}
    p10, p50, p90 = np.percentile(builds, [10, 50, 90])
    return ["## Throughput (MM1, random admitted configurations)", "",
            "| trials | trials per minute | build s p10 / p50 / p90 / max | building | waiting for the GPU | "
            "measuring | other (process start, TVM import) |", "|---|---|---|---|---|---|---|",
            f"| {len(trials)} | {60 * len(trials) / wall:.1f} | {p10:.2f} / {p50:.2f} / {p90:.2f} / "
            f"{np.max(builds):.2f} | {shares['build']:.0%} | {shares['wait']:.0%} | {shares['measure']:.0%} | "
            f"{1 - sum(shares.values()):.0%} |", ""]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="nni-opevo campaign", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n", 1)[1])
    parser.add_argument("--out", type=Path, required=True, help="the campaign's folder (created; resumed if present)")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: build and nvcc-compile only, tiny budget")
    parser.add_argument("--minutes", type=float, default=9.0,
                        help="stop starting work after this many minutes, less a reserve (default %(default)s)")
    parser.add_argument("--concurrency", type=int, default=max(1, min(14, (os.cpu_count() or 2) - 2)),
                        help="trials building at a time (measurements take turns); default %(default)s")
    parser.add_argument("--stages", nargs="+", choices=STAGES, default=list(STAGES),
                        help="the stages to run, in the campaign's order (default: all)")
    args = parser.parse_args(argv)
    if not 0 < args.minutes <= 600 or args.concurrency < 1:
        parser.error("--minutes must be in (0, 600] and --concurrency at least 1")
    target = targets.cuda()
    if not args.dry_run and not target.has_device:
        parser.error("no CUDA GPU is visible here: run with --dry-run, or on the GPU machine (docs/gpu-campaign.md)")
    args.out.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + max(args.minutes * 60 - RESERVE_S, args.minutes * 60 / 4)
    campaign = Campaign(args.out, args.dry_run, deadline, args.concurrency)
    command = " ".join(["nni-opevo campaign", *(argv if argv is not None else sys.argv[1:])])
    campaign.run(tuple(stage for stage in STAGES if stage in args.stages), command)
    complete = [stage for stage in STAGES if campaign.state["stages"].get(stage, {}).get("complete")]
    print(f"campaign: complete {', '.join(complete) or 'nothing yet'}; "
          f"{'all done' if len(complete) == len(STAGES) else 'run the same command again to go on'}; "
          f"{args.out / 'README.md'}", flush=True)


if __name__ == "__main__":
    main()
