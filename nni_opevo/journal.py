"""The journal of proposals: what a tuner handed NNI, kept in the experiment's own folder.

``nnictl resume`` gives a tuner back the results NNI holds (``import_data``), but not the
configurations whose trials a stop cancelled: without a journal those could be proposed
again, and a trial repeated. Every proposal is appended here (one JSON line, flushed) to
``<experiment>/checkpoint/nni-opevo-proposals.jsonl`` (NNI's checkpoint folder,
``NNI_CHECKPOINT_DIRECTORY``); on resume the tuner reads it back and counts every journalled
configuration without a result as a failure, never to be proposed again.

A journal that cannot be written (a full disk, a read-only folder) is reported once in the
dispatcher log and the tuning goes on: the trials' results are NNI's to keep.
"""
from __future__ import annotations

import json
import logging
import os
from typing import Any

_logger = logging.getLogger(__name__)

FILE = "nni-opevo-proposals.jsonl"


class Journal:
    def __init__(self, folder: str | None) -> None:
        self.path = os.path.join(folder, FILE) if folder else None
        self._broken = False
        self._tail_checked = False

    def append(self, parameter_id: int, parameters: dict[str, Any]) -> None:
        if self.path is None or self._broken:
            return
        line = json.dumps({"parameter_id": parameter_id, "parameters": parameters}) + "\n"
        try:
            if not self._tail_checked:  # a line cut short by a crash: the next record starts on a line of its own
                self._tail_checked = True
                if self._torn():
                    line = "\n" + line
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(line)
                handle.flush()
        except OSError as e:
            self._broken = True
            _logger.error("cannot write the proposal journal %s (%s): a resume may propose these trials again",
                          self.path, e)

    def _torn(self) -> bool:
        """Whether the journal ends inside a line."""
        assert self.path is not None
        try:
            with open(self.path, "rb") as handle:
                handle.seek(0, os.SEEK_END)
                if handle.tell() == 0:
                    return False
                handle.seek(-1, os.SEEK_END)
                return handle.read(1) != b"\n"
        except FileNotFoundError:
            return False

    def read(self) -> list[dict[str, Any]]:
        """The journalled parameters, in order; unreadable lines (a write cut short) are skipped.
        A journal that cannot be read (a folder in its place, no permission) is reported in the
        dispatcher log and read as empty: the results NNI gives back still keep the tuner from
        repeating those."""
        if self.path is None or not os.path.lexists(self.path):
            return []
        out = []
        try:
            with open(self.path, encoding="utf-8", errors="replace") as handle:
                for line in handle:
                    try:
                        record = json.loads(line)
                    except json.JSONDecodeError:
                        continue
                    if isinstance(record, dict) and isinstance(record.get("parameters"), dict):
                        out.append(record["parameters"])
        except OSError as e:
            _logger.error("cannot read the proposal journal %s (%s): trials a stop cancelled may be proposed again",
                          self.path, e)
            return []
        return out
