"""OpEvo under real ``nnictl`` experiments on loopback (NNI 3.0, local training service)."""
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import analytic_trial
import numpy as np
import psutil
import pytest
from nni_experiment import Experiment, nnictl
from stats import ALPHA, binomial_tail

from nni_opevo import SearchSpace
from trial_code.forked import IDLE_S

pytestmark = pytest.mark.slow
HERE = Path(__file__).parent
LAMBDA = 8


def config(workdir: Path, space: dict, tuner: dict, trials: int, concurrency: int = 4) -> dict:
    shutil.copy(HERE / "analytic_trial.py", workdir)
    (workdir / "space.json").write_text(json.dumps(space))
    return {
        "searchSpaceFile": "space.json",
        "trialCommand": f"{sys.executable} analytic_trial.py",
        "trialCodeDirectory": str(workdir),
        "trialConcurrency": concurrency,
        "maxTrialNumber": trials,
        "tuner": tuner,
        "trainingService": {"platform": "local"},
    }


def check_evolution(exp: Experiment, trials: int) -> None:
    status = exp.wait()
    assert status["status"] in ("DONE", "NO_MORE_TRIAL"), status
    params, results = exp.parameters(), exp.results()
    assert len(params) == trials and sorted(results) == sorted(params), "every trial reports a result"
    assert len({json.dumps(p, sort_keys=True) for p in params.values()}) == trials, "no configuration repeats"
    for pid, p in params.items():  # the tuner's data is consistent: each result is its own config's
        assert results[pid]["default"] == pytest.approx(analytic_trial.objective(p))
    # Evolution, not random search: the children (every trial after the first lambda) are valid
    # kernels far more often than uniform draws of this space are. The false-pass probability is
    # that of random search reaching the threshold, from the space's own valid share (+10 %).
    space = SearchSpace(analytic_trial.space())
    rng = np.random.default_rng(0)
    share = np.mean([analytic_trial.objective(space.to_trial(space.sample(rng))) > 0 for _ in range(20_000)])
    children = [results[pid]["default"] for pid in sorted(results)[LAMBDA:]]
    needed = 20
    assert binomial_tail(needed, len(children), 1.1 * share) < ALPHA
    assert sum(v > 0 for v in children) >= needed


@pytest.fixture
def workdir(tmp_path):
    return tmp_path


@pytest.mark.slow(seconds=140)
def test_class_name_experiment_evolves(workdir):
    tuner = {"className": "nni_opevo.OpEvoTuner", "codeDirectory": str(workdir), "classArgs": {"seed": 3}}
    with Experiment(workdir, config(workdir, analytic_trial.space(), tuner, 60, concurrency=6)) as exp:
        check_evolution(exp, 60)


@pytest.mark.slow(seconds=65)
def test_exhausted_space_ends_the_experiment_cleanly(workdir):
    space = {"f": {"_type": "factor", "_value": [4, 2]}, "p": {"_type": "perm", "_value": 2},
             "c": {"_type": "choice",
                   "_value": [{"_name": "a"}, {"_name": "b", "u": {"_type": "choice", "_value": [0, 1]}}]}}
    # 3 factorizations x 2 orders x 3 options = 18 configurations, fewer than maxTrialNumber.
    trial = workdir / "trial.py"
    trial.write_text("import nni\np = nni.get_next_parameter()\nnni.report_final_result(float(p['f'][0]))\n")
    cfg = config(workdir, space, {"className": "nni_opevo.OpEvoTuner", "codeDirectory": str(workdir)}, 30, concurrency=6)
    cfg["trialCommand"] = f"{sys.executable} trial.py"
    with Experiment(workdir, cfg) as exp:
        status = exp.wait()
        assert status["status"] == "TUNER_NO_MORE_TRIAL" and not status["errors"], status
        params = exp.parameters()
        assert len(params) == 18 == len({json.dumps(p, sort_keys=True) for p in params.values()})
        assert len(exp.results()) == 18


TUNERS = {
    "OpEvo": {"seed": 4, "mutate_rate": 0.6},
    "GBFS": {"seed": 1},
    "NA2C": {"seed": 1},
    "AutoTVM": {"seed": 1, "plan_size": 4, "sa_chains": 32, "sa_steps": 50},
    "NoSE": {"seed": 1, "population_size": 8},
    "ChoiceView": {"tuner": "TPE", "tuner_args": {"optimize_mode": "maximize", "seed": 1}},
}


class Registered(NamedTuple):
    config_dir: Path
    listed: str


@pytest.fixture(scope="session")
def registered(tmp_path_factory) -> Registered:
    """``nnictl algo register`` with the shipped registration.yml, once per test process, into an
    NNI config folder of its own, and what ``nnictl algo list`` then shows: each nnictl command
    spends 1.8 s of CPU importing NNI, and the tuners' experiments only read the registration."""
    config_dir = tmp_path_factory.mktemp("nni-config")
    env = {**os.environ, "NNI_CONFIG_DIR": str(config_dir)}
    nnictl("algo", "register", "--meta", str(HERE.parent / "nni_opevo" / "registration.yml"), env=env)
    return Registered(config_dir, nnictl("algo", "list", env=env))


@pytest.mark.parametrize("name", TUNERS)
@pytest.mark.slow(seconds=25)
def test_registered_tuner_runs_to_completion(workdir, registered, name):
    """Every tuner, by its registered name (``nnictl algo register`` with the shipped
    registration.yml), through a real nnictl experiment: all trials report and no configuration
    repeats (the learners fit along the way: AutoTVM at 4 results). OpEvo's evolution under
    nnictl is checked above, by class name."""
    trials = 12
    assert name in registered.listed, registered.listed
    tuner = {"name": name, "classArgs": TUNERS[name]}
    exp = Experiment(workdir, config(workdir, analytic_trial.space(), tuner, trials, concurrency=6),
                     {"NNI_CONFIG_DIR": str(registered.config_dir)})
    with exp:
        status = exp.wait()
        assert status["status"] in ("DONE", "NO_MORE_TRIAL") and not status["errors"], status
        params, results = exp.parameters(), exp.results()
        assert len(params) == trials and sorted(results) == sorted(params)
        assert len({json.dumps(p, sort_keys=True) for p in params.values()}) == trials
        for pid, p in params.items():
            assert results[pid]["default"] == pytest.approx(analytic_trial.objective(p))
        if name == "AutoTVM":
            assert "AutoTVM: model fitted on" in exp.dispatcher_log()


@pytest.mark.parametrize(
    "space,class_args,message",
    [
        ({"tile": {"_type": "factor", "_value": [0, 3]}}, {}, "search space parameter 'tile': factor: C must be >= 1"),
        ({"x": {"_type": "randint", "_value": [0, 9]}}, {"mutate_rate": 1.5}, "classArg 'mutate_rate'"),
    ],
    ids=["bad-space", "bad-class-arg"],
)
@pytest.mark.slow(seconds=15)
def test_bad_input_fails_the_experiment_with_a_clear_error(workdir, space, class_args, message):
    tuner = {"className": "nni_opevo.OpEvoTuner", "codeDirectory": str(workdir), "classArgs": class_args}
    with Experiment(workdir, config(workdir, space, tuner, 4)) as exp:
        status = exp.wait(timeout=120)
        assert status["status"] == "ERROR"
        # The tuner reported it to the NNI manager (NNI 3.0 logs the report and shows "Dispatcher
        # stream error" in check-status), and wrote it to the dispatcher log the web UI opens.
        reported = "Dispatcher error: nni-opevo tuner stopped the experiment: "
        assert reported in exp.manager_log(containing=reported)
        assert message in exp.manager_log(containing=message) and message in exp.dispatcher_log(containing=message)
        assert exp.parameters() == {}


class Quickstart(NamedTuple):
    folder: Path
    """The stopped experiment's."""
    results: dict
    servers: list[set[int]]
    """The worker servers of the experiment seen after its first and its second population."""


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory) -> Quickstart:
    """The README's CPU quickstart, as shipped but for its length, run once under a real nnictl
    with TVM trials. Three populations of 8 trials (the first random, two bred) instead of the
    shipped 48: the tests below check every trial's report, which the other 24 would only repeat."""
    import yaml

    workdir = tmp_path_factory.mktemp("quickstart")
    repo = HERE.parent
    cfg = yaml.safe_load((repo / "experiments/quickstart/opevo.yml").read_text())
    cfg["searchSpaceFile"] = str(repo / "experiments/quickstart" / cfg["searchSpaceFile"])
    cfg["trialCodeDirectory"] = cfg["tuner"]["codeDirectory"] = str(repo)
    cfg["trialCommand"] = cfg["trialCommand"].replace("python3", sys.executable, 1)
    cfg["maxTrialNumber"] = 3 * cfg["tuner"]["classArgs"]["parents_size"]
    with Experiment(workdir, cfg) as exp:
        servers = []  # seen a population apart, while trials come and go
        for reported in (cfg["maxTrialNumber"] // 3, 2 * cfg["maxTrialNumber"] // 3):
            exp.wait_for_results(reported, timeout=900, until_ended=False)
            servers.append(exp.worker_servers())
        status = exp.wait(timeout=900)
        assert status["status"] in ("DONE", "NO_MORE_TRIAL"), status
        results = exp.results()
        exp.stop()  # the export below reads the stopped experiment's database
    assert len(results) == cfg["maxTrialNumber"], "every trial reports, failures included"
    return Quickstart(workdir / "nni" / exp.id, results, servers)


@pytest.mark.slow(seconds=60)
def test_cpu_quickstart_experiment_measures_real_kernels(quickstart):
    results = quickstart.results
    trials = len(results)
    assert all(set(r) == {"default", "latency_ms", "status", "build_s", "error", "arch"} for r in results.values())
    built = {r["arch"] for r in results.values() if r["status"] == "NO_ERROR"}
    assert len(built) == 1 and "" not in built, "every kernel built for this machine's CPU, named"
    feasible = [r for r in results.values() if r["status"] != "INSTANTIATION_ERROR"]
    measured = [r for r in feasible if r["default"] > 0 and r["status"] == "NO_ERROR"]
    assert len(feasible) >= trials // 2
    assert len(measured) >= 0.9 * len(feasible), [r for r in feasible if r not in measured]


@pytest.mark.slow(seconds=1)
def test_each_trial_runs_and_reports_the_parameters_its_job_shows(quickstart):
    """NNI 3.0 hands parameters to whichever trial asks first (microsoft/nni#5726), so a trial's
    job record, which the web UI shows beside its result, could hold another trial's: each trial
    runs its own job's record (``trial_code.nni_channel``), so each reported parameter id is the
    one its job shows, and each of the tuner's records was run once."""
    import sqlite3

    with sqlite3.connect(quickstart.folder / "db" / "nni.sqlite") as db:
        shown = {job: json.loads(data)["parameter_id"] for job, data in db.execute(
            "SELECT trialJobId, data FROM TrialJobEvent WHERE event = 'RUNNING' AND data IS NOT NULL")}
        reported = dict(db.execute("SELECT trialJobId, CAST(parameterId AS INTEGER) FROM MetricData "
                                   "WHERE type = 'FINAL'"))
    assert reported == shown
    assert sorted(reported.values()) == list(range(len(quickstart.results)))


@pytest.mark.slow(seconds=20)
def test_export_rebuilds_and_remeasures_the_best_of_a_stopped_experiment(quickstart, tmp_path):
    """``nni_opevo_tools.export`` reads the stopped experiment's own database (NNI is not running),
    re-measures the top-k with more repeats and writes the winner with its LLVM source."""
    folder, results, _ = quickstart
    out = tmp_path / "export"
    done = subprocess.run([sys.executable, "-m", "nni_opevo_tools.export", str(folder), "--top-k", "3", "--repeat", "3",
                           "--min-repeat-ms", "5", "--out", str(out)], cwd=HERE.parent, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    best = json.loads((out / "best.json").read_text())
    top3 = sorted((r["default"] for r in results.values()), reverse=True)[:3]
    assert best["reported"] == results[best["parameter_id"]], "the winner's result is its own trial's"
    assert best["reported"]["default"] in top3
    assert best["remeasured"]["repeats"] == 3 and best["remeasured"]["tflops"] > 0
    assert best["workload"]["name"] == "MM_small" and best["target"]["kind"] == "llvm"
    assert best["target"]["mcpu"] == best["reported"]["arch"] != "", "the winner names the CPU it was built for"
    anchor = best["anchor"]  # the winner and the library timed interleaved, in rounds, in the same run
    assert anchor["library"].startswith("NumPy") and anchor["vendor_tflops"] > 0
    assert len(anchor["kernel_s"]) == len(anchor["library_s"]) == 7
    assert anchor["busy"] or anchor["ratio"] > 0
    assert "define" in (out / "best.ll").read_text(), "LLVM IR of the kernel"
    rows = [line for line in (out / "top_k.md").read_text().splitlines()[2:] if line]
    assert len(rows) == 3 and len(list((out / "kernels").glob("*.ll"))) == len(list((out / "kernels").glob("*.so"))) == 3
    assert f"parameter {best['parameter_id']}" in done.stdout
    assert re.search(r"\d+ trials reported \(median \d+\.\d s each, \d+ s from the first start to the last end\)",
                     done.stdout), done.stdout


@pytest.mark.slow(seconds=1)  # after the export above, the server has ended
def test_the_quickstarts_trials_fork_their_workers_from_one_server_that_ends_with_them(quickstart):
    """The trials fork their workers from the experiment's server, which has TVM loaded
    (``trial_code.forked``): one server, the same a population apart; and the stopped experiment
    leaves it running no longer than its idle time (here, after the export above)."""
    first, second = quickstart.servers
    assert len(first) == 1 and first == second, quickstart.servers
    alive = []
    for pid in first:
        with contextlib.suppress(psutil.NoSuchProcess):
            alive.append(psutil.Process(pid))
    _, still = psutil.wait_procs(alive, timeout=IDLE_S + 30)  # room for a loaded 2-core machine
    assert not still, "the experiment's worker server outlived it"


@pytest.mark.slow(seconds=70)
def test_cuda_mm1_experiment_spends_no_trial_on_the_static_limits(workdir):
    """The shipped CUDA MM1 experiment, build-only on this GPU-less machine: the tuner's
    constraint (the trial code's static check, H100 limits) refuses the configurations that
    break the launch limits, so no trial reports a static-limit INSTANTIATION_ERROR, and the
    dispatcher log counts the refusals."""
    import yaml

    repo = HERE.parent
    cfg = yaml.safe_load((repo / "experiments/MM1/opevo.yml").read_text())
    assert cfg["tuner"]["classArgs"]["constraint"] == "trial_code.constraint:feasible"
    cfg["searchSpaceFile"] = str(repo / "search_spaces/MM1.cuda.json")
    cfg["trialCodeDirectory"] = cfg["tuner"]["codeDirectory"] = str(repo)
    # The trials' own build limit (120 s): a configuration nvcc takes minutes over (an inner K loop of
    # 256 written out over 16 accumulators) ends BUILD_TIMEOUT, as in a user's experiment.
    cfg["trialCommand"] = cfg["trialCommand"].replace("python3", sys.executable, 1) + " --build-only"
    cfg["trialConcurrency"], cfg["maxTrialNumber"] = 2, 8
    cfg.pop("trialGpuNumber")
    cfg["trainingService"] = {"platform": "local"}
    with Experiment(workdir, cfg) as exp:
        status = exp.wait(timeout=900)
        assert status["status"] in ("DONE", "NO_MORE_TRIAL"), status
        results = exp.results()
        log = exp.dispatcher_log()
    assert len(results) == 8
    statuses = [r["status"] for r in results.values()]
    assert "INSTANTIATION_ERROR" not in statuses, results
    assert statuses.count("NO_ERROR") >= 6, results  # built and nvcc-compiled
    assert "OpEvo: the constraint refused" in log, log[-2000:]


@pytest.mark.slow(seconds=15)
def test_a_raising_constraint_ends_the_experiment_with_its_message(workdir):
    shutil.copy(HERE / "constraints.py", workdir)
    tuner = {"className": "nni_opevo.OpEvoTuner", "codeDirectory": str(workdir),
             "classArgs": {"constraint": "constraints:raises"}}
    with Experiment(workdir, config(workdir, analytic_trial.space(), tuner, 4)) as exp:
        status = exp.wait(timeout=120)
        assert status["status"] == "ERROR"
        raised = "the constraint constraints:raises raised KeyError: 'no such knob'"
        assert raised in exp.manager_log(containing=raised)
        assert exp.parameters() == {}


@pytest.mark.slow(seconds=90)
def test_stop_and_resume_mid_run_loses_and_repeats_nothing(workdir):
    """``nnictl stop`` while trials run, then ``nnictl resume``: the results NNI kept come back
    (import_data), the configurations whose trials the stop cancelled come back from the
    tuner's journal, and none of them is proposed again."""
    (workdir / "slow_trial.py").write_text(  # NNI's trial protocol as analytic_trial speaks it, without nni's import
        "import time, analytic_trial\n"
        "from trial_code import nni_channel\n"
        "p = nni_channel.next_parameters()\n"
        "time.sleep(3)\n"
        "nni_channel.report_final({'default': analytic_trial.objective(p)})\n")
    shutil.copy(HERE / "analytic_trial.py", workdir)
    tuner = {"className": "nni_opevo.OpEvoTuner", "codeDirectory": str(workdir), "classArgs": {"seed": 5}}
    cfg = config(workdir, analytic_trial.space(), tuner, 16, concurrency=4)
    cfg["trialCommand"] = f"{sys.executable} slow_trial.py"
    exp = Experiment(workdir, cfg)
    with exp:
        exp.wait_for_results(6, timeout=300, until_ended=False)
        before = exp.parameters()
        exp.nnictl("stop", str(exp.id))
        exp.resume()
        status = exp.wait(timeout=600)
        assert status["status"] in ("DONE", "NO_MORE_TRIAL"), status
        params, results = exp.parameters(), exp.results()
        log = exp.dispatcher_log()
    keys = [json.dumps(p, sort_keys=True) for p in params.values()]
    assert len(keys) == len(set(keys)), "a configuration was proposed twice across the stop"
    assert set(before) <= set(params) and len(params) > len(before)
    assert "resume:" in log and "journalled configurations had no result yet" in log
    for pid, result in results.items():
        assert result["default"] == pytest.approx(analytic_trial.objective(params[pid]))
