"""Private-PGM estimation (McKenna, Sheldon, Miklau 2019): fit a graphical model to noisy marginals.

Loss (weighted L2, in counts):  L(μ) = ½ Σ_m ‖(μ_m − y_m) / σ_m‖²,  μ_m the model's marginal on the
measured attributes, y_m the noisy measurement, σ_m its noise std (so a noisier measurement weighs less;
callers pass the real per-measurement error, e.g. an encoder's estimated variance).
Mirror descent on the log-potentials: θ_C ← θ_C − η ∇_{μ_C} L, where ∇_{μ_C} L is the sum, over the
measurements assigned to clique C, of (μ_m − y_m)/σ_m² broadcast onto C. The step η is chosen by an
Armijo backtracking line search (accept when L(θ) − L(θ') ≥ ½ ⟨∇L, μ − μ'⟩, else halve η; grow it
after an accepted step), so the loss never increases. Stops after `iters` steps or when the relative
decrease stays below `tol` for 5 steps. The total mass is n̂: given, or the inverse-variance weighted
mean of the measurements' totals.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import attrs
import numpy as np

from vertisynth.core.domain import Domain
from vertisynth.core.errors import ConfigError, DomainError

from .graph import DEFAULT_MAX_CELLS, build_junction_tree
from .model import GraphicalModel, sum_out


@attrs.frozen(eq=False)
class Measurement:
    """A noisy marginal: counts on `attributes` (axes in that order) with noise std `std`."""

    attributes: tuple[str, ...] = attrs.field(converter=tuple)
    values: np.ndarray = attrs.field(converter=lambda v: np.asarray(v, float))
    std: float = 1.0

    def __attrs_post_init__(self) -> None:
        if not self.std > 0:
            raise ConfigError(f"measurement on {list(self.attributes)}: std must be positive, got {self.std}")
        if not np.all(np.isfinite(self.values)):
            raise ConfigError(f"measurement on {list(self.attributes)} has NaN or inf values")


@attrs.define
class EstimationResult:
    model: GraphicalModel
    losses: list[float]
    iterations: int
    seconds: float


FLAT_MIN_AXES = 8  # cliques with at least this many attributes use flat index maps (int32, 4 bytes a cell)
FLAT_MAX_CELLS = 2**22


def _flat_index(shape: tuple[int, ...], kept: list[int]) -> np.ndarray:
    """For every cell of a table of `shape` (C order), the flat index of its cell in the marginal on axes `kept`."""
    sub = [shape[i] for i in kept]
    strides = np.ones(len(sub), dtype=np.int64)
    for j in range(len(sub) - 2, -1, -1):
        strides[j] = strides[j + 1] * sub[j + 1]
    out = np.zeros(shape, dtype=np.int32)
    for j, axis in enumerate(kept):
        view = [1] * len(shape)
        view[axis] = shape[axis]
        out += (np.arange(shape[axis], dtype=np.int32) * np.int32(strides[j])).reshape(view)
    return out.ravel()


def _total(measurements: Sequence[Measurement]) -> float:
    tot = np.array([m.values.sum() for m in measurements])
    w = np.array([1.0 / (m.std**2 * m.values.size) for m in measurements])
    return float(max(np.average(tot, weights=w), 1.0))


def estimate(domain: Domain, measurements: Sequence[Measurement], total: float | None = None, iters: int = 1000,
             warm_start: GraphicalModel | None = None, max_cells: float = DEFAULT_MAX_CELLS, tol: float = 1e-7,
             extra_cliques: Sequence[Sequence[str]] = (),
             callback: Callable[[int, float], None] | None = None) -> EstimationResult:
    """Fit a GraphicalModel to noisy marginal measurements by mirror descent with Armijo line search."""
    if not measurements:
        raise ConfigError("estimation needs at least one measurement")
    for m in measurements:
        shape = domain.project(m.attributes).shape
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
    # per measurement, once: the clique axes to sum out, the target in clique axis order, the broadcast shape;
    # on cliques of many axes (where numpy walks small axes slowly) also a flat map clique cell → marginal cell,
    # so the marginal is one bincount and the gradient one gather
    prepared = []
    for m, ci in zip(measurements, assign):
        c = cliques[ci]
        drop = tuple(i for i, a in enumerate(c) if a not in m.attributes)
        kept = [a for a in c if a in m.attributes]
        y = m.values if tuple(kept) == m.attributes else np.transpose(m.values, [m.attributes.index(a) for a in kept])
        shape = [model.shapes[ci][i] if a in m.attributes else 1 for i, a in enumerate(c)]
        index = None
        if len(drop) > 1 and len(c) >= FLAT_MIN_AXES and model.tree.domain.project(c).size() <= FLAT_MAX_CELLS:
            index = _flat_index(model.shapes[ci], [i for i, a in enumerate(c) if a in m.attributes])
        prepared.append((ci, drop, y, shape, 1.0 / m.std**2, index))

    def loss_and_grad(mdl: GraphicalModel) -> tuple[float, list[np.ndarray], list[np.ndarray]]:
        mus = mdl.clique_counts()
        grads = [np.zeros_like(mu) for mu in mus]
        loss = 0.0
        for ci, drop, y, shape, w, index in prepared:
            if index is None:
                resid = sum_out(mus[ci], drop) - y
                grads[ci] += (w * resid).reshape(shape)
            else:
                resid = np.bincount(index, weights=mus[ci].ravel(), minlength=y.size).reshape(y.shape) - y
                grads[ci] += (w * resid).ravel()[index].reshape(grads[ci].shape)
            loss += 0.5 * w * float(np.vdot(resid, resid))
        return loss, grads, mus

    loss, grads, mus = loss_and_grad(model)
    losses = [loss]
    eta = 1.0 / total
    small = 0
    it = 0
    for it in range(1, iters + 1):
        theta = model.theta
        while True:
            trial = model.with_potentials([t - eta * g for t, g in zip(theta, grads)], total)
            new_loss, new_grads, new_mus = loss_and_grad(trial)
            decrease = sum(float((g * (mu - nmu)).sum()) for g, mu, nmu in zip(grads, mus, new_mus))
            # sufficient decrease: at least half of what the first-order model predicts
            if loss - new_loss >= 0.5 * decrease or eta < 1e-12 / total:
                break
            eta /= 2
        if new_loss > loss:  # the line search bottomed out: keep the current model
            break
        rel = (loss - new_loss) / max(loss, 1e-300)
        model, loss, grads, mus = trial, new_loss, new_grads, new_mus
        losses.append(loss)
        if callback is not None:
            callback(it, loss)
        eta *= 1.5
        small = small + 1 if rel < tol else 0
        if small >= 5:
            break
    return EstimationResult(model, losses, it, time.perf_counter() - t0)
