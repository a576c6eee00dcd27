"""Benchmark CSVs, read plain or gzip-compressed and appended to row by row: runs append to
``trials.csv``; published results keep it as ``trials.csv.gz`` (the 10-seed synthetic sweep:
12.8 MB plain, 1.2 MB packed), and reports and replays read either."""
from __future__ import annotations

import csv
import gzip
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def read_rows(path: Path) -> list[dict[str, str]]:
    """Every row of ``path`` (``.gz``: compressed); none when it does not exist yet."""
    if not path.exists():
        return []
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", newline="") as handle:
        return list(csv.DictReader(handle))


def drop_partial_row(csv_path: Path) -> None:
    """A row cut short (the disk filled up, the process was killed mid-write) is not a trial:
    cut it off, so that resuming appends whole rows after whole rows. A row cut between the
    carriage return and the line feed that end it (the csv module writes both) is whole: its
    ending is completed, and its trial kept rather than measured again."""
    if not csv_path.exists() or csv_path.suffix == ".gz" or not csv_path.is_file():
        return
    with open(csv_path, "rb+") as handle:
        handle.seek(0, 2)
        size = handle.tell()
        if size == 0:
            return
        handle.seek(size - 1)
        last = handle.read(1)
        if last == b"\n":
            return
        if last == b"\r":
            handle.write(b"\n")
            return
        handle.seek(0)
        data = handle.read()
        handle.truncate(data.rfind(b"\n") + 1)


def append_rows(path: Path, columns: list[str], rows: Iterable[dict[str, Any]]) -> None:
    """``rows`` after the whole rows ``path`` holds (its header first where it is new)."""
    drop_partial_row(path)
    fresh = not path.exists()
    with open(path, "a", newline="") as handle:
        writer = csv.DictWriter(handle, columns)
        if fresh:
            writer.writeheader()
        writer.writerows(rows)
