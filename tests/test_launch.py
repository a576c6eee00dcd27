"""The ``nni-opevo`` command and the launcher (the README's main command) end to end."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from nni_experiment import free_port, launched_id, launched_ids, stop_in_background

from nni_opevo_tools import best as best_json

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "nni_opevo_tools.console"]


def test_console_lists_its_commands_and_refuses_unknown_ones():
    shown = subprocess.run(CLI, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0
    for command in ("launch", "export", "trial", "spaces", "benchmark", "profile", "overhead", "register", "docs"):
        assert f"  {command} " in shown.stdout
    wrong = subprocess.run([*CLI, "lanch"], capture_output=True, text=True, timeout=60)
    assert wrong.returncode == 2 and "unknown command 'lanch'" in wrong.stderr


@pytest.mark.slow(seconds=5)
def test_console_docs_explains_itself_and_names_a_file_it_cannot_rewrite(tmp_path):
    helped = subprocess.run([*CLI, "docs", "--help"], capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and "usage: nni-opevo docs [FILE ...]" in helped.stdout
    missing = tmp_path / "no-such.md"
    failed = subprocess.run([*CLI, "docs", str(missing)], capture_output=True, text=True, timeout=60)
    assert failed.returncode == 2 and f"cannot rewrite {missing}" in failed.stderr and "Traceback" not in failed.stderr


@pytest.mark.parametrize("args,message", [
    (["--network", "vgg16"], "--network vgg16: only alexnet, resnet18 are built whole"),
    (["--rounds", "0"], "argument --rounds: must be an integer from 1 to 100, got '0'"),
    ([], "has no finished run of resnet18 on llvm by our tuners"),
], ids=["network", "rounds", "no-runs"])
def test_console_profile_names_what_it_cannot_profile(tmp_path, args, message):
    failed = subprocess.run([*CLI, "profile", "--out", str(tmp_path), *args], capture_output=True, text=True,
                            timeout=120)
    assert failed.returncode == (2 if "argument" in message else 1) and message in failed.stderr
    assert "Traceback" not in failed.stderr


@pytest.mark.parametrize("errno_name, strerror", [("EROFS", "Read-only file system"),
                                                  ("ENOSPC", "No space left on device"),
                                                  ("EACCES", "Permission denied")])
def test_an_os_error_of_any_command_is_one_line(tmp_path, monkeypatch, capsys, errno_name, strerror):
    """A read-only, full or forbidden folder under `spaces --root` (simulated: root may write anywhere)."""
    import errno

    from nni_opevo_tools import console, make_spaces

    def refuse(path, space):
        raise OSError(getattr(errno, errno_name), strerror, path)

    monkeypatch.setattr(make_spaces, "write_space", refuse)
    code = console.main(["spaces", "--workload", "MM_small", "--root", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and err.strip() == f"nni-opevo spaces: {strerror}: {tmp_path}/search_spaces/MM_small.cuda.json"


def test_a_root_that_is_a_file_is_one_line(tmp_path):
    (tmp_path / "a-file").write_text("")
    found = subprocess.run([*CLI, "spaces", "--workload", "MM_small", "--root", str(tmp_path / "a-file")],
                           capture_output=True, text=True, timeout=60)
    assert found.returncode == 2 and "Traceback" not in found.stderr
    assert found.stderr.strip() == f"nni-opevo spaces: Not a directory: {tmp_path / 'a-file'}/search_spaces"


@pytest.mark.slow(seconds=10)
def test_console_runs_a_subcommand_with_its_own_options():
    params = {"tile_n": [8, 8, 4], "tile_m": [4, 4, 16], "tile_k": [64, 4], "block_order": ["n", "k", "m"]}
    out = subprocess.run([*CLI, "trial", "--workload", "MM_small", "--target", "cpu", "--min-repeat-ms", "5",
                          "--params", json.dumps(params)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["status"] == "NO_ERROR" and report["default"] > 0
    helped = subprocess.run([*CLI, "spaces", "--help"], capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and "nni-opevo spaces" in helped.stdout and "--tuner" in helped.stdout


@pytest.mark.slow(seconds=75)
def test_launch_runs_a_generated_peer_experiment_and_remeasures_the_winner(tmp_path):
    """``nni-opevo launch --workload MM_small --tuner gbfs --target cpu``: the config is generated,
    the experiment runs under nnictl, and the winner printed is the re-measured one, with its
    best.json. NNI's files go under the test's HOME."""
    # NNI runs the trials with `python3` from PATH: this environment's, as experiments/run.sh sets it.
    env = {**os.environ, "HOME": str(tmp_path), "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}
    port = free_port()
    out = subprocess.run([*CLI, "launch", "--workload", "MM_small", "--tuner", "gbfs", "--target", "cpu",
                          "--trials", "6", "--root", str(tmp_path), "--port", str(port), "--every", "2",
                          "--top-k", "2"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    experiment = launched_id(out.stdout)
    try:
        assert out.returncode == 0, out.stdout + out.stderr
        config = tmp_path / "experiments" / "MM_small" / "gbfs-cpu.yml"
        assert f"experiment {experiment} (experiments/MM_small/gbfs-cpu.yml)" in out.stdout  # relative to the cwd
        assert "maxTrialNumber: 6" in config.read_text() and "GBFSTuner" in config.read_text()
        folder = tmp_path / "nni-experiments" / str(experiment)
        best = best_json.read(str(folder / "export" / "best.json"))
        assert best.remeasured is not None and best.remeasured["repeats"] == 30
        assert f"re-measured over 30 repeats (parameter {best.parameter_id})" in out.stdout
        assert len(best.ranking) == 2 and best.target["kind"] == "llvm"
        assert (folder / "export" / best.source).read_text().count("define") >= 1
        # The winner as a program uses it: the compiled library, loaded and called on NumPy arrays.
        matmul = best_json.load_kernel(str(folder / "export"))
        rng = np.random.default_rng(0)
        a, b = rng.random((256, 256), dtype=np.float32), rng.random((256, 256), dtype=np.float32)
        np.testing.assert_allclose(matmul(a, b), a @ b, rtol=1e-4, atol=1e-3)
        again = subprocess.run([*CLI, "export", str(folder), "--top-k", "1"], env=env, cwd=tmp_path,
                               capture_output=True, text=True, timeout=300)
        assert again.returncode != 0 and "holds an earlier export: pass --force" in again.stderr
        assert best_json.read(str(folder / "export" / "best.json")) == best
    finally:
        if experiment:
            stop_in_background(experiment, env)


SLOW_TO_CONNECT = '''"""G-BFS, but the first NNI dispatcher that imports this module waits past NNI's 10-s deadline."""
import time
from pathlib import Path

from nni_opevo import GBFSTuner

_imports = Path(__file__).with_name("imports")
_imports.write_text(_imports.read_text() + "x" if _imports.exists() else "x")
if len(_imports.read_text()) == 2:  # the launcher's check imports it first, the first dispatcher second
    time.sleep(14)


class SlowToConnect(GBFSTuner):
    pass
'''

SLOW_WEB_SERVER = '''// Preloaded into NNI's node manager: the first one to start waits past nnictl's deadline.
const fs = require("fs");
const marker = require("path").join(__dirname, "web-server-started");
if (!fs.existsSync(marker)) {
  fs.writeFileSync(marker, "");
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 8000);
}
'''


@pytest.mark.slow(seconds=70)
def test_launch_starts_again_an_experiment_that_missed_nnis_start_up_deadlines(tmp_path):
    """nnictl gives NNI's web server about 3 s to answer and NNI's manager gives the tuner 10 s to
    connect, which a loaded machine can miss before any trial: the launcher creates the first
    experiment again, stops the second, says so in a line each time, starts it again and runs it
    to its exported winner."""
    (tmp_path / "slow_web_server.js").write_text(SLOW_WEB_SERVER)
    env = {**os.environ, "HOME": str(tmp_path), "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],
           "NODE_OPTIONS": f"--require {tmp_path / 'slow_web_server.js'}"}
    made = subprocess.run([*CLI, "spaces", "--workload", "MM_small", "--tuner", "gbfs", "--root", str(tmp_path)],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    (tmp_path / "slow_to_connect.py").write_text(SLOW_TO_CONNECT)
    config_path = tmp_path / "experiments" / "MM_small" / "gbfs-cpu.yml"
    config = yaml.safe_load(config_path.read_text())
    config["tuner"]["className"] = "slow_to_connect.SlowToConnect"
    config_path.write_text(yaml.safe_dump({**config, "maxTrialNumber": 2}))
    out = subprocess.run([*CLI, "launch", "--config", str(config_path), "--port", str(free_port()), "--every", "1",
                          "--top-k", "1", "--repeat", "3", "--min-repeat-ms", "10"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=600)
    started = launched_ids(out.stdout)
    try:
        assert out.returncode == 0, out.stdout + out.stderr
        assert len(started) == 2 and (tmp_path / "imports").read_text() == "xxx"
        assert ("NNI's web server did not answer nnictl within its 3 s (a loaded machine); creating the "
                "experiment again (2 of 3)") in out.stdout
        assert (f"NNI gave the tuner 10 s to connect and it did not (a loaded machine): experiment {started[0]} "
                f"stopped before its first trial; starting it again (2 of 3)") in out.stdout
        assert out.stdout.count("NNI serves this web UI") == 1
        folder = tmp_path / "nni-experiments" / started[1]
        assert best_json.read(str(folder / "export" / "best.json")).remeasured is not None
    finally:
        for experiment in started:
            stop_in_background(experiment, env)
