"""The ``nni-opevo`` command: one entry point for the project's tools, beside their ``python -m`` forms.

    nni-opevo launch [--workload MM1 --tuner gbfs | --config experiments/MM1/opevo.yml]
    nni-opevo export EXPERIMENT_ID
    nni-opevo trial --workload MM_small --target cpu --params '{...}'
    nni-opevo spaces [--workload MM1 --tuner nose]
    nni-opevo benchmark --objective synthetic --workloads SYN1 --out /tmp/bench
    nni-opevo profile --out docs/results/networks/resnet18
    nni-opevo overhead --tuner opevo
    nni-opevo register
    nni-opevo docs

Each subcommand takes the options of the module it runs (``nni-opevo launch --help``). Packages
above this one (the benchmark harness) add theirs through the ``nni_opevo.commands`` entry point:
a table like ``COMMANDS`` below. A user's mistake (an unknown name, a bad value, a missing file)
ends in one line on stderr and exit status 2; ``--debug`` shows the traceback instead.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from importlib.metadata import entry_points
from typing import NoReturn

from nni_opevo.suggest import unknown

COMMANDS = {
    "launch": ("nni_opevo_tools.launch", "run an experiment to the end and show the best kernel (the main command)"),
    "export": ("nni_opevo_tools.export", "re-measure an experiment's top kernels and write the best one's source"),
    "trial": ("trial_code.trial", "evaluate one configuration (the NNI trial; --params runs it without NNI)"),
    "spaces": ("nni_opevo_tools.make_spaces", "write search spaces and experiment configs"),
    "register": ("nni_opevo.register", "register the tuners with nnictl (tuner: {name: OpEvo})"),
    "docs": ("nni_opevo_tools.console", "regenerate the classArgs tables of docs/tuners.md from the tuners"),
}


def docs(argv: list[str]) -> int:
    """``nni-opevo docs [FILE ...]``: the classArgs tables (default: docs/tuners.md here)."""
    from nni_opevo.tables import rewrite_file

    if argv and argv[0] in ("-h", "--help"):
        print("usage: nni-opevo docs [FILE ...]\n\nRegenerate the <!-- classArgs of <Tuner> --> tables of each "
              "Markdown FILE (default: docs/tuners.md in the current folder) from the tuners' declarations.")
        return 0
    for path in argv or ["docs/tuners.md"]:
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


USER_ERRORS = (ValueError, OSError)
"""What a command raises for bad input or a file system it cannot write (a name, a value, a path
that is a file, no permission, a read-only or full disk): one line, not a traceback."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line, with the closest commands for a mistyped one."""
        if "invalid choice" in message and self._subparsers_action is not None:
            wrong = message.split("'")[1] if "'" in message else ""
            message = unknown("command", wrong, self._subparsers_action.choices)
        self.exit(2, f"{self.prog}: {message}\n")

    _subparsers_action: argparse._SubParsersAction | None = None


def parser() -> _Parser:
    """``nni-opevo [--version] [--debug] COMMAND [options]``: each command's own options (and its
    ``--help``) are those of the module it runs."""
    from nni_opevo import __version__

    top = _Parser(prog="nni-opevo", description="OpEvo and its peers as NNI tuners, with TVM trial code: tune "
                  "tensor-operator kernels.", epilog="`nni-opevo COMMAND --help` for a command's options.")
    top.add_argument("--version", action="version", version=f"nni-opevo {__version__}")
    top.add_argument("--debug", action="store_true", help="show the traceback of any error")
    sub = top.add_subparsers(dest="command", metavar="COMMAND", required=True)
    top._subparsers_action = sub
    for name, (_, what) in commands().items():
        command = sub.add_parser(name, help=what, add_help=False, prefix_chars="\0")
        command.add_argument("args", nargs=argparse.REMAINDER)
    return top


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:  # the commands at a glance, as `nni-opevo --help` shows them
        parser().print_help()
        return 0
    args = parser().parse_args(argv)
    name, rest = args.command, args.args
    if name == "docs":
        return docs(rest)
    module = importlib.import_module(commands()[name][0])
    sys.argv = [f"nni-opevo {name}", *rest]  # so the subcommand's usage names itself
    try:
        return module.main(rest) or 0
    except USER_ERRORS as e:
        if args.debug:
            raise
        message = e.strerror + f": {e.filename}" if isinstance(e, OSError) and e.strerror else str(e)
        print(f"nni-opevo {name}: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"nni-opevo {name}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
