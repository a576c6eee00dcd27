"""How far the vendor comparison can be trusted on this machine: an exported kernel set against
its vendor library again and again, as ``nni-opevo export`` sets it (``anchor.compare``), each
comparison's ratio printed or why none was given, then how the given ratios spread.

    nni-opevo vendor-ratio ~/nni-experiments/<id>/export --times 20

Prints figures; it asserts nothing. A ratio is given when each side's median round is near its
fastest (``anchor.BUSY_SPREAD``): the count of ratios given says how often a user is told the machine
was busy, and a given ratio far from the others' median is one a user would have been told
wrongly (``--far``).
"""
from __future__ import annotations

import argparse
import os
import statistics

from nni_opevo_tools import best as best_json
from nni_opevo_tools.export import Options, versus_vendor
from trial_code.cli import add_number, description
from trial_code.targets import Target
from trial_code.workloads import Workload


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="nni-opevo vendor-ratio", description=description(__doc__))
    parser.add_argument("export", help="an export folder (best.json and best.so, from `nni-opevo export`)")
    add_number(parser, "--times", int, 1, 1000, "comparisons", default=20)
    add_number(parser, "--min-repeat-ms", int, 1, 60_000, "each window lasts at least this long (export's)",
               default=Options.min_repeat_ms)
    add_number(parser, "--far", float, 0.0, 10.0, "a given ratio this far from the given ones' median, "
               "relative to it, counts as wrong", default=0.2)
    args = parser.parse_args(argv)
    folder = os.path.expanduser(args.export)
    try:
        best = best_json.read(os.path.join(folder, "best.json"))
    except (OSError, ValueError) as e:
        parser.error(f"export: {e}")
    if best.library is None:
        parser.error(f"export: {folder} holds no compiled kernel (an export of a network or of an older version)")
    workload, target = Workload.from_json(best.workload), Target.from_json(best.target)
    options = Options(min_repeat_ms=args.min_repeat_ms)
    given = []
    for index in range(args.times):
        comparison = versus_vendor(os.path.join(folder, best.library), workload, target, options)
        if comparison is None:
            raise SystemExit(f"{workload.name} has no vendor library on {target.kind}")
        kernel, library = comparison.spreads
        shown = "busy" if comparison.busy else f"{comparison.ratio:.3f}x"
        print(f"{index + 1:>4}/{args.times} {shown:>8}  median rounds {kernel:.0%} and {library:.0%} above the "
              "fastest  rounds " + " ".join(f"{r:.2f}" for r in comparison.ratios), flush=True)
        if not comparison.busy:
            given.append(comparison.ratio)
    print(f"{comparison.library}: a ratio given in {len(given)} of {args.times} comparisons", end="")
    if given:
        middle = statistics.median(given)
        far = [r for r in given if abs(r - middle) > args.far * middle]
        print(f"; median {middle:.3f}x, {min(given):.3f}-{max(given):.3f}; {len(far)} more than "
              f"{args.far:.0%} from the median" + (f" ({', '.join(f'{r:.3f}' for r in far)})" if far else ""))
    else:
        print()
