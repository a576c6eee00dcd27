"""The whole table on brute-forced GPU tuning spaces: every space, one and eight trials at a time,
with and without the constraint, every tuner (``nni-opevo hub``).

    nni-opevo hub --out docs/results/benchmark-hub                 # runs what is missing, then the README
    nni-opevo hub --out docs/results/benchmark-hub --report-only   # the README again from fractions.csv.gz

A slice is a concurrency (trials in flight: 8 proposals are out before the first result returns,
as NNI's dispatcher does) and a mode: ``constrained`` gives every tuner the kernel's restrictions
(ours through the constraint hook, Kernel Tuner's natively, Optuna's through the adapter), ``free``
gives none, so a restricted configuration is a failed trial that costs an evaluation, as it does a
user with no static check (``objectives.Cache``). Each (slice, space) is one job: every tuner and
seed through the runner, rows in ``<rows>/<slice>/<folder>/<file>.csv`` (``--rows``, default
``~/.cache/nni-opevo/hub``, outside the docs; resumable: the same command carries on where it
stopped), jobs spread over ``--workers`` processes. A run ``fractions.csv.gz`` already holds is kept
too (``published_runs``), so machines that each run some seeds build one table.

Kernel Tuner's strategies evaluate one configuration at a time by design, so they run in the
concurrency-1 slices and the concurrency-8 slices compare OpEvo against those same runs (marked
``†``): a peer that waits for every result before its next proposal.

The report condenses the rows into ``fractions.csv.gz`` (slice, space, tuner, seed, budget: the best
found as a fraction of the space's optimum; committed, so the README is regenerated without the
rows) and writes ``README.md``: per slice, OpEvo's mean and worst seed against the best other
tuner's mean in each cell (space x budget), the count of cells OpEvo leads, every tuner's mean over
the slice's cells, and OpEvo paired seed by seed with the best other tuner of each cell; and
``fraction_vs_budget.png``, every tuner's mean over a slice's spaces against the budget.
"""
from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import sys
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nni_opevo import catalog
from trial_code import targets
from trial_code.cli import add_number, bounded, description, epilog
from trial_code.files import replace_text, user_cache

from . import figures, kernel_tuner_strategies, tuner_specs
from .machine import describe
from .objectives import Cache
from .report import fraction_at, group, paired
from .runner import Plan, run
from .table import read_rows

HUB = Path("../shared/data/benchmark_hub")
"""Where the hub's cache files are, from the repository root."""
BASELINE = "opevo"
TUNERS = [*catalog.COMPARED, "random", "optuna:tpe", "optuna:cmaes",
          *(f"kt:{s}" for s in kernel_tuner_strategies.STRATEGIES)]
"""The default tuners: the paper's comparison, NNI's Random, Optuna's TPE and CMA-ES, Kernel Tuner's
strategies. ``optuna:gp`` runs when named: its asks take seconds each, so one 200-evaluation run
costs about half an hour, more than every other tuner of a slice together (docs/benchmark.md)."""
CONCURRENCIES = (1, 8)
MODES = ("constrained", "free")
BUDGETS = (25, 50, 100, 200)
FRACTIONS = "fractions.csv.gz"
"""Packed (20 seeds of every tuner are some 58,000 lines, over 3 MB plain), and the same runs
give the same bytes (no time stamp in the gzip header), so writing the table again changes nothing."""
FIGURE = "fraction_vs_budget.png"
ROWS = Path(user_cache()) / "hub"
SEQUENTIAL = "†"
"""Marks a tuner of a concurrency-8 slice whose runs are those of the concurrency-1 slice."""


@dataclass(frozen=True)
class Slice:
    concurrency: int
    mode: str

    @property
    def name(self) -> str:
        return f"c{self.concurrency}-{self.mode}"

    @classmethod
    def parse(cls, name: str) -> Slice:
        concurrency, _, mode = name.removeprefix("c").partition("-")
        return cls(int(concurrency), mode)


Run = tuple[str, str, str, int]
"""(slice, space, tuner, seed)."""


def _job(path: str, piece: Slice, tuners: list[str], seeds: int, budget: int, rows: str,
         published: frozenset[tuple[str, str, int]]) -> str:
    """One (slice, space): every tuner and seed not ``published`` (space, tuner, seed); returns the space's name."""
    objective = Cache(path, constrained=piece.mode == "constrained")
    csv_path = Path(rows) / piece.name / f"{objective.workload}.csv"  # the cache's folder/file
    run(Plan([objective], tuners, list(range(seeds)), budget, piece.concurrency, published=published), csv_path,
        progress=False)
    return objective.workload


def published_runs(out: Path, budget: int, budgets: list[int]) -> dict[Run, dict[int, str]]:
    """The runs ``out/fractions.csv.gz`` already holds at every one of ``budgets`` (its fraction at each
    budget), from a run of the same ``budget`` (``run.json``): the command keeps them, so the table
    grows by seeds across machines that each run part of it (its rows stay on the machine that ran
    them). Delete the file, or a tuner's lines in it, to run them again."""
    path, info = out / FRACTIONS, out / "run.json"
    if not path.exists() or not info.exists() or json.loads(info.read_text()).get("budget") != budget:
        return {}
    runs: dict[Run, dict[int, str]] = defaultdict(dict)
    for row in read_rows(path):
        runs[(row["slice"], row["space"], row["tuner"], int(row["seed"]))][int(row["budget"])] = row["fraction"]
    return {run: fractions for run, fractions in runs.items() if all(b in fractions for b in budgets)}


def _tuners_of(piece: Slice, tuners: list[str]) -> list[str]:
    if piece.concurrency == 1:
        return tuners
    return [t for t in tuners if not kernel_tuner_strategies.is_strategy(t)]


def condense(rows: Path, out: Path, slices: list[Slice], budgets: list[int], optima: dict[str, float],
             seeds: int, published: dict[Run, dict[int, str]]) -> int:
    """Every run of seeds 0..``seeds``-1 (the rows may hold more, from a longer run) as its fraction of
    the optimum at each budget into ``out/fractions.csv.gz``: every tuner of a cell over the same seeds.
    A run without rows here is kept as ``published`` holds it; returns how many were."""
    order = {piece.name: i for i, piece in enumerate(slices)}
    kept = {run: values for run, values in published.items() if run[0] in order and run[3] < seeds}
    fractions = dict(kept)
    for piece in slices:
        for csv_path in sorted((rows / piece.name).glob("*/*.csv")):
            for workload, tuners in group(read_rows(csv_path)).items():
                for tuner, runs in tuners.items():
                    for seed, trials in runs.items():
                        if int(seed) < seeds:
                            fractions[(piece.name, workload, tuner, int(seed))] = {
                                b: f"{fraction_at(trials, b, optima[workload]):.6f}" for b in budgets}
    with gzip.GzipFile(out / FRACTIONS, "wb", mtime=0) as packed, io.TextIOWrapper(packed, newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["slice", "space", "tuner", "seed", "budget", "fraction"])
        for run in sorted(fractions, key=lambda r: (order[r[0]], *r[1:])):
            writer.writerows([*run, b, fractions[run][b]] for b in budgets)
    return sum(fractions[run] is values for run, values in kept.items())  # those no row replaced


Cells = dict[str, dict[tuple[str, int], dict[str, dict[str, float]]]]
"""slice -> (space, budget) -> tuner -> seed -> fraction."""


def read_fractions(path: Path) -> Cells:
    cells: Cells = defaultdict(lambda: defaultdict(lambda: defaultdict(dict)))
    for row in read_rows(path):
        cells[row["slice"]][(row["space"], int(row["budget"]))][row["tuner"]][row["seed"]] = float(row["fraction"])
    for name, table in list(cells.items()):  # the sequential peers' runs stand in the concurrency-8 slices
        piece = Slice.parse(name)
        if piece.concurrency != 1:
            continue
        for other in [n for n in list(cells) if Slice.parse(n).mode == piece.mode and Slice.parse(n).concurrency > 1]:
            for cell, tuners in table.items():
                for tuner, seeds in tuners.items():
                    if kernel_tuner_strategies.is_strategy(tuner) and cell in cells[other]:
                        cells[other][cell][tuner + SEQUENTIAL] = seeds
    return cells


def _mean(seeds: dict[str, float]) -> float:
    return float(np.mean(list(seeds.values())))


def slice_report(name: str, table: dict[tuple[str, int], dict[str, dict[str, float]]]) -> tuple[list[str], dict]:
    """The slice's table of cells and its summary figures."""
    spaces = sorted({space for space, _ in table})
    budgets = sorted({b for _, b in table})
    lines = ["| space | " + " | ".join(f"after {b}" for b in budgets) + " |", "|---|" + "---|" * len(budgets)]
    led, paired, counted = 0, [], 0
    for space in spaces:
        cells = []
        for b in budgets:
            tuners = table.get((space, b), {})
            if BASELINE not in tuners:
                cells.append("-")
                continue
            others = {t: _mean(s) for t, s in tuners.items() if t != BASELINE}
            ours = tuners[BASELINE]
            best = max(others, key=others.get) if others else None
            mean = _mean(ours)
            counted += 1
            wins = best is None or mean >= others[best]
            led += wins
            cell = f"{'**' if wins else ''}{mean:.3f}{'**' if wins else ''} ({min(ours.values()):.3f})"
            if best is not None:
                cell += f" / {others[best]:.3f} {best}"
                paired.append((space, b, best, ours, tuners[best]))
            cells.append(cell)
        lines.append(f"| {space} | " + " | ".join(cells) + " |")
    means = defaultdict(list)
    for tuners in table.values():
        for tuner, seeds in tuners.items():
            means[tuner].append(_mean(seeds))
    return lines, {"led": led, "cells": counted, "means": {t: float(np.mean(v)) for t, v in means.items()},
                   "paired": paired}


def _paired_lines(name: str, cells: list) -> list[str]:
    lines = [f"### {name}", "", "| space | after | best other | seeds | OpEvo minus it | p |", "|---|---|---|---|---|---|"]
    for space, b, best, ours, theirs in cells:
        columns = paired(ours, theirs)
        if columns is not None:
            lines.append(f"| {space} | {b} | {best} | {columns} |")
    return lines + [""]


def figure(cells: Cells, names: list[str], path: Path) -> None:
    """One panel per slice: each tuner's fraction of the optimum against the budget, the mean over
    the slice's spaces, as mean ± sample std over seeds (a seed's curve is its mean over the spaces
    it ran; a sequential peer's runs stand in the slices with 8 in flight, as in the tables)."""
    fig, axes = figures.panels(len(names))
    tuners = sorted({t.removesuffix(SEQUENTIAL) for name in names for tuners in cells[name].values() for t in tuners},
                    key=lambda t: (t != BASELINE, t))
    for ax, name in zip(axes, names):
        table = cells[name]
        budgets = sorted({b for _, b in table})
        for label in reversed(tuners):  # the product last: drawn on top
            tuner = next((t for t in (label, label + SEQUENTIAL) if any(t in v for v in table.values())), None)
            if tuner is None:
                continue
            seeds = sorted({seed for v in table.values() for seed in v.get(tuner, {})}, key=int)
            curves = np.array([[np.mean([v[tuner][seed] for (_, b), v in table.items() if b == budget
                                         and seed in v.get(tuner, {})]) for budget in budgets] for seed in seeds])
            figures.band(ax, np.array(budgets), curves, label, tuners)
        ax.set(xscale="log", title=name, xlabel="evaluations", ylabel="fraction of the optimum (mean over spaces)")
        ax.set_xticks(budgets, [str(b) for b in budgets])
        ax.minorticks_off()
    figures.legend(fig, axes)
    fig.tight_layout()
    figures.save(fig, path)


def write_readme(out: Path) -> Path:
    """``README.md`` and its figure, from ``fractions.csv.gz`` (and ``run.json`` where there is one)."""
    cells = read_fractions(out / FRACTIONS)
    info = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else {}
    names = sorted(cells, key=lambda n: (Slice.parse(n).mode, Slice.parse(n).concurrency))
    lines = ["# OpEvo on brute-forced GPU tuning spaces: every cell, one and eight in flight, with and without "
             "the constraint", "",
             "Each trial is a look-up in a Kernel Tuner cache (the hub's real kernels on real GPUs, "
             "`../shared/data/benchmark_hub/README.md`, and the held-out convolution cache that `docs/benchmark.md` "
             "says how to fetch); a cell is a space after a number of evaluations, read as "
             "the fraction of the space's optimum found. In each cell: OpEvo's mean over seeds (its worst seed) / "
             "the best other tuner's mean and name; bold where OpEvo's mean is at least the best other's. "
             "`constrained`: every tuner is told the kernel's restrictions; `free`: none is, and a restricted "
             f"configuration is a failed evaluation. {SEQUENTIAL}: Kernel Tuner's strategies evaluate one "
             "configuration at a time; their one-at-a-time runs stand in the slices with 8 in flight.", "",
             f"![Each tuner's fraction of the optimum against evaluations, mean over the spaces, per slice]({FIGURE})",
             ""]
    figure(cells, names, out / FIGURE)
    if info:
        runs = "; ".join(f"{i['started']} to {i['ended']} on {i['machine']}"
                         + (f", {i['kept']} runs kept" if i["kept"] else "") for i in info["invocations"])
        lines += [f"Command: `{info['command']}` (from the repository root); {info['seeds']} seeds "
                  f"(0-{info['seeds'] - 1}) per tuner, {info['budget']} evaluations per run. The command resumes: a run "
                  "whose rows it finds, or that `fractions.csv.gz` already holds, is kept, not repeated, so the table "
                  f"grows by seeds across machines. Its invocations: {runs}.", ""]
    summaries = {}
    for name in names:
        table_lines, summary = slice_report(name, cells[name])
        summaries[name] = summary
        lines += [f"## {name}: OpEvo leads {summary['led']} of {summary['cells']} cells", "", *table_lines, ""]
    tuners = sorted({t for s in summaries.values() for t in s["means"]},
                    key=lambda t: -np.mean([s["means"].get(t, s["means"].get(t + SEQUENTIAL, 0.0))
                                            for s in summaries.values()]))
    lines += ["## Every tuner's mean over a slice's cells", "", "| tuner | " + " | ".join(names) + " |",
              "|---|" + "---|" * len(names)]
    for tuner in tuners:
        if tuner.endswith(SEQUENTIAL):
            continue
        row = []
        for name in names:
            means = summaries[name]["means"]
            value = means.get(tuner, means.get(tuner + SEQUENTIAL))
            top = max(means.values())
            mark = SEQUENTIAL if tuner not in means and tuner + SEQUENTIAL in means else ""
            bold = "**" if value is not None and value >= top else ""
            row.append("-" if value is None else f"{bold}{value:.4f}{bold}{mark}")
        lines.append(f"| {tuner} | " + " | ".join(row) + " |")
    lines += ["", "## OpEvo paired seed by seed with each cell's best other tuner", "",
              "OpEvo's fraction minus the other's, mean ± standard error over the seeds both ran, and the two-sided "
              "Wilcoxon signed-rank p-value (`scipy.stats.wilcoxon`, 1 where every pair ties).", ""]
    for name in names:
        lines += _paired_lines(name, summaries[name]["paired"])
    path = out / "README.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="nni-opevo hub", description=description(__doc__),
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=epilog(__doc__))
    parser.add_argument("--out", type=Path, required=True,
                        help=f"folder for fractions.csv.gz, run.json, README.md and {FIGURE}")
    parser.add_argument("--rows", type=Path, default=ROWS, help="folder for every run's rows (resumable)")
    parser.add_argument("--hub", type=Path, default=HUB, help="the hub's folder of caches (<folder>/<file>.json.gz)")
    parser.add_argument("--held-out", type=Path, nargs="*", default=[],
                        help="further cache files, each inside a folder naming its kernel")
    parser.add_argument("--tuners", nargs="+", default=TUNERS, help=tuner_specs.help_text(("cache",)))
    add_number(parser, "--seeds", int, 1, 1000, "seeds 0..N-1 per tuner and run", default=20)
    add_number(parser, "--budget", int, 1, 100_000, "evaluations per run", default=max(BUDGETS))
    parser.add_argument("--budgets", type=bounded(int, 1, 100_000), nargs="+", default=list(BUDGETS),
                        help="where each run is read, 1 to 1e+05")
    parser.add_argument("--concurrency", type=bounded(int, 1, 64), nargs="+", default=list(CONCURRENCIES),
                        help="trials in flight, one slice each, 1 to 64")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    add_number(parser, "--workers", int, 1, 256, "jobs at a time (processes)",
               default=targets.cpu_threads())
    parser.add_argument("--report-only", action="store_true", help="only write README.md from fractions.csv.gz")
    args = parser.parse_args(argv)
    if max(args.budgets) > args.budget:
        parser.error(f"--budgets: {max(args.budgets)} is past --budget {args.budget}")
    if not args.report_only:
        for spec in args.tuners:  # an unknown tuner fails before anything runs or is read
            try:
                tuner_specs.check(spec, "cache")
            except ValueError as e:
                parser.error(f"--tuners: {e}")
        paths = sorted(args.hub.glob("*/*.json.gz")) + list(args.held_out)
        if not paths:
            parser.error(f"--hub: no cache files (<folder>/<file>.json.gz) in {args.hub}")
        for path in paths:
            if not path.is_file():
                parser.error(f"--held-out: {path} is not a file")
        slices = [Slice(c, m) for m in args.modes for c in args.concurrency]
        args.out.mkdir(parents=True, exist_ok=True)
        started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        jobs = [(str(p.resolve()), piece, _tuners_of(piece, args.tuners)) for piece in slices for p in paths]
        published = published_runs(args.out, args.budget, args.budgets)
        with ProcessPoolExecutor(args.workers) as pool:
            futures = {pool.submit(_job, path, piece, tuners, args.seeds, args.budget, str(args.rows),
                                   frozenset(run[1:] for run in published if run[0] == piece.name)): (path, piece)
                       for path, piece, tuners in jobs}
            for done, future in enumerate(as_completed(futures), 1):
                path, piece = futures[future]
                print(f"[{done}/{len(jobs)}] {piece.name} {future.result()}", file=sys.stderr, flush=True)
        optima = {o.workload: o.optimum for o in (Cache(str(p.resolve())) for p in paths)}
        kept = condense(args.rows, args.out, slices, args.budgets, optima, args.seeds, published)
        earlier = json.loads((args.out / "run.json").read_text())["invocations"] if kept else []  # whose runs stay
        replace_text(args.out / "run.json", json.dumps({
            "command": " ".join(["nni-opevo hub", *(argv if argv is not None else sys.argv[1:])]),
            "budget": args.budget, "seeds": args.seeds, "invocations": [*earlier, {
                "started": started, "ended": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "machine": describe(), "kept": kept}]}, indent=2) + "\n")
    print(f"hub: {write_readme(args.out)}", flush=True)


if __name__ == "__main__":
    main()
