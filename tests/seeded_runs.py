"""One seeded run per config and test worker, for tests that read the same run (a plan test and a quality test).

A run is a function of its config (seeded), so tests that would run the same config read one result instead.
"""
from __future__ import annotations

import json
from typing import Any, Callable

_RUNS: dict[str, Any] = {}


def run_once(key: Any, config: Callable[[], Any]) -> Any:
    """`vertisynth.run.pipeline.run(config())`, once per worker for each `key` (JSON-able: name the test module and
    what its config is built from, as two modules' helpers may build different configs from the same arguments)."""
    from vertisynth.run.pipeline import run

    k = json.dumps(key, sort_keys=True)
    if k not in _RUNS:
        _RUNS[k] = run(config())
    return _RUNS[k]
