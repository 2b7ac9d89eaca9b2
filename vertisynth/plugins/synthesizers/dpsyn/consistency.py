"""Post-processing of noisy marginals into a consistent, non-negative set (PrivSyn §4 / DPSyn).

Two steps, iterated:
  * mutual consistency: every marginal that contains attribute `a` must project to the same
    1-way table on `a`. The common table is the inverse-variance weighted average of the
    projections (projecting a marginal onto `a` sums cells/|dom(a)| noisy cells per value, so its
    variance is σ²·cells/|dom(a)|); each marginal is then shifted, spreading the difference of each
    value uniformly over the cells that project to it.
  * non-negativity (Norm-Sub): negative cells are set to 0 and the surplus is taken evenly from the
    positive cells, keeping the total.
All of it is post-processing: no privacy cost.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vertisynth.core.factor import Factor


def norm_sub(values: np.ndarray, total: float, max_rounds: int = 100) -> np.ndarray:
    """Non-negative table with sum `total` closest (in the Norm-Sub sense) to `values`."""
    v = np.asarray(values, float).ravel().copy()
    if total <= 0:
        return np.zeros_like(values, dtype=float)
    for _ in range(max_rounds):
        v[v < 0] = 0.0
        pos = v > 0
        if not pos.any():
            v[:] = total / v.size
            break
        diff = (total - v.sum()) / pos.sum()
        v[pos] += diff
        if (v >= -1e-9).all():
            break
    v = np.clip(v, 0, None)
    s = v.sum()
    if s > 0:
        v *= total / s
    return v.reshape(np.shape(values))


def make_consistent(marginals: Sequence[Factor], variances: Sequence[float], total: float,
                    rounds: int = 10) -> list[Factor]:
    """Make the 1-way projections of all marginals agree and every table non-negative with sum `total`."""
    facs = [Factor(m.domain, np.asarray(m.values, float).copy()) for m in marginals]
    attrs_ = sorted({a for m in facs for a in m.attributes})
    for _ in range(rounds):
        # a common total first (the 0-way consistency)
        facs = [Factor(f.domain, f.values + (total - f.values.sum()) / f.values.size) for f in facs]
        for a in attrs_:
            holders = [i for i, f in enumerate(facs) if a in f.attributes]
            if len(holders) < 2:
                continue
            projs = []
            weights = []
            for i in holders:
                f = facs[i]
                projs.append(f.project([a]).values)
                cells_per_value = f.values.size / f.domain.size(a)
                weights.append(1.0 / (variances[i] * cells_per_value))
            w = np.asarray(weights) / np.sum(weights)
            common = np.tensordot(w, np.asarray(projs), axes=1)
            for i, proj in zip(holders, projs):
                f = facs[i]
                cells_per_value = f.values.size / f.domain.size(a)
                shift = Factor(f.domain.project([a]), (common - proj) / cells_per_value)
                facs[i] = Factor(f.domain, f.values + shift.expand(f.domain).values)
        facs = [Factor(f.domain, norm_sub(f.values, total)) for f in facs]
    return facs
