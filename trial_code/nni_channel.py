"""A trial's two calls to NNI, its parameters in and its final result out, without importing nni.

``import nni`` costs a trial process about 2.5 s of CPU (scipy.stats, and pandas through
json_tricks): as much as building and timing a CPU kernel, and most of a trial's time on the
CPU. NNI 3.0's trial keeper, behind its local and remote training services, gives a trial the
URL of a plain HTTP command channel (``NNI_TRIAL_COMMAND_CHANNEL``; the trial PUTs a command as
JSON and GETs the reply, 408 meaning "ask again" and 410 "closed": ``nni.runtime.command_channel.http``),
so the trial speaks it here with the standard library, sending what ``nni.get_next_parameter`` and
``nni.report_final_result`` send. Kept by hand for that cost; anything else goes through nni
itself: another platform's channel, or a parameter record that json_tricks encoded (its markers
start with ``__``).

NNI 3.0's local training service hands out parameters in the order it was given them, to
whichever trial asks first (``training_service/v3/compat.js``), not to the trial job whose record
holds them: two trials started together can swap, and the web UI then shows each beside the
other's result (microsoft/nni#5726). Where the channel is the experiment's own server (a local
trial: its URL is that server's ``/env/<environment>/<trial>``), a trial runs the record of its
own job instead, read from the server's REST API as the web UI reads it: each record is still
run once, and what the web UI, NNI's trial-end events and the result say of a trial agree.
"""
from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

ENV = "NNI_TRIAL_COMMAND_CHANNEL"
ASK_AGAIN, CLOSED = 408, 410
"""The channel's answers to a GET with no command yet (the trial asks again) and after it closed."""
CHANNELS = "/env/"
"""Where the experiment's server serves its trials' channels: the REST API is beside it."""
RECORD_WAIT_S = 10.0
"""How long a trial waits for its job's record: NNI's manager stores it as the job starts."""

_parameter_id: int | None = None


def _url() -> str | None:
    url = os.environ.get(ENV, "")
    return url if url.startswith("http://") else None


def _put(url: str, command: dict[str, Any]) -> None:
    request = urllib.request.Request(url, data=json.dumps(command).encode(), method="PUT",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request) as reply:
        reply.read()


def _get(url: str) -> dict[str, Any] | None:
    while True:
        try:
            with urllib.request.urlopen(url) as reply:
                return json.loads(reply.read())
        except urllib.error.HTTPError as e:
            if e.code == ASK_AGAIN:
                continue
            if e.code == CLOSED:
                return None
            raise OSError(f"NNI's trial command channel answered {e.code} {e.reason}") from None


def next_parameters() -> dict[str, Any] | None:
    """The tuner's parameters for this trial (``nni.get_next_parameter()``); None when NNI has none."""
    global _parameter_id
    url = _url()
    if url is None:
        import nni

        return nni.get_next_parameter()
    _put(url, {"type": "request_parameter"})
    reply = _get(url)
    if reply is None:
        return None
    if reply.get("type") != "parameter":
        raise OSError(f"NNI's trial command channel sent {reply.get('type')!r} where parameters were due")
    record = _decoded(_own_record(url) or reply["parameter"])
    _parameter_id = record["parameter_id"]
    return record["parameters"]


def _decoded(text: str) -> dict[str, Any]:
    if "__" in text:  # json_tricks' encoding of a non-JSON value: nni decodes it
        import nni

        return nni.load(text)
    return json.loads(text)


def _own_record(url: str) -> str | None:
    """The parameter record NNI's manager keeps for this trial's job (the one its web UI shows),
    from the REST API of the server that serves the channel; None where that server has no such
    API (a remote machine's trial keeper) or the record does not come within ``RECORD_WAIT_S``."""
    base, served, _ = url.partition(CHANNELS)
    job = os.environ.get("NNI_TRIAL_JOB_ID", "")
    if not served or not job or _rest(f"{base}/api/v1/nni/check-status") is None:
        return None
    address = f"{base}/api/v1/nni/trial-jobs/{urllib.parse.quote(job, safe='')}"
    deadline = time.monotonic() + RECORD_WAIT_S
    while time.monotonic() < deadline:
        found = _rest(address)
        records = found.get("hyperParameters") if isinstance(found, dict) else None
        if records and isinstance(records[0], str):
            return records[0]
        time.sleep(0.05)
    return None


def _rest(address: str) -> Any:
    """The JSON a GET of ``address`` answers, or None where it fails."""
    try:
        with urllib.request.urlopen(address, timeout=RECORD_WAIT_S) as reply:
            return json.loads(reply.read())
    except (OSError, ValueError):
        return None


def _plain(value: Any) -> Any:
    """A NumPy scalar as its Python number (what json_tricks writes for one); anything else refused."""
    if hasattr(value, "item") and not hasattr(value, "__len__"):
        return value.item()
    raise TypeError(f"a trial's result holds {type(value).__name__}, which JSON cannot")


def report_final(result: dict[str, Any]) -> None:
    """Send the trial's final result (``nni.report_final_result(result)``), after ``next_parameters``."""
    url = _url()
    if url is None:
        import nni

        nni.report_final_result(result)
        return
    metric = {"parameter_id": _parameter_id, "trial_job_id": os.environ.get("NNI_TRIAL_JOB_ID"), "type": "FINAL",
              "sequence": 0, "value": json.dumps(result, default=_plain)}
    _put(url, {"type": "metric", "metric": json.dumps(metric)})
