"""`pytest -m slow -k audit --audit-cost`: each privacy audit's sampling cost in seconds, without running it.

The audit step's CPU is nearly all sampling (a looped audit refits a synthesizer per sample). This plugin replaces
`vertisynth.testing.audit.audit` during each test by a probe that draws a few samples from the audited mechanism on
the first pair, times them (process CPU), and reports per-sample CPU x 2 sides x pairs x (n + m) fresh and selection
samples, then skips the test. Selection (events, classifiers) is not counted. docs/testing.md: "The CI's steps".
"""
from __future__ import annotations

import importlib
import sys
import time

import numpy as np
import pytest

_A = importlib.import_module("vertisynth.testing.audit")   # the module (vertisynth.testing.audit is also a function)
_ORIG = _A.audit
_rows: list[tuple[str, float, float, int, int, int]] = []


def _probe(nodeid):
    def fake(mechanism, pairs, epsilon=None, delta=0.0, **kw):
        level = kw.get("level") or _A.default_level()
        n = int(kw.get("n_samples") or _A.AUDIT_LEVELS[level])
        m = int(kw.get("selection_samples") or max(n // 4, 1000))
        pairs = [p if isinstance(p, _A.NeighbourPair) else _A.NeighbourPair(*p) for p in pairs]
        rng = np.random.default_rng(0)
        mechanism.sample(pairs[0].base, 2, rng)   # warm: imports, caches
        k = 3
        while True:   # bounded: at most ~1.5 CPU s of samples after the first that takes that long
            t = time.process_time()
            mechanism.sample(pairs[0].base, k, rng)
            spent = time.process_time() - t
            if spent > 1.5 or k >= 200_000:
                break
            k *= 4
        per = spent / k
        _rows.append((nodeid, per * 2 * len(pairs) * (n + m), per, n, m, len(pairs)))
        pytest.skip(f"audit_cost: {per * 1e3:.3f} ms a sample, n {n}, m {m}, {len(pairs)} pair(s)")
    return fake


def pytest_addoption(parser):
    parser.addoption("--audit-cost", action="store_true", default=False,
                     help="skip each privacy audit, printing its estimated sampling CPU instead (tests/audit_cost.py)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    if not item.config.getoption("--audit-cost"):
        yield
        return
    fake, patched = _probe(item.nodeid), []
    for mod in list(sys.modules.values()):
        if mod is not None and getattr(mod, "audit", None) is _ORIG:
            mod.audit = fake
            patched.append(mod)
    try:
        yield
    finally:
        for mod in patched:
            mod.audit = _ORIG


def pytest_terminal_summary(terminalreporter):
    if not _rows:
        return
    tr = terminalreporter
    tr.section(f"audit sampling CPU, estimated: {sum(r[1] for r in _rows):.0f} s in {len(_rows)} audits")
    for nodeid, total, per, n, m, pairs in sorted(_rows, key=lambda r: -r[1]):
        tr.write_line(f"{total:8.1f}s  {per * 1e3:8.3f} ms x 2 x {pairs} x ({n} + {m})  {nodeid}")
