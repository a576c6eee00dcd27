"""Scaling out over SSH: NNI's remote training service runs the unchanged trial code.

A private sshd on a loopback port (its own host key, one authorized key, nothing else) stands
in for a remote machine; ``experiments/scale-out/remote.yml`` is pointed at it, so NNI uploads
the checkout (minus ``.nniignore``) and runs ``python -m trial_code.trial`` there with
the remote environment's python (named by path: a ``~/.bashrc`` that runs pyenv or conda
would shadow ``pythonPath`` on PATH, as it does on this machine), and the CPU kernels' results
come back by parameter id.
``tests/run.sh`` installs openssh-server when it is missing.
"""
from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from nni_experiment import Experiment, free_port

from trial_code import constraint, workloads

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
SSHD = "/usr/sbin/sshd"
TRIALS = 4

if not (os.path.exists(SSHD) and shutil.which("ssh-keygen")) and not os.environ.get("CI"):
    pytest.skip("openssh-server is not installed (tests/run.sh installs it)", allow_module_level=True)


@pytest.fixture
def sshd(tmp_path):
    """(port, private key, home) of an sshd that accepts only that key, for this user, on
    127.0.0.1, with HOME set to a folder of the test's own (where NNI's remote side writes)."""
    keys = tmp_path / "ssh"
    keys.mkdir()
    home = tmp_path / "remote-home"
    home.mkdir()
    for name in ("host", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / name)], check=True)
    (keys / "authorized_keys").write_text((keys / "client.pub").read_text())
    port = free_port()
    config = keys / "sshd_config"
    config.write_text(f"Port {port}\nListenAddress 127.0.0.1\nHostKey {keys / 'host'}\n"
                      f"AuthorizedKeysFile {keys / 'authorized_keys'}\nPasswordAuthentication no\n"
                      f"KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nStrictModes no\n"
                      f"UsePAM no\nPidFile {keys / 'sshd.pid'}\nSubsystem sftp internal-sftp -d {home}\n"
                      f"SetEnv HOME={home}\n")
    os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege-separation directory
    server = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stderr=open(keys / "sshd.log", "w"))
    deadline = time.time() + 10
    while "Server listening" not in (keys / "sshd.log").read_text():
        assert server.poll() is None and time.time() < deadline, (keys / "sshd.log").read_text()
        time.sleep(0.1)
    yield port, keys / "client", home
    server.terminate()
    server.wait(timeout=10)


@pytest.mark.slow(seconds=80)
def test_remote_training_service_runs_the_unchanged_trial_code(sshd, tmp_path):
    port, key, home = sshd
    path = ROOT / "experiments/scale-out/remote.yml"
    cfg = yaml.safe_load(path.read_text())
    cfg["searchSpaceFile"] = str(ROOT / "search_spaces/MM_small.cpu.json")
    cfg["trialCodeDirectory"] = cfg["tuner"]["codeDirectory"] = str(ROOT)
    machine = cfg["trainingService"]["machineList"][0]
    interpreter = machine["pythonPath"] + "/python"
    assert cfg["trialCommand"].startswith(interpreter + " -m trial_code.trial "), "the remote venv's python, by path"
    # This machine's environment in place of /opt/nni-opevo/.venv, and a CPU workload (no GPU
    # here); otherwise the shipped file as it is.
    cfg["trialCommand"] = f"{sys.executable} -m trial_code.trial --workload MM_small --target cpu --min-repeat-ms 10"
    cfg["tuner"]["classArgs"].update(constraint.class_args(workloads.lookup("MM_small"), "cpu"))
    cfg.pop("trialGpuNumber")
    cfg["trialConcurrency"], cfg["maxTrialNumber"] = 2, TRIALS
    for gpu_key in ("useActiveGpu", "maxTrialNumberPerGpu", "gpuIndices"):
        machine.pop(gpu_key)
    machine.update(host="127.0.0.1", port=port, user=getpass.getuser(), sshKeyFile=str(key),
                   pythonPath=os.path.dirname(sys.executable))
    cfg["trainingService"]["machineList"] = [machine]
    with Experiment(tmp_path, cfg) as exp:
        status = exp.wait(timeout=600)
        assert status["status"] in ("DONE", "NO_MORE_TRIAL"), (status, exp.dispatcher_log())
        params, results = exp.parameters(), exp.results()
        exp.stop()  # NNI cleans the remote machine up over SSH, before this test's server ends
    # The "remote" side wrote under the SSH session's HOME, the test's folder, not the real home.
    assert (home / "nni-experiments" / str(exp.id)).is_dir()
    assert not (Path.home() / "nni-experiments" / str(exp.id)).exists()
    assert len(results) == TRIALS and set(results) <= set(params)
    assert [r["status"] for r in results.values()].count("NO_ERROR") >= TRIALS // 2, results
    assert all(r["default"] > 0 for r in results.values() if r["status"] == "NO_ERROR")
