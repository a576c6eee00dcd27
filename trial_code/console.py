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

Each subcommand takes the options of the module it runs (``nni-opevo launch --help``).
"""
from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "launch": ("trial_code.launch", "run an experiment to the end and show the best kernel (the main command)"),
    "export": ("trial_code.export", "re-measure an experiment's top kernels and write the best one's source"),
    "trial": ("trial_code.trial", "evaluate one configuration (the NNI trial; --params runs it without NNI)"),
    "spaces": ("trial_code.make_spaces", "write search spaces and experiment configs"),
    "benchmark": ("benchmarks.__main__", "compare tuners and draw the figures and tables"),
    "profile": ("benchmarks.network_profile", "time a network benchmark's final kernels alone and in the built network"),
    "overhead": ("benchmarks.overhead", "time and memory of each tuner's calls against history size"),
    "register": ("nni_opevo.register", "register the tuners with nnictl (tuner: {name: OpEvo})"),
    "docs": ("trial_code.console", "regenerate the classArgs tables of docs/tuners.md from the tuners"),
}


def docs(argv: list[str]) -> int:
    """``nni-opevo docs [FILE ...]``: the classArgs tables (default: the checkout's docs/tuners.md)."""
    from nni_opevo.tables import rewrite_file

    from . import REPO_ROOT

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


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {what}" for name, (_, what) in COMMANDS.items()]
    return "usage: nni-opevo COMMAND [options]\n\ncommands:\n" + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), end="")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"nni-opevo: unknown command {name!r}\n\n{usage()}", end="", file=sys.stderr)
        return 2
    if name == "docs":
        return docs(rest)
    module = importlib.import_module(COMMANDS[name][0])
    sys.argv = [f"nni-opevo {name}", *rest]  # so the subcommand's --help names itself
    return module.main(rest) or 0


if __name__ == "__main__":
    sys.exit(main())
