"""The party side of the vertical oracle: a party pays each query on its own ledger before it reads a row (the plan's
charges once each, filter draws up to the filter's ρ), and the in-process link is a PartyLink."""
import numpy as np
import pytest

from vertisynth.core.dataset import VerticalPartition
from vertisynth.core.errors import BudgetError
from vertisynth.core.privacy import Budget, Charge, PrivacyLedger, ZCDP
from vertisynth.plugins.encoders.he.encoder import HEConfig, HEEncoder
from vertisynth.vertical import VerticalOracle
from vertisynth.vertical.link import InProcessLink, PartyBudget, PartyLink, Spend, same_binning

from tests.synthetic_tables import correlated


def _budget(*charges):
    led = PrivacyLedger(Budget(1e6, 1e-9))
    led.plan(charges)
    return PartyBudget(led), led


def test_a_party_pays_a_planned_charge_once_and_refuses_one_outside_the_plan():
    ch = Charge("synthesizer", "gaussian_1way", ZCDP(0.1))
    budget, led = _budget(ch)
    # the charge as it travels (a copy from its dict, its note dropped): matched to the plan's
    budget.spend(Spend.from_dict(Spend(ch, 0.1, False, "measure ['a']").to_dict()), "pay0")
    budget.spend(Spend(ch, 0.1, False, "measure ['a']"), "pay0")   # the same payment asked again: paid once
    assert led.spent == [ch]
    with pytest.raises(BudgetError, match="unplanned privacy spend"):
        budget.spend(Spend(ch, 0.1, False, "measure ['b']"), "pay1")   # a second spend of a charge planned once
    with pytest.raises(BudgetError, match="not a charge of this run's plan"):
        budget.spend(Spend(Charge("synthesizer", "other", ZCDP(0.1)), 0.1, False, "x"), "pay2")
    with pytest.raises(BudgetError, match="not what this answer costs"):
        b2, _ = _budget(ch)
        b2.spend(Spend(ch, 0.2, False, "x"), "pay0")


def test_filter_draws_at_a_party_stop_at_the_filters_planned_rho():
    ch = Charge("synthesizer", "aim_rounds", ZCDP(1.0))
    budget, led = _budget(ch)
    budget.spend(Spend(ch, 0.6, True, "round 1"), "pay0")
    budget.spend(Spend(ch, 0.4, True, "round 2"), "pay1")
    assert led.spent == [ch]   # the filter's charge, spent when it opened
    with pytest.raises(BudgetError, match="exceeds what is left"):
        budget.spend(Spend(ch, 0.01, True, "round 3"), "pay2")


def test_spend_dicts_that_are_not_zcdp_or_malformed_are_refused():
    with pytest.raises(BudgetError, match="malformed"):
        Spend.from_dict({"charge": {"cost_type": "ZCDP"}, "rho": 1.0})
    with pytest.raises(BudgetError, match="not a zCDP charge"):
        Spend.from_dict({"charge": {"cost_type": "PureDP", "stage": "s", "mechanism": "m"}, "rho": 1.0,
                         "filtered": False, "what": "x"})


def test_the_in_process_link_is_a_party_link_and_an_oracle_over_it_answers_alike():
    data = correlated(500)
    part = VerticalPartition.from_lists([["a", "c", "e"], ["b", "d"]], ["P0", "P1"]).validate(data.domain)
    ch, ch2 = Charge("s", "m", ZCDP(0.05)), Charge("s", "m", ZCDP(0.05))
    answers = []
    for build in ("views", "over"):
        led = PrivacyLedger(Budget(1e6, 1e-9))
        led.plan([ch])
        rngs = {p: np.random.default_rng(3 + i) for i, p in enumerate(part.names)}
        enc = HEEncoder(HEConfig(crypto="simulated"))
        if build == "views":
            o = VerticalOracle(part.views(data), part, enc, led, rngs, "he")
        else:
            link = InProcessLink(part.views(data), part, enc, led, rngs)
            assert isinstance(link, PartyLink)
            o = VerticalOracle.over(link, part, data.domain, enc, led, "he")
        answers.append(o.measure(("a", "b"), ch, np.random.default_rng(0)).values)
        assert led.spent == [ch2] and o.party_cpu.keys() == {"P0", "P1"}
    np.testing.assert_array_equal(*answers)


def test_same_binning_compares_bins_not_columns():
    assert same_binning(3, None, np.arange(3)) and same_binning(3, np.array([0, 0, 1]), np.array([0, 0, 1]))
    assert not same_binning(3, None, np.array([0, 0, 1]))
