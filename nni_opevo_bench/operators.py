"""Users' operators on the CPU: OpEvo on each example's derived space against TVM MetaSchedule and
the library a NumPy or PyTorch user would call, and the derived MatMul against the hand-written one.

    nni-opevo operators --out docs/results/operators             # runs what is missing, then the README
    nni-opevo operators --out docs/results/operators --report-only

The page goes to ``--out``; the rows behind it (``trials.csv``, ``library.json``, ``run.json``) to
``--rows`` (default ``~/.cache/nni-opevo/operators``), outside the docs, which hold pages.

For each operator of ``examples/operators.py`` (at its default shape) OpEvo and MetaSchedule get
``--budget`` measured trials per seed through the benchmark harness (``runner``: the same
trials, checks and timing as every comparison; rows in ``trials.csv``, resumable), and the best
kernel after 64 trials and after the budget is reported, with the library's speed on the same
inputs (``trial_code.anchor``: the ``library`` each ``Operator`` declares, timed like a trial).
The built-in MatMul template on the same shape (``MM_small``, 256^3) runs beside the derived
``matmul``: the derived space must reach at least 0.9 of the hand-written template's best.
Run it from the repository root (``examples`` is imported from there).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from trial_code import anchor, targets
from trial_code.cli import add_number, description
from trial_code.evaluate import Limits
from trial_code.files import user_cache
from trial_code.workloads import named_or_operator

from .machine import describe
from .objectives import Live
from .report import Runs, group
from .runner import Plan, run, written_when_it_ends
from .table import read_rows

EXAMPLES = ("examples.operators:depthwise_conv2d", "examples.operators:matmul_bias_gelu", "examples.operators:softmax",
            "examples.operators:layer_norm", "examples.operators:matmul", "examples.operators:attention",
            "examples.operators:mse_loss")
HAND_WRITTEN = {"examples.operators:matmul": "MM_small"}
"""The derived operator -> the named workload of the same computation with a hand-written template."""
ROWS = Path(user_cache()) / "operators"
EARLY = 64
GOAL = 0.9
"""The derived MatMul's best over the hand-written template's, at least."""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="nni-opevo operators", description=description(__doc__))
    parser.add_argument("--out", type=Path, required=True, help="folder for README.md")
    parser.add_argument("--rows", type=Path, default=ROWS, help="folder for trials.csv, library.json and run.json "
                                                               "(resumable)")
    add_number(parser, "--budget", int, EARLY, 4096, "trials per run", default=256)
    add_number(parser, "--seeds", int, 1, 20, "seeds per tuner", default=1)
    parser.add_argument("--report-only", action="store_true", help="only write README.md from what --rows holds")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    args.rows.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        target, limits, seeds = targets.cpu(), Limits(), list(range(args.seeds))
        started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        everything = [*EXAMPLES, *HAND_WRITTEN.values()]
        # The figures after 64 trials first, MetaSchedule's runs whole (it cannot resume), then
        # OpEvo's runs carried on to the budget (the runner resumes them from their rows).
        plans = [Plan([Live(w, target, limits) for w in everything], ["opevo"], seeds, EARLY, concurrency=2),
                 Plan([Live(w, target, limits) for w in EXAMPLES], ["metaschedule"], seeds, args.budget, concurrency=2),
                 Plan([Live(w, target, limits) for w in everything], ["opevo"], seeds, args.budget, concurrency=2)]
        for plan in plans:
            run(plan, args.rows / "trials.csv", progress=sys.stderr.isatty())
        libraries = {}
        for spec in EXAMPLES:
            measured = anchor.measure(named_or_operator(spec), target)
            libraries[spec] = measured.to_json() if measured else None
        (args.rows / "library.json").write_text(json.dumps(libraries, indent=2) + "\n")
        (args.rows / "run.json").write_text(json.dumps({
            "command": " ".join(["nni-opevo operators", *(argv if argv is not None else sys.argv[1:])]),
            "started": started, "ended": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": describe(), "budget": args.budget, "seeds": args.seeds}, indent=2) + "\n")
    (args.out / "README.md").write_text(readme(args.rows))
    print(f"operators: {args.out / 'README.md'}", flush=True)


def _best(runs: Runs, workload: str, tuner: str, trials: int) -> list[float]:
    """GFLOPS of the best kernel among each seed's first ``trials`` trials. A shorter run of a
    tuner whose rows are written when its run ends (MetaSchedule) is whole, its search ended: its
    best is the best it would have had after ``trials``."""
    whole = written_when_it_ends(tuner)
    return [1e3 * max(float(r["tflops"]) for r in ordered[:trials])
            for ordered in runs[workload][tuner].values() if whole or len(ordered) >= trials]


def _ended_early(runs: Runs, workload: str, tuner: str, budget: int) -> list[int]:
    """The trial counts of ``tuner``'s whole runs on ``workload`` that ended before ``budget``."""
    if not written_when_it_ends(tuner):
        return []
    return sorted(len(ordered) for ordered in runs[workload][tuner].values() if len(ordered) < budget)


def _cell(values: list[float]) -> str:
    if not values:
        return "-"
    middle = statistics.mean(values)
    return f"{middle:.1f}" if len(values) == 1 else f"{middle:.1f} ({min(values):.1f}-{max(values):.1f})"


def readme(rows_folder: Path) -> str:
    """The page: one table of the operators, one line on the derived MatMul, the command and machine."""
    runs = group(read_rows(rows_folder / "trials.csv"))
    run_file, library_file = rows_folder / "run.json", rows_folder / "library.json"
    run_info: dict[str, Any] = json.loads(run_file.read_text()) if run_file.exists() else {}
    libraries = json.loads(library_file.read_text()) if library_file.exists() else {}
    budget = int(run_info.get("budget", 256))
    budgets = sorted({EARLY, budget})
    after = " and ".join(str(n) for n in budgets)
    lines = ["# Users' operators on the CPU", "",
             "Each operator of [examples/operators.py](../../../examples/operators.py) at its default shape, its "
             "template derived from the computation (docs/your-operator.md): the best kernel's GFLOPS after "
             f"{after} measured trials (mean over seeds, min-max), OpEvo against TVM MetaSchedule "
             "with the same trials, and the library a NumPy or PyTorch user would call on the same inputs.", "",
             "| operator | " + " | ".join(f"OpEvo @{n}" for n in budgets) + " | "
             + " | ".join(f"MetaSchedule @{n}" for n in budgets)
             + f" | library | library GFLOPS | OpEvo @{budget} / library |",
             "|---|" + "---|" * (2 * len(budgets) + 3)]
    for spec in EXAMPLES:
        opevo = [_best(runs, spec, "opevo", n) for n in budgets]
        ms = [_best(runs, spec, "metaschedule", n) for n in budgets]
        library = libraries.get(spec)
        vendor = 1e3 * library["tflops"] if library else None
        ratio = f"{statistics.mean(opevo[-1]) / vendor:.2f}x" if vendor and opevo[-1] else "-"
        lines.append(f"| {spec.partition(':')[2]} | " + " | ".join(_cell(v) for v in [*opevo, *ms])
                     + f" | {library['library'] if library else 'none here'} | "
                     f"{f'{vendor:.1f}' if vendor else '-'} | {ratio} |")
    lines.append("")
    for spec in EXAMPLES:
        counts = _ended_early(runs, spec, "metaschedule", budget)
        if counts:
            lines += [f"MetaSchedule on `{spec.partition(':')[2]}` ran out of schedules to measure: its search ended "
                      f"after {', '.join(map(str, counts))} trials (of {budget}), and its cells are the best of "
                      "those.", ""]
    for spec, named in HAND_WRITTEN.items():
        derived, written = _best(runs, spec, "opevo", budget), _best(runs, named, "opevo", budget)
        if derived and written:
            fraction = statistics.mean(derived) / statistics.mean(written)
            lines += [f"The derived `{spec.partition(':')[2]}` space against the hand-written MatMul template on the "
                      f"same shape ({named}), OpEvo, {budget} trials: {_cell(derived)} against {_cell(written)} "
                      f"GFLOPS, {fraction:.2f} of it (goal: at least {GOAL}; "
                      f"{'met' if fraction >= GOAL else '**not met**'}).", ""]
    if run_info:
        lines += [f"Command: `{run_info['command']}` (from the repository root). Machine: {run_info['machine']}. "
                  f"Run {run_info['started']} to {run_info['ended']}, {run_info['seeds']} seed(s) per tuner.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
