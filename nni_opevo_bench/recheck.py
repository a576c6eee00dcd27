"""Recorded trials against the static check as it is now: which it would refuse, by which rule,
and how fast those ran against the rest.

A rule added to the check after a run (a CPU register tile past the vector registers, a GEMM
tile past the multiply-adds nvcc builds in time) is judged by the trials that run measured: the
command reads a ``trials.csv`` (or ``.csv.gz``) of ``nni-opevo benchmark``, of a GPU campaign's
``goals.csv`` or ``trials.csv``, checks each trial's configuration with its workload's template
and prints, per workload, how many the check refuses now, by rule, and the best each side
measured. It builds and runs nothing. Trials whose configurations are not of the space as it is
now (MetaSchedule's, or a run's before a knob was added) are counted apart.

    nni-opevo recheck docs/results/cpu/trials.csv --vectors avx
    nni-opevo recheck docs/results/h200/goals.csv docs/results/h100/trials.csv --tuners opevo

The limits are those of the machine the trials ran on, as ``run.json`` beside the file records
its target; a CPU run that predates recording its vector registers needs ``--vectors`` (the
flag of its widest instruction set in /proc/cpuinfo); CUDA rows with no ``run.json`` are
checked against an H100's limits.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from trial_code import targets, workloads
from trial_code.cli import description, epilog
from trial_code.constraint import rule
from trial_code.status import Status
from trial_code.targets import Target
from trial_code.templates import Infeasible, NotInSpace, for_workload

from .table import read_rows

COLUMNS = ("workload", "target", "tuner", "tflops", "status", "configuration")
"""The columns of a trials.csv the command reads."""
UNITS = {"llvm": ("GFLOPS", 1e3), "cuda": ("TFLOPS", 1.0)}
"""How each target's pages state speed: the CPU's kernels in GFLOPS, the GPU's in TFLOPS."""


@dataclasses.dataclass
class Tally:
    """One workload's rechecked trials."""

    checked: int = 0
    refused: Counter[str] = dataclasses.field(default_factory=Counter)
    best_admitted: float | None = None
    best_refused: float | None = None
    foreign: Counter[str] = dataclasses.field(default_factory=Counter)
    """Trials whose configuration is not of the space as it is now, by tuner: a tuner of a
    space of its own (MetaSchedule's), or a run of a space since changed."""

    def add(self, refusal: str | None, tflops: float | None) -> None:
        self.checked += 1
        if refusal:
            self.refused[rule(refusal)] += 1
        if tflops is not None:
            side = "best_refused" if refusal else "best_admitted"
            setattr(self, side, max(tflops, getattr(self, side) or tflops))


def recorded_target(trials: Path, kind: str, vectors: str | None) -> Target:
    """The limits the file's trials ran under: ``run.json``'s target where it names one of this
    kind (its latest invocation), else an H100's or this CPU kind's; ``vectors`` replaces the
    CPU's vector registers. A CPU target that states none refuses to guess them."""
    found = _run_target(trials.parent / "run.json")
    recorded = Target.from_json(found) if found and found.get("kind") == kind else None
    target = recorded or (targets.h100() if kind == "cuda" else Target("llvm"))
    if kind == "llvm" and vectors:
        target = dataclasses.replace(target, **targets.vectors_of(vectors))
    if kind == "llvm" and not target.vector_registers:
        raise ValueError("its run does not record the CPU's vector registers (run.json); name its "
                         f"widest instruction set with --vectors {'|'.join(targets.VECTOR_SETS)}")
    return target


def _run_target(info: Path) -> dict[str, Any] | None:
    """The target ``run.json``'s latest run records beside its machine (``machine.recorded``), if
    it records one; a benchmark run from before that held it as JSON text inside its machine."""
    if not info.exists():
        return None
    try:
        runs = json.loads(info.read_text())
    except json.JSONDecodeError:
        raise ValueError(f"{info} is not JSON") from None
    runs = runs.get("invocations", [runs]) if isinstance(runs, dict) else runs
    last = runs[-1] if isinstance(runs, list) and runs and isinstance(runs[-1], dict) else {}
    machine = last.get("machine")
    found = last.get("target") or (machine.get("target") if isinstance(machine, dict) else None)
    found = json.loads(found) if isinstance(found, str) else found
    return found if isinstance(found, dict) else None


def recheck(rows: Iterable[dict[str, str]], target: Target) -> dict[str, Tally]:
    """Each workload's trials on ``target``'s kind checked against ``target``."""
    tallies: dict[str, Tally] = defaultdict(Tally)
    resolved: dict[str, workloads.Workload] = {}
    for row in rows:
        name = row["workload"]
        if name not in resolved:  # a user's operator imports its module and reads its structure
            resolved[name] = workloads.named_or_operator(name)
        workload = resolved[name]
        tally = tallies[name]
        try:
            params = json.loads(row["configuration"])
        except json.JSONDecodeError:
            raise ValueError(f"a {row['workload']} trial's configuration is not JSON: {row['configuration'][:80]}") from None
        try:
            for_workload(workload).check(workload, params, target)
        except NotInSpace:
            tally.foreign[row["tuner"]] += 1
            continue
        except Infeasible as refusal:
            refused: str | None = str(refusal)
        else:
            refused = None
        measured = row["status"] == Status.NO_ERROR.name and row["tflops"] not in ("", "nan")
        tally.add(refused, float(row["tflops"]) if measured else None)
    return tallies


def describe(target: Target) -> str:
    """The limits the trials are checked against, in words."""
    if target.kind == "llvm":
        return f"the CPU's {target.vector_registers} vector registers of {target.vector_bytes} bytes"
    return (f"CUDA {target.arch}, {target.max_threads_per_block} threads and "
            f"{target.shared_memory_limit // 1024} KB of shared memory a block")


def table(tallies: dict[str, Tally], kind: str) -> list[str]:
    """A Markdown table of ``recheck``'s tallies, a workload a row, speeds in the target's unit."""
    unit, scale = UNITS[kind]

    def speed(tflops: float | None) -> str:
        return "-" if tflops is None else f"{tflops * scale:.1f}"

    lines = [f"| workload | trials | not of the space (tuners) | refused now | by rule | best admitted ({unit}) "
             f"| best refused ({unit}) |", "|---|---|---|---|---|---|---|"]
    for name, tally in tallies.items():
        refused = sum(tally.refused.values())
        foreign = sum(tally.foreign.values())
        tuners = f"{foreign} ({', '.join(sorted(tally.foreign))})" if foreign else "0"
        share = f"{refused} of {tally.checked} ({refused / tally.checked:.0%})" if tally.checked else "-"
        rules = "; ".join(f"{what} {n}" for what, n in tally.refused.most_common()) or "-"
        lines.append(f"| {name} | {tally.checked + foreign} | {tuners} | {share} | {rules} | "
                     f"{speed(tally.best_admitted)} | {speed(tally.best_refused)} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nni-opevo recheck", description=description(__doc__),
                                     epilog=epilog(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trials", nargs="+", type=Path, help="trials.csv or goals.csv files (.gz: compressed)")
    parser.add_argument("--tuners", nargs="+", help="only these tuners' trials (default: every tuner's)")
    parser.add_argument("--vectors", choices=list(targets.VECTOR_SETS),
                        help="the CPU's widest instruction set, as /proc/cpuinfo flags it (default: as run.json says)")
    args = parser.parse_args(argv)
    for path in args.trials:
        try:
            _report(path, args.tuners, args.vectors)
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None
    return 0


def _report(path: Path, tuners: list[str] | None, vectors: str | None) -> None:
    """Print one file's tables, one for each target kind its trials ran on."""
    if not path.exists():
        raise ValueError("no such file")
    rows = read_rows(path)
    missing = [column for column in COLUMNS if rows and column not in rows[0]]
    if missing:
        raise ValueError(f"no column {', '.join(missing)}: not a trials.csv of nni-opevo benchmark or campaign")
    rows = [r for r in rows if not tuners or r["tuner"] in tuners]
    kinds = sorted({r["target"] for r in rows})
    for kind in kinds:
        if kind not in UNITS:
            raise ValueError(f"target {kind!r} is neither of {', '.join(UNITS)}")
    shown = [f"# {path}" + (f", {' '.join(tuners)}" if tuners else ""), ""] + ([] if rows else ["No trials.", ""])
    for kind in kinds:
        target = recorded_target(path, kind, vectors)
        shown += [f"Checked against {describe(target)}:", "",
                  *table(recheck((r for r in rows if r["target"] == kind), target), kind), ""]
    print("\n".join(shown))  # whole or not at all: a bad row ends the file's report in one line


if __name__ == "__main__":
    sys.exit(main())
