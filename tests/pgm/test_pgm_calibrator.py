"""The Calibrator (estimation's batched belief propagation) against the two-pass GraphicalModel and brute force."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from vertisynth.core.domain import Domain
from vertisynth.pgm import GraphicalModel, Measurement, build_junction_tree, estimate
import vertisynth.pgm.calibrator as calmod
from vertisynth.pgm.calibrator import Calibrator, _sum_out

from test_pgm_engine import brute_force, brute_marginal


@st.composite
def models_with_measurements(draw):
    d = draw(st.integers(2, 7))
    names = [f"x{i}" for i in range(d)]
    dom = Domain(names, draw(st.lists(st.integers(2, 4), min_size=d, max_size=d)))
    k = draw(st.integers(1, 7))
    cliques = [tuple(sorted(draw(st.sets(st.sampled_from(names), min_size=1, max_size=3)), key=names.index))
               for _ in range(k)]
    # measurements: the cliques plus some of their subsets (several measurements may share a clique)
    scopes = list(cliques) + [c[: draw(st.integers(1, len(c)))] for c in cliques]
    return dom, cliques, scopes, draw(st.integers(0, 2**31)), draw(st.sampled_from([1, 12, 10**9]))


def _calibrator(dom, cliques, scopes, big_min_cells, base=None):
    tree = build_junction_tree(dom, list(cliques) + list(scopes))
    assign = [tree.clique_for(s) for s in scopes]
    kept = [tuple(a for a in tree.cliques[ci] if a in s) for s, ci in zip(scopes, assign)]
    return tree, Calibrator(tree, kept, assign, base, big_min_cells=big_min_cells), kept


@settings(max_examples=80, deadline=None)
@given(models_with_measurements(), st.booleans())
def test_calibrator_matches_two_pass_bp_and_brute_force(model, with_base):
    """Every clique batched (big_min_cells huge), every clique on its own (1), or a mix (12)."""
    dom, cliques, scopes, seed, big = model
    rng = np.random.default_rng(seed)
    tree0 = build_junction_tree(dom, list(cliques) + list(scopes))
    base = [rng.normal(0, 1, dom.project(c).shape) for c in tree0.cliques] if with_base else None
    tree, cal, kept = _calibrator(dom, cliques, scopes, big, base)
    phi = rng.normal(0, 1.5, cal.M)
    mu = cal.marginals(phi, 250.0)
    theta = cal.potentials(phi, base)
    gm = GraphicalModel(tree, theta, total=250.0)
    joint = brute_force(dom, tree, theta)
    for k, s in enumerate(kept):
        got = mu[cal.meas_off[k]:cal.meas_off[k + 1]].reshape(dom.project(s).shape)
        assert np.allclose(got, gm.marginal(s).values, atol=1e-9)
        assert np.allclose(got, 250.0 * brute_marginal(dom, joint, s), atol=1e-9)


def test_extreme_potentials_fall_back_to_per_message_scaling():
    """Potentials spanning e^±900 would underflow with level-wide scaling; the robust pass takes over."""
    dom = Domain(list("abcdef"), [3, 2, 4, 2, 3, 2])
    cliques = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "e"), ("e", "f")]
    tree, cal, kept = _calibrator(dom, cliques, cliques, 10**9)
    rng = np.random.default_rng(0)
    phi = rng.normal(0, 1, cal.M)
    phi[cal.meas_off[0]:cal.meas_off[1]] = [900, -900, 0, 5, -900, 900]
    mu = cal.marginals(phi, 1.0)
    assert np.all(np.isfinite(mu))
    gm = GraphicalModel(tree, cal.potentials(phi), total=1.0)
    for k, s in enumerate(kept):
        assert np.allclose(mu[cal.meas_off[k]:cal.meas_off[k + 1]], gm.marginal(s).values.ravel(), atol=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=5), st.data())
def test_sum_out_matches_numpy(shape, data):
    drop = tuple(sorted(data.draw(st.sets(st.integers(0, len(shape) - 1)))))
    t = np.random.default_rng(len(shape)).random(shape)
    assert np.allclose(_sum_out(t, drop), t.sum(axis=drop) if drop else t)


def test_large_factorised_clique_estimation_matches_small_path():
    """A clique above the size threshold (processed on its own, grouped factors, staged sums) gives the same
    fit as the batched path."""
    dom = Domain(list("abcdef"), [6, 5, 7, 4, 6, 3])
    cliques = [("a", "b"), ("b", "c"), ("a", "c"), ("c", "d"), ("a", "d"), ("d", "e"), ("e", "f"), ("a", "b", "c")]
    rng = np.random.default_rng(3)
    meas = [Measurement(c, rng.uniform(0, 50, dom.project(c).shape), 3.0) for c in cliques]
    tree = build_junction_tree(dom, cliques)
    assert max(dom.project(c).size() for c in tree.cliques) >= 200
    small = estimate(dom, meas, iters=60, tol=-1.0)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(calmod, "BIG_MIN_CELLS", 100)
        mp.setattr(calmod, "STAGE_MIN_CELLS", 10)  # exercise the staged sums too
        big = estimate(dom, meas, iters=60, tol=-1.0)
    assert np.allclose(small.losses, big.losses, rtol=1e-9)
    for c in cliques:
        assert np.allclose(small.model.marginal(c).values, big.model.marginal(c).values, atol=1e-8)


def test_estimation_iterates_match_plain_mirror_descent():
    """The measurement-space update reproduces mirror descent on clique log-potentials with GraphicalModel's
    own belief propagation (same step rule), step for step."""
    dom = Domain(list("abcd"), [3, 4, 2, 3])
    cliques = [("a", "b"), ("b", "c"), ("c", "d"), ("b",)]
    rng = np.random.default_rng(5)
    meas = [Measurement(c, rng.uniform(0, 40, dom.project(c).shape), 2.0) for c in cliques]
    res = estimate(dom, meas, total=300.0, iters=25, tol=-1.0, growth=1.05)
    tree = build_junction_tree(dom, cliques)
    model = GraphicalModel(tree, None, 300.0)

    def loss_grad(m):
        loss, grads = 0.0, [np.zeros(s) for s in m.shapes]
        for x in meas:
            ci = tree.clique_for(x.attributes)
            r = m.marginal(x.attributes).values - x.values
            loss += 0.5 * float((r * r).sum()) / x.std**2
            c = tree.cliques[ci]
            kept = [a for a in c if a in x.attributes]
            g = np.transpose(r / x.std**2, [x.attributes.index(a) for a in kept])
            grads[ci] = grads[ci] + g.reshape([m.shapes[ci][j] if a in x.attributes else 1 for j, a in enumerate(c)])
        return loss, grads

    loss, grads = loss_grad(model)
    eta, ramp, losses = 1.0 / 300.0, True, [loss]
    for _ in range(25):
        while True:
            trial = model.with_potentials([t - eta * g for t, g in zip(model.theta, grads)])
            new_loss, new_grads = loss_grad(trial)
            dec = sum(float((g * (a - b)).sum()) for g, a, b in
                      zip(grads, model.clique_counts(), trial.clique_counts()))
            if loss - new_loss >= 0.5 * dec:
                break
            eta, ramp = eta / 2, False
        model, loss, grads = trial, new_loss, new_grads
        losses.append(loss)
        eta *= 2.0 if ramp else 1.05
    assert np.allclose(res.losses, losses, rtol=1e-8)


def test_small_factors_of_a_large_clique_are_merged_before_the_clique_sized_product():
    """Two factors whose broadcast product is at most half the clique are multiplied first (one pass over
    the clique saved); the clique-sized base and factors that would fill it are left to the last product."""
    shapes = [(16, 7, 1, 1), (16, 1, 14, 1), (1, 1, 1, 6), (16, 7, 14, 6)]   # two groups, a kid, the base
    merges = Calibrator._merge_plan(shapes, 16 * 7 * 14 * 6)
    assert merges and all(j != 3 and i != 3 for i, j in merges)
    assert Calibrator._merge_plan([(4, 1), (1, 4)], 16) == []  # two factors: nothing to save


def test_opposed_extreme_potentials_fall_back_to_the_models_log_space_pass():
    """Clique (a, b) favours b = 0 by e^800, clique (b, c) b = 1 by e^800: each cell of (a, b) is a product of a
    value and a message one of which underflows, so even the per-message-scaled pass gave 0/0 (NaN marginals, and
    estimation refused the fit: aim's warm start on zoo mixed at 120 rows, eps 0.4, in the study's --quick grid).
    The exact distribution is fine (b is uniform); the calibrator now takes it from GraphicalModel's log-space
    beliefs."""
    dom = Domain(["a", "b", "c"], [2, 2, 2])
    cliques = [("a", "b"), ("b", "c")]
    for big in (10**9, 1):   # the batched levels and the per-clique path
        tree, cal, kept = _calibrator(dom, cliques, cliques, big)
        phi = np.zeros(cal.M)
        for k, s in enumerate(kept):
            lo = cal.meas_off[k]
            favoured = 0 if s == ("a", "b") else 1
            t = np.full(dom.project(s).shape, -800.0)
            (t[:, favoured] if s == ("a", "b") else t[favoured, :])[...] = 0.0
            phi[lo:lo + t.size] = t.ravel()
        mu = cal.marginals(phi, 100.0)
        assert np.all(np.isfinite(mu))
        theta = cal.potentials(phi, None)
        gm = GraphicalModel(tree, theta, total=100.0)
        for k, s in enumerate(kept):
            got = mu[cal.meas_off[k]:cal.meas_off[k + 1]].reshape(dom.project(s).shape)
            assert np.allclose(got, gm.marginal(s).values, atol=1e-9)
            assert np.allclose(got.sum(axis=0 if s == ("a", "b") else 1), 50.0)   # b uniform
