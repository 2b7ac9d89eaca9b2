"""Centred measurements (`Measurement.centred`): a marginal made consistent with other measurements' 1-ways, whose
noise lives off its mean and those attributes' main effects. Estimation fits the residual's projection there (GLS
with the pseudo-inverse of the noise covariance); checked against a dense solve and, on correlated noise of known
covariance, against weighting each cell as if independent."""
import numpy as np
import pytest

from vertisynth.core.anova import remove_main_effects
from vertisynth.core.domain import Domain
from vertisynth.core.errors import ConfigError
from vertisynth.pgm import Measurement, estimate
from vertisynth.pgm.estimation import kept_dimensions

DOM = Domain(["a", "b"], [3, 4])
N = 20_000.0


def _truth() -> np.ndarray:
    rng = np.random.default_rng(7)
    p = rng.dirichlet(np.full(12, 4.0)).reshape(3, 4)
    return N * p


def _projector(shape: tuple[int, ...], axes: tuple[int, ...]) -> np.ndarray:
    """The dense P of remove_main_effects (columns: P applied to each unit table)."""
    eye = np.eye(int(np.prod(shape)))
    return np.stack([remove_main_effects(e.reshape(shape), axes).ravel() for e in eye], axis=1)


def _dense_gls(meas: list[tuple[np.ndarray, np.ndarray, np.ndarray]], total: float) -> np.ndarray:
    """argmin_x ½ Σ (Q x − y)ᵀ S (Q x − y) subject to Σ x = total, by its KKT system: (Q, y, S) per measurement."""
    k = 12
    h = sum(q.T @ s @ q for q, _, s in meas)
    g = sum(q.T @ s @ y for q, y, s in meas)
    kkt = np.zeros((k + 1, k + 1))
    kkt[:k, :k], kkt[:k, k], kkt[k, :k] = h, 1.0, 1.0
    return np.linalg.solve(kkt, np.concatenate([g, [total]]))[:k].reshape(3, 4)


def _draw(rng, truth, s1, sw, sr):
    """1-ways of a and b (iid noise s1), a pair measured with iid noise sw, and a release answer whose noise is
    P z (z iid sr², P off the mean and both main effects) made consistent with the noisy 1-ways (its slice sums
    set to theirs), as the vertical oracle does with a release answer."""
    ya = truth.sum(1) + rng.normal(0, s1, 3)
    yb = truth.sum(0) + rng.normal(0, s1, 4)
    yw = truth + rng.normal(0, sw, (3, 4))
    noise = remove_main_effects(rng.normal(0, sr, (3, 4)), (0, 1))
    # the table with the 1-ways' mean and main effects: x_ij = ya_i/4 + yb_j/3 − Σya/12 (Σya, Σyb differ by noise:
    # the mean of both totals), plus the truth's interaction and the noise
    inter = remove_main_effects(truth, (0, 1))
    tot = (ya.sum() + yb.sum()) / 2
    yr = ya[:, None] / 4 + yb[None, :] / 3 - tot / 12 + inter + noise
    return ya, yb, yw, yr


def test_centred_measurement_keeps_dimensions_and_refuses_what_informs_nothing():
    m = Measurement(("a", "b"), np.ones((3, 4)), 1.0, centred=("a", "b"))
    assert kept_dimensions(m) == 12 - 1 - 2 - 3
    assert kept_dimensions(Measurement(("a", "b"), np.ones((3, 4)), 1.0, centred=("b",))) == 12 - 1 - 3
    with pytest.raises(ConfigError, match="nothing"):
        Measurement(("a",), np.ones(3), 1.0, centred=("a",))
    with pytest.raises(ConfigError, match="kept variance is for a centred"):
        Measurement(("a", "b"), np.ones((3, 4)), 1.0, kept_variance=np.ones((3, 4)))
    with pytest.raises(ConfigError, match="kept variance is for a centred"):
        Measurement(("a", "b"), np.ones((3, 4)), 1.0, centred=("a",), kept_variance=np.ones((4, 3)))
    with pytest.raises(ConfigError, match="distinct measured"):
        Measurement(("a", "b"), np.ones((3, 4)), 1.0, centred=("c",))


def test_centred_fit_equals_a_dense_gls_solve_with_the_pseudo_inverse():
    truth = _truth()
    rng = np.random.default_rng(1)
    s1, sw, sr = 30.0, 60.0, 40.0
    ya, yb, yw, yr = _draw(rng, truth, s1, sw, sr)
    dims = 12 - 1 - 2 - 3
    v = sr**2 * dims / 12   # each cell's variance of P z (the diagonal of sr² P)
    yr2 = _draw(rng, truth, s1, sw, sr)[3]   # a second answer: two centred blocks of one shape, centred as a batch
    # `variance` is each cell's whole error (here with the 1-ways' part, outside the kept span); the fit weighs
    # the kept part alone
    meas = [Measurement(("a",), ya, s1), Measurement(("b",), yb, s1), Measurement(("a", "b"), yw, sw),
            Measurement(("a", "b"), yr, float(np.sqrt(v)), variance=np.full((3, 4), 3 * v), centred=("a", "b"),
                        kept_variance=np.full((3, 4), v))]
    fit = estimate(DOM, meas, total=N, iters=20_000, tol=1e-15).model.marginal(("a", "b")).values
    both = estimate(DOM, meas + [Measurement(("b", "a"), yr2.T, 1.0, variance=np.full((4, 3), 2 * v),
                                             centred=("b", "a"))], total=N, iters=20_000, tol=1e-15)
    qa = np.kron(np.eye(3), np.ones((1, 4)))
    qb = np.kron(np.ones((1, 3)), np.eye(4))
    p = _projector((3, 4), (0, 1))
    dense = _dense_gls([(qa, ya, np.eye(3) / s1**2), (qb, yb, np.eye(4) / s1**2),
                        (np.eye(12), yw.ravel(), np.eye(12) / sw**2),
                        (np.eye(12), yr.ravel(), np.linalg.pinv(sr**2 * p))], N)
    assert dense.min() > 0
    assert np.abs(fit - dense).max() < 0.05
    dense2 = _dense_gls([(qa, ya, np.eye(3) / s1**2), (qb, yb, np.eye(4) / s1**2),
                         (np.eye(12), yw.ravel(), np.eye(12) / sw**2),
                         (np.eye(12), yr.ravel(), np.linalg.pinv(sr**2 * p)),
                         (np.eye(12), yr2.ravel(), np.linalg.pinv(2 * sr**2 * p))], N)
    assert np.abs(both.model.marginal(("a", "b")).values - dense2).max() < 0.05
    # weighting each cell by its own variance (independent cells) is a different estimator: the test can tell
    old = estimate(DOM, meas[:3] + [Measurement(("a", "b"), yr, float(np.sqrt(v)), variance=np.full((3, 4), v))],
                   total=N, iters=20_000, tol=1e-15).model.marginal(("a", "b")).values
    assert np.abs(old - dense).max() > 1.0


def test_centred_fit_has_lower_error_than_per_cell_weighting_on_correlated_noise():
    truth = _truth()
    rng = np.random.default_rng(2)
    s1, sw, sr = 80.0, 40.0, 40.0
    dims = 12 - 1 - 2 - 3
    v = sr**2 * dims / 12
    err_new, err_old = [], []
    for _ in range(40):
        ya, yb, yw, yr = _draw(rng, truth, s1, sw, sr)
        base = [Measurement(("a",), ya, s1), Measurement(("b",), yb, s1), Measurement(("a", "b"), yw, sw)]
        new = estimate(DOM, base + [Measurement(("a", "b"), yr, float(np.sqrt(v)), variance=np.full((3, 4), v),
                                                centred=("a", "b"))], total=N, iters=3000, tol=1e-12)
        old = estimate(DOM, base + [Measurement(("a", "b"), yr, float(np.sqrt(v)), variance=np.full((3, 4), v))],
                       total=N, iters=3000, tol=1e-12)
        err_new.append(np.sum((new.model.marginal(("a", "b")).values - truth) ** 2))
        err_old.append(np.sum((old.model.marginal(("a", "b")).values - truth) ** 2))
    # expected squared errors (linear algebra, positivity aside): 9,143 for GLS, 11,116 for per-cell weighting,
    # which double-counts the noisy 1-ways in the release's main effects and takes its kept noise as 2x the
    # information it is (cells / dims = 2)
    assert np.mean(err_new) < 0.9 * np.mean(err_old)
    assert 0.75 * 9143 < np.mean(err_new) < 1.25 * 9143


def test_a_binned_centred_measurement_fits_and_every_other_path_is_unchanged():
    truth = _truth()
    rng = np.random.default_rng(3)
    ya, yb, yw, yr = _draw(rng, truth, 30.0, 60.0, 40.0)
    bins = {"b": np.array([0, 0, 1, 1])}
    yr_b = np.stack([yr[:, :2].sum(1), yr[:, 2:].sum(1)], axis=1)
    meas = [Measurement(("a",), ya, 30.0), Measurement(("b",), yb, 30.0), Measurement(("a", "b"), yw, 60.0)]
    res = estimate(DOM, meas + [Measurement(("a", "b"), yr_b, 50.0, bins, centred=("a", "b"))], total=N, iters=500)
    assert np.all(np.diff(res.losses) <= 1e-9 * res.losses[0])
    # without centred measurements the loss is the per-cell weighted one exactly
    plain = estimate(DOM, meas, total=N, iters=50)
    mu = plain.model.marginal(("a", "b")).values
    want = 0.5 * (np.sum((mu.sum(1) - ya) ** 2) / 900 + np.sum((mu.sum(0) - yb) ** 2) / 900
                  + np.sum((mu - yw) ** 2) / 3600)
    assert plain.losses[-1] == pytest.approx(want, rel=1e-9)
