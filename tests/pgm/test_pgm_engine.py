"""The graphical-model engine and the private_pgm plugin."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from vertisynth.run.config import parse_config
from vertisynth.core.domain import Domain
from vertisynth.core.errors import ConfigError
from vertisynth.run.pipeline import make_plan, run
from vertisynth.pgm import GraphicalModel, Measurement, build_junction_tree, estimate
from vertisynth.pgm.graph import ModelTooLargeError


def brute_force(domain, tree, theta):
    grids = np.meshgrid(*[np.arange(s) for s in domain.shape], indexing="ij")
    logp = np.zeros(domain.shape)
    for c, t in zip(tree.cliques, theta):
        logp = logp + t[tuple(grids[domain.attributes.index(a)] for a in c)]
    p = np.exp(logp - logp.max())
    return p / p.sum()


def brute_marginal(domain, joint, attrs_):
    axes = tuple(i for i, a in enumerate(domain.attributes) if a not in attrs_)
    kept = [a for a in domain.attributes if a in attrs_]
    return np.transpose(joint.sum(axis=axes), [kept.index(a) for a in attrs_])


@st.composite
def small_models(draw):
    d = draw(st.integers(2, 6))
    names = [f"x{i}" for i in range(d)]
    dom = Domain(names, draw(st.lists(st.integers(2, 3), min_size=d, max_size=d)))
    k = draw(st.integers(1, 6))
    cliques = [tuple(sorted(draw(st.sets(st.sampled_from(names), min_size=1, max_size=3)), key=names.index))
               for _ in range(k)]
    query = tuple(draw(st.permutations(names))[: draw(st.integers(1, min(3, d)))])
    return dom, cliques, query, draw(st.integers(0, 2**31))


@settings(max_examples=60, deadline=None)
@given(small_models())
def test_belief_propagation_matches_brute_force(model):
    dom, cliques, query, seed = model
    tree = build_junction_tree(dom, cliques)
    rng = np.random.default_rng(seed)
    theta = [rng.normal(0, 1.5, dom.project(c).shape) for c in tree.cliques]
    gm = GraphicalModel(tree, theta, total=1.0)
    joint = brute_force(dom, tree, theta)
    assert np.allclose(gm.marginal(query).values, brute_marginal(dom, joint, query), atol=1e-10)
    for c, f in zip(tree.cliques, gm.clique_marginals()):
        assert np.allclose(f.values, brute_marginal(dom, joint, c), atol=1e-10)


def _chain():
    dom = Domain(list("abcde"), [2, 3, 4, 2, 3])
    cliques = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "e"), ("a", "e")]
    tree = build_junction_tree(dom, cliques)
    rng = np.random.default_rng(0)
    theta = [rng.normal(0, 1, dom.project(c).shape) for c in tree.cliques]
    return dom, tree, GraphicalModel(tree, theta, 1000.0)


def test_exact_recovery_from_noiseless_measurements():
    dom, tree, truth = _chain()
    meas = [Measurement(c, truth.marginal(c).values, 1.0) for c in [("a", "b"), ("b", "c"), ("c", "d"), ("d", "e"), ("a", "e")]]
    res = estimate(dom, meas, total=1000.0, iters=3000, tol=1e-14)
    for m in meas:
        assert np.allclose(res.model.marginal(m.attributes).values, m.values, atol=1e-6)


def test_loss_decreases_monotonically_and_total_from_measurements():
    dom, tree, truth = _chain()
    rng = np.random.default_rng(1)
    meas = [Measurement(c, truth.marginal(c).values + rng.normal(0, 5, dom.project(c).shape), 5.0)
            for c in [("a", "b"), ("b", "c"), ("c", "d"), ("a",)]]
    res = estimate(dom, meas, iters=300)
    assert all(b <= a + 1e-9 for a, b in zip(res.losses, res.losses[1:]))
    assert res.losses[-1] < res.losses[0]
    assert res.model.total == pytest.approx(1000.0, rel=0.05)


@pytest.mark.parametrize("method", ["sample", "round"])
def test_sample_marginals_converge_to_the_model(method):
    dom, tree, model = _chain()
    data = model.sample(200_000, np.random.default_rng(7), method)
    for attrs_ in [("a", "c", "e"), ("b", "d")]:
        emp = data.counts(attrs_).values / data.n
        exact = model.marginal(attrs_).values / model.total
        assert 0.5 * np.abs(emp - exact).sum() < 0.01


def test_rounding_has_lower_variance_than_sampling():
    dom, tree, model = _chain()
    errs = {m: [] for m in ("sample", "round")}
    for s in range(20):
        for m in errs:
            d = model.sample(2000, np.random.default_rng(s), m)
            errs[m].append(np.abs(d.counts(["a", "b"]).values / 2000 - model.marginal(["a", "b"]).values / 1000).sum())
    assert np.mean(errs["round"]) < np.mean(errs["sample"])


def test_too_large_model_is_refused_clearly():
    dom = Domain([f"x{i}" for i in range(8)], [10] * 8)
    with pytest.raises(ModelTooLargeError, match=r"needs 100,000,000 cells \(limit 1,000,000\)"):
        build_junction_tree(dom, [tuple(dom.attributes)], max_cells=1e6)


def test_measurement_errors():
    dom = Domain(["a", "b"], [2, 3])
    with pytest.raises(ConfigError, match="std must be positive"):
        Measurement(("a",), np.ones(2), 0.0)
    with pytest.raises(Exception, match="shape"):
        estimate(dom, [Measurement(("a", "b"), np.ones((3, 2)))])


def _cfg(**kw):
    base = {"seed": 4, "budget": {"epsilon": 1.0, "delta": 1e-5}, "dataset": {"name": "census", "params": {"n": 3000}},
            "synthesizer": {"use": "private_pgm", "params": {"iters": 200}},
            "evaluators": [{"use": "tvd", "params": {"ways": [2], "marginals": 20}}]}
    base.update(kw)
    return parse_config(base)


def test_private_pgm_runs_from_config_and_spends_the_plan():
    a = run(_cfg())
    b = run(_cfg())
    assert a.synthetic.equals(b.synthetic)
    assert not a.ledger.unspent() and a.ledger.spent_epsilon() == pytest.approx(1.0, rel=1e-6)
    assert [c.mechanism for c in a.ledger.spent].count("exponential_select") == 14
    assert 0 < a.metrics["tvd"]["tvd_2way"] < 0.5


def test_private_pgm_workload_and_bad_params():
    res = run(_cfg(synthesizer={"use": "private_pgm", "params": {"measurements": "workload", "iters": 100,
                                                                  "workload": [["age", "income"], ["sex", "occupation"]]}}))
    assert len(res.ledger.spent) == 15 + 2
    with pytest.raises(ConfigError, match="measurements must be"):
        make_plan(_cfg(synthesizer={"use": "private_pgm", "params": {"measurements": "aim"}}))
    with pytest.raises(Exception, match="unknown attribute 'agee'"):
        make_plan(_cfg(synthesizer={"use": "private_pgm", "params": {"measurements": "workload", "workload": [["agee", "sex"]]}}))


@pytest.mark.shared_data
def test_private_pgm_on_nltcs(data_dir):
    res = run(_cfg(dataset={"name": "nltcs", "params": {"data_dir": str(data_dir)}}))
    assert res.metrics["tvd"]["tvd_2way"] < 0.2


def test_warm_start_continues_from_the_given_model_and_refuses_foreign_measurements():
    dom, tree, truth = _chain()
    rng = np.random.default_rng(2)
    meas = [Measurement(c, truth.marginal(c).values + rng.normal(0, 5, dom.project(c).shape), 5.0)
            for c in [("a", "b"), ("b", "c"), ("c", "d")]]
    first = estimate(dom, meas, iters=50)
    warm = estimate(dom, meas, iters=50, warm_start=first.model)
    # a warm start begins where the first fit ended, not from the uniform model
    assert warm.losses[0] <= first.losses[-1] + 1e-6
    assert warm.losses[0] < first.losses[0]
    with pytest.raises(ConfigError, match="warm start"):
        estimate(dom, [Measurement(("a", "e"), truth.marginal(("a", "e")).values, 1.0)], iters=5,
                 warm_start=first.model)


def test_sum_out_equals_numpy_multi_axis_sum():
    import itertools

    from vertisynth.pgm.model import sum_out

    rng = np.random.default_rng(0)
    for shape in [(2,) * 9, (3, 4, 5), (7,), (2, 3, 1, 5, 4)]:
        a = rng.random(shape)
        for k in range(len(shape) + 1):
            for drop in itertools.combinations(range(len(shape)), k):
                want = a.sum(axis=drop) if drop else a
                got = sum_out(a, drop)
                assert got.shape == want.shape and np.allclose(got, want)


def test_round_sampling_reproduces_every_clique_marginal_closely():
    from vertisynth.core.dataset import Dataset

    rng = np.random.default_rng(2)
    dom = Domain([f"b{i}" for i in range(6)], [2, 2, 3, 2, 2, 2])
    codes = rng.integers(0, 2, (5000, 6))
    codes[:, 1] = codes[:, 0] ^ (rng.random(5000) < 0.2)
    codes[:, 2] = (codes[:, 1] + rng.integers(0, 2, 5000)) % 3
    data = Dataset(codes, dom)
    meas = [Measurement(s, data.counts(s).values, 1.0) for s in [tuple(dom.attributes[:4]), ("b3", "b4", "b5")]]
    model = estimate(dom, meas, iters=300).model
    out = model.sample(5000, np.random.default_rng(3), "round")
    for s in [("b0",), ("b0", "b1"), ("b0", "b1", "b2"), ("b3", "b4", "b5")]:
        want = model.marginal(s).values
        got = out.counts(s).values
        # rounded attribute by attribute: every prefix cell is within a handful of records of its expectation
        assert np.abs(got - want).max() <= 3 * len(s) + 2


def test_binned_queries_sum_each_bin_of_the_full_table():
    """`_query_rows`: each cell's bin, so that Q μ (a bincount) is the binned table `bin_sum` gives and Qᵀ g a
    gather; the estimation's binned measurements use it instead of a scipy.sparse Q."""
    from vertisynth.core.domain import Domain
    from vertisynth.pgm.estimation import Measurement, _query_rows, bin_sum

    dom = Domain.from_sizes({"a": 4, "b": 6, "c": 3})
    bins_b = np.array([0, 0, 1, 2, 2, 2])
    table = np.random.default_rng(0).random((4, 6))
    m = Measurement(("a", "b"), np.zeros((4, 3)), 1.0, bins={"b": bins_b})
    rows, n_bins = _query_rows(m, ("a", "b"), dom)
    assert n_bins == 12
    np.testing.assert_allclose(np.bincount(rows, table.ravel(), minlength=n_bins).reshape(4, 3),
                               bin_sum(table, 1, bins_b), rtol=1e-14)
    plain, n_plain = _query_rows(Measurement(("a", "c"), np.zeros((4, 3)), 1.0), ("a", "c"), dom)
    assert n_plain == 12 and np.array_equal(plain, np.arange(12))


def test_marginals_across_components_reuse_the_trees_lookups(monkeypatch):
    # AIM asks a fitted model for thousands of marginals: the tree's components and breadth-first orders are
    # worked out once per tree (shared by every model on it), not per marginal; the values are the Factor products
    from vertisynth.core.factor import Factor
    from vertisynth.pgm.graph import JunctionTree

    rng = np.random.default_rng(4)
    dom = Domain([f"x{i}" for i in range(8)], list(rng.integers(2, 5, 8)))
    tree = build_junction_tree(dom, [("x0", "x1"), ("x1", "x2"), ("x3", "x4"), ("x4", "x5"), ("x6",), ("x7",)])
    gm = GraphicalModel(tree, [rng.normal(size=dom.project(c).shape) for c in tree.cliques], 40.0)
    calls = []
    real_order = JunctionTree.order
    monkeypatch.setattr(JunctionTree, "order", lambda self, root=0: calls.append(root) or real_order(self, root))
    queries = [("x0", "x2", "x5"), ("x7", "x4", "x0"), ("x6", "x3", "x1"), ("x2", "x5"), ("x5", "x0", "x7")] * 20
    for q in queries:
        got = gm.marginal(q)
        parts = [gm.marginal([a for a in q if a in set(c)]) for c in (("x0", "x1", "x2"), ("x3", "x4", "x5"),
                                                                      ("x6",), ("x7",)) if set(q) & set(c)]
        ref = parts[0]
        for f in parts[1:]:
            ref = ref * Factor(f.domain, f.values / 40.0)
        assert np.allclose(got.values, ref.transpose(list(q)).values, rtol=1e-12)
        assert got.attributes == q and got.values.sum() == pytest.approx(40.0)
    assert len(calls) <= 2 * len(tree.cliques)   # per root once; it was twice per component per marginal
