"""`positional`: the parties' rows are already aligned by position (no protocol runs, nothing leaks).

Use it when the parties hold the same people in the same order (e.g. after an earlier PSI).
It checks that every party has the same number of rows.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from vertisynth.core.dataset import Dataset
from vertisynth.core.errors import DataError
from vertisynth.core.interfaces import Aligner, Alignment
from vertisynth.core.privacy import PrivacyLedger


@attrs.frozen
class PositionalConfig:
    pass


class PositionalAligner(Aligner):
    def align(self, views: Mapping[str, Dataset], ledger: PrivacyLedger, rng: np.random.Generator,
              ids: Mapping[str, Sequence[Any]] | None = None) -> Alignment:
        sizes = {p: v.n for p, v in views.items()}
        if len(set(sizes.values())) > 1:
            raise DataError(f"parties are not row-aligned: row counts {sizes}; use an alignment protocol (psi/psu)")
        if ids is not None:
            for p, got in ids.items():
                first = next(iter(ids.values()))
                if list(got) != list(first):
                    raise DataError(f"alignment 'positional': party {p!r} lists different identifiers in its rows "
                                    "than the first party; use alignment 'psi' or 'psu'")
        return Alignment(dict(views), {"protocol": "positional", "rows": next(iter(sizes.values()))})
