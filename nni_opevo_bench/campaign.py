"""The GPU campaign: vendor anchors, OpEvo against them, correctness, throughput and the tuners' comparison.

``nni-opevo campaign --out DIR`` (or ``python -m nni_opevo_bench.campaign``).

One command for the rare, short loans of a GPU machine (docs/gpu-campaign.md): each call runs
for at most ``--minutes`` and stops itself there whatever is in flight, appends what it measured
under ``DIR`` row by row, and the same command resumes where the last call stopped; a stage once
complete is skipped unless its scope has grown since (``Campaign.scope``). The stages, in the
order of the project's goals:

1. ``anchors``: cuBLAS and cuDNN through PyTorch on the paper's shapes, fp32 with TF32 off (our
   kernels' class) and TF32 on for reference (``trial_code.anchor``).
2. ``goals``: OpEvo alone at 128 trials on each workload the goals name (MM1-3, BMM1-3, C1),
   each a complete figure against its vendor library.
3. ``correctness``: random configurations the static check admits, for every named workload
   and layout and every user's operator of ``examples/operators.py``, built and run through the
   trial code and checked against float64 (or the operator's reference); and configurations it
   refuses for a launch limit (shared memory, registers, threads), run without the check, so the
   check's limits are compared with what the GPU accepts (an admitted configuration the GPU
   refuses or gets wrong is a bug in the check or a template; a refused one that runs is lost space).
4. ``throughput``: trials per minute, the build times, and the shares of a trial's time spent
   building, waiting for the GPU and measuring.
5. ``knobs``: the GEMM space's pipeline and block-order knobs (``stages``, ``pad``, ``raster``)
   on tuned tiles: the best tiles of each GEMM goal run, each measured under every combination
   of those knobs the check admits, so each knob's worth is read with the tile held fixed
   rather than through one noisy search.
6. ``ceiling``: the template's reach on the plain MatMuls, apart from any search: a grid of the
   classic fp32 GEMM tiles (blocks of 64-128 by 64-128, 8 by 8 or 8 by 4 outputs a thread, K in
   chunks of 8, split-K 1-4, two or three stages), each measured once.
7. ``pursuit``: the goal runs carried on where their goal is not met, 128 trials at a time up to
   512, every unmet run at one length before any goes further, in ``goals.csv``; whether a goal is
   met is judged again after each step. A run starts from its own trials and from what the knobs
   and ceiling stages measured of its workload on the device (its tuner is told them, they are not
   its rows); its own trials of an older space (``double_buffer``) are off the space and skipped.
8. ``operators``: OpEvo at 128 trials on each operator of ``examples/operators.py`` (a user's
   computation, its template derived: ``trial_code.templates.derived``) at a shape of a GPU's
   size (``GPU_SHAPES``; the MatMul at MM1's, set beside MM1's goal run), then the library each
   names timed on the GPU (``anchors.json``: PyTorch on the inputs as tensors there, TF32 off);
   the call runs in the repository's root, where ``examples`` imports.
9. ``comparison``: OpEvo, G-BFS, N-A2C, AutoTVM, NoSE and TPE at 128 trials, one workload per
   step (each within one loan), then two more seeds of each; builds in parallel, measurements one
   at a time.

A folder holds one device: a call on another GPU refuses it (give another ``--out``), and one
call at a time may use it. ``--plan SECONDS`` prints the device calls a loan of that many
seconds allows (``campaign_calls``); ``--report`` rewrites ``DIR/README.md`` from the rows,
anywhere. ``--dry-run`` walks every stage where no GPU is visible: CUDA builds compiled by nvcc,
nothing run, a tiny budget; it writes the files the real run writes.
"""
from __future__ import annotations

import argparse
import fcntl
import itertools
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trial_code import anchor, constraint, forked, targets
from trial_code.cli import add_number, description, epilog
from trial_code.evaluate import Limits, Result, evaluate
from trial_code.files import replace_text
from trial_code.templates import Infeasible, for_workload
from trial_code.templates.gemm import KNOBS
from trial_code.workloads import NAMED, lookup, named_or_operator

from . import campaign_calls
from .campaign_calls import RESERVE_S
from .campaign_report import GOALS as GOAL_RATIOS
from .campaign_report import STAGE_ORDER, goals_met, read_jsonl, write_readme
from .objectives import Live
from .operators import EXAMPLES
from .runner import Plan
from .runner import run as run_plan
from .table import drop_partial_row, read_rows

TUNERS = ("opevo", "gbfs", "na2c", "autotvm", "nose", "tpe")
STAGES = STAGE_ORDER
LIMITS = Limits(build_timeout=60.0, run_timeout=30.0)
"""A campaign trial's limits: a build or a kernel past these is not worth the loan's minutes."""
PROBE_LIMITS = Limits(build_timeout=30.0, run_timeout=30.0)
"""A probe's limits. A probe asks whether the GPU takes a kernel the check refuses, and one still
building after 30 s is not worth the loan's minutes to ask: on the H100 every probe that built did
so within 18 s (30 of 46 ran) and five were killed at 60 s (docs/results/h100/correctness.jsonl)."""
DRY_PROBE_LIMITS = Limits(build_timeout=10.0, run_timeout=10.0)
"""A dry run's probe limits. A dry run asks of a probe only that it is drawn, built or stopped at
its limit, and recorded: no GPU is there to refuse it, and nvcc spends 13 s to over 30 s on the
largest probes' unrolled loops on 2 cores, which shows nothing that 10 s does not."""
HARD_STOP_EXIT = 124
"""The exit status of a call stopped at its limit with work in flight (``timeout``'s)."""
LAUNCH_LIMITS = ("shared memory", "registers", "threads per block", "virtual threads", "threadIdx.z")
"""The check's rules that stand for what the GPU would refuse (or spill), which probes test."""
DRAWS = 200_000
"""Random draws tried for one configuration of a kind (admitted, or refused by a launch limit)."""


@dataclass(frozen=True)
class Step:
    workloads: tuple[str, ...]
    seeds: int
    budget: int
    tuners: tuple[str, ...] = TUNERS

    @property
    def name(self) -> str:
        tuners = "" if self.tuners == TUNERS else f" {'+'.join(self.tuners)}"
        return f"{'+'.join(self.workloads)}{tuners} x{self.seeds} seed(s) @{self.budget}"

    @property
    def trials(self) -> int:
        return len(self.workloads) * len(self.tuners) * self.seeds * self.budget


@dataclass(frozen=True)
class Scale:
    anchors: tuple[str, ...]
    goals: tuple[Step, ...]
    correctness: tuple[str, ...]
    admitted: int
    probes: int
    probe_limits: Limits
    """A probe's limits at this scale."""
    throughput: int
    knobs: tuple[str, ...]
    knob_tiles: int
    knob_combinations: int | None
    """Combinations of the knobs measured per tile (None: all of them)."""
    ceiling: tuple[str, ...]
    ceiling_tiles: int | None
    """Classic tiles measured per workload (None: all of them)."""
    pursuit: tuple[int, int]
    """The goal runs carried on where unmet: trials added at a time, and the most a run may reach."""
    operators: tuple[Step, ...]
    steps: tuple[Step, ...]


PAPER = ("MM1", "MM2", "MM3", "BMM1", "BMM2", "BMM3", "C1", "C2")
GOALS = tuple(GOAL_RATIOS)
GPU_SHAPES = {
    "examples.operators:depthwise_conv2d": "batch=32 channels=128 height=56 width=56",
    "examples.operators:matmul_bias_gelu": "n=512 k=1024 m=4096",
    "examples.operators:softmax": "rows=16384 cols=1024",
    "examples.operators:layer_norm": "rows=16384 cols=1024",
    "examples.operators:matmul": "n=512 k=1024 m=1024",
    "examples.operators:attention": "heads=32 seq=512 dim=64",
    "examples.operators:mse_loss": "rows=8192 cols=2048",
    "examples.operators:matmul_fp16": "n=512 k=1024 m=1024",
    "examples.operators:embedding_bag": "bags=16384 per_bag=32 vocab=50000 dim=64",
    "examples.operators:dense_layer_norm": "tokens=2048 features=768 outputs=768",
}
"""Each example's shape in the operators stage. Its default shape is sized for a CPU: on an H100 a
few microseconds, where a kernel's launch and a library's Python call weigh as much as the work
and a ratio says little. These move 100-135 MB or compute 1-4.3 GFLOP, tens of microseconds of an
H100 or more; the MatMul at MM1's shape, so that a user's MatMul is set beside the hand-written
template's goal run and cuBLAS there (``campaign_report``), the MatMul + bias + GELU at MM2's."""
GPU_OPERATORS = tuple(f"{spec} {GPU_SHAPES[spec]}" for spec in EXAMPLES)
"""The operators stage's workloads: each example at its GPU shape (``workloads.named_or_operator``)."""
REAL = Scale(anchors=PAPER, goals=tuple(Step((name,), 1, 128, ("opevo",)) for name in GOALS),
             correctness=(*NAMED, *EXAMPLES), admitted=3, probes=2, probe_limits=PROBE_LIMITS, throughput=64,
             knobs=tuple(name for name in GOALS if lookup(name).family in ("matmul", "batch_matmul")),
             knob_tiles=2, knob_combinations=None,
             ceiling=tuple(name for name in GOALS if lookup(name).family == "matmul"), ceiling_tiles=None,
             pursuit=(128, 512), operators=tuple(Step((name,), 1, 128, ("opevo",)) for name in GPU_OPERATORS),
             steps=(*(Step((name,), 1, 128) for name in GOALS), *(Step((name,), 3, 128) for name in GOALS)))
DRY = Scale(anchors=("MM1", "C1"), goals=(Step(("MM1",), 1, 2, ("opevo",)), Step(("C1",), 1, 1, ("opevo",))),
            correctness=("MM_small", "BMM_small", "C_small", "MM1", "BMM2", "BMM3", "C1", "examples.operators:layer_norm"),
            admitted=1, probes=1, probe_limits=DRY_PROBE_LIMITS,
            throughput=4, knobs=("MM1",), knob_tiles=1, knob_combinations=2, ceiling=("MM1",), ceiling_tiles=1,
            pursuit=(1, 3), operators=tuple(Step((name,), 1, 1, ("opevo",)) for name in GPU_OPERATORS
                                                if name.split()[0].endswith((":matmul_bias_gelu", ":layer_norm"))),
            steps=(Step(("MM1",), 1, 2), Step(("BMM1",), 1, 1), Step(("MM1",), 2, 2)))
OPERATOR_MINUTES = 1.48
"""Minutes one OpEvo run of 128 trials on a user's operator took on the lent H100 (7.4 for the five
examples of 2026-11-26, at their default shapes: a trial's build takes the same time at any shape,
and its inputs, up to 128 MB, are made once and read from a cache after)."""
STAGE_MINUTES = {"anchors": 0.2, "correctness": 4.2, "throughput": 0.9, "knobs": 2.8, "ceiling": 1.9,
                 "operators": OPERATOR_MINUTES * len(EXAMPLES)}
"""Minutes each stage of the real campaign took on the lent H100 (docs/results/h100, 2026-11-25
and 26); the goals are counted per run (``GOAL_MINUTES``), the comparison's steps from their trial
counts at the goal runs' rate (``stage_minutes``)."""
GOAL_MINUTES = {"MM1": 1.4, "MM2": 1.5, "MM3": 1.7, "BMM1": 1.7, "BMM2": 1.7, "BMM3": 1.6, "C1": 4.8}
"""Minutes each goal run of 128 trials took on the lent H100 (docs/results/h100/goals.csv): C1's,
whose kernels build slowest, half as long as the six GEMMs' together, so a resumed campaign's plan
counts the runs it still has to do."""
TRIALS_PER_MINUTE = 62.0
"""The goal runs' rate on the H100: 896 trials in 14.4 minutes."""


def stage_minutes(state: dict[str, Any] | None = None, out: Path | None = None) -> dict[str, float]:
    """The real campaign's stages and comparison steps with their estimated minutes on an H100;
    with a folder's ``state``, only those it has still to do (of a stage whose scope has grown, the
    new items' share; of the goals, the runs not done; of the pursuit, the runs ``out`` holds
    short of their goal, each carried on to the most)."""
    state = state or {}
    left = {stage: _share_left(state.get("stages", {}).get(stage, {}), stage) for stage in STAGES}
    goals = sum(GOAL_MINUTES[step.workloads[0]] for step in REAL.goals if step.name not in state.get("goals_steps", []))
    pursuit = sum(GOAL_MINUTES[step.workloads[0]] * REAL.pursuit[0] / 128
                  for step in pursuit_steps(REAL, out, state.get("pursuit_steps", [])))
    minutes = {**STAGE_MINUTES, "goals": goals, "pursuit": pursuit}
    # The goals and the pursuit count the runs left themselves; the other stages, their share left.
    stages = {stage: minutes[stage] * (1.0 if stage in ("goals", "pursuit") else left[stage])
              for stage in STAGES if stage in minutes and left[stage] > 0}
    steps = {f"comparison {step.name}": step.trials / TRIALS_PER_MINUTE for step in REAL.steps
             if step.name not in state.get("comparison_steps", [])}
    return {**stages, **steps}


def scope(scale: Scale, stage: str) -> list[str]:
    """What a stage covers at ``scale``. A complete stage whose scope has grown since (a workload
    added to the correctness checks) runs again, and finds only the new items to do: each stage
    skips what its rows hold already."""
    steps = {"goals": scale.goals, "operators": scale.operators, "comparison": scale.steps}
    if stage in steps:
        return [step.name for step in steps[stage]]
    return {"anchors": list(scale.anchors), "correctness": [*scale.correctness, f"{scale.admitted}+{scale.probes}"],
            "pursuit": [*(step.name for step in scale.goals), "+{}/{}".format(*scale.pursuit)],
            "throughput": [str(scale.throughput)], "knobs": [*scale.knobs, str(scale.knob_tiles)],
            "ceiling": [*scale.ceiling, str(scale.ceiling_tiles)]}[stage]


def _share_left(record: dict[str, Any], stage: str) -> float:
    """How much of ``stage`` a call still has to do, as ``Campaign.run`` decides: none where it
    completed with today's scope; where its scope has grown since, the share of today's items it
    did not cover (a stage of an older campaign without a recorded scope, all of it); else all."""
    now = scope(REAL, stage)
    if not record.get("complete"):
        return 1.0
    covered = set(record.get("scope", []))
    return sum(item not in covered for item in now) / len(now)


class FolderInUse(SystemExit):
    """Another call holds the campaign's folder."""


class Campaign:
    """One call of the campaign over ``out``: what is done is read from there, what this call
    does is appended there, and ``campaign.json`` records the device, each call and each stage's end."""

    def __init__(self, out: Path, dry_run: bool, deadline: float, concurrency: int) -> None:
        self.out, self.dry_run, self.deadline, self.concurrency = out, dry_run, deadline, concurrency
        self.scale = DRY if dry_run else REAL
        self.target = targets.cuda()
        self.gpu = gpu_name(self.target)
        self.state_path = out / "campaign.json"
        self.state: dict[str, Any] = (json.loads(self.state_path.read_text()) if self.state_path.exists()
                                      else {"dry_run": dry_run, "device": self.gpu, "stages": {}, "calls": []})
        if self.state.get("dry_run") != dry_run:
            raise SystemExit(f"{out} holds a {'dry' if self.state.get('dry_run') else 'real'} campaign; "
                             "use another --out")
        self.state.setdefault("device", self.gpu)
        if self.state["device"] != self.gpu:
            raise SystemExit(f"{out} holds a campaign measured on {self.state['device']}, and this machine has "
                             f"{self.gpu}: give another --out to start a separate campaign on this device")
        self.lock = threading.Lock()

    def past_deadline(self) -> bool:
        return time.monotonic() >= self.deadline

    def save(self) -> None:
        with self.lock:
            replace_text(self.state_path, json.dumps(self.state, indent=2) + "\n")

    def run(self, stages: tuple[str, ...], command: str) -> None:
        call = {"command": command, "started": _now(), "device": device_description(self.target), "stages": []}
        self.state["calls"].append(call)
        self.save()
        for stage in stages:
            record = self.state["stages"].get(stage, {})
            if record.get("complete") and record.get("scope") == self.scope(stage):
                continue
            if self.past_deadline():
                break
            print(f"campaign: {stage}", flush=True)
            call["stages"].append(stage)
            self.save()
            complete = getattr(self, stage)()
            if complete:
                self.state["stages"][stage] = {"complete": True, "finished": _now(), "scope": self.scope(stage)}
            self.save()
            if not complete:
                break
        call["ended"] = _now()
        self.save()
        write_readme(self.out)

    def scope(self, stage: str) -> list[str]:
        return scope(self.scale, stage)

    # -- anchors -----------------------------------------------------------------------------
    def anchors(self) -> bool:
        return self._libraries(self.scale.anchors, (False, True))

    def _libraries(self, names: Sequence[str], tf32s: tuple[bool, ...]) -> bool:
        """The vendor library of each workload timed alone on this GPU (``anchor.measure``), at
        each of ``tf32s``, in ``anchors.json``; a workload that has none here gets the reason."""
        path = self.out / "anchors.json"
        found = json.loads(path.read_text()) if path.exists() else []
        done = {(a["workload"], a["tf32"]) for a in found}
        for name in names:
            for tf32 in tf32s:
                if (name, tf32) in done:
                    continue
                if self.past_deadline():
                    return False
                try:
                    measured, why = anchor.measure(named_or_operator(name), self.target, tf32=tf32), None
                except Exception as e:  # noqa: BLE001
                    # A library that cannot run here (an operator's that cannot read the GPU's tensors): the
                    # reason is recorded and the campaign goes on; raised, every later call would stop here.
                    measured, why = None, f"{type(e).__name__}: {e}"
                found.append({"workload": name, "tf32": tf32, "device": self.gpu, **(measured.to_json() if measured else {
                    "library": None, "why": why or ("no library with a visible GPU here (a dry run)" if self.dry_run
                                                    else "no library with a visible GPU here")})})
                replace_text(path, json.dumps(found, indent=2) + "\n")
        return True

    # -- goals and comparison ----------------------------------------------------------------
    def goals(self) -> bool:
        """OpEvo alone on each goal workload, in ``goals.csv`` (apart from the comparison's
        runs, which are longer and would otherwise resume from these)."""
        return self._steps("goals", self.scale.goals, self.out / "goals.csv")

    def pursuit(self) -> bool:
        """The goal runs carried on where their goal is not met (``pursuit_steps``), in ``goals.csv``,
        so the goals' table reads each run at its full length; whether each is met is judged again
        after every step."""
        while steps := pursuit_steps(self.scale, self.out, self.state.get("pursuit_steps", [])):
            name = steps[0].workloads[0]
            if not self._steps("pursuit", steps[:1], self.out / "goals.csv", {name: measured_here(self.out, name)}):
                return False
        return True

    def operators(self) -> bool:
        """OpEvo on each user's operator (``operators.csv``), then the library each names timed on
        this GPU (``anchors.json``), which the report sets the best kernel against."""
        return self._steps("operators", self.scale.operators, self.out / "operators.csv") and \
            self._libraries([name for step in self.scale.operators for name in step.workloads], (False,))

    def comparison(self) -> bool:
        return self._steps("comparison", self.scale.steps, self.out / "trials.csv")

    def _steps(self, stage: str, todo: tuple[Step, ...] | list[Step], csv_path: Path,
               prior: dict[str, list[dict[str, Any]]] | None = None) -> bool:
        steps = self.state.setdefault(f"{stage}_steps", [])
        for step in todo:
            if step.name in steps:
                continue
            print(f"campaign: {stage} {step.name}", flush=True)
            plan = Plan([Live(name, self.target, LIMITS, build_only=self.dry_run) for name in step.workloads],
                        list(step.tuners), list(range(step.seeds)), step.budget, self.concurrency,
                        deadline=self.deadline, prior=prior or {})
            if not run_plan(plan, csv_path, progress=False):
                return False
            steps.append(step.name)
            self.save()
        return True

    # -- correctness -------------------------------------------------------------------------
    def correctness(self) -> bool:
        path = self.out / "correctness.jsonl"
        done = {(r["workload"], r["kind"], r["index"]) for r in read_jsonl(path)}
        # Probes for the named workloads only: a user's normalization has no configuration a launch
        # limit refuses (its threads are a factor of its rows), and looking for one costs DRAWS draws.
        todo = [(name, kind, index) for name in self.scale.correctness
                for kind, count in (("admitted", self.scale.admitted), ("probe", self.scale.probes if name in NAMED else 0))
                for index in range(count) if (name, kind, index) not in done]

        def one(item: tuple[str, str, int]) -> dict[str, Any]:
            name, kind, index = item
            workload = named_or_operator(name)
            seed = 1000 * (*NAMED, *EXAMPLES).index(name) + index
            params, rule = draw(name, self.target, seed, admitted=kind == "admitted")
            if params is None:
                return {"workload": name, "kind": kind, "index": index, "params": None, "rule": rule,
                        "status": "NOT_DRAWN", "error": f"none found in {DRAWS} draws"}
            result = evaluate(workload, params, self.target, self.scale.probe_limits if kind == "probe" else LIMITS,
                              build_only=self.dry_run, unchecked=kind == "probe")
            return {"workload": name, "kind": kind, "index": index, "params": params, "rule": rule,
                    **self._result_fields(result)}

        return self._each(todo, one, path)

    # -- knobs -------------------------------------------------------------------------------
    def knobs(self) -> bool:
        """Each GEMM goal workload's best ``knob_tiles`` tiles from ``goals.csv`` (a tile: the
        configuration less the knobs), measured under every combination of the knobs, in
        ``knobs.jsonl``; a combination the check refuses is recorded with its rule, not run."""
        path = self.out / "knobs.jsonl"
        done = {(r["workload"], r["tile"], json.dumps(r["knobs"], sort_keys=True)) for r in read_jsonl(path)}
        todo = [(name, rank, tile, knobs) for name in self.scale.knobs
                for rank, tile in enumerate(tuned_tiles(self.out / "goals.csv", name, self.scale.knob_tiles))
                for knobs in knob_combinations(name, self.target.kind)[:self.scale.knob_combinations]
                if (name, rank, json.dumps(knobs, sort_keys=True)) not in done]

        def one(item: tuple[str, int, dict[str, Any], dict[str, int]]) -> dict[str, Any]:
            name, rank, tile, knobs = item
            return {"workload": name, "tile": rank, "knobs": knobs, **self._checked(lookup(name), {**tile, **knobs})}

        return self._each(todo, one, path)

    # -- ceiling -----------------------------------------------------------------------------
    def ceiling(self) -> bool:
        """Each plain MatMul goal workload under every classic tile (``classic_tiles``) in
        ``ceiling.jsonl``; a tile the check refuses is recorded with its rule, not run."""
        path = self.out / "ceiling.jsonl"
        done = {(r["workload"], r["index"]) for r in read_jsonl(path)}
        todo = [(name, index, params) for name in self.scale.ceiling
                for index, params in enumerate(classic_tiles(name)[:self.scale.ceiling_tiles])
                if (name, index) not in done]

        def one(item: tuple[str, int, dict[str, Any]]) -> dict[str, Any]:
            name, index, params = item
            return {"workload": name, "index": index, **self._checked(lookup(name), params)}

        return self._each(todo, one, path)

    def _checked(self, workload: Any, params: dict[str, Any]) -> dict[str, Any]:
        """``params`` and what measuring them gave, or REFUSED with the check's rule."""
        try:
            for_workload(workload).check(workload, params, self.target)
        except Infeasible as exc:
            return {"params": params, "status": "REFUSED", "rule": str(exc), "tflops": None, "device": self.gpu}
        return {"params": params, **self._result_fields(evaluate(workload, params, self.target, LIMITS,
                                                                  build_only=self.dry_run))}

    # -- throughput --------------------------------------------------------------------------
    def throughput(self) -> bool:
        path = self.out / "throughput.jsonl"
        done = {r["index"] for r in read_jsonl(path) if "index" in r}
        todo = [index for index in range(self.scale.throughput) if index not in done]
        if not todo:
            return True
        started = time.monotonic()

        def one(index: int) -> dict[str, Any]:
            params, _ = draw("MM1", self.target, 50_000 + index, admitted=True)
            result = evaluate(lookup("MM1"), params, self.target, LIMITS, build_only=self.dry_run)
            return {"index": index, "workers": "forked" if forked.active() else "programs",
                    **self._result_fields(result)}

        complete = self._each(todo, one, path)
        with self.lock, open(path, "a") as handle:  # this call's share of the wall clock
            handle.write(json.dumps({"segment_s": time.monotonic() - started, "trials": len(todo)}) + "\n")
        return complete

    def _each(self, todo: list[Any], one: Callable[[Any], dict[str, Any]], path: Path) -> bool:
        """``one`` over ``todo``, ``concurrency`` at a time, each line appended as it ends (after
        the whole lines a killed call left); none started past the deadline. Whether every item
        was done."""
        drop_partial_row(path)
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

    def _result_fields(self, result: Result) -> dict[str, Any]:
        return {"status": result.status.name, "tflops": result.tflops, "latency_ms": result.latency_ms,
                "build_s": result.build_s, "wait_s": result.wait_s, "measure_s": result.measure_s,
                "total_s": result.total_s, "error": result.error[-300:], "device": self.gpu}


def tuned_tiles(goals_csv: Path, name: str, count: int) -> list[dict[str, Any]]:
    """The ``count`` fastest tiles of a workload's goal runs, fastest first: each configuration
    less the knobs (and ``double_buffer``, which ``stages`` took over), the fastest one kept of
    those with the same blocking (``tile_*``)."""
    rows = [row for row in read_rows(goals_csv) if row["workload"] == name and row["status"] == "NO_ERROR"]
    tiles: dict[str, dict[str, Any]] = {}
    for row in sorted(rows, key=lambda row: -float(row["tflops"])):
        tile = {key: value for key, value in json.loads(row["configuration"]).items()
                if key not in (*KNOBS, "double_buffer")}
        tiles.setdefault(json.dumps({key: tile[key] for key in tile if key.startswith("tile_")}, sort_keys=True), tile)
    return list(tiles.values())[:count]


def pursuit_steps(scale: Scale, out: Path | None, done: Collection[str] = ()) -> list[Step]:
    """The pursuit's steps still to do, next first: each goal run carried on by ``scale.pursuit[0]``
    trials at a time up to ``scale.pursuit[1]``, every run at one length before any goes further,
    while ``out`` holds it short of its goal (``goals_met``: a goal not judged, for want of the
    vendor library's figure, counts as unmet; without ``out``, every goal). ``done``: the steps
    ended already, one whose run stopped short included (its space exhausted)."""
    add, most = scale.pursuit
    runs = Counter(row["workload"] for row in read_rows(out / "goals.csv")) if out else Counter()
    start = {step.workloads[0]: step.budget for step in scale.goals}
    levels = sorted({budget for first in start.values() for budget in range(first + add, most + 1, add)})
    met = goals_met(out) if out else set()
    steps = [Step((name,), 1, budget, ("opevo",)) for budget in levels for name, first in start.items()
             if first < budget and runs[name] < budget and name not in met]
    return [step for step in steps if step.name not in done]


def measured_here(out: Path, name: str) -> list[dict[str, Any]]:
    """What the knobs and ceiling stages measured of a workload in ``out`` (on its device), as the
    ``import_data`` entries a pursuit's run starts from: every configuration the check admitted,
    a failed one at 0 TFLOPS as a trial's row records it."""
    rows = [*read_jsonl(out / "knobs.jsonl"), *read_jsonl(out / "ceiling.jsonl")]
    return [{"parameter": row["params"], "value": row["tflops"] or 0.0} for row in rows
            if row["workload"] == name and row["status"] != "REFUSED"]


def knob_combinations(name: str, target_kind: str) -> list[dict[str, int]]:
    """Every combination of the knobs' values in the workload's space."""
    workload = lookup(name)
    space = for_workload(workload).space(workload, target_kind)
    return [dict(zip(KNOBS, values)) for values in itertools.product(*(space[knob]["_value"] for knob in KNOBS))]


CLASSIC_BLOCKS = ((128, 128), (128, 64), (64, 128), (64, 64))
CLASSIC_THREAD_TILES = ((8, 8), (8, 4))
CLASSIC_SPLITS = (1, 2, 4)
CLASSIC_STAGES = (2, 3)
CLASSIC_CHUNK = 8
"""The classic fp32 GEMM tiles (the CUTLASS SIMT and cuBLAS sgemm kernels' shapes): a block's
outputs (n by m), a thread's, split-K, the pipeline's stages, and K's chunk per stage."""


def classic_tiles(name: str) -> list[dict[str, Any]]:
    """The classic tiles that divide a MatMul's shape, as its CUDA space's configurations: no
    virtual threads, the thread's K loop outside its outputs, 128-bit loads, the block unrolled."""
    shape = lookup(name).shape
    n, k, m = shape["n"], shape["k"], shape["m"]
    return [{"tile_n": [n // bn, 1, bn // tn, tn], "tile_m": [m // bm, 1, bm // tm, tm],
             "tile_k": [split, k // (split * CLASSIC_CHUNK), CLASSIC_CHUNK, 1], "inner_order": ["k", "n", "m"],
             "unroll": 512, "vector": 4, "stages": stages, "pad": 0, "raster": 0}
            for (bn, bm), (tn, tm), split, stages in itertools.product(CLASSIC_BLOCKS, CLASSIC_THREAD_TILES,
                                                                       CLASSIC_SPLITS, CLASSIC_STAGES)
            if n % bn == 0 and m % bm == 0 and k % (split * CLASSIC_CHUNK) == 0]


def draw(name: str, target: targets.Target, seed: int, admitted: bool) -> tuple[dict[str, Any] | None, str]:
    """A random configuration the static check admits, or (a probe) one it refuses for a launch
    limit only, with the rule that refused it (``constraint.draw``)."""
    return constraint.draw(named_or_operator(name), target, seed, () if admitted else LAUNCH_LIMITS, tries=DRAWS)


def _nvidia_smi(field: str) -> str:
    if not shutil.which("nvidia-smi"):
        return ""
    found = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30)
    return found.stdout.strip().splitlines()[0] if found.returncode == 0 and found.stdout.strip() else ""


def gpu_name(target: targets.Target) -> str:
    """The GPU a campaign's rows were measured on, as nvidia-smi names it (the driver may change
    between loans, the card may not), or what a dry run builds for."""
    return _nvidia_smi("name") or f"no GPU visible: builds for {target.arch} only"


def device_description(target: targets.Target) -> str:
    """The GPU with its driver and the arch built for, or why there is none."""
    found = _nvidia_smi("name,driver_version")
    return f"{found} ({target.arch})" if found else f"no GPU visible: builds for {target.arch} only"


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())


def _hold(out: Path) -> Any:
    """An exclusive lock on the folder for this call; FolderInUse when another call holds it. A
    POSIX record lock (``lockf``), which belongs to this process alone, so the OS drops it the
    moment a killed call's process dies: a ``flock`` is shared with every child forked while it
    is held, so a build worker caught between its fork and its exec (its session already its
    own, out of reach of the kill) can keep a killed call's folder locked."""
    handle = open(out / ".campaign.lock", "a")
    try:
        fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except (BlockingIOError, PermissionError):  # EAGAIN or EACCES, as the platform answers
        handle.close()
        raise FolderInUse(f"another campaign call is running in {out}: wait for it, or give another --out") from None
    return handle


def _stop_at(seconds: float) -> threading.Timer:
    """The call's hard limit: past it the process ends whatever is in flight. Every finished row
    is on disk already (each is appended and flushed as it ends); the trials cut off are done
    again by the next call, and their workers die with this process (``trial_code.watcher``)."""
    def stop() -> None:
        print(f"campaign: the call's limit of {seconds:.0f} s reached with work in flight: stopped; every finished "
              "row is kept, run the same command again to go on", flush=True)
        os._exit(HARD_STOP_EXIT)

    timer = threading.Timer(seconds, stop)
    timer.daemon = True
    timer.start()
    return timer


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="nni-opevo campaign", description=description(__doc__),
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=epilog(__doc__))
    parser.add_argument("--out", type=Path, help="the campaign's folder (created; resumed if present)")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: build and nvcc-compile only, tiny budget")
    add_number(parser, "--minutes", float, 0.01, 600, "the call's hard limit in minutes: no trial starts in its last "
               f"{RESERVE_S:.0f} s and the call stops at it, whatever is in flight", default=9.0)
    add_number(parser, "--concurrency", int, 1, 64, "trials building at a time (measurements take turns)",
               default=max(1, min(14, (os.cpu_count() or 2) - 2)))
    parser.add_argument("--stages", nargs="+", choices=STAGES, default=list(STAGES),
                        help="the stages to run, in the campaign's order (default: all)")
    parser.add_argument("--report", action="store_true", help="only rewrite --out's README.md from its rows (no GPU)")
    add_number(parser, "--plan", float, 0, 86_400, "print the device calls a loan with this many device seconds "
               "left allows (with --out: for what that campaign has still to do), and exit", metavar="SECONDS")
    args = parser.parse_args(argv)
    if args.plan is not None:
        state_path = args.out / "campaign.json" if args.out else None
        state = json.loads(state_path.read_text()) if state_path and state_path.is_file() else None
        print(campaign_calls.render(campaign_calls.plan(args.plan, stage_minutes(state, args.out if state else None))))
        return
    if args.out is None:
        parser.error("--out is required (the campaign's folder)")
    if args.report:
        if not (args.out / "campaign.json").is_file():
            parser.error(f"--report: {args.out} holds no campaign (no campaign.json)")
        write_readme(args.out)
        print(f"campaign: {args.out / 'README.md'} rewritten", flush=True)
        return
    target = targets.cuda()
    if not args.dry_run and not target.has_device:
        parser.error("no CUDA GPU is visible here: run with --dry-run, or on the GPU machine (docs/gpu-campaign.md)")
    limit_s = args.minutes * 60
    deadline = time.monotonic() + max(limit_s - RESERVE_S, limit_s / 4)
    timer = _stop_at(limit_s)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        held = _hold(args.out)
        campaign = Campaign(args.out, args.dry_run, deadline, args.concurrency)
        command = " ".join(["nni-opevo campaign", *(argv if argv is not None else sys.argv[1:])])
        with forked.workers():
            campaign.run(tuple(stage for stage in STAGES if stage in args.stages), command)
        held.close()
    except OSError as e:  # a file where the folder should be, no permission, a full disk: one line
        raise SystemExit(f"campaign: cannot write {e.filename or args.out}: {e.strerror or e}; every row written "
                         "before is kept") from None
    finally:
        timer.cancel()
    complete = [stage for stage in STAGES if campaign.state["stages"].get(stage, {}).get("complete")]
    print(f"campaign: complete {', '.join(complete) or 'nothing yet'}; "
          f"{'all done' if len(complete) == len(STAGES) else 'run the same command again to go on'}; "
          f"{args.out / 'README.md'}", flush=True)


if __name__ == "__main__":
    main()
