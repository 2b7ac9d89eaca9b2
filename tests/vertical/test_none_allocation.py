"""trust = "none": mst's and private_pgm's 2-way third is one zCDP filter split among the chosen pairs by each
answer's released-variance factor (vertisynth/vertical/allocation.py; docs/vertical.md, "trust = none, answers
measured for their released variance"): ρ_i ∝ f_i^(1/3), f = 2 across parties, 1 within one; the ledger is the plan."""
import math
from collections import Counter

import numpy as np
import pytest

from vertisynth.core.errors import ConfigError
from vertisynth.core.interfaces import PlanContext
from vertisynth.core.privacy import Budget, PrivacyLedger
from vertisynth.core.registry import default_registry
from vertisynth.pgm.oracle import CentralOracle, ZCDPFilter
from vertisynth.run.config import parse_config
from vertisynth.run.pipeline import build_component, cross_party_measure, make_plan, run
from vertisynth.vertical import VerticalOracle, party_streams
from vertisynth.vertical.allocation import released_factor, split_rho


def test_the_split_is_the_minimum_of_the_summed_errors():
    f = [1.0, 2.0, 1.0, 2.0, 2.0]
    rho = split_rho(0.3, f)
    assert sum(rho) == pytest.approx(0.3, rel=1e-12)
    assert rho[1] / rho[0] == pytest.approx(2 ** (1 / 3), rel=1e-12) and rho[0] == rho[2]
    err = lambda r: sum(math.sqrt(fi / ri) for fi, ri in zip(f, r))   # noqa: E731
    even = [0.3 / 5] * 5
    assert err(rho) < err(even)
    rng = np.random.default_rng(0)
    for _ in range(200):   # no other split of the same total does better
        w = np.exp(rng.normal(0, 0.3, 5))
        assert err(rho) <= err((0.3 * w / w.sum()).tolist()) + 1e-12
    # weighed by cells: ρ ∝ (c² f)^(1/3)
    cells = split_rho(1.0, [1.0, 2.0], [4.0, 2.0])
    assert cells[0] / cells[1] == pytest.approx((16 / 8) ** (1 / 3), rel=1e-12)
    with pytest.raises(ConfigError, match="positive") as exc:
        split_rho(1.0, [1.0, 0.0])
    assert "\n" not in str(exc.value)


def _twin(method, trust, preset="small-domains"):
    cfg = parse_config({"seed": 0, "budget": {"epsilon": 0.4, "delta": 1e-9},
                        "dataset": {"name": "zoo", "params": {"preset": preset, "n": 2000}},
                        "synthesizer": {"use": "independent", "params": {}}, "evaluators": []})
    real, partition = run(cfg).real_codes, make_plan(cfg).partition
    reg = default_registry()
    params = {"iters": 50, "vertical": {"measure": "he", "trust": trust, "params": {"crypto": "simulated"}}}
    comp = build_component(reg, "synthesizer", method, params, method)
    budget = Budget(0.4, 1e-9)
    ctx = PlanContext(real.domain, partition, budget)
    charges = comp.instance.plan(ctx)
    ledger = PrivacyLedger(budget)
    ledger.plan(charges)
    rng = np.random.default_rng(0)
    oracle = VerticalOracle(partition.views(real), partition, cross_party_measure(reg, comp, partition).instance,
                            ledger, party_streams(rng, partition.names), "he")
    return comp.instance, ctx, charges, ledger, oracle, rng


@pytest.mark.parametrize("method", ["mst", "private_pgm"])
def test_trust_none_plans_one_filter_and_pays_each_chosen_pair_by_its_factor(method, monkeypatch):
    syn, ctx, charges, ledger, oracle, rng = _twin(method, "none")
    two = [c for c in charges if c.mechanism == "gaussian_2way"]
    assert len(two) == 1 and two[0].cost.rho == pytest.approx(ctx.rho / 3, rel=1e-12)   # main: d−1 charges
    opened = []

    class Recording(ZCDPFilter):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            opened.append(self)
    monkeypatch.setattr(f"vertisynth.plugins.synthesizers.{method}.ZCDPFilter", Recording)
    syn.fit_oracle(oracle, rng)
    assert ledger.unspent() == [] and Counter(ledger.spent) == Counter(charges)   # the ledger is the plan
    (filt,) = opened
    assert filt.used == pytest.approx(ctx.rho / 3, rel=1e-9)   # the whole third, no more
    cross = [r for what, r in filt.log if " across " in what]
    inside = [r for what, r in filt.log if " across " not in what]
    assert len(filt.log) == len(ctx.domain) - 1 and cross and inside
    # a cross-party answer is released at 2σ² a cell: it gets 2^(1/3) a within-party pair's ρ
    assert np.allclose(np.array(cross) / inside[0], 2 ** (1 / 3), rtol=1e-9)
    assert np.allclose(inside, inside[0], rtol=1e-9)
    last = oracle.answered[-len(cross):]   # the chosen cross-party pairs' answers, released at 2σ², σ² = 1/(2ρ_i)
    assert all(m.std ** 2 == pytest.approx(2 / (2 * r), rel=1e-9) for m, r in zip(last, cross))
    assert released_factor(oracle, syn._cross[0]) == 2.0 and released_factor(oracle, ("x00",)) == 1.0


@pytest.mark.parametrize("method", ["mst", "private_pgm"])
def test_trust_server_and_central_keep_one_even_charge_per_pair(method):
    syn, ctx, charges, _, oracle, _ = _twin(method, "server")
    d = len(ctx.domain)
    two = [c for c in charges if c.mechanism == "gaussian_2way"]
    assert len(two) == d - 1 and all(c.cost.rho == pytest.approx(ctx.rho / (3 * (d - 1))) for c in two)
    comp = build_component(default_registry(), "synthesizer", method, {}, method)
    two = [c for c in comp.instance.plan(PlanContext(ctx.domain, ctx.partition, Budget(0.4, 1e-9)))
           if c.mechanism == "gaussian_2way"]
    assert len(two) == d - 1
    assert released_factor(CentralOracle.__new__(CentralOracle), ("x00", "x01")) == 1.0
