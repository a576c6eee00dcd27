"""The NNI web UI, checked as a person would: headless Debian Chromium driven by Playwright.

A real experiment tunes real CPU kernels; the overview page must name it and show the best
TFLOPS, and the trial table must list every trial with the TFLOPS it reported, NNI's status and
(after adding the column, as a user would) the kernel's own status. ``tests/run.sh`` installs
Chromium; set NNI_OPEVO_SCREENSHOT=path to keep the trial table's screenshot (docs/web-ui.png).
"""
from __future__ import annotations

import os
import shutil
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml
from nni_experiment import Experiment

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Chromium on a machine with no network: no background connections, no sandbox as root.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TRIALS = 6

if not os.path.exists(CHROMIUM) and not os.environ.get("CI"):
    pytest.skip("Debian's chromium is not installed (tests/run.sh installs it)", allow_module_level=True)


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    cfg = yaml.safe_load((ROOT / "experiments/quickstart/opevo.yml").read_text())
    cfg["searchSpaceFile"] = str(ROOT / "experiments/quickstart" / cfg["searchSpaceFile"])
    cfg["trialCodeDirectory"] = cfg["tuner"]["codeDirectory"] = str(ROOT)
    cfg["trialCommand"] = cfg["trialCommand"].replace("python3", sys.executable, 1)
    cfg["maxTrialNumber"] = TRIALS
    with Experiment(tmp_path_factory.mktemp("webui"), cfg) as exp:
        status = exp.wait(timeout=600)
        assert status["status"] in ("DONE", "NO_MORE_TRIAL"), status
        yield exp, cfg


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield chromium
        chromium.close()


@pytest.mark.slow(seconds=40)
def test_overview_names_the_experiment_and_shows_the_best_tflops(experiment, browser):
    exp, cfg = experiment
    best = max(r["default"] for r in exp.results().values())
    page = browser.new_page()
    page.goto(f"http://127.0.0.1:{exp.port}/oview")
    page.get_by_text(cfg["experimentName"]).wait_for(timeout=30_000)
    text = page.inner_text("body")
    assert f"{best:.6f}" in text, "the best metric is the best TFLOPS reported"
    assert f"{TRIALS}/{TRIALS}" in text, "every trial succeeded as an NNI job (failed kernels report too)"
    page.close()


@pytest.mark.slow(seconds=15)
def test_trial_table_lists_each_trials_tflops_and_status(experiment, browser, tmp_path):
    exp, _ = experiment
    results = exp.results()
    page = browser.new_page(viewport={"width": 1600, "height": 900})
    page.goto(f"http://127.0.0.1:{exp.port}/detail")
    page.get_by_text("Add/Remove columns").click()
    for column in ("status (metric)", "latency_ms (metric)"):
        page.get_by_text(column, exact=True).click()
    page.get_by_role("button", name="Save").click()
    rows = page.locator(".ms-DetailsList .ms-DetailsRow")
    rows.nth(TRIALS - 1).wait_for(timeout=30_000)
    header = [_text(h) for h in page.locator(".ms-DetailsHeader-cell").all_inner_texts()]
    table = [dict(zip(header, map(_text, row.locator(".ms-DetailsRow-cell").all_inner_texts()))) for row in rows.all()]
    screenshot = tmp_path / "web-ui.png"
    page.screenshot(path=str(screenshot), full_page=True)
    if os.environ.get("NNI_OPEVO_SCREENSHOT"):
        shutil.copyfile(screenshot, os.environ["NNI_OPEVO_SCREENSHOT"])
    page.close()

    assert len(table) == TRIALS, table
    assert {"Status", "Default metric", "status (metric)", "latency_ms (metric)"} <= set(header), header
    assert all(row["Status"] == "SUCCEEDED" for row in table), table
    shown = sorted(float(row["Default metric"].split()[0]) for row in table)
    assert shown == pytest.approx(sorted(r["default"] for r in results.values()), abs=5e-7), "TFLOPS per trial"
    assert Counter(row["status (metric)"] for row in table) == Counter(r["status"] for r in results.values())
    assert screenshot.stat().st_size > 10_000


def _text(cell: str) -> str:
    """A cell's words without the icon glyphs (Unicode private use: the icon font is not loaded offline)."""
    return "".join(ch for ch in cell if not 0xE000 <= ord(ch) <= 0xF8FF).strip()
