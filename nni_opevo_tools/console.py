"""The ``nni-opevo`` command: one entry point for the project's tools, beside their ``python -m`` forms.

    nni-opevo launch [--workload MM1 --tuner gbfs | --config experiments/MM1/opevo.yml]
    nni-opevo export EXPERIMENT_ID
    nni-opevo trial --workload MM_small --target cpu --params '{...}'
    nni-opevo spaces [--workload MM1 --tuner nose]
    nni-opevo benchmark --objective synthetic --workloads SYN1 --out /tmp/bench
    nni-opevo profile --out docs/results/network-resnet18-transfer
    nni-opevo overhead --tuner opevo
    nni-opevo register
    nni-opevo docs

Each subcommand takes the options of the module it runs (``nni-opevo launch --help``). Packages
above this one (the benchmark harness) add theirs through the ``nni_opevo.commands`` entry point:
a table like ``COMMANDS`` below.
"""
from __future__ import annotations

import importlib
import sys
from importlib.metadata import entry_points

COMMANDS = {
    "launch": ("nni_opevo_tools.launch", "run an experiment to the end and show the best kernel (the main command)"),
    "export": ("nni_opevo_tools.export", "re-measure an experiment's top kernels and write the best one's source"),
    "trial": ("trial_code.trial", "evaluate one configuration (the NNI trial; --params runs it without NNI)"),
    "spaces": ("nni_opevo_tools.make_spaces", "write search spaces and experiment configs"),
    "register": ("nni_opevo.register", "register the tuners with nnictl (tuner: {name: OpEvo})"),
    "docs": ("nni_opevo_tools.console", "regenerate the classArgs tables of docs/tuners.md from the tuners"),
}


def docs(argv: list[str]) -> int:
    """``nni-opevo docs [FILE ...]``: the classArgs tables (default: the checkout's docs/tuners.md)."""
    from nni_opevo.tables import rewrite_file
    from trial_code import REPO_ROOT

    if argv and argv[0] in ("-h", "--help"):
        print("usage: nni-opevo docs [FILE ...]\n\nRegenerate the <!-- classArgs of <Tuner> --> tables of each "
              f"Markdown FILE (default: {REPO_ROOT}/docs/tuners.md) from the tuners' declarations.")
        return 0
    for path in argv or [f"{REPO_ROOT}/docs/tuners.md"]:
        try:
            changed = rewrite_file(path)
        except OSError as e:
            print(f"nni-opevo docs: cannot rewrite {path}: {e.strerror}", file=sys.stderr)
            return 2
        print(f"{path}: {'rewritten' if changed else 'already current'}")
    return 0


def commands() -> dict[str, tuple[str, str]]:
    """This package's commands and those the installed packages above it add."""
    out = dict(COMMANDS)
    for point in entry_points(group="nni_opevo.commands"):
        out.update(point.load())
    return out


def usage() -> str:
    known = commands()
    width = max(map(len, known))
    lines = [f"  {name:<{width}}  {what}" for name, (_, what) in known.items()]
    return "usage: nni-opevo COMMAND [options]\n\ncommands:\n" + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), end="")
        return 0
    name, rest = argv[0], argv[1:]
    known = commands()
    if name not in known:
        print(f"nni-opevo: unknown command {name!r}\n\n{usage()}", end="", file=sys.stderr)
        return 2
    if name == "docs":
        return docs(rest)
    module = importlib.import_module(known[name][0])
    sys.argv = [f"nni-opevo {name}", *rest]  # so the subcommand's --help names itself
    return module.main(rest) or 0


if __name__ == "__main__":
    sys.exit(main())
