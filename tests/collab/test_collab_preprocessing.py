"""DP quantile binning and bin means over several custodians through secure aggregation."""
import numpy as np
import pytest

from vertisynth.collab.preprocessing import QuantileBinningPlan, combined_quantile_binning
from vertisynth.core.errors import BudgetError, DataError
from vertisynth.core.privacy import Budget, PrivacyLedger


def _values(seed=0):
    rng = np.random.default_rng(seed)
    return {"a": rng.normal(40, 10, 3000), "b": rng.normal(60, 5, 2000)}  # different local distributions


def test_quantiles_close_to_the_combined_truth_at_large_budget():
    plan = QuantileBinningPlan("x", (0.0, 100.0), 4, rho_hist=50.0, rho_means=50.0)
    ledger = PrivacyLedger(Budget(1e6, 1e-5))
    ledger.plan(plan.charges())
    vals = _values()
    edges, means = combined_quantile_binning(plan, vals, ledger, np.random.default_rng(1))
    allv = np.concatenate(list(vals.values()))
    truth = np.quantile(allv, [0.25, 0.5, 0.75])
    assert np.abs(edges[1:-1] - truth).max() < 0.5  # grid resolution 0.1 plus tiny noise
    b = np.clip(np.searchsorted(edges, allv, side="right") - 1, 0, 3)
    true_means = np.array([allv[b == k].mean() for k in range(4)])
    assert np.abs(means - true_means).max() < 0.5
    assert not ledger.unspent()
    # local-only quantiles of one custodian are far from the combined ones (why combining matters)
    assert np.abs(np.quantile(vals["a"], [0.25, 0.5, 0.75]) - truth).max() > 3


def test_small_budget_is_noisier_but_edges_stay_ordered():
    plan = QuantileBinningPlan("x", (0.0, 100.0), 4, rho_hist=1e-4, rho_means=1e-4)
    ledger = PrivacyLedger(Budget(10.0, 1e-5))
    ledger.plan(plan.charges())
    edges, means = combined_quantile_binning(plan, _values(), ledger, np.random.default_rng(2))
    assert (np.diff(edges) >= 0).all() and edges[0] == 0 and edges[-1] == 100
    assert ((means >= edges[:-1]) & (means <= edges[1:])).all()


def test_spend_must_be_planned_and_bad_input():
    plan = QuantileBinningPlan("x", (0.0, 100.0), 4, rho_hist=1.0, rho_means=1.0)
    with pytest.raises(BudgetError, match="unplanned"):
        combined_quantile_binning(plan, _values(), PrivacyLedger(Budget(10.0, 1e-5)), np.random.default_rng(0))
    ledger = PrivacyLedger(Budget(10.0, 1e-5))
    ledger.plan(plan.charges())
    with pytest.raises(DataError, match="missing values"):
        combined_quantile_binning(plan, {"a": np.array([1.0, np.nan])}, ledger, np.random.default_rng(0))
