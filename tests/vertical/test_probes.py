"""The shared cross-party probes (vertisynth/vertical/probes.py): public bins, one stage of planned charges, and the
scores a twin reads off a released probe."""
from collections import Counter

import numpy as np
import pytest

from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.privacy import Budget, Charge, PrivacyLedger, ZCDP
from vertisynth.pgm.estimation import Measurement
from vertisynth.pgm.oracle import CentralOracle
from vertisynth.vertical.probes import dependence, mass_bins, measure_probes, residual_l1, width_bins


def test_width_bins_come_from_the_domain_alone():
    dom = Domain(("a", "b", "c"), (10, 4, 3))
    bins = width_bins(dom, 4)
    assert set(bins) == {"a"} and bins["a"].tolist() == [0, 0, 0, 1, 1, 2, 2, 2, 3, 3]


def test_mass_bins_follow_the_noisy_mass_and_compose_with_an_earlier_binning():
    one = [Measurement(("a",), [100, 1, 1, 1, 100, 1, 1, 100], 1.0), Measurement(("b",), [5, 5], 1.0)]
    bins = mass_bins(one, 2)
    assert set(bins) == {"a"} and bins["a"].max() == 1 and bins["a"][0] == 0 and bins["a"][-1] == 1
    within = {"a": np.array([0, 1, 1, 1, 2, 1, 1, 3]),   # a compressed to 4 bins first
              "b": np.array([0, 0])}                       # b already on one bin: kept as it is
    got = mass_bins(one, 2, within)
    assert got["b"].tolist() == [0, 0]
    assert got["a"].shape == (8,) and set(got["a"].tolist()) == {0, 1}
    assert all(got["a"][i] == got["a"][j] for i in range(8) for j in range(8) if within["a"][i] == within["a"][j])


def test_probes_are_one_stage_of_planned_charges_on_their_bins():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 6, 4000)
    data = Dataset(np.column_stack([x, (x + rng.integers(0, 2, 4000)) % 6, rng.integers(0, 2, 4000)]),
                   Domain(("a", "b", "c"), (6, 6, 2)))
    charges = [Charge("synthesizer", "gaussian_cross_probe", ZCDP(0.05)) for _ in range(2)]
    ledger = PrivacyLedger(Budget(2.0, 1e-6))
    ledger.plan(charges)
    got = measure_probes(CentralOracle(data, ledger), [("a", "b"), ("a", "c")], charges, rng,
                         width_bins(data.domain, 3))
    assert Counter(ledger.spent) == Counter(charges)
    assert got[0].values.shape == (3, 3) and got[1].values.shape == (3, 2)
    assert dependence(got[0]) > 10 * max(dependence(got[1]), 1.0)


@pytest.mark.parametrize("dependent", [False, True])
def test_scores_read_off_a_released_probe_see_dependence_and_not_noise(dependent):
    rng = np.random.default_rng(1)
    margin = np.full((4, 4), 250.0)
    true = margin + (np.diag([150.0] * 4) - 50.0 if dependent else 0.0)
    m = Measurement(("a", "b"), true + rng.normal(0, 5.0, (4, 4)), 5.0)
    indep = np.outer(true.sum(1), true.sum(0)) / true.sum()
    l1 = np.abs(true - indep).sum()
    if dependent:
        assert dependence(m) == pytest.approx(l1, rel=0.1) and residual_l1(m, indep) == pytest.approx(l1, rel=0.1)
    else:
        assert dependence(m) < 0.05 * 4000 and residual_l1(m, indep) < 0.05 * 4000
    # the estimate is summed into the probe's bins first
    binned = Measurement(("a", "b"), m.values[:, :2] + m.values[:, 2:], 5.0 * np.sqrt(2),
                         {"b": np.array([0, 1, 0, 1])})
    assert np.isfinite(residual_l1(binned, indep))
