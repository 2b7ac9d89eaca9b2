"""The projection a vertical oracle applies when it makes a released answer consistent with measured 1-ways
(vertical/oracle.py, `VerticalOracle._consistent`), shared with the measures that report the variance left by it
(`core.capabilities.ReportsConsistentVariance`): so what a measure computes is what the oracle does.

Made consistent with exactly known 1-ways of the attributes on `axes`, a table's error e becomes P e with
P = I − Π_∅ − Σ_{a ∈ axes} Π_{a} (Π_S the ANOVA projector onto the effects of exactly the axes S: contrasts
along S, means along the rest): its mean and those attributes' main effects are removed, everything else kept.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import combinations

import numpy as np


def remove_main_effects(y: np.ndarray, axes: Iterable[int], lead: int = 0) -> np.ndarray:
    """P y for tables y whose first `lead` axes index independent draws (a batch); `axes` count from the first
    table axis. P = I − Σ_a M_a + (k − 1) M_∅, M_a the mean over every table axis but a, M_∅ the grand mean, k
    the number of axes adjusted (each M_a = Π_∅ + Π_{a})."""
    axes = sorted(set(int(a) for a in axes))
    y = np.asarray(y, float)
    if not axes:
        return y.copy()
    table_axes = tuple(range(lead, y.ndim))
    out = y + (len(axes) - 1) * y.mean(axis=table_axes, keepdims=True)
    for a in axes:
        out = out - y.mean(axis=tuple(i for i in table_axes if i != lead + a), keepdims=True)
    return out


def kept_effects(l: int, axes: Iterable[int]) -> list[tuple[int, ...]]:
    """The ANOVA effects (subsets S of the l table axes) that `remove_main_effects(·, axes)` keeps: every S but ∅
    and the singletons of `axes` (∅ is removed whenever some axis is adjusted)."""
    axes = set(int(a) for a in axes)
    every = [s for k in range(l + 1) for s in combinations(range(l), k)]
    if not axes:
        return every
    return [s for s in every if s and not (len(s) == 1 and s[0] in axes)]


def effect_weight(match: Sequence[bool], sizes: Sequence[int], kept: Sequence[tuple[int, ...]],
                  scale: Sequence[float] | None = None) -> float:
    """Entry (c, x) of Σ_{S ∈ kept} (Π_{i∈S} s_i) Π_S, which depends on c and x only through the axes where they
    match (`match`): Π_{i∈S} s_i (1[c_i = x_i] − 1/u_i) · Π_{i∉S} 1/u_i, summed over S (`scale` s_i: 1 by default)."""
    total = 0.0
    for s in kept:
        w = 1.0
        for i, (m, u) in enumerate(zip(match, sizes)):
            if i in s:
                w *= ((1.0 if m else 0.0) - 1.0 / u) * (1.0 if scale is None else scale[i])
            else:
                w *= 1.0 / u
        total += w
    return total
