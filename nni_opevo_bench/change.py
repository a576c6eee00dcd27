"""A search change's measured effect: one tuner's runs in two ``fractions.csv.gz`` of ``nni-opevo hub``
(the code before the change and after it, the same seeds), paired run by run.

    nni-opevo change BEFORE/fractions.csv.gz AFTER/fractions.csv.gz [--tuner opevo] [--chosen SPACE ...]

A run is a (slice, space, seed) and counts once, by its mean fraction of the optimum over the
budgets; the table gives the difference, after minus before, over every run both files hold, per
slice, and per slice and space (``report.paired``: mean ± standard error, Wilcoxon p), then how
many cells (slice, space, budget; the mean over the seeds) went up and down. With ``--chosen``, the
spaces a change was chosen on, it also gives the chosen spaces' runs and the others' apart, over
all slices and per slice: a change is kept where it holds on the spaces it was not chosen on.
These are the figures ``docs/decisions.md`` quotes for a change to the search.
"""
from __future__ import annotations

import argparse
import gzip
from collections import defaultdict
from pathlib import Path

import numpy as np

from trial_code.cli import description, epilog

from .hub import BASELINE
from .report import paired
from .table import read_rows

Run = tuple[str, str, str]
"""(slice, space, seed)."""


def runs(path: Path, tuner: str) -> dict[Run, dict[int, float]]:
    """``tuner``'s fraction at each budget, per run."""
    out: dict[Run, dict[int, float]] = defaultdict(dict)
    for row in read_rows(path):
        if row["tuner"] == tuner:
            out[(row["slice"], row["space"], row["seed"])][int(row["budget"])] = float(row["fraction"])
    return out


def table(before: dict[Run, dict[int, float]], after: dict[Run, dict[int, float]],
          chosen: frozenset[str] = frozenset()) -> str:
    """The paired table of the runs both hold, the ``chosen`` spaces' and the others' apart where
    given (see the module docstring)."""
    common = sorted(set(before) & set(after))
    if not common:
        return "no run is in both files\n"
    lines = ["| runs | count | after minus before, mean ± standard error | Wilcoxon p |", "|---|---|---|---|"]
    slices = [("", common)] + [(f"{s} ", [r for r in common if r[0] == s]) for s in sorted({r[0] for r in common})]
    groups = []
    for prefix, members in slices:
        groups.append((prefix.strip() or "all", members))
        if chosen:
            groups += [(f"{prefix}chosen", [r for r in members if r[1] in chosen]),
                       (f"{prefix}the others", [r for r in members if r[1] not in chosen])]
    groups += [(f"{s} {space}", [r for r in common if r[:2] == (s, space)])
               for s, space in sorted({r[:2] for r in common})]
    for name, members in groups:
        columns = paired({"/".join(r): float(np.mean(list(after[r].values()))) for r in members},
                         {"/".join(r): float(np.mean(list(before[r].values()))) for r in members})
        if columns is not None:
            lines.append(f"| {name} | {columns} |")
    cells: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for run in common:
        for budget in set(before[run]) & set(after[run]):
            cells[(run[0], run[1], budget)].append(after[run][budget] - before[run][budget])
    moved = [float(np.mean(d)) for d in cells.values()]
    lines += ["", f"Cells (slice, space, budget): {sum(d > 0 for d in moved)} up, {sum(d < 0 for d in moved)} down, "
                  f"{sum(d == 0 for d in moved)} level, of {len(moved)}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="nni-opevo change", description=description(__doc__),
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=epilog(__doc__))
    parser.add_argument("before", type=Path, help="fractions.csv.gz of the code before the change")
    parser.add_argument("after", type=Path, help="fractions.csv.gz of the code after it")
    parser.add_argument("--tuner", default=BASELINE, help=f"the tuner the change is to (default {BASELINE})")
    parser.add_argument("--chosen", nargs="+", default=[], metavar="SPACE",
                        help="the spaces the change was chosen on (folder/file, e.g. gemm/RTX_2080_Ti): "
                             "their runs and the others' apart")
    args = parser.parse_args(argv)
    for path in (args.before, args.after):
        if not path.is_file():
            parser.error(f"{path}: no such file (a fractions.csv.gz of nni-opevo hub)")
    read = {}
    for path in (args.before, args.after):
        try:
            read[path] = runs(path, args.tuner)
        except (KeyError, ValueError, UnicodeDecodeError, gzip.BadGzipFile, EOFError) as e:
            parser.error(f"{path}: not a fractions.csv.gz of nni-opevo hub "
                         f"(slice, space, tuner, seed, budget, fraction: {e})")
    spaces = {run[1] for held in read.values() for run in held}
    unknown = sorted(set(args.chosen) - spaces)
    if unknown:
        parser.error(f"--chosen: {', '.join(unknown)} is not a space of these files (they hold {', '.join(sorted(spaces))})")
    print(table(read[args.before], read[args.after], frozenset(args.chosen)), end="")


if __name__ == "__main__":
    main()
