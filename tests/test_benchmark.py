"""The comparison benchmark end to end: CSV, resume, replay, live CPU kernels, figures and table."""
import csv
import gzip
import hashlib
import json
import platform
import shutil

import pytest

from nni_opevo_bench.__main__ import main
from nni_opevo_bench.objectives import UNRECORDED
from nni_opevo_bench.runner import COLUMNS


def rows_of(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def runs_of(rows):
    out = {}
    for r in rows:
        out.setdefault((r["workload"], r["tuner"], r["seed"]), []).append(r)
    return out



def test_a_sweep_is_drawn_over_one_catalog_class_arg_and_never_over_a_peer():
    """A sweep's points are the specs of one catalog tuner that override one classArg, and the
    plain spec at the catalog's value; a peer's or a network tuner's spec is no point of any."""
    from nni_opevo import catalog
    from nni_opevo_bench.report import sweeps

    specs = ["opevo", "opevo:mutate_rate=0.2", "opevo:mutate_rate=0.9", "opevo:mutate_rate=0.2,explore=0.3",
             "kt:pso", "optuna:tpe:n_startup_trials=5", "metaschedule:num_trials_per_iter=4", "opevo@round-robin",
             "gbfs"]
    found = sweeps({"SYN1": {spec: {} for spec in specs}})
    default = float(catalog.default("opevo", "mutate_rate"))
    assert found == {("opevo", "mutate_rate"): sorted([(0.2, "opevo:mutate_rate=0.2"), (0.9, "opevo:mutate_rate=0.9"),
                                                       (default, "opevo")])}

@pytest.mark.slow(seconds=5)
def test_tiny_synthetic_benchmark_writes_csv_plots_table_and_resumes(tmp_path):
    out = tmp_path / "bench"
    argv = ["--objective", "synthetic", "--workloads", "SYN1", "SYN2", "--tuners", "opevo", "gbfs",
            "opevo:mutate_rate=0.2", "--seeds", "2", "--budget", "30", "--concurrency", "3", "--out", str(out),
            "--no-progress"]
    main(argv)
    rows = rows_of(out / "trials.csv")
    assert list(rows[0]) == COLUMNS and len(rows) == 2 * 3 * 2 * 30
    for run_rows in runs_of(rows).values():
        assert sorted(int(r["index"]) for r in run_rows) == list(range(30))
        assert len({r["configuration"] for r in run_rows}) == 30
        finished = [float(r["finished_s"]) for r in sorted(run_rows, key=lambda r: int(r["index"]))]
        assert finished == sorted(finished) and finished[-1] > 0
    for name in ("best_vs_trials.png", "best_vs_time.png", "sweep_opevo_mutate_rate.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    summary = (out / "summary.md").read_text()
    assert summary.count("| SYN1 |") == 3 and "**" in summary
    progress = (out / "progress.md").read_text()  # equal trials (5, 10, 30) and equal time
    assert "### SYN1" in progress and "| 5 trials | 10 trials | 30 trials |" in progress and progress.count(" s |") >= 2
    assert json.loads((out / "run.json").read_text())[0]["command"].startswith("python -m nni_opevo_bench")

    # Interrupt: drop the last 12 rows (the end of the last run); the same command completes only those.
    lines = (out / "trials.csv").read_text().splitlines(keepends=True)
    (out / "trials.csv").write_text("".join(lines[:-12]))
    kept = rows_of(out / "trials.csv")
    main(argv)
    resumed = rows_of(out / "trials.csv")
    assert resumed[: len(kept)] == kept and len(resumed) == len(rows)
    last = runs_of(resumed)[("SYN2", "opevo:mutate_rate=0.2", "1")]
    assert sorted(int(r["index"]) for r in last) == list(range(30)) and len({r["configuration"] for r in last}) == 30
    assert len({r["parameter_id"] for r in last}) == 30


def test_replay_gives_recorded_values_and_marks_the_unrecorded(tmp_path):
    """One trial at a time: with more, the simulated clock is charged the tuner's real time, and a
    loaded machine can change which trial finishes first (nni_opevo.testing), so the replayed
    OpEvo would propose another sequence than the recorded one."""
    live = tmp_path / "recorded"
    main(["--objective", "synthetic", "--workloads", "SYN1", "--tuners", "opevo", "--seeds", "1", "--budget", "40",
          "--concurrency", "1", "--out", str(live), "--no-progress"])
    recorded = {r["configuration"]: r for r in rows_of(live / "trials.csv")}
    replay = tmp_path / "replay"
    main(["--objective", "recorded", "--record", str(live / "trials.csv"), "--target", "synthetic", "--workloads",
          "SYN1", "--tuners", "opevo", "gbfs", "--seeds", "1", "--budget", "40", "--concurrency", "1",
          "--out", str(replay), "--no-progress"])
    rows = rows_of(replay / "trials.csv")
    same = [r for r in rows if r["tuner"] == "opevo"]
    assert all(r["configuration"] in recorded and r["tflops"] == recorded[r["configuration"]]["tflops"] for r in same)
    others = [r for r in rows if r["tuner"] == "gbfs"]
    assert any(r["status"] == UNRECORDED and float(r["tflops"]) == 0.0 for r in others)
    assert all(r["status"] == UNRECORDED or r["configuration"] in recorded for r in others)
    assert "| SYN1 | gbfs |" in (replay / "summary.md").read_text()


def test_published_gzip_csv_is_reported_and_replayed_but_not_silently_rerun(tmp_path):
    """docs/results keeps large CSVs as trials.csv.gz: reports and replays read them as they are;
    a run into that folder is refused (it would start over beside the packed rows)."""
    out = tmp_path / "published"
    # One trial at a time: with two, the simulated clock charges the tuner's real time, and
    # under load which trial finishes first (so what OpEvo proposes next) can differ from run to run.
    argv = ["--objective", "synthetic", "--workloads", "SYN1", "--tuners", "opevo", "--seeds", "1", "--budget", "20",
            "--concurrency", "1", "--out", str(out), "--no-progress"]
    main(argv)
    plain = out / "trials.csv"
    summary = (out / "summary.md").read_text()
    with open(plain, "rb") as source, gzip.open(out / "trials.csv.gz", "wb") as packed:
        packed.write(source.read())
    rows = rows_of(plain)
    plain.unlink()
    (out / "summary.md").unlink()
    main(["--report-only", "--out", str(out)])
    assert (out / "summary.md").read_text() == summary
    with pytest.raises(SystemExit, match="gunzip -k"):
        main(argv)
    assert not plain.exists()
    replay = tmp_path / "replay"
    main(["--objective", "recorded", "--record", str(out / "trials.csv.gz"), "--target", "synthetic", "--workloads",
          "SYN1", "--tuners", "opevo", "--seeds", "1", "--budget", "20", "--concurrency", "1", "--out", str(replay),
          "--no-progress"])
    assert [r["tflops"] for r in rows_of(replay / "trials.csv")] == [r["tflops"] for r in rows]


@pytest.mark.slow(seconds=15)
def test_live_cpu_kernels_run_in_parallel_and_report_real_times(tmp_path):
    from nni_opevo_bench import recheck
    from nni_opevo_bench.machine import describe
    from trial_code import kernel, targets

    out = tmp_path / "live"
    main(["--objective", "live", "--target", "cpu", "--workloads", "MM_small", "--tuners", "opevo", "--seeds", "1",
          "--budget", "4", "--concurrency", "2", "--out", str(out), "--no-progress"])
    rows = rows_of(out / "trials.csv")
    assert len(rows) == 4 and all(r["target"] == "llvm" or r["target"] == "cpu" for r in rows)
    measured = [r for r in rows if r["status"] == "NO_ERROR"]
    assert measured, [r["status"] for r in rows]  # the quickstart's space with its constraint: kernels run
    assert all(float(r["tflops"]) > 0 and float(r["seconds"]) > 0 for r in measured)
    spans = sorted((float(r["started_s"]), float(r["finished_s"])) for r in rows)
    assert spans[1][0] < spans[0][1]  # two trials at a time: the first two overlap
    (run,) = json.loads((out / "run.json").read_text())  # the limits its trials ran under, for nni-opevo recheck
    assert run["machine"] == describe() and run["target"] == kernel.for_host(targets.cpu()).to_json()
    assert recheck.recorded_target(out / "trials.csv", "llvm", None) == kernel.for_host(targets.cpu())


def test_unknown_tuner_fails_before_running(tmp_path):
    with pytest.raises(SystemExit, match="--tuners: opevoo: unknown tuner 'opevoo'"):
        main(["--tuners", "opevoo", "--out", str(tmp_path / "x"), "--no-progress"])


@pytest.mark.slow(seconds=140)
def test_metaschedule_tunes_the_same_live_workload_with_the_same_budget(tmp_path):
    """TVM MetaSchedule run by TVM itself: as many measured rows as the budget, in order, each
    known when its batch was measured, scored in TFLOPS like a trial, no tuner time of its own."""
    out = tmp_path / "ms"
    main(["--objective", "live", "--target", "cpu", "--workloads", "BMM_small", "--tuners",
          "metaschedule:num_trials_per_iter=2", "--seeds", "1", "--budget", "4", "--out", str(out), "--no-progress"])
    rows = rows_of(out / "trials.csv")
    assert [int(r["index"]) for r in rows] == [0, 1, 2, 3]
    assert {r["tuner"] for r in rows} == {"metaschedule:num_trials_per_iter=2"}
    assert any(r["status"] == "NO_ERROR" and float(r["tflops"]) > 0 for r in rows)
    finished = [float(r["finished_s"]) for r in rows]
    assert finished == sorted(finished) and len(set(finished)) <= 2  # two batches of two
    assert all(r["tuner_ms"] == "nan" for r in rows)
    assert "n/a" in (out / "summary.md").read_text()


@pytest.mark.parametrize("spec, objective, message", [
    ("metaschedule", "synthetic", "tunes live kernels"),
    ("metaschedule:num_trials_per_iter=0", "live", "must be a positive int"),
    ("metaschedule:trials=4", "live", "unknown MetaSchedule option 'trials'"),
])
def test_metaschedule_refuses_what_it_cannot_run_before_running(tmp_path, spec, objective, message):
    with pytest.raises(SystemExit, match=message):
        main(["--objective", objective, "--target", "cpu", "--workloads", "MM_small", "--tuners", spec,
              "--out", str(tmp_path / "x"), "--no-progress"])
    assert not (tmp_path / "x" / "trials.csv").exists()


def test_live_objectives_give_every_tuner_the_trial_codes_static_check():
    """As every generated experiment does: a configuration over the CPU's vector limit is
    refused by the tuner instead of spending a trial."""
    from nni_opevo import constraint
    from nni_opevo_bench.objectives import Live
    from trial_code import targets
    from trial_code.evaluate import Limits

    live = Live("MM_small", targets.cpu(), Limits())
    check = constraint.load(live.constraint["constraint"], live.constraint["constraint_args"])
    assert not check({"tile_n": [8, 1, 32], "tile_m": [1, 1, 256], "tile_k": [64, 4], "block_order": ["k", "n", "m"]})
    assert check({"tile_n": [8, 8, 4], "tile_m": [4, 4, 16], "tile_k": [64, 4], "block_order": ["k", "n", "m"]})


def test_a_band_leaves_out_the_trials_where_a_seed_has_nothing_yet(tmp_path):
    """A network's latency is infinite until every layer has a kernel: those points are not
    drawn, and numpy is not asked for inf - inf."""
    import warnings

    import numpy as np

    from nni_opevo_bench.figures import band, panels, save

    fig, (ax,) = panels(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        band(ax, np.arange(1, 4), np.array([[np.inf, 2.0, 1.0], [np.inf, np.inf, 1.5]]), "opevo", ["opevo"])
    line = ax.lines[0].get_ydata()
    assert np.isnan(line[:2]).all() and line[2] == 1.25
    save(fig, tmp_path / "band.png")


@pytest.mark.slow(seconds=20)
def test_the_vendor_ratio_command_compares_an_export_again_and_again(tmp_path, capsys):
    """``nni-opevo vendor-ratio``: each comparison's ratio or "busy", then how many were given;
    a folder without an export is named in one line."""
    from feasible import feasible

    from nni_opevo_bench import vendor_ratio
    from nni_opevo_tools.best import Best
    from trial_code import kernel, targets, workloads

    workload = workloads.lookup("MM_small")
    target = kernel.for_host(targets.cpu())
    params = feasible(workload, target, seed=2)
    kernel.build(kernel.scheduled(workload, params, target), target).export_library(str(tmp_path / "best.so"))
    Best(experiment="e", trial_command="python3 -m trial_code.trial --workload MM_small --target cpu",
         workload=workload.to_json(), target=target.to_json(), parameter_id=0, parameters=params, reported=None,
         remeasured=None, not_remeasured="made by the test", source=None, ranking=[], library="best.so").write(
        str(tmp_path))
    vendor_ratio.main([str(tmp_path), "--times", "2", "--min-repeat-ms", "1"])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[:2]] == ["1/2", "2/2"] and all("rounds" in line for line in lines[:2])
    given = sum("busy" not in line for line in lines[:2])
    assert lines[2].startswith("NumPy (") and f"): a ratio given in {given} of 2 comparisons" in lines[2]
    with pytest.raises(SystemExit):
        vendor_ratio.main([str(tmp_path / "nowhere")])
    assert "export: " in capsys.readouterr().err


def test_a_results_page_names_the_machines_widest_vector_extension():
    """One CPU model name comes with AVX2 or AVX-512, and CPU kernels' figures differ between
    them, so the machine line names the widest extension among ``/proc/cpuinfo``'s flags."""
    from nni_opevo_bench.machine import VECTOR_EXTENSIONS, describe, vector_extension

    assert vector_extension({"fma", "avx", "avx2", "avx512f", "avx512bw"}) == "AVX-512"
    assert vector_extension({"fma", "avx", "avx2"}) == "AVX2"
    assert vector_extension({"fp", "asimd"}) == "NEON"
    assert vector_extension({"fpu", "sse2"}) == ""
    try:
        flags = next(set(line.split(":", 1)[1].split()) for line in open("/proc/cpuinfo")
                     if line.split(":", 1)[0].strip() in ("flags", "Features"))
    except (OSError, StopIteration):
        flags = set()
    extension = vector_extension(flags)
    line = describe()
    named = {name for _, name in VECTOR_EXTENSIONS if f"({name}), " in line}
    assert named == ({extension} if extension else set())
    assert line.endswith(f"Python {platform.python_version()}")


def test_the_operators_page_takes_a_metaschedule_run_that_ran_out_of_schedules_as_whole(tmp_path):
    """MetaSchedule's rows are written when its search ends, so a run shorter than the budget
    found nothing more to measure: its best counts, and the page says how far it got. An OpEvo
    run cut short (its rows are written as it goes) is left out until it is resumed."""
    from nni_opevo_bench import operators

    spec = "examples.operators:mse_loss"
    with open(tmp_path / "trials.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, restval="")
        writer.writeheader()
        for tuner, seed, count in [("opevo", 0, 64), ("opevo", 1, 10), ("metaschedule", 0, 4), ("metaschedule", 1, 4)]:
            for index in range(count):
                writer.writerow({"objective": "live", "workload": spec, "target": "llvm", "tuner": tuner,
                                 "seed": seed, "index": index, "tflops": 0.001 * (index + 1) * (seed + 1),
                                 "status": "NO_ERROR"})
    (tmp_path / "run.json").write_text(json.dumps({"command": "nni-opevo operators", "started": "a", "ended": "b",
                                                   "machine": "here", "budget": 64, "seeds": 2}))
    page = operators.readme(tmp_path)
    assert "| mse_loss | 64.0 | 6.0 (4.0-8.0) | - | - | - |" in page  # not compared with its library yet
    assert "MetaSchedule on `mse_loss` ran out of schedules to measure: its search ended after 4, 4 trials (of 64)" \
        in page
    assert "MetaSchedule on `softmax`" not in page


@pytest.mark.slow(seconds=15)
def test_a_metaschedule_search_that_raises_ends_its_run_with_a_row_the_page_explains(tmp_path):
    """MetaSchedule's own schedule rules raise ScheduleError on the dense layer + layer norm (a
    reverse_compute_at its rules attempt, before any schedule is measured). The run ends with one
    INSTANTIATION_ERROR row saying so, instead of the command ending with a traceback; the
    operators page gives no MetaSchedule cell for it and says why."""
    from nni_opevo_bench import operators

    spec = "examples.operators:dense_layer_norm"
    out = tmp_path / "rows"
    main(["--objective", "live", "--target", "cpu", "--workloads", spec, "--tuners", "metaschedule", "--seeds", "1",
          "--budget", "4", "--out", str(out), "--no-progress"])
    rows = rows_of(out / "trials.csv")
    assert [(r["workload"], r["status"]) for r in rows] == [(spec, "INSTANTIATION_ERROR")]
    assert json.loads(rows[0]["configuration"]) == {
        "metaschedule": "search raised ScheduleError: An error occurred in the schedule primitive 'reverse-compute-at'."}
    shutil.copy(out / "trials.csv", tmp_path / "trials.csv")  # the operators command's rows folder, without its run
    page = operators.readme(tmp_path)
    assert "| dense_layer_norm | - | - | - | - | - |" in page
    assert "MetaSchedule could not tune `dense_layer_norm`: after 0 measured trials (of 256) its search raised " \
        "ScheduleError: An error occurred in the schedule primitive 'reverse-compute-at'. Its cells" in page


def test_the_operators_page_lists_each_invocation_a_cut_off_one_included(tmp_path, monkeypatch):
    """Each invocation records its start when it starts and its end when it ends: one cut off
    before its end (an interrupt, an error) says so on the page, and the invocations that resume
    the run are listed after it; a run recorded by one invocation alone is read as such."""
    from nni_opevo_bench import operators
    from trial_code import kernel, targets

    def cut_off(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(operators, "run", cut_off)
    with pytest.raises(KeyboardInterrupt):
        operators.main(["--out", str(tmp_path / "page"), "--rows", str(tmp_path)])
    (first,) = json.loads((tmp_path / "run.json").read_text())["invocations"]
    assert first["started"] and first["ended"] is None
    assert first["target"] == kernel.for_host(targets.cpu()).to_json()  # its trials' limits (nni-opevo recheck)
    assert "The last was cut off and not yet resumed." in operators.readme(tmp_path)
    monkeypatch.setattr(operators, "run", lambda *_args, **_kwargs: None)
    monkeypatch.setattr(operators, "compare_with_libraries", lambda *_args: None)
    operators.main(["--out", str(tmp_path / "page"), "--rows", str(tmp_path)])
    cut, resumed = json.loads((tmp_path / "run.json").read_text())["invocations"]
    assert cut == first and resumed["ended"]
    page = operators.readme(tmp_path)
    assert f"{first['started']} to a cut-off on {first['machine']}; {resumed['started']} to {resumed['ended']}" in page
    assert "not yet resumed" not in page
    (tmp_path / "run.json").write_text(json.dumps({"command": "c", "started": "2026-01-01 00:00 UTC", "ended":
                                                   "2026-01-01 01:00 UTC", "machine": "m", "budget": 64, "seeds": 1}))
    operators.main(["--out", str(tmp_path / "page"), "--rows", str(tmp_path)])
    older, newer = json.loads((tmp_path / "run.json").read_text())["invocations"]
    assert older == {"started": "2026-01-01 00:00 UTC", "ended": "2026-01-01 01:00 UTC", "machine": "m"}
    assert newer["ended"]


def _opevo_rows(path, spec: str, configurations: list[dict], tflops: list[float]) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, restval="")
        writer.writeheader()
        for index, (configuration, value) in enumerate(zip(configurations, tflops)):
            writer.writerow({"objective": "live", "workload": spec, "target": "llvm", "tuner": "opevo", "seed": 0,
                             "index": index, "tflops": value, "status": "NO_ERROR",
                             "configuration": json.dumps(configuration)})


@pytest.mark.slow(seconds=20)
def test_the_operators_page_sets_the_fastest_kernel_against_its_library_in_one_process(tmp_path):
    """The fastest OpEvo configuration is rebuilt as an export builds it and timed with NumPy's
    matmul round after round (``anchor.compare``); the page shows that comparison's library speed
    and ratio, or says the machine was busy."""
    from feasible import feasible

    from nni_opevo_bench import operators
    from trial_code import anchor, targets
    from trial_code.evaluate import Limits
    from trial_code.workloads import named_or_operator

    spec = "examples.operators:matmul"
    slower, fastest = (feasible(named_or_operator(spec), targets.cpu(), seed) for seed in (0, 1))
    assert slower != fastest
    _opevo_rows(tmp_path / "trials.csv", spec, [slower, fastest], [0.01, 0.02])
    operators.compare_with_libraries(tmp_path, 64, targets.cpu(), Limits())
    entry = json.loads((tmp_path / "library.json").read_text())[spec]
    assert entry["configuration"] == fastest
    assert entry["kernel"] == hashlib.sha256((tmp_path / "kernels" / "matmul.so").read_bytes()).hexdigest()
    comparison = anchor.Comparison.from_json(entry["comparison"])
    assert comparison.library.startswith("NumPy") and len(comparison.kernel_s) == len(comparison.library_s) \
        == anchor.ROUNDS and min(comparison.kernel_s + comparison.library_s) > 0
    line = next(line for line in operators.readme(tmp_path).splitlines() if line.startswith("| matmul |"))
    ratio = "busy" if comparison.busy else f"{comparison.ratio:.2f}x"
    assert line.endswith(f"| {comparison.library} | {comparison.vendor_tflops * 1e3:.1f} | {ratio} |")


def test_a_library_comparison_is_kept_for_the_same_kernel_and_tried_again_when_busy(tmp_path, monkeypatch):
    """The command run again compares only what changed: a new fastest configuration, the same
    configuration building another kernel (its template changed since), or a comparison too
    busy for a ratio; the page tells each kind of entry apart."""
    from nni_opevo_bench import operators
    from trial_code import anchor, targets
    from trial_code.evaluate import Limits

    spec, other = "examples.operators:matmul", "examples.operators:softmax"
    configuration = {"tile_i": [1, 1, 256]}
    _opevo_rows(tmp_path / "trials.csv", spec, [configuration], [0.01])
    idle = {"library": "NumPy (OpenBLAS)", "flops": 2e9, "kernel_s": [0.01] * 7, "library_s": [0.02] * 7}
    busy = {**idle, "kernel_s": [0.01, 0.01, 0.01, 0.02, 0.02, 0.02, 0.02]}
    built = {"configuration": configuration, "kernel": "ab12", "arch": "znver4"}
    compared = []
    monkeypatch.setattr(operators, "_build", lambda *_: built)
    monkeypatch.setattr(operators, "_compare", lambda s, b, *_: compared.append(s) or {**b, "comparison": idle})
    for stored, kernel, again in [(idle, "ab12", False), (busy, "ab12", True), (idle, "cd34", True),
                                  (idle, None, True)]:
        compared.clear()
        entry = {"configuration": configuration, "comparison": stored, **({"kernel": kernel} if kernel else {})}
        (tmp_path / "library.json").write_text(json.dumps({spec: entry}))
        operators.compare_with_libraries(tmp_path, 64, targets.cpu(), Limits())
        assert compared == ([spec] if again else [])  # softmax has no rows: nothing to compare
        assert json.loads((tmp_path / "library.json").read_text())[spec]["kernel"] == "ab12"
    assert anchor.Comparison.from_json(busy).busy and not anchor.Comparison.from_json(idle).busy
    (tmp_path / "library.json").write_text(json.dumps({
        spec: {"configuration": configuration, "comparison": busy},
        other: {"configuration": configuration, "error": "BUILD_ERROR: no such loop"}}))
    page = operators.readme(tmp_path)
    assert "| NumPy (OpenBLAS) | 100.0 | busy |" in page and "| - | - | not rebuilt here (BUILD_ERROR) |" in page
    (tmp_path / "library.json").write_text(json.dumps({spec: {"configuration": configuration, "comparison": idle}}))
    assert "| NumPy (OpenBLAS) | 100.0 | 2.00x |" in operators.readme(tmp_path)


def test_a_metaschedule_run_that_ran_out_of_schedules_is_not_run_again(tmp_path, monkeypatch):
    """MetaSchedule's rows are written when its search ends, so a run shorter than the budget is
    whole; the same command again keeps it as it is, where it would measure anew and append a
    second run's rows under the same indices."""
    from nni_opevo_bench import metaschedule
    from nni_opevo_bench.objectives import Live
    from nni_opevo_bench.runner import Plan, run
    from trial_code import targets
    from trial_code.evaluate import Limits

    calls = []

    def ran_out(*args, **kwargs):
        calls.append(args)
        return [metaschedule.Measured(f"trace{i}", 0.001 * (i + 1), "NO_ERROR", 1e-3, 1.0) for i in range(3)]

    monkeypatch.setattr(metaschedule, "run", ran_out)
    plan = Plan([Live("MM_small", targets.cpu(), Limits())], ["metaschedule"], [0], 8, 1)
    out = tmp_path / "rows.csv"
    run(plan, out, progress=False)
    first = out.read_text()
    run(plan, out, progress=False)
    assert len(calls) == 1 and out.read_text() == first and len(first.strip().splitlines()) == 1 + 3
