"""The whole benchmark-hub table (``nni-opevo hub``): the mode without the constraint for every
kind of tuner, Optuna's samplers behind an NNI tuner, and the command end to end on a tiny cache
(slices, resume, the report regenerated from fractions.csv.gz)."""
from __future__ import annotations

import csv
import gzip
import importlib.util
import json
import sys

import pytest
from test_tuning_cache import write_cache

from nni_opevo.testing.dispatch import drive
from nni_opevo_bench import __main__ as bench
from nni_opevo_bench import hub, kernel_tuner_strategies, optuna_peers, tuner_specs, tuning_cache
from nni_opevo_bench.objectives import Cache
from nni_opevo_bench.table import read_rows

pytest.importorskip("kernel_tuner")
pytest.importorskip("optuna")

RESTRICTED = {"x": 2, "y": "b", "z": 3}
NO_TORCH = importlib.util.find_spec("torch") is None
"""Optuna's GPSampler needs PyTorch, which the test extras leave out: without it, it is refused in one line."""


@pytest.fixture
def tiny(tmp_path):
    folder = tmp_path / "hub" / "tiny_kernel"
    folder.mkdir(parents=True)
    return str(write_cache(folder / "GPU.json.gz"))


def test_without_the_constraint_a_restricted_configuration_is_a_failed_evaluation(tiny):
    objective = Cache(tiny, constrained=False)
    assert objective.constraint == {} and objective.workload == "tiny_kernel/GPU"
    report = objective(RESTRICTED)
    assert report["status"] == "RESTRICTED" and report["default"] == 0.0
    assert report["seconds"] == pytest.approx(0.5)  # the median compile time: built before it fails
    assert Cache(tiny).constraint["constraint"] == "nni_opevo_bench.tuning_cache:feasible"


def test_kernel_tuner_without_the_restrictions_pays_for_a_restricted_configuration(tiny):
    cache = tuning_cache.load(tiny)
    free = kernel_tuner_strategies.run(cache, "kt:random_sample", 0, 8, constrained=False)
    assert len(free) == 8 and RESTRICTED in [e.parameters for e in free]
    told = kernel_tuner_strategies.run(cache, "kt:random_sample", 0, 8)
    assert len(told) == 7 and RESTRICTED not in [e.parameters for e in told]


@pytest.mark.parametrize("sampler", optuna_peers.SAMPLERS)
@pytest.mark.parametrize("constrained", [True, False])
@pytest.mark.parametrize("concurrency", [1, 8])
def test_optuna_samplers_run_under_the_driver_once_per_configuration(tiny, sampler, constrained, concurrency):
    if sampler == "gp":
        pytest.importorskip("torch")  # Optuna's GPSampler runs on PyTorch, which the test extras leave out
    objective = Cache(tiny, constrained=constrained)
    tuner = optuna_peers.build(f"optuna:{sampler}", 0, extra=objective.constraint)
    run = drive(tuner, objective.space, objective, 20, concurrency, seed=0,
                duration=lambda params, report: float(report["seconds"]))
    configs = [json.dumps(t.parameters, sort_keys=True) for t in run.trials]
    assert len(configs) == len(set(configs)), "no evaluation spent on a repeat"
    assert len(configs) == (7 if constrained else 8) and run.exhausted
    assert (json.dumps(RESTRICTED, sort_keys=True) in configs) is not constrained
    assert max(t.result["default"] for t in run.trials) == pytest.approx(0.4)


def test_optuna_tpe_lies_about_the_trials_in_flight_only():
    """TPE's constant liar: with trials in flight they count as the worst results, which changes
    the proposals; one at a time nothing is in flight, and the proposals are those without it."""
    space = {"x": {"_type": "discrete", "_value": list(range(16))}, "y": {"_type": "discrete", "_value": list(range(16))},
             "c": {"_type": "choice", "_value": ["a", "b", "c"]}}

    def objective(params):
        return {"default": 100.0 - (params["x"] - 11) ** 2 - (params["y"] - 4) ** 2 - 5 * (params["c"] != "b")}

    def proposals(spec, concurrency):
        run = drive(optuna_peers.build(spec, 0), space, objective, 40, concurrency, seed=0,
                    duration=lambda params, report: 1.0, charge_tuner_time=False)
        return [json.dumps(t.parameters, sort_keys=True) for t in run.trials]

    assert proposals("optuna:tpe", 1) == proposals("optuna:tpe:constant_liar=false", 1)
    assert proposals("optuna:tpe", 8) != proposals("optuna:tpe:constant_liar=false", 8)


def test_a_kernel_tuner_run_that_stopped_early_is_not_run_again(tiny, tmp_path, monkeypatch):
    """A strategy that stops before the budget left a shorter run; the same command again keeps
    it as it is (some strategies do not repeat a run with the same seed, so a second call would
    append another run's evaluations)."""
    from nni_opevo_bench.runner import Plan, run

    calls = []
    real = kernel_tuner_strategies.run

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)[:3]  # stops after three evaluations

    monkeypatch.setattr(kernel_tuner_strategies, "run", counted)
    plan = Plan([Cache(tiny)], ["kt:random_sample"], [0], 8, 1)
    out = tmp_path / "rows.csv"
    run(plan, out, progress=False)
    first = out.read_text()
    run(plan, out, progress=False)
    assert len(calls) == 1 and out.read_text() == first and len(first.strip().splitlines()) == 1 + 3


def test_optuna_takes_nni_types_and_refuses_factor_naming_it():
    tuner = optuna_peers.build("optuna:tpe", 1)
    tuner.update_search_space({"a": {"_type": "randint", "_value": [2, 5]}, "b": {"_type": "uniform", "_value": [0, 1]},
                               "c": {"_type": "choice", "_value": ["x", 3]},
                               "d": {"_type": "qloguniform", "_value": [1, 100, 5]},
                               "e": {"_type": "discrete", "_value": [16, 2, 8]}})
    for i in range(15):
        p = tuner.generate_parameters(i)
        assert 2 <= p["a"] < 5 and 0 <= p["b"] <= 1 and p["c"] in ("x", 3) and p["d"] % 5 == 0 and p["e"] in (2, 8, 16)
        tuner.receive_trial_result(i, p, {"default": p["b"]})
    with pytest.raises(ValueError, match="parameter 'f'.*not 'factor'"):
        tuner.update_search_space({"f": {"_type": "factor", "_value": [64, 3]}})
    with pytest.raises(ValueError, match="unknown Optuna sampler 'nope'"):
        optuna_peers.build("optuna:nope", 0)


def test_optuna_resumes_from_imported_results(tiny):
    objective = Cache(tiny)
    first = optuna_peers.build("optuna:tpe", 0, extra=objective.constraint)
    run = drive(first, objective.space, objective, 4, 1, seed=0)
    history = [{"parameter": t.parameters, "value": t.result} for t in run.trials]
    second = optuna_peers.build("optuna:tpe", 0, extra=objective.constraint)
    rest = drive(second, objective.space, objective, 10, 1, seed=0, history=history, first_id=4)
    seen = [json.dumps(t.parameters, sort_keys=True) for t in run.trials + rest.trials]
    assert len(seen) == len(set(seen)) == 7


def _lines(path):
    """The packed table's lines as written (``read_rows`` gives them parsed)."""
    with gzip.open(path, "rt") as handle:
        return handle.read().splitlines()


@pytest.mark.slow(seconds=10)
def test_the_hub_command_runs_every_slice_resumes_and_regenerates_its_report(tiny, tmp_path):
    out, rows = tmp_path / "out", tmp_path / "rows"
    argv = ["--out", str(out), "--rows", str(rows), "--hub", str(tmp_path / "hub"), "--tuners", "opevo", "random",
            "optuna:tpe", "kt:random_sample", "--seeds", "2", "--budget", "6", "--budgets", "3", "6", "--workers", "1"]
    hub.main(argv)
    for piece in ("c1-constrained", "c8-constrained", "c1-free", "c8-free"):
        trials = read_rows(rows / piece / "tiny_kernel" / "GPU.csv")
        tuners = {r["tuner"] for r in trials}
        assert tuners == ({"opevo", "random", "optuna:tpe"} | ({"kt:random_sample"} if piece.startswith("c1") else set()))
        assert all(r["status"] != "RESTRICTED" for r in trials) or piece.endswith("free")
    before = (out / "README.md").read_text()
    sizes = {p: p.stat().st_size for p in rows.glob("*/*/*.csv")}
    assert len(sizes) == 4
    assert sorted(p.name for p in out.iterdir()) == ["README.md", hub.FIGURE, "fractions.csv.gz", "run.json"]
    hub.main(argv)  # everything is in the rows: nothing runs again
    assert {p: p.stat().st_size for p in rows.glob("*/*/*.csv")} == sizes
    fractions = read_rows(out / hub.FRACTIONS)
    assert len(fractions) == 2 * 2 * (4 + 3 + 4 + 3)  # budgets x seeds x the tuners of each slice
    for slice_name in ("c1-constrained", "c8-constrained", "c1-free", "c8-free"):
        assert f"## {slice_name}: OpEvo leads " in before
    assert "| tiny_kernel/GPU | " in before
    means = next(line for line in before.splitlines() if line.startswith("| kt:random_sample | "))
    assert means.count(hub.SEQUENTIAL) == 2, "its one-at-a-time runs stand in the two slices with 8 in flight"
    assert "| opevo | " in before and "Wilcoxon" in before
    fewer = argv[:argv.index("--seeds") + 1] + ["1"] + argv[argv.index("--seeds") + 2:]
    hub.main(fewer)  # rows of more seeds than asked for: the table holds the seeds asked for, every tuner alike
    assert {r["seed"] for r in read_rows(out / hub.FRACTIONS)} == {"0"}
    assert {p: p.stat().st_size for p in rows.glob("*/*/*.csv")} == sizes
    hub.main(argv)
    last = (out / "README.md").read_text()  # as ``before``, but for the run's time, which may be a minute on
    assert [line for line in last.splitlines() if " UTC" not in line] == \
        [line for line in before.splitlines() if " UTC" not in line]
    for path in rows.glob("*/*/*.csv"):
        path.unlink()
    (out / hub.FIGURE).unlink()
    hub.main(argv + ["--report-only"])
    assert (out / "README.md").read_text() == last and (out / hub.FIGURE).stat().st_size > 10_000
    assert f"]({hub.FIGURE})" in before
    # Another machine, without these rows, adds a seed: the runs fractions.csv.gz holds are kept, not run again.
    published = _lines(out / hub.FRACTIONS)
    more = argv[:argv.index("--seeds") + 1] + ["3"] + argv[argv.index("--seeds") + 2:]
    hub.main(more)
    assert {r["seed"] for p in rows.glob("*/*/*.csv") for r in read_rows(p)} == {"2"}
    grown = _lines(out / hub.FRACTIONS)
    assert [line for line in grown if line.split(",")[3] != "2"] == published and len(grown) - 1 == 3 * 2 * 14
    invocations = json.loads((out / "run.json").read_text())["invocations"]
    assert len(invocations) == 2 and invocations[-1]["kept"] == 2 * 14
    assert "28 runs kept" in (out / "README.md").read_text()


def test_the_hub_command_refuses_bad_input_in_one_line(tmp_path, capsys):
    for argv, message in ((["--tuners", "optuna:nope"], "unknown Optuna sampler"),
                          (["--hub", str(tmp_path / "none")], "no cache files"),
                          (["--budget", "10", "--budgets", "20"], "past --budget"),
                          *([(["--tuners", "optuna:gp"], "pip install torch")] if NO_TORCH else [])):
        with pytest.raises(SystemExit):
            hub.main(["--out", str(tmp_path / "o"), "--rows", str(tmp_path / "r"), *argv])
        assert message in capsys.readouterr().err


def test_the_benchmark_command_runs_optuna_samplers_on_a_cache(tiny, tmp_path):
    out = tmp_path / "out"
    bench.main(["--objective", "cache", "--cache", tiny, "--tuners", "optuna:tpe", "optuna:cmaes", "opevo", "--seeds", "1",
                "--budget", "6", "--budgets", "3", "6", "--out", str(out), "--no-progress"])
    assert {r["tuner"] for r in read_rows(out / "trials.csv")} == {"optuna:tpe", "optuna:cmaes", "opevo"}
    assert "optuna:tpe" in (out / "fractions.md").read_text()


def test_the_benchmark_command_refuses_an_optuna_sampler_it_cannot_run_in_one_line(tiny, tmp_path):
    kernels = "take NNI's parameter types, not factor or perm, so the caches' spaces only: --objective cache"
    refusals = [("optuna:nope", "cache", "unknown Optuna sampler 'nope'"),
                *(("optuna:tpe", objective, kernels) for objective in ("synthetic", "live", "recorded", "network"))]
    if NO_TORCH:
        refusals.append(("optuna:gp", "cache", "Optuna's GPSampler fits its model with PyTorch: pip install torch"))
    for spec, objective, message in refusals:
        with pytest.raises(SystemExit) as e:
            bench.main(["--objective", objective, "--cache", tiny, "--tuners", spec, "--out", str(tmp_path / "o")])
        assert message in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "o").exists()  # refused before anything ran or was written


def test_a_peer_whose_package_is_missing_is_refused_in_one_line_by_both_commands(tiny, tmp_path, monkeypatch, capsys):
    """Without the ``kerneltuner`` or ``optuna`` extra, ``benchmark`` and ``hub`` name the spec and
    the pip command in one line, before anything is run or written."""
    for module, spec, extra in (("kernel_tuner", "kt:pso", "[kerneltuner]"), ("optuna", "optuna:tpe", "[optuna]")):
        monkeypatch.setitem(sys.modules, module, None)  # ``import`` of it raises ImportError
        with pytest.raises(SystemExit) as e:
            bench.main(["--objective", "cache", "--cache", tiny, "--tuners", spec, "--out", str(tmp_path / "o")])
        assert str(e.value).startswith(f"--tuners: {spec}: ") and extra in str(e.value)
        assert "\n" not in str(e.value)
        with pytest.raises(SystemExit):
            hub.main(["--out", str(tmp_path / "o"), "--rows", str(tmp_path / "r"), "--tuners", spec])
        err = capsys.readouterr().err
        assert f"--tuners: {spec}: " in err and extra in err and "Traceback" not in err
        monkeypatch.delitem(sys.modules, module)
    assert not (tmp_path / "o").exists()


def test_each_command_refuses_a_peer_on_an_objective_it_cannot_tune(tiny, tmp_path, capsys):
    for spec, objective, rule in (("kt:pso", "synthetic", "replay a brute-forced cache only: --objective cache"),
                                  ("metaschedule", "cache", "tunes live kernels and networks only"),
                                  ("opevoo", "cache", "unknown tuner 'opevoo'")):
        with pytest.raises(SystemExit) as e:
            bench.main(["--objective", objective, "--cache", tiny, "--tuners", spec, "--out", str(tmp_path / "o")])
        assert str(e.value).startswith(f"--tuners: {spec}: ") and rule in str(e.value), e.value
    with pytest.raises(SystemExit):  # the hub's spaces are caches: MetaSchedule has none to tune
        hub.main(["--out", str(tmp_path / "o"), "--rows", str(tmp_path / "r"), "--tuners", "metaschedule"])
    assert "--tuners: metaschedule: TVM MetaSchedule tunes live kernels" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_each_peer_is_refused_on_exactly_the_objectives_its_help_leaves_out(capsys):
    """A peer family's objectives are declared once (``tuner_specs.PEERS``): the check refuses a
    spec on every other objective, naming the family and the ones it tunes, and both commands'
    ``--tuners`` help say the same."""
    specs = ["kt:pso", "optuna:tpe", "metaschedule"]
    assert [next(p for p in tuner_specs.PEERS if p.names(s)) for s in specs] == list(tuner_specs.PEERS)
    for spec, peer in zip(specs, tuner_specs.PEERS):
        for objective in set(tuner_specs.OBJECTIVES) - set(peer.objectives):
            with pytest.raises(ValueError) as e:
                tuner_specs.check(spec, objective)
            assert str(e.value).startswith(f"{spec}: {peer.family} {peer.rule}: --objective ")
            assert all(o in str(e.value) for o in peer.objectives)
    with pytest.raises(SystemExit):
        bench.main(["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert all(p.describe() in shown for p in tuner_specs.PEERS)
    with pytest.raises(SystemExit):
        hub.main(["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert all((p.describe(False) in shown) == ("cache" in p.objectives) for p in tuner_specs.PEERS)


def test_a_change_is_paired_run_by_run_per_slice_and_space(tmp_path, capsys):
    """``nni-opevo change``: one tuner's runs in two fractions.csv.gz, each run by its mean over the
    budgets, after minus before; runs only one file holds, and other tuners, are left out."""
    from nni_opevo_bench import change

    def write(path, rows):
        with open(path, "w", newline="") as handle:
            writer = csv.DictWriter(handle, ["slice", "space", "tuner", "seed", "budget", "fraction"])
            writer.writeheader()
            writer.writerows(dict(zip(writer.fieldnames, row)) for row in rows)

    before, after = tmp_path / "before.csv", tmp_path / "after.csv"
    write(before, [("c1-free", "g/a", "opevo", s, b, 0.5) for s in "012" for b in (25, 50)]
          + [("c1-free", "g/a", "gbfs", "0", 25, 0.9), ("c8-free", "g/a", "opevo", "0", 25, 0.7)])
    write(after, [("c1-free", "g/a", "opevo", s, b, 0.5 + 0.1 * int(s) + (0.2 if b == 50 else 0.0))
                  for s in "012" for b in (25, 50)] + [("c1-free", "g/a", "gbfs", "0", 25, 0.1)])
    change.main([str(before), str(after)])
    out = capsys.readouterr().out
    # Runs: seed 0 +0.1 (mean of 0 and 0.2), seed 1 +0.2, seed 2 +0.3; the c8 run is in one file only.
    assert "| all | 3 | +0.2000 ± 0.0577 |" in out and "| c1-free g/a | 3 | +0.2000 ± 0.0577 |" in out
    assert "c8-free" not in out and "Cells (slice, space, budget): 2 up, 0 down, 0 level, of 2." in out
    with pytest.raises(SystemExit):
        change.main([str(tmp_path / "none.csv"), str(after)])
    assert "no such file" in capsys.readouterr().err
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(SystemExit):
        change.main([str(tmp_path / "other.csv"), str(after)])
    assert "not a fractions.csv.gz of nni-opevo hub" in capsys.readouterr().err


def test_a_change_shows_the_spaces_it_was_chosen_on_apart_from_the_others(tmp_path, capsys):
    """``--chosen``: the chosen spaces' runs and the others', over all slices and per slice, so a
    change chosen on part of the spaces is judged on the rest; a space the files lack is one line."""
    from nni_opevo_bench import change

    rows = [("slice", "space", "tuner", "seed", "budget", "fraction")]
    before, after = tmp_path / "before.csv", tmp_path / "after.csv"
    before.write_text("\n".join(",".join(map(str, r)) for r in rows + [
        (sl, sp, "opevo", s, 25, 0.5) for sl in ("c1-free", "c8-free") for sp in ("g/a", "g/b", "c/c") for s in "01"]))
    gain = {"g/a": 0.2, "g/b": 0.1, "c/c": 0.0}
    after.write_text("\n".join(",".join(map(str, r)) for r in rows + [
        (sl, sp, "opevo", s, 25, 0.5 + gain[sp] + 0.01 * int(s)) for sl in ("c1-free", "c8-free")
        for sp in ("g/a", "g/b", "c/c") for s in "01"]))
    change.main([str(before), str(after), "--chosen", "g/a", "g/b"])
    out = capsys.readouterr().out
    assert "| chosen | 8 | +0.1550 ± 0.0190 |" in out and "| the others | 4 | +0.0050 ± 0.0029 |" in out
    assert "| c8-free chosen | 4 | +0.1550 ± 0.0290 |" in out and "| c1-free the others | 2 | +0.0050 ± 0.0050 |" in out
    change.main([str(before), str(after)])
    assert "chosen" not in capsys.readouterr().out
    with pytest.raises(SystemExit):
        change.main([str(before), str(after), "--chosen", "g/a", "gemm/RTX_2080_Ti"])
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith(
        "nni-opevo change: error: --chosen: gemm/RTX_2080_Ti is not a space of these files (they hold c/c, g/a, g/b)")
