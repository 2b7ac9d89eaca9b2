"""The tuning accountant: the sound variants' cost is their theorem's, the ledger charges exactly that,
the vote, and a statistical audit of private selection (Papernot–Steinke, Poisson random search)."""
import math

import numpy as np
import pytest
from scipy.stats import norm

from vertisynth.collab.tuning import (DELTA_ORDERS, private_selection_curve, selection_charge, solve_rho_q, vote, zcdp_delta)
from vertisynth.run.config import parse_config
from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.errors import BudgetError, ConfigError
from vertisynth.run.pipeline import make_plan
from vertisynth.core.privacy import ORDERS, RDP, Budget, Composition, ZCDP, rdp_to_approx, zcdp_to_approx
from vertisynth.testing.audit import NeighbourPair, audit, claimed_profile


def test_zcdp_delta_inverts_the_ledger_conversion_and_bounds_the_exact_gaussian():
    for rho in (0.01, 0.5, 3.0):
        for delta in (1e-6, 1e-3):
            eps = zcdp_to_approx(rho, delta)
            assert zcdp_delta(rho, np.array([eps]))[0] == pytest.approx(delta, rel=1e-2)
        # the Gaussian mechanism's exact profile (Balle & Wang 2018) is never above the RDP bound
        sigma = 1 / math.sqrt(2 * rho)
        for eps in (0.1, 1.0):
            exact = norm.cdf(1 / (2 * sigma) - eps * sigma) - math.exp(eps) * norm.cdf(-1 / (2 * sigma) - eps * sigma)
            assert exact <= zcdp_delta(rho, np.array([eps]))[0] + 1e-12


def test_private_selection_curve_is_papernot_steinke_theorem_6():
    rho, mu = 0.05, 8.0
    curve = private_selection_curve(rho, mu)
    for i in (10, 500, 1200, 1900):
        lam = ORDERS[i]
        eps_hat = math.log(1 + 1 / (lam - 1))                  # the theorem's condition e^ε̂ ≤ 1 + 1/(λ−1)
        log_d = min((a - 1) * (a * rho - eps_hat + math.log(1 - 1 / a)) - math.log(a) for a in DELTA_ORDERS)
        delta_hat = min(1.0, math.exp(log_d))
        assert curve[i] == pytest.approx(rho * lam + mu * delta_hat + math.log(mu) / (lam - 1), rel=1e-9)
    assert (curve >= rho * ORDERS - 1e-12).all()             # never cheaper than one candidate run
    assert (private_selection_curve(rho, 2 * mu) > curve).all()   # more expected runs cost more
    with pytest.raises(ConfigError, match="expected_runs must be >= 1"):
        private_selection_curve(rho, 0.5)


def test_charges_and_solver_follow_the_theorem_and_fill_the_budget():
    budget = Budget(2.0, 1e-5)
    fixed = [ZCDP(0.04), ZCDP(0.005)]
    rq = solve_rho_q(budget, fixed, "private_selection", 6.0, 6)
    total = Composition.of([*fixed, RDP(ORDERS, private_selection_curve(rq, 6.0))]).epsilon(budget.delta)
    assert total <= 2.0 and total == pytest.approx(2.0, rel=1e-6)
    # the total is the RDP → (ε, δ) conversion of the summed curves (independent of the ledger's classes)
    curve = 0.045 * ORDERS + private_selection_curve(rq, 6.0)
    assert rdp_to_approx(curve, 1e-5) == pytest.approx(total, rel=1e-9)
    charge = selection_charge("private_selection", rq, 6.0, 6, 3)
    # the ledger keeps the theorem's curve, read as RDP is (non-decreasing in λ): each order takes the
    # smallest bound known at an order at or above it
    envelope = np.minimum.accumulate(private_selection_curve(rq, 6.0)[::-1])[::-1]
    assert np.allclose(charge.cost.rdp(), envelope) and "Thm 6" in charge.note
    rc = solve_rho_q(budget, fixed, "compose_all", 6.0, 6)
    assert selection_charge("compose_all", rc, 6.0, 6, 3).cost == ZCDP(6 * rc)
    assert Composition.of([*fixed, ZCDP(6 * rc)]).epsilon(1e-5) == pytest.approx(2.0, rel=1e-6)
    with pytest.raises(BudgetError, match="does not fit"):
        solve_rho_q(Budget(0.05, 1e-5), [ZCDP(Budget(0.05, 1e-5).rho() * 0.99)], "private_selection", 50.0, 3)


def _plan(method, **tuning):
    return make_plan(parse_config({
        "seed": 0, "budget": {"epsilon": 3.0, "delta": 1e-5}, "dataset": {"name": "census", "params": {"n": 500}},
        "synthesizer": {"use": "private_pgm", "params": {"measurements": "workload", "workload": [["sex", "income"]]}},
        "evaluators": [{"use": "workload_error"}],
        "collab": {"numeric": {"age": [17, 90]}, "tuning": {"method": method, "grid": {"iters": [10, 20, 30]},
                                                            "folds": 3, **tuning}}}))


def test_the_plan_charges_the_sound_variants_by_their_theorem_and_the_paper_only_the_final_run():
    plan = _plan("private_selection", fraction=0.4, score_fraction=0.25)
    t, rho = plan.tuner, plan.ledger.budget.rho()
    assert plan.rho_pre + plan.rho_synth == pytest.approx(0.6 * rho)
    assert t.rho_score == pytest.approx(0.4 * 0.25 * rho) and t.mu == 3.0
    assert t.rho_pre + t.rho_synth == pytest.approx(t.rho_q / 2)   # a person is in K−1 = 2 training folds
    sel = [c for c in plan.ledger.planned if c.mechanism == "private_selection"]
    assert len(sel) == 1 and np.allclose(sel[0].cost.epsilons, private_selection_curve(t.rho_q, 3.0))
    assert plan.ledger.planned_epsilon() == pytest.approx(3.0, rel=1e-6)
    paper = _plan("paper", metric="workload_error.l1_1way")
    assert paper.rho_pre + paper.rho_synth == pytest.approx(rho)   # the whole budget: tuning not accounted
    assert not [c for c in paper.ledger.planned if c.stage == "tuning"]
    assert paper.tuner.label == "paper: tuning not accounted — not sound"


def test_vote_rules():
    cust = ["a", "b", "c"]
    assert vote(0.2, {"a": 0.3, "b": 0.25}, cust, "minimize", "all") == (True, 3)
    assert vote(0.28, {"a": 0.3, "b": 0.25}, cust, "minimize", "all") == (False, 2)
    assert vote(0.28, {"a": 0.3, "b": 0.25}, cust, "minimize", "majority") == (True, 2)
    assert vote(0.7, {"a": 0.8, "b": 0.6, "c": 0.9}, cust, "maximize", "majority") == (False, 1)


# -- a statistical audit of private selection ----------------------------------------------------------
DOM = Domain(["x"], [3])
SIGMA = 0.7
RHO_Q = 1 / (2 * SIGMA**2)


class PoissonSelection:
    """Vectorised private selection: K ~ Poisson(μ) runs of Q = (pick candidate c uniformly; score it with
    the Gaussian count of records with value c, sensitivity 1, ρ_Q-zCDP); output the best (c, score), or
    (−1, 0) when K = 0 — the same order (score, then nothing) as Tuner.run."""

    def __init__(self, mu):
        self.mu = mu

    def sample(self, data, n, rng):
        counts = np.bincount(data.codes[:, 0], minlength=3).astype(float)
        k = rng.poisson(self.mu, size=n)
        width = max(int(k.max()), 1)
        cand = rng.integers(0, 3, size=(n, width))
        score = counts[cand] + rng.normal(0, SIGMA, size=(n, width))
        score[np.arange(width)[None, :] >= k[:, None]] = -np.inf
        best = score.argmax(axis=1)
        out = np.column_stack([cand[np.arange(n), best], score[np.arange(n), best]]).astype(float)
        out[k == 0] = [-1, 0]
        return out


def test_private_selection_passes_its_audit_and_a_one_run_claim_does_not():
    base = Dataset(np.array([[0], [1], [1], [2]]), DOM)
    pairs = [NeighbourPair(base, Dataset(np.vstack([base.codes, [[0]]]), DOM), "add_remove", "one record added")]
    mu = 4.0
    claims = claimed_profile([RDP(ORDERS, private_selection_curve(RHO_Q, mu))], 1e-5)
    ok = audit(PoissonSelection(mu), pairs, claims=claims, n_samples=20_000, seed=11, name="private selection")
    assert ok.passed, ok.message()
    # power: the same mechanism claimed at a sixteenth of one run's ρ is caught
    weak = claimed_profile([ZCDP(RHO_Q / 16)], 1e-5)
    bad = audit(PoissonSelection(mu), pairs, claims=weak, n_samples=20_000, seed=11, name="selection, overclaimed")
    assert not bad.passed


def test_the_measurement_set_and_binning_are_tunable_and_every_candidate_reserves_the_same_budget():
    sets = [[["sex", "income"]], [["age", "income"], ["sex", "income"], ["education", "income"]]]
    plan = _plan("private_selection", grid={"workload": sets, "bins": [3, 6]})
    assert len(plan.tuner.grid) == 4
    totals = {round(sum(c.cost.rho for c in plan.run.charges(p, plan.rho_pre, plan.rho_synth)), 12)
              for p in plan.tuner.grid}
    assert len(totals) == 1 and totals.pop() == pytest.approx(plan.rho_pre + plan.rho_synth)
    with pytest.raises(ConfigError, match="bin counts must be integers >= 2"):
        _plan("private_selection", grid={"bins": [1]})


# -- K stays secret (issue 30, item 4) -------------------------------------------------------------------
def _tuned_cfg(**tuning):
    return parse_config({
        "seed": 4, "budget": {"epsilon": 4.0, "delta": 1e-5}, "dataset": {"name": "census", "params": {"n": 400}},
        "synthesizer": {"use": "private_pgm", "params": {"measurements": "workload", "iters": 10,
                                                         "workload": [["sex", "income"]]}},
        "evaluators": [{"use": "workload_error"}],
        "collab": {"custodians": 2, "numeric": {"age": [17, 90]},
                   "tuning": {"grid": {"iters": [5, 10]}, "folds": 2, **tuning}}})


def test_the_candidate_draws_come_from_the_os_not_the_config_seed(monkeypatch):
    """Papernot–Steinke's bound needs K secret: two runs with one public config seed draw independently."""
    from vertisynth.collab.tuning import Tuner

    seen = []

    class Stop(Exception):
        pass

    def spy(self, run, frames, ledger, rng, *a, **k):
        seen.append(int(rng.integers(0, 2**62)))
        raise Stop

    monkeypatch.setattr(Tuner, "run", spy)
    for _ in range(2):
        with pytest.raises(Stop):
            make_plan(_tuned_cfg(expected_runs=2.0)).execute()
    assert seen[0] != seen[1]
    # an explicit test secret (never the seed) reproduces them, and is labelled
    from vertisynth.collab.tuning import selection_rng
    from vertisynth.core.identity import parse_test_secret

    s = parse_test_secret("5e0b9d3c71a2f4e8c6b1d0a9e7f35c24", 7)
    assert selection_rng(s).integers(0, 2**62) == selection_rng(s).integers(0, 2**62)
    with pytest.raises(ConfigError, match="needs at least 128"):
        parse_test_secret("abcd", 7)


def test_no_output_states_the_number_of_candidate_runs(tmp_path, monkeypatch):
    import json

    from vertisynth.collab import tuning
    from vertisynth.collab.pipeline import KEPT_SECRET

    drawn = []
    real_draw = tuning.Selection.draw.__func__

    def draw(cls, tuner, rng):
        sel = real_draw(cls, tuner, rng)
        drawn.append(len(sel.picks))
        return sel

    monkeypatch.setattr(tuning.Selection, "draw", classmethod(draw))
    plan = make_plan(_tuned_cfg(expected_runs=3.0))
    plan.test_secret = bytes(16)
    res = plan.execute(tmp_path)
    assert len(drawn) == 1
    t = res.report["collab"]["tuning"]
    assert t["candidate_runs"] == KEPT_SECRET and t["candidate_draws"] == tuning.TEST_LABEL
    assert len(t["dp_scores"]) <= 1   # the best run only: what the theorem releases
    assert "tuning" not in res.report["timings_seconds"]   # its wall time grows with K
    summary = (tmp_path / "summary.md").read_text(encoding="utf-8")
    assert "a secret number of candidate runs" in summary and "candidate run(s)" not in summary
    ledger = json.loads((tmp_path / "ledger.json").read_text())
    assert "K ~ Poisson(μ=3)" in json.dumps(ledger, ensure_ascii=False)   # the plan, not the draw
    # the ledger's charge is the theorem's curve at the planned μ, whatever K came out
    sel = [c for c in res.ledger.spent if c.mechanism == "private_selection"]
    envelope = np.minimum.accumulate(private_selection_curve(plan.tuner.rho_q, 3.0)[::-1])[::-1]
    assert len(sel) == 1 and np.allclose(sel[0].cost.rdp(), envelope)
