"""Pairwise dependence scores shared by DPSyn (InDif) and PrivMRF (R-score = ½ InDif).

InDif(a, b) = Σ_xy |n_xy − n_x·n_y / n|. Under add/remove of one record it moves by at most 5: the
record's own cell changes by 1, and the expected counts n_x·n_y/n move by at most 1 in total within each
of four groups of cells — (a,b), (a,·), (·,b) and the rest (each bounded by (n−n_a)(n−n_b)/(n(n+1)) ≤ 1
or by the direct computation for the (a,b) cell). tests/plugins/synthesizers/test_dpsyn.py checks the bound by brute force.
"""
from __future__ import annotations

import numpy as np

from vertisynth.core.dataset import Dataset

INDIF_SENSITIVITY = 5.0


def indif(data: Dataset, a: str, b: str) -> float:
    """Σ |n_xy − n_x n_y / n|: how far the pair is from independent, in records."""
    t = data.counts([a, b]).values
    n = t.sum()
    if n == 0:
        return 0.0
    return float(np.abs(t - np.outer(t.sum(1), t.sum(0)) / n).sum())
