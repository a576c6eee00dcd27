"""Users' operators on the CPU: OpEvo on each example's derived space against TVM MetaSchedule and
the library a NumPy or PyTorch user would call, and the derived MatMul against the hand-written one.

    nni-opevo operators --out docs/results/operators             # runs what is missing, then the README
    nni-opevo operators --out docs/results/operators --report-only

The page goes to ``--out``; the rows behind it (``trials.csv``, ``library.json``, ``run.json``) to
``--rows`` (default ``~/.cache/nni-opevo/operators``), outside the docs, which hold pages.

For each operator of ``examples/operators.py`` (at its default shape) OpEvo and MetaSchedule get
``--budget`` measured trials per seed through the benchmark harness (``runner``: the same
trials, checks and timing as every comparison; rows in ``trials.csv``, resumable), and the best
kernel after 64 trials and after the budget is reported. The fastest of OpEvo's kernels at the
budget is then rebuilt as ``nni-opevo export`` builds it and set against the library a NumPy or
PyTorch user would call on the same inputs (the ``library`` each ``Operator`` declares), both
timed in one process, round after round (``anchor.compare``), so a load that comes and goes
slows both alike. Its rows go to ``library.json``; an entry is kept while the fastest
configuration builds the same kernel and its comparison was not too busy for a ratio.
The built-in MatMul template on the same shape (``MM_small``, 256^3) runs beside the derived
``matmul``: the derived space must reach at least 0.9 of the hand-written template's best.
Run it from the repository root (``examples`` is imported from there).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from nni_opevo_tools.export import Options, versus_vendor
from trial_code import anchor, forked, targets
from trial_code.cli import add_number, description
from trial_code.evaluate import Limits, evaluate
from trial_code.files import replace_text, user_cache
from trial_code.status import Status
from trial_code.targets import Target
from trial_code.workloads import named_or_operator

from . import metaschedule
from .machine import recorded
from .objectives import Live
from .report import Runs, group
from .runner import Plan, run, written_when_it_ends
from .table import read_rows

EXAMPLES = ("examples.operators:depthwise_conv2d", "examples.operators:matmul_bias_gelu", "examples.operators:softmax",
            "examples.operators:layer_norm", "examples.operators:matmul", "examples.operators:attention",
            "examples.operators:mse_loss", "examples.operators:matmul_fp16", "examples.operators:embedding_bag",
            "examples.operators:dense_layer_norm")
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
        run_file = args.rows / "run.json"
        record = {"command": " ".join(["nni-opevo operators", *(argv if argv is not None else sys.argv[1:])]),
                  "budget": args.budget, "seeds": args.seeds,
                  "invocations": [*_invocations(json.loads(run_file.read_text()) if run_file.exists() else {}),
                                  {"started": _now(), "ended": None, **recorded(target)}]}
        replace_text(run_file, json.dumps(record, indent=2) + "\n")  # its start kept by a run cut short
        everything = [*EXAMPLES, *HAND_WRITTEN.values()]
        # The figures after 64 trials first, MetaSchedule's runs whole (it cannot resume), then
        # OpEvo's runs carried on to the budget (the runner resumes them from their rows).
        plans = [Plan([Live(w, target, limits) for w in everything], ["opevo"], seeds, EARLY, concurrency=2),
                 Plan([Live(w, target, limits) for w in EXAMPLES], ["metaschedule"], seeds, args.budget, concurrency=2),
                 Plan([Live(w, target, limits) for w in everything], ["opevo"], seeds, args.budget, concurrency=2)]
        for plan in plans:
            run(plan, args.rows / "trials.csv", progress=sys.stderr.isatty())
        compare_with_libraries(args.rows, args.budget, target, limits)
        record["invocations"][-1]["ended"] = _now()
        replace_text(run_file, json.dumps(record, indent=2) + "\n")
    (args.out / "README.md").write_text(readme(args.rows))
    print(f"operators: {args.out / 'README.md'}", flush=True)


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def _invocations(run_info: dict[str, Any]) -> list[dict[str, Any]]:
    """Each invocation that added to the rows, in order: when it started, when it ended (None: cut
    off), on what machine and with which target's limits. A ``run.json`` of one run (``started``,
    ``ended``, ``machine``) is one."""
    if "invocations" in run_info:
        return list(run_info["invocations"])
    if "started" in run_info:
        return [{key: run_info.get(key) for key in ("started", "ended", "machine")}]
    return []


def compare_with_libraries(rows_folder: Path, budget: int, target: Target, limits: Limits) -> None:
    """For each example, its fastest OpEvo kernel within ``budget`` trials against its library,
    interleaved (``versus_vendor``), into ``library.json``: the configuration, the kernel it built
    and the comparison, or why there is none. The kernel is built again each time: an entry of the
    same kernel is kept unless it was too busy for a ratio; one of the same configuration whose
    template has changed since is compared anew."""
    runs = group(read_rows(rows_folder / "trials.csv"))
    path = rows_folder / "library.json"
    libraries: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    with forked.workers():
        for spec in EXAMPLES:
            fastest = _fastest(runs, spec, budget)
            if fastest is None:
                continue
            library = rows_folder / "kernels" / f"{spec.partition(':')[2]}.so"
            built = _build(spec, fastest, target, limits, library)
            if "error" in built:
                libraries[spec] = built
            elif not _settled(libraries.get(spec), built):
                libraries[spec] = _compare(spec, built, target, library)
            else:
                continue
            replace_text(path, json.dumps(libraries, indent=2) + "\n")


def _settled(entry: dict[str, Any] | None, built: dict[str, Any]) -> bool:
    """Whether ``entry`` compared the kernel ``built`` is (its configuration, built by this
    version of its template) and needs no second try (a busy machine's does)."""
    if entry is None or any(entry.get(key) != built[key] for key in ("configuration", "kernel")):
        return False
    found = entry.get("comparison")
    return found is None or not anchor.Comparison.from_json(found).busy


def _fastest(runs: Runs, workload: str, budget: int) -> dict[str, Any] | None:
    """The configuration of OpEvo's fastest working kernel among each seed's first ``budget`` trials."""
    rows = [row for ordered in runs.get(workload, {}).get("opevo", {}).values() for row in ordered[:budget]
            if row["status"] == Status.NO_ERROR.name and float(row["tflops"]) > 0]
    return json.loads(max(rows, key=lambda row: float(row["tflops"]))["configuration"]) if rows else None


def _build(spec: str, configuration: dict[str, Any], target: Target, limits: Limits, library: Path
           ) -> dict[str, Any]:
    """``configuration`` built into ``library`` as ``nni-opevo export`` builds it: the configuration
    with the library's SHA-256 (``kernel``: what a template's change changes; the library's bytes
    are the same build after build, where its LLVM IR names addresses) and the CPU it was built
    for, or the build's error."""
    library.parent.mkdir(parents=True, exist_ok=True)
    built = evaluate(named_or_operator(spec), configuration, target, limits, build_only=True,
                     library_path=str(library))
    if built.status is not Status.NO_ERROR:
        return {"configuration": configuration, "error": f"{built.status.name}: {built.error}"}
    return {"configuration": configuration, "kernel": hashlib.sha256(library.read_bytes()).hexdigest(),
            "arch": built.arch}


def _compare(spec: str, built: dict[str, Any], target: Target, library: Path) -> dict[str, Any]:
    """The kernel ``_build`` built into ``library`` set against ``spec``'s library."""
    comparison = versus_vendor(str(library), named_or_operator(spec), replace(target, mcpu=built["arch"]), Options())
    return {**built, "comparison": comparison.to_json() if comparison else None}


def _best(runs: Runs, workload: str, tuner: str, trials: int) -> list[float]:
    """GFLOPS of the best working kernel among each seed's first ``trials`` trials (a seed with
    none has no value). A shorter run of a tuner whose rows are written when its run ends
    (MetaSchedule) is whole, its search ended: its best is the best it would have had after
    ``trials``."""
    whole = written_when_it_ends(tuner)
    return [1e3 * max(float(r["tflops"]) for r in working)
            for ordered in runs[workload][tuner].values() if whole or len(ordered) >= trials
            if (working := [r for r in ordered[:trials] if r["status"] == Status.NO_ERROR.name])]


def _ended_early(runs: Runs, workload: str, tuner: str, budget: int) -> list[int]:
    """The trial counts of ``tuner``'s whole runs on ``workload`` that ran out of configurations
    before ``budget`` (not those its search's error ended: ``_search_errors``)."""
    if not written_when_it_ends(tuner):
        return []
    return sorted(len(ordered) for ordered in runs[workload][tuner].values()
                  if len(ordered) < budget and _error(ordered) is None)


def _search_errors(runs: Runs, workload: str) -> list[tuple[int, str]]:
    """For each MetaSchedule run on ``workload`` that its own search's error ended: the trials it
    measured before, and the error."""
    return sorted((len(ordered) - 1, found) for ordered in runs[workload].get(metaschedule.NAME, {}).values()
                  if (found := _error(ordered)) is not None)


def _error(ordered: list[dict[str, str]]) -> str | None:
    return metaschedule.search_error(json.loads(ordered[-1]["configuration"] or "{}")) if ordered else None


def _cell(values: list[float]) -> str:
    if not values:
        return "-"
    middle = statistics.mean(values)
    return f"{middle:.1f}" if len(values) == 1 else f"{middle:.1f} ({min(values):.1f}-{max(values):.1f})"


def _library_cells(entry: dict[str, Any] | None) -> tuple[str, str, str]:
    """The library's name, its GFLOPS and the fastest kernel's ratio to it, from a ``library.json`` entry."""
    if entry is None or "configuration" not in entry:  # not compared yet (or by an older version)
        return "-", "-", "-"
    if "error" in entry:
        return "-", "-", f"not rebuilt here ({entry['error'].split(':')[0]})"
    found = entry["comparison"]
    if found is None:
        return "none here", "-", "-"
    comparison = anchor.Comparison.from_json(found)
    ratio = "busy" if comparison.busy else f"{comparison.ratio:.2f}x"
    return comparison.library, f"{comparison.vendor_tflops * 1e3:.1f}", ratio


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
             "with the same trials; then OpEvo's fastest kernel, exported as `nni-opevo export` exports it, "
             "against the library a NumPy or PyTorch user would call on the same inputs, the two timed in one "
             f"process in {anchor.ROUNDS} interleaved rounds (the ratio of their median rounds; none where "
             f"either side's median round is more than {anchor.BUSY_SPREAD:.0%} above its fastest).", "",
             "| operator | " + " | ".join(f"OpEvo @{n}" for n in budgets) + " | "
             + " | ".join(f"MetaSchedule @{n}" for n in budgets)
             + " | library | library GFLOPS | fastest kernel / library |",
             "|---|" + "---|" * (2 * len(budgets) + 3)]
    for spec in EXAMPLES:
        opevo = [_best(runs, spec, "opevo", n) for n in budgets]
        ms = [_best(runs, spec, "metaschedule", n) for n in budgets]
        lines.append(f"| {spec.partition(':')[2]} | " + " | ".join(_cell(v) for v in [*opevo, *ms])
                     + " | " + " | ".join(_library_cells(libraries.get(spec))) + " |")
    lines.append("")
    for spec in EXAMPLES:
        counts = _ended_early(runs, spec, "metaschedule", budget)
        if counts:
            lines += [f"MetaSchedule on `{spec.partition(':')[2]}` ran out of schedules to measure: its search ended "
                      f"after {', '.join(map(str, counts))} trials (of {budget}), and its cells are the best of "
                      "those.", ""]
        errors = _search_errors(runs, spec)
        if errors:
            lines += [f"MetaSchedule could not tune `{spec.partition(':')[2]}`: after "
                      f"{', '.join(str(n) for n, _ in errors)} measured trials (of {budget}) its search raised "
                      f"{' / '.join(sorted({e for _, e in errors}))} Its cells are the best it measured, if any.", ""]
    for spec, named in HAND_WRITTEN.items():
        derived, written = _best(runs, spec, "opevo", budget), _best(runs, named, "opevo", budget)
        if derived and written:
            fraction = statistics.mean(derived) / statistics.mean(written)
            lines += [f"The derived `{spec.partition(':')[2]}` space against the hand-written MatMul template on the "
                      f"same shape ({named}), OpEvo, {budget} trials: {_cell(derived)} against {_cell(written)} "
                      f"GFLOPS, {fraction:.2f} of it (goal: at least {GOAL}; "
                      f"{'met' if fraction >= GOAL else '**not met**'}).", ""]
    if run_info:
        spans = "; ".join(f"{i['started']} to {i['ended'] or 'a cut-off'} on {i['machine']}"
                          for i in _invocations(run_info))
        cut_off = "" if _invocations(run_info)[-1]["ended"] else " The last was cut off and not yet resumed."
        lines += [f"Command: `{run_info['command']}` (from the repository root; it resumes, keeping the runs its rows "
                  f"hold), {run_info['seeds']} seed(s) per tuner. Its invocations: {spans}.{cut_off}", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
