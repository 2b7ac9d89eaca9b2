"""private_pgm, dpsyn and privmrf ask a MarginalOracle for every measurement: `fit_oracle` with a CentralOracle gives
what `fit` gives on the same stream, spends exactly the plan, and every answer passes through the oracle."""
import numpy as np
import pytest

from vertisynth.core.dataset import VerticalPartition
from vertisynth.core.errors import ConfigError
from vertisynth.core.interfaces import PlanContext, VerticalData
from vertisynth.core.privacy import Budget, PrivacyLedger
from vertisynth.pgm.oracle import CentralOracle, MarginalOracle
from vertisynth.plugins.synthesizers.dpsyn.synthesizer import DPSynConfig, DPSynSynthesizer
from vertisynth.plugins.synthesizers.private_pgm import PrivatePGMConfig, PrivatePGMSynthesizer
from vertisynth.plugins.synthesizers.privmrf.synthesizer import PrivMRFConfig, PrivMRFSynthesizer

from tests.synthetic_tables import correlated

CASES = [
    (PrivatePGMSynthesizer, PrivatePGMConfig()),
    (PrivatePGMSynthesizer, PrivatePGMConfig(measurements="workload")),
    (DPSynSynthesizer, DPSynConfig(noise="gaussian")),
    (DPSynSynthesizer, DPSynConfig(selection="greedy")),
    (PrivMRFSynthesizer, PrivMRFConfig(iters=40, refine_iters=10)),
]


class Counting:
    """A MarginalOracle that forwards to another and counts what it was asked."""

    def __init__(self, inner: CentralOracle) -> None:
        self.inner, self.ledger, self.calls = inner, inner.ledger, {}

    def _count(self, name):
        self.calls[name] = self.calls.get(name, 0) + 1

    def measure(self, *a, **k):
        self._count("measure")
        return self.inner.measure(*a, **k)

    def measure_many(self, *a, **k):
        self._count("measure_many")
        return self.inner.measure_many(*a, **k)

    def select(self, *a, **k):
        self._count("select")
        return self.inner.select(*a, **k)

    def indif(self, *a, **k):
        self._count("indif")
        return self.inner.indif(*a, **k)

    def l1_errors(self, *a, **k):
        self._count("l1_errors")
        return self.inner.l1_errors(*a, **k)


def _planned(cls, cfg, data, eps):
    syn = cls(cfg)
    budget = Budget(eps, 1e-5)
    part = VerticalPartition.from_lists([list(data.domain.attributes)]).validate(data.domain)
    ledger = PrivacyLedger(budget)
    charges = syn.plan(PlanContext(data.domain, part, budget))
    ledger.plan(charges)
    return syn, ledger, charges, VerticalData(part, part.views(data))


@pytest.mark.parametrize("cls,cfg", CASES, ids=lambda x: getattr(x, "__name__", None) or repr(x)[:40])
def test_fit_oracle_with_the_central_oracle_is_fit_on_the_same_stream(cls, cfg):
    data = correlated(3000)
    syn, ledger, charges, vd = _planned(cls, cfg, data, 0.8)
    syn.fit(vd, ledger, np.random.default_rng(5))
    twin, ledger2, charges2, _ = _planned(cls, cfg, data, 0.8)
    oracle = Counting(CentralOracle(data, ledger2))
    assert isinstance(oracle, MarginalOracle)
    twin.fit_oracle(oracle, np.random.default_rng(5))
    a, b = syn.sample(None, np.random.default_rng(6)), twin.sample(None, np.random.default_rng(6))
    assert np.array_equal(a.codes, b.codes)
    # the charges the oracle spent are the plan, in full
    assert not ledger2.unspent() and sorted(map(repr, ledger2.spent)) == sorted(map(repr, charges2))
    assert [(c.mechanism, c.cost) for c in ledger.spent] == [(c.mechanism, c.cost) for c in ledger2.spent]
    assert oracle.calls.get("measure", 0) + oracle.calls.get("measure_many", 0) >= 1   # one at a time or batched
    if cls is PrivMRFSynthesizer:   # the count and marginals, the R-scores, the refinement queries
        assert oracle.calls["indif"] == 1 and oracle.calls["l1_errors"] >= 1


def test_dpsyn_refuses_an_oracle_for_what_no_oracle_answers():
    data = correlated(500)
    for cfg in (DPSynConfig(noise="laplace"), DPSynConfig(noise="gaussian", max_records_per_individual=2)):
        syn, ledger, _, vd = _planned(DPSynSynthesizer, cfg, data, 1.0)
        with pytest.raises(ConfigError, match="an oracle answers Gaussian measurements"):
            syn.fit_oracle(CentralOracle(data, ledger), np.random.default_rng(0))
        assert ledger.spent == []
        syn.fit(vd, ledger, np.random.default_rng(0))   # the direct path still runs them
        assert not ledger.unspent()
