"""The `[study]` table of a config: a comparison grid (vertisynth.study.grid expands it)."""
from __future__ import annotations

from typing import Any

import attrs


@attrs.frozen
class StudyConfig:
    """A comparison grid, run by the study runner; `vertisynth run` runs the base config once."""

    grid: dict[str, list[Any]] = attrs.field(factory=dict)
    repeats: int = 1
    quick: dict[str, Any] | None = None   # smaller CI variant: {grid, repeats, set} (vertisynth.study.grid)
    scheduler: str | None = None          # tcp://host:port of a Dask cluster; None runs locally with joblib
    n_jobs: int = -1                      # local joblib workers
