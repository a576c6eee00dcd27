"""A network experiment's result: each layer's best kernel re-measured, and the network's
latency as the sum over its layers of count x that latency.

For every layer of the network (``networks``), the experiment's top-k configurations of that
layer are rebuilt and re-measured like a single workload's (``remeasure``); a layer
with no working kernel (untried, or every trial failed) is measured at TVM's default schedule
(``kernel.scheduled`` with no parameters), which is what it would run untuned. The network's
latency is then exactly sum_i count_i x latency_i, nothing more: no fusion between layers, no
layout changes between them, no layers no template covers (activations, pooling). Written to
``--out``: ``network.json`` (schema ``nni-opevo/network/1``), ``network.md`` (the table), and
per layer ``<layer>/best.<cu|ll>`` and ``<layer>/kernels/``. A named network is then also built
as one TVM program with these kernels and timed (``network_graph``: ``whole_network_ms``),
which shows what the sum leaves out, and written as ``network.so`` for a program to run
(``load_network``).

Where the experiment ran on a GPU that this machine lacks, nothing is re-measured: each
layer's latency is its best trial's reported one, and an untried layer has none (the sum is
then missing too).
"""
from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from trial_code import networks, targets
from trial_code.evaluate import Limits, evaluate
from trial_code.files import copy_file
from trial_code.status import Status

from .best import device_of, is_file_name, read_export
from .experiment_client import ExperimentDatabase, Trial
from .remeasure import best_of, remeasure

SCHEMA = "nni-opevo/network/1"


@dataclass(frozen=True)
class LayerBest:
    name: str
    count: int
    workload: dict[str, Any]
    schedule: str
    """"tuned" (the experiment's best configuration), "default" (TVM's default schedule), or
    "none" (nothing could be built or measured here)."""
    parameter_id: int | None
    parameters: dict[str, Any] | None
    latency_ms: float | None
    tflops: float | None
    remeasured: bool
    trials: int
    """The experiment's trials of this layer (reported, failures included)."""


@dataclass(frozen=True)
class NetworkBest:
    experiment: str
    network: str
    target: dict[str, Any]
    layers: list[LayerBest]
    whole_network_ms: float | None = None
    """The network built as one program with these kernels and timed (``network_graph``); None
    where it has no graph, was not measured here, or could not be built (``whole_network_error``)."""
    whole_network_error: str = ""
    library: str | None = None
    """The file (next to network.json) holding the whole network built with these kernels
    (``trial_code.library.load_network``), where it could be built."""
    arguments: list[dict[str, Any]] | None = None
    """The tensors its ``main`` takes, then the one it returns (``graph.arguments``), with the library:
    what a program in another language needs to call it (``examples/cpp/call_kernel.cc``)."""
    instructions: list[str] | None = None
    """The /proc/cpuinfo flags a CPU must report to run the library, as best.json's."""

    @property
    def latency_ms(self) -> float | None:
        """sum over layers of count x latency; None while a layer has none."""
        if any(layer.latency_ms is None for layer in self.layers):
            return None
        return sum(layer.count * layer.latency_ms for layer in self.layers)  # type: ignore[operator]

    def headline(self) -> str:
        tuned = sum(layer.schedule == "tuned" for layer in self.layers)
        total = self.latency_ms
        shown = f"{total:.4f} ms" if total is not None else "unknown (a layer has no latency)"
        measured = "re-measured" if all(layer.remeasured for layer in self.layers) else "as reported"
        line = (f"{self.network}: {shown} end to end, {measured}: the sum over its {len(self.layers)} layers of count x "
                f"latency ({tuned} tuned, {len(self.layers) - tuned} at TVM's default schedule)")
        if self.whole_network_ms is not None:
            line += (f"; the whole network built with these kernels as one TVM program (bias, ReLU and pooling by "
                     f"TVM): {self.whole_network_ms:.4f} ms")
        elif self.whole_network_error:
            line += f"; the whole network could not be built and timed: {self.whole_network_error}"
        return line

    def table(self) -> str:
        total = self.latency_ms
        lines = ["| layer | count | schedule | trials | latency ms | count x latency ms | share | GFLOPS |",
                 "|---|---:|---|---:|---:|---:|---:|---:|"]
        for layer in self.layers:
            part = layer.count * layer.latency_ms if layer.latency_ms is not None else None
            share = f"{part / total:.0%}" if part is not None and total else "-"
            gflops = f"{layer.tflops * 1e3:.1f}" if layer.tflops else "-"
            lines.append(f"| {layer.name} | {layer.count} | {layer.schedule} | {layer.trials} | {_ms(layer.latency_ms)} "
                         f"| {_ms(part)} | {share} | {gflops} |")
        lines.append(f"| **network** | | | {sum(x.trials for x in self.layers)} | | **{_ms(total)}** | | |")
        return "\n".join(lines) + "\n"

    def write(self, folder: str) -> str:
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, "network.json")
        with open(path, "w") as handle:
            json.dump({"schema": SCHEMA, **asdict(self), "latency_ms": self.latency_ms}, handle, indent=2)
            handle.write("\n")
        with open(os.path.join(folder, "network.md"), "w") as handle:
            handle.write(f"{self.headline()}\n\n{self.table()}")
        return path


def load_network(folder: str) -> Callable[..., Any]:
    """The exported network of ``folder`` (where ``export`` wrote network.json and network.so),
    on the device it was built for and checked against this machine, ready to call on the image
    and then every weight and bias (``trial_code.library.load_network``)."""
    from trial_code import library

    path = os.path.join(os.path.expanduser(folder), "network.json")
    try:
        data = read_export(path, SCHEMA)
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror or e}") from None
    name = data.get("library")
    if not is_file_name(name):
        raise ValueError(f"{path}: field 'library' must name a file next to network.json, got {name!r} (the whole "
                         "network could not be built where it was exported)")
    try:
        device, built_for = device_of(data["target"])
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{path}: its target cannot be read ({type(e).__name__}: {e})") from None
    return library.load_network(os.path.join(os.path.dirname(path), name), device, built_for)


def _ms(value: float | None) -> str:
    return f"{value:.4f}" if value is not None else "-"


def export(folder: str, database: ExperimentDatabase, trial_args: argparse.Namespace, top_k: int, limits: Limits,
           out: str) -> NetworkBest:
    """Re-measure every layer's best (see the module docstring) and write the result to ``out``."""

    network = trial_args.network
    target = targets.resolve(trial_args.target)
    measured = target.kind != "cuda" or target.has_device
    by_layer: dict[str, list[Trial]] = {}
    for trial in database.ranked():
        try:
            name, inner = networks.split(trial.parameters)
        except ValueError:
            continue  # a customized trial of another shape: not a layer's
        by_layer.setdefault(name, []).append(trial._replace(parameters=inner))
    extension = "cu" if target.kind == "cuda" else "ll"
    built_for = ""
    layers = []
    for layer in networks.lookup(network):
        trials = by_layer.get(layer.name, [])
        working = [t for t in trials if t.value > 0]
        where = os.path.join(out, layer.name)
        print(f"{layer.name} (x{layer.count}): {len(trials)} trials, {len(working)} working", flush=True)
        found = None
        if working:
            rows = remeasure(working[:top_k], layer.workload, target, limits, measured, os.path.join(where, "kernels"))
            if any(result.status is Status.NO_ERROR for _, result, _ in rows):
                found = best_of(rows, measured)
        if found is not None:
            trial, result, source = found
            copy_file(source, os.path.join(where, f"best.{extension}"))
            built_for = built_for or result.arch
            reported = trial.result.get("latency_ms") if isinstance(trial.result, dict) else None
            latency = result.latency_ms if measured else reported
            layers.append(LayerBest(layer.name, layer.count, layer.workload.to_json(), "tuned", trial.parameter_id,
                                    trial.parameters, latency, result.tflops if measured else trial.value, measured,
                                    len(trials)))
            continue
        os.makedirs(where, exist_ok=True)
        source = os.path.join(where, f"default.{extension}")
        result = evaluate(layer.workload, None, target, limits, build_only=not measured, source_path=source)
        ok = result.status is Status.NO_ERROR and measured
        print(f"  TVM's default schedule: {result.status.name}"
              + (f" {result.latency_ms:.4f} ms" if ok else f" {result.error}"), flush=True)
        layers.append(LayerBest(layer.name, layer.count, layer.workload.to_json(), "default" if ok else "none", None,
                                None, result.latency_ms if ok else None, result.tflops if ok else None, ok,
                                len(trials)))
    library = os.path.join(out, "network.so")
    whole, error = _whole_network(network, layers, target, limits, library) if measured else (None, "")
    if target.kind == "llvm" and built_for:
        target = targets.Target(**{**target.to_json(), "mcpu": built_for})
    from trial_code.library import instruction_flags  # TVM: only once there is a network to describe
    from trial_code.networks import graph as network_graph

    built = whole is not None
    best = NetworkBest(os.path.basename(os.path.normpath(folder)), network, target.to_json(), layers, whole, error,
                       "network.so" if built else None, network_graph.arguments(network) if built else None,
                       instruction_flags(target.to_json()) if built else None)
    best.write(out)
    return best


def _whole_network(network: str, layers: list[LayerBest], target: targets.Target, limits: Limits, library: str
                   ) -> tuple[float | None, str]:
    """The network with each layer's chosen kernel built as one program, timed and written to
    ``library`` (a named network only: ``network_graph``); (latency, "") or (None, why not)."""
    from trial_code.networks import graph as network_graph

    if not network_graph.has_graph(network):
        return None, ""
    print(f"{network}: building the whole network with these kernels", flush=True)
    try:
        params = {layer.name: layer.parameters for layer in layers if layer.schedule == "tuned"}
        found = network_graph.measure(network, network_graph.kernels(network, params, target), target, limits,
                                      library_path=library)
    except Exception as e:  # reported beside the sum, which stands on its own
        return None, network_graph.describe(e)
    return found.latency_ms, ""
