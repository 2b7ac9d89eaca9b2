"""Record synthesis by gradual updates (the GUM method of DPSyn/PrivSyn), vectorised.

Start from a random table of n records (attributes drawn independently from the target 1-way
marginals). Then, round after round, visit every target marginal: in each cell holding more
synthetic records than the target, pick a fraction α of the surplus at random; move those records
to cells holding fewer than the target, in proportion to the deficits. A moved record is either
replaced by a copy of a random record already in the destination cell (duplication, which keeps the
record's other attributes coherent with that cell) or has only this marginal's attributes rewritten
(modification, when the destination cell is empty or by the `duplicate` ratio). α decays each round
so the table settles. Pure post-processing of DP marginals: no privacy cost.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vertisynth.core.domain import Domain
from vertisynth.core.factor import Factor


def _cells(codes: np.ndarray, axes: Sequence[int], shape: Sequence[int]) -> np.ndarray:
    return np.ravel_multi_index(tuple(codes[:, list(axes)].T), tuple(shape))


def _stochastic_round(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    floor = np.floor(x)
    return (floor + (rng.random(x.shape) < (x - floor))).astype(np.int64)


def update_once(codes: np.ndarray, axes: Sequence[int], shape: Sequence[int], target: np.ndarray,
                alpha: float, duplicate: float, rng: np.random.Generator) -> int:
    """One GUM step for one marginal, in place. Returns how many records moved."""
    n = codes.shape[0]
    k = int(np.prod(shape))
    cell = _cells(codes, axes, shape)
    counts = np.bincount(cell, minlength=k)
    diff = target.ravel() - counts
    remove = np.minimum(_stochastic_round(alpha * np.maximum(-diff, 0.0), rng), counts)
    total = int(remove.sum())
    deficit = np.maximum(diff, 0.0)
    if total == 0 or deficit.sum() <= 0:
        return 0
    # records grouped by cell in random order; the first remove[c] of cell c are moved
    # records grouped by cell, in random order within a cell: a random permutation, then a stable
    # sort on small integer keys (numpy uses radix sort for <= 16-bit keys: O(n), no float sort)
    perm = rng.permutation(n)
    key = cell[perm].astype(np.int16 if k < 2**15 else np.int32)
    order = perm[np.argsort(key, kind="stable")]
    sorted_cells = cell[order]
    starts = np.searchsorted(sorted_cells, np.arange(k))
    rank = np.arange(n) - starts[sorted_cells]
    moved = order[rank < remove[sorted_cells]]
    dest = np.repeat(np.arange(k), rng.multinomial(total, deficit / deficit.sum()))
    rng.shuffle(dest)
    # duplication where the destination cell already has records
    can_dup = (counts[dest] > 0) & (rng.random(total) < duplicate)
    src_pos = starts[dest[can_dup]] + np.floor(rng.random(int(can_dup.sum())) * counts[dest[can_dup]]).astype(np.int64)
    sources = order[src_pos]
    snapshot = codes[sources].copy()
    codes[moved[can_dup]] = snapshot
    mod = moved[~can_dup]
    if mod.size:
        new = np.column_stack(np.unravel_index(dest[~can_dup], tuple(shape)))
        for j, ax in enumerate(axes):
            codes[mod, ax] = new[:, j]
    return total


def initial_table(domain: Domain, one_way: dict[str, np.ndarray], n: int, rng: np.random.Generator) -> np.ndarray:
    cols = []
    for a in domain.attributes:
        p = np.clip(one_way[a], 0, None)
        p = p / p.sum() if p.sum() > 0 else np.full(p.shape, 1 / p.size)
        cols.append(np.minimum(np.searchsorted(np.cumsum(p), rng.random(n), side="right"), len(p) - 1))
    return np.column_stack(cols).astype(np.int64)


def synthesize_records(domain: Domain, marginals: Sequence[Factor], n: int, rng: np.random.Generator,
                       rounds: int = 30, alpha: float = 0.5, decay: float = 0.9, min_alpha: float = 0.02,
                       duplicate: float = 0.5) -> np.ndarray:
    """n records whose marginals follow the (consistent, non-negative) target `marginals`."""
    one_way: dict[str, np.ndarray] = {}
    for m in marginals:
        for a in m.attributes:
            one_way.setdefault(a, m.project([a]).values)
    for a in domain.attributes:
        one_way.setdefault(a, np.ones(domain.size(a)))
    codes = initial_table(domain, one_way, n, rng)
    targets = []
    for m in marginals:
        t = np.clip(m.values, 0, None)
        t = t * (n / t.sum()) if t.sum() > 0 else np.full(t.shape, n / t.size)
        targets.append((domain.axes(m.attributes), m.domain.shape, t))
    a = alpha
    for _ in range(rounds):
        for i in rng.permutation(len(targets)):
            axes, shape, t = targets[i]
            update_once(codes, axes, shape, t, a, duplicate, rng)
        a = max(min_alpha, a * decay)
    return codes
