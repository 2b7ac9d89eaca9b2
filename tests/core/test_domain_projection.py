"""Domain's fast paths (a name → axis index, sub-domains built without re-checking a valid domain's parts) give
exactly what the checked constructor gives, and the same errors for bad names."""
import pickle

import numpy as np
import pytest

from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.errors import DomainError

DOM = Domain(["a", "b", "c", "d"], [3, 2, 4, 5], {"b": ["no", "yes"], "d": list("vwxyz")})


@pytest.mark.parametrize("names", [("a",), ("d", "b"), ("c", "a", "d"), ("b", "c", "d", "a"), ()])
def test_a_projection_equals_the_checked_constructor(names):
    fast = DOM.project(names)
    slow = Domain(names, [DOM.shape[DOM.attributes.index(a)] for a in names],
                  {a: DOM.labels[a] for a in names if a in DOM.labels})
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert fast.labels == slow.labels and fast.to_dict() == slow.to_dict()
    assert [fast.size(a) for a in names] == [slow.size(a) for a in names]
    assert fast.axes(names) == tuple(range(len(names)))
    back = pickle.loads(pickle.dumps(fast))   # the index travels with it (parties' processes, Dask)
    assert back == fast and back.axes(names) == fast.axes(names)


def test_names_equal_to_the_attributes_come_out_as_the_domains_strings():
    sub = DOM.project([np.str_("c"), np.str_("a")])
    assert sub.attributes == ("c", "a") and all(type(a) is str for a in sub.attributes)


@pytest.mark.parametrize("bad, match", [(["e"], "unknown attribute 'e'"), (["a", "a"], "repeats an attribute"),
                                        ([["a"]], "unknown attribute"), ([None], "unknown attribute None")])
def test_bad_names_raise_the_domain_error(bad, match):
    for call in (DOM.project, DOM.axes, DOM.check, DOM.marginalize):
        with pytest.raises(DomainError, match=match):
            call(bad)
    if len(bad) == 1 and bad[0] is not None:   # size(None): the whole domain's size
        with pytest.raises(DomainError, match="unknown attribute"):
            DOM.size(bad[0])


def test_counts_on_a_projection_match_a_direct_count():
    rng = np.random.default_rng(0)
    codes = np.stack([rng.integers(0, s, 500) for s in DOM.shape], axis=1)
    data = Dataset(codes, DOM)
    f = data.counts(["d", "a"])
    ref = np.zeros((5, 3))
    np.add.at(ref, (codes[:, 3], codes[:, 0]), 1)
    assert f.domain == Domain(["d", "a"], [5, 3], {"d": list("vwxyz")}) and np.array_equal(f.values, ref)
    assert data.counts([]).values == 500
