"""The GPU campaign's dry run, here where no GPU is visible: every stage walked with CUDA builds
compiled by nvcc, the files the real run writes, a call cut at its deadline resumed by the next
with nothing done twice."""
from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from collections import Counter

import pytest

from nni_opevo_bench import campaign
from trial_code import targets

pytestmark = [pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (the CUDA toolkit) is not on PATH"),
              pytest.mark.skipif(targets.cuda().has_device, reason="a GPU is visible: the real campaign would run")]


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_dry_run_walks_every_stage_and_resumes_after_a_deadline(tmp_path, capsys):
    out = tmp_path / "campaign"
    # A call with a second of work: a few correctness builds start, the rest wait for the next call.
    campaign.main(["--dry-run", "--out", str(out), "--minutes", "0.02", "--concurrency", "2"])
    state = json.loads((out / "campaign.json").read_text())
    assert not state["stages"] and 0 < len(_lines(out / "correctness.jsonl")) < 14
    assert "run the same command again" in capsys.readouterr().out

    campaign.main(["--dry-run", "--out", str(out), "--concurrency", "2"])
    state = json.loads((out / "campaign.json").read_text())
    assert all(state["stages"][stage]["complete"] for stage in campaign.STAGES) and len(state["calls"]) == 2
    checked = _lines(out / "correctness.jsonl")
    keys = Counter((r["workload"], r["kind"], r["index"]) for r in checked)
    assert len(keys) == 14 and set(keys.values()) == {1}  # 7 workloads, one admitted and one probe each, once
    assert all(r["status"] == "NO_ERROR" and r["latency_ms"] is None for r in checked if r["kind"] == "admitted")
    assert all(r["rule"] and r["params"] for r in checked if r["kind"] == "probe")
    anchors = json.loads((out / "anchors.json").read_text())
    assert [(a["workload"], a["tf32"]) for a in anchors] == [("MM1", False), ("MM1", True), ("C1", False), ("C1", True)]
    assert all(a["library"] is None and "dry run" in a["why"] for a in anchors)
    with open(out / "trials.csv") as handle:
        rows = list(csv.DictReader(handle))
    runs = Counter((r["workload"], r["tuner"], r["seed"]) for r in rows)
    assert {tuner for _, tuner, _ in runs} == set(campaign.TUNERS)
    assert all(runs[("MM1", tuner, seed)] == 2 for tuner in campaign.TUNERS for seed in "01")
    assert all(runs[(name, tuner, "0")] == 1 for name in ("BMM1", "C2") for tuner in campaign.TUNERS)
    assert Counter(r["status"] for r in rows)["NO_ERROR"] >= len(rows) - 2  # built by nvcc, not run
    throughput = _lines(out / "throughput.jsonl")
    assert sorted(r["index"] for r in throughput if "index" in r) == [0, 1, 2, 3]
    readme = (out / "README.md").read_text()
    for heading in ("## Correctness", "## Vendor libraries", "## Comparison", "## Throughput"):
        assert heading in readme
    assert "dry run" in readme and "sm_90a" in readme

    # Once complete, the same command repeats nothing.
    before = {name: (out / name).read_text() for name in ("correctness.jsonl", "trials.csv", "anchors.json")}
    campaign.main(["--dry-run", "--out", str(out), "--concurrency", "2"])
    assert {name: (out / name).read_text() for name in before} == before
    assert "all done" in capsys.readouterr().out


def test_campaign_without_a_gpu_asks_for_the_dry_run():
    found = subprocess.run([sys.executable, "-m", "nni_opevo_bench.campaign", "--out", "/nonexistent/x"],
                           capture_output=True, text=True, timeout=120)
    assert found.returncode == 2 and "no CUDA GPU is visible here: run with --dry-run" in found.stderr
    assert "Traceback" not in found.stderr


def test_a_dry_campaign_folder_is_not_resumed_as_a_real_one(tmp_path):
    (tmp_path / "campaign.json").write_text(json.dumps({"dry_run": True, "stages": {}, "calls": []}))
    with pytest.raises(SystemExit, match="holds a dry campaign"):
        campaign.Campaign(tmp_path, dry_run=False, deadline=0.0, concurrency=1)
