"""VertiMRF dimension reduction: binning, DP value distributions (charged), HisRec."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.errors import BudgetError, MessageError
from vertisynth.core.privacy import Budget, PrivacyLedger
from vertisynth.plugins.synthesizers.vertimrf.dimension import (ValueDistributions, bin_dataset, bin_map, hisrec,
                                                                measure_value_distributions, normalise_within_bins,
                                                                planned_charges, uniform_distributions)


@given(st.integers(1, 60), st.integers(1, 10))
def test_bin_map_is_monotone_equal_width(size, bins):
    bm = bin_map(size, bins)
    assert bm.min() == 0 and bm.max() == min(size, bins) - 1
    assert (np.diff(bm) >= 0).all() and (np.diff(bm) <= 1).all()
    counts = np.bincount(bm)
    assert counts.max() - counts.min() <= 1


def _data(seed=0, n=3000):
    rng = np.random.default_rng(seed)
    dom = Domain(["x", "y", "z"], [12, 7, 3])
    x = rng.integers(0, 12, n)
    y = (x * 7 // 12 + rng.integers(0, 2, n)) % 7
    z = rng.integers(0, 3, n)
    return Dataset(np.column_stack([x, y, z]), dom)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 1000), st.integers(1, 6))
def test_hisrec_recovers_exact_tables_when_within_bin_distributions_are_exact(seed, bins):
    """If count[x, z] = a[x] · c[bin(x), z] (values independent of z given the bin), HisRec with the exact
    within-bin distributions recovers the full table exactly, and always preserves the total."""
    rng = np.random.default_rng(seed)
    dom = Domain(["x", "z"], [12, 3])
    bm = bin_map(12, bins)
    a = rng.integers(1, 5, 12)
    c = rng.integers(0, 4, (bm.max() + 1, 3))
    table = a[:, None] * c[bm]
    xs, zs = np.nonzero(table >= 0)
    codes = np.repeat(np.column_stack([xs, zs]), table[xs, zs], axis=0)
    data = Dataset(codes, dom)
    low = bin_dataset(data, bins, ["x"]).counts(["x", "z"])
    exact = {"x": normalise_within_bins(data.counts(["x"]).values, bins)}
    high = hisrec(low, dom, exact, bins)
    assert high.total() == pytest.approx(data.n)
    assert np.allclose(high.values, table, atol=1e-9)


def test_hisrec_beats_uniform_on_skewed_values():
    rng = np.random.default_rng(3)
    dom = Domain(["x", "y"], [16, 2])
    x = np.minimum(rng.geometric(0.3, 20000) - 1, 15)
    y = (x % 2 == 0).astype(int)
    data = Dataset(np.column_stack([x, y]), dom)
    low = bin_dataset(data, 4, ["x"]).counts(["x", "y"])
    truth = data.counts(["x", "y"]).values
    exact = {"x": normalise_within_bins(data.counts(["x"]).values, 4)}
    err_hisrec = np.abs(hisrec(low, dom, exact, 4).values - truth).sum()
    err_uniform = np.abs(hisrec(low, dom, uniform_distributions(dom, 4, ["x"]), 4).values - truth).sum()
    assert err_hisrec < err_uniform


def test_value_distributions_are_noised_and_charged(tmp_path):
    data = _data()
    ledger = PrivacyLedger(Budget(1.0))
    charges = dict(zip(["x", "y"], planned_charges("p1", ["x", "y"], 0.1)))
    ledger.plan(charges.values())
    msg = measure_value_distributions("p1", data, 4, ["x", "y"], charges, ledger, np.random.default_rng(0))
    assert ledger.spent_epsilon() == pytest.approx(0.2)  # sequential over attributes
    exact = normalise_within_bins(data.counts(["x"]).values, 4)
    assert not np.allclose(msg.distributions["x"], exact)  # really noised
    assert np.abs(msg.distributions["x"] - exact).max() < 0.2
    msg.save(tmp_path / "vd.npz")
    back = ValueDistributions.load(tmp_path / "vd.npz")
    assert np.allclose(back.distributions["y"], msg.distributions["y"])
    with pytest.raises(BudgetError, match="unplanned"):
        measure_value_distributions("p1", data, 4, ["x"], charges, ledger, np.random.default_rng(0))  # spent once


def test_malformed_value_distributions_are_refused():
    with pytest.raises(MessageError, match="sum to 1 within every bin"):
        ValueDistributions(party="p", bins=2, distributions={"x": np.array([0.5, 0.1, 0.2, 0.2])}).validate()
