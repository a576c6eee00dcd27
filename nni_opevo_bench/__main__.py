"""Compare tuners, then draw the figures and tables (``nni-opevo benchmark``, ``python -m nni_opevo_bench``).

    # CI-sized: synthetic landscapes, two tuners, two seeds
    python -m nni_opevo_bench --objective synthetic --workloads SYN1 --tuners opevo gbfs \\
        --seeds 2 --budget 40 --out /tmp/bench
    # live kernels (GPU when visible, else CPU), the paper's comparison
    python -m nni_opevo_bench --objective live --workloads MM1 BMM1 C2 \\
        --tuners opevo gbfs na2c autotvm nose tpe --seeds 3 --budget 512 --concurrency 8 --out docs/results/h100
    # the same tuners replayed on those measurements (no device needed)
    python -m nni_opevo_bench --objective recorded --record docs/results/h100/trials.csv --target cuda \\
        --workloads MM1 --tuners opevo opevo:mutate_rate=0.1 opevo:mutate_rate=0.9 --seeds 5 --budget 512 --out /tmp/replay
    # brute-forced Kernel Tuner caches: our tuners (told the restrictions) against Kernel Tuner's strategies
    python -m nni_opevo_bench --objective cache --cache ../shared/data/benchmark_hub/gemm/RTX_Titan.json.gz \\
        --tuners opevo gbfs kt:genetic_algorithm kt:bayes_opt --seeds 10 --budget 200 --concurrency 1 \\
        --out /tmp/hub
    # a whole network under one budget: OpEvo per layer with Ansor's allocator, round-robin, MetaSchedule
    python -m nni_opevo_bench --objective network --target cpu --workloads resnet18 \\
        --tuners opevo opevo@round-robin autotvm:plan_size=16 metaschedule --seeds 3 --budget 240 --out /tmp/resnet18
    # figures and tables again from a CSV (trials.csv, or trials.csv.gz as published)
    python -m nni_opevo_bench --report-only --out docs/results/h100

Rows go to ``<out>/trials.csv`` as trials finish; running the same command again resumes
where it stopped. ``<out>/run.json`` records the command, the date, the machine and
the target a run of kernels was checked against.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from nni_opevo import catalog
from trial_code import targets
from trial_code.cli import add_number, bounded, description, epilog
from trial_code.evaluate import Limits
from trial_code.files import replace_text
from trial_code.trial import MAX_SECONDS

from . import network_end_to_end, network_report, report, tuner_specs
from .machine import recorded
from .objectives import SYNTHETIC, Cache, Live, Network, Objective, Recorded, Synthetic
from .runner import Plan, run


def objectives(args: argparse.Namespace) -> list[Objective]:
    if args.objective == "synthetic":
        return [Synthetic(w) for w in args.workloads]
    if args.objective == "cache":
        if not args.cache:
            raise SystemExit("--objective cache needs --cache FILE [FILE ...] (Kernel Tuner cache files)")
        return [Cache(str(Path(path).resolve())) for path in args.cache]
    if args.objective == "recorded":
        if not args.record:
            raise SystemExit("--objective recorded needs --record CSV [CSV ...]")
        return [Recorded(w, args.target, [Path(p) for p in args.record]) for w in args.workloads]
    target = targets.resolve(args.target)
    limits = Limits(build_timeout=args.build_timeout, run_timeout=args.run_timeout)
    if args.objective == "network":
        return [Network(w, target, limits) for w in args.workloads]
    return [Live(w, target, limits) for w in args.workloads]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="nni-opevo benchmark", description=description(__doc__),
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=epilog(__doc__))
    parser.add_argument("--objective", choices=tuner_specs.OBJECTIVES, default="synthetic")
    parser.add_argument("--workloads", nargs="+", default=["SYN1"],
                        help=f"named workloads or operators (module:function, live), named ones (recorded), "
                             f"{', '.join(SYNTHETIC)} (synthetic), or networks "
                             "(network: alexnet, resnet18, or a JSON file of layers)")
    parser.add_argument("--tuners", nargs="+", default=catalog.COMPARED, help=tuner_specs.help_text())
    add_number(parser, "--seeds", int, 1, 1000, "seeds 0..N-1 per tuner and workload", default=3)
    add_number(parser, "--budget", int, 1, 1_000_000, "trials per run", default=64)
    add_number(parser, "--concurrency", int, 1, 64, "trials at a time (NNI's trialConcurrency)", default=2)
    parser.add_argument("--target", default="auto", help="live: auto, cpu or cuda; recorded: the recorded target")
    parser.add_argument("--record", nargs="+", help="recorded: benchmark CSVs to replay")
    parser.add_argument("--cache", nargs="+", help="cache: Kernel Tuner cache files (.json or .json.gz); each is a "
                                                    "workload named after its file")
    parser.add_argument("--budgets", type=bounded(int, 1, 1_000_000), nargs="+", default=[50, 100, 200],
                        help="where the fraction-of-optimum table reads each run (cache objectives), 1 to 1e+06")
    add_number(parser, "--build-timeout", float, 0.01, MAX_SECONDS, "seconds", default=120.0)
    add_number(parser, "--run-timeout", float, 0.01, MAX_SECONDS, "seconds", default=60.0)
    parser.add_argument("--out", type=Path, required=True, help="folder for trials.csv, run.json, plots, summary.md")
    parser.add_argument("--report-only", action="store_true", help="only draw the figures and tables from trials.csv")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    csv_path, packed = args.out / "trials.csv", args.out / "trials.csv.gz"
    if packed.exists() and not csv_path.exists():
        if not args.report_only:
            raise SystemExit(f"{packed} holds this run's trials compressed: `gunzip -k {packed}` to resume or "
                             "extend it (or pick another --out)")
        csv_path = packed
    if not args.report_only:
        for spec in args.tuners:  # an unknown tuner fails before anything runs
            try:
                tuner_specs.check(spec, args.objective)
            except ValueError as e:
                raise SystemExit(f"--tuners: {e}") from None
        plan = Plan(objectives(args), args.tuners, list(range(args.seeds)), args.budget, args.concurrency)
        args.out.mkdir(parents=True, exist_ok=True)
        runs_file = args.out / "run.json"
        log = json.loads(runs_file.read_text()) if runs_file.exists() else []
        log.append({"command": " ".join(["python -m nni_opevo_bench", *(argv if argv is not None else sys.argv[1:])]),
                    "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                    **recorded(next((o.device for o in plan.objectives if isinstance(o, (Live, Network))), None))})
        replace_text(runs_file, json.dumps(log, indent=2) + "\n")
        report.record_optima(args.out, {o.workload: o.optimum for o in plan.objectives if o.optimum is not None})
        for objective in plan.objectives:
            if isinstance(objective, Network) and network_report.recorded_defaults(
                    args.out, objective.workload, objective.target) is None:
                print(f"{objective.workload}: timing each layer at TVM's default schedule", flush=True)
                network_report.record_defaults(args.out, objective.workload, objective.target, objective.defaults())
            if isinstance(objective, Network):  # the untuned network as one program, once
                network_end_to_end.record(args.out, objective.workload, objective.device, network_end_to_end.DEFAULT, "",
                                          objective.limits)
        run(plan, csv_path, progress=not args.no_progress)
    for path in report.write(csv_path, args.out, args.budgets):
        print(path)


if __name__ == "__main__":
    main()
