"""Cramér's V and NMI matrices (the correlation evaluator, the HTML report's heatmaps) count a Dataset's pairs from
its columns, not through `Dataset.counts` (a Factor and a sub-domain per pair): the same counts, the same scores."""
import itertools

import numpy as np
import pytest

from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.plugins.evaluators.correlation import association_matrices, pair_association


@pytest.mark.parametrize("sizes", [[2, 3, 40, 5, 1], [300, 2, 7]])
def test_association_matrices_count_columns_and_score_as_counts_do(monkeypatch, sizes):
    rng = np.random.default_rng(3)
    dom = Domain([f"x{i}" for i in range(len(sizes))], sizes)
    data = Dataset(np.stack([rng.integers(0, s, 500) for s in sizes], axis=1), dom)
    expected = {(i, j): pair_association(data.counts((dom.attributes[i], dom.attributes[j])).values)
                for i, j in itertools.combinations(range(len(sizes)), 2)}

    def no_factor(*a, **k):
        raise AssertionError("Dataset.counts called")

    monkeypatch.setattr(Dataset, "counts", no_factor)
    v, nmi = association_matrices(data)
    for (i, j), (ev, en) in expected.items():
        assert (v[i, j], nmi[i, j], v[j, i], nmi[j, i]) == (ev, en, ev, en)   # equal, not close
