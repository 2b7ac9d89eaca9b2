"""PrivMRF: accounting per phase, determinism, local-model export, quality at large ε."""
import numpy as np
import pytest

from vertisynth.run.config import parse_config
from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.errors import ConfigError, MessageError
from vertisynth.core.messages import Message
from vertisynth.run.pipeline import make_plan, run
from vertisynth.core.privacy import Budget, PrivacyLedger
from vertisynth.plugins.synthesizers.privmrf.synthesizer import (LocalModel, PrivMRFConfig, PrivMRFSynthesizer,
                                                                 r_scores)


def _cfg(**kw):
    base = {"seed": 3, "budget": {"epsilon": 1.0, "delta": 1e-5}, "dataset": {"name": "census", "params": {"n": 3000}},
            "synthesizer": {"use": "privmrf", "params": {"iters": 60, "refine_iters": 20}},
            "evaluators": [{"use": "tvd", "params": {"ways": [2, 3], "marginals": 30}}]}
    base.update(kw)
    return parse_config(base)


def test_every_phase_spends_exactly_its_plan_and_runs_are_deterministic():
    a = run(_cfg())
    b = run(_cfg())
    assert a.synthetic.equals(b.synthetic)
    assert not a.ledger.unspent()
    assert a.ledger.spent_epsilon() == pytest.approx(1.0, rel=1e-6)
    mechs = [c.mechanism for c in a.ledger.spent]
    d = 15
    assert mechs.count("gaussian_count") == 1 and mechs.count("gaussian_r_scores") == 1
    assert mechs.count("gaussian_refine_queries") == min((d + 1) // 2, 8)
    assert mechs.count("gaussian_marginal") == d + int(np.ceil(0.8 * d))


def _correlated(n=4000, seed=0):
    rng = np.random.default_rng(seed)
    dom = Domain(["a", "b", "c", "d"], [3, 3, 2, 4])
    a = rng.integers(0, 3, n)
    b = (a + (rng.random(n) < 0.2)) % 3
    c = (b == 0).astype(int) ^ (rng.random(n) < 0.1)
    d_ = (a + c + rng.integers(0, 2, n)) % 4
    return Dataset(np.column_stack([a, b, c, d_]), dom)


def test_large_epsilon_reproduces_the_training_marginals():
    data = _correlated()
    budget = Budget(1e4, 1e-5)
    syn = PrivMRFSynthesizer(PrivMRFConfig(iters=400, refine_iters=200))
    ledger = PrivacyLedger(budget)
    ledger.plan(syn.plan_for(data.domain, budget.rho()))
    syn.fit_table(data, ledger, np.random.default_rng(0))
    out = syn.sample(None, np.random.default_rng(1))
    for attrs_ in [("a", "b"), ("b", "c"), ("a", "c", "d")]:
        p = data.counts(attrs_).values / data.n
        q = out.counts(attrs_).values / out.n
        assert 0.5 * np.abs(p - q).sum() < 0.03


def test_r_scores_match_the_definition():
    data = _correlated()
    (r,) = r_scores(data, [("a", "b")])
    p = data.counts(["a", "b"]).values / data.n
    assert r == pytest.approx(data.n / 2 * np.abs(p - np.outer(p.sum(1), p.sum(0))).sum())


def test_local_model_export_round_trips_through_a_file(tmp_path):
    data = _correlated()
    budget = Budget(2.0, 1e-5)
    syn = PrivMRFSynthesizer(PrivMRFConfig(iters=50, refine_iters=20, max_clique_cells=50))
    ledger = PrivacyLedger(budget)
    ledger.plan(syn.plan_for(data.domain, budget.rho(), party="hospital"))
    syn.fit_table(data, ledger, np.random.default_rng(0))
    msg = syn.export("hospital")
    back = Message.load(msg.save(tmp_path / "local.npz"))
    assert isinstance(back, LocalModel) and back.party == "hospital"
    assert all(back.domain.project(c).size() <= 50 for c in back.cliques)  # the clique limit passed in
    model = back.model()
    assert np.allclose(model.marginal(["a", "b"]).values, syn._model.marginal(["a", "b"]).values)
    assert {c.party for c in ledger.spent} == {"hospital"}
    bad = LocalModel(party="x", domain=data.domain, cliques=[["a", "b"]], potentials={"0": np.zeros((2, 2))},
                     total=5.0, edges=[], marginals=[], marginal_std=[])
    with pytest.raises(MessageError, match="expected"):
        bad.validate()


def test_bad_config():
    with pytest.raises(ConfigError, match="fractions"):
        make_plan(_cfg(synthesizer={"use": "privmrf", "params": {"r_score_fraction": 0.6, "refine_fraction": 0.5}}))
    with pytest.raises(ConfigError, match="sampling"):
        make_plan(_cfg(synthesizer={"use": "privmrf", "params": {"sampling": "gibbs"}}))


@pytest.mark.shared_data
def test_privmrf_on_nltcs_beats_independent(data_dir):
    res = run(_cfg(dataset={"name": "nltcs", "params": {"data_dir": str(data_dir), "sample": 8000}},
                   synthesizer={"use": "privmrf", "params": {"iters": 60, "refine_iters": 20}}))
    assert res.metrics["tvd"]["tvd_3way"] < 0.1  # independent columns score ≈ 0.25


def _planned(data, eps=1.0, **kw):
    budget = Budget(eps, 1e-5)
    syn = PrivMRFSynthesizer(PrivMRFConfig(**kw))
    ledger = PrivacyLedger(budget)
    ledger.plan(syn.plan_for(data.domain, budget.rho()))
    return syn, ledger


def test_candidates_are_exactly_the_theta_useful_clique_subsets_up_to_the_size_limit():
    import itertools
    import math

    from vertisynth.core.mechanisms import gaussian_sigma

    dom = Domain([f"x{i}" for i in range(7)], [2, 3, 2, 2, 4, 2, 2])
    data = Dataset(np.zeros((10, 7), dtype=int), dom)
    cliques = [("x0", "x1", "x2", "x3", "x4", "x5"), ("x4", "x5", "x6")]
    for max_attrs, n_hat in [(6, 5e4), (3, 5e4), (6, 2e3), (4, 1e6)]:
        syn, _ = _planned(data, max_marginal_attrs=max_attrs)
        limit = n_hat / (6.0 * gaussian_sigma(syn._rho_marg) * math.sqrt(2 / math.pi))
        want = {s for q in cliques for k in range(2, min(max_attrs, len(q)) + 1) for s in itertools.combinations(q, k)
                if dom.project(s).size() <= limit}
        got = syn._candidates(cliques, n_hat)
        assert set(got) == want and want
        assert all(w > 0 for w in got.values())
        # a subset of both cliques carries both cliques' weight shares
        if ("x4", "x5") in got and max_attrs == 6:
            assert got[("x4", "x5")] > got[("x0", "x1")]


def test_max_marginal_attrs_bounds_the_measured_marginals_and_the_plan_is_spent_exactly():
    data = _correlated(n=20000)
    for k in (2, 4):
        syn, ledger = _planned(data, eps=4.0, max_marginal_attrs=k, iters=40, refine_iters=10)
        syn.fit_table(data, ledger, np.random.default_rng(0))
        sizes = {len(m.attributes) for m in syn._measurements}
        assert max(sizes) <= k and (k == 2 or max(sizes) > 2)
        assert not ledger.unspent()
    with pytest.raises(ConfigError, match="max_marginal_attrs"):
        PrivMRFConfig(max_marginal_attrs=1)


def test_bayes_initial_set_covers_every_attribute_within_the_cell_limit_and_is_deterministic():
    import math

    from vertisynth.core.mechanisms import gaussian_sigma

    data = _correlated(n=20000)
    outs = []
    for _ in range(2):
        syn, ledger = _planned(data, eps=2.0, initial="bayes", iters=40, refine_iters=10)
        syn.fit_table(data, ledger, np.random.default_rng(4))
        assert not ledger.unspent()
        outs.append(syn.sample(None, np.random.default_rng(5)))
        limit = syn._n_hat / (6.0 * gaussian_sigma(syn._rho_marg) * math.sqrt(2 / math.pi))
        score = dict(zip(syn._pairs, r_scores(data, syn._pairs)))
        init = syn._bayes_initial([tuple(data.domain.attributes)], score, syn._n_hat, np.random.default_rng(0))
        assert {a for m in init for a in m} == set(data.domain.attributes)
        assert all(len(m) == 1 or data.domain.project(m).size() <= limit for m in init)
        assert not any(set(m) < set(o) for m in init for o in init)
    assert np.array_equal(outs[0].codes, outs[1].codes)
    with pytest.raises(ConfigError, match="initial"):
        PrivMRFConfig(initial="random")


def _wide(n=20000, size=20, seed=0):
    """x, y: a copy of each other (maximal dependence); u, v: independent of everything; all `size`-valued."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, size, n)
    u, v = rng.integers(0, size, n), rng.integers(0, size, n)
    return Dataset(np.column_stack([x, x, u, v]), Domain(["x", "y", "u", "v"], [size] * 4))


def test_signal_filter_keeps_a_strong_pair_the_theta_filter_drops_and_still_drops_pure_noise():
    import math

    data = _wide()
    cells = 20 * 20
    score = dict(zip([("x", "y"), ("u", "v")], r_scores(data, [("x", "y"), ("u", "v")])))
    cliques = [("x", "y"), ("u", "v")]
    syn, _ = _planned(data, eps=0.5, coarsen=False)   # the full-resolution tests alone (coarsening: below)
    g = syn._noise_per_cell()
    # preconditions: both pairs fail the paper's θ = 6 test; x–y's dependence outweighs its noise, u–v's does not
    assert data.n / (6.0 * g) < cells
    assert 2 * score[("x", "y")] > cells * g > 2 * score[("u", "v")]
    paper, _ = _planned(data, eps=0.5, useful="theta")
    assert paper._candidates(cliques, data.n, score) == {}
    assert set(syn._candidates(cliques, data.n, score)) == {("x", "y")}
    assert set(syn._candidates(cliques, data.n)) == set()  # no scores: the paper's filter
    # a larger break-even factor is stricter; at a large budget both pairs are θ-useful under either filter
    strict, _ = _planned(data, eps=0.5, coarsen=False, signal_ratio=2 * score[("x", "y")] / (cells * g) * 1.01)
    assert strict._candidates(cliques, data.n, score) == {}
    big, _ = _planned(data, eps=50.0, useful="theta")
    assert set(big._candidates(cliques, data.n, score)) == {("x", "y"), ("u", "v")}
    assert math.isclose(syn._noise_per_cell(), paper._noise_per_cell())
    # the guard: a score that clears the break-even point by less than signal_z·σ_R is not enough
    margin = syn._signal_margin()
    assert margin > 0 and _planned(data, eps=0.5, signal_z=0.0)[0]._signal_margin() == 0
    near = {("x", "y"): cells * g / 2 + 0.5 * margin, ("u", "v"): 0.0}
    assert syn._candidates(cliques, data.n, near) == {}
    assert set(_planned(data, eps=0.5, signal_z=0.0, coarsen=False)[0]._candidates(cliques, data.n, near)) == {("x", "y")}
    with pytest.raises(ConfigError, match="useful"):
        PrivMRFConfig(useful="always")
    with pytest.raises(ConfigError, match="signal_z"):
        PrivMRFConfig(signal_z=-1.0)
    with pytest.raises(ConfigError, match="signal_ratio"):
        PrivMRFConfig(signal_ratio=0.0)


def test_signal_filter_measures_the_strong_pair_at_a_small_budget_and_spends_exactly_the_budget():
    data = _wide()
    measured = {}
    for useful in ("theta", "signal"):
        syn, ledger = _planned(data, eps=0.5, useful=useful, iters=30, refine_iters=10)
        syn.fit_table(data, ledger, np.random.default_rng(3))
        assert not ledger.unspent()
        assert ledger.spent_epsilon() == pytest.approx(0.5, rel=1e-6)
        measured[useful] = {m.attributes for m in syn._measurements}
        out = syn.sample(None, np.random.default_rng(4))
        tvd = 0.5 * np.abs(data.counts(("x", "y")).values / data.n - out.counts(("x", "y")).values / out.n).sum()
        measured[useful + "_tvd"] = tvd
    assert ("x", "y") in measured["signal"] and ("x", "y") not in measured["theta"]
    assert ("u", "v") not in measured["signal"]
    assert measured["signal_tvd"] < 0.5 < measured["theta_tvd"]


def test_a_pair_neither_test_keeps_is_offered_coarsened_for_refinement_only():
    """x–y just under the signal test's break-even point: no longer dropped, it is offered with consecutive values
    merged down to max(θ limit, the cells its R̂ pays for); never in the initial set, never extended."""
    import math

    data = _wide()
    cells = 20 * 20
    cliques = [("x", "y"), ("u", "v")]
    syn, _ = _planned(data, eps=0.5)
    g, margin = syn._noise_per_cell(), syn._signal_margin()
    limit = data.n / (6.0 * g)
    near = {("x", "y"): cells * g / 2 - margin, ("u", "v"): 0.5 * margin}
    cands = syn._candidates(cliques, data.n, near)
    assert set(cands) == {("x", "y")} and set(syn._cand_bins) == {("x", "y")}   # u–v: R̂ − z·σ_R ≤ 0, dropped
    bins = syn._cand_bins[("x", "y")]
    k = [int(bins[a].max()) + 1 if a in bins else 20 for a in ("x", "y")]
    budget = max(limit, 2 * (near[("x", "y")] - margin) / g)
    assert math.prod(k) <= budget < cells and min(k) >= 2
    for a, b in bins.items():   # consecutive values, every bin used
        assert np.all(np.diff(b) >= 0) and set(b.tolist()) == set(range(int(b.max()) + 1))
    # the paper's filter and coarsen=False offer nothing
    assert _planned(data, eps=0.5, useful="theta")[0]._candidates(cliques, data.n, near) == {}
    assert _planned(data, eps=0.5, coarsen=False)[0]._candidates(cliques, data.n, near) == {}
    # in a fit the coarsened measurement carries its bins and the budget is spent exactly
    fit, ledger = _planned(data, eps=0.5, iters=30, refine_iters=10, signal_ratio=1e3)  # the full pair fails
    fit.fit_table(data, ledger, np.random.default_rng(3))
    assert not ledger.unspent() and ledger.spent_epsilon() == pytest.approx(0.5, rel=1e-6)
    xy = [m for m in fit._measurements if m.attributes == ("x", "y")]
    assert xy and all(m.bins for m in xy)
    assert xy[0].values.shape == xy[0].shape_in(data.domain) and xy[0].values.size < cells


def test_fit_tolerance_stops_the_fits_where_converged_and_zero_keeps_the_budgets(monkeypatch):
    """`fit_tolerance` passes pgm's atol stop (per measured cell) to every fit; 0 (PrivMRF's default) runs each fit to
    its whole budget as before. VertiMRF's parties' local fits take it through `local_params` (default 0)."""
    import vertisynth.plugins.synthesizers.privmrf.synthesizer as psyn

    with pytest.raises(ConfigError, match="fit_tolerance"):
        PrivMRFConfig(fit_tolerance=-1.0)
    data = _correlated()
    runs = {}
    for tol in (0.0, 1e-2):
        steps = []
        real = psyn.estimate

        def recorded(*a, **k):
            res = real(*a, **k)
            steps.append((k.get("atol"), res.iterations))
            return res
        monkeypatch.setattr(psyn, "estimate", recorded)
        budget = Budget(2.0, 1e-5)
        syn = PrivMRFSynthesizer(PrivMRFConfig(iters=400, refine_iters=200, fit_tolerance=tol))
        ledger = PrivacyLedger(budget)
        ledger.plan(syn.plan_for(data.domain, budget.rho()))
        syn.fit_table(data, ledger, np.random.default_rng(0))
        runs[tol] = steps
        monkeypatch.undo()
    assert all(atol is None for atol, _ in runs[0.0])
    assert all(atol is not None and atol > 0 for atol, _ in runs[1e-2])
    assert sum(n for _, n in runs[1e-2]) < 0.8 * sum(n for _, n in runs[0.0])
    for local, want in (({}, 0.0), ({"fit_tolerance": 0.02}, 0.02)):
        plan = make_plan(parse_config({"seed": 0, "budget": {"epsilon": 1.0, "delta": 1e-5},
                                       "dataset": {"name": "census", "params": {"n": 500}},
                                       "synthesizer": {"use": "vertimrf",
                                                       "params": {"encoder": "dpfm", "local_params": local}}}))
        assert all(s.config.fit_tolerance == want for s in plan.synthesizer.instance._local.values())
