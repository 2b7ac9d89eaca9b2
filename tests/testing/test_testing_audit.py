"""The privacy auditor: its statistics, that it bites on over-claimed mechanisms, that it stays
quiet on correct ones, and that bad input gets a clear error."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.errors import ConfigError, DataError
from vertisynth.core.privacy import PureDP, ZCDP, zcdp_to_approx
from vertisynth.testing.audit import (AUDIT_LEVELS, NeighbourPair, PrivacyViolation, audit, claimed_epsilon,
                                      claimed_profile,
                                      cp_lower, cp_upper, epsilon_lower_bound, looped)
from vertisynth.testing.reference import ReferenceGaussianHistogram, ReferenceGRR, ReferenceLaplaceCount

DOM = Domain(("a",), (3,))
EMPTY = Dataset(np.zeros((0, 1), dtype=np.int64), DOM)
ONE = Dataset(np.zeros((1, 1), dtype=np.int64), DOM)
GRR_PAIR = [NeighbourPair(0, 1, "substitute", "value 0 vs 1")]
COUNT_PAIR = [NeighbourPair(EMPTY, ONE, "add_remove", "empty vs one record")]


# -- Clopper-Pearson -------------------------------------------------------------------------------
def test_clopper_pearson_known_values():
    # k = 0: the upper bound solves (1 − p)^n = α; k = n: the lower bound solves p^n = α.
    assert cp_upper(0, 100, 0.05) == pytest.approx(1 - 0.05 ** (1 / 100), rel=1e-9)
    assert cp_lower(100, 100, 0.05) == pytest.approx(0.05 ** (1 / 100), rel=1e-9)
    assert cp_lower(0, 100, 0.05) == 0.0 and cp_upper(100, 100, 0.05) == 1.0
    # Interior value against the binomial tail: P[Bin(n, lower) >= k] = α.
    lo = float(cp_lower(30, 100, 0.01))
    assert stats.binom.sf(29, 100, lo) == pytest.approx(0.01, rel=1e-6)


@given(st.integers(1, 500), st.data(), st.floats(1e-8, 0.2))
@settings(max_examples=60, deadline=None)
def test_clopper_pearson_brackets_the_estimate(n, data, alpha):
    k = data.draw(st.integers(0, n))
    lo, hi = float(cp_lower(k, n, alpha)), float(cp_upper(k, n, alpha))
    assert 0 <= lo <= k / n <= hi <= 1
    # smaller α → wider interval
    assert cp_lower(k, n, alpha / 10) <= lo + 1e-15 and cp_upper(k, n, alpha / 10) >= hi - 1e-15


def test_clopper_pearson_coverage_is_conservative():
    # Fixed seed, no reruns: 20,000 binomial draws; the one-sided 90% bound must cover p >= 90%
    # of the time (CP is exact-conservative). 3 standard errors of slack below 0.9.
    rng = np.random.default_rng(0)
    p, n, a = 0.3, 50, 0.1
    k = rng.binomial(n, p, 20_000)
    cover = np.mean(cp_lower(k, n, a) <= p)
    assert cover >= 0.9 - 3 * math.sqrt(0.09 / 20_000)


def test_epsilon_lower_bound_formula_and_delta_form():
    k1, k2, n, a = 6000, 2000, 10_000, 1e-3
    lb = epsilon_lower_bound(k1, k2, n, a)
    assert lb == pytest.approx(math.log(cp_lower(k1, n, a) / cp_upper(k2, n, a)))
    lb_d = epsilon_lower_bound(k1, k2, n, a, delta=0.1)
    assert lb_d == pytest.approx(math.log((cp_lower(k1, n, a) - 0.1) / cp_upper(k2, n, a)))
    assert lb_d < lb
    assert epsilon_lower_bound(10, 5, n, a, delta=0.5) == -np.inf  # δ swallows the event: no evidence


# -- it bites ------------------------------------------------------------------------------------
@pytest.mark.parametrize("overclaim", [1.1, 1.25])
def test_catches_overclaimed_grr(overclaim):
    report = audit(ReferenceGRR(4, 1.0, overclaim), GRR_PAIR, 1.0, level="standard", seed=11)
    assert not report.passed and report.epsilon_lb > 1.0


def test_catches_overclaimed_laplace_count():
    report = audit(ReferenceLaplaceCount(1.0, 1.25), COUNT_PAIR, 1.0, level="standard", seed=11)
    assert not report.passed


def test_catches_gaussian_with_wrong_rho():
    rho, delta = 0.5, 1e-3
    eps = zcdp_to_approx(rho, delta)
    report = audit(ReferenceGaussianHistogram(rho, overclaim=4), COUNT_PAIR, eps, delta, level="standard", seed=11)
    assert not report.passed


def test_failure_message_states_alpha_event_counts_and_bound():
    report = audit(ReferenceGRR(2, 1.0, 1.5), GRR_PAIR, 1.0, level="smoke", seed=2, alpha=1e-6)
    with pytest.raises(PrivacyViolation) as info:
        report.assert_ok()
    text = str(info.value)
    r = report.violations[0]
    assert "α = 1e-06" in text and "VIOLATION" in text
    assert "output == " in text  # the event
    assert f"{r.k1}/{r.n}" in text and f"{r.k2}/{r.n}" in text  # the counts
    assert f"{r.epsilon_lb:.4g}" in text and "Clopper-Pearson" in text  # the bound


# -- it stays quiet on correct mechanisms --------------------------------------------------------
@pytest.mark.parametrize("mech, pairs, eps, delta", [
    (ReferenceGRR(4, 1.0), GRR_PAIR, 1.0, 0.0),
    (ReferenceGRR(2, 0.2), GRR_PAIR, 0.2, 0.0),
    (ReferenceLaplaceCount(1.0), COUNT_PAIR, 1.0, 0.0),
    (ReferenceGaussianHistogram(0.5), COUNT_PAIR, zcdp_to_approx(0.5, 1e-3), 1e-3),
])
def test_correct_mechanisms_pass(mech, pairs, eps, delta):
    report = audit(mech, pairs, eps, delta, level="standard", seed=5)
    assert report.passed, report.message()
    # ...and the bound is informative, not vacuous: a tight mechanism gets close to its ε.
    if isinstance(mech, (ReferenceGRR, ReferenceLaplaceCount)):
        assert report.epsilon_lb > 0.8 * eps


def test_delta_aware_bound_accepts_a_delta_mechanism():
    # A mechanism that leaks its input with probability δ and is otherwise perfectly private
    # is (0, δ)-DP: the δ-aware bound must not flag it, the pure form would.
    class Leaky:
        def sample(self, value, n, rng):
            return np.where(rng.random(n) < 0.01, value, 2)

    pairs = [NeighbourPair(0, 1)]
    assert audit(Leaky(), pairs, 1e-9, 0.01, level="standard", seed=1).passed
    assert not audit(Leaky(), pairs, 1e-9, 0.0, level="standard", seed=1).passed


def test_same_seed_same_verdict_and_numbers():
    a = audit(ReferenceLaplaceCount(1.0), COUNT_PAIR, 1.0, level="smoke", seed=3)
    b = audit(ReferenceLaplaceCount(1.0), COUNT_PAIR, 1.0, level="smoke", seed=3)
    assert a == b


def test_alpha_is_split_over_pairs():
    two = COUNT_PAIR + [NeighbourPair(ONE, EMPTY, "add_remove", "reversed")]
    r = audit(ReferenceLaplaceCount(1.0), two, 1.0, level="smoke", seed=3, alpha=1e-4)
    assert all(x.alpha_per_interval == pytest.approx(1e-4 / 4) for x in r.results)


def test_looped_real_path_matches_vectorised_hook():
    grr = ReferenceGRR(3, 1.0)
    slow = looped(lambda v, rng: grr.sample(v, 1, rng))
    out = slow.sample(1, 3000, np.random.default_rng(0))
    assert out.shape == (3000, 1)
    # keep-probability e/(e+2) ≈ 0.576
    assert abs(np.mean(out == 1) - math.e / (math.e + 2)) < 0.04


def test_claimed_epsilon_composes_declared_costs():
    assert claimed_epsilon([PureDP(0.3), PureDP(0.7)], 0.0) == pytest.approx(1.0)
    assert claimed_epsilon([ZCDP(0.5)], 1e-3) == pytest.approx(zcdp_to_approx(0.5, 1e-3))


def test_claimed_profile_points():
    assert claimed_profile([PureDP(0.4), PureDP(0.6)], 1e-5) == [(pytest.approx(1.0), 0.0)]
    pts = claimed_profile([ZCDP(0.1)], 1e-5)
    assert [d for _, d in pts] == [1e-5, 1e-3, 1e-2]
    assert [e for e, _ in pts] == pytest.approx([zcdp_to_approx(0.1, d) for d in (1e-5, 1e-3, 1e-2)])
    assert [e for e, _ in pts] == sorted((e for e, _ in pts), reverse=True)  # larger δ, smaller ε


def test_profile_audit_catches_gaussian_the_budget_delta_misses():
    # ρ-zCDP claimed, 4ρ spent: invisible at δ = 1e-5 with 2e4 samples, visible at δ = 1e-2.
    rho = 0.0306
    mech = ReferenceGaussianHistogram(rho, overclaim=4)
    points = claimed_profile([ZCDP(rho)], 1e-5)
    assert audit(mech, COUNT_PAIR, *points[0], level="smoke", seed=2).passed
    report = audit(mech, COUNT_PAIR, claims=points, level="smoke", seed=2)
    assert not report.passed and all(r.alpha_per_interval == pytest.approx(1e-6 / 6) for r in report.results)
    assert "3 claim(s)" in report.message()


def test_levels():
    assert AUDIT_LEVELS == {"smoke": 20_000, "standard": 100_000, "thorough": 1_000_000}


# -- bad input -----------------------------------------------------------------------------------
def test_bad_inputs_raise_clear_errors():
    grr = ReferenceGRR(2, 1.0)
    with pytest.raises(ConfigError, match="sample"):
        audit(object(), GRR_PAIR, 1.0)
    with pytest.raises(ConfigError, match="alpha"):
        audit(grr, GRR_PAIR, 1.0, alpha=0)
    with pytest.raises(ConfigError, match="epsilon"):
        audit(grr, GRR_PAIR, -1.0)
    with pytest.raises(ConfigError, match="delta"):
        audit(grr, GRR_PAIR, 1.0, delta=1.0)
    with pytest.raises(ConfigError, match="pair"):
        audit(grr, [], 1.0)
    with pytest.raises(ConfigError, match="level"):
        audit(grr, GRR_PAIR, 1.0, level="heavy")
    with pytest.raises(ConfigError, match="either"):
        audit(grr, GRR_PAIR, 1.0, claims=[(1.0, 0.0)])
    with pytest.raises(ConfigError, match="claimed epsilon"):
        audit(grr, GRR_PAIR)
    with pytest.raises(ConfigError, match="empty"):
        audit(grr, GRR_PAIR, claims=[])

    class WrongLength:
        def sample(self, d, n, rng):
            return np.zeros(n - 1)

    with pytest.raises(DataError, match="shape"):
        audit(WrongLength(), GRR_PAIR, 1.0, n_samples=100)

    class NaNs:
        def sample(self, d, n, rng):
            return np.full(n, np.nan)

    with pytest.raises(DataError, match="NaN"):
        audit(NaNs(), GRR_PAIR, 1.0, n_samples=100)


# -- the auditor's own statistical audit (slow): false alarms stay below α -----------------------
@pytest.mark.slow
@pytest.mark.audit_cost(2)   # CPU s, measured alone (2026-12-02: 1.8)
def test_false_alarm_rate_below_alpha():
    # 200 fixed-seed audits of correct mechanisms at α = 0.05: false alarms must be rare. Each
    # audit alarms with probability <= α; allow the binomial 1e-4 upper quantile of Bin(200, 0.05).
    alarms = 0
    for seed in range(100):
        alarms += not audit(ReferenceGRR(4, 1.0), GRR_PAIR, 1.0, level="smoke", seed=seed, alpha=0.05).passed
        alarms += not audit(ReferenceLaplaceCount(1.0), COUNT_PAIR, 1.0, level="smoke", seed=seed, alpha=0.05).passed
    assert alarms <= stats.binom.ppf(1 - 1e-4, 200, 0.05)


# -- properties ----------------------------------------------------------------------------------
@given(st.integers(0, 2000), st.integers(0, 2000), st.integers(1, 400), st.floats(1e-9, 0.1), st.floats(0, 0.05))
@settings(max_examples=80, deadline=None)
def test_bound_is_monotone_in_the_counts_and_in_delta(k1, k2, step, alpha, delta):
    n = 2400
    lb = epsilon_lower_bound(k1, k2, n, alpha, delta)
    assert epsilon_lower_bound(min(k1 + step, n), k2, n, alpha, delta) >= lb  # more hits under D: more evidence
    assert epsilon_lower_bound(k1, min(k2 + step, n), n, alpha, delta) <= lb  # more hits under D': less
    assert epsilon_lower_bound(k1, k2, n, alpha, delta + 0.01) <= lb  # a larger δ explains more away


@given(st.floats(0.1, 3.0), st.integers(2, 12), st.integers(0, 2**32 - 1))
@settings(max_examples=25, deadline=None)
def test_correct_grr_never_flagged(eps, k, seed):
    # Each example is a fresh audit at α = 1e-6: a flag here would be a one-in-a-million event
    # (or a bug in the auditor), so the property is safe to assert for every example.
    report = audit(ReferenceGRR(k, eps), GRR_PAIR, eps, n_samples=5000, seed=seed)
    assert report.passed, report.message()
    assert report.epsilon_lb <= eps


@given(st.floats(0.1, 3.0), st.integers(0, 2**32 - 1))
@settings(max_examples=25, deadline=None)
def test_correct_laplace_never_flagged_and_tripled_epsilon_always_caught(eps, seed):
    assert audit(ReferenceLaplaceCount(eps), COUNT_PAIR, eps, n_samples=5000, seed=seed).passed
    # A mechanism that really runs at 3ε: P[count ≤ 0] is 1/2 vs e^{-3ε}/2, far past the sampling error.
    assert not audit(ReferenceLaplaceCount(eps, overclaim=3.0), COUNT_PAIR, eps, n_samples=20_000, seed=seed).passed
