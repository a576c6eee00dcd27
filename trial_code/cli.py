"""Command-line options shared by the trial, the space generator and the export command:
which workload (a named one, or a family with a shape) and which target."""
from __future__ import annotations

import argparse
import json
from typing import Any

from . import workloads
from .workloads import Workload


def add_workload_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workload", help=f"a named workload: {', '.join(workloads.NAMED)}")
    parser.add_argument("--family", choices=workloads.FAMILIES, help="a custom shape's operator family")
    parser.add_argument("--shape", nargs="+", metavar="KEY=VALUE", default=[],
                        help="a custom shape, e.g. n=512 m=1024 k=1024 (see trial_code/workloads.py)")
    parser.add_argument("--name", help="name of the custom workload (default: from its shape)")


def workload_from(args: argparse.Namespace) -> Workload:
    if args.workload:
        if args.family or args.shape:
            raise ValueError("give either --workload or --family with --shape, not both")
        return workloads.lookup(args.workload)
    if not args.family:
        raise ValueError("give --workload NAME, or --family with --shape")
    shape: dict[str, Any] = {}
    for pair in args.shape:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"--shape takes KEY=VALUE, got {pair!r}")
        shape[key] = json.loads(value) if value.lstrip("-").isdigit() else value
    return workloads.make(args.family, name=args.name, **shape)
