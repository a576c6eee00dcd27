"""The NNI trial: build, check and time one configuration of a workload, and report it.

``python -m trial_code.trial --workload MM1 [--target auto|cpu|cuda]``, or ``--network alexnet``
for the layer its parameters name (``networks``).

Under NNI it takes the tuner's parameters as ``nni.get_next_parameter()`` does and always reports
``{'default': TFLOPS, 'latency_ms', 'status', 'build_s', 'error'}`` as ``nni.report_final_result``
does (``nni_channel``: without importing nni), failures included (TFLOPS 0.0 and the status), because NNI 3.0
only relays results reliably (microsoft/nni#5726). Outside NNI, ``--params '{...}'`` evaluates
one configuration and prints the same dict as JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import traceback
from typing import Any, NoReturn

from . import forked, networks, nni_channel, targets
from .cli import add_number, add_workload_options, description, layer_from, workload_from
from .evaluate import LOCK_WAITS, Limits, Result, evaluate
from .status import Status


class BadArguments(ValueError):
    """The trial command's own options are wrong (the message names the option)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # report through the trial, not only exit 2
        raise BadArguments(message)


def _params(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"is not JSON ({e})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object of parameters, got {text!r}")
    return value


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The trial's options; BadArguments naming the option when one is wrong."""
    parser = _Parser(description=description(__doc__))
    add_workload_options(parser)
    parser.add_argument("--target", default="auto", help="auto (CUDA when a GPU is visible), cpu or cuda")
    add_number(parser, "--build-timeout", float, 0.01, MAX_SECONDS, "seconds", default=Limits.build_timeout)
    add_number(parser, "--run-timeout", float, 0.01, MAX_SECONDS, "seconds for checking and timing, once the device "
               "is ours", default=Limits.run_timeout)
    add_number(parser, "--lock-timeout", float, 0.01, MAX_SECONDS, "seconds a trial may wait while one other process "
               f"holds the device, before DEVICE_BUSY (default: {LOCK_WAITS} x --run-timeout + --build-timeout)",
               default=None)
    add_number(parser, "--repeat", int, 1, MAX_REPEAT, "timed repeats, median reported", default=Limits.repeat)
    add_number(parser, "--min-repeat-ms", int, 0, MAX_REPEAT_MS, "each repeat runs the kernel enough times to last "
               "this long", default=Limits.min_repeat_ms)
    parser.add_argument("--params", type=_params,
                        help="evaluate this JSON configuration without NNI and print the result")
    parser.add_argument("--build-only", action="store_true", help="build (and nvcc-compile CUDA) without running")
    args = parser.parse_args(argv)
    try:  # the workload options name something that exists, before anything is built
        if args.network:
            networks.lookup(args.network)
        else:
            workload_from(args)
        targets.resolve(args.target)
    except ValueError as e:
        parser.error(str(e))
    return args


MAX_REPEAT = 10_000
MAX_REPEAT_MS = 600_000
MAX_SECONDS = 86_400
"""A trial's timeouts at most: a day."""


def run(args: argparse.Namespace, params: dict[str, Any]) -> Result:
    """Evaluate, turning any error of ours into a reported UNKNOWN_ERROR rather than a lost trial."""
    try:
        workload, params = layer_from(args, params)
        target = targets.resolve(args.target)
        limits = Limits(args.build_timeout, args.run_timeout, args.repeat, args.min_repeat_ms,
                        lock_timeout=args.lock_timeout)
        return evaluate(workload, params, target, limits, build_only=args.build_only)
    except Exception as exc:
        traceback.print_exc()
        return Result(Status.UNKNOWN_ERROR, error=f"{type(exc).__name__}: {exc}")


def main(argv: list[str] | None = None) -> None:
    """Under NNI, a trial whose own options are wrong still reports (UNKNOWN_ERROR with the
    message): NNI 3.0 relays results reliably, not trial ends (microsoft/nni#5726)."""
    # NNI stops a trial with SIGINT first; a trial started from a background shell inherits
    # SIGINT ignored, and would then keep its worker timing a kernel until the SIGKILL.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        args = parse(argv)
    except BadArguments as e:
        message = f"trial_code.trial: {e}"
        print(message, file=sys.stderr)
        if os.environ.get("NNI_PLATFORM") and "--params" not in (argv if argv is not None else sys.argv):
            nni_channel.next_parameters()
            nni_channel.report_final(Result(Status.UNKNOWN_ERROR, error=message).report())
        raise SystemExit(2) from None
    if args.params is not None:
        print(json.dumps(run(args, args.params).report()))
        return
    params = nni_channel.next_parameters()
    with forked.experiment_workers():  # its worker forked from the experiment's server, which has TVM loaded
        result = run(args, params)
    print(f"{result.status.name}: {result.tflops:.4f} TFLOPS {result.error}", file=sys.stderr)
    nni_channel.report_final(result.report())


if __name__ == "__main__":
    main()
