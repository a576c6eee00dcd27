"""A named network as one TVM program: its layers' kernels called from a Relax graph, built with
``tvm.compile`` and timed end to end, to compare with the sum over layers that tuning reports.

The graph is the network's inference at batch 1 with batch norm folded into a bias: every
tunable layer (``networks``) is a ``call_tir`` of the kernel we give it (a tuned configuration
or TVM's default schedule, ``kernel.scheduled``); the operators no template covers (bias,
ReLU, pooling, residual additions, flattening) are Relax's own, legalized by TVM's default
pipeline (on the CPU plain loop nests; on CUDA dlight's fallback binds them to threads). Our
kernels are marked opaque, so the pipeline never fuses or reschedules them.

The same graph with Relax's own operators in place of our kernels is the reference the result
is checked against (random weights and image, a relative tolerance), so a kernel that is right
alone but wired wrongly is caught. Only the named networks have a graph; a JSON network is a
list of layers without one, and its latency stays the sum.
"""
from __future__ import annotations

import functools
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import kernel, networks
from ..device_lock import exclusive
from ..evaluate import Limits
from ..files import replace_file
from ..measure import device_of
from ..targets import Target
from ..templates import for_workload

OPAQUE = 8
"""Relax's ``OpPatternKind::kOpaque``: FuseOps leaves a function with this pattern alone."""
RELATIVE_TOLERANCE = 1e-3
"""Of the output's largest magnitude; float32 sums in another order differ by far less."""


@dataclass(frozen=True)
class EndToEnd:
    latency_ms: float
    repeats_ms: tuple[float, ...]
    build_s: float
    max_error: float
    """Largest |output - reference| over the largest |reference|: below RELATIVE_TOLERANCE."""


class WrongNetwork(Exception):
    """The network built with our kernels computes something else than TVM's own operators."""


class Graph:
    """Builds one network's Relax function: ``layer`` calls a tunable layer, the rest are Relax ops.

    Weights are the function's parameters after the image (each call of a layer its own), so
    the random values are chosen at run time and nothing large is embedded in the program."""

    def __init__(self, network: str, kernels: dict[str, Any] | None) -> None:
        from tvm import relax

        self.relax = relax
        self.layers = {layer.name: layer for layer in networks.lookup(network)}
        self.kernels = kernels
        self.builder = relax.BlockBuilder()
        self.params: list[Any] = []
        self.calls: Counter[str] = Counter()
        self.functions: dict[str, Any] = {}

    def weight(self, shape: tuple[int, ...]) -> Any:
        var = self.relax.Var(f"w{len(self.params)}", self.relax.TensorType(list(shape), "float32"))
        self.params.append(var)
        return var

    def emit(self, expr: Any) -> Any:
        return self.builder.emit(expr)

    def layer(self, name: str, x: Any) -> Any:
        """The layer's kernel on ``x`` with fresh weights (our kernel, or Relax's op for the reference)."""
        op = self.relax.op
        workload = self.layers[name].workload
        tensors = for_workload(workload).compute(workload)
        wanted, given = [int(d) for d in tensors[0].shape], [int(d) for d in x.ty.shape]
        if given != wanted:  # the graph and the layer list must agree on every shape
            raise AssertionError(f"layer {name} takes {wanted}, the graph gives it {given}")
        weight = self.weight(tuple(int(d) for d in tensors[1].shape))
        self.calls[name] += 1
        if self.kernels is None:
            if workload.family == "conv2d":
                s = workload.shape
                return self.emit(op.nn.conv2d(x, weight, strides=s["stride"], padding=s["padding"]))
            return self.emit(op.matmul(x, weight))
        if name not in self.functions:
            func = self.kernels[name].with_attr("op_pattern", OPAQUE).without_attr("global_symbol")
            self.functions[name] = self.builder.add_func(func, name)
        out = self.relax.TensorType([int(d) for d in tensors[-1].shape], "float32")
        return self.emit(self.relax.call_tir(self.functions[name], (x, weight), out))

    def bias_relu(self, x: Any, relu: bool = True) -> Any:
        op = self.relax.op
        channels = int(x.ty.shape[1])
        shape = (1, channels, 1, 1) if len(x.ty.shape) == 4 else (1, channels)
        y = self.emit(op.add(x, self.weight(shape)))
        return self.emit(op.nn.relu(y)) if relu else y

    def max_pool(self, x: Any, padding: int = 0) -> Any:
        return self.emit(self.relax.op.nn.max_pool2d(x, pool_size=3, strides=2, padding=padding))

    def build(self, image: tuple[int, ...], body: Callable[[Graph, Any], Any]) -> Any:
        relax = self.relax
        x = relax.Var("image", relax.TensorType(list(image), "float32"))
        with self.builder.function("main"):
            with self.builder.dataflow():
                out = self.builder.emit_output(body(self, x))
            self.builder.emit_func_output(out, params=[x, *self.params])
        wanted = {name: layer.count for name, layer in self.layers.items()}
        if dict(self.calls) != wanted:  # the graph and the layer list must agree on every count
            raise AssertionError(f"graph calls {dict(self.calls)}, the network's counts are {wanted}")
        return self.builder.get()


def _alexnet(g: Graph, x: Any) -> Any:
    for i, name in enumerate(("conv1", "conv2", "conv3", "conv4", "conv5"), start=1):
        x = g.bias_relu(g.layer(name, x))
        if i in (1, 2, 5):
            x = g.max_pool(x)
    x = g.emit(g.relax.op.reshape(x, (1, 256 * 6 * 6)))
    x = g.bias_relu(g.layer("fc6", x))
    x = g.bias_relu(g.layer("fc7", x))
    return g.bias_relu(g.layer("fc8", x), relu=False)


def _resnet18(g: Graph, x: Any) -> Any:
    op = g.relax.op

    def block(x: Any, first: str, second: str, downsample: str | None) -> Any:
        y = g.bias_relu(g.layer(first, x))
        y = g.bias_relu(g.layer(second, y), relu=False)
        shortcut = g.bias_relu(g.layer(downsample, x), relu=False) if downsample else x
        return g.emit(op.nn.relu(g.emit(op.add(y, shortcut))))

    x = g.max_pool(g.bias_relu(g.layer("R1", x)), padding=1)
    x = block(block(x, "R2", "R2", None), "R2", "R2", None)
    for entry, inner, down in (("R4", "R6", "R5"), ("R7", "R9", "R8"), ("R10", "R12", "R11")):
        x = block(block(x, entry, inner, down), inner, inner, None)
    x = g.emit(op.mean(x, axis=[2, 3]))  # global average pooling: (1, 512)
    return g.bias_relu(g.layer("fc", x), relu=False)


GRAPHS: dict[str, tuple[tuple[int, ...], Callable[[Graph, Any], Any]]] = {
    "alexnet": ((1, 3, 224, 224), _alexnet),
    "resnet18": ((1, 3, 224, 224), _resnet18),
}


def describe(error: Exception) -> str:
    """A failure to build or time a network in one line, as the reports show it beside the sum."""
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"


def has_graph(network: str) -> bool:
    return network in GRAPHS


def input_shapes(network: str) -> list[tuple[int, ...]]:
    """The shapes the whole network's ``main`` takes: the image, then every weight and bias in
    the order the network's graph creates them (``Graph.weight``)."""
    return [tuple(argument["shape"]) for argument in arguments(network)[:-1]]


def arguments(network: str) -> list[dict[str, Any]]:
    """What the whole network's ``main`` takes and gives, as a program in any language passes it
    (network.json's ``arguments``, as best.json's for a kernel): the image, every weight and bias,
    each by name, shape and type, then the output it returns."""
    main = module(network, None)["main"]
    return [{"name": name, "shape": [int(d) for d in ty.shape], "dtype": str(ty.dtype)}
            for name, ty in [*((str(p), p.ty) for p in main.params), ("output", main.ret_ty)]]


def module(network: str, kernels: dict[str, Any] | None) -> Any:
    """The Relax IRModule of ``network`` calling ``kernels`` (layer -> scheduled PrimFunc), or,
    with None, Relax's own operators throughout (the reference)."""
    image, body = GRAPHS[network]
    return Graph(network, kernels).build(image, body)


def kernels(network: str, params: dict[str, dict[str, Any] | None], target: Target,
            given: dict[str, Any] | None = None) -> dict[str, Any]:
    """layer -> its scheduled PrimFunc: ``given[layer]`` (scheduled elsewhere, e.g. by MetaSchedule),
    else ``params[layer]``'s configuration of its template, else TVM's default schedule."""
    target = kernel.for_host(target)
    given = given or {}
    return {layer.name: given[layer.name] if layer.name in given else
            kernel.scheduled(layer.workload, params.get(layer.name), target)["main"]
            for layer in networks.lookup(network)}


class Program:
    """``network`` built with ``layer_kernels``; ``load`` puts it on its device with a seed's
    random image and weights and checks its output against the reference graph's on them.

    Raises WrongNetwork when the output differs, and whatever TVM raises when a kernel cannot
    be built. Load and time it with the device's lock held (``exclusive``)."""

    def __init__(self, network: str, layer_kernels: dict[str, Any], target: Target) -> None:
        import tvm

        self.network, self.target = network, kernel.for_host(target)
        self.layers = {layer.name for layer in networks.lookup(network)}
        started = time.perf_counter()
        with kernel.build_context():  # as each layer's kernel was built when it was tuned (``cp.async`` fills)
            self.executable = tvm.compile(module(network, layer_kernels),
                                          target=tvm.target.Target(self.target.tvm_target()))
        self.build_s = time.perf_counter() - started
        self.device = device_of(self.target)
        self.max_error = math.nan

    def load(self, seed: int) -> Program:
        import tvm
        from tvm import relax

        host, expected = _reference(self.network, self.target, seed)
        self.args = [tvm.runtime.tensor(a, self.device) for a in host]
        self.vm = relax.VirtualMachine(self.executable, self.device)
        got = self.vm["main"](*self.args).numpy()
        scale = float(np.max(np.abs(expected))) or 1.0
        self.max_error = float(np.max(np.abs(got.astype(np.float64) - expected))) / scale
        if not self.max_error <= RELATIVE_TOLERANCE:
            raise WrongNetwork(f"{self.network} with these kernels differs from TVM's own operators: max |error| "
                               f"{self.max_error:.3g} of the output's scale (allowed {RELATIVE_TOLERANCE})")
        return self

    def time(self, limits: Limits) -> list[float]:
        """One inference's latency (ms) in each of ``limits.repeat`` runs of at least ``limits.min_repeat_ms``."""
        timer = self.vm.time_evaluator("main", self.device, number=1, repeat=limits.repeat,
                                       min_repeat_ms=limits.min_repeat_ms)
        return [r * 1e3 for r in timer(*self.args).results]

    def time_calls(self) -> dict[str, float]:
        """One inference with each of the VM's calls timed (the device synchronized around it):
        ms per tunable layer (all its calls), the rest (Relax's own operators, allocations)
        under OTHER. The instrument costs microseconds a call, so the total exceeds ``time``'s."""
        spent: Counter[str] = Counter()
        started = [0.0]

        def instrument(func: Any, symbol: str, before: bool, returned: Any, *args: Any) -> int:
            self.device.sync()
            if before:
                started[0] = time.perf_counter()
            else:
                spent[symbol if symbol in self.layers else OTHER] += (time.perf_counter() - started[0]) * 1e3
            return 0  # VMInstrumentReturnKind.NoOp: run the call as usual

        self.vm.set_instrument(instrument)
        try:
            self.vm["main"](*self.args)
        finally:
            self.vm.set_instrument(None)
        return dict(spent)


OTHER = "(other)"
"""``Program.time_calls``' name for everything the network runs besides its tunable layers."""


def measure(network: str, layer_kernels: dict[str, Any], target: Target, limits: Limits,
            library_path: str | None = None) -> EndToEnd:
    """Build ``network`` calling ``layer_kernels`` (``kernels``, or any scheduled PrimFunc of a
    layer's compute, e.g. MetaSchedule's), check it against the reference graph, and time one
    inference (the median of ``limits.repeat`` runs of at least ``limits.min_repeat_ms``) while
    holding the device's lock.

    Raises WrongNetwork when the result differs from the reference, and whatever TVM raises
    when a kernel cannot be built. ``library_path``: where to write the checked program as a
    library (``trial_code.library.load_network``)."""
    program = Program(network, layer_kernels, target)
    with exclusive(target.device, limits.lock_wait):
        runs = program.load(limits.seed).time(limits)
    if library_path:
        replace_file(library_path, program.executable.export_library)
    return EndToEnd(float(np.median(runs)), tuple(runs), program.build_s, program.max_error)


@functools.cache
def _reference(network: str, target: Target, seed: int) -> tuple[list[np.ndarray], np.ndarray]:
    """The random image and weights of ``seed`` and the reference graph's output on them: built
    and run once per process (an untuned AlexNet takes seconds), with the device's lock held."""
    import tvm
    from tvm import relax

    reference = module(network, None)
    rng = np.random.default_rng(seed)
    host = [(rng.random([int(d) for d in p.ty.shape], dtype=np.float32) * 2 - 1) * 0.1
            for p in reference["main"].params]
    device = device_of(target)
    executable = tvm.compile(reference, target=tvm.target.Target(target.tvm_target()))
    expected = relax.VirtualMachine(executable, device)["main"](*[tvm.runtime.tensor(a, device) for a in host])
    return host, expected.numpy()
