"""Ledger arithmetic against closed forms, budgets, the plan/spend contract, mechanisms and their audits, messages."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy import optimize

from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.errors import BudgetError, MessageError
from vertisynth.core.mechanisms import gaussian_mechanism, gaussian_sigma, laplace_mechanism
from vertisynth.core.messages import Message, NoisyMarginals
from vertisynth.core.privacy import (RDP, ApproxDP, Budget, Charge, Composition, PrivacyLedger, PureDP, ZCDP,
                                     remaining_rho, zcdp_to_approx)
from vertisynth.testing.audit import NeighbourPair, audit


@settings(max_examples=50, deadline=None)
@given(st.floats(1e-4, 5), st.floats(1e-12, 1e-2))
def test_zcdp_conversion_is_tighter_than_the_classic_bound_and_matches_a_numeric_minimum(rho, delta):
    eps = zcdp_to_approx(rho, delta)
    assert eps <= rho + 2 * math.sqrt(rho * math.log(1 / delta)) + 1e-9

    def cks(alpha):  # Canonne-Kamath-Steinke bound at order alpha
        return rho * alpha + math.log((alpha - 1) / alpha) - (math.log(delta) + math.log(alpha)) / (alpha - 1)

    best = optimize.minimize_scalar(cks, bounds=(1 + 1e-6, 1e5), method="bounded", options={"xatol": 1e-10})
    assert eps == pytest.approx(max(best.fun, 0.0), rel=2e-3, abs=1e-6)


@settings(max_examples=30, deadline=None)
@given(st.floats(0.01, 10), st.sampled_from([1e-9, 1e-6, 1e-5, 1e-3]))
def test_budget_rho_inverts_the_conversion(eps, delta):
    b = Budget(eps, delta)
    assert zcdp_to_approx(b.rho(), delta) == pytest.approx(eps, rel=1e-6)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(0.01, 2), min_size=1, max_size=6))
def test_composition_closed_forms(eps_list):
    pure = Composition.of([PureDP(e) for e in eps_list])
    assert pure.epsilon(0.0) == pytest.approx(sum(eps_list))
    assert pure.zcdp_rho == pytest.approx(sum(e * e / 2 for e in eps_list))
    z = Composition.of([ZCDP(e) for e in eps_list])
    assert z.zcdp_rho == pytest.approx(sum(eps_list))
    assert z.epsilon(1e-5) == pytest.approx(zcdp_to_approx(sum(eps_list), 1e-5), rel=1e-9)
    approx = Composition.of([ApproxDP(e, 1e-6) for e in eps_list])
    assert approx.epsilon(len(eps_list) * 1e-6) == pytest.approx(sum(eps_list))
    assert approx.epsilon(0.5e-6) == math.inf  # not enough delta for the basic composition


def test_mixed_composition_takes_delta_out_first():
    comp = Composition.of([ApproxDP(0.5, 1e-6), ZCDP(0.01)])
    assert comp.epsilon(2e-6) == pytest.approx(0.5 + zcdp_to_approx(0.01, 1e-6), rel=1e-9)


def test_rdp_curve_cost():
    c = RDP([2.0, 4.0, 8.0], [0.1, 0.2, 0.4])
    assert Composition.of([c]).epsilon(1e-5) < math.inf
    with pytest.raises(BudgetError):
        RDP([0.5], [0.1])
    with pytest.raises(BudgetError):
        RDP([2.0, 3.0], [0.1])


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "1"])
def test_bad_budgets(bad):
    with pytest.raises(BudgetError):
        Budget(bad, 1e-5) if not isinstance(bad, str) else PureDP(bad)


def test_budget_errors():
    with pytest.raises(BudgetError, match="delta must be in"):
        Budget(1.0, 1.0)
    with pytest.raises(BudgetError, match="need delta > 0"):
        Budget(1.0, 0.0).rho()
    with pytest.raises(BudgetError, match="sum to"):
        Budget(1.0, 1e-5).split({"a": 0.7, "b": 0.6})
    parts = Budget(1.0, 1e-5).split({"a": 0.4, "b": 0.6})
    assert sum(parts.values()) == pytest.approx(Budget(1.0, 1e-5).rho())


def test_remaining_rho_leaves_room_for_the_rest():
    b = Budget(1.0, 1e-5)
    rho = remaining_rho(b, [PureDP(0.3)])
    assert Composition.of([PureDP(0.3), ZCDP(rho)]).epsilon(1e-5) == pytest.approx(1.0, rel=1e-6)
    with pytest.raises(BudgetError, match="whole budget"):
        remaining_rho(b, [PureDP(1.5)])


def test_ledger_plan_and_spend_contract():
    ledger = PrivacyLedger(Budget(1.0, 1e-5))
    ch = Charge("synth", "gaussian", ZCDP(0.01), "p1")
    ledger.plan([ch, ch])
    ledger.check_plan()
    ledger.spend(ch)
    ledger.spend(ch)
    with pytest.raises(BudgetError, match="unplanned privacy spend"):
        ledger.spend(ch)  # a third time was never planned
    with pytest.raises(BudgetError, match="unplanned"):
        ledger.spend(Charge("synth", "gaussian", ZCDP(0.02), "p1"))  # different cost
    d = ledger.to_dict()
    assert d["within_budget"] and d["per_party_epsilon"]["p1"] == pytest.approx(zcdp_to_approx(0.02, 1e-5))
    assert d["unit_of_privacy"].startswith("one person")
    over = PrivacyLedger(Budget(0.1, 1e-5))
    over.plan([Charge("pre", "laplace", PureDP(0.05)), Charge("synth", "laplace", PureDP(0.08), "p2")])
    with pytest.raises(BudgetError) as e:
        over.check_plan()
    assert "pre" in str(e.value) and "synth" in str(e.value) and "0.13" in str(e.value)


def test_ledger_spends_only_the_planned_charge_not_a_near_copy():
    """A spend is the planned Charge itself, matched exactly: no float tolerance, no other object type."""
    ledger = PrivacyLedger(Budget(1.0, 1e-5))
    ch = Charge("synth", "gaussian", ZCDP(0.1), "p1", "marginal (a, b)")
    ledger.plan([ch])
    for near in (Charge("synth", "gaussian", ZCDP(0.1 * (1 + 1e-12)), "p1", "marginal (a, b)"),  # allclose once took it
                 Charge("synth", "gaussian", ZCDP(0.1), "p1", "another marginal"),
                 Charge("synth", "gaussian", ZCDP(0.1), "p2", "marginal (a, b)")):
        with pytest.raises(BudgetError, match="unplanned"):
            ledger.spend(near)
    with pytest.raises(BudgetError, match="Charge object"):
        ledger.spend(ZCDP(0.1))
    ledger.spend(ch)
    assert ledger.spent == [ch] and not ledger.unspent()
    grouped = PrivacyLedger(Budget(1.0, 1e-5), group_size=2)
    grouped.plan([ch])
    grouped.spend(ch)       # the planned object is recorded with group privacy, as planned
    assert grouped.spent[0].cost == ZCDP(0.4) and not grouped.unspent()
    with pytest.raises(BudgetError, match="noise must be one of"):
        PrivacyLedger(Budget(1.0), noise="fast")


def test_costs_of_parties_compose():
    """Two parties' mechanisms on the same people add up (the vertical unit of privacy)."""
    ledger = PrivacyLedger(Budget(1.0))
    a, b = Charge("s", "laplace", PureDP(0.4), "A"), Charge("s", "laplace", PureDP(0.4), "B")
    ledger.plan([a, b])
    ledger.spend(a)
    ledger.spend(b)
    assert ledger.spent_epsilon() == pytest.approx(0.8)


def test_mechanisms_charge_before_noise_and_are_calibrated():
    ledger = PrivacyLedger(Budget(1.0, 1e-5))
    with pytest.raises(BudgetError):
        gaussian_mechanism(np.zeros(3), Charge("s", "gaussian", ZCDP(0.1)), np.random.default_rng(0), ledger)
    rho, eps = 0.05, 0.5
    gauss, lap_charge = Charge("s", "gaussian", ZCDP(rho)), Charge("s", "laplace", PureDP(eps))
    ledger.plan([gauss, lap_charge])
    with pytest.raises(BudgetError, match="needs a ZCDP charge"):
        gaussian_mechanism(np.zeros(3), lap_charge, np.random.default_rng(0), ledger)
    g = gaussian_mechanism(np.zeros(200_000), gauss, np.random.default_rng(1), ledger)
    lap = laplace_mechanism(np.zeros(200_000), lap_charge, np.random.default_rng(2), ledger)
    assert np.std(g) == pytest.approx(gaussian_sigma(rho), rel=0.01)
    assert np.std(lap) == pytest.approx(math.sqrt(2) / eps, rel=0.01)


class CountMechanism:
    """The real mechanism code path, vectorised for the audit: the noisy record count."""

    def __init__(self, kind, budget, scale=1.0):
        self.kind, self.budget, self.scale = kind, budget, scale

    def sample(self, data, n, rng):
        ledger = PrivacyLedger(Budget(1e9, 1e-5))
        charge = Charge("a", self.kind, ZCDP(self.budget) if self.kind == "gaussian" else PureDP(self.budget))
        ledger.plan([charge])
        noise_budget = self.budget * self.scale
        values = np.full(n, float(data.n))
        if self.kind == "gaussian":
            return values + np.random.default_rng(rng.integers(2**63)).normal(0, gaussian_sigma(noise_budget), n)
        return laplace_mechanism(values, charge, rng, ledger) if self.scale == 1 else \
            values + rng.laplace(0, 1 / noise_budget, n)


def _pair():
    dom = Domain(["a"], [2])
    return [NeighbourPair(Dataset(np.zeros((0, 1), dtype=np.int64), dom), Dataset(np.zeros((1, 1), dtype=np.int64), dom),
                          "add_remove", "empty vs one")]


def test_laplace_count_passes_the_audit_and_a_miscalibrated_one_fails():
    ok = audit(CountMechanism("laplace", 1.0), _pair(), 1.0, 0.0, n_samples=50_000, seed=3, name="laplace")
    assert ok.passed, ok.message()
    bad = audit(CountMechanism("laplace", 1.0, scale=2.0), _pair(), 1.0, 0.0, n_samples=50_000, seed=3, name="bad")
    assert not bad.passed  # noise for ε = 2 while claiming ε = 1


def test_gaussian_count_passes_the_audit_and_a_miscalibrated_one_fails():
    rho = 0.5
    eps = zcdp_to_approx(rho, 1e-5)
    ok = audit(CountMechanism("gaussian", rho), _pair(), eps, 1e-5, n_samples=50_000, seed=4, name="gauss")
    assert ok.passed, ok.message()
    bad = audit(CountMechanism("gaussian", rho, scale=40.0), _pair(), eps, 1e-5, n_samples=50_000, seed=4, name="bad")
    assert not bad.passed


# -- messages -----------------------------------------------------------------------------------------
def test_message_round_trip_and_errors(tmp_path):
    dom = Domain(["a", "b"], [2, 3], {"a": ["x", "y"]})
    msg = NoisyMarginals(party="p1", domain=dom, marginals={"a": np.array([1.0, 2.0]), "a|b": np.ones((2, 3))})
    path = msg.save(tmp_path / "m.npz")
    back = Message.load(path)
    assert isinstance(back, NoisyMarginals) and back.domain.labels["a"] == ("x", "y")
    assert np.array_equal(back.marginals["a|b"], np.ones((2, 3)))
    with pytest.raises(MessageError, match="does not exist"):
        Message.load(tmp_path / "none.npz")
    trunc = tmp_path / "t.npz"
    trunc.write_bytes(path.read_bytes()[:100])
    with pytest.raises(MessageError, match="truncated"):
        Message.load(trunc)
    bad = NoisyMarginals(party="p1", domain=dom, marginals={"a": np.ones(3)})
    with pytest.raises(MessageError, match=r"marginal 'a' has shape \(3,\), expected \(2,\)"):
        Message.load(bad.save(tmp_path / "bad.npz"))
    nan = NoisyMarginals(party="p1", domain=dom, marginals={"a": np.array([1.0, np.nan])})
    with pytest.raises(MessageError, match="NaN"):
        Message.load(nan.save(tmp_path / "nan.npz"))
    unknown = NoisyMarginals(party="p1", domain=dom, marginals={"zz": np.ones(2)})
    with pytest.raises(MessageError, match="unknown attribute 'zz'"):
        unknown.validate()
    (tmp_path / "junk.npz").write_bytes(b"not a zip at all")
    with pytest.raises(MessageError, match="truncated or not a vertisynth message"):
        Message.load(tmp_path / "junk.npz")


def _costs(kinds: list[tuple[str, float]]) -> list:
    make = {"pure": PureDP, "zcdp": ZCDP, "approx": lambda v: ApproxDP(v, 1e-7),
            "rdp": lambda v: RDP((2.0, 8.0, 64.0), (v, 4 * v, 30 * v))}
    return [make[k](v) for k, v in kinds]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["pure", "zcdp", "approx", "rdp"]), st.floats(1e-3, 0.5)), max_size=6),
       st.floats(1e-6, 2.0))
def test_plus_zcdp_is_the_composition_with_one_more_zcdp_cost(kinds, rho):
    """remaining_rho bisects over `Composition.of(planned).plus_zcdp(ρ)`: the very numbers `of` gives."""
    costs = _costs(kinds)
    a, b = Composition.of(costs).plus_zcdp(rho), Composition.of(costs + [ZCDP(rho)])
    assert np.array_equal(a.rdp_curve, b.rdp_curve)
    assert (a.pure_epsilon, a.zcdp_rho, a.approx_epsilon, a.approx_delta) == \
        (b.pure_epsilon, b.zcdp_rho, b.approx_epsilon, b.approx_delta)
    for delta in [1e-9, 1e-5, 1e-3]:
        assert a.epsilon(delta) == b.epsilon(delta)


def test_remaining_rho_equals_the_bisection_over_whole_compositions():
    budget = Budget(1.0, 1e-5)
    for kinds in [[("zcdp", 0.01)], [("pure", 0.1), ("zcdp", 0.002)], [("approx", 0.1), ("rdp", 0.001)],
                  [("zcdp", 0.0005)] * 40]:
        planned = _costs(kinds)
        lo, hi = 0.0, budget.rho()
        for _ in range(100):   # the bisection as it was, recomposing every cost per step
            mid = (lo + hi) / 2
            if mid > 0 and Composition.of(planned + [ZCDP(mid)]).epsilon(budget.delta) <= budget.epsilon:
                lo = mid
            else:
                hi = mid
        assert remaining_rho(budget, planned) == lo
