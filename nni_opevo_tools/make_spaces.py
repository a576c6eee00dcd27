"""Write search spaces and ready-to-run NNI experiments from the templates.

    python -m nni_opevo_tools.make_spaces                              # what the checkout ships (below)
    python -m nni_opevo_tools.make_spaces --workload MM1 --tuner nose  # + experiments/MM1/nose.yml, nose-cpu.yml
    python -m nni_opevo_tools.make_spaces --family matmul --shape n=256 m=768 k=3072 --name BERT_FFN

The checkout ships what users read and copy, and only that: for every named workload
``search_spaces/<name>.cuda.json`` and ``<name>.cpu.json``, and ``experiments/<name>/opevo.yml``
(CUDA: trialConcurrency 8, maxTrialNumber 512, as in the paper) and ``opevo-cpu.yml``; the CPU
quickstart ``experiments/quickstart/opevo.yml``; OpEvo on MM1 scaled out to
``experiments/scale-out/multi-gpu.yml`` (four GPUs of one machine) and ``remote.yml`` (GPUs of
other machines over SSH; fill in the hosts). Every experiment's tuner gets the trial code's
static check as its constraint (``trial_code.constraint``). An experiment with any other tuner
of the catalog
(``nni_opevo.catalog``: the peers with their papers' settings) is written on demand with
``--tuner``, or run at once with ``nni-opevo launch --workload W --tuner T``.
Run ``nnictl create --config experiments/<name>/<tuner>.yml`` from the repository root.
Elsewhere (an installed package, ``--root`` another folder; by default the current folder) the
same layout is written there, and its configs name the files by absolute path and run the
installed trial code with the interpreter that wrote them.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from typing import Any

import yaml

from nni_opevo import catalog
from trial_code import cli, constraint, networks, operators, workloads
from trial_code.cli import add_workload_options, workload_from
from trial_code.templates import for_workload
from trial_code.workloads import Workload

SHIPPED_TUNER = "opevo"
QUICKSTART = "MM_small"
PER_GPU = 8
"""Trials in flight per GPU, as in the paper: they build in parallel and take turns measuring."""
KINDS = {"cuda": ("", 512, 8), "cpu": ("-cpu", 256, 2)}
"""Target kind -> (file suffix, maxTrialNumber, trialConcurrency)."""
NETWORK_TRIALS = {"cuda": 64, "cpu": 32}
"""Trials per layer of a network experiment (its maxTrialNumber is this times its layers)."""


def checkout() -> str | None:
    """The source checkout this package runs from (it holds setup.py and experiments/), or None
    for an installed package."""
    parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = os.path.isfile(os.path.join(parent, "setup.py")) and os.path.isdir(os.path.join(parent, "experiments"))
    return parent if found else None


class Layout:
    """Where spaces and experiments go: the checkout (relative paths in the configs, as NNI
    resolves them from the config's folder, and the checkout's trial code run with ``python3``),
    or any other folder (absolute paths, the installed trial code run with this interpreter)."""

    def __init__(self, root: str | None = None) -> None:
        self.root = os.path.abspath(root or os.getcwd())
        self.in_checkout = self.root == checkout()

    @property
    def python(self) -> str:
        """The trials' interpreter: ``python3`` in the checkout (its experiments are shipped and
        run from a set-up environment), else this one, which has the package installed."""
        return "python3" if self.in_checkout else shlex.quote(sys.executable)

    @property
    def code(self) -> str:
        """The folder NNI starts trials and the tuner in: the root (a checkout's holds the
        packages, installed or not)."""
        return self.root

    def space(self, workload: Workload | str, kind: str) -> str:
        """A workload's search space, or a network's (by its name)."""
        name = workload if isinstance(workload, str) else workload.name
        return os.path.join(self.root, "search_spaces", f"{name}.{kind}.json")

    def experiment(self, folder: str, name: str) -> str:
        return os.path.join(self.root, "experiments", folder, name)

    def from_config(self, config_path: str, target: str) -> str:
        """``target`` as the config at ``config_path`` names it."""
        if self.in_checkout:
            return os.path.relpath(target, os.path.dirname(config_path))
        return target


def experiment(layout: Layout, config_path: str, workload: Workload, kind: str, trials: int, concurrency: int,
               trial_flags: str = "", tuner: str = SHIPPED_TUNER) -> dict[str, Any]:
    """An NNI 3.0 experiment config to be written at ``config_path``."""
    quote = shlex.quote  # NNI runs the trial command through a shell
    arguments = {k: v for k, v in workload.shape.items() if k != "operator"}
    shape = (" --shape " + " ".join(quote(f"{k}={v}") for k, v in arguments.items())) if arguments else ""
    if workloads.NAMED.get(workload.name) == workload:
        shape_flags = f"--workload {quote(workload.name)}"
    elif workload.family == "operator":
        shape_flags = f"--operator {quote(workload.shape['operator'])} --name {quote(workload.name)}{shape}"
    else:
        shape_flags = f"--family {quote(workload.family)} --name {quote(workload.name)}{shape}"
    code = layout.from_config(config_path, layout.code)
    config: dict[str, Any] = {
        "experimentName": f"{workload.name} {catalog.CATALOG[catalog.parse(tuner)[0]].description} ({kind})",
        "searchSpaceFile": layout.from_config(config_path, layout.space(workload, kind)),
        "trialCommand": f"{layout.python} -m trial_code.trial {shape_flags} --target {kind}{trial_flags}",
        "trialCodeDirectory": code,
        "trialConcurrency": concurrency,
        "maxTrialNumber": trials,
        "tuner": tuner_config(tuner, code, constraint.class_args(workload, kind)),
        "trainingService": {"platform": "local"},
    }
    if kind == "cuda":
        # NNI sets CUDA_VISIBLE_DEVICES per trial; concurrent trials share the GPU (builds run in
        # parallel, measurements take turns through the per-device lock).
        config["trialGpuNumber"] = 1
        config["trainingService"] = {"platform": "local", "useActiveGpu": True,
                                     "maxTrialNumberPerGpu": min(concurrency, PER_GPU)}
    return config


def tuner_config(spec: str, code_directory: str, constraint_args: dict[str, Any]) -> dict[str, Any]:
    """The tuner section: the catalog's classArgs plus the static-feasibility constraint, so
    no trial is spent on a configuration that breaks the target's limits."""
    class_name, class_args = catalog.class_args(spec, extra=constraint_args)
    # className tuners need a codeDirectory in NNI 3.0; the checkout's also finds an uninstalled nni_opevo.
    return {"className": f"nni_opevo.{class_name}", "codeDirectory": code_directory, "classArgs": class_args}


def write_yaml(layout: Layout, path: str, config: dict[str, Any], comment: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    where = "run from the repository root" if layout.in_checkout else "run"
    shown = os.path.relpath(path, layout.root) if layout.in_checkout else path
    with open(path, "w") as handle:
        handle.write(f"# {comment}\n# Generated by `nni-opevo spaces`; {where}:\n#   nnictl create --config {shown}\n")
        yaml.safe_dump(config, handle, sort_keys=False, width=1000)


def write_space(path: str, space: dict[str, Any]) -> str:
    """One parameter per line (a network's layers one per line), so the files diff well."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if list(space) == [networks.KEY]:
        options = ",\n".join(f"    {json.dumps(option)}" for option in space[networks.KEY]["_value"])
        text = f'{{\n  "{networks.KEY}": {{"_type": "choice", "_value": [\n{options}\n  ]}}\n}}\n'
    else:
        text = "{\n" + ",\n".join(f"  {json.dumps(name)}: {json.dumps(spec)}" for name, spec in space.items()) + "\n}\n"
    with open(path, "w") as handle:
        handle.write(text)
    return path


def write_spaces(layout: Layout, workload: Workload) -> list[str]:
    """A workload's search spaces; ValueError where it is a user's operator whose module the
    experiment's trials, started in the layout's folder, would not import."""
    if workload.family == "operator":
        operators.check_reachable(workload.shape["operator"], layout.code)
    template = for_workload(workload)
    return [write_space(layout.space(workload, kind), template.space(workload, kind)) for kind in KINDS]


def network_tuner_config(spec: str, code_directory: str, network: str, kind: str, allocator: str) -> dict[str, Any]:
    """The network tuner running the catalog tuner ``spec`` on every layer, with the static check."""
    weights = {layer.name: layer.count for layer in networks.lookup(network)}
    args = catalog.network_class_args(f"{spec}{catalog.ALLOCATOR_MARK}{allocator}", weights, extra={
        "constraint": "trial_code.constraint:feasible", "constraint_args": {"network": network, "target": kind}})
    return {"className": f"nni_opevo.{catalog.network_class_name()}", "codeDirectory": code_directory, "classArgs": args}


def write_network(layout: Layout, network: str, tuner: str, allocator: str = "gradient") -> list[str]:
    """``search_spaces/<network>.<kind>.json`` and ``experiments/<network>/<tuner>[-cpu].yml``:
    every layer in one experiment, the trials shared out by the network tuner."""
    layers = networks.lookup(network)
    for layer in layers:
        if layer.workload.family == "operator":
            operators.check_reachable(layer.workload.shape["operator"], layout.code)
    label = network
    if network not in networks.NETWORKS:  # a JSON file: named by its stem, given to trials by its full path
        label, network = os.path.splitext(os.path.basename(network))[0], os.path.abspath(network)
        workloads.check_name("network", label)
    name, _ = catalog.parse(tuner)
    stem = workloads.check_name("tuner", tuner.replace(":", "_").replace(",", "_").replace("=", "-")) + \
        ("" if allocator == "gradient" else f"-{allocator}")
    written = []
    for kind, (suffix, _, concurrency) in KINDS.items():
        space_path = write_space(layout.space(label, kind), networks.space(network, kind))
        path = layout.experiment(label, f"{stem}{suffix}.yml")
        code = layout.from_config(path, layout.code)
        config: dict[str, Any] = {
            "experimentName": f"{label} ({len(layers)} layers) {catalog.CATALOG[name].description}, {allocator} ({kind})",
            "searchSpaceFile": layout.from_config(path, space_path),
            "trialCommand": f"{layout.python} -m trial_code.trial --network {shlex.quote(network)} --target {kind}",
            "trialCodeDirectory": code,
            "trialConcurrency": concurrency,
            "maxTrialNumber": NETWORK_TRIALS[kind] * len(layers),
            "tuner": network_tuner_config(tuner, code, network, kind, allocator),
            "trainingService": {"platform": "local"},
        }
        if kind == "cuda":
            config["trialGpuNumber"] = 1
            config["trainingService"] = {"platform": "local", "useActiveGpu": True,
                                         "maxTrialNumberPerGpu": min(concurrency, PER_GPU)}
        where = "on the GPU" if kind == "cuda" else "on the CPU (LLVM)"
        write_yaml(layout, path, config, f"Every layer of {label} tuned {where} under one budget "
                   f"({NETWORK_TRIALS[kind]} trials per layer), {allocator} allocation (docs/networks.md).")
        written += [space_path, path]
    return written


def write_experiments(layout: Layout, workload: Workload, tuner: str, kinds: tuple[str, ...] = tuple(KINDS),
                      trials: int | None = None) -> list[str]:
    """``experiments/<workload>/<tuner>.yml`` (CUDA) and ``<tuner>-cpu.yml``; ``trials``
    overrides the maxTrialNumber of ``KINDS``."""
    name, _ = catalog.parse(tuner)
    description = catalog.CATALOG[name].description + (" (needs the xgboost extra)" if name == "autotvm" else "")
    stem = workloads.check_name("tuner", tuner.replace(":", "_").replace(",", "_").replace("=", "-"))
    written = []
    for kind in kinds:
        suffix, default_trials, concurrency = KINDS[kind]
        path = layout.experiment(workload.name, f"{stem}{suffix}.yml")
        where = ("on the GPU, as in the OpEvo paper (512 trials, 8 at a time)" if kind == "cuda"
                 else "on the CPU (LLVM), 2 trials at a time")
        config = experiment(layout, path, workload, kind, trials or default_trials, concurrency, tuner=tuner)
        write_yaml(layout, path, config, f"{description} on {workload.name} {where}.")
        written.append(path)
    return written


def write_quickstart(layout: Layout) -> str:
    path = layout.experiment("quickstart", "opevo.yml")
    config = experiment(layout, path, workloads.NAMED[QUICKSTART], "cpu", 48, 2, " --min-repeat-ms 20")
    config["experimentName"] = "quickstart: OpEvo on a 256^3 MatMul on the CPU"
    write_yaml(layout, path, config, "A few minutes on a 2-core machine: 48 CPU MatMul kernels tuned by OpEvo.")
    return path


def write_scale_out(layout: Layout) -> list[str]:
    """OpEvo on MM1 over several GPUs. The trial code is the same: NNI gives each trial one GPU
    through CUDA_VISIBLE_DEVICES, the measurement lock is per GPU (and per machine), so each GPU
    times one kernel at a time while up to PER_GPU trials build for it."""
    workload = workloads.NAMED["MM1"]
    gpus = [0, 1, 2, 3]
    paths = [layout.experiment("scale-out", "multi-gpu.yml"), layout.experiment("scale-out", "remote.yml")]
    local = experiment(layout, paths[0], workload, "cuda", 512, PER_GPU * len(gpus))
    local["experimentName"] = "MM1 OpEvo on 4 GPUs of one machine"
    local["trainingService"]["gpuIndices"] = gpus
    hosts, bin_dir = ["gpu-node-1.example", "gpu-node-2.example"], "/opt/nni-opevo/.venv/bin"
    remote = experiment(layout, paths[1], workload, "cuda", 512, PER_GPU * len(hosts))
    remote["experimentName"] = "MM1 OpEvo on the GPUs of 2 machines over SSH"
    # The interpreter by absolute path: NNI puts pythonPath first on PATH, but the shell that
    # runs each trial reads ~/.bashrc over SSH, and a pyenv or conda init there shadows it.
    remote["trialCommand"] = f"{bin_dir}/python" + remote["trialCommand"][len(layout.python):]
    remote["trainingService"] = {"platform": "remote", "machineList": [
        {"host": host, "user": "tuner", "sshKeyFile": "~/.ssh/id_ed25519", "pythonPath": bin_dir,
         "useActiveGpu": True, "maxTrialNumberPerGpu": PER_GPU, "gpuIndices": [0]} for host in hosts]}
    write_yaml(layout, paths[0], local,
               f"OpEvo on MM1 on GPUs {gpus} of this machine, {PER_GPU} trials per GPU (docs/scaling.md).")
    write_yaml(layout, paths[1], remote, "OpEvo on MM1 on one GPU of each of two machines over SSH: set host, user, "
               "sshKeyFile, pythonPath (docs/scaling.md).")
    return paths


def shipped(layout: Layout) -> list[str]:
    """Every file the checkout ships (see the module docstring)."""
    written = []
    for workload in workloads.NAMED.values():
        written += write_spaces(layout, workload) + write_experiments(layout, workload, SHIPPED_TUNER)
    for network in networks.NETWORKS:
        written += write_network(layout, network, SHIPPED_TUNER)
    return written + [write_quickstart(layout), *write_scale_out(layout)]


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=cli.description(__doc__))
    add_workload_options(parser)
    parser.add_argument("--tuner", nargs="+", default=[],
                        help=f"catalog tuners to write experiments for (default {SHIPPED_TUNER}): "
                             f"{', '.join(catalog.CATALOG)}, optionally with overrides (name:key=value,...)")
    parser.add_argument("--allocator", default="gradient", choices=("gradient", "round-robin"),
                        help="with --network: which layer gets the next trial (default %(default)s)")
    parser.add_argument("--root", default=None, help="write under this folder (default: the current folder)")
    args = parser.parse_args(argv)
    for spec in args.tuner:
        try:
            catalog.class_args(spec)
        except ValueError as e:
            parser.error(f"--tuner {spec}: {e}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    layout = Layout(args.root)
    if args.network:
        written = []
        for tuner in args.tuner or [SHIPPED_TUNER]:
            written += write_network(layout, args.network, tuner, args.allocator)
    elif args.workload is not None or args.family or args.operator:
        workload = workload_from(args)
        written = write_spaces(layout, workload)
        for tuner in args.tuner or [SHIPPED_TUNER]:
            written += write_experiments(layout, workload, tuner)
    elif args.tuner:
        raise SystemExit("--tuner needs --workload (or --family with --shape)")
    else:
        written = shipped(layout)
    for path in written:
        print(os.path.relpath(path, layout.root))


if __name__ == "__main__":
    main()
