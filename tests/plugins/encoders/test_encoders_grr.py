"""GRR encoder: calibration (Theorem 1), unbiasedness, the variance formula, files, bad input, audit."""
from __future__ import annotations

import math
from itertools import product

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chi2

from encoder_helpers import epsilon_lower_bound, planned, toy_data
from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.errors import BudgetError, ConfigError, DataError, DomainError, MessageError
from vertisynth.core.interfaces import PlanContext
from vertisynth.core.messages import Message
from vertisynth.core.privacy import Budget, Composition, PureDP
from vertisynth.plugins.encoders.grr import (
    GRRConfig, GRREncoder, GRRMessage, grr_perturb, grr_variance, keep_probability, unbias,
)


def encode_all(enc, data, part, ledger, rng):
    views = part.views(data)
    return [enc.encode(p, views[p], ledger, rng) for p in part.names]


# -- calibration and accounting --------------------------------------------------------------
def test_epsilon0_is_the_better_of_basic_and_rdp_composition():
    data, part = toy_data(100)
    enc = GRREncoder()
    ctx = PlanContext(data.domain, part, Budget(1.0, 1e-5))
    charges = enc.plan(ctx)
    assert len(charges) == 4 and all(c.cost == PureDP(enc.epsilon0) for c in charges)
    # 4 attributes at ε=1: basic composition (ε₀ = 1/4) is the better bound here
    assert enc.epsilon0 == pytest.approx(0.25, rel=1e-6)
    # many attributes: the RDP route allows a larger ε₀ than ε/d, and the composition hits the budget
    wide = Domain([f"x{i}" for i in range(400)], [2] * 400)
    from vertisynth.core.dataset import VerticalPartition

    ctx = PlanContext(wide, VerticalPartition.from_lists([wide.attributes[:200], wide.attributes[200:]]), Budget(4.0, 1e-6))
    enc.plan(ctx)
    assert enc.epsilon0 > 4.0 / 400 * 1.5
    assert Composition.of([PureDP(enc.epsilon0)] * 400).epsilon(1e-6) == pytest.approx(4.0, rel=1e-6)


def test_ledger_spends_exactly_the_plan(rng):
    data, part = toy_data(500)
    enc = GRREncoder()
    ledger = planned(enc, data, part, 2.0)
    encode_all(enc, data, part, ledger, rng)
    assert ledger.unspent() == []
    assert ledger.spent_epsilon() == pytest.approx(2.0, rel=1e-6)


def test_explicit_epsilon_slice_and_bad_config():
    data, part = toy_data(100)
    enc = GRREncoder(GRRConfig(epsilon=0.4))
    enc.plan(PlanContext(data.domain, part, Budget(2.0, 1e-5)))
    assert enc.epsilon0 == pytest.approx(0.1, rel=1e-6)
    with pytest.raises(ConfigError, match="postprocess"):
        GRRConfig(postprocess="round")
    with pytest.raises(ConfigError, match="epsilon"):
        GRRConfig(epsilon=-1.0)


# -- the estimator -------------------------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=3), st.floats(0.05, 4.0), st.integers(0, 10**6))
def test_kronecker_inverse_inverts_the_full_transition_matrix(sizes, eps, seed):
    """unbias(P T) == T, with P the explicit Π u × Π u Kronecker matrix (built only in this test)."""
    pq = [keep_probability(eps, u) for u in sizes]
    big = np.ones((1, 1))
    for (p, q), u in zip(pq, sizes):
        big = np.kron(big, (p - q) * np.eye(u) + q * np.ones((u, u)))
    truth = np.random.default_rng(seed).integers(0, 50, size=sizes).astype(float)
    observed = (big @ truth.ravel()).reshape(sizes)
    assert np.allclose(unbias(observed, pq), truth, atol=1e-6 * max(1, truth.sum()))


def test_perturbation_follows_eq6():
    ids = np.arange(200_000)
    out = grr_perturb(np.zeros(ids.size, dtype=np.int64), 4, 1.0, b"k" * 32, 0, ids)
    p, q = keep_probability(1.0, 4)
    freq = np.bincount(out, minlength=4) / ids.size
    se = math.sqrt(p * (1 - p) / ids.size)
    assert abs(freq[0] - p) < 5 * se and np.all(np.abs(freq[1:] - q) < 5 * se)


def test_estimates_are_unbiased_and_variance_matches_theorem1():
    """Over R seeded runs: the mean is within 4.5 standard errors of the truth in every cell, and the
    empirical variance sits in its chi-square band around the exact formula (evaluated at the truth)."""
    data, part = toy_data(1500, seed=3)
    enc = GRREncoder()
    planned(enc, data, part, 2.0)
    views = part.views(data)
    ids = np.arange(data.n)
    attrs = ["a", "b", "c"]
    dom = data.domain.project(attrs)
    runs = 400
    ests = []
    for r in range(runs):
        cols = {}
        for p in part.names:
            cols.update(enc.perturb(p, views[p], np.random.default_rng(r).bytes(32) if p == "alice" else
                                    np.random.default_rng(10_000 + r).bytes(32), ids))
        counts = np.bincount(np.ravel_multi_index([cols[a] for a in attrs], dom.shape), minlength=dom.size())
        ests.append(unbias(counts.reshape(dom.shape), [keep_probability(enc.epsilon0, u) for u in dom.shape]))
    ests = np.array(ests)
    truth = data.counts(attrs).values
    pq = [keep_probability(enc.epsilon0, u) for u in dom.shape]
    axes_attrs = lambda axes: data.counts([attrs[i] for i in axes]).values
    var = grr_variance(dom, pq, data.n, axes_attrs)
    z = (ests.mean(0) - truth) / np.sqrt(var / runs)
    assert np.abs(z).max() < 4.5
    ratio = ests.var(0, ddof=1) / var
    lo, hi = chi2.ppf([1e-4, 1 - 1e-4], runs - 1) / (runs - 1)
    assert np.all((ratio > lo) & (ratio < hi)), ratio
    # the leading term n Π q(1−q)/(p−q)² is Theorem 1's O(n/ε'^{2l})
    lead = data.n * np.prod([q * (1 - q) / (p - q) ** 2 for p, q in pq])
    assert np.all(var >= lead * 0.5)


def test_estimate_api_variance_is_plugin_of_the_formula(rng):
    data, part = toy_data(3000)
    enc = GRREncoder()
    ledger = planned(enc, data, part, 3.0)
    msgs = encode_all(enc, data, part, ledger, rng)
    est = enc.estimate_with_variance(msgs, ["b", "a"])
    assert est.counts.attributes == ("b", "a") and est.variance.values.shape == (4, 3)
    assert est.counts.total() == pytest.approx(data.n, rel=1e-9)  # P⁻¹ preserves the total
    z = (est.counts.values - data.counts(["b", "a"]).values) / np.sqrt(est.variance.values)
    assert np.abs(z).max() < 5


def test_postprocess_project_is_nonnegative_and_sums_to_n(rng):
    data, part = toy_data(800)
    enc = GRREncoder(GRRConfig(postprocess="project"))
    msgs = encode_all(enc, data, part, planned(enc, data, part, 0.5), rng)
    f = enc.estimate(msgs, ["a", "b", "d"])
    assert f.values.min() >= 0 and f.total() == pytest.approx(data.n)
    clip = GRREncoder(GRRConfig(postprocess="clip"))
    assert clip.estimate(msgs, ["a", "b"]).values.min() >= 0


def test_same_seed_same_messages():
    data, part = toy_data(500)
    outs = []
    for _ in range(2):
        enc = GRREncoder()
        msgs = encode_all(enc, data, part, planned(enc, data, part, 1.0), np.random.default_rng(7))
        outs.append(msgs)
    for m1, m2 in zip(*outs):
        for a in m1.columns:
            assert np.array_equal(m1.columns[a], m2.columns[a])


# -- party boundary and files ---------------------------------------------------------------------
def test_server_estimates_from_files_alone(tmp_path, rng):
    data, part = toy_data(600)
    enc = GRREncoder()
    msgs = encode_all(enc, data, part, planned(enc, data, part, 1.0), rng)
    paths = [m.save(tmp_path / f"{m.party}.grr.npz") for m in msgs]
    server = GRREncoder()  # a fresh object: no plan, no data, only the files
    loaded = [Message.load(p) for p in paths]
    a = server.estimate_with_variance(loaded, ["c", "d"])
    b = enc.estimate_with_variance(msgs, ["c", "d"])
    assert np.array_equal(a.counts.values, b.counts.values) and np.array_equal(a.variance.values, b.variance.values)


def test_bad_inputs_raise_clear_errors(tmp_path, rng):
    data, part = toy_data(300)
    enc = GRREncoder()
    with pytest.raises(DataError, match="plan"):
        enc.encode("alice", part.views(data)["alice"], None, rng)
    ledger = planned(enc, data, part, 1.0)
    with pytest.raises(DomainError, match="does not hold"):
        enc.encode("alice", data.project(["a", "b"]), ledger, rng)
    with pytest.raises(DataError, match="unknown party"):
        enc.encode("carol", data.project(["a"]), ledger, rng)
    with pytest.raises(DomainError, match="outside its domain"):
        Dataset(np.array([[0, 7]]), Domain(["a", "c"], [3, 2]))
    msgs = encode_all(enc, data, part, ledger, rng)
    with pytest.raises(DomainError, match="no message holds"):
        enc.estimate(msgs, ["a", "zz"])
    # a message with codes out of its domain
    bad = dict(msgs[0].columns)
    bad["a"] = bad["a"].copy()
    bad["a"][0] = 9
    with pytest.raises(MessageError, match="outside"):
        GRRMessage(party="alice", domain=msgs[0].domain, epsilon=msgs[0].epsilon, n=msgs[0].n, columns=bad).validate()
    # parties disagreeing on n or ε
    short = GRRMessage(party="bob", domain=msgs[1].domain, epsilon=msgs[1].epsilon, n=10,
                       columns={a: c[:10] for a, c in msgs[1].columns.items()}).validate()
    with pytest.raises(MessageError, match="disagree on n"):
        enc.estimate([msgs[0], short], ["a", "b"])
    other_eps = GRRMessage(party="bob", domain=msgs[1].domain, epsilon=0.3, n=msgs[1].n, columns=msgs[1].columns)
    with pytest.raises(MessageError, match="disagree on epsilon"):
        enc.estimate([msgs[0], other_eps], ["a", "b"])
    with pytest.raises(MessageError, match="both"):
        enc.estimate([msgs[0], msgs[0]], ["a"])
    # a truncated file
    path = msgs[0].save(tmp_path / "m.npz")
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(MessageError, match="truncated"):
        Message.load(path)


def test_budget_left_is_checked():
    data, part = toy_data(100)
    ctx = PlanContext(data.domain, part, Budget(1.0, 1e-5), planned_before=(PureDP(1.0),))
    with pytest.raises(BudgetError):
        GRREncoder().plan(ctx)


# -- privacy audit ----------------------------------------------------------------------------------
def _grr_outputs(true_value: int, n: int, eps_used: float, seed: int) -> np.ndarray:
    key = np.random.default_rng(seed).bytes(32)
    return grr_perturb(np.full(n, true_value), 4, eps_used, key, 0, np.arange(n))


def test_grr_audit_certifies_no_more_than_epsilon_and_catches_miscalibration():
    """Neighbouring inputs x=0 vs x=1 of one attribute (u=4, ε₀=1). Events: the reported value.
    Calibrated: the certified lower bound stays below ε₀ yet is close to it (the audit has power).
    Mis-calibrated (perturbs with 1.6 ε₀ while claiming ε₀): the audit certifies more than ε₀."""
    eps, n = 1.0, 60_000
    events = [lambda y, v=v: y == v for v in range(4)]
    lb = epsilon_lower_bound(_grr_outputs(0, n, eps, 1), _grr_outputs(1, n, eps, 2), events)
    assert 0.85 * eps < lb <= eps
    lb_bad = epsilon_lower_bound(_grr_outputs(0, n, 1.6 * eps, 3), _grr_outputs(1, n, 1.6 * eps, 4), events)
    assert lb_bad > eps
