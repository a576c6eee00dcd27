"""The trial speaks NNI's HTTP trial command channel itself (``trial_code.nni_channel``): the same
commands, byte for byte, as nni's own channel sends to the same server, and a trial under it never
imports nni."""
from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading

import pytest

from trial_code import nni_channel

PARAMETERS = {"tile_n": [8, 4, 8], "tile_m": [16, 4, 4], "tile_k": [32, 8], "block_order": ["k", "n", "m"]}


class Keeper:
    """NNI's trial keeper's side of the channel: records each PUT, answers GETs with the parameter
    record after ``waits`` 408s (or 410 when ``closed``). With ``jobs``, it is also the experiment's
    manager, whose REST API gives each job's record (``None``: none stored yet) and whose channels
    are under ``/env/``."""

    def __init__(self, record: dict, waits: int = 2, closed: bool = False, jobs: dict | None = None) -> None:
        self.puts: list[bytes] = []
        self.rest_gets = 0
        keeper = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                keeper.puts.append(self.rfile.read(int(self.headers["Content-Length"])))
                self.send_response(200)
                self.end_headers()

            def do_GET(self) -> None:
                nonlocal waits
                if self.path.startswith("/api/v1/nni/"):
                    keeper.rest_gets += 1
                    job = self.path.rpartition("/")[2]
                    if jobs is None or (job != "check-status" and jobs.get(job) is None):
                        self.send_response(404)
                        self.end_headers()
                        return
                    answer = {"status": "RUNNING"} if job == "check-status" else \
                        {"trialJobId": job, "status": "RUNNING", "hyperParameters": [json.dumps(jobs[job])]}
                    self._send(answer)
                    return
                if closed or waits:
                    waits -= 1
                    self.send_response(410 if closed else 408)
                    self.end_headers()
                    return
                self._send({"type": "parameter", "parameter": json.dumps(record)})

            def _send(self, answer: dict) -> None:
                body = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}" + ("/env/Env1/Ab3xY" if jobs is not None else "/trial")
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def keeper(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # nni, imported under NNI_PLATFORM, logs to ./trial.log
    record = {"parameter_id": 7, "parameter_source": "algorithm", "parameters": PARAMETERS, "parameter_index": 0}
    server = Keeper(record)
    monkeypatch.setenv(nni_channel.ENV, server.url)
    monkeypatch.setenv("NNI_PLATFORM", "local")
    monkeypatch.setenv("NNI_TRIAL_JOB_ID", "Ab3xY")
    yield server
    server.close()


def test_parameters_in_and_the_result_out_as_nni_sends_them(keeper):
    result = {"default": 0.5, "latency_ms": None, "status": "NO_ERROR", "build_s": 1.25, "error": 'a "q" é', "arch": "x"}
    assert nni_channel.next_parameters() == PARAMETERS
    nni_channel.report_final(result)
    ours, keeper.puts[:] = list(keeper.puts), []

    from nni.runtime.trial_command_channel.v3 import TrialCommandChannelV3

    theirs = TrialCommandChannelV3(keeper.url)
    record = theirs.receive_parameter()
    theirs.send_metric("FINAL", record["parameter_id"], "Ab3xY", 0, result)
    assert ours == keeper.puts  # request_parameter, then the metric: the same bytes


def test_a_numpy_number_in_the_result_is_sent_as_its_value(keeper):
    np = pytest.importorskip("numpy")
    nni_channel.next_parameters()
    nni_channel.report_final({"default": np.float32(0.25), "status": "NO_ERROR"})
    metric = json.loads(json.loads(keeper.puts[-1])["metric"])
    assert metric["parameter_id"] == 7 and json.loads(metric["value"]) == {"default": 0.25, "status": "NO_ERROR"}


def test_a_record_json_tricks_encoded_is_decoded_by_nni(monkeypatch):
    record = {"parameter_id": 1, "parameters": {"s": {"__set__": [2, 1]}}, "parameter_source": "algorithm"}
    server = Keeper(record, waits=0)
    monkeypatch.setenv(nni_channel.ENV, server.url)
    try:
        assert nni_channel.next_parameters() == {"s": {1, 2}}
    finally:
        server.close()


def test_a_trial_runs_its_own_jobs_record_where_nni_handed_it_another_jobs(keeper, monkeypatch):
    """NNI 3.0 hands the next record in line to whichever trial asks first (microsoft/nni#5726):
    the trial runs the record the manager keeps for its job, which the web UI shows, and reports
    that record's id, waiting for the record where the manager has not stored it yet."""
    handed = {"parameter_id": 8, "parameter_source": "algorithm", "parameters": {"tile_n": [1, 1, 256]},
              "parameter_index": 0}
    own = {"parameter_id": 7, "parameter_source": "algorithm", "parameters": PARAMETERS, "parameter_index": 0}
    jobs = {"Ab3xY": None}
    manager = Keeper(handed, waits=0, jobs=jobs)
    monkeypatch.setenv(nni_channel.ENV, manager.url)
    threading.Timer(0.3, jobs.update, [{"Ab3xY": own}]).start()  # stored as the trial starts
    try:
        assert nni_channel.next_parameters() == PARAMETERS
        nni_channel.report_final({"default": 0.5, "status": "NO_ERROR"})
        metric = json.loads(json.loads(manager.puts[-1])["metric"])
        assert metric["parameter_id"] == 7 and metric["trial_job_id"] == "Ab3xY"
        assert manager.rest_gets > 2
    finally:
        manager.close()


def test_a_channel_without_the_managers_api_beside_it_keeps_the_record_it_hands(monkeypatch):
    """A remote machine's trial keeper serves the channel without NNI's REST API: the trial runs
    what the channel handed it, asking the API once."""
    handed = {"parameter_id": 8, "parameter_source": "algorithm", "parameters": PARAMETERS, "parameter_index": 0}
    keeper_only = Keeper(handed, waits=0, jobs=None)
    monkeypatch.setenv(nni_channel.ENV, keeper_only.url.replace("/trial", "/env/Env1/Ab3xY"))
    monkeypatch.setenv("NNI_TRIAL_JOB_ID", "Ab3xY")
    try:
        assert nni_channel.next_parameters() == PARAMETERS
        assert keeper_only.rest_gets == 1
    finally:
        keeper_only.close()


def test_a_closed_channel_gives_no_parameters(monkeypatch):
    server = Keeper({}, closed=True)
    monkeypatch.setenv(nni_channel.ENV, server.url)
    try:
        assert nni_channel.next_parameters() is None
    finally:
        server.close()


@pytest.mark.slow(seconds=10)
def test_a_trial_under_nni_reports_without_importing_nni(keeper):
    run = subprocess.run([sys.executable, "-c", "import sys, runpy\n"
                          "sys.argv = ['trial', '--workload', 'MM_small', '--target', 'cpu']\n"
                          "runpy.run_module('trial_code.trial', run_name='__main__')\n"
                          "print('nni' in sys.modules)"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "False"
    metric = json.loads(json.loads(keeper.puts[-1])["metric"])
    assert metric["parameter_id"] == 7 and metric["trial_job_id"] == "Ab3xY" and metric["type"] == "FINAL"
    assert json.loads(metric["value"])["status"] == "NO_ERROR"
