"""How the suite shares the machine under pytest-xdist (``tests/run.sh`` runs 2 workers).

The slow tests start NNI experiments, SSH servers and browsers. NNI gives its own processes
fixed, short deadlines (the dispatcher must connect within 10 s, the web server must answer
``nnictl create`` within about 3 s), which three experiments starting at once on two cores can
miss. So the slow tests run in two lanes (xdist groups, each on one worker, one test at a
time), and the fast tests fill in around them; tests sharing a module-scoped fixture (one
quickstart run, one browser) stay in one lane, so the fixture is set up once.
"""
from __future__ import annotations

import pytest

LANES = 2


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups to schedule by
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    lanes: dict[str, str] = {}
    for index, item in enumerate(i for i in items if i.get_closest_marker("slow")):
        fixtures = getattr(item, "_fixtureinfo", None)
        shared = sorted(f"{item.module.__name__}.{name}" for name, defs in
                        (fixtures.name2fixturedefs.items() if fixtures else ())
                        if defs and defs[-1].scope == "module")
        key = shared[0] if shared else item.nodeid
        lane = lanes.setdefault(key, f"slow-lane-{(len(lanes) if shared else index) % LANES}")
        item.add_marker(pytest.mark.xdist_group(lane))
