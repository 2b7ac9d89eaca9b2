"""The stage oracle (VertiMRF's cross-party stages, encoder "he"): its answers are the measure's own, bit for bit;
a bad query is refused in one line before the stage's charge is spent; a stage runs once."""
import numpy as np
import pytest

from vertisynth.core.dataset import VerticalPartition
from vertisynth.core.errors import ConfigError
from vertisynth.core.interfaces import PlanContext
from vertisynth.core.privacy import Budget, PrivacyLedger
from vertisynth.plugins.encoders.he.encoder import HEConfig, HEEncoder
from vertisynth.vertical import StageOracle

from tests.synthetic_tables import correlated

PARTS = [["a", "c", "e"], ["b", "d"]]


def _setup(seed=0):
    data = correlated(600)
    part = VerticalPartition.from_lists(PARTS, ["P0", "P1"]).validate(data.domain)
    budget = Budget(2.0, 1e-5)
    enc = HEEncoder(HEConfig(crypto="simulated", cliques=2))
    ledger = PrivacyLedger(budget)
    ledger.plan(enc.plan(PlanContext(data.domain, part, budget)))
    rngs = {p: np.random.default_rng(seed + i) for i, p in enumerate(part.names)}
    oracle = StageOracle(part.views(data), part, enc, ledger, rngs, fixed={"selection": enc.selection_queries()})
    return oracle, enc, ledger, part, data


def _tables(messages):
    return {k: np.asarray(v) for m in messages for k, v in m.tables.items()}


def test_answers_are_the_measure_s_own():
    oracle, enc, ledger, part, data = _setup()
    got = oracle.answers(enc.selection_queries(), "selection")
    _, enc2, ledger2, _, _ = _setup()
    rngs = {p: np.random.default_rng(i) for i, p in enumerate(part.names)}
    want = enc2.measure(part.views(data), enc2.selection_queries(), "selection", ledger2, rngs)
    a, b = _tables(got), _tables(want)
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    assert [c.to_dict() for c in ledger.spent] == [c.to_dict() for c in ledger2.spent]
    chosen = [(("a",), ("b", "d")), (("c", "e"), ("d",))]   # the server's choice: any two-party tables
    assert len(_tables(oracle.answers(chosen, "cliques"))) == 2
    assert [c.mechanism for c in ledger.spent] == ["he_selection", "he_cliques"] and not ledger.unspent()


@pytest.mark.parametrize("query,stage,says", [
    ((("a",), ("zz",)), "cliques", "no party holds ['zz']"),
    ((("a",), ()), "cliques", "empty side"),
    ((("a", "b"), ("d",)), "cliques", "spans parties"),
    ((("a",), ("c",)), "cliques", "held by one party (P0)"),
    ((("a", "c"), ("b",)), "selection", "not among stage 'selection'"),   # a real two-party table, but not planned
])
def test_bad_query_is_refused_in_one_line_before_anything_is_spent(query, stage, says):
    oracle, enc, ledger, _, _ = _setup()
    with pytest.raises(ConfigError) as err:
        oracle.answers([query], stage)
    assert says in str(err.value) and "\n" not in str(err.value)
    assert ledger.spent == []


def test_a_stage_runs_once():
    oracle, enc, ledger, _, _ = _setup()
    oracle.answers(enc.selection_queries(), "selection")
    with pytest.raises(ConfigError, match="has run already"):
        oracle.answers(enc.selection_queries(), "selection")
    assert [c.mechanism for c in ledger.spent] == ["he_selection"]


def test_only_a_stage_measure_is_accepted():
    _, enc, ledger, part, data = _setup()
    with pytest.raises(ConfigError, match="does not measure cross-party marginals in stages"):
        StageOracle(part.views(data), part, object(), ledger, {p: np.random.default_rng(0) for p in part.names})
