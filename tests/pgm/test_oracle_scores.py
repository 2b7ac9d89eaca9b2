"""The oracle's score vectors (indif, l1_errors): exact at a huge budget, paid before the data is read, the noise
the plan's ρ gives, refused with one line when the payment or the query is wrong."""
import math

import numpy as np
import pytest

from vertisynth.core.errors import BudgetError, ConfigError, DomainError
from vertisynth.core.mechanisms import gaussian_mechanism
from vertisynth.core.privacy import Budget, Charge, PrivacyLedger, ZCDP
from vertisynth.pgm.oracle import CentralOracle, MarginalOracle, ZCDPFilter
from vertisynth.pgm.scores import INDIF_SENSITIVITY, indif

from tests.synthetic_tables import correlated


def _oracle(*charges, eps=1.0):
    data = correlated(3000)
    ledger = PrivacyLedger(Budget(eps, 1e-9))
    ledger.plan(list(charges))
    return data, ledger, CentralOracle(data, ledger)


def test_indif_is_the_noisy_score_vector_at_the_plans_noise():
    big = Charge("synthesizer", "scores", ZCDP(1e12))
    data, ledger, oracle = _oracle(big, eps=1e7)
    assert isinstance(oracle, MarginalOracle)
    pairs = [("a", "b"), ("c", "e"), ("b", "d")]
    got = oracle.indif(pairs, big, np.random.default_rng(0))
    assert np.allclose(got, [indif(data, a, b) for a, b in pairs], atol=1e-2)
    assert ledger.spent == [big]
    # the same draws as a Gaussian mechanism of L2 sensitivity 5·√m on the same stream (PrivMRF's R = InDif/2)
    ch = Charge("synthesizer", "scores", ZCDP(0.05))
    data, ledger, oracle = _oracle(ch)
    noisy = oracle.indif(pairs, ch, np.random.default_rng(3))
    ref_ledger = PrivacyLedger(Budget(1.0, 1e-9))
    ref_ledger.plan([ch])
    ref = gaussian_mechanism(np.array([indif(data, a, b) for a, b in pairs]), ch, np.random.default_rng(3), ref_ledger,
                             INDIF_SENSITIVITY * math.sqrt(3))
    assert np.allclose(noisy, ref)


def test_l1_errors_read_binned_marginals_and_draw_a_filter_down():
    env = Charge("synthesizer", "rounds", ZCDP(1e12))
    data, ledger, oracle = _oracle(env, eps=1e7)
    filt = ZCDPFilter(env, ledger)
    cands = [("a", "b"), ("c",)]
    bins = [{"b": np.array([0, 0, 1, 1, 1, 2, 2, 2])}, None]
    est = [np.zeros((3, 3)), np.full(data.domain.size("c"), 1.0)]
    got = oracle.l1_errors(cands, est, filt, np.random.default_rng(0), sigma=1e-3, bins=bins)
    assert got == pytest.approx([data.n, np.abs(data.counts(["c"]).values - 1).sum()], abs=0.05)
    assert filt.used == pytest.approx(2 / (2 * 1e-6))


def test_score_queries_refuse_bad_payments_and_queries_before_reading():
    ch = Charge("synthesizer", "scores", ZCDP(0.05))
    data, ledger, oracle = _oracle(ch)
    rng = np.random.default_rng(0)
    with pytest.raises(BudgetError, match="not what this answer costs"):
        oracle.indif([("a", "b")], ch, rng, sigma=1.0)
    with pytest.raises(ConfigError, match="needs as many estimates"):
        oracle.l1_errors([("a",)], [], ch, rng)
    with pytest.raises(ConfigError, match="at least one pair"):
        oracle.indif([], ch, rng)
    with pytest.raises(DomainError):
        oracle.indif([("a", "nope")], ch, rng)
    assert ledger.spent == []
