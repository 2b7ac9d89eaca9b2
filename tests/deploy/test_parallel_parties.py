"""The parties of a one-process run step at once, a forked process each: the same messages, ledger and
synthetic table as one after another (issue 21)."""
import hashlib

import numpy as np
import pandas as pd
import pytest
from deploy_helpers import SECRET

from vertisynth.core.dataset import VerticalPartition
from vertisynth.core.errors import DataError
from vertisynth.core.interfaces import PlanContext, VerticalData
from vertisynth.core.privacy import Budget, PrivacyLedger
from vertisynth.deploy.simulate import simulate
from vertisynth.plugins.synthesizers.vertimrf import synthesizer as vsyn
from vertisynth.run.config import parse_config
from synthetic_tables import correlated

FAST = {"encoder_params": {"t": 64}, "local_params": {"iters": 20, "refine_iters": 5}, "iters": 30, "rounds": 1}


def _fit(monkeypatch, processes, group_size=1, parts=(("a", "b"), ("c",), ("d", "e"))):
    seen = {}
    real = vsyn.VertiMRFSynthesizer.server_step

    def spy(self, messages):
        seen["messages"] = hashlib.sha256(b"".join(m.to_bytes() for m in messages)).hexdigest()
        return real(self, messages)

    monkeypatch.setattr(vsyn.VertiMRFSynthesizer, "server_step", spy)
    data = correlated(1500)
    part = VerticalPartition.from_lists([list(p) for p in parts])
    syn = vsyn.VertiMRFSynthesizer(vsyn.VertiMRFConfig(**FAST, party_processes=processes))
    budget = Budget(4.0, 1e-5)
    ledger = PrivacyLedger(budget, group_size=group_size)
    ledger.plan(syn.plan(PlanContext(data.domain, part, budget, group_size=group_size)))
    syn.fit(VerticalData(part, part.views(data)), ledger, np.random.default_rng(3))
    out = syn.sample(300, np.random.default_rng(4))
    return seen["messages"], [c.to_dict() for c in ledger.spent], out.codes


@pytest.mark.parametrize("group_size", [1, 2])
def test_parties_in_processes_equal_one_after_another(monkeypatch, group_size):
    seq = _fit(monkeypatch, 1, group_size)
    par = _fit(monkeypatch, 3, group_size)
    assert par[0] == seq[0]                      # every message, bit for bit, in party order
    assert par[1] == seq[1] and par[1]           # the same charges spent (group privacy applied once)
    assert np.array_equal(par[2], seq[2])
    assert _fit(monkeypatch, 2, group_size)[0] == seq[0]   # two waves: 2 parties, then 1


def test_a_failing_party_process_names_the_party(monkeypatch):
    def broken(self, party, view, ledger, rng):
        if party == "party2":
            raise DataError("bad value in column c")
        return real(self, party, view, ledger, rng)

    real = vsyn.VertiMRFSynthesizer.party_step
    monkeypatch.setattr(vsyn.VertiMRFSynthesizer, "party_step", broken)
    with pytest.raises(DataError, match="party 'party2': bad value in column c"):
        _fit(monkeypatch, 3)


def test_simulation_in_parallel_equals_sequential():
    cfg = parse_config({"seed": 5, "budget": {"epsilon": 2.0, "delta": 1e-5},
                        "dataset": {"name": "census", "params": {"n": 1500}},
                        "synthesizer": {"use": "vertimrf", "params": FAST}})
    par = simulate(cfg, SECRET)
    seq = simulate(cfg, SECRET, party_processes=1)
    pd.testing.assert_frame_equal(par.synthetic, seq.synthetic)
    assert par.ledger.spent == seq.ledger.spent
