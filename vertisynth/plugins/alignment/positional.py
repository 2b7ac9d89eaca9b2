"""`positional`: the parties' rows are already aligned by position (no protocol runs, nothing leaks).

Use it when the parties hold the same people in the same order (e.g. after an earlier PSI).
It checks that every party has the same number of rows.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from vertisynth.core.dataset import Dataset
from vertisynth.core.errors import DataError
from vertisynth.core.interfaces import Aligner
from vertisynth.core.privacy import PrivacyLedger


@attrs.frozen
class PositionalConfig:
    pass


class PositionalAligner(Aligner):
    def align(self, views: Mapping[str, Dataset], ledger: PrivacyLedger,
              rng: np.random.Generator) -> tuple[dict[str, Dataset], dict[str, Any]]:
        sizes = {p: v.n for p, v in views.items()}
        if len(set(sizes.values())) > 1:
            raise DataError(f"parties are not row-aligned: row counts {sizes}; use an alignment protocol (psi/psu)")
        return dict(views), {"protocol": "positional", "rows": next(iter(sizes.values()))}
