"""Kernel Tuner caches as a benchmark objective: the reader on a tiny cache written here, every
tuner told the restrictions through the constraint hook, and Kernel Tuner's own strategies
replayed through the harness on the same file."""
from __future__ import annotations

import csv
import gzip
import itertools
import json

import pytest
from nni import NoMoreTrialError

from nni_opevo import OpEvoTuner, SearchSpace
from nni_opevo_bench import tuning_cache
from nni_opevo_bench.__main__ import main
from nni_opevo_bench.objectives import Cache
from nni_opevo_bench.report import fraction_at

pytest.importorskip("kernel_tuner")


def write_cache(path, failed=("8,b,3",)):
    """x in {1,2,4,8}, y in {a,b}, z fixed; the restriction keeps x*len(y) <= 8 and drops (2, b);
    one configuration failed to compile. GFLOP/s peaks at (4, a)."""
    params = {"x": [1, 2, 4, 8], "y": ["a", "b"], "z": [3]}
    cache = {}
    for x, y, z in itertools.product(*params.values()):
        if (x, y) == (2, "b"):
            continue  # restricted: absent
        key = f"{x},{y},{z}"
        time = 10.0 / (x if x <= 4 else 1) + (1.0 if y == "b" else 0.0)
        record = {"x": x, "y": y, "z": z, "time": "CompilationFailedConfig" if key in failed else time,
                  "compile_time": 500.0, "verification_time": 0, "benchmark_time": 100.0}
        if key not in failed:
            record["GFLOP/s"] = 1000.0 / time
        cache[key] = record
    data = {"device_name": "Tiny GPU", "kernel_name": "tiny_kernel", "problem_size": [64, 64], "tune_params_keys":
            list(params), "tune_params": params, "objective": "time", "cache": cache}
    with gzip.open(path, "wt") as handle:
        json.dump(data, handle)
    return path


def test_a_cache_reads_as_a_space_a_constraint_and_scores(tmp_path):
    path = str(write_cache(tmp_path / "tiny.json.gz"))
    cache = tuning_cache.load(path)
    assert cache.space == {"x": {"_type": "discrete", "_value": [1, 2, 4, 8]},
                           "y": {"_type": "choice", "_value": ["a", "b"]}, "z": {"_type": "discrete", "_value": [3]}}
    assert cache.grid_size == 8 and len(cache.entries) == 7
    assert tuning_cache.feasible({"x": 4, "y": "a", "z": 3}, cache=path)
    assert not tuning_cache.feasible({"x": 2, "y": "b", "z": 3}, cache=path)
    assert cache.optimum == pytest.approx(400.0)
    objective = Cache(path)
    assert objective({"x": 4, "y": "a", "z": 3}) == {"default": pytest.approx(0.4), "status": "NO_ERROR",
                                                     "seconds": pytest.approx(0.6)}
    assert objective({"x": 8, "y": "b", "z": 3})["status"] == "CompilationFailedConfig"
    assert objective({"x": 8, "y": "b", "z": 3})["default"] == 0.0
    assert objective.optimum == pytest.approx(0.4)


def test_a_tuner_told_the_restrictions_measures_only_cached_configurations(tmp_path):
    path = str(write_cache(tmp_path / "tiny.json.gz"))
    tuner = OpEvoTuner(seed=0, parents_size=2, offspring_size=2, constraint="nni_opevo_bench.tuning_cache:feasible",
                       constraint_args={"cache": path})
    space = SearchSpace(tuning_cache.load(path).space)
    tuner.update_search_space(space.raw)
    proposed = []
    for i in range(7):
        params = tuner.generate_parameters(i)
        proposed.append(params)
        tuner.receive_trial_result(i, params, Cache(path)(params))
    assert {(p["x"], p["y"]) for p in proposed} == {(x, y) for x in (1, 2, 4, 8) for y in "ab"} - {(2, "b")}
    with pytest.raises(NoMoreTrialError, match="proposed or refused"):
        tuner.generate_parameters(7)


def test_kernel_tuner_strategies_and_our_tuners_on_the_same_cache(tmp_path):
    path = str(write_cache(tmp_path / "tiny.json.gz", failed=()))
    out = tmp_path / "bench"
    main(["--objective", "cache", "--cache", path, "--tuners", "opevo", "gbfs", "kt:random_sample",
          "kt:genetic_algorithm", "--seeds", "2", "--budget", "5", "--concurrency", "1", "--budgets", "2", "5",
          "--out", str(out), "--no-progress"])
    with open(out / "trials.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    cache = tuning_cache.load(path)
    runs = {}
    for row in rows:
        runs.setdefault((row["tuner"], row["seed"]), []).append(row)
    assert set(runs) == {(t, s) for t in ("opevo", "gbfs", "kt:random_sample", "kt:genetic_algorithm") for s in "01"}
    for (tuner, _), run in runs.items():
        configs = [json.loads(r["configuration"]) for r in run]
        assert len({json.dumps(c, sort_keys=True) for c in configs}) == len(configs), "each configuration once"
        assert all(cache.feasible(c) for c in configs), f"{tuner} measured a restricted configuration"
        for row, config in zip(run, configs):  # the same scoring for every tuner
            assert float(row["tflops"]) == pytest.approx(cache.entries[cache.key(config)].score / 1e3)
        assert len(run) == 5 or tuner.startswith("kt:")
    name = f"{tmp_path.name}/tiny"  # a cache is named by its folder and file
    assert json.loads((out / "optima.json").read_text()) == {name: pytest.approx(0.4)}
    table = (out / "fractions.md").read_text()
    assert f"### {name}" in table and "| kt:genetic_algorithm | 2 |" in table and "after 5" in table
    assert (out / "fraction_vs_trials.png").read_bytes()[:4] == b"\x89PNG"
    best = [fraction_at(run, 5, 0.4) for (tuner, _), run in runs.items() if tuner == "opevo"]
    assert all(0 < b <= 1 for b in best)


def test_a_plans_prior_measurements_are_told_to_the_tuner_and_never_written(tmp_path):
    """A run told five of the seven configurations the restriction keeps (``Plan.prior``) measures
    the other two only, then finds the space exhausted: what was measured before is not repeated,
    and its rows are the run's own trials alone."""
    from nni_opevo_bench.runner import Plan, run

    objective = Cache(str(write_cache(tmp_path / "tiny.json.gz")))
    configs = [dict(zip(objective.cache.space, key)) for key in sorted(objective.cache.entries)]
    told = [{"parameter": c, "value": 1.0} for c in configs[:5]]
    out = tmp_path / "trials.csv"
    assert run(Plan([objective], ["opevo"], [0], 7, 1, prior={objective.workload: told}), out, progress=False)
    with open(out, newline="") as handle:
        rows = list(csv.DictReader(handle))
    measured = [json.loads(r["configuration"]) for r in rows]
    assert len(rows) == 2 and not any(m in [t["parameter"] for t in told] for m in measured)
    assert sorted(map(json.dumps, measured)) == sorted(json.dumps(c) for c in configs[5:])



def test_a_plan_made_in_code_meets_the_peers_rules_as_a_command_line_does(tmp_path):
    """MetaSchedule asked for a cache's space by a ``Plan`` (as the hub and the campaign make
    them, past the command line's check) is refused with the same line, and nothing measured."""
    from nni_opevo_bench.runner import Plan, run

    objective = Cache(str(write_cache(tmp_path / "tiny.json.gz")))
    with pytest.raises(ValueError, match="^metaschedule: TVM MetaSchedule tunes live kernels and networks only"):
        run(Plan([objective], ["metaschedule"], [0], 3, 1), tmp_path / "trials.csv", progress=False)
    assert not (tmp_path / "trials.csv").exists() or len((tmp_path / "trials.csv").read_text().splitlines()) <= 1

def test_a_kernel_tuner_strategy_needs_a_cache_and_a_known_name(tmp_path):
    with pytest.raises(SystemExit, match="replay a brute-forced cache only: --objective cache"):
        main(["--objective", "synthetic", "--tuners", "kt:random_sample", "--out", str(tmp_path), "--no-progress"])
    path = str(write_cache(tmp_path / "tiny.json.gz"))
    with pytest.raises(SystemExit, match="--tuners: kt:no_such: unknown Kernel Tuner strategy 'no_such'"):
        main(["--objective", "cache", "--cache", path, "--tuners", "kt:no_such", "--out", str(tmp_path / "o"),
              "--no-progress"])


def test_kernel_tuner_pays_for_a_recorded_failure_as_our_tuners_do(tmp_path):
    """Kernel Tuner's own replay treats a configuration that failed to compile as restricted
    (free to skip); the harness makes it cost an evaluation, as on real hardware and as it costs
    ours: random sampling of all seven recorded configurations meets the failure once."""
    path = str(write_cache(tmp_path / "tiny.json.gz"))
    out = tmp_path / "bench"
    main(["--objective", "cache", "--cache", path, "--tuners", "kt:random_sample", "random", "--seeds", "1",
          "--budget", "7", "--concurrency", "1", "--out", str(out), "--no-progress"])
    with open(out / "trials.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    for tuner in ("kt:random_sample", "random"):
        run = [r for r in rows if r["tuner"] == tuner]
        failed = [json.loads(r["configuration"]) for r in run if r["status"] != "NO_ERROR"]
        assert len(run) == 7 and failed == [{"x": 8, "y": "b", "z": 3}], tuner


def test_a_kernel_tuner_strategy_repeats_with_its_seed(tmp_path):
    """Kernel Tuner takes a seed but its strategies draw from the global generators; the harness seeds
    them for the run, so a run repeats exactly (in any process, after any other run) and leaves the
    caller's generators as they were."""
    import random

    import numpy as np

    from nni_opevo_bench import kernel_tuner_strategies

    cache = tuning_cache.load(str(write_cache(tmp_path / "tiny.json.gz")))
    before = random.getstate(), np.random.get_state()[1].copy()

    def order(seed: int, strategy: str = "kt:random_sample") -> list[tuple]:
        return [cache.key(e.parameters) for e in kernel_tuner_strategies.run(cache, strategy, seed, 8, False)]

    first = order(0)
    order(5, "kt:genetic_algorithm")
    assert order(0) == first and len(first) == 8
    assert order(1) != first  # one of 8! orders: a seed that repeats another's is a 1-in-40320 chance
    assert random.getstate() == before[0] and (np.random.get_state()[1] == before[1]).all()


def test_the_paired_table_is_computed_from_the_runs():
    """The mean of the cells and the paired differences against OpEvo come from the rows, the
    p-value from scipy.stats.wilcoxon: a reader regenerates every figure the decisions quote."""
    import math

    from scipy.stats import wilcoxon

    from nni_opevo_bench.report import paired_table

    def run(scores):
        return [{"index": str(i), "tflops": str(v)} for i, v in enumerate(scores)]

    opevo = {str(s): run([0.5, 0.9 + 0.01 * s]) for s in range(6)}
    other = {str(s): run([0.6, 0.7 + 0.02 * s]) for s in range(6)}
    table = paired_table({"w": {"opevo": opevo, "gbfs": other}}, {"w": 1.0}, [1, 2])
    diff = [(0.9 + 0.01 * s) - (0.7 + 0.02 * s) for s in range(6)]
    mean, error = sum(diff) / 6, (sum((d - sum(diff) / 6) ** 2 for d in diff) / 5) ** 0.5 / math.sqrt(6)
    assert f"| gbfs | w after 2 | 6 | {mean:+.4f} ± {error:.4f} | {wilcoxon(diff).pvalue:.3g} |" in table
    assert "| gbfs | w after 1 | 6 | -0.1000 ± 0.0000 |" in table
    assert f"| opevo | 2 | {(0.5 + sum(0.9 + 0.01 * s for s in range(6)) / 6) / 2:.4f} |" in table
