"""How the suite shares the machine under pytest-xdist (``tests/run.sh`` runs 2 workers).

The slow tests start NNI experiments, SSH servers and browsers. NNI gives its own processes
fixed, short deadlines (the dispatcher must connect within 10 s, the web server must answer
``nnictl create`` within about 3 s), which three experiments starting at once on two cores can
miss. So the slow tests run in two lanes (xdist groups, each on one worker, one test at a
time), and the fast tests fill in around them; tests sharing a module-scoped fixture (one
quickstart run, one browser) stay in one lane, so the fixture is set up once. The lanes are
balanced by each test's rough duration, ``@pytest.mark.slow(seconds=...)`` where it is far
from ``SLOW_SECONDS`` (the suite ends when the longer lane does): heaviest group first, each
to the lane with less so far.
"""
from __future__ import annotations

import os
import textwrap
from collections.abc import Callable

import pytest
from nni_experiment import stops_finished

from trial_code import forked, workloads

LANES = 2
SLOW_SECONDS = 30
"""A slow test's duration when its mark does not say (a short NNI experiment on 2 cores)."""


def _seconds(item: pytest.Item) -> float:
    mark = item.get_closest_marker("slow")
    return float(mark.kwargs.get("seconds", SLOW_SECONDS)) if mark else 0.0


def _group(item: pytest.Item) -> str:
    """The first module-scoped fixture the test uses (its users share a lane), else the test."""
    fixtures = getattr(item, "_fixtureinfo", None)
    shared = sorted(f"{item.module.__name__}.{name}" for name, defs in
                    (fixtures.name2fixturedefs.items() if fixtures else ())
                    if defs and defs[-1].scope == "module")
    return shared[0] if shared else item.nodeid


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups to schedule by
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    groups: dict[str, list[pytest.Item]] = {}
    for item in items:
        if item.get_closest_marker("slow"):
            groups.setdefault(_group(item), []).append(item)
    load = [0.0] * LANES
    for _, members in sorted(groups.items(), key=lambda kv: (-sum(map(_seconds, kv[1])), kv[0])):
        lane = min(range(LANES), key=load.__getitem__)
        load[lane] += sum(map(_seconds, members))
        for item in members:
            item.add_marker(pytest.mark.xdist_group(f"slow-lane-{lane}"))


@pytest.fixture(scope="session", autouse=True)
def experiments_stopped():
    """Every experiment a test stopped in the background (``nni_experiment.stop_in_background``)
    has ended before the session does."""
    yield
    hung = stops_finished()
    assert not hung, f"these experiments' managers did not end after their stop: {hung}"


@pytest.fixture
def forked_workers():
    """``evaluate``'s workers forked from a server of this test process's that has TVM loaded, as
    NNI's trials and the harness commands fork theirs (``trial_code.forked``), for the tests whose
    subject is a kernel rather than its worker: a worker program spends 1.3-1.5 s of CPU importing
    TVM before it builds anything. The server is an experiment's kind, named by this process, so
    consecutive tests keep one; it ends ``forked.IDLE_S`` after the last. The tests of workers
    themselves (test_faults, test_trial_code's timeouts) start theirs as each case needs."""
    with forked.workers(shared=f"tests-{os.getpid()}"):
        yield


@pytest.fixture
def operator_module(tmp_path, monkeypatch):
    """Write a module of operators a user writes (``name``, its ``source``) into the test's folder,
    importable from there as an experiment imports it; returns a function that makes a workload
    of one of its operators (its name, then its shape)."""
    def written(name: str, source: str) -> Callable[..., workloads.Workload]:
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        monkeypatch.chdir(tmp_path)
        monkeypatch.syspath_prepend(str(tmp_path))
        return lambda operator, **shape: workloads.make("operator", operator=f"{name}:{operator}", **shape)

    return written
