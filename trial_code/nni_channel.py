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
"""
from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any

ENV = "NNI_TRIAL_COMMAND_CHANNEL"
ASK_AGAIN, CLOSED = 408, 410
"""The channel's answers to a GET with no command yet (the trial asks again) and after it closed."""

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
    text = reply["parameter"]
    if "__" in text:  # json_tricks' encoding of a non-JSON value: nni decodes it
        import nni

        record = nni.load(text)
    else:
        record = json.loads(text)
    _parameter_id = record["parameter_id"]
    return record["parameters"]


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
