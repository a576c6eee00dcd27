"""The ``nni-opevo`` command's conventions: ``--version``, a ``--help`` for every subcommand that
does nothing else, and a mistake answered in one line with a non-zero status and the closest names."""
from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
from nni_experiment import free_port

import nni_opevo
from nni_opevo_tools.console import commands

CLI = [sys.executable, "-m", "nni_opevo_tools.console"]


def _run(args: list[str], cwd, timeout: int = 120) -> subprocess.CompletedProcess:
    # NNI's config folder, the inputs cache and the device locks all under the empty folder.
    env = {**os.environ, "HOME": str(cwd), "XDG_CACHE_HOME": str(cwd / ".cache"), "NNI_CONFIG_DIR": str(cwd / ".nni")}
    return subprocess.run([*CLI, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _tree(folder) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_version():
    shown = subprocess.run([*CLI, "--version"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and shown.stdout.strip() == f"nni-opevo {nni_opevo.__version__}"


def test_the_command_line_answers_without_importing_nni():
    """Importing ``nni`` takes about 2 s: the package, its registry and catalog, and the commands
    that build no tuner (``--version``, ``launch --help``) answer without it."""
    probe = ("import atexit, sys\n"
             "atexit.register(lambda: print(sorted(m for m in sys.modules if m.split('.')[0] == 'nni')))\n"
             "import nni_opevo, nni_opevo.catalog, nni_opevo.testing\n"
             "from nni_opevo_tools import console\n"
             "console.main(['launch', '--help'])\n")
    shown = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and shown.stdout.splitlines()[-1] == "[]", shown.stdout[-300:] + shown.stderr


@pytest.mark.parametrize("command", sorted(commands()))
def test_every_help_prints_help_and_does_nothing_else(command, tmp_path):
    shown = _run([command, "--help"], tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"usage: nni-opevo {command}") and not shown.stderr
    assert _tree(tmp_path) == [], "a --help wrote files"
    description = shown.stdout.split("\n\n")[1].strip()  # after the usage: what the command does, whole
    assert not description.endswith(":") and description.rstrip("`").endswith("."), description


@pytest.mark.parametrize("args,message", [
    (["lanch"], "unknown command 'lanch' (did you mean launch?)"),
    (["spaces", "--workload", "MM4"], "unknown workload 'MM4' (did you mean MM3, MM2, MM1?)"),
    (["trial", "--workload", "BMM_smal", "--params", "{}"], "unknown workload 'BMM_smal' (did you mean BMM_small"),
    (["launch", "--workload", "MM_small", "--tuner", "opevoo", "--target", "cpu"],
     "unknown tuner 'opevoo' (did you mean opevo"),
    (["trial", "--network", "alexnett", "--params", "{}"], "unknown network 'alexnett' (did you mean alexnet?)"),
    (["export", "no-such-experiment"], "no experiment 'no-such-experiment'"),
    (["spaces", "--workload", ""], "unknown workload ''"),
    (["launch", "--workload", "", "--target", "cpu"], "unknown workload ''"),
], ids=["command", "spaces-workload", "trial-workload", "tuner", "network", "export", "empty-name", "launch-empty"])
def test_a_mistake_is_one_line_with_a_non_zero_status(args, message, tmp_path):
    # On a port of its own: the launcher refuses a busy port first (the README's main job keeps 8080).
    failed = _run(args + (["--port", str(free_port())] if args[0] == "launch" else []), tmp_path)
    assert failed.returncode != 0 and message in failed.stderr, failed.stderr
    assert len(failed.stderr.strip().splitlines()) == 1 and "Traceback" not in failed.stderr
    assert not (tmp_path / "experiments").exists()


def test_launch_on_a_port_in_use_is_one_line(tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        failed = _run(["launch", "--workload", "MM_small", "--target", "cpu", "--port", str(port)], tmp_path)
    assert failed.returncode != 0 and "Traceback" not in failed.stderr
    assert failed.stderr.strip().endswith(f"--port {port}: in use on this machine (another experiment's web UI?); "
                                          "give a free one"), failed.stderr
    assert not (tmp_path / "experiments").exists()


def test_debug_shows_the_traceback(tmp_path):
    failed = _run(["--debug", "spaces", "--workload", "MM4"], tmp_path)
    assert failed.returncode != 0 and "Traceback" in failed.stderr and "unknown workload 'MM4'" in failed.stderr


def _option_calls():
    """(command, module source file, the ast.Call) of every add_argument / add_number of every
    command, those of the commands' functions it calls to add options (``add_..._options``,
    such as export's re-measurement options, which launch adds too) included."""
    import ast
    import importlib.util

    def called(node: ast.AST) -> str:
        return getattr(node.func, "attr", getattr(node.func, "id", "")) if isinstance(node, ast.Call) else ""

    modules = {name: module for name, (module, _) in commands().items() if name != "docs"}
    trees = {name: (path, ast.parse(open(path).read())) for name, path in
             ((name, importlib.util.find_spec(module).origin) for name, module in modules.items())}
    adders = {node.name: (path, node) for path, tree in trees.values() for node in ast.walk(tree)
              if isinstance(node, ast.FunctionDef) and node.name.startswith("add_") and node.name.endswith("_options")}
    for name, (path, tree) in trees.items():
        scopes = [(path, tree)] + [adders[called(node)] for node in ast.walk(tree) if called(node) in adders]
        for where, scope in scopes:
            for node in ast.walk(scope):
                if called(node) in ("add_argument", "add_number"):
                    yield name, where, node


def _numeric_flags():
    import ast

    flags = set()
    for name, _, call in _option_calls():
        if getattr(call.func, "id", "") == "add_number" and isinstance(call.args[1], ast.Constant):
            flags.add((name, call.args[1].value))
    return sorted(flags)


def test_every_numeric_option_of_every_command_is_bounded_where_declared():
    """No command reads a number without a range: each numeric option is declared with
    trial_code.cli.add_number (or its bounded type), which refuses a value outside it by name."""
    import ast

    unbounded = [f"{path}:{call.lineno}" for _, path, call in _option_calls()
                 for keyword in call.keywords if keyword.arg == "type"
                 and isinstance(keyword.value, ast.Name) and keyword.value.id in ("int", "float")]
    assert not unbounded, unbounded
    assert len(_numeric_flags()) >= 25


@pytest.mark.parametrize("command, flag", _numeric_flags())
def test_a_huge_or_negative_value_of_any_numeric_option_is_one_line(command, flag, capsys):
    from nni_opevo_tools import console

    for value in ("1e300", "-1e300", "nan"):
        code = None
        try:
            code = console.main([command, f"{flag}={value}"])
        except SystemExit as e:
            code = e.code
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and f"argument {flag}: must be " in err[-1] and f"got '{value}'" in err[-1], (value, err)
        assert not any("Traceback" in line for line in err)
