"""Tasks that block on an in-process Dask worker until a test releases them, and a bounded call: for the tests that
every wait on the cluster is bounded (tests/core/test_early_map_bounded.py, test_dask_waits_bounded.py)."""
from __future__ import annotations

import threading

import numpy as np

RELEASE = threading.Event()   # what blocks ends when the test is over (an in-process worker's thread)


def count(rows, ids):
    return np.bincount(rows.codes[:, 0], minlength=3)


def blocked(rows, ids):
    RELEASE.wait(60)
    return count(rows, ids)


def add(a, b):
    return a + b


def within(fn, seconds):
    """fn() in a thread: (its result or its exception, whether it came within `seconds`)."""
    got = []

    def call():
        try:
            got.append(fn())
        except BaseException as exc:   # noqa: BLE001 - compared by the test
            got.append(exc)
    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(seconds)
    return (got[0] if got else None), not t.is_alive()
