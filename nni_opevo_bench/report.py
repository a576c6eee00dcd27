"""From a benchmark CSV to the paper's figures and tables.

* ``best_vs_trials.png`` / ``best_vs_time.png``: best TFLOPS so far against trials (in the
  order results arrived) and against wall-clock seconds, mean +- std over seeds, one panel per
  workload (figures 3-5 of the OpEvo paper).
* ``summary.md``: mean +- std of the best TFLOPS after the budget per workload and tuner (tables
  1-3), with the share of failed trials, of UNRECORDED ones for replays, and the tuner's own
  time per trial; the best mean per workload in bold.

Every std is the sample standard deviation over seeds (ddof = 1: with 3 seeds the population
one understates the spread by a fifth); a single seed has none (0).
* ``progress.md``: mean +- std best GFLOPS after a sixth, a third and all of the trials, and
  after a quarter, a half and all of the longest run's wall-clock time (equal trials, equal time).
* ``sweep_<param>.png``: for tuner specs that differ in one classArg override (e.g.
  ``opevo:mutate_rate=0.1`` ... ``=0.9``), mean +- std best after the budget against its value
  (figures 7-8).
* A network's runs (``--objective network``) get its latency against total trials instead
  (``network_report``).
* Where the optimum of a workload is known (a brute-forced cache; ``optima.json``, written by
  the benchmark), ``fractions.md``: the best found as a fraction of the optimum after each of
  ``budgets`` evaluations, mean +- std per tuner and workload, the best mean per column in bold
  and every tuner within one standard error of it marked; then each tuner's mean over all those
  cells, and every tuner paired seed by seed against OpEvo in each cell (mean difference +-
  standard error, Wilcoxon p-value: ``paired_table``); and ``fraction_vs_trials.png``.
"""
from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from nni_opevo import catalog
from trial_code.files import replace_text

from . import network_report
from .figures import band, legend, panels, sample_std, save
from .objectives import UNRECORDED
from .table import read_rows

OPTIMA = "optima.json"

Runs = dict[str, dict[str, dict[str, list[dict[str, str]]]]]  # workload -> tuner -> seed -> rows by index


def group(rows: list[dict[str, str]]) -> Runs:
    runs: Runs = defaultdict(lambda: defaultdict(dict))
    for row in rows:
        runs[row["workload"]][row["tuner"]].setdefault(row["seed"], []).append(row)
    for tuners in runs.values():
        for seeds in tuners.values():
            for seed, seed_rows in seeds.items():
                seeds[seed] = sorted(seed_rows, key=lambda r: int(r["index"]))
    return runs


def best_so_far(rows: list[dict[str, str]]) -> np.ndarray:
    return np.maximum.accumulate(np.array([float(r["tflops"]) for r in rows])) if rows else np.zeros(0)


def curves_by_trial(seeds: dict[str, list[dict[str, str]]]) -> np.ndarray:
    """seeds x trials; a shorter run (exhausted space) keeps its last best."""
    length = max(len(r) for r in seeds.values())
    out = np.zeros((len(seeds), length))
    for i, rows in enumerate(seeds.values()):
        curve = best_so_far(rows)
        out[i, : len(curve)] = curve
        out[i, len(curve):] = curve[-1] if len(curve) else 0.0
    return out


def curves_by_time(seeds: dict[str, list[dict[str, str]]], grid: np.ndarray) -> np.ndarray:
    out = np.zeros((len(seeds), len(grid)))
    for i, rows in enumerate(seeds.values()):
        finished = np.array([float(r["finished_s"]) for r in rows])
        curve = best_so_far(rows)
        order = np.argsort(finished, kind="stable")
        finished, curve = finished[order], np.maximum.accumulate(curve[order]) if len(curve) else curve
        at = np.searchsorted(finished, grid, side="right") - 1
        out[i] = np.where(at >= 0, curve[np.clip(at, 0, None)] if len(curve) else 0.0, 0.0)
    return out


def plot_curves(runs: Runs, out: Path, title: str) -> list[Path]:
    written = []
    for axis in ("trials", "time"):
        fig, axes = panels(len(runs))
        names = sorted({tuner for tuners in runs.values() for tuner in tuners})
        for ax, (workload, tuners) in zip(axes, sorted(runs.items())):
            if axis == "time":
                end = max(float(r["finished_s"]) for seeds in tuners.values() for rows in seeds.values() for r in rows)
                grid = np.linspace(0, end, 200)
            for tuner, seeds in sorted(tuners.items()):
                if axis == "trials":
                    curves = curves_by_trial(seeds)
                    band(ax, np.arange(1, curves.shape[1] + 1), curves, tuner, names)
                else:
                    band(ax, grid, curves_by_time(seeds, grid), tuner, names)
            ax.set_title(workload)
            ax.set_xlabel("trials" if axis == "trials" else "wall-clock seconds")
            ax.set_ylabel("best TFLOPS so far")
            ax.grid(alpha=0.3)
        legend(fig, axes)
        fig.suptitle(title, fontsize=10)
        fig.tight_layout()
        path = out / f"best_vs_{axis}.png"
        save(fig, path)
        written.append(path)
    return written


def summary_table(runs: Runs) -> str:
    lines = ["| workload | tuner | seeds | trials | best TFLOPS (mean ± std) | failed | unrecorded | tuner ms/trial |",
             "|---|---|---|---|---|---|---|---|"]
    for workload, tuners in sorted(runs.items()):
        means = {t: np.mean([best_so_far(r)[-1] for r in s.values()]) for t, s in tuners.items()}
        top = max(means.values())
        for tuner, seeds in sorted(tuners.items(), key=lambda kv: -means[kv[0]]):
            finals = [best_so_far(rows)[-1] for rows in seeds.values()]
            rows = [r for rs in seeds.values() for r in rs]
            failed = np.mean([r["status"] not in ("NO_ERROR", UNRECORDED) for r in rows])
            unrecorded = np.mean([r["status"] == UNRECORDED for r in rows])
            tuner_ms = np.mean([float(r["tuner_ms"]) for r in rows])  # NaN where not told apart (MetaSchedule)
            cell = f"{np.mean(finals):.4g} ± {sample_std(finals):.2g}"
            if means[tuner] == top:
                cell = f"**{cell}**"
            lines.append(f"| {workload} | {tuner} | {len(seeds)} | {min(len(r) for r in seeds.values())} | {cell} |"
                         f" {failed:.0%} | {unrecorded:.0%} | {'n/a' if np.isnan(tuner_ms) else f'{tuner_ms:.2f}'} |")
    return "\n".join(lines) + "\n"


def progress_table(runs: Runs) -> str:
    """Mean ± sample std best GFLOPS per workload and tuner after a sixth, a third and all of the
    trials, and after a quarter, a half and all of the longest run's wall-clock time: who is
    ahead at equal trials and at equal time. The best mean of each column in bold."""
    lines = []
    for workload, tuners in sorted(runs.items()):
        length = max(len(rows) for seeds in tuners.values() for rows in seeds.values())
        longest = max(float(r["finished_s"]) for seeds in tuners.values() for rows in seeds.values() for r in rows)
        trials = sorted({max(1, length // 6), max(1, length // 3), length})
        seconds = [longest / 4, longest / 2, longest]
        cells: dict[str, list[np.ndarray]] = {}
        for tuner, seeds in tuners.items():
            by_trial = curves_by_trial(seeds) * 1e3
            by_time = curves_by_time(seeds, np.array(seconds)) * 1e3
            cells[tuner] = [by_trial[:, min(t, by_trial.shape[1]) - 1] for t in trials] + list(by_time.T)
        best = [max(np.mean(c[i]) for c in cells.values()) for i in range(len(trials) + len(seconds))]
        lines += [f"### {workload}: best GFLOPS so far", "",
                  "| tuner | " + " | ".join(f"{t} trials" for t in trials) + " | "
                  + " | ".join(f"{x:.0f} s" for x in seconds) + " |", "|---|" + "---|" * (len(trials) + len(seconds))]
        for tuner in sorted(cells, key=lambda t: -np.mean(cells[t][len(trials) - 1])):
            shown = [f"{np.mean(v):.0f} ± {sample_std(v):.0f}" for v in cells[tuner]]
            shown = [f"**{x}**" if np.mean(v) == b else x for x, v, b in zip(shown, cells[tuner], best)]
            lines.append(f"| {tuner} | " + " | ".join(shown) + " |")
        lines.append("")
    return "\n".join(lines)


def sweeps(runs: Runs) -> dict[tuple[str, str], list[tuple[float, str]]]:
    """(base tuner, classArg) -> [(value, spec)] for specs overriding exactly that one classArg
    (and the plain base spec, at its catalog value)."""
    found: dict[tuple[str, str], list[tuple[float, str]]] = defaultdict(list)
    parsed = {t: _catalog_spec(t) for tuners in runs.values() for t in tuners}
    specs = {t for t, found in parsed.items() if found is not None}  # peers have no classArgs to sweep
    for spec in specs:
        base, overrides = parsed[spec]
        if len(overrides) == 1:
            (key, value), = overrides.items()
            if isinstance(value, (int, float)):
                found[(base, key)].append((float(value), spec))
    for (base, key), points in found.items():
        default = catalog.default(base, key)
        if base in specs and isinstance(default, (int, float)):
            points.append((float(default), base))  # the plain spec is the point at the catalog's setting
    return {k: sorted(v) for k, v in found.items() if len(v) >= 2}


def _catalog_spec(spec: str) -> tuple[str, dict[str, Any]] | None:
    """(catalog name, overrides) of a catalog tuner's spec; None for a peer's or a network tuner's."""
    try:
        return catalog.parse(spec)
    except ValueError:
        return None


def plot_sweeps(runs: Runs, out: Path) -> list[Path]:
    written = []
    for (base, key), points in sorted(sweeps(runs).items()):
        fig, axes = panels(len(runs))
        for ax, (workload, tuners) in zip(axes, sorted(runs.items())):
            xs, means, stds = [], [], []
            for value, spec in points:
                if spec in tuners:
                    finals = [best_so_far(rows)[-1] for rows in tuners[spec].values()]
                    xs.append(value), means.append(np.mean(finals)), stds.append(sample_std(finals))
            ax.errorbar(xs, means, yerr=stds, marker="o", capsize=3)
            ax.set_title(workload)
            ax.set_xlabel(f"{base} {key}")
            ax.set_ylabel("best TFLOPS after the budget")
            ax.grid(alpha=0.3)
        fig.tight_layout()
        path = out / f"sweep_{base}_{key}.png"
        save(fig, path)
        written.append(path)
    return written


def record_optima(out: Path, optima: dict[str, float]) -> None:
    """Remember the known optimum of each workload for the fraction table (merged into ``optima.json``)."""
    if not optima:
        return
    path = out / OPTIMA
    known = json.loads(path.read_text()) if path.exists() else {}
    replace_text(path, json.dumps({**known, **optima}, indent=2, sort_keys=True) + "\n")


def fraction_at(rows: list[dict[str, str]], budget: int, optimum: float) -> float:
    """Best score within the first ``budget`` evaluations, as a fraction of ``optimum`` (a run
    that stopped earlier keeps its last best)."""
    curve = best_so_far(rows)
    return float(curve[min(budget, len(curve)) - 1] / optimum) if len(curve) else 0.0


def fraction_table(runs: Runs, optima: dict[str, float], budgets: list[int]) -> str:
    """Tuners x budgets per workload: mean ± sample std of the fraction of the optimum. The best
    mean of each column is bold; a tuner whose mean is within one standard error (of the
    difference) of it is marked ≈, a tie within noise."""
    lines = []
    for workload, tuners in sorted(runs.items()):
        if workload not in optima:
            continue
        table = {t: {b: [fraction_at(r, b, optima[workload]) for r in seeds.values()] for b in budgets}
                 for t, seeds in tuners.items()}
        best = {b: max(table, key=lambda t: np.mean(table[t][b])) for b in budgets}
        lines += [f"### {workload}", "", "| tuner | seeds | " + " | ".join(f"after {b}" for b in budgets) + " |",
                  "|---|---|" + "---|" * len(budgets)]
        for tuner in sorted(table, key=lambda t: -np.mean(table[t][budgets[-1]])):
            cells = []
            for b in budgets:
                values, top = table[tuner][b], table[best[b]][b]
                cell = f"{np.mean(values):.3f} ± {sample_std(values):.3f}"
                error = math.hypot(sample_std(values) / math.sqrt(len(values)), sample_std(top) / math.sqrt(len(top)))
                if tuner == best[b]:
                    cell = f"**{cell}**"
                elif np.mean(top) - np.mean(values) <= error:
                    cell = f"≈ {cell}"
                cells.append(cell)
            lines.append(f"| {tuner} | {len(tuners[tuner])} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


BASELINE = "opevo"
"""The tuner every other is paired against in ``paired_table`` (the product), where it ran."""


def paired_table(runs: Runs, optima: dict[str, float], budgets: list[int]) -> str:
    """The mean of each tuner's cells (workloads x budgets), and every tuner paired seed by seed
    against ``BASELINE`` in each cell: the mean difference of the fractions ± its standard error,
    and the two-sided Wilcoxon signed-rank p-value (``scipy.stats.wilcoxon``; 1 when every pair
    ties). These are the figures the decisions quote, so a reader regenerates them from a CSV."""
    cells: dict[str, dict[tuple[str, int], dict[str, float]]] = {}
    for workload, tuners in sorted(runs.items()):
        if workload not in optima:
            continue
        for tuner, seeds in tuners.items():
            for b in budgets:
                cells.setdefault(tuner, {})[(workload, b)] = {seed: fraction_at(rows, b, optima[workload])
                                                              for seed, rows in seeds.items()}
    if not cells:
        return ""
    lines = ["## Mean of the cells", "", "| tuner | cells | mean fraction of the optimum |", "|---|---|---|"]
    means = {t: float(np.mean([np.mean(list(v.values())) for v in c.values()])) for t, c in cells.items()}
    for tuner in sorted(means, key=lambda t: -means[t]):
        lines.append(f"| {tuner} | {len(cells[tuner])} | {means[tuner]:.4f} |")
    if BASELINE not in cells:
        return "\n".join(lines) + "\n"
    lines += ["", f"## Paired against {BASELINE}, seed by seed", "",
              f"{BASELINE} minus the tuner: mean ± standard error of the difference, and the Wilcoxon p-value.", "",
              "| tuner | cell | seeds | difference | p |", "|---|---|---|---|---|"]
    for tuner in sorted(t for t in cells if t != BASELINE):
        for cell in sorted(cells[tuner]):
            columns = paired(cells[BASELINE].get(cell, {}), cells[tuner][cell])
            if columns is not None:
                lines.append(f"| {tuner} | {cell[0]} after {cell[1]} | {columns} |")
    return "\n".join(lines) + "\n"


def paired(ours: dict[str, float], theirs: dict[str, float]) -> str | None:
    """``seeds | mean ± standard error | p`` of ``ours`` minus ``theirs`` (seed -> value) over the
    seeds both ran, None under two: the two-sided Wilcoxon signed-rank p-value from
    ``scipy.stats.wilcoxon``, 1 when every pair ties."""
    from scipy.stats import wilcoxon

    common = sorted(set(ours) & set(theirs))
    if len(common) < 2:
        return None
    diff = np.array([ours[s] - theirs[s] for s in common])
    p = 1.0 if not np.any(diff) else float(wilcoxon(diff, zero_method="zsplit").pvalue)
    return f"{len(common)} | {diff.mean():+.4f} ± {sample_std(diff) / math.sqrt(len(diff)):.4f} | {p:.3g}"


def plot_fractions(runs: Runs, optima: dict[str, float], out: Path) -> list[Path]:
    known = {w: t for w, t in runs.items() if w in optima}
    if not known:
        return []
    fig, axes = panels(len(known))
    names = sorted({tuner for tuners in known.values() for tuner in tuners})
    for ax, (workload, tuners) in zip(axes, sorted(known.items())):
        for tuner, seeds in sorted(tuners.items()):
            curves = curves_by_trial(seeds) / optima[workload]
            band(ax, np.arange(1, curves.shape[1] + 1), curves, tuner, names)
        ax.set_title(workload)
        ax.set_xlabel("evaluations")
        ax.set_ylabel("best found / optimum")
        ax.grid(alpha=0.3)
    legend(fig, axes)
    fig.tight_layout()
    path = out / "fraction_vs_trials.png"
    save(fig, path)
    return [path]


def write(csv_path: Path, out: Path, budgets: list[int] | None = None, title: str = "") -> list[Path]:
    """Plots and summary.md next to the CSV (or in ``out``); returns the files written."""
    rows = read_rows(csv_path)
    if not rows:
        raise ValueError(f"{csv_path} has no trials")
    out.mkdir(parents=True, exist_ok=True)
    # A network's rows mix its layers: its report is its latency (network_report), not the best TFLOPS.
    network_targets = {row["workload"]: row["target"] for row in rows if row["objective"] == "network"}
    runs = group([row for row in rows if row["workload"] not in network_targets])
    written = []
    for target in sorted(set(network_targets.values())):
        chosen = [row for row in rows if network_targets.get(row["workload"]) == target]
        written += network_report.write(group(chosen), out, target)
    if not runs:
        return written
    written += plot_curves(runs, out, title or csv_path.parent.name) + plot_sweeps(runs, out)
    summary = out / "summary.md"
    summary.write_text(summary_table(runs))
    progress = out / "progress.md"
    progress.write_text(progress_table(runs))
    written += [summary, progress]
    optima_path = out / OPTIMA
    if optima_path.exists():
        optima = json.loads(optima_path.read_text())
        fractions = out / "fractions.md"
        chosen = budgets or [50, 100, 200]
        fractions.write_text(fraction_table(runs, optima, chosen) + "\n" + paired_table(runs, optima, chosen))
        written += [fractions, *plot_fractions(runs, optima, out)]
    return written
