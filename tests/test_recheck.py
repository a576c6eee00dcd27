"""``nni-opevo recheck``: recorded trials against the static check as it is now, the figures the
decisions cite for a rule added after a run, regenerated from the committed trials."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from nni_opevo_bench import recheck
from nni_opevo_tools import console
from trial_code import targets, workloads
from trial_code.constraint import draw, rule

ROOT = Path(__file__).resolve().parent.parent
COLUMNS = ["objective", "workload", "target", "tuner", "seed", "index", "parameter_id", "started_s", "finished_s",
           "tuner_ms", "tflops", "status", "seconds", "configuration"]


def _write(folder: Path, rows: list[dict], target: dict | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "trials.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, COLUMNS, restval="")
        writer.writeheader()
        writer.writerows(rows)
    if target is not None:
        (folder / "run.json").write_text(json.dumps([{"command": "x", "machine": "here", "target": target}]))
    return folder / "trials.csv"


def _row(workload: str, target: str, tuner: str, params: dict, tflops: float, status: str = "NO_ERROR") -> dict:
    return {"workload": workload, "target": target, "tuner": tuner, "tflops": tflops, "status": status,
            "configuration": json.dumps(params)}


def test_the_cpu_pages_trials_against_avx2s_registers_give_the_register_rules_figures():
    """docs/decisions.md's figures for the CPU register-tile rule: the CPU page's trials, run on an
    AVX2 machine before the rule, checked against its 16 registers of 32 bytes."""
    path = ROOT / "docs" / "results" / "cpu" / "trials.csv"
    target = recheck.recorded_target(path, "llvm", "avx")
    assert target.mcpu == "znver3"  # its run.json predates the record beside the machine: JSON text inside it
    tallies = recheck.recheck((r for r in recheck.read_rows(path) if r["target"] == "llvm"), target)
    found = {name: (t.checked, sum(t.refused.values()), round(t.best_refused * 1e3, 1), round(t.best_admitted * 1e3, 1))
             for name, t in tallies.items() if t.refused}
    assert found == {"MM_small": (864, 238, 120.5, 159.5), "BMM_small": (864, 127, 128.8, 175.9)}
    assert {tuple(t.foreign) for t in tallies.values()} == {("metaschedule",)}  # its own space, not checked


def test_trials_are_checked_against_the_limits_their_run_recorded(tmp_path):
    """A CPU run's own vector registers (run.json) unless ``--vectors`` names others; a failed
    trial counts but sets no best; MetaSchedule's trials are counted apart."""
    # AVX-512 (32 registers of 16 floats): 8 rows of one vector fit (8 + 1 + 1); of four, not (8 x 4 + 4 + 1).
    fits = {"tile_n": [8, 4, 8], "tile_m": [4, 4, 16], "tile_k": [64, 4], "block_order": ["n", "m", "k"]}
    spills = {**fits, "tile_m": [2, 2, 64]}
    rows = [_row("MM_small", "llvm", "opevo", fits, 0.15), _row("MM_small", "llvm", "opevo", spills, 0.12),
            _row("MM_small", "llvm", "opevo", spills, float("nan"), "RUNTIME_ERROR"),
            _row("MM_small", "llvm", "metaschedule", {"metaschedule": "ab12"}, 0.2)]
    avx512 = targets.Target("llvm", mcpu="znver4", **targets.vectors_of("avx512f"))
    path = _write(tmp_path / "run", rows, avx512.to_json())
    tally = recheck.recheck(recheck.read_rows(path), recheck.recorded_target(path, "llvm", None))["MM_small"]
    assert (tally.checked, dict(tally.foreign), tally.best_admitted, tally.best_refused) == (
        3, {"metaschedule": 1}, 0.15, 0.12)
    assert list(tally.refused.items()) == [
        ("vector registers of the register tile (last of 'tile_n' by last of 'tile_m')", 2)]
    # AVX2 named instead (16 registers of 8 floats): the 8 rows of two vectors spill too (8 x 2 + 2 + 1).
    again = recheck.recheck(recheck.read_rows(path), recheck.recorded_target(path, "llvm", "avx"))["MM_small"]
    assert sum(again.refused.values()) == 3 and again.best_admitted is None


def test_the_operators_commands_record_of_its_target_is_read(tmp_path):
    """``nni-opevo operators`` records each invocation's target beside its machine in words."""
    sse = targets.Target("llvm", **targets.vectors_of("sse2"))
    (tmp_path / "run.json").write_text(json.dumps({"command": "nni-opevo operators", "invocations": [
        {"started": "s", "ended": "e", "machine": "AMD EPYC (AVX-512), 2 cores", "target": sse.to_json()}]}))
    assert recheck.recorded_target(tmp_path / "trials.csv", "llvm", None) == sse


def test_a_cuda_run_without_its_target_is_checked_against_an_h100(tmp_path, capsys):
    mm1 = workloads.lookup("MM1")
    admitted, _ = draw(mm1, targets.h100(), seed=0)
    refused, message = draw(mm1, targets.h100(), seed=0, refused_by=("multiply-adds written out",))
    assert admitted and refused
    path = _write(tmp_path / "campaign", [_row("MM1", "cuda", "opevo", admitted, 31.5),
                                          _row("MM1", "cuda", "opevo", refused, 12.0)])
    assert console.main(["recheck", str(path)]) == 0
    shown = capsys.readouterr().out
    assert "CUDA sm_90a, 1024 threads and 227 KB of shared memory a block" in shown
    assert f"| MM1 | 2 | 0 | 1 of 2 (50%) | {rule(message)} 1 | 31.5 | 12.0 |" in shown


@pytest.mark.parametrize("contents,run,message", [
    ("workload,tflops\nMM1,1\n", None,
     "no column target, tuner, status, configuration: not a trials.csv of nni-opevo benchmark or campaign"),
    (None, None, "no such file"),
    (",".join(COLUMNS) + "\nlive,MM_small,llvm,opevo,0,0,1,0,1,0,0.1,NO_ERROR,1,{}\n", {"kind": "llvm"},
     "its run does not record the CPU's vector registers (run.json); name its widest instruction set with "
     "--vectors avx512f|avx|sse2|asimd"),
    (",".join(COLUMNS) + "\nlive,MM_small,llvm,opevo,0,0,1,0,1,0,0.1,NO_ERROR,1,{nope\n", {"kind": "llvm",
                                                                                        "vector_registers": 16,
                                                                                        "vector_bytes": 32},
     "a MM_small trial's configuration is not JSON: {nope"),
], ids=["columns", "missing", "vectors", "json"])
def test_a_file_it_cannot_recheck_is_one_line(tmp_path, capsys, contents, run, message):
    path = tmp_path / "trials.csv"
    if contents is not None:
        path.write_text(contents)
    if run is not None:
        (tmp_path / "run.json").write_text(json.dumps([{"machine": {"target": run}}]))
    assert console.main(["recheck", str(path)]) == 2
    shown = capsys.readouterr()
    assert shown.err.strip() == f"nni-opevo recheck: {path}: {message}" and not shown.out


def test_refusals_of_one_rule_by_different_values_share_it():
    assert rule("virtual threads 128 exceeds the limit 64") == rule("virtual threads 96 exceeds the limit 64") \
        == "virtual threads"
    assert rule("raster 4 must divide the column blocks (6, first of 'tile_m')") == \
        "raster # must divide the column blocks (#, first of 'tile_m')"
