"""The Hypothesis strategies generate what they promise."""
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.errors import ConfigError
from vertisynth.core.privacy import Budget
from vertisynth.testing import strategies as vst

FAST = settings(max_examples=40, deadline=None)


def _rows(d: Dataset) -> Counter:
    return Counter(map(tuple, d.codes.tolist()))


@FAST
@given(vst.domains(max_attributes=4, max_size=5, max_cells=200))
def test_domains_respect_limits(dom):
    assert 1 <= len(dom) <= 4 and all(1 <= s <= 5 for s in dom.shape)
    assert dom.size() <= 200 or all(s == 1 for s in dom.shape[1:])


@FAST
@given(vst.datasets(vst.domains(max_attributes=3), min_rows=2, max_rows=10))
def test_datasets_fit_their_domain(data):
    assert 2 <= data.n <= 10
    assert np.all(data.codes < np.array(data.domain.shape)) and np.all(data.codes >= 0)


def _is_neighbour(pair) -> bool:
    a, b = _rows(pair.base), _rows(pair.neighbour)
    if pair.relation == "add_remove":
        diff = (a - b) + (b - a)
        return sum(diff.values()) == 1 and abs(pair.base.n - pair.neighbour.n) == 1
    return pair.base.n == pair.neighbour.n and sum((a - b).values()) == 1 and sum((b - a).values()) == 1


@FAST
@given(vst.neighbouring_pairs(vst.domains(max_attributes=3, min_size=2, max_size=4)))
def test_neighbouring_pairs_differ_in_exactly_one_record(pair):
    assert pair.relation in vst.RELATIONS
    assert _is_neighbour(pair), pair.describe()


@FAST
@given(vst.neighbouring_pairs(Domain(("x", "y"), (3, 2)), relation="substitute"))
def test_substitute_only(pair):
    assert pair.relation == "substitute" and _is_neighbour(pair)


def test_adversarial_pairs_come_first_and_are_neighbours():
    dom = Domain(("x", "y", "z"), (2, 3, 4))
    pairs = vst.adversarial_pairs(dom)
    assert pairs[0].base.n == 0 and pairs[0].neighbour.n == 1  # empty vs one record
    assert pairs[0].neighbour.codes.tolist() == [[1, 2, 3]]  # last code: a cell nobody else uses
    sub = pairs[1]
    assert sub.relation == "substitute" and np.all(sub.base.codes != sub.neighbour.codes)  # every attribute
    base = Dataset(np.array([[0, 0, 0], [0, 1, 1], [1, 0, 0]]), dom)
    pairs = vst.adversarial_pairs(dom, base)
    assert len(pairs) == 4
    assert pairs[2].neighbour.codes[-1].tolist() == [1, 2, 2]  # the least-populated code per attribute
    assert pairs[3].relation == "substitute" and np.all(pairs[3].base.codes[0] != pairs[3].neighbour.codes[0])
    assert all(_is_neighbour(p) for p in pairs)


@FAST
@given(st.data())
def test_vertical_partitions_cover_each_attribute_once(data):
    dom = data.draw(vst.domains(min_attributes=2, max_attributes=6))
    part = data.draw(vst.vertical_partitions(dom, max_parties=3))
    owned = [a for p in part for a in p.attributes]
    assert sorted(owned) == sorted(dom.attributes) and all(p.attributes for p in part)
    assert 1 <= len(part) <= 3


@FAST
@given(vst.party_id_sets(n_parties=3, max_ids=40))
def test_party_id_sets_intersection_is_the_common_core(ids):
    inter = set(ids.sets[0].tolist())
    for s in ids.sets[1:]:
        inter &= set(s.tolist())
    assert sorted(inter) == ids.common.tolist()
    assert all(len(set(s.tolist())) == len(s) for s in ids.sets)  # distinct within a party


@FAST
@given(vst.party_id_sets(n_parties=2, max_ids=30, overlap=1.0))
def test_full_overlap(ids):
    assert len(ids.common) == min(len(s) for s in ids.sets)


@FAST
@given(vst.budgets(), vst.gaussian_budgets())
def test_budgets_are_valid(b, g):
    assert isinstance(b, Budget) and 0.05 <= b.epsilon <= 10
    assert g.delta > 0 and g.rho() > 0


@settings(max_examples=1, deadline=None)
@given(st.data())
def test_bad_arguments(data):
    with pytest.raises(ConfigError, match="min_attributes"):
        data.draw(vst.domains(min_attributes=0))
    with pytest.raises(ConfigError, match="relation"):
        data.draw(vst.neighbouring_pairs(relation="swap"))
    with pytest.raises(ConfigError, match="overlap"):
        data.draw(vst.party_id_sets(overlap=1.5))
