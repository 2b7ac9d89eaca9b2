"""The tvd evaluator counts each scored marginal of the holdout once: its reference points (independent columns,
the holdout floor) reuse the counts of the evaluation (they were made three times: a third of the evaluator's
CPU in the default job), and give the same numbers as counting afresh."""
import itertools

import numpy as np

from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.plugins.evaluators.tvd import TVDConfig, TVDEvaluator, marginal_tvd


class CountingDataset(Dataset):
    def counts(self, attrs_, weights=None):
        object.__getattribute__(self, "calls").append(tuple(attrs_))
        return super().counts(attrs_, weights)

    def count_vector(self, attrs_):
        object.__getattribute__(self, "calls").append(tuple(attrs_))
        return super().count_vector(attrs_)


def _table(seed, n, cls=Dataset):
    rng = np.random.default_rng(seed)
    dom = Domain(list("abcdef"), [2, 3, 4, 5, 2, 3])
    codes = np.stack([rng.integers(0, s, n) for s in dom.shape], axis=1)
    codes[:, 1] = np.where(rng.random(n) < 0.7, codes[:, 0], codes[:, 1])
    t = cls(codes, dom)
    if cls is CountingDataset:
        object.__setattr__(t, "calls", [])
    return t


def test_reference_points_reuse_the_holdout_counts_and_agree_with_fresh_counts(monkeypatch):
    from vertisynth.plugins.evaluators import tvd

    train, synthetic = _table(0, 3000), _table(1, 3000)
    holdout = _table(2, 800, CountingDataset)
    real = tvd._Columns.count_vector   # the evaluator counts on each table's columns (bit for bit count_vector's)

    def counted(self, attrs_):
        if isinstance(self.table, CountingDataset):
            self.table.calls.append(tuple(attrs_))
        return real(self, attrs_)
    monkeypatch.setattr(tvd._Columns, "count_vector", counted)
    ev = TVDEvaluator(TVDConfig(ways=[2, 3], marginals=12))
    metrics = ev.evaluate(holdout, synthetic, np.random.default_rng(0))
    refs = ev.reference_points(train, holdout)
    multi = [c for c in holdout.calls if len(c) > 1]
    assert len(multi) == len(set(multi)) == 24   # each scored marginal once
    for k in (2, 3):
        sets = ev._last_sets[k]
        assert metrics[f"tvd_{k}way"] == np.mean([marginal_tvd(holdout, synthetic, s) for s in sets])
        assert refs[f"tvd_{k}way"]["holdout_floor"] == np.mean([marginal_tvd(train, holdout, s) for s in sets])
    # a later evaluation on another real table does not reuse the first one's counts
    other = _table(3, 800)
    ev.evaluate(other, synthetic, np.random.default_rng(0))
    again = ev.reference_points(train, other)
    sets = ev._last_sets[2]
    assert again["tvd_2way"]["holdout_floor"] == np.mean([marginal_tvd(train, other, s) for s in sets])


def test_count_vector_is_the_flat_counts_factor():
    t = _table(4, 500)
    for attrs_ in [("a",), ("c", "a"), ("f", "b", "d"), ()]:
        assert np.array_equal(t.count_vector(attrs_), t.counts(attrs_).values.ravel())


def test_column_counts_are_count_vector_bit_for_bit():
    """The evaluator's column-major copy (`_Columns`, uint8/uint16 codes) counts as `Dataset.count_vector` does."""
    from vertisynth.plugins.evaluators.tvd import _Columns

    rng = np.random.default_rng(7)
    # uint8 and uint16 codes; pairs' codes in uint8, uint16 (300 · 2) and uint32 (300 · 700); 1- to 5-way, in the
    # domain's order and reversed (the flat index follows the order asked for)
    for sizes in ([2, 3, 4, 5, 2, 3], [300, 2, 700, 3]):
        dom = Domain([f"x{i}" for i in range(len(sizes))], sizes)
        t = Dataset(np.stack([rng.integers(0, s, 400) for s in sizes], axis=1), dom)
        cols = _Columns(t)
        for attrs_ in itertools.chain.from_iterable(itertools.combinations(dom.attributes, k) for k in range(6)):
            for order in (attrs_, attrs_[::-1]):
                assert np.array_equal(cols.count_vector(order), t.count_vector(order))
