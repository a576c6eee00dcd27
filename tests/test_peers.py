"""The peer tuners: each algorithm's defining behaviour, and the NNI plumbing they share with
OpEvo (no repeats, failures, unknown ids, seeds, minimize, exhaustion, resume, classArgs)."""
import functools
import json
from pathlib import Path

import numpy as np
import pytest
from nni import NoMoreTrialError
from stats import ALPHA, hypergeometric_tail

from nni_opevo import (
    AutoTVMClassArgsValidator,
    AutoTVMTuner,
    ChoiceViewClassArgsValidator,
    ChoiceViewTuner,
    GBFSClassArgsValidator,
    GBFSTuner,
    NA2CClassArgsValidator,
    NA2CTuner,
    NoSEClassArgsValidator,
    NoSETuner,
    catalog,
    registry,
)
from nni_opevo.fitness import Fitness
from nni_opevo.peers.actor_critic import ActorCritic
from nni_opevo.peers.cost_model import XGBoostCostModel, average_recall
from nni_opevo.peers.diversity import diverse_batch
from nni_opevo.peers.knn import KnnSurrogate
from nni_opevo.population import Population
from nni_opevo.space.search_space import SearchSpace
from nni_opevo.testing import contract, dispatch
from nni_opevo.testing.landscapes import tiled_matmul

# Deterministic runs: the simulated clock ignores the tuners' real time, which varies with
# the machine's load and would reorder which trial finishes first.
drive = functools.partial(dispatch.drive, charge_tuner_time=False)

ROOT = Path(__file__).resolve().parent.parent
MIXED = {
    "f": {"_type": "factor", "_value": [64, 3]},
    "p": {"_type": "perm", "_value": 3},
    "c": {"_type": "choice", "_value": [{"_name": "a"}, {"_name": "b", "u": {"_type": "randint", "_value": [0, 4]}}]},
    "q": {"_type": "quniform", "_value": [0, 3, 0.5]},
}
NATIVE = [r for r in registry.TUNERS if r.contract == "population"]
"""The package's own search algorithms, as the registry declares them (the shared behaviour they
all keep is ``nni_opevo.testing.contract``'s, run by tests/test_contract.py)."""


def key_of(params):
    return json.dumps(params, sort_keys=True)


def distinct(run):
    return len({key_of(t.parameters) for t in run.trials})


@pytest.mark.parametrize("registered", NATIVE, ids=lambda r: r.name)
def test_minimize_mode_finds_a_low_point(registered):
    """A bowl over 64^3 grid points, minimized: at least HITS of the 19 points within distance
    sqrt(2) of the bottom are measured in 400 trials. Random search (400 distinct points of
    262,144) gets that many with the probability computed below."""
    space = {axis: {"_type": "randint", "_value": [0, 64]} for axis in "xyz"}
    bottom = {"x": 20, "y": 7, "z": 25}
    bowl = lambda p: 1.0 + sum((p[a] - bottom[a]) ** 2 for a in "xyz")  # noqa: E731
    near = 19  # the bottom, its 6 axis neighbours and 12 diagonal ones
    budget, hits = 400, 3
    assert hypergeometric_tail(hits, 64**3, near, budget) < ALPHA
    tuner = contract.factory(registered)(seed=0, optimize_mode="minimize")
    run = drive(tuner, space, bowl, budget, concurrency=2, seed=0)
    assert sum(t.result <= 3.0 for t in run.trials) >= hits


# ------------------------------------------------------------------ G-BFS


def test_gbfs_starts_untiled_and_expands_the_best_node():
    tuner = GBFSTuner(num_samples=3, seed=0)
    space = SearchSpace({"f": {"_type": "factor", "_value": [2**6, 3]}, "p": {"_type": "perm", "_value": 3}})
    tuner.update_search_space(space.raw)
    neighbours = lambda params: {key_of(space.to_trial(n)) for n in space.neighbours(space.from_trial(params))}  # noqa: E731
    pid = 0

    def propose(n):
        nonlocal pid
        out = [tuner.generate_parameters(pid + i) for i in range(n)]
        pid += n
        return out

    origin = propose(1)[0]
    assert origin == {"f": [64, 1, 1], "p": [0, 1, 2]}
    tuner.receive_trial_result(0, origin, 1.0)
    first = propose(3)  # rho random neighbours of the origin
    assert all(key_of(c) in neighbours(origin) for c in first)
    for i, (c, v) in enumerate(zip(first, [5.0, 2.0, 3.0])):
        tuner.receive_trial_result(1 + i, c, v)
    second = propose(3)  # neighbours of the best node (5.0)
    assert all(key_of(c) in neighbours(first[0]) for c in second)
    for i, c in enumerate(second):
        tuner.receive_trial_result(4 + i, c, 0.1)
    sampled = {key_of(c) for c in [origin, *first, *second]}
    unsampled = len(neighbours(first[2]) - sampled)
    third = propose(3)  # the best unexpanded node is now the 3.0 one: its unsampled neighbours first
    assert unsampled >= 1 and all(key_of(c) in neighbours(first[2]) for c in third[:unsampled])
    assert len({key_of(c) for c in [origin, *first, *second, *third]}) == 10


def test_gbfs_keeps_every_worker_busy_before_results_arrive():
    tuner = GBFSTuner(seed=0)
    space, _ = tiled_matmul(256, 256, 256)
    tuner.update_search_space(space)
    batch = tuner.generate_multiple_parameters(list(range(8)))  # nothing reported yet
    assert len(batch) == 8 == len({key_of(p) for p in batch})


# ------------------------------------------------------------------ N-A2C


def test_na2c_actions_are_neighbour_moves_of_the_best():
    """With T = 1 every proposal is one topology move from the best configuration so far."""
    space_json, f = tiled_matmul(1024, 1024, 1024, seed=3)
    space = SearchSpace(space_json)
    tuner = NA2CTuner(max_steps=1, seed=0)
    tuner.update_search_space(space_json)
    first = tuner.generate_parameters(0)
    assert first == space.to_trial(space.origin())
    tuner.receive_trial_result(0, first, f(first))
    for pid in range(1, 80):
        best = tuner.population.best()[0]
        params = tuner.generate_parameters(pid)
        assert space.from_trial(params) in list(space.neighbours(best))
        tuner.receive_trial_result(pid, params, f(params) + 0.01 * pid)


def test_actor_critic_gradients_match_finite_differences():
    rng = np.random.default_rng(0)
    net = ActorCritic(5, 7, 16, 1e-3, rng)
    x, mask, action, reward = rng.normal(size=5), np.array([1, 1, 0, 1, 1, 0, 1], bool), 3, 0.7
    _, value, _ = net.forward(x, mask)
    advantage = reward - value
    grads = net.gradients(x, mask, action, reward)
    for name, g in grads.items():
        p = net.params[name]
        for idx in list(np.ndindex(p.shape))[:12]:
            old = p[idx]
            p[idx] = old + 1e-6
            up = net.loss(x, mask, action, reward, advantage)
            p[idx] = old - 1e-6
            down = net.loss(x, mask, action, reward, advantage)
            p[idx] = old
            assert g[idx] == pytest.approx((up - down) / 2e-6, rel=1e-4, abs=1e-7), (name, idx)


def test_actor_critic_learns_to_prefer_the_rewarded_move():
    rng = np.random.default_rng(1)
    net = ActorCritic(4, 5, 32, 1e-2, rng)
    x, mask = np.ones(4), np.ones(5, bool)
    before = net.forward(x, mask)[0][2]
    for _ in range(200):
        a = int(rng.integers(5))
        net.update(x, mask, a, 1.0 if a == 2 else 0.0)
    assert net.forward(x, mask)[0][2] > max(0.5, 2 * before)
    critic = ActorCritic(4, 5, 32, 1e-2, rng)
    for _ in range(300):
        critic.update(x, mask, int(rng.integers(5)), 0.6)  # every move is worth 0.6
    assert critic.forward(x, mask)[1] == pytest.approx(0.6, abs=0.05)


# ------------------------------------------------------------------ AutoTVM


def test_autotvm_plans_a_diverse_batch_from_its_model():
    space_json, f = tiled_matmul(512, 512, 512, seed=4)
    space = SearchSpace(space_json)
    tuner = AutoTVMTuner(plan_size=32, sa_chains=64, sa_steps=100, seed=0)
    run = drive(tuner, space_json, f, 70, concurrency=1, seed=0)  # fits at 32 and 64 results
    assert tuner.model.trained and len(tuner.plan) == 32 - int(0.05 * 32)
    pool = [c for _, c in tuner.last_pool]
    assert len(pool) == 2 * len(tuner.plan)  # lambda = 2
    covered = lambda configs: len({(k, v) for c in configs for k, v in c.items()})  # noqa: E731
    plain_top = pool[: len(tuner.plan)]  # the annealer returns best first
    assert covered(tuner.plan) > covered(plain_top)
    assert all(not tuner.population.seen(space.identity(c)) or i < tuner._plan_pt for i, c in enumerate(tuner.plan))
    assert len(run.trials) == 70 == distinct(run)


def test_eq3_greedy_pick_trades_quality_for_coverage():
    pool = [{"a": 1, "b": 1}, {"a": 1, "b": 1}, {"a": 2, "b": 2}, {"a": 1, "b": 2}]
    scores = np.array([1.0, 0.9, 0.0, 0.5])
    assert diverse_batch(pool, scores, 2, alpha=0.0) == [0, 1]  # quality only: the plain top-2
    assert diverse_batch(pool, scores, 2, alpha=1.0) == [0, 2]  # the second pick adds two new values
    assert diverse_batch(pool, scores, 4, alpha=1.0) == [0, 1, 2, 3]  # the whole pool when it fits


def test_rank_cost_model_learns_the_order():
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 10, (400, 4))
    y = np.maximum(0, 20 - (x[:, 0] - 3) ** 2 - x[:, 1])  # zeros: failures
    model = XGBoostCostModel("rank", 32, seed=0)
    model.fit(x[:300], y[:300])
    held_out = model.predict(x[300:])
    assert average_recall(held_out, y[300:], 10) > 0.5 > average_recall(rng.normal(size=100), y[300:], 10)
    assert average_recall(np.arange(5.0), np.arange(5.0), 5) == 1.0


def test_autotvm_without_xgboost_says_how_to_install(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_xgboost(name, *args, **kwargs):
        if name == "xgboost":
            raise ImportError("No module named 'xgboost'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_xgboost)
    with pytest.raises(ImportError, match=r"pip install 'nni-opevo\[xgboost\]'"):
        AutoTVMTuner()


# ------------------------------------------------------------------ NoSE


def test_nose_measures_only_the_elite_of_each_generation():
    space_json, f = tiled_matmul(512, 512, 512, seed=5)
    tuner = NoSETuner(population_size=20, seed=0)  # M = 30 offspring, E = 6 elite
    tuner.update_search_space(space_json)
    first = [tuner.generate_parameters(i) for i in range(20)]
    for i, p in enumerate(first):
        tuner.receive_trial_result(i, p, f(p))
    space = SearchSpace(space_json)
    for g in range(5):
        proposals = [tuner.generate_parameters(100 + 6 * g + i) for i in range(6)]
        gen = tuner.generation
        assert len(gen.offspring) == 30 and len(gen.elite) == 6
        assert [space.from_trial(p) for p in proposals] == gen.elite
        elite_keys = {space.identity(c) for c in gen.elite}
        rest = [s for c, s in zip(gen.offspring, gen.predicted) if space.identity(c) not in elite_keys]
        assert min(s for c, s in zip(gen.offspring, gen.predicted) if space.identity(c) in elite_keys) >= max(rest)
        for i, p in enumerate(proposals):
            tuner.receive_trial_result(100 + 6 * g + i, p, f(p))


def test_knn_is_the_weighted_mean_of_eq_1_to_4():
    space = SearchSpace({"a": {"_type": "discrete", "_value": [1, 2, 3, 4]}, "b": {"_type": "choice", "_value": ["x", "y"]}})
    population = Population(space, Fitness("maximize"))
    data = {(1, 0): 4.0, (3, 0): 8.0, (4, 1): 0.0}  # internal (a index, b index) -> value
    for (a, b), v in data.items():
        population.add({("a",): a, ("b",): b}, v)
    knn = KnnSurrogate(population, k=2)
    query = {("a",): 0, ("b",): 0}  # features (1, 1)
    # Canberra to (2,1): 1/3; to (4,1): 3/5; to (5,2): 4/6 + 1/3 = 1.
    w = np.array([3.0, 5 / 3])
    scale = 8.0  # fitness weights are the values divided by the history's magnitude
    assert knn.predict([query])[0] == pytest.approx((w @ [4.0, 8.0]) / w.sum() / scale)
    assert knn.predict([{("a",): 3, ("b",): 0}])[0] == 8.0 / scale  # distance 0: the measured value itself


def test_knn_takes_the_earliest_measured_among_equally_near_neighbours():
    """Every configuration of ten two-valued parameters measured but the query, in a shuffled
    order: the ten one parameter away are equally near, and the k = 9 nearest are the nine of
    them measured first, on every CPU (numpy's argpartition breaks such ties by the machine's
    sort: its AVX-512 one and its AVX2 one differ on rows this long)."""
    params = [f"p{i}" for i in range(10)]
    space = SearchSpace({p: {"_type": "choice", "_value": ["x", "y"]} for p in params})
    population = Population(space, Fitness("maximize"))
    knn = KnnSurrogate(population, k=9)
    order = np.random.default_rng(0).permutation(np.arange(1, 1024))
    for value, bits in enumerate(order, start=1):
        config = {(p,): int(bits >> j & 1) for j, p in enumerate(params)}
        knn.observe(population.add(config, float(value)))
    near = [value for value, bits in enumerate(order, start=1) if bin(bits).count("1") == 1][:9]
    assert knn.predict([{(p,): 0 for p in params}])[0] == pytest.approx(np.mean(near) / len(order))


# ------------------------------------------------------------------ NNI built-ins through ChoiceView


@pytest.mark.parametrize("builtin,args,nested", [
    ("TPE", {"optimize_mode": "maximize", "seed": 0}, True),
    ("Random", {"seed": 0}, True),
    ("Evolution", {"optimize_mode": "maximize", "population_size": 16}, True),
    # NNI 3.0's Anneal (hyperopt 0.3 on numpy 2) crashes by itself on results of quniform and
    # nested-choice parameters ("truth value of an empty array"), with or without the view.
    ("Anneal", {"optimize_mode": "maximize"}, False),
])
def test_choice_view_maps_values_back_exactly(builtin, args, nested):
    plain = {"f": MIXED["f"], "p": MIXED["p"], "q": {"_type": "choice", "_value": [0, 0.5, 1.5]}}
    space_json = MIXED if nested else plain
    tuner = ChoiceViewTuner(tuner=builtin, tuner_args=args)
    run = drive(tuner, space_json, lambda p: float(p["f"][1] * (1 + p["p"][0]) + p["q"]), 80, concurrency=4, seed=0)
    assert len(run.trials) >= 60
    space = SearchSpace(space_json)
    for t in run.trials:
        assert space.to_trial(space.from_trial(t.parameters)) == t.parameters
        assert isinstance(t.parameters["f"], list) and isinstance(t.parameters["p"], list)


@pytest.mark.parametrize("builtin,args", [
    ("TPE", {"optimize_mode": "maximize", "seed": 0}),
    ("Random", {"seed": 0}),
    ("Evolution", {"optimize_mode": "maximize", "population_size": 8}),
    ("Anneal", {"optimize_mode": "maximize"}),
])
def test_choice_view_proposes_only_the_numbers_of_a_discrete(builtin, args):
    """``discrete`` is ours: NNI reads an unknown type as a uniform range between its first two
    values (TPE proposed unroll steps like 2.07 from [0, 125, 256], every kernel refused)."""
    space_json = {"f": {"_type": "factor", "_value": [16, 2]}, "unroll": {"_type": "discrete", "_value": [256, 0, 125]}}
    objective = lambda p: float(p["f"][0] + p["unroll"] / 100)  # noqa: E731
    run = drive(ChoiceViewTuner(tuner=builtin, tuner_args=args), space_json, objective, 30,
                concurrency=2, seed=0)
    assert len(run.trials) >= 15
    assert {t.parameters["unroll"] for t in run.trials} <= {0, 125, 256}


def test_choice_view_lists_factor_and_perm_as_string_choices():
    tuner = ChoiceViewTuner(tuner="Random", tuner_args={"seed": 1})
    captured = {}
    tuner.inner.update_search_space = lambda s: captured.update(s)  # see what the built-in receives
    tuner.update_search_space({"f": {"_type": "factor", "_value": [8, 2]}, "p": {"_type": "perm", "_value": ["i", "j"]},
                               "x": {"_type": "uniform", "_value": [0, 1]},
                               "d": {"_type": "discrete", "_value": [4, 1, 2]}})
    assert captured["d"] == {"_type": "choice", "_value": [1, 2, 4]}
    assert captured["f"] == {"_type": "choice", "_value": ["[8, 1]", "[4, 2]", "[2, 4]", "[1, 8]"]}
    assert captured["p"] == {"_type": "choice", "_value": ['["i", "j"]', '["j", "i"]']}
    assert captured["x"] == {"_type": "uniform", "_value": [0, 1]}


def test_choice_view_refuses_a_space_too_large_to_list():
    tuner = ChoiceViewTuner(tuner="TPE", max_choices=1000)
    with pytest.raises(ValueError, match=r"'order'.*perm has 5,040 values, more than max_choices=1,000"):
        tuner.update_search_space({"order": {"_type": "perm", "_value": 7}})


def test_choice_view_import_data_speaks_the_builtins_labels():
    tuner = ChoiceViewTuner(tuner="TPE", tuner_args={"optimize_mode": "maximize", "seed": 0})
    tuner.update_search_space(MIXED)
    tuner.import_data([{"parameter": {"f": [4, 4, 4], "p": [2, 1, 0], "c": {"_name": "a"}, "q": 1.5}, "value": 3.0}])
    params = tuner.generate_parameters(0)
    assert SearchSpace(MIXED).contains(SearchSpace(MIXED).from_trial(params))


def test_choice_view_survives_nni_mixing_up_ends_and_results():
    """NNI 3.0 may deliver a successful trial's end before its result, or a result twice
    (microsoft/nni#5726). NNI's TPE forgets a trial at its end and raises KeyError on a result
    it no longer knows, which stopped a real experiment: the view holds a successful end back
    until the result, and passes each trial's result on once."""
    tuner = ChoiceViewTuner(tuner="TPE", tuner_args={"optimize_mode": "maximize", "seed": 0})
    tuner.update_search_space(MIXED)
    params = [tuner.generate_parameters(i) for i in range(4)]
    tuner.trial_end(1, True)  # the end first: held back
    tuner.receive_trial_result(1, params[1], 2.0)
    tuner.receive_trial_result(1, params[1], 2.0)  # twice
    tuner.trial_end(2, False)
    tuner.receive_trial_result(2, params[2], 1.0)  # after a failed end
    tuner.receive_trial_result(3, params[3], 3.0)
    tuner.trial_end(3, True)
    tuner.receive_trial_result(3, params[3], 3.0)
    assert max(len(records) for records in tuner.inner._history.values()) == 2  # trials 1 and 3, once each
    assert not tuner.inner._running_params.keys() - {0}
    assert SearchSpace(MIXED).contains(SearchSpace(MIXED).from_trial(tuner.generate_parameters(4)))


# ------------------------------------------------------------------ classArgs


@pytest.mark.parametrize("validator,tuner,kwargs,name", [
    (GBFSClassArgsValidator, GBFSTuner, {"num_samples": 0}, "num_samples"),
    (NA2CClassArgsValidator, NA2CTuner, {"max_steps": 0}, "max_steps"),
    (NA2CClassArgsValidator, NA2CTuner, {"epsilon": 1.5}, "epsilon"),
    (NA2CClassArgsValidator, NA2CTuner, {"learning_rate": 0}, "learning_rate"),
    (AutoTVMClassArgsValidator, AutoTVMTuner, {"loss": "hinge"}, "loss"),
    (AutoTVMClassArgsValidator, AutoTVMTuner, {"diversity_ratio": 0.5}, "diversity_ratio"),
    (AutoTVMClassArgsValidator, AutoTVMTuner, {"plan_size": -1}, "plan_size"),
    (NoSEClassArgsValidator, NoSETuner, {"elite_ratio": 2.0}, "elite_ratio"),
    (NoSEClassArgsValidator, NoSETuner, {"k": 0}, "k"),
    (NoSEClassArgsValidator, NoSETuner, {"mutate_rate": -0.1}, "mutate_rate"),
    (ChoiceViewClassArgsValidator, ChoiceViewTuner, {"tuner": "NoSuchTuner"}, "tuner"),
    (ChoiceViewClassArgsValidator, ChoiceViewTuner, {"tuner": "Random", "tuner_args": {"seed": "x"}}, "tuner_args"),
    (ChoiceViewClassArgsValidator, ChoiceViewTuner, {"tuner": "TPE", "tuner_args": {"optimize_mode": "up"}}, "tuner_args"),
    (ChoiceViewClassArgsValidator, ChoiceViewTuner, {"max_choices": 0}, "max_choices"),
])
def test_bad_class_args_name_the_argument(validator, tuner, kwargs, name):
    with pytest.raises(ValueError, match=f"classArg '{name}'"):
        validator().validate_class_args(**kwargs)
    with pytest.raises(ValueError, match=f"classArg '{name}'"):
        tuner(**kwargs)


@pytest.mark.parametrize("validator", [GBFSClassArgsValidator, NA2CClassArgsValidator, AutoTVMClassArgsValidator,
                                       NoSEClassArgsValidator, ChoiceViewClassArgsValidator])
def test_validators_reject_unknown_class_args(validator):
    with pytest.raises(ValueError, match="classArg 'rho' is not known; known classArgs: "):
        validator().validate_class_args(rho=5)


def test_exhausted_tuner_raises_no_more_trials():
    tuner = GBFSTuner(seed=0)
    tuner.update_search_space({"c": {"_type": "choice", "_value": [1, 2]}})
    tuner.generate_parameters(0), tuner.generate_parameters(1)
    with pytest.raises(NoMoreTrialError):
        tuner.generate_parameters(2)


# ------------------------------------------------------------------ the shipped experiments


def test_every_shipped_experiment_builds_its_tuner_on_its_space():
    """experiments/<workload>/opevo[-cpu].yml: the tuner and classArgs NNI will build, on the
    search space it will get, can propose."""
    import importlib

    import yaml

    configs = sorted(ROOT.glob("experiments/*/*.yml"))
    stems = {p.stem.removesuffix("-cpu") for p in configs if p.parent.name not in ("quickstart", "scale-out")}
    assert stems == {"opevo"} and len(configs) == 2 * (len(configs) - 3) // 2 + 3
    for path in configs:
        config = yaml.safe_load(path.read_text())
        module, name = config["tuner"]["className"].rsplit(".", 1)
        tuner = getattr(importlib.import_module(module), name)(**config["tuner"].get("classArgs", {}))
        tuner.update_search_space(json.loads((path.parent / config["searchSpaceFile"]).read_text()))
        assert tuner.generate_parameters(0), path


# NNI's built-ins behind ChoiceView take about 8 s each here (every factor and perm listed as a choice).
@pytest.mark.parametrize("spec", [pytest.param(spec, marks=[pytest.mark.slow(seconds=10)] if catalog.CATALOG[spec].builtin
                                               else []) for spec in catalog.CATALOG])
def test_every_catalog_tuner_proposes_on_every_shipped_space(spec):
    """What ``--tuner`` generates on demand: each catalog tuner, with the classArgs an experiment
    gets, proposes on every workload's space (ChoiceView: every factor and perm small enough to list)."""
    for path in sorted(ROOT.glob("search_spaces/*.json")):
        tuner = catalog.build(spec, seed=0)
        tuner.update_search_space(json.loads(path.read_text()))
        assert tuner.generate_parameters(0), path


def test_every_shipped_experiment_passes_nnis_own_config_validation(tmp_path, monkeypatch):
    """What ``nnictl create`` checks first: NNI 3.0's ExperimentConfig loads and validates each
    file, the scale-out ones included (their SSH key path is pointed at a file that exists)."""
    import yaml
    from nni.experiment.config import ExperimentConfig

    root = ROOT
    key = tmp_path / "id_ed25519"
    key.write_text("not a real key: NNI only checks that the file exists")
    configs = sorted(root.glob("experiments/*/*.yml"))
    assert {"multi-gpu.yml", "remote.yml"} <= {p.name for p in configs}
    for path in configs:
        raw = yaml.safe_load(path.read_text())
        for machine in raw["trainingService"].get("machineList", []):
            machine["sshKeyFile"] = str(key)
        monkeypatch.chdir(path.parent)  # NNI resolves relative paths from the config's folder
        config = ExperimentConfig(**raw)
        config.validate()
        canonical = config.canonical_copy()
        assert Path(canonical.search_space_file).is_file(), path
        assert Path(canonical.trial_code_directory) == root, path
