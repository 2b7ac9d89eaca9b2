"""tests/whole_modules.py: under `pytest -n N` (xdist's `load`) no module's tests are split over two workers."""
from __future__ import annotations

import pytest

pytest.importorskip("xdist")

from xdist.scheduler import LoadScheduling  # noqa: E402

import whole_modules  # noqa: E402


class Node:
    """The part of xdist's WorkerController a scheduler uses."""

    def __init__(self, name):
        self.name, self.shutting_down, self.ran = name, False, []
        self.gateway = type("Gateway", (), {"id": name})()

    def send_runtest_some(self, indices):
        self.ran.extend(indices)

    def shutdown(self):
        self.shutting_down = True


class Config:
    def getoption(self, name):
        return {"tx": ["2*popen"], "numprocesses": 2, "maxschedchunk": None, "dist": "load"}[name]

    getvalue = getoption


# A collection like the suite's: modules of 1-40 tests.
SIZES = [3, 40, 1, 12, 7, 25, 2, 9, 30, 4, 15, 6, 1, 18, 11, 5, 22, 8, 2, 14] * 3
COLLECTION = [f"tests/m{m}.py::test_{i}" for m, size in enumerate(SIZES) for i in range(size)]


def run(scheduler_class):
    """xdist's controller loop, simulated: both workers collect, the scheduler sends, and the workers finish their
    tests one at a time, in turn, each reporting back. Returns {module: set of workers that ran its tests}."""
    sched = scheduler_class(Config())
    nodes = [Node("gw0"), Node("gw1")]
    for node in nodes:
        sched.add_node(node)
        sched.add_node_collection(node, COLLECTION)
    sched.schedule()
    while any(sched.node2pending.values()):
        for node in nodes:
            if sched.node2pending[node]:
                sched.mark_test_complete(node, sched.node2pending[node][0], duration=0.01)
    assert sorted(nodes[0].ran + nodes[1].ran) == list(range(len(COLLECTION)))   # each test once
    where = {}
    for node in nodes:
        for i in node.ran:
            where.setdefault(whole_modules.module_of(COLLECTION[i]), set()).add(node.name)
    return where


def test_no_module_is_split_over_two_workers():
    where = run(whole_modules._scheduler_class(None))
    assert {m for m, workers in where.items() if len(workers) > 1} == set()
    assert {w for workers in where.values() for w in workers} == {"gw0", "gw1"}   # both workers still used


def test_only_the_modules_kept_whole_are_kept_whole():
    split = {m for m, workers in run(LoadScheduling).items() if len(workers) > 1}
    keep = frozenset(sorted(split)[:2])
    where = run(whole_modules._scheduler_class(keep))
    assert not any(len(where[m]) > 1 for m in keep)
    assert {m for m, workers in where.items() if len(workers) > 1} - keep   # the others are xdist's as before


def test_the_modules_kept_whole_exist():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    assert all((root / m).is_file() for m in whole_modules.KEEP_WHOLE)


def test_xdist_load_alone_splits_modules():
    """The simulation can see a split: xdist's own `load` cuts modules in this collection."""
    where = run(LoadScheduling)
    assert len({m for m, workers in where.items() if len(workers) > 1}) >= 3


def test_the_count_extends_to_the_end_of_the_last_module_sent():
    collection = ["a.py::t0", "a.py::t1", "b.py::t0", "b.py::t1", "b.py::t2", "c.py::t0"]
    assert whole_modules.whole_modules_count(collection, [0, 1, 2, 3, 4, 5], 3, None) == 5
    assert whole_modules.whole_modules_count(collection, [0, 1, 2, 3, 4, 5], 2, None) == 2
    assert whole_modules.whole_modules_count(collection, [3, 4, 5], 1, None) == 2
    assert whole_modules.whole_modules_count(collection, [5], 4) == 1
    assert whole_modules.whole_modules_count(collection, [2, 3], 0) == 0
    assert whole_modules.whole_modules_count(collection, [0, 1, 2, 3, 4, 5], 3, frozenset({"a.py"})) == 3
    assert whole_modules.whole_modules_count(collection, [0, 1, 2, 3, 4, 5], 1, frozenset({"a.py"})) == 2


def test_the_plugin_picks_the_scheduler_for_plain_load_only(pytestconfig):
    config = Config()
    assert isinstance(whole_modules.pytest_xdist_make_scheduler(config, None), LoadScheduling)

    class Scoped(Config):
        def getvalue(self, name):
            return "loadscope" if name == "dist" else super().getvalue(name)

    assert whole_modules.pytest_xdist_make_scheduler(Scoped(), None) is None
    assert pytestconfig.pluginmanager.has_plugin("whole_modules")   # registered by tests/conftest.py
