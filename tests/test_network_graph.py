"""The whole network as one TVM program (``trial_code.networks.graph``): the named networks' graphs
agree with their layer lists, tuned kernels in a built network compute what TVM's own operators
do, a wrong kernel is caught, the export builds the chosen kernels, and the benchmark tunes a
network with both allocators and MetaSchedule and builds every run's final kernels beside the sum,
and the profile times each run's kernels alone and inside the network."""
from __future__ import annotations

import argparse
import csv
import json
import pickle

import numpy as np
import pytest
from call_kernel import built, call
from cuda_build import cp_async_copies
from feasible import feasible
from forking import in_a_child

from nni_opevo_tools import network_export
from nni_opevo_tools.experiment_client import Ranking
from trial_code import kernel, networks, targets, workloads
from trial_code.evaluate import Limits
from trial_code.networks import graph as network_graph
from trial_code.templates import for_workload

CPU = targets.cpu()
FAST = Limits(min_repeat_ms=5)
LAYERS = [
    networks.Layer("conv", workloads.make("conv2d", name="tiny.conv", batch=1, in_channels=4, height=8, width=8,
                                          out_channels=4, kernel_h=3, kernel_w=3, stride=1, padding=1), 2),
    networks.Layer("fc", workloads.make("matmul", name="tiny.fc", n=1, k=36, m=10), 1),
]


def tiny_graph(g: network_graph.Graph, x):
    """conv -> ReLU -> conv -> ReLU -> 3x3/2 max pool -> flatten -> fc: the conv layer runs twice."""
    x = g.bias_relu(g.layer("conv", x))
    x = g.bias_relu(g.layer("conv", x))
    x = g.emit(g.relax.op.reshape(g.max_pool(x), (1, 36)))
    return g.bias_relu(g.layer("fc", x), relu=False)


@pytest.fixture
def tiny(monkeypatch):
    """A named network "tiny" with a graph, in this process only."""
    monkeypatch.setitem(networks.NETWORKS, "tiny", LAYERS)
    monkeypatch.setitem(network_graph.GRAPHS, "tiny", ((1, 4, 8, 8), tiny_graph))
    network_graph._reference.cache_clear()
    yield "tiny"
    network_graph._reference.cache_clear()


def tuned_params():
    return {layer.name: feasible(layer.workload, CPU, seed=1) for layer in LAYERS}


@pytest.mark.parametrize("network", ["alexnet", "resnet18"])
def test_named_graphs_call_every_layer_as_often_as_the_network_counts_it(network):
    """Building the graph asserts each layer's call count and input shape against the layer list;
    with our kernels (here TVM's default schedules) and with Relax's operators alike."""
    layers = networks.lookup(network)
    ours = network_graph.module(network, network_graph.kernels(network, {}, CPU))
    reference = network_graph.module(network, None)
    assert {gv.name_hint for gv in ours.get_global_vars()} == {"main", *(x.name for x in layers)}
    weights = 2 * sum(x.count for x in layers)  # each call its own weight and bias
    assert len(ours["main"].params) == len(reference["main"].params) == 1 + weights


def test_a_graph_that_disagrees_with_its_layer_list_is_refused(tiny, monkeypatch):
    def once(g, x):
        x = g.emit(g.relax.op.reshape(g.max_pool(g.layer("conv", x)), (1, 36)))
        return g.layer("fc", x)

    monkeypatch.setitem(network_graph.GRAPHS, "tiny", ((1, 4, 8, 8), once))
    with pytest.raises(AssertionError, match=r"graph calls \{'conv': 1, 'fc': 1\}, the network's counts are"):
        network_graph.module("tiny", None)
    monkeypatch.setitem(network_graph.GRAPHS, "tiny", ((1, 4, 9, 9), tiny_graph))
    with pytest.raises(AssertionError, match=r"layer conv takes \[1, 4, 8, 8\], the graph gives it \[1, 4, 9, 9\]"):
        network_graph.module("tiny", None)


def test_tuned_kernels_in_the_whole_network_compute_what_tvms_operators_do(tiny):
    found = network_graph.measure(tiny, network_graph.kernels(tiny, tuned_params(), CPU), CPU, FAST)
    assert found.latency_ms > 0 and len(found.repeats_ms) == FAST.repeat
    assert found.max_error <= network_graph.RELATIVE_TOLERANCE


def test_a_kernel_that_computes_something_else_is_a_wrong_network(tiny):
    from tvm import te

    fc = LAYERS[1].workload
    a, b = te.placeholder((1, 36), name="A"), te.placeholder((36, 10), name="B")
    zeros = te.create_prim_func([a, b, te.compute((1, 10), lambda i, j: a[i, 0] * 0.0 + b[0, j] * 0.0, name="C")])
    kernels = {**network_graph.kernels(tiny, {}, CPU), "fc": zeros}
    assert fc.shape["k"] == 36
    with pytest.raises(network_graph.WrongNetwork, match="differs from TVM's own operators"):
        network_graph.measure(tiny, kernels, CPU, FAST)


class Trials(Ranking):
    """An experiment's reported trials, as the export reads them from NNI."""

    def __init__(self, trials: list[tuple[dict, dict]]) -> None:
        self.trials = trials

    def parameter_records(self):
        return [(f"job{i}", json.dumps({"parameter_id": i, "parameters": p}), None)
                for i, (p, _) in enumerate(self.trials)]

    def final_metrics(self):
        return [(f"job{i}", str(i), json.dumps(json.dumps(r)), None) for i, (_, r) in enumerate(self.trials)]


def test_a_network_built_whole_for_a_gpu_fills_shared_memory_as_its_tuned_layers_did(tiny):
    """Each layer's kernel was tuned as ``kernel.build`` builds it, pipelined fills as ``cp.async``;
    the network built as one program (for an H100, no GPU needed) issues the same copies: built
    outside ``kernel.build_context`` its Conv2D filled shared memory with plain loads."""
    h100 = targets.h100()

    def cuda_source(executable) -> str:
        modules, found = [executable.mod], []
        while modules:
            module = modules.pop()
            modules += list(module.imports)
            found += [module.inspect_source("cuda")] if module.kind == "cuda" else []
        return "\n".join(found)

    params = {layer.name: next(p for p in (feasible(layer.workload, h100, seed=s) for s in range(50))
                               if p["stages"] > 1) for layer in LAYERS}
    per_layer = [cp_async_copies(kernel.source(kernel.build(kernel.scheduled(layer.workload, params[layer.name], h100),
                                                   h100), h100)) for layer in LAYERS]
    assert all(per_layer), per_layer
    program = network_graph.Program(tiny, network_graph.kernels(tiny, params, h100), h100)
    assert cp_async_copies(cuda_source(program.executable)) == sum(per_layer)


@pytest.mark.slow(seconds=5)
def test_the_export_builds_the_whole_network_with_the_chosen_kernels(tiny, tmp_path):
    """The tuned conv is re-measured, the untried fc runs at TVM's default schedule, and the
    whole network with both is built as one program and timed, beside the sum."""
    conv = {networks.KEY: {"_name": "conv", **tuned_params()["conv"]}}
    database = Trials([(conv, {"default": 0.001, "latency_ms": 1.0, "status": "NO_ERROR"})])
    best = network_export.export(str(tmp_path / "exp"), database, argparse.Namespace(network=tiny, target="cpu"), 1,
                                 FAST, str(tmp_path / "out"))
    assert [x.schedule for x in best.layers] == ["tuned", "default"]
    assert best.whole_network_ms is not None and best.whole_network_ms > 0 and not best.whole_network_error
    assert "as one TVM program" in best.headline()
    # The tuned network as one library a program loads: the same output as TVM's own operators.
    from trial_code.kernel import tvm

    assert best.library == "network.so"
    run = network_export.load_network(str(tmp_path / "out"))  # network.json names the library and its target
    host, expected = network_graph._reference(tiny, CPU, seed=3)
    assert [a.shape for a in host] == network_graph.input_shapes(tiny)
    np.testing.assert_allclose(run(*host), expected, rtol=1e-3, atol=1e-4)
    # and in a process forked after this thread ran it (``trial_code.cpu_pool``)
    assert in_a_child(lambda: bool(np.allclose(run(*host), expected, rtol=1e-3, atol=1e-4))) == "right"
    np.testing.assert_allclose(pickle.loads(pickle.dumps(run))(*host), expected, rtol=1e-3, atol=1e-4)  # loaded again
    on_device = [tvm.runtime.tensor(np.asarray(a, np.float32)) for a in host]  # weights kept, read in place
    np.testing.assert_allclose(run(*on_device).numpy(), expected, rtol=1e-3, atol=1e-4)
    with pytest.raises(ValueError, match="^array 0 of the network must be float32, got float64$"):
        run(tvm.runtime.tensor(np.asarray(host[0], np.float64)), *on_device[1:])
    with pytest.raises(ValueError, match="^array 1 of the network must be float32 or convert to it by NumPy's same-kind"):
        run(host[0], host[1] + 1j, *host[2:])
    written = json.loads((tmp_path / "out" / "network.json").read_text())
    assert written["whole_network_ms"] == best.whole_network_ms and written["latency_ms"] == best.latency_ms
    # and from C++ (examples/cpp), with network.json's arguments: the same output, bit for bit
    assert [a["shape"] for a in written["arguments"]] == [list(s) for s in network_graph.input_shapes(tiny)] + [[1, 10]]
    assert written["instructions"] and set(written["instructions"]) <= set(targets.cpu_flags() or written["instructions"])
    called, out = call(built(tmp_path / "call_kernel"), tmp_path / "out", [np.asarray(a, np.float32) for a in host],
                       tmp_path)
    assert called.returncode == 0, called.stderr
    np.testing.assert_array_equal(np.fromfile(out, np.float32), run(*host).ravel())
    for field, value, message in (("library", "../network.so", "field 'library' must name a file next to network.json"),
                                  ("target", {"kind": "tpu"}, "its target cannot be read"),
                                  ("schema", "nni-opevo/best/2", "is not a nni-opevo/network/1 file")):
        (tmp_path / "out" / "network.json").write_text(json.dumps({**written, field: value}))
        with pytest.raises(ValueError, match=message):
            network_export.load_network(str(tmp_path / "out"))


@pytest.mark.slow(seconds=140)
def test_the_benchmark_tunes_a_network_with_each_allocator_and_metaschedule_and_builds_it_whole(tiny, tmp_path):
    """The harness runs NetworkTuners (gradient and round-robin) and MetaSchedule's task
    scheduler on the same network, times its layers at TVM's default schedule once, reports the
    network's latency against total trials, and builds the whole network with each run's final
    kernels (ours from their best configurations, MetaSchedule's from its database) and untuned,
    once each: running the command again measures nothing twice."""
    from nni_opevo_bench.__main__ import main

    out = tmp_path / "bench"
    tuners = ["opevo", "opevo@round-robin", "metaschedule:num_trials_per_iter=2"]
    command = ["--objective", "network", "--target", "cpu", "--workloads", tiny, "--tuners", *tuners, "--seeds", "1",
               "--budget", "4", "--out", str(out), "--no-progress"]
    main(command)
    with open(out / "trials.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert {r["tuner"] for r in rows} == set(tuners)
    for tuner in tuners[:2]:
        layers = [networks.split(json.loads(r["configuration"]))[0] for r in rows if r["tuner"] == tuner]
        assert len(layers) == 4 and set(layers) == {"conv", "fc"}  # the warm-up or the rotation reaches both
    defaults = json.loads((out / "defaults.json").read_text())[tiny]["llvm"]
    assert set(defaults) == {"conv", "fc"} and all(v > 0 for v in defaults.values())
    with open(out / "end_to_end.csv", newline="") as handle:
        built = list(csv.DictReader(handle))
    assert sorted((r["tuner"], r["seed"]) for r in built) == sorted([("default", ""), *((t, "0") for t in tuners)])
    assert all(not r["error"] and float(r["end_to_end_ms"]) > 0 for r in built), built
    table = (out / "networks.md").read_text()
    assert "sum of count x layer latency" in table and "opevo@round-robin" in table and "metaschedule" in table
    assert "the whole network built with the final kernels" in table and "TVM's default schedule (untuned)" in table
    assert "nni-opevo profile" in table, "the report says how to compare whole-network times fairly"
    assert (out / "network_vs_trials.png").exists() and not (out / "summary.md").exists()
    main(command)
    with open(out / "end_to_end.csv", newline="") as handle:
        assert len(list(csv.DictReader(handle))) == len(built)


def test_the_profile_alternates_tuners_within_a_round(tiny):
    """Runs come seed by seed, each seed's tuners side by side (seed 10 after 9), so a slow spell
    of a shared machine falls on every tuner alike; MetaSchedule's runs are named, not timed."""
    from nni_opevo_bench import network_profile

    conv = json.dumps({networks.KEY: {"_name": "conv", **tuned_params()["conv"]}})
    rows = [{"objective": "network", "workload": tiny, "target": "llvm", "tuner": tuner, "seed": seed,
             "tflops": "0.001", "configuration": conv}
            for tuner in ("opevo@round-robin", "opevo", "metaschedule", "autotvm") for seed in ("10", "9", "0")]
    runs, skipped = network_profile.finished_runs(rows, tiny, "llvm")
    assert [(r.seed, r.tuner) for r in runs] == [(seed, tuner) for seed in ("0", "9", "10")
                                                 for tuner in ("autotvm", "opevo", "opevo@round-robin")]
    assert skipped == ["metaschedule"]


@pytest.mark.slow(seconds=5)
def test_the_profile_times_each_runs_kernels_alone_and_in_the_network_resuming_by_round(tiny, tmp_path):
    """``nni_opevo_bench.network_profile`` rebuilds each of our runs' best kernels from the CSV, times
    them alone and call by call inside the built network, round after round, beside TVM's default
    schedule as a control, and a repeated command adds only the missing rounds; MetaSchedule's
    run cannot be rebuilt and is named."""
    from nni_opevo_bench import network_profile, network_report
    from nni_opevo_bench.table import read_rows

    conv = {networks.KEY: {"_name": "conv", **tuned_params()["conv"]}}
    fields = ["objective", "workload", "target", "tuner", "seed", "tflops", "configuration"]
    with open(tmp_path / "trials.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fields)
        writer.writeheader()
        for tuner, tflops in (("opevo", "0.002"), ("opevo", "0.001"), ("metaschedule", "0.003")):
            writer.writerow({"objective": "network", "workload": tiny, "target": "llvm", "tuner": tuner, "seed": "0",
                             "tflops": tflops, "configuration": json.dumps(conv)})
    network_report.record_defaults(tmp_path, tiny, "llvm", {"conv": 0.5, "fc": 0.25})
    network_profile.profile(tmp_path, tiny, CPU, 2, FAST)
    rows = read_rows(tmp_path / network_profile.FILE)
    assert {(r["tuner"], r["round"]) for r in rows} == {(t, n) for t in ("opevo", "default") for n in "01"}
    control = [r for r in rows if r["tuner"] == "default" and r["round"] == "0"]
    assert [r["recorded_ms"] for r in control[:2]] == ["0.5", "0.25"], "the control: TVM's default schedule"
    first = [r for r in rows if r["tuner"] == "opevo" and r["round"] == "0"]
    assert [r["layer"] for r in first] == ["conv", "fc", network_graph.OTHER, network_profile.WHOLE]
    conv_row, fc_row = first[0], first[1]
    flops = for_workload(LAYERS[0].workload).flops(LAYERS[0].workload)
    assert float(conv_row["recorded_ms"]) == pytest.approx(flops / 0.002 / 1e9, rel=1e-4), "the best trial's"
    assert fc_row["recorded_ms"] == "", "no trial of fc: it runs at TVM's default schedule"
    assert all(float(r["alone_ms"]) > 0 and float(r["in_network_ms"]) > 0 for r in (conv_row, fc_row))
    assert float(first[3]["in_network_ms"]) > 0
    network_profile.profile(tmp_path, tiny, CPU, 3, FAST)
    rounds = [r["round"] for r in read_rows(tmp_path / network_profile.FILE) if r["layer"] == network_profile.WHOLE]
    assert sorted(rounds) == ["0", "0", "1", "1", "2", "2"], "only the missing round was timed"
    table = (tmp_path / network_profile.TABLE).read_text()
    assert "| opevo | 0 |" in table and "3 round(s)" in table
    assert "Not profiled: metaschedule" in table
