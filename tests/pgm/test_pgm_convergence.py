"""The convergence stop of mirror descent (`estimate(atol=...)`): it ends the fit once the loss left to gain is
estimated below `atol` (in squared noise stds), well before a fixed budget, at the fit the budget reaches."""
import numpy as np
import pytest

from vertisynth.core.domain import Domain
from vertisynth.core.errors import ConfigError
from vertisynth.pgm import GraphicalModel, Measurement, build_junction_tree, estimate

CLIQUES = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "e"), ("a", "e")]


def _noisy(seed: int, std: float = 5.0):
    dom = Domain(list("abcde"), [2, 3, 4, 2, 3])
    tree = build_junction_tree(dom, CLIQUES)
    rng = np.random.default_rng(seed)
    truth = GraphicalModel(tree, [rng.normal(0, 1, dom.project(c).shape) for c in tree.cliques], 2000.0)
    meas = [Measurement(c, truth.marginal(c).values + rng.normal(0, std, dom.project(c).shape), std) for c in CLIQUES]
    return dom, truth, meas


def _tvd(p: np.ndarray, q: np.ndarray) -> float:
    return 0.5 * float(np.abs(p / p.sum() - q / q.sum()).sum())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_convergence_stop_ends_early_at_the_fit_the_full_budget_reaches(seed):
    dom, truth, meas = _noisy(seed)
    full = estimate(dom, meas, total=2000.0, iters=3000, tol=0.0)   # to the end (line search bottoms out) or 3000
    stop = estimate(dom, meas, total=2000.0, iters=3000, tol=0.0, atol=0.5)
    assert stop.iterations < 0.8 * full.iterations
    # what was left to gain is below atol, so the measured marginals are within √(2 atol) = 1 noise std of the
    # full fit's, in quadrature over all measured cells
    assert stop.losses[-1] - full.losses[-1] <= 0.5
    dist = np.sqrt(sum((((stop.model.marginal(m.attributes).values - full.model.marginal(m.attributes).values)
                         / m.std) ** 2).sum() for m in meas))
    assert dist <= 1.0
    # and the tables are as close to the truth: every 2- and 3-way marginal's TVD within 0.002 of the full fit's
    for attrs_ in CLIQUES + [("a", "b", "c"), ("b", "d", "e"), ("a", "c", "e")]:
        t = truth.marginal(attrs_).values
        assert abs(_tvd(stop.model.marginal(attrs_).values, t) - _tvd(full.model.marginal(attrs_).values, t)) < 2e-3


def test_convergence_stop_off_by_default_and_checked():
    dom, _, meas = _noisy(0, std=20.0)
    assert estimate(dom, meas, total=2000.0, iters=300, tol=0.0).iterations == 300
    assert estimate(dom, meas, total=2000.0, iters=300, tol=0.0, atol=0.5).iterations < 100
    for bad in ({"atol": -1.0}, {"atol": 0.5, "window": 0}):
        with pytest.raises(ConfigError, match="atol"):
            estimate(dom, meas, iters=10, **bad)


def _ill_conditioned(seed: int):
    """Measurements whose noise stds span two orders of magnitude: mirror descent's step is set by the precise
    ones, so the loose ones converge slowly."""
    cl = [("a", "b", "c"), ("c", "d"), ("d", "e", "f"), ("a", "f"), ("b", "e")]
    dom = Domain(list("abcdef"), [4, 5, 3, 6, 4, 5])
    tree = build_junction_tree(dom, cl)
    rng = np.random.default_rng(seed)
    truth = GraphicalModel(tree, [rng.normal(0, 1.5, dom.project(c).shape) for c in tree.cliques], 20000.0)
    stds = [1.0, 30.0, 3.0, 100.0, 10.0]
    return dom, [Measurement(c, truth.marginal(c).values + rng.normal(0, s, dom.project(c).shape), s)
                 for c, s in zip(cl, stds)]


@pytest.mark.parametrize("seed", [0, 1])
def test_acceleration_reaches_a_lower_loss_for_the_same_propagations(monkeypatch, seed):
    import vertisynth.pgm.calibrator as calibrator

    count = [0]
    real = calibrator.Calibrator.marginals
    monkeypatch.setattr(calibrator.Calibrator, "marginals", lambda self, *a: count.__setitem__(0, count[0] + 1) or real(self, *a))
    dom, meas = _ill_conditioned(seed)
    plain = estimate(dom, meas, total=20000.0, iters=400, tol=0.0)
    props_plain, count[0] = count[0], 0
    fast = estimate(dom, meas, total=20000.0, iters=200, tol=0.0, accelerate=True)   # two propagations a step
    assert count[0] <= props_plain * 1.05
    assert fast.losses[-1] < 0.5 * plain.losses[-1]
    assert all(b <= a for a, b in zip(fast.losses, fast.losses[1:]))   # restarts keep every accepted step downhill
    # with the stop: ends by itself, lower than 5000 plain steps
    longer = estimate(dom, meas, total=20000.0, iters=5000, tol=0.0, accelerate=True, atol=1e-3 * 300)
    assert longer.iterations < 5000 and longer.losses[-1] < estimate(dom, meas, total=20000.0, iters=5000, tol=0.0).losses[-1]


@pytest.mark.parametrize("accelerate", [False, True])
def test_a_warm_start_with_a_collapsed_step_is_not_taken_for_convergence(accelerate):
    """VertiMRF's OptMRF warm-starts from InitMRF's model and step; InitMRF starts at its optimum, where the line
    search only halves η: with momentum the inherited η was ~1e-9, five tiny steps made no relative progress and
    the small-progress stop ended OptMRF at its start (a strong cross-party pair came out independent). Now a fit
    whose loss is already below atol stops before any step (η untouched), and the ramp's small steps are not taken
    for convergence."""
    dom, truth, meas = _noisy(0)
    local = [Measurement(m.attributes, truth.marginal(m.attributes).values, m.std) for m in meas[:2]]
    start = estimate(dom, local, total=2000.0, iters=2000, tol=0.0, extra_cliques=CLIQUES)   # "the local models"
    first = estimate(dom, local, total=2000.0, iters=300, tol=1e-7, warm_start=start.model, atol=0.5,
                     accelerate=accelerate)   # InitMRF: its start is its optimum
    assert first.iterations == 0 and first.step == pytest.approx(1 / 2000.0)
    for step in (first.step, 1e-12):   # the inherited step; and one as collapsed as the stalled fit's (old: 5 steps)
        fit = estimate(dom, meas, total=2000.0, iters=300, tol=1e-7, warm_start=start.model, step=step,
                       atol=0.5, accelerate=accelerate)
        full = estimate(dom, meas, total=2000.0, iters=3000, tol=0.0)
        assert fit.losses[-1] - full.losses[-1] <= 1.0, (step, fit.iterations, fit.losses[0], fit.losses[-1])


@pytest.mark.parametrize("seed", [0, 1])
def test_auto_acceleration_is_plain_descent_where_that_converges_in_its_budget(seed):
    """accelerate="auto": where plain descent reaches the atol stop within `iters`, the fit is plain descent's,
    bit for bit (its early stop is kept: at the same loss it scored better than momentum on NLTCS, docs/speed.md);
    where plain descent would be cut off by `iters` far from the stop, momentum takes over and gets lower."""
    dom, _, meas = _noisy(seed)
    plain = estimate(dom, meas, total=2000.0, iters=3000, tol=0.0, atol=0.5)
    auto = estimate(dom, meas, total=2000.0, iters=3000, tol=0.0, atol=0.5, accelerate="auto")
    assert plain.iterations < 3000 and auto.iterations == plain.iterations
    assert np.array_equal(auto.phi, plain.phi) and auto.losses == plain.losses
    dom, meas = _ill_conditioned(seed)   # the loose measurements converge slowly: 400 plain steps are far from it
    plain = estimate(dom, meas, total=20000.0, iters=400, tol=0.0, atol=1e-3 * 300)
    auto = estimate(dom, meas, total=20000.0, iters=400, tol=0.0, atol=1e-3 * 300, accelerate="auto")
    assert plain.iterations == 400
    assert auto.losses[:101] == plain.losses[:101]   # plain steps until a quarter of the budget
    assert auto.losses[-1] < 0.5 * plain.losses[-1]


def test_auto_acceleration_needs_the_stop():
    dom, _, meas = _noisy(0)
    for bad in ({"accelerate": "auto"}, {"accelerate": "yes", "atol": 0.5}, {"accelerate": 1, "atol": 0.5}):
        with pytest.raises(ConfigError, match="accelerate"):
            estimate(dom, meas, iters=10, **bad)


@pytest.mark.parametrize("accelerate", [False, True])
def test_a_step_whose_loss_is_not_finite_is_never_accepted(monkeypatch, accelerate):
    """A trial step whose marginals come back NaN (a propagation gone numerically wrong) used to be accepted once the
    line search bottomed out (NaN > loss is False), leaving a NaN model that sampled a normal-looking table. It is
    rejected now: the fit keeps its last finite iterate."""
    from vertisynth.pgm.calibrator import Calibrator

    dom, _, meas = _noisy(0)
    real = Calibrator.marginals
    calls = {"n": 0}

    def breaks_after_a_few_steps(self, phi, total):
        calls["n"] += 1
        mu = real(self, phi, total)
        return mu if calls["n"] <= 6 else np.full_like(mu, np.nan)

    monkeypatch.setattr(Calibrator, "marginals", breaks_after_a_few_steps)
    res = estimate(dom, meas, total=2000.0, iters=50, accelerate=accelerate)
    assert all(np.isfinite(res.losses)) and np.all(np.isfinite(res.phi))
    assert all(np.all(np.isfinite(t)) for t in res.model.theta)
    assert res.losses[-1] < res.losses[0]   # the finite steps taken before are kept


def test_a_fit_whose_start_is_not_finite_is_refused_in_one_line(monkeypatch):
    from vertisynth.core.errors import EstimationError
    from vertisynth.pgm.calibrator import Calibrator

    dom, _, meas = _noisy(0)
    monkeypatch.setattr(Calibrator, "marginals", lambda self, phi, total: np.full(self.M, np.nan))
    with pytest.raises(EstimationError, match="loss is nan at its start"):
        estimate(dom, meas, total=2000.0, iters=10)


def test_a_model_with_nan_potentials_is_refused_at_sampling():
    from vertisynth.core.errors import EstimationError

    dom, truth, _ = _noisy(0)
    broken = truth.with_potentials([np.full_like(t, np.nan) for t in truth.theta], truth.total)
    with pytest.raises(EstimationError, match="NaN or infinite"):
        broken.sample(10, np.random.default_rng(0))
    truth.sample(10, np.random.default_rng(0))   # a finite model samples as before


def test_beliefs_of_cliques_that_disagree_by_more_than_exp_700_are_computed_not_nan():
    """Two cliques whose potentials put their mass on different values of the shared attribute, each by e^800:
    every product of the shifted potentials underflows to 0, and 0/0 gave NaN beliefs, which sampled a
    normal-looking table (seen in a vertical aim run on NLTCS). Computed in log space instead: b is uniform."""
    from vertisynth.core.domain import Domain
    from vertisynth.pgm import GraphicalModel, build_junction_tree

    dom = Domain(["a", "b", "c"], [2, 2, 2])
    tree = build_junction_tree(dom, [("a", "b"), ("b", "c")])
    theta = []
    for clique in tree.cliques:
        t = np.zeros(dom.project(clique).shape)
        axis = list(clique).index("b")
        favoured = 0 if "a" in clique else 1      # (a, b) favours b = 0, (b, c) favours b = 1
        idx = [slice(None)] * t.ndim
        idx[axis] = 1 - favoured
        t[tuple(idx)] = -800.0
        theta.append(t)
    model = GraphicalModel(tree, theta, 1000.0)
    b = model.marginal(("b",)).values
    assert np.all(np.isfinite(b)) and np.allclose(b, [500.0, 500.0])
    table = model.sample(1000, np.random.default_rng(0))
    assert table.n == 1000
