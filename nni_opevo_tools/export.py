"""Export an experiment's best kernel, re-measured: ``nni-opevo export EXPERIMENT [--top-k 5] [--repeat 30]``.

EXPERIMENT is an experiment id (looked up under ``--root``, NNI's default ``~/nni-experiments``)
or the experiment's folder. It is read from its own database, so this works while the
experiment runs and long after ``nnictl stop``, without starting NNI. The workload and target
come from the experiment's trial command (``python -m trial_code.trial --workload ...``).

The top-k configurations by the TFLOPS their trials reported are rebuilt and re-measured with
more repetitions (a trial times a kernel briefly, so close configurations swap places by
noise), one at a time. Written to ``--out`` (default ``<experiment folder>/export``):

- ``best.json``: the winner after re-measurement (``best``'s schema, shared with the launcher),
  with its parameters, the trial's result, the re-measured median/min/max, the workload, target,
  trial command, the whole ranking, and the vendor library timed on the same workload in the
  same run (``anchor``: NumPy's BLAS for CPU MatMul and BatchMatMul);
- ``best.cu`` (CUDA) or ``best.ll`` (CPU, LLVM IR): the winner's generated kernel source;
- ``best.so``: the winner compiled, for a program to load (``best.load_kernel``, ``trial_code.library``);
- ``kernels/p<parameter id>.<ext>`` and ``.so``: every re-measured configuration's source and library;
- ``top_k.md``: the table of reported against re-measured TFLOPS.

An earlier export in ``--out`` is never replaced silently: ``--force`` replaces it, another
``--out`` keeps both. Files are written under temporary names and renamed into place, so a link
planted at a file's name is replaced, not written through.

A network's experiment (``--network``) is exported layer by layer instead, with the network's
latency as the sum over its layers (``network_export``: ``network.json``, ``network.md``).

Where the experiment ran on a GPU that this machine lacks, the kernels are built and compiled
with nvcc (their sources exported) but not re-measured, and the ranking stays the reported one.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any

from trial_code import anchor, targets
from trial_code import trial as trial_cli
from trial_code.cli import add_number, description, workload_from
from trial_code.evaluate import Limits, Result
from trial_code.files import FolderBusy, assembled, copy_file
from trial_code.trial import MAX_REPEAT, MAX_REPEAT_MS

from . import best as best_json
from . import network_export
from .best import Best
from .experiment_client import ExperimentDatabase, Trial
from .network_export import NetworkBest
from .remeasure import best_of, library_of, remeasure, separation

TRIAL_MODULE = "trial_code.trial"


def experiment_folder(experiment: str, root: str) -> str:
    """The folder of an experiment given by id or path."""
    if os.path.isdir(experiment):
        return experiment
    folder = os.path.join(os.path.expanduser(root), experiment)
    if not os.path.isdir(folder):
        raise SystemExit(f"no experiment {experiment!r}: neither a folder nor an id under {root} "
                         f"(pass the folder when the experiment set experimentWorkingDirectory)")
    return folder


def trial_arguments(trial_command: str) -> argparse.Namespace:
    """The trial's own options, parsed by the trial's parser from the experiment's trial command."""
    words = shlex.split(trial_command)
    if TRIAL_MODULE not in words:
        raise SystemExit(f"the experiment's trialCommand is not {TRIAL_MODULE}: {trial_command!r}; "
                         "export rebuilds kernels of this project's trial code only")
    return trial_cli.parse(words[words.index(TRIAL_MODULE) + 1:])


def warn_if_tuned_elsewhere(rows: list[tuple[Trial, Result, str]], built_for: str) -> None:
    """A ranking measured on one CPU or GPU need not hold on another: say so when the trials
    report another arch than the one this machine builds for."""
    tuned_for = {t.result.get("arch") for t, _, _ in rows if isinstance(t.result, dict) and t.result.get("arch")}
    if built_for and tuned_for and tuned_for != {built_for}:
        print(f"warning: the trials were tuned for {', '.join(sorted(tuned_for))}, this machine builds for "
              f"{built_for}: their ranking may not hold here", flush=True)


def table(rows: list[tuple[Trial, Result, str]], out: str) -> str:
    lines = ["| rank | parameter id | reported TFLOPS | re-measured TFLOPS | latency median (min-max) ms | status "
             "| source |",
             "|---:|---:|---:|---:|---|---|---|"]
    for rank, (trial, result, source) in enumerate(rows, 1):
        latency = (f"{result.latency_ms:.4f} ({min(result.repeats_ms):.4f}-{max(result.repeats_ms):.4f})"
                   if result.repeats_ms else "-")
        measured = f"{result.tflops:.4f}" if result.repeats_ms else "-"
        lines.append(f"| {rank} | {trial.parameter_id} | {trial.value:.4f} | {measured} | {latency} | "
                     f"{result.status.name} | {os.path.relpath(source, out)} |")
    return "\n".join(lines) + "\n"


def summary(result: Result) -> dict[str, Any] | None:
    if not result.repeats_ms:
        return None
    return {"tflops": result.tflops, "latency_ms_median": result.latency_ms, "latency_ms_min": min(result.repeats_ms),
            "latency_ms_max": max(result.repeats_ms), "latency_ms_stdev": statistics.pstdev(result.repeats_ms),
            "repeats": len(result.repeats_ms)}


@dataclass(frozen=True)
class Options:
    top_k: int = 5
    repeat: int = 30
    min_repeat_ms: int = 100
    target: str | None = None  # overrides the trial command's
    force: bool = False  # replace an earlier export in the output folder


def export(folder: str, options: Options, out: str | None = None) -> Best | NetworkBest:
    """Re-measure the experiment's top-k configurations and write the winner to ``out``
    (default ``<folder>/export``); see the module docstring. A network's experiment gets each
    layer's winner and the network's latency (``network_export``)."""
    out = os.path.abspath(out or os.path.join(folder, "export"))
    for name in ("best.json", "network.json"):
        best_json.refuse_to_replace(out, name, options.force)
    if os.path.isdir(out) and os.listdir(out) and not any(
            os.path.exists(os.path.join(out, name)) for name in ("best.json", "network.json")):
        raise ValueError(f"{out} holds files but no earlier export: --out an empty folder or an export's, as an "
                         "export replaces its folder whole")
    database = ExperimentDatabase(folder)
    with assembled(out) as scratch:  # all or nothing: an interrupted export leaves the earlier one as it was
        return _export(folder, options, database, scratch)


def pace(spans: list[tuple[float, float]]) -> str:
    """How long the trials took, for the summary: the median trial and the run from the first
    start to the last end (empty where none ran to an end)."""
    if not spans:
        return ""
    median = statistics.median(end - start for start, end in spans)
    run = max(end for _, end in spans) - min(start for start, _ in spans)
    return f" (median {median:.1f} s each, {run:.0f} s from the first start to the last end)"


def _export(folder: str, options: Options, database: ExperimentDatabase, out: str) -> Best | NetworkBest:
    profile = database.profile()
    trial_args = trial_arguments(profile["trialCommand"])
    if options.target:
        trial_args.target = options.target
    if trial_args.network:
        limits = Limits(trial_args.build_timeout, trial_args.run_timeout, options.repeat, options.min_repeat_ms)
        return network_export.export(folder, database, trial_args, options.top_k, limits, out)
    ranked = database.ranked()
    if database.skipped:
        print(f"{database.skipped} unreadable records of {database.path} skipped", flush=True)
    succeeded = [t for t in ranked if t.value > 0]
    if not succeeded:
        statuses = Counter(t.result.get("status", "?") if isinstance(t.result, dict) else "?" for t in ranked)
        raise SystemExit(f"no trial of {folder} reported a working kernel ({len(ranked)} reported: "
                         f"{dict(statuses) or 'none'}); see the trial logs in the web UI")
    workload, target = workload_from(trial_args), targets.resolve(trial_args.target)
    measured = target.kind != "cuda" or target.has_device
    print(f"{len(ranked)} trials reported{pace(database.trial_spans())}, {len(succeeded)} working; "
          f"{'re-measuring' if measured else 'rebuilding (no GPU here: not re-measuring)'} the top "
          f"{min(options.top_k, len(succeeded))} on {target.kind}", flush=True)
    limits = Limits(trial_args.build_timeout, trial_args.run_timeout, options.repeat, options.min_repeat_ms)
    rows = remeasure(succeeded[:options.top_k], workload, target, limits, measured, os.path.join(out, "kernels"))
    trial, result, source = best_of(rows, measured)
    warn_if_tuned_elsewhere(rows, result.arch)
    if target.kind == "llvm":  # the CPU the worker built for, which the kernel is only valid on
        target = replace(target, mcpu=result.arch)
    best_source = os.path.join(out, "best" + os.path.splitext(source)[1])
    copy_file(source, best_source)
    copy_file(library_of(source), os.path.join(out, "best.so"))
    from trial_code import library  # TVM: loaded only once there is a kernel to describe

    vendor = versus_vendor(os.path.join(out, "best.so"), workload, target, options) if measured else None
    ranking = [{"parameter_id": t.parameter_id, "reported_tflops": t.value,
                "remeasured_tflops": r.tflops if r.repeats_ms else None, "status": r.status.name} for t, r, _ in rows]
    best = Best(experiment=os.path.basename(os.path.normpath(folder)), trial_command=profile["trialCommand"],
                workload=workload.to_json(), target=target.to_json(), parameter_id=trial.parameter_id,
                parameters=trial.parameters, reported=trial.result, remeasured=summary(result),
                not_remeasured=None if measured else "no CUDA device is visible here",
                source=os.path.basename(best_source), ranking=ranking,
                anchor=vendor.to_json() if vendor else None, library="best.so", arguments=library.arguments(workload),
                computation=library.computation(workload), instructions=library.instruction_flags(target.to_json()),
                separation=separation(rows, result) if measured else None)
    best.write(out)
    with open(os.path.join(out, "top_k.md"), "w") as handle:
        handle.write(table(rows, out))
    return best


def versus_vendor(library_path: str, workload: Any, target: Any, options: Options) -> anchor.Comparison | None:
    """The exported kernel against the vendor library, interleaved (``anchor.compare``)."""
    from trial_code import library, measure

    try:
        if anchor.vendor(workload, target) is None:
            return None
    except ValueError as e:  # an operator's library that cannot read the GPU's tensors: the export stands
        print(f"no comparison with the library: {e}", flush=True)
        return None
    kernel = library.load(library_path, workload, "cuda" if target.kind == "cuda" else "cpu")
    call = kernel.caller(*measure.prepare(workload, seed=0).host)
    return anchor.compare(workload, target, call, kernel.device.sync, min_repeat_ms=options.min_repeat_ms)


MAX_TOP_K = 1000
"""Configurations re-measured at most: each takes a build and ``repeat`` timings."""


def add_remeasure_options(parser: argparse.ArgumentParser) -> None:
    """``--top-k``, ``--repeat`` and ``--min-repeat-ms``: how the top configurations are
    re-measured (``Options``), by ``export`` and at the end of ``launch``."""
    add_number(parser, "--top-k", int, 1, MAX_TOP_K, "configurations to re-measure", default=Options.top_k)
    add_number(parser, "--repeat", int, 1, MAX_REPEAT, "timed repeats per configuration", default=Options.repeat)
    add_number(parser, "--min-repeat-ms", int, 0, MAX_REPEAT_MS, "each repeat lasts at least this long",
               default=Options.min_repeat_ms)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("experiment", help="experiment id or folder")
    parser.add_argument("--root", default="~/nni-experiments", help="where NNI keeps experiments (default %(default)s)")
    parser.add_argument("--out", help="output folder (default: <experiment folder>/export)")
    add_remeasure_options(parser)
    parser.add_argument("--target", help="override the trial command's target (auto, cpu, cuda)")
    parser.add_argument("--force", action="store_true", help="replace an earlier export in the output folder")
    return parser.parse_args(argv)


def intact(out: str) -> str:
    """What an export that did not finish left in ``out``: nothing of its own (``assembled``)."""
    if any(os.path.exists(os.path.join(out, name)) for name in ("best.json", "network.json")):
        return f"the earlier export in {out} is intact"
    return f"nothing was written to {out}"


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    folder = experiment_folder(args.experiment, args.root)
    out = os.path.abspath(args.out or os.path.join(folder, "export"))
    try:
        best = export(folder, Options(args.top_k, args.repeat, args.min_repeat_ms, args.target, args.force), out)
    except (ValueError, FolderBusy) as e:  # a damaged or foreign experiment, a second export: one line
        raise SystemExit(f"export: {e}") from None
    except OSError as e:
        raise SystemExit(f"export: cannot write {e.filename or out}: {e.strerror or e}; {intact(out)}") from None
    except KeyboardInterrupt:
        print(f"export: interrupted; {intact(out)}", file=sys.stderr)
        raise SystemExit(130) from None
    print(best.headline())
    if isinstance(best, NetworkBest):
        print(best.table(), end="")
        print(f"wrote {out}/network.json, network.md and each layer's kernels")
        return
    print(f"parameters: {json.dumps(best.parameters)}")
    print(f"wrote {out}/best.json, {best.source}, best.so (load it: nni_opevo_tools.best.load_kernel), top_k.md "
          "and kernels/")


if __name__ == "__main__":
    main()
