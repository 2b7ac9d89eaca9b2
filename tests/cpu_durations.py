"""`pytest --cpu-durations=N`: the N tests and the test files that cost the most CPU seconds (docs/testing.md).

--durations ranks by wall time, which on a loaded machine says more about the load than about the test. This
counts a test's CPU (setup, call and teardown): the pytest process's own, its reaped children's (cold
`python -m vertisynth.cli` subprocesses) and the forkserver's (forked_cli.py: the commands it forked and reaped).
Works under xdist (each worker measures, the controller sums).
"""
from __future__ import annotations

import os
import resource
from collections import defaultdict

import pytest

KEY = "cpu_s"


def pytest_addoption(parser):
    parser.addoption("--cpu-durations", type=int, default=None, metavar="N",
                     help="show the N tests and files with the most CPU seconds (process, children, forkserver)")


def _forkserver_cpu() -> float:
    """CPU of the forked_cli forkserver and of the commands it has reaped (/proc/PID/stat utime..cstime)."""
    try:
        from multiprocessing import forkserver

        pid = forkserver._forkserver._forkserver_pid
        if not pid:
            return 0.0
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    except (OSError, AttributeError, ValueError, IndexError):
        return 0.0


def _cpu() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime + _forkserver_cpu()


def _on(config) -> bool:
    return config.getoption("--cpu-durations", None) is not None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if _on(item.config):
        item._cpu_mark = _cpu()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if _on(item.config) and hasattr(item, "_cpu_mark"):
        now = _cpu()
        outcome.get_result().user_properties.append((KEY, now - item._cpu_mark))
        item._cpu_mark = now


_per_test: dict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report):
    for key, value in getattr(report, "user_properties", ()):
        if key == KEY:
            _per_test[report.nodeid] += value


def pytest_terminal_summary(terminalreporter, config):
    if not _on(config) or not _per_test:
        return
    n = config.getoption("--cpu-durations")
    per_file: dict[str, float] = defaultdict(float)
    for nodeid, s in _per_test.items():
        per_file[nodeid.split("::")[0]] += s
    tr = terminalreporter
    tr.write_sep("=", f"CPU seconds: {sum(_per_test.values()):.1f} in {len(_per_test)} tests")
    for nodeid, s in sorted(_per_test.items(), key=lambda kv: -kv[1])[:n or None]:
        tr.write_line(f"{s:8.2f}s  {nodeid}")
    tr.write_sep("-", "CPU seconds by file")
    for path, s in sorted(per_file.items(), key=lambda kv: -kv[1])[:n or None]:
        tr.write_line(f"{s:8.2f}s  {path}")
