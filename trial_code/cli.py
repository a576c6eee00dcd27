"""Command-line options shared by the trial, the space generator and the export command:
which workload (a named one, a family with a shape, or a network's layers) and which target;
every numeric option of every command, bounded where it is declared (``add_number``); and each
command's help from its module docstring (``description``, ``epilog``)."""
from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

from . import networks, workloads
from .workloads import Workload


def description(doc: str) -> str:
    """A command's description: its module docstring's first paragraph, on one line."""
    return " ".join(doc.split("\n\n", 1)[0].split())


def epilog(doc: str) -> str:
    """What a module docstring says after its first paragraph, for a command's ``--help``."""
    return doc.split("\n\n", 1)[1] if "\n\n" in doc else ""


def add_workload_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workload", help=f"a named workload: {', '.join(workloads.NAMED)}")
    parser.add_argument("--family", choices=workloads.FAMILIES, help="a custom shape's operator family")
    parser.add_argument("--operator", metavar="MODULE:NAME",
                        help="your own operator: a function returning a trial_code.operators.Operator (or a "
                             "Template subclass) in a module importable here; --shape gives its arguments")
    parser.add_argument("--shape", nargs="+", metavar="KEY=VALUE", default=[],
                        help="a custom shape, e.g. n=512 m=1024 k=1024 (see trial_code/workloads.py), or the "
                             "--operator's keyword arguments")
    parser.add_argument("--name", help="name of the custom workload (default: from its shape)")
    parser.add_argument("--network", help=f"every tunable layer of a network ({', '.join(networks.NETWORKS)}): the "
                                          f"parameters' '{networks.KEY}' choice names the layer")


def layer_from(args: argparse.Namespace, params: dict[str, Any]) -> tuple[Workload, dict[str, Any]]:
    """The workload and its parameters: ``--network``'s layer that ``params`` name, or the one
    workload of the other options with ``params`` as they are."""
    if not getattr(args, "network", None):
        return workload_from(args), params
    if args.workload is not None or args.family or args.shape:
        raise ValueError("give either --network or a workload (--workload, --family with --shape), not both")
    name, inner = networks.split(params)
    return networks.layer(args.network, name).workload, inner


def workload_from(args: argparse.Namespace) -> Workload:
    if getattr(args, "network", None):
        raise ValueError("--network names many workloads; this command takes one (--workload, or --family with --shape)")
    operator = getattr(args, "operator", None)
    if args.workload is not None:  # an empty name is looked up, and refused
        if args.family or args.shape or operator:
            raise ValueError("give either --workload, --family with --shape, or --operator, not more than one")
        return workloads.lookup(args.workload)
    if operator is not None and args.family not in (None, "operator"):
        raise ValueError("give either --family with --shape or --operator, not both")
    if not args.family and operator is None:
        raise ValueError("give --workload NAME, --family with --shape, or --operator MODULE:NAME")
    shape: dict[str, Any] = {} if operator is None else {"operator": operator}
    shape.update(workloads.shape_arguments(args.shape, "--shape"))
    return workloads.make(args.family or "operator", name=args.name, **shape)


def bounded(kind: type, low: float, high: float) -> Callable[[str], Any]:
    """An argparse ``type`` that reads an int or a finite float from ``low`` to ``high`` and refuses
    anything else with the range named (a repeat count past 2^32 wraps to 0 inside TVM; a
    timeout of 1e30 s or a port of 99999 is a typo)."""
    noun = "an integer" if kind is int else "a number"

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or (kind is float and not math.isfinite(value)) or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be {noun} from {low:g} to {high:g}, got {text!r}")
        return value

    parse.__name__ = noun
    return parse


def add_number(parser: argparse.ArgumentParser, flag: str, kind: type, low: float, high: float, help: str = "",
               **options: Any) -> None:
    """A numeric option with its range declared once: read by ``bounded``, shown in ``--help``."""
    shown = f"{help + ', ' if help else ''}{low:g} to {high:g}" + (" (default %(default)s)" if "default" in options
                                                                    and options["default"] is not None else "")
    parser.add_argument(flag, type=bounded(kind, low, high), help=shown, **options)
