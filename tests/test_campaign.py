"""The GPU campaign here where no GPU is visible: the dry run walks every stage with CUDA builds
compiled by nvcc; a call cut off at any moment keeps every finished row and the next call resumes
with nothing done twice; the call's hard limit, the folder's lock and device, the preflight's
refusals and the plan of device calls."""
from __future__ import annotations

import csv
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from nni_opevo_bench import campaign, campaign_calls, preflight
from trial_code import targets

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None or targets.cuda().has_device,
                                reason="needs nvcc (the CUDA toolkit) and no visible GPU (the real campaign would run)")


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _csv(path):
    with open(path) as handle:
        return list(csv.DictReader(handle))


def _campaign(out, *args):
    return subprocess.Popen([sys.executable, "-m", "nni_opevo_bench.campaign", "--dry-run", "--out", str(out),
                             "--concurrency", "2", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)


@pytest.mark.slow(seconds=150)
@needs_nvcc
def test_a_call_killed_mid_trial_keeps_its_rows_and_the_next_resumes_without_repeats(tmp_path, capsys):
    out = tmp_path / "campaign"
    # The device tool kills a call at its limit, whatever runs: here mid-correctness, two builds in flight.
    call = _campaign(out)
    deadline = time.monotonic() + 600  # a bound, not a timing claim: a loaded 2-core machine builds slowly
    while time.monotonic() < deadline and not (
            (out / "correctness.jsonl").exists() and len((out / "correctness.jsonl").read_text().splitlines()) >= 3):
        time.sleep(0.2)
    os.killpg(call.pid, signal.SIGKILL)
    call.wait()
    kept = _lines(out / "correctness.jsonl")
    assert 3 <= len(kept) < 14 and all(r["device"] == campaign.gpu_name(targets.cuda()) for r in kept)
    state = json.loads((out / "campaign.json").read_text())
    assert state["stages"]["anchors"]["complete"] and "correctness" not in state["stages"]
    assert "ended" not in state["calls"][-1]

    campaign.main(["--dry-run", "--out", str(out), "--concurrency", "2"])
    state = json.loads((out / "campaign.json").read_text())
    assert all(state["stages"][stage]["complete"] for stage in campaign.STAGES) and len(state["calls"]) == 2
    checked = _lines(out / "correctness.jsonl")
    keys = Counter((r["workload"], r["kind"], r["index"]) for r in checked)
    assert len(keys) == 15 and set(keys.values()) == {1}  # 7 workloads, one admitted and one probe each, and
    assert ("examples.operators:layer_norm", "admitted", 0) in keys  # a user's operator, one admitted, once
    assert checked[:len(kept)] == kept  # what the killed call finished is kept as it was
    assert all(r["status"] == "NO_ERROR" and r["latency_ms"] is None for r in checked if r["kind"] == "admitted")
    assert all(r["rule"] and r["params"] for r in checked if r["kind"] == "probe")
    anchors = json.loads((out / "anchors.json").read_text())
    gelu, layer_norm = (next(name for name in campaign.GPU_OPERATORS if name.split()[0] == f"examples.operators:{spec}")
                        for spec in ("matmul_bias_gelu", "layer_norm"))  # the users' operators at a GPU's shapes
    assert [(a["workload"], a["tf32"]) for a in anchors] == [("MM1", False), ("MM1", True), ("C1", False), ("C1", True),
                                                              (gelu, False), (layer_norm, False)]  # their libraries
    assert all(a["library"] is None and "dry run" in a["why"] for a in anchors)
    goals = Counter((r["workload"], r["tuner"], r["seed"]) for r in _csv(out / "goals.csv"))
    assert goals == {("MM1", "opevo", "0"): 3, ("C1", "opevo", "0"): 3}  # 2 and 1, carried on to 3 (the pursuit)
    assert state["pursuit_steps"] == ["C1 opevo x1 seed(s) @2", "MM1 opevo x1 seed(s) @3", "C1 opevo x1 seed(s) @3"]
    operators = Counter((r["workload"], r["status"]) for r in _csv(out / "operators.csv"))
    assert operators == {(gelu, "NO_ERROR"): 1, (layer_norm, "NO_ERROR"): 1}  # users' operators, built for the GPU
    knobs = _lines(out / "knobs.jsonl")  # the fastest goal tile under the first two combinations of the knobs
    assert [(r["workload"], r["tile"], r["status"]) for r in knobs] == [("MM1", 0, "NO_ERROR")] * 2
    assert {json.dumps(r["knobs"], sort_keys=True) for r in knobs} == {
        json.dumps(k, sort_keys=True) for k in campaign.knob_combinations("MM1", "cuda")[:2]}
    assert all({**r["params"], **r["knobs"]} == r["params"] and "double_buffer" not in r["params"] for r in knobs)
    ceiling = _lines(out / "ceiling.jsonl")  # the first classic tile of MM1, built for the GPU
    assert [(r["workload"], r["index"], r["status"], r["params"]) for r in ceiling] == [
        ("MM1", 0, "NO_ERROR", campaign.classic_tiles("MM1")[0])]
    rows = _csv(out / "trials.csv")
    runs = Counter((r["workload"], r["tuner"], r["seed"]) for r in rows)
    assert len({(r["workload"], r["tuner"], r["seed"], r["index"]) for r in rows}) == len(rows)
    assert {tuner for _, tuner, _ in runs} == set(campaign.TUNERS)
    assert all(runs[("MM1", tuner, seed)] == 2 for tuner in campaign.TUNERS for seed in "01")
    assert all(runs[("BMM1", tuner, "0")] == 1 for tuner in campaign.TUNERS)
    assert Counter(r["status"] for r in rows)["NO_ERROR"] >= len(rows) - 2  # built by nvcc, not run
    throughput = _lines(out / "throughput.jsonl")
    assert sorted(r["index"] for r in throughput if "index" in r) == [0, 1, 2, 3]
    assert {r["workers"] for r in throughput if "index" in r} == {"forked"}  # from a server with TVM loaded
    readme = (out / "README.md").read_text()
    for heading in ("## Calls", "## Vendor libraries", "## OpEvo against the vendor libraries", "## Correctness",
                    "## Comparison", "## Throughput", "## Users' operators", "## The GEMM space's knobs",
                    "## The template's ceiling"):
        assert heading in readme
    assert "dry run" in readme and "sm_90a" in readme and "cut off" in readme  # the killed call

    # Once complete, the same command repeats nothing.
    before = {name: (out / name).read_text() for name in ("correctness.jsonl", "trials.csv", "goals.csv", "anchors.json",
                                                          "knobs.jsonl", "ceiling.jsonl")}
    campaign.main(["--dry-run", "--out", str(out), "--concurrency", "2"])
    assert {name: (out / name).read_text() for name in before} == before
    assert "all done" in capsys.readouterr().out

    # A folder whose correctness stage was completed before the users' operators joined it: the next
    # call checks those alone, and repeats nothing else.
    state = json.loads((out / "campaign.json").read_text())
    del state["stages"]["correctness"]["scope"]
    (out / "campaign.json").write_text(json.dumps(state))
    older = [line for line in (out / "correctness.jsonl").read_text().splitlines() if "examples." not in line]
    (out / "correctness.jsonl").write_text("\n".join(older) + "\n")
    campaign.main(["--dry-run", "--out", str(out), "--concurrency", "2"])
    rows = (out / "correctness.jsonl").read_text().splitlines()
    assert rows[:len(older)] == older and len(rows) == len(older) + 1
    assert {json.loads(row)["workload"] for row in rows[len(older):]} == {"examples.operators:layer_norm"}
    assert {name: (out / name).read_text() for name in before if name != "correctness.jsonl"} == \
        {name: text for name, text in before.items() if name != "correctness.jsonl"}
    assert json.loads((out / "campaign.json").read_text())["calls"][-1]["stages"] == ["correctness"]


def test_the_calls_hard_limit_ends_it_whatever_is_in_flight():
    # A stage that would run for a minute, stopped by the call's limit of one second.
    code = ("import time; from nni_opevo_bench import campaign; campaign._stop_at(1.0); time.sleep(60); "
            "print('not stopped')")
    started = time.monotonic()
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert found.returncode == campaign.HARD_STOP_EXIT and time.monotonic() - started < 30
    assert "limit of 1 s reached with work in flight" in found.stdout and "not stopped" not in found.stdout


@needs_nvcc
def test_a_second_call_into_a_folder_in_use_is_refused(tmp_path):
    with open(tmp_path / ".campaign.lock", "a") as held:
        fcntl.lockf(held, fcntl.LOCK_EX)
        found = subprocess.run([sys.executable, "-m", "nni_opevo_bench.campaign", "--dry-run", "--out", str(tmp_path)],
                               capture_output=True, text=True, timeout=120)
    assert found.returncode == 1 and found.stderr.strip().splitlines() == [
        f"another campaign call is running in {tmp_path}: wait for it, or give another --out"]
    assert not (tmp_path / "campaign.json").exists()


@needs_nvcc
def test_an_out_that_is_a_file_is_one_line(tmp_path):
    (tmp_path / "taken").write_text("not a folder")
    found = subprocess.run([sys.executable, "-m", "nni_opevo_bench.campaign", "--dry-run", "--out",
                            str(tmp_path / "taken")], capture_output=True, text=True, timeout=120)
    assert found.returncode == 1 and found.stderr.strip().splitlines() == [
        f"campaign: cannot write {tmp_path / 'taken'}: File exists; every row written before is kept"]


def test_a_folder_of_another_device_is_not_resumed(tmp_path):
    (tmp_path / "campaign.json").write_text(json.dumps(
        {"dry_run": True, "device": "NVIDIA H200", "stages": {}, "calls": []}))
    with pytest.raises(SystemExit, match="measured on NVIDIA H200, and this machine has .*give another --out"):
        campaign.Campaign(tmp_path, dry_run=True, deadline=0.0, concurrency=1)


def test_a_line_a_killed_call_cut_short_does_not_swallow_the_next_calls_first(tmp_path):
    path = tmp_path / "correctness.jsonl"
    path.write_text(json.dumps({"index": 0}) + "\n" + '{"index": 1, "sta')
    call = campaign.Campaign(tmp_path, dry_run=True, deadline=time.monotonic() + 60, concurrency=1)
    assert call._each([1, 2], lambda index: {"index": index}, path)
    assert [r["index"] for r in _lines(path)] == [0, 1, 2]


def test_campaign_without_a_gpu_asks_for_the_dry_run():
    found = subprocess.run([sys.executable, "-m", "nni_opevo_bench.campaign", "--out", "/nonexistent/x"],
                           capture_output=True, text=True, timeout=120)
    assert found.returncode == 2 and "no CUDA GPU is visible here: run with --dry-run" in found.stderr
    assert "Traceback" not in found.stderr


def test_a_dry_campaign_folder_is_not_resumed_as_a_real_one(tmp_path):
    (tmp_path / "campaign.json").write_text(json.dumps({"dry_run": True, "stages": {}, "calls": []}))
    with pytest.raises(SystemExit, match="holds a dry campaign"):
        campaign.Campaign(tmp_path, dry_run=False, deadline=0.0, concurrency=1)


@pytest.mark.parametrize("device", ["h100", "h200"])
def test_the_report_redraws_each_published_device_folder(tmp_path, device):
    published = os.path.join(os.path.dirname(__file__), "..", "docs", "results", device)
    shutil.copytree(published, tmp_path / device)
    campaign.main(["--report", "--out", str(tmp_path / device)])
    assert (tmp_path / device / "README.md").read_text() == open(os.path.join(published, "README.md")).read()


def test_the_knobs_stage_takes_the_fastest_distinct_tiles_of_the_goal_runs():
    """From the H100's goal runs (the space before ``stages``, ``pad`` and ``raster``): the two fastest
    blockings of MM2, fastest first, without the knobs or the ``double_buffer`` they replaced."""
    goals = os.path.join(os.path.dirname(__file__), "..", "docs", "results", "h100", "goals.csv")
    tiles = campaign.tuned_tiles(Path(goals), "MM2", 2)
    rows = sorted((r for r in _csv(goals) if r["workload"] == "MM2"), key=lambda r: -float(r["tflops"]))
    assert tiles[0] == {k: v for k, v in json.loads(rows[0]["configuration"]).items() if k != "double_buffer"}
    assert len(tiles) == 2 and len({json.dumps([t["tile_n"], t["tile_m"], t["tile_k"]]) for t in tiles}) == 2
    assert not any(set(tile) & {"stages", "pad", "raster", "double_buffer"} for tile in tiles)
    combinations = campaign.knob_combinations("MM2", "cuda")
    assert len(combinations) == 4 * 2 * 4 and len({json.dumps(c, sort_keys=True) for c in combinations}) == 32


def test_the_ceiling_stage_grids_the_classic_tiles_the_check_admits():
    """Every classic tile of each plain MatMul goal workload divides its shape, is admitted on an H100
    (so the stage measures each, none refused), and none repeats."""
    h100 = targets.Target("cuda", device="cuda-none", has_device=False, **targets.H100)
    for name in campaign.REAL.ceiling:
        tiles = campaign.classic_tiles(name)
        workload = campaign.lookup(name)
        assert len(tiles) == 48 and len({json.dumps(t, sort_keys=True) for t in tiles}) == 48
        for tile in tiles:
            campaign.for_workload(workload).check(workload, tile, h100)  # raises if refused
    assert campaign.REAL.ceiling == ("MM1", "MM2", "MM3")


def _goal_rows(path, workload, tflops):
    """A goal run's rows in the harness's format, ``tflops`` its trials' results."""
    from nni_opevo_bench.runner import COLUMNS

    new = not path.exists()
    with open(path, "a", newline="") as handle:
        writer = csv.DictWriter(handle, COLUMNS)
        if new:
            writer.writeheader()
        for index, value in enumerate(tflops):
            writer.writerow({"objective": "live", "workload": workload, "target": "cuda", "tuner": "opevo", "seed": 0,
                             "index": index, "parameter_id": index, "started_s": 0, "finished_s": 1, "tuner_ms": 1,
                             "tflops": value, "status": "NO_ERROR", "seconds": 1, "configuration": "{}"})


def test_the_report_sets_a_users_matmul_beside_the_hand_written_templates_goal_run(tmp_path):
    """The operators stage tunes the MatMul example at MM1's shape: the report gives its best beside
    MM1's goal run over as many trials (the run's first, by proposal, so a pursuit's later trials do
    not count) and over cuBLAS; the other examples, at shapes no hand-written template covers, get
    no such line, nor does the MatMul example at its default shape."""
    from nni_opevo_bench.campaign_report import hand_written, write_readme

    matmul = next(name for name in campaign.GPU_OPERATORS if name.split()[0] == "examples.operators:matmul")
    assert hand_written(matmul) == "MM1" and hand_written("examples.operators:matmul") is None
    assert [hand_written(name) for name in campaign.GPU_OPERATORS].count(None) == len(campaign.GPU_OPERATORS) - 1
    (tmp_path / "campaign.json").write_text(json.dumps({"calls": [], "stages": {}}))
    (tmp_path / "anchors.json").write_text(json.dumps([{"workload": "MM1", "tf32": False, "library": "cuBLAS",
                                                        "tflops": 40.0}]))
    _goal_rows(tmp_path / "goals.csv", "MM1", [20.0, 20.0, 32.0, 20.0, 36.0])  # 36 after the fifth trial
    _goal_rows(tmp_path / "operators.csv", matmul, [10.0, 30.0, 24.0, 16.0])
    _goal_rows(tmp_path / "operators.csv", "examples.operators:softmax rows=16384 cols=1024", [0.5, 0.7])
    write_readme(tmp_path)
    readme = (tmp_path / "README.md").read_text()
    assert (f"The derived MatMul (`{matmul}`, MM1's computation from a user's tensor expression): 30.00 TFLOPS after "
            "4 trials, 0.938 of the hand-written template's goal run on MM1 after as many (32.00) and 0.750 of "
            "cuBLAS.") in readme
    assert readme.count("The derived MatMul") == 1


def test_the_pursuit_carries_on_the_goal_runs_short_of_their_goal(tmp_path):
    """MM1 met, MM2 short: MM2 carried on to 256, 384 and 512 trials, a step at a time, judged again
    after each; a goal whose library was not timed counts as unmet; a step ended is not redone."""
    anchors = [{"workload": name, "tf32": False, "library": "cuBLAS", "tflops": 40.0} for name in ("MM1", "MM2")]
    (tmp_path / "anchors.json").write_text(json.dumps(anchors))
    _goal_rows(tmp_path / "goals.csv", "MM1", [30.0] * 127 + [40.5])
    _goal_rows(tmp_path / "goals.csv", "MM2", [38.0] * 128)
    steps = [step.name for step in campaign.pursuit_steps(campaign.REAL, tmp_path)]
    mine = [name for name in steps if name.split()[0] in ("MM1", "MM2")]
    assert mine == [f"MM2 opevo x1 seed(s) @{budget}" for budget in (256, 384, 512)]
    assert steps[:2] == ["MM2 opevo x1 seed(s) @256", "MM3 opevo x1 seed(s) @256"]  # MM3: no library figure
    assert campaign.goals_met(tmp_path) == {"MM1"}
    done = ["MM2 opevo x1 seed(s) @256"]  # its run stopped short (a space exhausted): not again
    assert "MM2 opevo x1 seed(s) @256" not in [s.name for s in campaign.pursuit_steps(campaign.REAL, tmp_path, done)]
    _goal_rows(tmp_path / "goals.csv", "MM2", [38.0] * 127 + [41.0])  # the goal met at 256 trials
    assert not [s for s in campaign.pursuit_steps(campaign.REAL, tmp_path) if s.workloads == ("MM2",)]
    # The plan counts the steps left: MM2's none now, every goal's three without a folder.
    state = {"stages": {}}
    left = campaign.stage_minutes(state, tmp_path)["pursuit"]
    assert left == pytest.approx(3 * sum(m for name, m in campaign.GOAL_MINUTES.items() if name not in ("MM1", "MM2")))
    assert campaign.stage_minutes()["pursuit"] == pytest.approx(3 * sum(campaign.GOAL_MINUTES.values()))


def test_a_pursuit_starts_from_what_the_device_measured_of_its_workload():
    """The H100's knobs and ceiling rows of MM2: every configuration the check admitted, at its
    TFLOPS (0 for a failure), none it refused; each on the current space, so OpEvo imports all."""
    out = Path(os.path.dirname(__file__)).parent / "docs" / "results" / "h100"
    told = campaign.measured_here(out, "MM2")
    rows = [r for name in ("knobs.jsonl", "ceiling.jsonl") for r in campaign.read_jsonl(out / name)
            if r["workload"] == "MM2"]
    assert len(told) == sum(r["status"] != "REFUSED" for r in rows) > 100
    assert max(t["value"] for t in told) == max(r["tflops"] or 0.0 for r in rows)
    space = campaign.for_workload(campaign.lookup("MM2")).space(campaign.lookup("MM2"), "cuda")
    assert all(set(t["parameter"]) == set(space) for t in told)


# -- the plan of device calls -----------------------------------------------------------------------
@pytest.mark.parametrize("budget", [1800, 1325, 900, 400])
def test_the_plan_fits_the_budget_and_the_tools_limits(budget):
    calls = campaign_calls.plan(budget, campaign.stage_minutes())
    assert calls[0].carry == (".devcarry/tvm-a",) and ".devcarry/tvm-b" in calls[1].carry
    assert calls[-1].device_s <= budget and all(call.timeout_s <= 600 for call in calls)
    assert all(call.timeout_s - call.call_s >= campaign_calls.MARGIN_S for call in calls[1:])
    assert all(call.campaign_s > campaign_calls.RESERVE_S for call in calls[1:])


def test_a_30_minute_loan_reaches_the_goals_and_the_checks():
    calls = campaign_calls.plan(1800, campaign.stage_minutes())
    assert len(calls) == 4
    reached = " ".join(call.reaches for call in calls)
    assert calls[1].reaches.startswith("anchors, goals") and "correctness" in reached


def test_too_little_device_time_plans_no_call():
    assert campaign_calls.plan(200, campaign.stage_minutes()) == []
    found = subprocess.run([sys.executable, "-m", "nni_opevo_bench.campaign", "--plan", "200"],
                           capture_output=True, text=True, timeout=120)
    assert found.returncode == 0 and found.stdout.startswith("Too little device time for a call")


def test_the_plan_of_a_resumed_campaign_skips_what_is_done():
    state = {"stages": {stage: {"complete": True, "scope": campaign.scope(campaign.REAL, stage)}
                        for stage in campaign.STAGES if stage != "comparison"},
             "comparison_steps": [campaign.REAL.steps[0].name]}
    calls = campaign_calls.plan(1800, campaign.stage_minutes(state))
    assert calls[1].reaches.startswith(f"comparison {campaign.REAL.steps[1].name}")


def test_the_plan_counts_the_new_items_of_a_stage_whose_scope_has_grown():
    """A campaign whose correctness and operators stages completed before a user's operator was
    added to the examples: a call runs those stages again for the new operator (``Campaign.run``),
    so the plan counts that operator's share of each, and a stage completed without a recorded
    scope whole."""
    added = campaign.REAL.operators[-1].workloads[0].split()[0]  # its spec, whatever shape a stage gives it
    older = {stage: [item for item in campaign.scope(campaign.REAL, stage) if added not in item]
             for stage in ("correctness", "operators")}
    state = {"stages": {**{stage: {"complete": True, "scope": campaign.scope(campaign.REAL, stage)}
                           for stage in campaign.STAGES if stage != "comparison"},
                        **{stage: {"complete": True, "scope": items} for stage, items in older.items()},
                        "knobs": {"complete": True}}}
    minutes = campaign.stage_minutes(state)
    assert list(minutes)[:3] == ["correctness", "knobs", "operators"]
    assert minutes["correctness"] == pytest.approx(campaign.STAGE_MINUTES["correctness"] / len(
        campaign.scope(campaign.REAL, "correctness")))
    assert minutes["operators"] == pytest.approx(campaign.OPERATOR_MINUTES)
    assert minutes["knobs"] == campaign.STAGE_MINUTES["knobs"]


def test_the_plan_counts_only_the_goal_runs_left():
    """A campaign whose goals lack C1's run alone plans C1's minutes for them, not the stage's."""
    state = {"stages": {}, "goals_steps": [step.name for step in campaign.REAL.goals if step.workloads != ("C1",)]}
    assert campaign.stage_minutes(state)["goals"] == campaign.GOAL_MINUTES["C1"]
    assert campaign.stage_minutes()["goals"] == pytest.approx(sum(campaign.GOAL_MINUTES.values()))
    assert list(campaign.stage_minutes(state))[:3] == ["anchors", "goals", "correctness"]


# -- the preflight ----------------------------------------------------------------------------------
class _Nvrtc:
    class nvrtcResult:  # noqa: N801 (cuda.bindings' name)
        NVRTC_SUCCESS = 0

    def __init__(self, error=0):
        self.error = error

    def nvrtcVersion(self):  # noqa: N802
        return self.error, 13, 0


def _machine(tmp_path, **changes):
    (tmp_path / "include").mkdir(exist_ok=True)
    (tmp_path / "include" / "cuda_runtime.h").write_text("")
    modules = {"torch": SimpleNamespace(__version__="2.11.0+cu130", cuda=SimpleNamespace(is_available=lambda: True)),
               "cuda.bindings.nvrtc": _Nvrtc()}
    modules.update(changes.pop("modules", {}))

    def import_module(name):
        if isinstance(modules[name], Exception):
            raise modules[name]
        return modules[name]

    fields = {"python": (3, 12), "import_module": import_module, "cuda_path": str(tmp_path),
              "load_library": lambda name: object(), **changes}
    return preflight.Machine(**fields)


def test_the_preflight_passes_a_good_image(tmp_path):
    assert preflight.image(_machine(tmp_path)) == []


@pytest.mark.parametrize("change, words", [
    ({"python": (3, 11)}, "Python 3.11 here, and the bundle's wheels (TVM, xgboost) are built for 3.12"),
    ({"modules": {"torch": ModuleNotFoundError("No module named 'torch'")}}, "PyTorch does not import"),
    ({"modules": {"torch": SimpleNamespace(__version__="2.11.0+cpu", cuda=SimpleNamespace(is_available=lambda: False))}},
     "PyTorch 2.11.0+cpu sees no CUDA device"),
    ({"modules": {"cuda.bindings.nvrtc": ImportError("libnvrtc.so.13: cannot open shared object file")}},
     "NVRTC does not load through cuda.bindings"),
    ({"modules": {"cuda.bindings.nvrtc": _Nvrtc(error=7)}}, "NVRTC answers nvrtcVersion with 7"),
    ({"cuda_path": "/nonexistent/cuda"}, "no /nonexistent/cuda/include/cuda_runtime.h: NVRTC needs the CUDA headers"),
    ({"load_library": lambda name: (_ for _ in ()).throw(OSError(f"{name}: cannot open shared object file"))},
     "libcudart does not load"),
], ids=["python", "no-torch", "cpu-torch", "no-nvrtc", "nvrtc-error", "no-headers", "no-cudart"])
def test_the_preflight_names_each_problem_in_one_line(tmp_path, change, words):
    problems = preflight.image(_machine(tmp_path, **change))
    assert len(problems) == 1 and words in problems[0] and "\n" not in problems[0]


def test_a_smoke_whose_exported_kernel_fails_reports_it_and_the_call_goes_on(monkeypatch, capsys):
    """The campaign loads no library: the exported kernel's GPU path is reported, one line, exit 0."""
    monkeypatch.setattr(preflight, "smoke", lambda: [])
    monkeypatch.setattr(preflight, "library_smoke", lambda: ["the exported MM_small kernel called on PyTorch tensors "
                                                             "on a side stream disagrees with NumPy: it ran on another "
                                                             "stream"])
    monkeypatch.setattr(preflight, "forked_smoke", lambda: [])
    preflight.main(["smoke"])
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.err.startswith("preflight: the exported MM_small kernel")
    assert captured.err.rstrip().endswith("(the campaign goes on)") and "smoke passed" in captured.out


def test_a_smoke_that_fails_only_in_a_forked_worker_lets_the_call_go_on_with_programs(monkeypatch, capsys):
    """Exit 4, one line naming the switch: the call script then runs the campaign with NNI_OPEVO_FORK=0."""
    monkeypatch.setattr(preflight, "smoke", lambda: [])
    monkeypatch.setattr(preflight, "library_smoke", lambda: [])
    monkeypatch.setattr(preflight, "forked_smoke", lambda: ["the MM_small kernel in a forked worker ended "
                                                            "RUNTIME_DEVICE: x; the campaign starts its workers as "
                                                            "programs (NNI_OPEVO_FORK=0)"])
    with pytest.raises(SystemExit) as e:
        preflight.main(["smoke"])
    assert e.value.code == preflight.FORK_EXIT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("preflight: ") and "NNI_OPEVO_FORK=0" in err
    script = (Path(__file__).parent.parent / "scripts" / "gpu-call.sh").read_text()
    assert f'if [ "$smoke" -eq {preflight.FORK_EXIT} ]; then export NNI_OPEVO_FORK=0' in script


def test_the_preflight_command_stops_the_call_here():
    # This machine has Python 3.11 and no CUDA PyTorch: refused, one line each, exit 3, no traceback.
    found = subprocess.run([sys.executable, "-m", "nni_opevo_bench.preflight", "image"],
                           capture_output=True, text=True, timeout=120)
    assert found.returncode == preflight.EXIT and "Traceback" not in found.stderr
    assert found.stderr and all(line.startswith("preflight: ") for line in found.stderr.splitlines())
