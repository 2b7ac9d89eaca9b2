"""VertiMRF as a client of the measurement protocol: each party's local PrivMRF reads its columns only through the
within-party oracle, whose queries are the ledger's charges one for one (docs/vertical.md, "VertiMRF")."""
import numpy as np
import pytest

from vertisynth.core.dataset import VerticalPartition
from vertisynth.core.interfaces import PlanContext, VerticalData
from vertisynth.core.privacy import Budget, PrivacyLedger
from vertisynth.plugins.synthesizers.vertimrf.synthesizer import VertiMRFConfig, VertiMRFSynthesizer

from tests.synthetic_tables import correlated

FAST = {"local_params": {"iters": 30, "refine_iters": 8}, "iters": 40, "rounds": 1, "per_round": 2}


@pytest.mark.parametrize("encoder,params", [("grr", {}), ("he", {"crypto": "simulated", "cliques": 2})])
def test_local_fit_asks_the_party_oracle_and_its_queries_are_the_ledger_s_charges(encoder, params):
    data = correlated(1500)
    part = VerticalPartition.from_lists([["a", "b", "d"], ["c", "e"]])
    budget = Budget(2.0, 1e-5)
    syn = VertiMRFSynthesizer(VertiMRFConfig(**FAST, encoder=encoder, encoder_params=params))
    ledger = PrivacyLedger(budget)
    ledger.plan(syn.plan(PlanContext(data.domain, part, budget)))
    syn.fit(VerticalData(part, part.views(data)), ledger, np.random.default_rng(0))
    asked = syn.local_queries()
    assert set(asked) == set(part.names)
    for p, attrs_ in zip(part.names, part):
        mine = set(attrs_.attributes)
        charges = [c for c in ledger.spent if c.party == p and c.stage == "synthesizer"]
        # one oracle query per planned local charge, in the order spent, at that charge's ρ; the one exception is
        # a refinement round with no candidate left, whose charge PrivMRF spends unused (no query, no data read)
        queries = iter(asked[p])
        q = next(queries, None)
        unused = []
        for c in charges:
            if q is not None and q["rho"] == c.cost.rho:
                q = next(queries, None)
            else:
                unused.append(c.mechanism)
        assert q is None, f"{p}: an oracle query with no charge of its own"
        assert set(unused) <= {"gaussian_refine_queries"}, unused
        kinds = [q["query"] for q in asked[p]]
        assert kinds[:2] == ["measure", "indif"] and "measure" in kinds[2:] and set(kinds) <= {"measure", "indif", "l1_errors"}
        for q in asked[p]:   # nothing outside the party's own columns
            flat = {a for x in q["attributes"] for a in (x if isinstance(x, list) else [x])}
            assert flat <= mine, (p, q)
