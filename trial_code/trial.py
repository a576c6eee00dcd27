"""The NNI trial: ``python -m trial_code.trial --workload MM1 [--target auto|cpu|cuda]``.

Under NNI it takes the tuner's parameters with ``nni.get_next_parameter()`` and always reports
``{'default': TFLOPS, 'latency_ms', 'status', 'build_s', 'error'}`` with
``nni.report_final_result``, failures included (TFLOPS 0.0 and the status), because NNI 3.0
only relays results reliably (microsoft/nni#5726). Outside NNI, ``--params '{...}'`` evaluates
one configuration and prints the same dict as JSON.
"""
from __future__ import annotations

import argparse
import json
import sys
import traceback
from typing import Any

from . import targets
from .cli import add_workload_options, workload_from
from .evaluate import Limits, Result, evaluate
from .status import Status


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workload_options(parser)
    parser.add_argument("--target", default="auto", help="auto (CUDA when a GPU is visible), cpu or cuda")
    parser.add_argument("--build-timeout", type=float, default=Limits.build_timeout, help="seconds (default %(default)s)")
    parser.add_argument("--run-timeout", type=float, default=Limits.run_timeout,
                        help="seconds for checking and timing, once the device is ours (default %(default)s)")
    parser.add_argument("--repeat", type=int, default=Limits.repeat, help="timed repeats, median reported")
    parser.add_argument("--min-repeat-ms", type=int, default=Limits.min_repeat_ms,
                        help="each repeat runs the kernel enough times to last this long")
    parser.add_argument("--params", help="evaluate this JSON configuration without NNI and print the result")
    parser.add_argument("--build-only", action="store_true", help="build (and nvcc-compile CUDA) without running")
    args = parser.parse_args(argv)
    for flag in ("build_timeout", "run_timeout"):
        if getattr(args, flag) <= 0:
            parser.error(f"--{flag.replace('_', '-')} must be positive")
    if args.repeat < 1 or args.min_repeat_ms < 0:
        parser.error("--repeat must be >= 1 and --min-repeat-ms >= 0")
    return args


def run(args: argparse.Namespace, params: dict[str, Any]) -> Result:
    """Evaluate, turning any error of ours into a reported UNKNOWN_ERROR rather than a lost trial."""
    try:
        workload = workload_from(args)
        target = targets.resolve(args.target)
        limits = Limits(args.build_timeout, args.run_timeout, args.repeat, args.min_repeat_ms)
        return evaluate(workload, params, target, limits, build_only=args.build_only)
    except Exception as exc:
        traceback.print_exc()
        return Result(Status.UNKNOWN_ERROR, error=f"{type(exc).__name__}: {exc}")


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if args.params is not None:
        print(json.dumps(run(args, json.loads(args.params)).report()))
        return
    import nni

    params = nni.get_next_parameter()
    result = run(args, params)
    print(f"{result.status.name}: {result.tflops:.4f} TFLOPS {result.error}", file=sys.stderr)
    nni.report_final_result(result.report())


if __name__ == "__main__":
    main()
