"""`tvd`: average total variation distance between real and synthetic k-way marginals.

TVD(P, Q) = ½ Σ |P(x) − Q(x)| over the cells of a marginal, averaged over `marginals` distinct
attribute subsets of each size k in `ways` (all subsets when there are fewer). 0 is perfect, 1 worst.
Without `ways` in the config: 2, 3 and 4 where the table has that many attributes (a 3-column job scores
2- and 3-way marginals, not an error about sizes nobody asked for); ways given explicitly must all fit. The one
default of the run, the default job, `vertisynth evaluate` and the API.
With `[evaluation] holdout`, the real side is the holdout (the report says which table was used).

Reference points (`reference_points`), on the marginals just scored: `independent`, the TVD of the real
1-way marginals multiplied out (what a synthesizer that keeps no association would score), and with a
holdout `holdout_floor`, the TVD between the holdout and the training rows (what fresh real records score).
"""
from __future__ import annotations

import itertools
import math
from typing import Any

import attrs
import numpy as np

from vertisynth.core.chunks import ChunkedCounts
from vertisynth.core.dataset import Dataset
from vertisynth.core.errors import ConfigError, DataError
from vertisynth.core.interfaces import Evaluator, PlanContext


DEFAULT_WAYS = (2, 3, 4)   # the one default: config, the default job, `evaluate`, the API


def ways_for(config_ways: list[int] | None, d: int) -> list[int]:
    """The marginal sizes to score on a table of d attributes: the configured ones, else the defaults that fit."""
    if config_ways is not None:
        return list(config_ways)
    return [k for k in DEFAULT_WAYS if k <= d] or [d]


@attrs.frozen
class TVDConfig:
    ways: list[int] | None = None   # None: DEFAULT_WAYS that fit the table
    marginals: int = 300

    def __attrs_post_init__(self) -> None:
        if self.ways is not None and (not self.ways or any(k < 1 for k in self.ways)):
            raise ConfigError(f"tvd: ways must be a non-empty list of positive sizes, got {self.ways}")
        if self.marginals < 1:
            raise ConfigError(f"tvd: marginals must be >= 1, got {self.marginals}")


def distinct_subsets(d: int, k: int, count: int, rng: np.random.Generator) -> list[tuple[int, ...]]:
    """`count` distinct k-subsets of range(d), drawn uniformly without duplicates (all if fewer exist)."""
    total = math.comb(d, k)
    if total <= count:
        return list(itertools.combinations(range(d), k))
    if total <= 20 * count:
        all_ = list(itertools.combinations(range(d), k))
        return [all_[i] for i in sorted(rng.choice(total, count, replace=False))]
    seen: set[tuple[int, ...]] = set()
    while len(seen) < count:
        seen.add(tuple(sorted(rng.choice(d, k, replace=False).tolist())))
    return sorted(seen)


def _vector(table: Any, attrs_: tuple[str, ...]) -> np.ndarray:
    """The table's counts on `attrs_`, flat (a counts-only table, core/chunks.py, has `counts` alone)."""
    if isinstance(table, (Dataset, _Columns)):
        return table.count_vector(attrs_)
    return table.counts(attrs_).values.ravel()


class _Columns:
    """A Dataset's codes column by column, each contiguous (uint8 / uint16 where the domain allows): the evaluator
    counts hundreds of marginals of the same three tables, and a column of the row-major codes is a strided read
    (on the default job's 15 columns 2.6x slower). The counts are `Dataset.count_vector`'s bit for bit (the same
    flat cell index, the same bincount)."""

    def __init__(self, table: Dataset) -> None:
        top = max(table.domain.shape, default=1)
        self.table = table
        self.cols = np.ascontiguousarray(table.codes.T, dtype=_code_dtype(top))
        self._pairs: dict[tuple[int, int], np.ndarray] = {}

    def _pair(self, i: int, j: int) -> np.ndarray:
        """The joint code c_i · size_j + c_j of two columns (uint16 where it fits), made once per pair: the
        hundreds of 2-, 3- and 4-way marginals share their pairs of attributes."""
        code = self._pairs.get((i, j))
        if code is None:
            shape = self.table.domain.shape
            code = self.cols[i].astype(_code_dtype(shape[i] * shape[j]))
            code *= shape[j]
            code += self.cols[j]
            self._pairs[(i, j)] = code
        return code

    def count_vector(self, attrs_: tuple[str, ...]) -> np.ndarray:
        """Counts on `attrs_` with the flat cell index ((c_0 · s_1 + c_1) · s_2 + c_2) · s_3 + c_3 computed from
        the pairs' codes as (c_0 · s_1 + c_1) · s_2 s_3 + (c_2 · s_3 + c_3): the same integers (a 4-way marginal in
        3 passes over the rows instead of 7), so the same counts."""
        dom = self.table.domain
        axes = dom.axes(attrs_)
        if not axes:
            return np.asarray([float(self.table.n)])
        shape = dom.shape
        parts = [(self._pair(axes[k], axes[k + 1]), shape[axes[k]] * shape[axes[k + 1]]) if k + 1 < len(axes)
                 else (self.cols[axes[k]], shape[axes[k]]) for k in range(0, len(axes), 2)]
        flat = parts[0][0].astype(np.int64)
        for code, size in parts[1:]:
            flat *= size
            flat += code
        return np.bincount(flat, minlength=math.prod(shape[a] for a in axes)).astype(float)


def _code_dtype(top: int) -> type:
    """The smallest unsigned type that holds codes 0..top-1 (int64 beyond 32 bits)."""
    return np.uint8 if top <= 1 << 8 else np.uint16 if top <= 1 << 16 else np.uint32 if top <= 1 << 32 else np.int64


def marginal_tvd(real: Dataset, synthetic: Dataset, attrs_: tuple[str, ...], p: np.ndarray | None = None) -> float:
    """TVD of one marginal; `p`: the real table's counts on it, if already made."""
    p = _vector(real, attrs_) if p is None else p
    q = _vector(synthetic, attrs_)
    if p.sum() == 0 or q.sum() == 0:
        raise DataError("tvd: a table is empty")
    return 0.5 * float(np.abs(p / p.sum() - q / q.sum()).sum())


class TVDEvaluator(Evaluator):
    prefers_holdout = True  # with a holdout, score against records the synthesizer never saw

    def __init__(self, config: TVDConfig | None = None) -> None:
        super().__init__(config or TVDConfig())
        self._last_sets: dict[int, list[tuple[str, ...]]] = {}
        # the real table of the last evaluation and its counts per scored marginal: reference_points scores the
        # same marginals of the same table twice more (independent columns, holdout floor)
        self._last_real: Any = None
        self._real_counts: dict[tuple[str, ...], np.ndarray] = {}
        self._columns: dict[int, _Columns] = {}   # id(table) -> its columns, for the tables of the last evaluation

    def _table(self, table: Any) -> Any:
        """What to count `table`'s marginals on: a Dataset's `_Columns` (made once per table), else the table."""
        if not isinstance(table, Dataset):
            return table
        cols = self._columns.get(id(table))
        if cols is None or cols.table is not table:
            cols = self._columns[id(table)] = _Columns(table)
        return cols

    def plan(self, ctx: PlanContext) -> list:
        d = len(ctx.domain)
        too_big = [k for k in ways_for(self.config.ways, d) if k > d]
        if too_big:
            raise ConfigError(f"tvd: ways {too_big} exceed the number of attributes ({d})")
        return []

    def evaluate_counts(self, real: Any, synthetic: Any, rng: np.random.Generator) -> dict[str, float]:
        """EvaluatesCounts: only `counts`, `n` and `domain` are read."""
        return self.evaluate(real, synthetic, rng)

    def evaluate(self, real: Dataset, synthetic: Dataset, rng: np.random.Generator) -> dict[str, float]:
        if real.domain.attributes != synthetic.domain.attributes or real.domain.shape != synthetic.domain.shape:
            raise DataError("tvd: real and synthetic tables have different domains")
        out = {}
        names = real.domain.attributes
        self._last_real, self._real_counts, self._columns = None, {}, {}
        real_t, synthetic_t = self._table(real), self._table(synthetic)
        for k in ways_for(self.config.ways, len(names)):
            if k > len(names):
                raise ConfigError(f"tvd: way {k} exceeds the number of attributes ({len(names)})")
            sets = [tuple(names[i] for i in s) for s in distinct_subsets(len(names), k, self.config.marginals, rng)]
            for table in (real, synthetic):   # a counts-only table (core/chunks.py) reads its chunks once for all
                if isinstance(table, ChunkedCounts):
                    table.prefetch(sets)
            if isinstance(real, Dataset):
                real_counts = {s: real_t.count_vector(s) for s in sets}
                self._last_real = real
                self._real_counts.update(real_counts)
            else:
                real_counts = {}
            vals = [marginal_tvd(real_t, synthetic_t, attrs_, real_counts.get(attrs_)) for attrs_ in sets]
            out[f"tvd_{k}way"] = float(np.mean(vals))
            self._last_sets[k] = sets
        return out

    def reference_points(self, train: Dataset, holdout: Dataset | None) -> dict[str, dict[str, float]]:
        """The same TVDs for independent columns and, with a holdout, for the holdout against the training rows."""
        scored = holdout if holdout is not None else train   # the table the synthetic one was compared with
        train_t = self._table(train)
        one_way = {a: _normalised(_vector(train_t, (a,))) for a in train.domain.attributes}
        out: dict[str, dict[str, float]] = {}
        known = self._real_counts if scored is self._last_real else {}
        scored_t = self._table(scored) if any(s not in known for sets in self._last_sets.values() for s in sets) \
            else scored
        for k, sets in self._last_sets.items():
            counts = {s: known[s] if s in known else _vector(scored_t, s) for s in sets}
            indep = [_tvd(_normalised(counts[s]), _outer([one_way[a] for a in s])) for s in sets]
            out[f"tvd_{k}way"] = {"independent": float(np.mean(indep))}
            if holdout is not None:   # TVD is symmetric: the holdout's counts (known) on the real side
                out[f"tvd_{k}way"]["holdout_floor"] = float(np.mean([marginal_tvd(holdout, train_t, s, counts[s])
                                                                     for s in sets]))
        self._columns = {}   # the columns are not kept past the run's scoring
        return out


def _normalised(p: np.ndarray) -> np.ndarray:
    total = p.sum()
    if total == 0:
        raise DataError("tvd: a table is empty")
    return p / total


def _outer(marginals: list[np.ndarray]) -> np.ndarray:
    """The product distribution of 1-way marginals, flattened in the order `counts` uses (C order)."""
    out = marginals[0]
    for m in marginals[1:]:
        out = np.multiply.outer(out, m)
    return np.asarray(out).ravel()


def _tvd(p: np.ndarray, q: np.ndarray) -> float:
    return 0.5 * float(np.abs(p - q).sum())
