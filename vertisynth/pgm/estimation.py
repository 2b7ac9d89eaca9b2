"""Private-PGM estimation (McKenna, Sheldon, Miklau 2019): fit a graphical model to noisy marginals.

Loss (weighted L2, in counts):  L(μ) = ½ Σ_m ‖(μ_m − y_m) / σ_m‖²,  μ_m the model's marginal on the
measured attributes, y_m the noisy measurement, σ_m its noise std (so a noisier measurement weighs less;
callers pass the real per-measurement error, e.g. an encoder's estimated variance).
Mirror descent on the log-potentials: θ_C ← θ_C − η ∇_{μ_C} L, where ∇_{μ_C} L is the sum, over the
measurements assigned to clique C, of (μ_m − y_m)/σ_m² broadcast onto C. The step η is chosen by an
Armijo backtracking line search (accept when L(θ) − L(θ') ≥ ½ ⟨∇L, μ − μ'⟩, else halve η), so the loss
never increases. After an accepted step η doubles until the first backtrack, then grows by `growth`
(default 1.05): each trial step costs one belief propagation, and a gentle growth keeps the rejected
trials rare (~7% of steps; growth 1.5 rejected ~37%) at about the same loss per iteration.
Only the measurement-shaped tables φ_m are stored (θ_C = base_C + Σ_m φ_m, see calibrator.py), and
an accepted trial's marginals are the next step's, so a step with no backtrack costs exactly one
propagation. Stops after `iters` steps, when the relative
decrease stays below `tol` for 5 steps, or (`atol`, off by default) when the loss left to gain is estimated below
`atol`: L is strongly convex in the measured marginals (Hessian diag(1/σ_m²)), so L(μ) − L* ≤ atol puts them
within √(2 atol) noise stds of the optimum's, in quadrature over all measured cells (atol = 0.5: one std in all),
and mirror descent's O(1/k) rate, L_k − L* ≈ C/k, gives L_k − L* ≈ k (L_{k−K} − L_k) / K from the last K = `window`
accepted steps (an overestimate where convergence is linear, or O(1/k²) as with `accelerate`).
`accelerate` (off by default): Nesterov momentum on the log-potentials with adaptive restart (O'Donoghue &
Candès 2015): each step starts from φ_k + k/(k+3) (φ_k − φ_{k−1}), the line search runs there, and a step that
would raise the loss is dropped and the momentum reset, at the step size φ had (the backtracks were the
extrapolated point's). Two propagations a step instead of one, but on ill-conditioned fits (VertiMRF on Adult) the
same loss in about a quarter of the propagations (docs/speed.md).
`accelerate = "auto"` (needs `atol`): plain steps while they are on course to converge within the budget; once
a quarter of `iters` (and `2 window`) steps are taken and the O(1/k) estimate says plain descent needs more than `iters` steps to get within
`atol` (k · gap / atol > iters, gap the window estimate above), momentum is switched on for the rest of the fit.
Plain descent stopped early keeps the fit near its start along the directions the measurements pin down least
(the noisiest), which momentum fits sooner: at the same loss the plain fit scored better (docs/speed.md), so
momentum only takes over where the plain fit would be cut off by `iters` far from converged.
Warm starts (`atol` given): a fit whose loss is already <= atol stops before its first step (L* >= 0), so a start at
its optimum neither steps nor hands on a line search's collapsed η; and while η is still doubling (before the first
backtrack) small relative progress is not counted towards the small-progress stop, which once ended a warm-started
fit at its start.
The total mass is n̂: given, or the inverse-variance weighted mean of the measurements' totals.

Centred measurements (`centred`, e.g. a release answer a vertical oracle made consistent with measured 1-ways):
the values' grand mean and the main effects of the centred attributes came from elsewhere, so their noise lives
in the rest, the span of P = I − Π_∅ − Σ_{a centred} Π_{a} (core/anova.py), of dimension
cells − (1 + Σ (u_a − 1)), and is correlated across cells there. The loss takes ½ (P r)ᵀ W (P r) with W each
cell's inverse variance per kept dimension, 1 / (v · cells / dims), v its `kept_variance` (the noise's part in
that span; the error of the 1-ways it was set to lies outside it) (the diagonal of σ² P is σ² dims / cells):
with equal v, generalised least squares with the pseudo-inverse of the noise covariance σ² P; its gradient is
P W P r, the residual centred along axes twice (no dense P). Weighting each cell by v alone, as independent noise,
would fit the main effects the answer no longer informs about, and count its kept noise cells / dims times over.

A measurement may be of a coarsened marginal: `bins` maps some of its attributes' values to bins, and
`values` then holds the counts per bin (a linear query Q μ_m, Q summing the cells of each bin). Its
gradient is the bin residual copied back onto every cell of the bin (Qᵀ). VertiMRF uses this to fit
cross-party estimates made on binned attributes without assuming anything about values inside a bin.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import lru_cache

import attrs
import numpy as np
from threadpoolctl import ThreadpoolController

from vertisynth.core import progress
from vertisynth.core.anova import remove_main_effects
from vertisynth.core.domain import Domain
from vertisynth.core.errors import ConfigError, DomainError, EstimationError

from .graph import DEFAULT_MAX_CELLS, build_junction_tree
from .calibrator import Calibrator
from .model import GraphicalModel


@attrs.frozen(eq=False)
class Measurement:
    """A noisy marginal: counts on `attributes` (axes in that order) with noise std `std`."""

    attributes: tuple[str, ...] = attrs.field(converter=tuple)
    values: np.ndarray = attrs.field(converter=lambda v: np.asarray(v, float))
    std: float = 1.0
    bins: dict[str, np.ndarray] | None = None   # attribute -> bin index of each of its values
    # per-cell noise variance (the shape of `values`), where cells differ (a sketch estimator's); None: std² each.
    # Estimation weights each cell by its inverse; `std` stays the scalar summary that scores read.
    variance: np.ndarray | None = None
    # attributes whose main effects (and the grand mean) the values were made consistent with (a release answer
    # adjusted to measured 1-ways): its noise lives off them, so estimation fits the residual's projection there
    # alone, each cell at its variance per remaining dimension (module docstring, "Centred measurements")
    centred: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    # centred only: each cell's variance of the noise left off those effects (the values' shape), what the fit
    # weighs; None: `variance` (or std²). `variance` and `std` stay each cell's whole error, which scores read
    kept_variance: np.ndarray | None = None

    def __attrs_post_init__(self) -> None:
        if not self.std > 0:
            raise ConfigError(f"measurement on {list(self.attributes)}: std must be positive, got {self.std}")
        if not np.all(np.isfinite(self.values)):
            raise ConfigError(f"measurement on {list(self.attributes)} has NaN or inf values")
        if self.variance is not None:
            v = np.asarray(self.variance, float)
            if v.shape != self.values.shape or not np.all(np.isfinite(v)) or not np.all(v > 0):
                raise ConfigError(f"measurement on {list(self.attributes)}: a per-cell variance must be positive and "
                                  f"finite, of the values' shape {self.values.shape}")
            object.__setattr__(self, "variance", v)
        if self.centred:
            if not set(self.centred) <= set(self.attributes) or len(set(self.centred)) != len(self.centred):
                raise ConfigError(f"measurement on {list(self.attributes)}: centred on {list(self.centred)}, which "
                                  "must be distinct measured attributes")
            if self.values.ndim != len(self.attributes) or kept_dimensions(self) < 1:
                raise ConfigError(f"measurement on {list(self.attributes)}: centred on {list(self.centred)}, nothing "
                                  f"of its {self.values.size} cells is left to inform the fit")
        if self.kept_variance is not None:
            k = np.asarray(self.kept_variance, float)
            if not self.centred or k.shape != self.values.shape or not np.all(np.isfinite(k)) or not np.all(k > 0):
                raise ConfigError(f"measurement on {list(self.attributes)}: a kept variance is for a centred "
                                  f"measurement, positive and finite, of the values' shape {self.values.shape}")
            object.__setattr__(self, "kept_variance", k)
        for a, b in (self.bins or {}).items():
            if a not in self.attributes:
                raise ConfigError(f"measurement on {list(self.attributes)}: bins given for {a!r}, not measured")
            b = np.asarray(b)
            if b.ndim != 1 or b.dtype.kind not in "iu" or (b.size and (b.min() < 0 or set(np.unique(b)) != set(range(b.max() + 1)))):
                raise ConfigError(f"measurement on {list(self.attributes)}: bins of {a!r} must map values onto 0..k-1, "
                                  "every bin used")

    def shape_in(self, domain: Domain) -> tuple[int, ...]:
        """The shape `values` must have: the attributes' sizes, or their bin counts where binned."""
        bins = self.bins or {}
        return tuple(int(np.max(bins[a])) + 1 if a in bins else domain.size(a) for a in self.attributes)

    def project(self, counts: np.ndarray) -> np.ndarray:
        """The measured query on a full table over `attributes` (axes in that order): bin sums where binned."""
        return bin_query(counts, self.attributes, self.bins)


def kept_dimensions(m: Measurement) -> int:
    """The dimension of the space a centred measurement's noise lives in: its cells less the grand mean and the
    centred attributes' main effects (1 + Σ (u − 1), u each one's values or bins)."""
    axes = [m.attributes.index(a) for a in m.centred]
    return int(m.values.size - (1 + sum(m.values.shape[i] - 1 for i in axes))) if axes else int(m.values.size)


def bin_query(counts: np.ndarray, attributes: Sequence[str], bins: dict[str, np.ndarray] | None) -> np.ndarray:
    """A full table over `attributes` summed into bins along every binned attribute's axis."""
    for axis, a in enumerate(attributes):
        if bins and a in bins:
            counts = bin_sum(counts, axis, np.asarray(bins[a]))
    return counts


def bin_sum(x: np.ndarray, axis: int, bin_of: np.ndarray) -> np.ndarray:
    """Sum the cells of `x` along `axis` into bins (`bin_of[v]` is the bin of value v)."""
    onehot = np.zeros((len(bin_of), int(bin_of.max()) + 1))
    onehot[np.arange(len(bin_of)), bin_of] = 1.0
    return np.moveaxis(np.tensordot(x, onehot, axes=([axis], [0])), -1, axis)


def _query_rows(m: Measurement, kept: tuple[str, ...], domain: Domain) -> tuple[np.ndarray, int]:
    """The query Q summing the cells of a measurement's full table (axes in `kept` order) into its bins, as each
    cell's bin (flat) and the number of bins (unbinned: every cell its own)."""
    full = tuple(domain.size(a) for a in kept)
    if not m.bins:
        return np.arange(int(np.prod(full)), dtype=np.intp), int(np.prod(full))
    coords = np.unravel_index(np.arange(int(np.prod(full))), full)
    bshape = tuple(int(np.max(m.bins[a])) + 1 if a in m.bins else n for a, n in zip(kept, full))
    rows = np.ravel_multi_index(tuple(np.asarray(m.bins[a])[c] if a in m.bins else c for a, c in zip(kept, coords)),
                                bshape)
    return rows.astype(np.intp), int(np.prod(bshape))


@attrs.define
class EstimationResult:
    model: GraphicalModel
    losses: list[float]
    iterations: int
    seconds: float
    step: float = 0.0  # the last accepted step size η (a re-estimate can start from it)
    # the fitted measurement-shaped log-potentials φ (one block per measurement, in order, each in the domain's
    # attribute order): a re-estimate on these measurements plus new ones can start from them (`phi0`)
    phi: np.ndarray | None = None


def _total(measurements: Sequence[Measurement]) -> float:
    # a centred measurement's total is not information (it was set from the 1-ways it was made consistent with)
    measurements = [m for m in measurements if not m.centred] or measurements
    tot = np.array([m.values.sum() for m in measurements])
    w = np.array([1.0 / (m.std**2 * m.values.size) for m in measurements])
    return float(max(np.average(tot, weights=w), 1.0))


@lru_cache(maxsize=1)
def blas_threads() -> ThreadpoolController:
    """The BLAS libraries numpy and scipy loaded (scanned once, after both are imported)."""
    return ThreadpoolController()


def estimate(domain: Domain, measurements: Sequence[Measurement], total: float | None = None, iters: int = 1000,
             warm_start: GraphicalModel | None = None, max_cells: float = DEFAULT_MAX_CELLS, tol: float = 1e-7,
             extra_cliques: Sequence[Sequence[str]] = (),
             callback: Callable[[int, float], None] | None = None, growth: float = 1.05,
             step: float | None = None, phi0: np.ndarray | None = None, atol: float | None = None,
             window: int = 50, accelerate: bool | str = False) -> EstimationResult:
    """Fit a GraphicalModel to noisy marginal measurements by mirror descent with Armijo line search.
    `step`: the initial step size η (default 1/total, doubled until the first backtrack); a re-estimate
    warm-started from an earlier result can pass that result's `step`.
    `phi0`: an earlier result's `phi` on the first measurements of this list (the rest start at zero): a warm
    start that holds on any junction tree, since φ is measurement-shaped (AIM adds a measurement per round).
    `atol`, `window`: the convergence stop of the module docstring (None: only `iters` and `tol`);
    `accelerate`: momentum with restarts, True, False or "auto" (module docstring)."""
    if atol is not None and not (atol >= 0 and isinstance(window, int) and window >= 1):
        raise ConfigError(f"estimation: atol must be >= 0 and window a positive integer, got {atol!r}, {window!r}")
    if not (isinstance(accelerate, bool) or accelerate == "auto") or (accelerate == "auto" and atol is None):
        raise ConfigError(f"estimation: accelerate must be true, false or 'auto' (with atol), got {accelerate!r}")
    # BLAS on one thread: the loop's BLAS calls (dot products over the measurement cells, matrix-vector sums
    # in the calibrator) are short and memory-bound, and once a vector passes OpenBLAS's threading threshold
    # (~10k cells) its worker threads spin between calls: 5x the CPU per step and no faster (docs/scale.md)
    with blas_threads().limit(limits=1, user_api="blas"):
        return _estimate(domain, measurements, total, iters, warm_start, max_cells, tol, extra_cliques, callback,
                         growth, step, phi0, atol, window, accelerate)


def _estimate(domain: Domain, measurements: Sequence[Measurement], total: float | None, iters: int,
              warm_start: GraphicalModel | None, max_cells: float, tol: float, extra_cliques: Sequence[Sequence[str]],
              callback: Callable[[int, float], None] | None, growth: float, step: float | None,
              phi0: np.ndarray | None = None, atol: float | None = None, window: int = 50,
              accelerate: bool | str = False) -> EstimationResult:
    if not growth >= 1.0:
        raise ConfigError(f"step growth must be >= 1, got {growth}")
    if not measurements:
        raise ConfigError("estimation needs at least one measurement")
    for m in measurements:
        shape = m.shape_in(domain)
        for a in m.bins or {}:
            if len(m.bins[a]) != domain.size(a):
                raise DomainError(f"measurement on {list(m.attributes)}: bins of {a!r} cover {len(m.bins[a])} values, "
                                  f"the domain has {domain.size(a)}")
        if m.values.shape != shape:
            raise DomainError(f"measurement on {list(m.attributes)} has shape {m.values.shape}, expected {shape}")
    t0 = time.perf_counter()
    total = _total(measurements) if total is None else float(total)
    if warm_start is not None:
        model = GraphicalModel(warm_start.tree, warm_start.theta, total)
        needed = [m.attributes for m in measurements if model.tree.clique_for(m.attributes) is None]
        if needed:
            raise ConfigError(f"warm start model has no clique for measurements {needed}; re-estimate from scratch")
    else:
        tree = build_junction_tree(domain, [m.attributes for m in measurements] + [tuple(c) for c in extra_cliques],
                                   max_cells)
        model = GraphicalModel(tree, None, total)
    cliques = model.tree.cliques
    assign = [model.tree.clique_for(m.attributes) for m in measurements]
    # each measurement in its clique's axis order (the calibrator's convention), flattened and concatenated
    scopes, ys, ws = [], [], []
    # centred measurements: (offset, shape in clique order, axes centred) of each, in measurement space
    centred: list[tuple[int, tuple[int, ...], tuple[int, ...]]] = []
    offset = 0
    for m, ci in zip(measurements, assign):
        kept = tuple(a for a in cliques[ci] if a in m.attributes)
        order = [m.attributes.index(a) for a in kept]
        y = m.values if kept == m.attributes else np.transpose(m.values, order)
        scopes.append(kept)
        ys.append(y.ravel())
        var = m.kept_variance if m.kept_variance is not None else m.variance
        if var is None:
            wm = np.full(y.size, 1.0 / m.std**2)
        else:   # each cell by its own variance
            wm = 1.0 / (var if kept == m.attributes else np.transpose(var, order)).ravel()
        if m.centred:   # a cell's kept variance spread over the kept dimensions: per dimension, v · cells / dims
            wm = wm * (kept_dimensions(m) / y.size)
            centred.append((offset, y.shape, tuple(kept.index(a) for a in m.centred)))
        ws.append(wm)
        offset += y.size
    y, w = np.concatenate(ys), np.concatenate(ws)
    # binned measurements see Q μ; the gradient in measurement space is Qᵀ w (Q μ − y). Q is the identity
    # (and skipped) when nothing is binned. Q μ is a bincount of the cells into their bins and Qᵀ g a gather (each cell is in one bin): the sums of the
    # sparse product Q μ in its order (each bin's cells ascending, from 0), without scipy.sparse
    bin_of, n_bins = None, 0
    if any(m.bins for m in measurements):
        parts = []
        for m, kept in zip(measurements, scopes):
            rows, nb = _query_rows(m, kept, domain)
            parts.append(rows + n_bins)
            n_bins += nb
        bin_of = np.concatenate(parts)
    base = model.theta if warm_start is not None else None
    cal = Calibrator(model.tree, scopes, assign, base)
    # mirror descent in measurement space: the gradient on clique C is a sum of measurement-shaped
    # tables broadcast onto C, so the log-potentials stay θ_C = base_C + Σ_m φ_m and only φ is stored
    phi = np.zeros(cal.M)
    if phi0 is not None:
        phi0 = np.asarray(phi0, float).ravel()
        if phi0.size > cal.M or not np.all(np.isfinite(phi0)):
            raise ConfigError(f"phi0 has {phi0.size} values, more than the {cal.M} cells of the measurements (or "
                              "non-finite ones): pass an earlier result's phi on a prefix of these measurements")
        phi[:phi0.size] = phi0

    # the centred blocks grouped by (shape, axes), each group's cells as one index array: one batched centring
    # per group, not per measurement
    groups: dict[tuple[tuple[int, ...], tuple[int, ...]], list[int]] = {}
    for off, shape, axes in centred:
        groups.setdefault((shape, axes), []).append(off)
    blocks = [(shape, axes, np.asarray(offs)[:, None] + np.arange(int(np.prod(shape))))
              for (shape, axes), offs in groups.items()]

    def project(r: np.ndarray) -> np.ndarray:
        """P r: each centred measurement's block with its mean and centred main effects removed (in place)."""
        for shape, axes, idx in blocks:
            r[idx] = remove_main_effects(r[idx].reshape((len(idx),) + shape), axes, lead=1).reshape(idx.shape)
        return r

    def loss_and_grad(ph: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        mu = cal.marginals(ph, total)
        resid = (mu if bin_of is None else np.bincount(bin_of, mu, minlength=n_bins).astype(float, copy=False)) - y
        if centred:   # L = ½ (P r)ᵀ W (P r), ∇ = P W P r (P symmetric)
            resid = project(resid)
            g = w * resid
            return 0.5 * float(g @ resid), (project(g) if bin_of is None else project(g)[bin_of]), mu
        g = w * resid
        return 0.5 * float(g @ resid), (g if bin_of is None else g[bin_of]), mu

    loss, grad, mu = loss_and_grad(phi)
    if not np.isfinite(loss):
        raise EstimationError(f"estimation: the model's loss is {loss} at its start (a warm start or measurements "
                              "the calibrator cannot represent); refused rather than fitted")
    losses = [loss]
    eta = 1.0 / total if step is None or not step > 0 else float(step)
    small = 0
    ramp = True  # double the step until the first backtrack (at once if `step` was good), then grow it gently
    it = 0
    prev, momentum = phi, 0   # accelerate: the previous iterate and the steps since the last restart
    auto = accelerate == "auto"
    accelerate = accelerate is True
    for it in range(1, iters + 1):
        if atol is not None and loss <= atol:   # L* >= 0, so L − L* <= L <= atol: converged (e.g. a warm start
            it -= 1                             # at its optimum, whose line search would only shrink η)
            break
        eta_before, ramp_before = eta, ramp
        if momentum:
            start = phi + (momentum / (momentum + 3)) * (phi - prev)
            s_loss, s_grad, s_mu = loss_and_grad(start)
        else:
            start, s_loss, s_grad, s_mu = phi, loss, grad, mu
        while True:
            trial = start - eta * s_grad
            new_loss, new_grad, new_mu = loss_and_grad(trial)
            decrease = float(s_grad @ (s_mu - new_mu))
            # sufficient decrease: at least half of what the first-order model predicts
            if s_loss - new_loss >= 0.5 * decrease or eta < 1e-12 / total:
                break
            eta /= 2
            ramp = False
        if not new_loss <= loss:   # worse, or not finite (NaN compares false): never accepted
            if momentum:   # the momentum overshot: drop the step, restart from φ without it, at the step size
                momentum = 0   # φ had (the backtracks were the extrapolated point's, not φ's)
                eta, ramp = eta_before, ramp_before
                continue
            break  # the line search bottomed out: keep the current model
        rel = (loss - new_loss) / max(loss, 1e-300)
        prev = phi
        phi, loss, grad, mu = trial, new_loss, new_grad, new_mu
        momentum += accelerate
        losses.append(loss)
        if callback is not None:
            callback(it, loss)
        progress.step("mirror descent", it, iters)
        eta *= 2.0 if ramp else growth
        # with the atol stop on, small relative progress during the ramp says the step is still too small, not
        # that the fit has converged (a warm start's inherited step once ended OptMRF at its start)
        small = small + 1 if rel < tol and not (ramp and atol is not None) else 0
        if small >= 5:
            break
        k = len(losses) - 1   # accepted steps
        if atol is not None and k >= window:
            gap = (losses[k - window] - loss) * k / window
            if gap <= atol:
                break
            if auto and k >= max(2 * window, iters // 4) and k * gap > atol * iters:   # plain would not get there
                auto, accelerate = False, True
    model = model.with_potentials(cal.potentials(phi, base), total)
    if not all(np.all(t < np.inf) for t in model.theta):   # NaN or +inf (a -inf log-potential is a zero cell)
        raise EstimationError("estimation: the fitted model's potentials are NaN or infinite; refused rather than "
                              "sampled from")
    return EstimationResult(model, losses, it, time.perf_counter() - t0, eta, phi)
