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
    record after ``waits`` 408s (or 410 when ``closed``)."""

    def __init__(self, record: dict, waits: int = 2, closed: bool = False) -> None:
        self.puts: list[bytes] = []
        keeper = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                keeper.puts.append(self.rfile.read(int(self.headers["Content-Length"])))
                self.send_response(200)
                self.end_headers()

            def do_GET(self) -> None:
                nonlocal waits
                if closed or waits:
                    waits -= 1
                    self.send_response(410 if closed else 408)
                    self.end_headers()
                    return
                body = json.dumps({"type": "parameter", "parameter": json.dumps(record)}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/trial"
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
