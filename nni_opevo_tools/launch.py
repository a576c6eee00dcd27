"""Run a tuning experiment to the end and show the best kernel: the README's main command.

    python -m nni_opevo_tools.launch                              # GPU: MM1 (512 trials); no GPU: the CPU quickstart
    python -m nni_opevo_tools.launch --workload MM_small --target cpu --trials 8  # written in the current folder
    python -m nni_opevo_tools.launch --config experiments/C2/opevo.yml --port 8081
    python -m nni_opevo_tools.launch --workload MM1 --tuner gbfs  # any workload and catalog tuner, generated
    python -m nni_opevo_tools.launch --operator myops:depthwise --shape channels=32 --target cpu  # your operator

Experiments named by ``--workload`` or ``--operator`` (and the default ones) are generated under
``--root``, the current folder by default (``make_spaces``), so the installed package runs
anywhere. A user's operator (``trial_code.operators``) is imported, its template derived and one
configuration built, run and checked against its reference before NNI starts: a module that
fails to import or a computation that does not build is one line here, not a failed experiment.

Before NNI starts, it builds the experiment's tuner with its classArgs on its search space, so
a misspelt ``_type`` or a bad classArg is refused at once with the parameter named. It then
starts the experiment with ``nnictl create``, prints the web UI's address (and that NNI serves
it on every network interface, without authentication), reports progress until the experiment
ends, then re-measures the top configurations (``export``: more repeats, one at a time) and
prints the winner, saying whether it was re-measured; ``best.json`` and the kernel's source go
to ``<experiment folder>/export``. An experiment whose web server or tuner missed one of NNI's
start-up deadlines (a loaded machine) is started again; one that ends in ERROR otherwise has its
tuner's message printed from NNI's logs. The experiment stays up for the web UI until ``nnictl stop <id>``.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections import Counter

import yaml

from trial_code import constraint, targets, workloads
from trial_code.cli import add_number, description, workload_from
from trial_code.evaluate import evaluate
from trial_code.files import FolderBusy
from trial_code.indices import index_ranges
from trial_code.precision import is_integer
from trial_code.templates import for_workload
from trial_code.workloads import Workload

from . import export, make_spaces
from .experiment_client import MISSED_CONNECT, NNICTL, STARTS, CreateFailed, ExperimentClient, create


def default_config(root: str | None) -> str:
    """MM1 with OpEvo where a GPU is visible, else the CPU quickstart, written under ``root``."""
    layout = make_spaces.Layout(root)
    if targets.resolve("auto").kind == "cuda":
        return generated_config(workloads.NAMED["MM1"], make_spaces.SHIPPED_TUNER, "cuda", layout.root, None)
    make_spaces.write_spaces(layout, workloads.NAMED[make_spaces.QUICKSTART])
    return make_spaces.write_quickstart(layout)


def generated_config(workload: Workload, tuner: str, target: str, root: str | None, trials: int | None) -> str:
    """``<root>/experiments/<workload>/<tuner>[-cpu].yml``, written now (``make_spaces``);
    ``trials`` overrides its maxTrialNumber."""
    kind = "cuda" if targets.resolve(target).kind == "cuda" else "cpu"
    layout = make_spaces.Layout(root)
    make_spaces.write_spaces(layout, workload)
    return make_spaces.write_experiments(layout, workload, tuner, (kind,), trials)[0]


FIRST_DRAWS = 20_000
"""Random configurations the launcher draws for a user's operator's first trial, at most."""


def first_trial(workload: Workload, target: str) -> None:
    """A user's operator, tried before NNI starts: its template derived (the module imported, the
    computation read), one configuration its check admits built, run and checked against its
    reference, and the positions each input that indexes a tensor is drawn among said, as the
    values each input the operator declares ``values`` for is. ValueError with one line when any
    of it fails."""
    resolved = targets.resolve(target)
    template = for_workload(workload)
    template.space(workload, "cuda" if resolved.kind == "cuda" else "cpu")
    params, _ = constraint.draw(workload, resolved, seed=0, tries=FIRST_DRAWS)
    if params is None:
        refusal, count = constraint.commonest_refusal(workload, resolved, seed=0, tries=FIRST_DRAWS)
        raise ValueError(f"operator {workload.shape['operator']}: no configuration of its space passes the static "
                         f"check on {resolved.kind} in {FIRST_DRAWS:,} draws; the commonest refusal ({count:,} of "
                         f"them): {refusal}")
    result = evaluate(workload, params, resolved)
    if result.status.name != "NO_ERROR":
        detail = " ".join(result.error.split())
        own = f"ValueError: operator {workload.shape['operator']}: "
        if detail.startswith(own):  # the operator's own refusal (its reference), not the configuration's
            raise ValueError(detail.removeprefix("ValueError: "))
        raise ValueError(f"operator {workload.shape['operator']}: a first configuration ended {result.status.name}"
                         f": {detail[-400:]}")
    tensors = template.compute(workload)
    for found in (part for parts in index_ranges(tensors) for part in parts):
        print(f"{workload.name}: input {found.name}{found.shown} is drawn among {found.low}..{found.high}, the "
              f"positions of {found.indexes} it indexes", flush=True)
    types = {t.op.name: str(t.dtype) for t in tensors[:-1]}
    for name, (low, high) in template.values(workload).items():
        among = f"among {low}..{high}" if is_integer(types[name]) else f"in [{low:g}, {high:g})"
        print(f"{workload.name}: input {name} is drawn {among}, as its values declare", flush=True)
    print(f"{workload.name}: a first configuration built and matched its reference "
          f"({result.tflops * 1e3:.2f} GFLOPS); starting NNI", flush=True)


MAX_TRIALS = 1_000_000
"""An experiment's maxTrialNumber at most."""
EXPOSED = ("NNI serves this web UI and its REST API on every network interface of this machine, without "
           "authentication: anyone who can reach port {port} can read, change and stop the experiment. Keep it "
           "local with a firewall rule, or run it on a machine others cannot reach and watch it through an SSH "
           "tunnel: ssh -L {port}:127.0.0.1:{port} <this host> (docs/scaling.md).")


def validate(config: str) -> None:
    """Build the experiment's tuner with its classArgs on its search space, as NNI's dispatcher
    will: SystemExit with the tuner's own message when it refuses them."""
    with open(config) as handle:
        profile = yaml.safe_load(handle) or {}
    folder = os.path.dirname(os.path.abspath(config))
    tuner = profile.get("tuner") or {}
    if "searchSpaceFile" in profile:
        with open(os.path.join(folder, profile["searchSpaceFile"])) as handle:
            space = json.load(handle)
    else:
        space = profile.get("searchSpace")
    code = tuner.get("codeDirectory")
    added = os.path.join(folder, code) if code else None
    if added:
        sys.path.insert(0, added)
    try:
        if tuner.get("className"):
            module, _, name = tuner["className"].rpartition(".")
            built = getattr(importlib.import_module(module), name)(**(tuner.get("classArgs") or {}))
        else:
            from nni.tools.package_utils.tuner_factory import create_builtin_class_instance

            built = create_builtin_class_instance(tuner.get("name"), tuner.get("classArgs") or {}, "tuners")
        built.update_search_space(space)
    except Exception as e:
        raise SystemExit(f"{config}: the tuner refuses this experiment: {type(e).__name__}: {e}") \
            from None
    finally:
        if added:
            sys.path.remove(added)


def errors(folder: str) -> list[str]:
    """What NNI's logs say about an experiment that ended in ERROR: the tuner's report to the
    manager (NNI's check-status only says 'Dispatcher stream error') and errors of the dispatcher."""
    found = []
    for name, marker in (("nnimanager.log", "Dispatcher error:"), ("dispatcher.log", "ERROR")):
        path = os.path.join(folder, "log", name)
        if os.path.exists(path):
            with open(path, errors="replace") as handle:
                found += [line.strip() for line in handle if marker in line][-5:]
    return found


def refuse_a_busy_port(port: int) -> None:
    """NNI's own test of the web UI's port (a connection to it), made before anything is built or
    written: a port in use is then one line at once, not nnictl's traceback after the first trial."""
    with socket.socket() as probe:
        if probe.connect_ex(("localhost", port)) == 0:
            raise SystemExit(f"--port {port}: in use on this machine (another experiment's web UI?); give a free one")


def follow(client: ExperimentClient, every: float) -> dict:
    """Print progress until the experiment ends."""
    while True:
        status = client.status()
        results = client.results()
        counts = Counter(r.get("status", "?") if isinstance(r, dict) else "?" for r in results.values())
        best = max((r.get("default", 0) for r in results.values() if isinstance(r, dict)), default=0.0)
        print(f"{time.strftime('%H:%M:%S')} {status['status']:<20} {len(results):>4} trials reported, best "
              f"{best:.4f} TFLOPS  ({', '.join(f'{k} {v}' for k, v in counts.most_common())})", flush=True)
        if client.ended(status):
            return status
        time.sleep(every)


def run(config: str, port: int, every: float) -> tuple[str, dict]:
    """Start the experiment and follow it to its end: (its id, its final check-status). One
    whose web server missed nnictl's deadline is created again (``create``); one whose tuner
    missed NNI's deadline to connect (``MISSED_CONNECT``) is stopped and started again, up to
    ``STARTS`` times in all, with a line saying so."""
    shown = os.path.relpath(config) if config.startswith(os.getcwd() + os.sep) else config
    attempt = 1
    while True:
        try:
            experiment_id = create(config, port, say=lambda line: print(line, flush=True))
        except CreateFailed as failed:
            raise SystemExit(f"nnictl create failed: {failed}") from None
        print(f"experiment {experiment_id} ({shown}): watch it at http://127.0.0.1:{port}")
        if attempt == 1:
            print(EXPOSED.format(port=port))
        status = follow(ExperimentClient(port), every)
        missed = status["status"] == "ERROR" and MISSED_CONNECT in str(status.get("errors"))
        if not missed or attempt == STARTS:
            return experiment_id, status
        subprocess.run([*NNICTL, "stop", experiment_id], capture_output=True, text=True, timeout=120)
        attempt += 1
        print(f"NNI gave the tuner 10 s to connect and it did not (a loaded machine): experiment {experiment_id} "
              f"stopped before its first trial; starting it again ({attempt} of {STARTS})", flush=True)


def stop_command(experiment_id: str) -> str:
    """``nnictl stop <id>``, with nnictl's full path where the one on PATH is not this environment's
    (a virtual environment not activated): a command the user can paste."""
    here = os.path.join(os.path.dirname(sys.executable), "nnictl")
    found = shutil.which("nnictl")
    use_path = found is not None and os.path.realpath(found) == os.path.realpath(here)
    return f"{'nnictl' if use_path or not os.path.exists(here) else here} stop {experiment_id}"


def experiment_folder(config: str, experiment_id: str) -> str:
    with open(config) as handle:
        working = (yaml.safe_load(handle) or {}).get("experimentWorkingDirectory") or "~/nni-experiments"
    if not os.path.isabs(os.path.expanduser(working)):
        working = os.path.join(os.path.dirname(config), working)
    return os.path.join(os.path.expanduser(working), experiment_id)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--config", default=None, help="an experiment YAML (default: by whether a GPU is visible)")
    parser.add_argument("--workload", help=f"instead of --config: a named workload ({', '.join(workloads.NAMED)})")
    parser.add_argument("--operator", metavar="MODULE:NAME",
                        help="instead of --config: your own operator, a function returning a "
                             "trial_code.operators.Operator in a module importable here (docs/your-operator.md)")
    parser.add_argument("--shape", nargs="+", metavar="KEY=VALUE", default=[],
                        help="with --operator: its keyword arguments, e.g. channels=64 height=56")
    parser.add_argument("--name", help="with --operator: the workload's name (default: from the function and shape)")
    parser.add_argument("--tuner", default=make_spaces.SHIPPED_TUNER,
                        help="with --workload: a catalog tuner, e.g. gbfs or opevo:mutate_rate=0.3")
    parser.add_argument("--target", default="auto", help="with --workload: auto, cpu or cuda")
    add_number(parser, "--trials", int, 1, MAX_TRIALS, "with --workload or --operator: maxTrialNumber (default: 512 "
               "GPU, 256 CPU)")
    parser.add_argument("--root", default=None,
                        help="where generated spaces and configs go (default: the current folder)")
    add_number(parser, "--port", int, 1, 65535, "the web UI's port", default=8080)
    add_number(parser, "--every", float, 0.1, 3600, "seconds between progress lines", default=10.0)
    export.add_remeasure_options(parser)  # the winner's re-measurement at the end
    args = parser.parse_args(argv)
    if sum(x is not None for x in (args.config, args.workload, args.operator)) > 1:
        parser.error("give one of --config, --workload and --operator")
    if (args.shape or args.name) and args.operator is None:
        parser.error("--shape and --name go with --operator")
    if args.config and (args.trials is not None or args.root is not None or args.target != "auto"):
        parser.error("--trials, --root and --target go with --workload or --operator (or the default experiment), "
                     "not --config")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    refuse_a_busy_port(args.port)
    if args.workload is not None or args.operator is not None:  # an empty name is a mistake, not the default
        try:
            workload = workload_from(argparse.Namespace(workload=args.workload, operator=args.operator, family=None,
                                                        shape=args.shape, name=args.name, network=None))
            if workload.family == "operator":
                first_trial(workload, args.target)
            config = generated_config(workload, args.tuner, args.target, args.root, args.trials)
        except ValueError as e:
            raise SystemExit(f"cannot generate the experiment: {e}") from None
    elif args.config:
        config = os.path.abspath(args.config)
    else:
        config = default_config(args.root)
    validate(config)
    experiment_id, status = run(config, args.port, args.every)
    folder = experiment_folder(config, experiment_id)
    if status["status"] == "ERROR":
        detail = "\n  ".join(errors(folder)) or "(nothing in NNI's logs)"
        raise SystemExit(f"the experiment ended in ERROR: {status.get('errors')}\n  {detail}\n"
                         f"logs: {folder}/log; `{stop_command(experiment_id)}` closes the web UI")
    print(f"re-measuring the top {args.top_k} configurations:", flush=True)
    try:
        best = export.export(folder, export.Options(args.top_k, args.repeat, args.min_repeat_ms))
    except (ValueError, OSError, FolderBusy) as e:
        raise SystemExit(f"the experiment ended, but its best kernel could not be exported: {e}") from None
    print(best.headline())
    if isinstance(best, export.NetworkBest):
        print(best.table(), end="")
        print(f"saved to {folder}/export/network.json with each layer's kernel source; the web UI stays up "
              f"until `{stop_command(experiment_id)}`")
        return
    print(f"parameters: {json.dumps(best.parameters)}")
    print(f"saved to {folder}/export/best.json with the kernel's source ({best.source}) and library (best.so, "
          f"for nni_opevo_tools.best.load_kernel); the web UI stays up "
          f"until `{stop_command(experiment_id)}`")


if __name__ == "__main__":
    main()
