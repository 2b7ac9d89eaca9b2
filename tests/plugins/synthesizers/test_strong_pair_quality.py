"""A strong same-party pair (length of stay × cost, correlation ≈ 0.78) on a hospital-shaped table, as a new user
brings it (schema read off the data): why PrivMRF returns the pair independent while MST keeps it.

Diagnosis (docs/synthesizers/privmrf.md, "A strong pair that comes out independent"): the inferred schema makes
length of stay (≈ 40 distinct integers, at most 50) a categorical of that many values and cuts the skewed cost into 8 equal-width bins over
its observed range, 96% of the records in the first; the binned pair keeps only a TVD of ≈ 0.06 from
independence. PrivMRF's R-score graph still links the pair (it lies in a clique of the fitted model), but its
328 cells exceed the θ-useful limit (≈ 255 at ε = 1, n = 20,000) and its signal test fails (2R̂ ≈ 2,500 against
cells·g ≈ 4,300), so no measurement covers it and the estimator leaves the clique flat on it: independence.
MST measures d − 1 pairs whatever their size, picks this one, and keeps it at about the same noise per cell.
The fix: PrivMRF offers such a pair coarsened (consecutive values merged down to the θ limit) to its refinement
rounds, which measure it (`coarsen`, docs/synthesizers/privmrf.md).
"""
import warnings

import numpy as np
import pandas as pd
import pytest

from vertisynth import api
from vertisynth.core.dataset import VerticalPartition
from vertisynth.core.interfaces import PlanContext, VerticalData
from vertisynth.core.privacy import Budget, PrivacyLedger
from vertisynth.plugins.synthesizers.mst import MSTSynthesizer
from vertisynth.plugins.synthesizers.privmrf.synthesizer import PrivMRFConfig, PrivMRFSynthesizer

PAIR = ["length_of_stay", "cost"]


def hospital(n=20000, seed=0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    age = rng.integers(18, 95, n)
    sex = rng.choice(["F", "M"], n)
    diagnosis = rng.choice([f"d{i}" for i in range(8)], n)
    los = np.clip(np.round(rng.lognormal(1.3 + 0.01 * (age - 50), 0.6, n)), 1, 90).astype(int)
    cost = np.round(800 * los * rng.lognormal(0, 0.45, n) + rng.normal(0, 500, n), 2)
    plan = rng.choice(["basic", "plus", "premium"], n)
    return pd.DataFrame({"age": age, "sex": sex, "diagnosis": diagnosis, "length_of_stay": los, "cost": cost,
                         "plan": plan, "claims": rng.poisson(1 + age / 30)})


@pytest.fixture(scope="module")
def coded():
    df = hospital()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = api.synthesize(df, parties={"hospital": list(df.columns[:5]), "insurer": ["plan", "claims"]},
                             epsilon=1.0, synthesizer="independent", seed=0)
    return df, res.real_codes


def _pair_tvd(model, real) -> tuple[float, float]:
    """TVD of the model's pair marginal to the data's, and of the independent product to the data's."""
    p = real.counts(PAIR).values / real.n
    m = model.marginal(PAIR).values
    indep = np.outer(p.sum(1), p.sum(0))
    return 0.5 * float(np.abs(m / m.sum() - p).sum()), 0.5 * float(np.abs(indep - p).sum())


def _fit(syn, real, seed):
    budget = Budget(1.0, 1e-5)
    part = VerticalPartition.from_lists([list(real.domain.attributes)]).validate(real.domain)
    ledger = PrivacyLedger(budget)
    ledger.plan(syn.plan(PlanContext(real.domain, part, budget)))
    syn.fit(VerticalData(part, part.views(real)), ledger, np.random.default_rng(seed))
    return syn


def test_the_inferred_binning_dilutes_the_strong_pair(coded):
    df, real = coded
    assert df.length_of_stay.corr(df.cost) > 0.75
    assert 30 < real.domain.size("length_of_stay") <= 50 and real.domain.size("cost") == 8   # a categorical, bins
    cost_bins = real.counts(["cost"]).values
    assert cost_bins[0] / cost_bins.sum() > 0.9   # equal-width bins over a skewed range: one bin holds it all
    p = real.counts(PAIR).values / real.n
    assert 0.03 < 0.5 * np.abs(p - np.outer(p.sum(1), p.sum(0))).sum() < 0.08


def test_mst_measures_the_pair_and_keeps_it(coded):
    _, real = coded
    syn = _fit(MSTSynthesizer(), real, seed=0)
    assert tuple(PAIR) in syn._pairs or tuple(PAIR[::-1]) in syn._pairs
    model_tvd, indep_tvd = _pair_tvd(syn._model, real)
    assert model_tvd < 0.5 * indep_tvd


def test_privmrf_keeps_a_strong_pair_its_graph_links(coded):
    """Before the fix the clique was there but no measurement covered the pair, and the model was as far from the
    data on it as independence (model TVD ≈ 0.068 against 0.062); now a coarsened measurement covers it (≈ 0.02)."""
    _, real = coded
    syn = _fit(PrivMRFSynthesizer(PrivMRFConfig(iters=200, refine_iters=50)), real, seed=0)
    assert syn._model.tree.clique_for(PAIR) is not None   # linked by the graph
    assert any(set(m.attributes) == set(PAIR) and m.bins for m in syn._measurements)   # measured coarsened
    model_tvd, indep_tvd = _pair_tvd(syn._model, real)
    assert model_tvd < 0.5 * indep_tvd

