"""The GPU campaign's README: one table per stage, drawn from the files of the campaign's folder.

Written after every call, and again by ``nni-opevo campaign --report --out DIR`` anywhere (no GPU
needed), so a published folder's figures can be regenerated from the rows beside them.
"""
from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from trial_code.constraint import rule
from trial_code.files import replace_text
from trial_code.status import Status
from trial_code.workloads import NAMED, named_or_operator

from .operators import HAND_WRITTEN
from .table import read_rows

STAGE_ORDER = ("anchors", "goals", "correctness", "throughput", "knobs", "ceiling", "pursuit", "operators",
               "comparison")
GOALS = {"MM1": 1.0, "MM2": 1.0, "MM3": 1.0, "BMM1": 1.0, "BMM2": 1.0, "BMM3": 1.0, "C1": 0.9}
"""The project's goals: the best kernel's speed over the vendor library's at fp32, TF32 off
(cuBLAS on MM1-3 and BMM1-3, cuDNN on C1; C2's cuDNN figure is a Winograd or FFT algorithm
counted in direct-convolution FLOPs, so it has none)."""
LAUNCH_FAILURES = (Status.COMPILE_DEVICE.name, Status.RUNTIME_DEVICE.name, Status.WRONG_ANSWER.name)
"""What an admitted configuration must never do on the device: the check or a template is wrong.
A run past the run limit is counted apart: a slow kernel, not a launch the check should refuse."""


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Whole lines only: a line cut off by a killed call is dropped (its item is done again)."""
    if not path.exists():
        return
    for line in path.read_text().splitlines():
        try:
            yield json.loads(line)
        except json.JSONDecodeError:
            continue


def write_readme(out: Path) -> None:
    """``out/README.md`` from ``out/campaign.json`` and the stages' files."""
    state = json.loads((out / "campaign.json").read_text())
    calls = state.get("calls", [])
    complete = [s for s in STAGE_ORDER if state.get("stages", {}).get(s, {}).get("complete")]
    lines = ["# GPU campaign" + (" (dry run: builds only, nothing measured)" if state.get("dry_run") else ""), "",
             f"Device: {state.get('device') or (calls[-1]['device'] if calls else 'none yet')}. "
             f"Stages complete: {', '.join(complete) or 'none'}. Regenerate this page: "
             "`nni-opevo campaign --report --out <this folder>`.", ""]
    lines += _calls_table(calls)
    anchors = json.loads((out / "anchors.json").read_text()) if (out / "anchors.json").exists() else []
    lines += _anchor_table(anchors)
    lines += _tuner_table(out / "goals.csv", anchors, "## OpEvo against the vendor libraries")
    lines += _correctness_table(list(read_jsonl(out / "correctness.jsonl")))
    lines += _throughput_table(list(read_jsonl(out / "throughput.jsonl")))
    lines += _knobs_table(list(read_jsonl(out / "knobs.jsonl")), out / "goals.csv", anchors)
    lines += _ceiling_table(list(read_jsonl(out / "ceiling.jsonl")), out / "goals.csv", anchors)
    lines += _tuner_table(out / "operators.csv", anchors, "## Users' operators (examples/operators.py), OpEvo")
    lines += _derived_beside_hand_written(out / "operators.csv", out / "goals.csv", anchors)
    lines += _tuner_table(out / "trials.csv", anchors, "## Comparison")
    replace_text(out / "README.md", "\n".join(lines) + "\n")


def _calls_table(calls: list[dict[str, Any]]) -> list[str]:
    if not calls:
        return []
    lines = ["## Calls", "", "| # | started | ended | stages | command |", "|---|---|---|---|---|"]
    for number, call in enumerate(calls, 1):
        lines.append(f"| {number} | {call['started']} | {call.get('ended', 'cut off')} | "
                     f"{', '.join(call.get('stages', [])) or '-'} | `{call['command']}` |")
    return lines + [""]


def _correctness_table(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    lines = ["## Correctness and the static limits", "",
             "| workload | admitted: statuses | refused by a launch limit, run anyway: statuses |", "|---|---|---|"]
    # The registry's order (a user's operators after it), whichever call measured a workload first.
    registry = {name: i for i, name in enumerate(NAMED)}
    for name in sorted(dict.fromkeys(r["workload"] for r in rows), key=lambda n: registry.get(n, len(registry))):
        cells = []
        for kind in ("admitted", "probe"):
            counts = Counter(r["status"] for r in rows if r["workload"] == name and r["kind"] == kind)
            cells.append(", ".join(f"{status} {n}" for status, n in sorted(counts.items())) or "-")
        lines.append(f"| {name} | {cells[0]} | {cells[1]} |")
    admitted = [r for r in rows if r["kind"] == "admitted"]
    if rows and all(r.get("latency_ms") is None for r in rows):  # a dry run: built, nothing ran
        unbuilt = [r for r in admitted if r["status"] != Status.NO_ERROR.name]
        return lines + ["", f"Dry run: admitted configurations that failed to build: {len(unbuilt)}.", ""]
    bugs = [r for r in admitted if r["status"] in LAUNCH_FAILURES]
    slow = [r for r in admitted if r["status"] == Status.RUN_TIMEOUT.name]
    lost = Counter(rule(r["rule"]) for r in rows
                   if r["kind"] == "probe" and r["status"] == Status.NO_ERROR.name)
    probes = sum(r["kind"] == "probe" for r in rows)
    return lines + ["", f"Admitted but refused or wrong on the device (a bug in the check or a template): "
                        f"{len(bugs)} of {len(admitted)}. Admitted but past the run limit (slow kernels): "
                        f"{len(slow)}. Refused but ran (space the check loses): {sum(lost.values())} of {probes}"
                    + (f", by rule: {', '.join(f'{rule} {n}' for rule, n in lost.most_common())}" if lost else "")
                    + ".", ""]


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


def _tuner_table(csv_path: Path, anchors: list[dict[str, Any]], heading: str) -> list[str]:
    rows = read_rows(csv_path)
    if not rows:
        return []
    vendor = _vendor(anchors)
    lines = [heading, "", "Best TFLOPS per run as the trial measured it (median over seeds, with min-max), its "
             "fraction of the vendor library's at fp32 (TF32 off, timed apart), and the goal for that fraction.", "",
             "| workload | tuner | seeds | trials per seed | failed trials | best TFLOPS | / vendor | goal |",
             "|---|---|---|---|---|---|---|---|"]
    runs: dict[tuple[str, str], dict[str, list[float]]] = {}
    failed: Counter[tuple[str, str]] = Counter()
    for row in rows:
        runs.setdefault((row["workload"], row["tuner"]), {}).setdefault(row["seed"], []).append(float(row["tflops"]))
        failed[(row["workload"], row["tuner"])] += row["status"] != Status.NO_ERROR.name
    order = {name: index for index, name in enumerate(dict.fromkeys(a["workload"] for a in anchors))}
    for (workload, tuner), seeds in sorted(runs.items(), key=lambda item: (order.get(item[0][0], 99), item[0])):
        best = [max(values) for values in seeds.values()]
        trials = sorted({len(values) for values in seeds.values()})
        median = float(np.median(best))
        fraction = median / vendor[workload] if vendor.get(workload, 0) > 0 else None
        goal = GOALS.get(workload)
        verdict = "-" if goal is None or fraction is None else \
            f"{goal:.1f}x: {'met' if fraction >= goal else f'**not met** ({fraction - goal:+.3f})'}"
        lines.append(f"| {workload} | {tuner} | {len(seeds)} | {'/'.join(map(str, trials))} | "
                     f"{failed[(workload, tuner)]} | {median:.2f} ({min(best):.2f}-{max(best):.2f}) | "
                     f"{'-' if fraction is None else f'{fraction:.3f}'} | {verdict} |")
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
    # Rows from before workers could be forked (``trial_code.forked``) name none: they were programs.
    workers = " and ".join(sorted({r.get("workers", "programs") for r in trials}))
    return ["## Throughput (MM1, random admitted configurations)", "",
            "| trials | workers | trials per minute | build s p10 / p50 / p90 / max | building | waiting for the GPU | "
            "measuring | other (starting the worker: a program importing TVM, or a fork) |",
            "|---|---|---|---|---|---|---|---|",
            f"| {len(trials)} | {workers} | {60 * len(trials) / wall:.1f} | {p10:.2f} / {p50:.2f} / {p90:.2f} / "
            f"{np.max(builds):.2f} | {shares['build']:.0%} | {shares['wait']:.0%} | {shares['measure']:.0%} | "
            f"{1 - sum(shares.values()):.0%} |", ""]


def _knobs_table(rows: list[dict[str, Any]], goals_csv: Path, anchors: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    vendor, goal_best = _vendor(anchors), _goal_best(goals_csv)
    knobs = list(rows[0]["knobs"])
    values = {knob: sorted({r["knobs"][knob] for r in rows}) for knob in knobs}
    lines = ["## The GEMM space's knobs on tuned tiles", "",
             "Each workload's fastest tiles of its goal run (the configuration less these knobs), measured under "
             "every combination of the knobs the check admits. Per value of a knob: the best TFLOPS with that "
             "value, over the tiles and the other knobs (-: the check refused that value for every tile).", "",
             "| workload | tiles | ran / refused / failed | goal run's best | best here | / vendor | "
             + " | ".join(f"{knob} {'/'.join(map(str, values[knob]))}" for knob in knobs) + " |",
             "|---|---|---|---|---|---|" + "---|" * len(knobs)]
    for name in dict.fromkeys(r["workload"] for r in rows):
        mine = [r for r in rows if r["workload"] == name]
        ran, counts = _tally(mine)
        if not ran:
            lines.append(f"| {name} | {len({r['tile'] for r in mine})} | {counts} | - | - | - |" + " - |" * len(knobs))
            continue
        best = max(ran, key=lambda r: r["tflops"])
        cells = [" / ".join(_best_with(ran, knob, value) for value in values[knob]) for knob in knobs]
        chosen = ", ".join(f"{knob} {best['knobs'][knob]}" for knob in knobs)
        lines.append(f"| {name} | {len({r['tile'] for r in mine})} | {counts} | "
                     f"{goal_best.get(name, math.nan):.2f} | {best['tflops']:.2f} ({chosen}) | "
                     f"{_fraction(best, vendor, name)} | " + " | ".join(cells) + " |")
    return lines + [""]


def _best_with(ran: list[dict[str, Any]], knob: str, value: Any) -> str:
    found = [r["tflops"] for r in ran if r["knobs"][knob] == value]
    return f"{max(found):.1f}" if found else "-"


def _ceiling_table(rows: list[dict[str, Any]], goals_csv: Path, anchors: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    vendor, goal_best = _vendor(anchors), _goal_best(goals_csv)
    lines = ["## The template's ceiling: classic tiles", "",
             "The classic fp32 GEMM tiles (`nni_opevo_bench.campaign.classic_tiles`), each measured once, apart "
             "from any search: what the template reaches where a search has not looked.", "",
             "| workload | ran / refused / failed | goal run's best | best classic tile | block n x m, thread n x m, "
             "split-K, stages | / vendor |", "|---|---|---|---|---|---|"]
    for name in dict.fromkeys(r["workload"] for r in rows):
        ran, counts = _tally([r for r in rows if r["workload"] == name])
        if not ran:
            lines.append(f"| {name} | {counts} | {goal_best.get(name, math.nan):.2f} | - | - | - |")
            continue
        best = max(ran, key=lambda r: r["tflops"])
        n, m, k = (best["params"][f"tile_{axis}"] for axis in "nmk")
        shape = f"{n[2] * n[3]} x {m[2] * m[3]}, {n[3]} x {m[3]}, {k[0]}, {best['params']['stages']}"
        lines.append(f"| {name} | {counts} | {goal_best.get(name, math.nan):.2f} | {best['tflops']:.2f} | {shape} | "
                     f"{_fraction(best, vendor, name)} |")
    return lines + [""]


def _tally(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """A fixed-configuration stage's rows that ran, and "ran / refused / failed" over all of them."""
    ran = [r for r in rows if r["status"] == Status.NO_ERROR.name and r["tflops"]]
    refused = sum(r["status"] == "REFUSED" for r in rows)
    return ran, f"{len(ran)} / {refused} / {len(rows) - len(ran) - refused}"


def _fraction(row: dict[str, Any], vendor: dict[str, float], name: str) -> str:
    return f"{row['tflops'] / vendor[name]:.3f}" if vendor.get(name) else "-"


def hand_written(name: str) -> str | None:
    """The named workload a derived operator's run computes with a hand-written template: an
    example that one covers (``operators.HAND_WRITTEN``, the MatMul) at a named workload's shape of
    that family (MM1's, in the operators stage); None for any other."""
    spec = name.split()[0]
    if spec not in HAND_WRITTEN or spec == name:
        return None
    family, shape = NAMED[HAND_WRITTEN[spec]].family, named_or_operator(name).shape
    return next((w.name for w in NAMED.values() if w.family == family
                 and all(shape.get(key) == value for key, value in w.shape.items() if key in ("n", "k", "m"))), None)


def _derived_beside_hand_written(operators_csv: Path, goals_csv: Path, anchors: list[dict[str, Any]]) -> list[str]:
    """A user's MatMul (the example, its template derived from the computation) at a named
    workload's shape, beside the hand-written template's goal run there: each OpEvo's best over as
    many trials (the goal run's first, by proposal), and each over the vendor library."""
    rows, goals, vendor = read_rows(operators_csv), read_rows(goals_csv), _vendor(anchors)
    lines = []
    for name in dict.fromkeys(row["workload"] for row in rows):
        twin = hand_written(name)
        if twin is None:
            continue
        derived = [float(row["tflops"]) for row in rows if row["workload"] == name]
        hand = [float(row["tflops"]) for row in goals if row["workload"] == twin and int(row["index"]) < len(derived)]
        if not hand:
            continue
        library = f" and {max(derived) / vendor[twin]:.3f} of cuBLAS" if vendor.get(twin, 0) > 0 else ""
        lines.append(f"The derived MatMul (`{name}`, {twin}'s computation from a user's tensor expression): "
                     f"{max(derived):.2f} TFLOPS after {len(derived)} trials, {max(derived) / max(hand):.3f} of the "
                     f"hand-written template's goal run on {twin} after as many ({max(hand):.2f}){library}.")
    return lines + [""] if lines else []


def _vendor(anchors: list[dict[str, Any]]) -> dict[str, float]:
    """Each workload's vendor library at fp32, TF32 off (the goals' measure)."""
    return {a["workload"]: a["tflops"] for a in anchors if not a["tf32"] and a.get("library")}


def _goal_best(goals_csv: Path) -> dict[str, float]:
    """Each workload's best TFLOPS over its goal runs."""
    best: dict[str, float] = {}
    for row in read_rows(goals_csv):
        best[row["workload"]] = max(best.get(row["workload"], 0.0), float(row["tflops"]))
    return best


def goals_met(out: Path) -> set[str]:
    """The workloads whose goal the goal runs in ``out`` met against the vendor library timed
    there; none where the library was not timed (a dry run, no PyTorch), which leaves it unknown."""
    path = out / "anchors.json"
    vendor = _vendor(json.loads(path.read_text())) if path.exists() else {}
    best = _goal_best(out / "goals.csv")
    return {name for name, goal in GOALS.items()
            if vendor.get(name, 0.0) > 0 and best.get(name, 0.0) >= goal * vendor[name]}
