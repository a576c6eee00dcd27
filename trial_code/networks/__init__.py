"""Networks as the operators they run: each tunable layer's workload and how many times the
network runs it (OpEvo paper section 5.4; Ansor and MetaSchedule tune a model the same way).

Named networks: ``alexnet`` and ``resnet18``. Any other network is a JSON file, named by its
path wherever a network name goes::

    {"layers": [{"name": "qkv", "count": 12, "workload": {"family": "matmul", "shape": {"n": 128, "k": 768, "m": 2304}}},
                {"name": "ffn1", "count": 12, "workload": {"family": "matmul", "shape": {"n": 128, "k": 768, "m": 3072}}}]}

Inference at batch 1. Only the layers a template covers are listed (convolutions and dense
layers, a dense layer being a MatMul of one row); ReLU, pooling and the like are cheap next to
them and are not tuned. A network's end-to-end latency as this project reports it is the sum
over these layers of count x the layer's latency, no more: see ``docs/networks.md``.
"""
from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from typing import Any

from ..workloads import NAMED, Workload, check_name, make

KEY = "layer"
"""The search-space parameter whose options are a network's layers (``nni_opevo.network.tuner``)."""


@dataclass(frozen=True)
class Layer:
    name: str
    workload: Workload
    count: int


def _conv(network: str, name: str, hw: int, ic: int, oc: int, k: int, s: int, p: int) -> Workload:
    return make("conv2d", name=f"{network}.{name}", batch=1, in_channels=ic, height=hw, width=hw, out_channels=oc,
                kernel_h=k, kernel_w=k, stride=s, padding=p)


def _dense(network: str, name: str, k: int, m: int) -> Workload:
    return make("matmul", name=f"{network}.{name}", n=1, k=k, m=m)


def _alexnet() -> list[Layer]:
    # torchvision's AlexNet on a 224 x 224 image: conv1 -> 55, pool -> 27, conv2, pool -> 13,
    # conv3-5, pool -> 6; classifier 9216 -> 4096 -> 4096 -> 1000.
    n = "alexnet"
    return [Layer("conv1", _conv(n, "conv1", 224, 3, 64, 11, 4, 2), 1),
            Layer("conv2", _conv(n, "conv2", 27, 64, 192, 5, 1, 2), 1),
            Layer("conv3", _conv(n, "conv3", 13, 192, 384, 3, 1, 1), 1),
            Layer("conv4", _conv(n, "conv4", 13, 384, 256, 3, 1, 1), 1),
            Layer("conv5", _conv(n, "conv5", 13, 256, 256, 3, 1, 1), 1),
            Layer("fc6", _dense(n, "fc6", 9216, 4096), 1),
            Layer("fc7", _dense(n, "fc7", 4096, 4096), 1),
            Layer("fc8", _dense(n, "fc8", 4096, 1000), 1)]


def _resnet18() -> list[Layer]:
    # ResNet-18's convolutions are AutoTVM's R1-R12 but R3 (a 1x1 64 -> 64 it does not have);
    # the counts are how often each shape occurs in its four stages, then the classifier.
    counts = {"R1": 1, "R2": 4, "R4": 1, "R5": 1, "R6": 3, "R7": 1, "R8": 1, "R9": 3, "R10": 1, "R11": 1, "R12": 3}
    layers = [Layer(name, NAMED[name], count) for name, count in counts.items()]
    return layers + [Layer("fc", _dense("resnet18", "fc", 512, 1000), 1)]


NETWORKS: dict[str, list[Layer]] = {"alexnet": _alexnet(), "resnet18": _resnet18()}
MAX_LAYERS = 1000


def lookup(name: str) -> list[Layer]:
    """A named network, or the network of a JSON file (see the module docstring)."""
    if name in NETWORKS:
        return NETWORKS[name]
    if name.endswith(".json") or os.sep in name:
        return _from_file(os.path.abspath(name))
    from nni_opevo.suggest import unknown  # here: the package costs a second to import, a trial's worker never needs it

    raise ValueError(unknown("network", name, NETWORKS) + ", or a JSON file of layers")


@functools.cache
def _from_file(path: str) -> list[Layer]:
    def bad(rule: str) -> ValueError:
        return ValueError(f"network file {path}: {rule}")

    try:
        with open(path) as handle:
            data = json.load(handle)
    except (OSError, json.JSONDecodeError) as e:
        raise bad(f"cannot be read as JSON ({e})") from None
    entries = data.get("layers") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not 1 <= len(entries) <= MAX_LAYERS:
        raise bad(f"must be an object whose 'layers' is a list of 1 to {MAX_LAYERS} layers")
    stem = os.path.splitext(os.path.basename(path))[0]
    layers: list[Layer] = []
    for i, entry in enumerate(entries):
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name or name in {x.name for x in layers}:
            raise bad(f"layer {i} needs a 'name' of its own (a non-empty string, not used before), got {name!r}")
        try:  # it names the layer's folder of an export and words of the trial command
            check_name("layer", name)
        except ValueError as e:
            raise bad(str(e)) from None
        count = entry.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise bad(f"layer {name!r}: 'count' must be an integer >= 1, got {count!r}")
        spec = entry.get("workload")
        if not isinstance(spec, dict) or not isinstance(spec.get("shape"), dict):
            raise bad(f"layer {name!r}: 'workload' must be {{'family': ..., 'shape': {{...}}}}, got {spec!r}")
        try:
            workload = make(spec.get("family", ""), name=f"{stem}.{name}", **spec["shape"])
        except (TypeError, ValueError) as e:
            raise bad(f"layer {name!r}: {e}") from None
        layers.append(Layer(name, workload, count))
    return layers


def layer(network: str, name: str) -> Layer:
    """The layer ``name`` of ``network``; ValueError naming both when there is none."""
    for found in lookup(network):
        if found.name == name:
            return found
    raise ValueError(f"network {network} has no layer {name!r}; its layers: "
                     f"{', '.join(x.name for x in lookup(network))}")


def split(params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(layer name, its parameters) of a network trial's ``{KEY: {"_name": layer, ...}}``."""
    chosen = params.get(KEY) if isinstance(params, dict) else None
    if not isinstance(chosen, dict) or not isinstance(chosen.get("_name"), str):
        raise ValueError(f"a network trial's parameters are {{'{KEY}': {{'_name': <layer>, ...}}}}, got {params!r}")
    return chosen["_name"], {k: v for k, v in chosen.items() if k != "_name"}


def space(network: str, target_kind: str) -> dict[str, Any]:
    """The network's search space: one choice of its layers, each with its template's space."""
    from ..templates import for_workload

    return {KEY: {"_type": "choice", "_value": [
        {"_name": x.name, **for_workload(x.workload).space(x.workload, target_kind)} for x in lookup(network)]}}
