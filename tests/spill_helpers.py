"""The private spill folder of a test, and what is left in it (tests that a run closes its spills)."""
from __future__ import annotations

import gc

import pytest


@pytest.fixture()
def spill_dir(tmp_path, monkeypatch):
    """VERTISYNTH_SPILL_DIR pointed at a fresh folder, with the garbage collector off while the test runs: a spill
    the code under test leaves open must not be closed by a collection."""
    root = tmp_path / "spill"
    monkeypatch.setenv("VERTISYNTH_SPILL_DIR", str(root))
    gc.collect()
    gc.disable()
    try:
        yield root
    finally:
        gc.enable()


def spills_left(root):
    """The spill folders left under `root`, by name."""
    return sorted(p.name for p in root.iterdir()) if root.exists() else []
