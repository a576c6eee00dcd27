"""A network's layers under one budget: NetworkTuner (one inner tuner per layer, an allocator),
the networks and their spaces, the trial of a layer, TVM's default schedule for an untuned
layer, and a whole network experiment under nnictl with its end-to-end latency."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import stats
import yaml
from nni import NoMoreTrialError

from nni_opevo import NetworkTuner, SpaceError
from nni_opevo.network.allocation import Gradient, RoundRobin
from trial_code import constraint, networks, targets, workloads
from trial_code.evaluate import Limits, evaluate
from trial_code.status import Status

ROOT = Path(__file__).resolve().parent.parent
LAYERS = {"big": [256, 2], "mid": [64, 2], "flat": [16, 2]}
TINY = {"layers": [
    {"name": "mm", "count": 3, "workload": {"family": "matmul", "shape": {"n": 16, "k": 32, "m": 64}}},
    {"name": "conv", "workload": {"family": "conv2d", "shape": {"batch": 1, "in_channels": 4, "height": 10,
                                                               "width": 10, "out_channels": 8, "kernel_h": 3,
                                                               "padding": 1}}}]}


def network_space(layers=LAYERS):
    return {"layer": {"_type": "choice", "_value": [
        {"_name": name, "t": {"_type": "factor", "_value": value}, "o": {"_type": "perm", "_value": 3}}
        for name, value in layers.items()]}}


def latency(name, params):
    """Synthetic layer latencies: 'big' and 'mid' improve towards t = [8, ...], any other cannot."""
    t = params["t"][0]
    return {"big": 1.0 + abs(t - 8) / 8, "mid": 0.3 + abs(t - 8) / 64}.get(name, 0.05)


def drive(tuner, trials, space=None, measure=latency, work=lambda name, params: 1.0):
    """Propose, measure and report one trial at a time; (layer, params) of each trial. A
    ``measure`` of None is a failed kernel (0 TFLOPS, no latency); the value reported is
    ``work`` / latency, a rate like TFLOPS."""
    tuner.update_search_space(space or network_space())
    return run_trials(tuner, trials, measure, work)


def run_trials(tuner, trials, measure=latency, work=lambda name, params: 1.0):
    """``drive`` on a tuner that already has its search space (and perhaps imported data)."""
    done = []
    for pid in range(trials):
        try:
            params = tuner.generate_parameters(pid)
        except NoMoreTrialError:
            break
        name, inner = networks.split(params)
        ms = measure(name, inner)
        tuner.receive_trial_result(pid, params, {"default": work(name, inner) / ms if ms else 0.0, "latency_ms": ms})
        tuner.trial_end(pid, True)
        done.append((name, inner))
    return done


def test_each_layer_has_its_own_tuner_and_no_trial_is_repeated():
    tuner = NetworkTuner(seed=3, weights={"big": 2})
    done = drive(tuner, 90)
    assert len(done) == 90 and {name for name, _ in done} == set(LAYERS)
    keys = [(name, json.dumps(inner, sort_keys=True)) for name, inner in done]
    assert len(set(keys)) == len(keys)
    for name, inner in done:
        assert sorted(inner) == ["o", "t"] and inner["t"][0] * inner["t"][1] == LAYERS[name][0]
    assert {name: len(t.population) for name, t in tuner.layers.items()} == \
        {name: sum(n == name for n, _ in done) for name in LAYERS}


def test_the_gradient_allocator_spends_where_the_network_gains_and_round_robin_evenly():
    """After the warm-up, 'flat' (already at its best, 5 % of the latency) gets little: the
    gradient allocator's trials go to the layers that can still fall, most to the heaviest.
    Deterministic for each seed (the allocator and tuners are seeded); checked on three."""
    for seed in (0, 1, 2):
        spent = {}
        for kind in ("gradient", "round-robin"):
            done = drive(NetworkTuner(seed=seed, allocator=kind, tuner_args={"variant": "paper"}), 60)
            spent[kind] = {name: sum(n == name for n, _ in done) for name in LAYERS}
        assert max(spent["round-robin"].values()) - min(spent["round-robin"].values()) <= 1
        assert spent["gradient"]["flat"] < spent["round-robin"]["flat"] / 2, spent
        assert spent["gradient"]["big"] > spent["round-robin"]["big"], spent


def test_a_layer_whose_kernels_all_fail_does_not_take_the_budget():
    """The warm-up gives it Gradient.WARMUP trials; after that only the random share (5 %)."""
    done = drive(NetworkTuner(seed=4), 80, measure=lambda name, p: None if name == "big" else latency(name, p))
    assert sum(name == "big" for name, _ in done) <= Gradient.WARMUP + 10  # 10: P(Binomial(75, 0.05 / 3) > 10) < 1e-7


def test_allocators_weigh_layers_by_count():
    import numpy as np

    for cls in (Gradient, RoundRobin):
        allocator = cls({"a": 3.0, "b": 1.0}, np.random.default_rng(0))
        for name, ms in (("a", 2.0), ("b", 1.0), ("a", 1.5)):
            allocator.proposed(name)
            allocator.observe(name, ms)
        assert allocator.cost() == 3.0 * 1.5 + 1.0 * 1.0
        allocator.close("a")
        assert allocator.next() == "b"
        allocator.close("b")
        with pytest.raises(ValueError, match="every layer"):
            allocator.next()


def test_a_network_ends_when_every_layer_is_used_and_its_constraint_sees_each_layer():
    import constraints

    constraints.SEEN_LAYERS.clear()
    tuner = NetworkTuner(seed=0, constraint="constraints:layer_limit", constraint_args={"most": 2})
    space = network_space({"a": [8, 2], "b": [4, 2]})  # t[0] <= 2: a has 2 x 6 orders, b 2 x 6
    done = drive(tuner, 100, space)
    assert len(done) == 24 and all(inner["t"][0] <= 2 for _, inner in done)
    assert set(constraints.SEEN_LAYERS) == {"a", "b"}
    with pytest.raises(NoMoreTrialError):
        tuner.generate_parameters(1000)


def test_import_data_gives_each_layer_its_history_and_nothing_is_proposed_again():
    first = NetworkTuner(seed=5)
    done = drive(first, 30)
    records = [{"parameter": {"layer": {"_name": n, **p}}, "value": {"default": 1.0, "latency_ms": 1.0}}
               for n, p in done] + [{"parameter": {"not": "a layer"}, "value": 1.0}]
    resumed = NetworkTuner(seed=5)
    resumed.update_search_space(network_space())
    resumed.import_data(records)
    seen = {(n, json.dumps(p, sort_keys=True)) for n, p in done}
    for pid in range(100, 140):
        name, inner = networks.split(resumed.generate_parameters(pid))
        assert (name, json.dumps(inner, sort_keys=True)) not in seen


@pytest.mark.parametrize("space, class_args, message", [
    ({"a": {"_type": "choice", "_value": [1, 2]}}, {}, "each {\"_name\": <layer>"),
    ({"a": {"_type": "randint", "_value": [0, 3]}, "b": {"_type": "randint", "_value": [0, 3]}}, {}, "exactly one"),
    (network_space(), {"weights": {"nope": 2}}, "classArg 'weights' names layer 'nope'"),
])
def test_bad_network_spaces_and_weights_name_the_rule(space, class_args, message):
    with pytest.raises(ValueError, match=message.replace("{", r"\{").replace("(", r"\(")):
        NetworkTuner(**class_args).update_search_space(space)


@pytest.mark.parametrize("class_args, message", [
    ({"tuner": "TPE"}, "classArg 'tuner' must name a tuner of this package"),
    ({"tuner_args": {"seed": 1}}, "classArg 'tuner_args' must not set 'seed'"),
    ({"tuner_args": {"parents_size": 0}}, "classArg 'parents_size' must be an integer from 1 to 256"),
    ({"weights": {"big": 0}}, "classArg 'weights' must give each layer a positive number"),
    ({"allocator": "greedy"}, "classArg 'allocator' must be 'gradient' or 'round-robin'"),
])
def test_bad_class_args_name_the_class_arg(class_args, message):
    with pytest.raises(ValueError, match=message):
        NetworkTuner(**class_args)
    assert SpaceError  # the space errors above are SpaceErrors, ValueErrors naming the parameter


def test_the_named_networks_and_a_network_file(tmp_path):
    assert [x.name for x in networks.lookup("alexnet")] == ["conv1", "conv2", "conv3", "conv4", "conv5", "fc6", "fc7",
                                                            "fc8"]
    resnet = networks.lookup("resnet18")
    assert sum(x.count for x in resnet if x.workload.family == "conv2d") == 20  # ResNet-18's convolutions
    assert networks.layer("resnet18", "R2").count == 4 and networks.layer("resnet18", "fc").workload.shape["k"] == 512
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps({"layers": [
        {"name": "mm", "count": 2, "workload": {"family": "matmul", "shape": {"n": 8, "k": 16, "m": 32}}}]}))
    (layer,) = networks.lookup(str(path))
    assert (layer.name, layer.count, layer.workload.name) == ("mm", 2, "tiny.mm")
    path.write_text(json.dumps({"layers": [{"name": "mm", "count": 0, "workload": {}}]}))
    networks._from_file.cache_clear()
    with pytest.raises(ValueError, match="layer 'mm': 'count' must be an integer >= 1"):
        networks.lookup(str(path))
    for climbing in ("..", "../x", ".hidden", "a/b"):  # a layer's name becomes its export folder
        path.write_text(json.dumps({"layers": [{"name": climbing, "workload": {"family": "matmul", "shape": {
            "n": 8, "k": 16, "m": 32}}}]}))
        networks._from_file.cache_clear()
        with pytest.raises(ValueError, match="layer name .* may hold only letters, digits"):
            networks.lookup(str(path))
    with pytest.raises(ValueError, match="unknown network 'vgg'"):
        networks.lookup("vgg")
    with pytest.raises(ValueError, match="network alexnet has no layer 'fc9'"):
        networks.layer("alexnet", "fc9")


def test_the_trial_codes_constraint_checks_the_layer_a_network_tuner_names():
    fc8 = {"tile_n": [1, 1, 1], "tile_m": [10, 25, 4], "tile_k": [64, 64], "block_order": ["n", "m", "k"]}
    assert constraint.feasible(fc8, network="alexnet", layer="fc8", target="cpu")
    too_wide = {**fc8, "tile_m": [1, 10, 100]}
    assert not constraint.feasible(too_wide, network="alexnet", layer="fc8", target="cpu")
    with pytest.raises(ValueError, match="no layer"):
        constraint.feasible(fc8, network="alexnet", target="cpu")


def test_a_network_trial_runs_the_layer_its_parameters_name():
    params = {"layer": {"_name": "fc8", "tile_n": [1, 1, 1], "tile_m": [10, 25, 4], "tile_k": [64, 64],
                        "block_order": ["n", "m", "k"]}}
    out = subprocess.run([sys.executable, "-m", "trial_code.trial", "--network", "alexnet", "--target", "cpu",
                          "--min-repeat-ms", "5", "--params", json.dumps(params)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    report = json.loads(out.stdout)
    assert report["status"] == "NO_ERROR" and report["default"] > 0, report


def test_an_untuned_layer_runs_at_tvms_default_schedule():
    small = workloads.make("conv2d", name="c", batch=1, in_channels=4, height=10, width=10, out_channels=8,
                           kernel_h=3, kernel_w=3, stride=1, padding=1)
    result = evaluate(small, None, targets.cpu(), Limits(min_repeat_ms=5))
    assert result.status is Status.NO_ERROR and result.latency_ms > 0, result.error


def test_spaces_writes_a_network_experiment(tmp_path):
    from nni_opevo_tools import make_spaces

    network = tmp_path / "tiny.json"
    network.write_text(json.dumps(TINY))
    make_spaces.main(["--network", str(network), "--root", str(tmp_path)])
    config = yaml.safe_load((tmp_path / "experiments" / "tiny" / "opevo-cpu.yml").read_text())
    assert config["tuner"]["className"] == "nni_opevo.NetworkTuner"
    args = config["tuner"]["classArgs"]
    assert args["weights"] == {"mm": 3.0, "conv": 1.0} and args["tuner"] == "OpEvoTuner"
    assert args["constraint_args"] == {"network": str(network), "target": "cpu"}
    assert f"--network {network} --target cpu" in config["trialCommand"] and config["maxTrialNumber"] == 64
    space = json.loads((tmp_path / "search_spaces" / "tiny.cpu.json").read_text())
    assert [o["_name"] for o in space["layer"]["_value"]] == ["mm", "conv"]
    NetworkTuner(**args).update_search_space(space)  # the tuner takes what was written


@pytest.mark.slow(seconds=95)
def test_a_network_experiment_under_nnictl_ends_with_its_end_to_end_latency(tmp_path):
    """A two-layer network tuned by one NNI experiment, then exported: each layer's best
    re-measured (or TVM's default schedule where no trial reached it) and the network's latency
    exactly the sum of count x latency."""

    network = tmp_path / "tiny.json"
    network.write_text(json.dumps(TINY))
    env = {**os.environ, "HOME": str(tmp_path), "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}
    subprocess.run([sys.executable, "-m", "nni_opevo_tools.make_spaces", "--network", str(network), "--root", str(tmp_path)],
                   cwd=ROOT, env=env, check=True, capture_output=True, timeout=120)
    config_path = tmp_path / "experiments" / "tiny" / "opevo-cpu.yml"
    config = yaml.safe_load(config_path.read_text())
    config["maxTrialNumber"] = 6
    config["trialCommand"] += " --min-repeat-ms 5"
    config_path.write_text(yaml.safe_dump(config))
    from nni_experiment import free_port, launched_id, stop_in_background

    out = subprocess.run([sys.executable, "-m", "nni_opevo_tools.launch", "--config", str(config_path), "--port",
                          str(free_port()), "--every", "2", "--top-k", "1", "--repeat", "3", "--min-repeat-ms", "10"],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    experiment = launched_id(out.stdout)
    try:
        assert out.returncode == 0, out.stdout + out.stderr
        folder = tmp_path / "nni-experiments" / str(experiment) / "export"
        result = json.loads((folder / "network.json").read_text())
        layers = {x["name"]: x for x in result["layers"]}
        assert set(layers) == {"mm", "conv"} and all(x["latency_ms"] > 0 for x in layers.values())
        assert sum(x["trials"] for x in layers.values()) == 6
        assert result["latency_ms"] == pytest.approx(3 * layers["mm"]["latency_ms"] + layers["conv"]["latency_ms"])
        assert "tiny.json" in out.stdout or "tiny" in out.stdout
        assert "end to end" in out.stdout and "| **network** |" in out.stdout
        assert (folder / "mm").is_dir() and (folder / "conv").is_dir()
    finally:
        if experiment:
            stop_in_background(experiment, env)


def test_the_network_latency_after_each_trial_counts_untuned_layers_at_the_default(tmp_path):
    from nni_opevo_bench import network_report

    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY))
    mm_flops = 2 * 16 * 32 * 64
    rows = [{"tflops": str(mm_flops / 1e9 / 0.5), "configuration": json.dumps({"layer": {"_name": "mm"}})},
            {"tflops": "0.0", "configuration": json.dumps({"layer": {"_name": "conv"}})},
            {"tflops": str(mm_flops / 1e9 / 0.25), "configuration": json.dumps({"layer": {"_name": "mm"}})}]
    curve = network_report.latency_curve(rows, str(path), {"mm": 2.0, "conv": 1.0})
    assert curve == pytest.approx([3 * 0.5 + 1.0, 3 * 0.5 + 1.0, 3 * 0.25 + 1.0])


def shared_template_space(extents):
    """One template at several extents: a tiled loop (a factor of each extent), a loop order and
    an unroll step, as a network's convolutions of one template are."""
    return {"layer": {"_type": "choice", "_value": [
        {"_name": f"L{c}", "t": {"_type": "factor", "_value": [c, 3]}, "o": {"_type": "perm", "_value": 3},
         "u": {"_type": "discrete", "_value": [0, 16, 64, 512]}} for c in extents]}}


def template_latency(name, params):
    """Every layer runs fastest with its middle tile a quarter of the loop's log extent, the
    identity loop order and unroll 64: what one layer's measurements teach holds for the others.
    Work grows with the extent (``template_work``), so the rate compares across layers."""
    share = math.log2(params["t"][1]) / math.log2(template_work(name, params))
    slow = 1 + 4 * abs(share - 0.25) + (params["o"] != [0, 1, 2]) + 0.5 * (params["u"] != 64)
    return template_work(name, params) / 1000 * slow


def template_work(name, params):
    return math.prod(params["t"])


@pytest.mark.slow(seconds=15)
def test_layers_of_one_template_learn_from_each_other():
    """With ``transfer`` each OpEvo layer's surrogate learns from the other layers of its
    template, and half of their random starts are screened by it. Eight layers of one template,
    eight trials each in turn (every one inside the layers' random start of lambda = 8): the
    network's latency at the end against the same seed without transfer, on 16 seeds. A sign
    test: were transfer no better, it would win 14 or more of the 16 with probability 0.002.
    Only layers whose parameters mean the same are kin."""
    extents = [256, 512, 1024, 2048, 4096, 128, 8192, 64]
    wins = 0
    for seed in range(16):
        cost = {}
        for transfer in (True, False):
            tuner = NetworkTuner(seed=seed, allocator="round-robin", transfer=transfer)
            drive(tuner, 64, shared_template_space(extents), template_latency, template_work)
            cost[transfer] = tuner.allocator.cost()
        wins += cost[True] < cost[False]
    assert stats.sign_test(14, 16) < stats.ALPHA
    assert wins >= 14, wins
    mixed = NetworkTuner(seed=0)
    mixed.update_search_space({"layer": {"_type": "choice", "_value": [
        *shared_template_space([64, 128])["layer"]["_value"], *network_space({"x": [64, 2]})["layer"]["_value"]]}})
    assert [len(mixed.layers[n].search.kin) for n in ("L64", "L128", "x")] == [1, 1, 0]
    alone = NetworkTuner(seed=0, transfer=False)
    alone.update_search_space(shared_template_space([64, 128]))
    assert all(not t.search.kin for t in alone.layers.values())


def rare_corner(params):
    """A rare family of fast kernels (1 in 24 configurations: reversed loop order with unroll
    512) whose neighbours are slow, as the fast convolutions of AlexNet were on the CPU."""
    return params["u"] == 512 and params["o"] == [2, 1, 0]


def deceptive_latency(name, params):
    if rare_corner(params):
        return template_latency(name, params) / 10
    slow_neighbour = params["u"] == 512 or params["o"] == [2, 1, 0]
    return template_latency(name, params) * (3 if slow_neighbour else 1)


def hidden_corner(name, params):
    """One kernel per layer of ``shared_template_space``, 1 in 1,080 of a 256-wide layer's:
    the whole loop in the innermost tile, reversed order, unroll 512."""
    return params["u"] == 512 and params["o"] == [2, 1, 0] and list(params["t"]) == [1, 1, template_work(name, params)]


def hidden_latency(name, params):
    return template_latency(name, params) / (10 if hidden_corner(name, params) else 1)


@pytest.mark.slow(seconds=5)
def test_a_kernel_one_layer_found_is_tried_on_its_kin():
    """A kernel that runs well on one layer of a template (imported: layer L512 has measured
    its hidden corner) is carried into its kin's space, a tile as the same share of the other
    extent, and screened beside their children: L256 must measure its own corner within its
    first 16 trials in at least 10 of 12 seeds. Without the kin's kernels among the candidates
    (``migrants: 0``: the surrogate and the screened start only) it did in 25 of 96 seeds; at
    that rate 10 of 12 has probability 6e-5. And ``migrants: 0`` does turn them off: at 25/96,
    9 or more of 12 has probability 5e-4."""
    assert stats.binomial_tail(10, 12, 25 / 96) < stats.ALPHA
    found = {}
    for migrants in (2, 0):
        found[migrants] = 0
        for seed in range(12):
            tuner = NetworkTuner(seed=seed, allocator="round-robin", tuner_args={"migrants": migrants})
            tuner.update_search_space(shared_template_space([256, 512]))
            corner = {"t": [1, 1, 512], "o": [2, 1, 0], "u": 512}
            ms = hidden_latency("L512", corner)
            tuner.import_data([{"parameter": {"layer": {"_name": "L512", **corner}},
                                "value": {"default": template_work("L512", corner) / ms, "latency_ms": ms}}])
            done = run_trials(tuner, 32, hidden_latency, template_work)
            found[migrants] += any(name == "L256" and hidden_corner(name, params) for name, params in done)
    assert found[2] >= 10 and found[0] <= 8, found


@pytest.mark.slow(seconds=5)
def test_kin_steer_half_of_a_random_start_and_leave_the_rest_to_chance():
    """With ``transfer``, a start screened throughout by the kin's surrogate goes only where the
    kin have been, and a family of layers stops exploring. Four layers of one template, eight
    trials each (their random starts), whose fastest kernels are a rare corner of slow
    neighbours: the family must measure the corner in at least 6 of 24 seeds. The start's
    uniform half alone finds it in a seed with probability 1 - (23/24)^16 = 0.49; a start
    screened throughout found it in 6 of 96 seeds, and would pass with probability 0.003
    (docs/results/network-transfer-synthetic.md)."""
    assert stats.binomial_tail(6, 24, 6 / 96) < stats.ALPHA
    found = 0
    for seed in range(24):
        tuner = NetworkTuner(seed=seed, allocator="round-robin")
        done = drive(tuner, 32, shared_template_space([256, 512, 1024, 2048]), deceptive_latency, template_work)
        found += any(rare_corner(params) for _, params in done)
    assert found >= 6, found
