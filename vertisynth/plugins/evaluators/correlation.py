"""`correlation`: how well pairwise associations survive synthesis.

For every attribute pair (a, b): Cramér's V = sqrt(χ²/n / (min(r, c) − 1)), with r, c the numbers of
values observed in a and b, and normalised mutual information NMI = I(a; b) / min(H(a), H(b)); both are
0 when an attribute is constant in the table. The scores are the mean and max |V_real − V_synth| over pairs
and the mean |NMI_real − NMI_synth|, all in [0, 1]. `write_artifacts` saves a heatmap of the real and
synthetic Cramér's V matrices and their absolute difference (correlation_heatmap.png).
"""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from vertisynth.core.dataset import Dataset
from vertisynth.core.errors import DataError
from vertisynth.core.interfaces import Evaluator, PlanContext


@attrs.frozen
class CorrelationConfig:
    heatmap: bool = True


def pair_association(table: np.ndarray) -> tuple[float, float]:
    """(Cramér's V, normalised MI) of a 2-way contingency table of counts."""
    p = table / table.sum()
    pa, pb = p.sum(1), p.sum(0)
    r, c = int((pa > 0).sum()), int((pb > 0).sum())
    if min(r, c) < 2:
        return 0.0, 0.0
    expected = np.outer(pa, pb)
    nz = expected > 0
    phi2 = float((((p - expected) ** 2)[nz] / expected[nz]).sum())
    v = min(1.0, np.sqrt(phi2 / (min(r, c) - 1)))
    joint = p > 0
    mi = float((p[joint] * np.log(p[joint] / expected[joint])).sum())
    h = min(-float((pa[pa > 0] * np.log(pa[pa > 0])).sum()), -float((pb[pb > 0] * np.log(pb[pb > 0])).sum()))
    return float(v), float(np.clip(mi / h, 0.0, 1.0))


def association_matrices(data: Dataset) -> tuple[np.ndarray, np.ndarray]:
    d = len(data.domain.attributes)
    v, nmi = np.eye(d), np.eye(d)
    shape = data.domain.shape
    # a Dataset's columns once, contiguous (a column of the row-major codes is a strided read, and `counts` builds
    # a Factor and a sub-domain per pair): the same integer counts, so the same scores; the HTML report scores
    # two tables, ≈ 0.02 CPU s each on the default job's. A counts-only table (core/chunks.py) is asked.
    cols = np.ascontiguousarray(data.codes.T) if isinstance(data, Dataset) else None
    for i, j in itertools.combinations(range(d), 2):
        if cols is None:
            table = data.counts((data.domain.attributes[i], data.domain.attributes[j])).values
        else:
            flat = cols[i].astype(np.int64)
            flat *= shape[j]
            flat += cols[j]
            table = np.bincount(flat, minlength=shape[i] * shape[j]).astype(float).reshape(shape[i], shape[j])
        v[i, j], nmi[i, j] = pair_association(table)
        v[j, i], nmi[j, i] = v[i, j], nmi[i, j]
    return v, nmi


class Correlation(Evaluator):
    prefers_holdout = True

    def __init__(self, config: CorrelationConfig | None = None) -> None:
        super().__init__(config or CorrelationConfig())
        self._last: dict[str, np.ndarray] | None = None

    def plan(self, ctx: PlanContext) -> list:
        return []

    def evaluate_counts(self, real: Any, synthetic: Any, rng: np.random.Generator) -> dict[str, float]:
        """EvaluatesCounts: only `counts`, `n` and `domain` are read."""
        return self.evaluate(real, synthetic, rng)

    def association_matrices(self, data: Dataset) -> tuple[np.ndarray, np.ndarray]:
        """The Cramér's V and NMI matrices it scores (MeasuresAssociation: the HTML report's heatmaps)."""
        return association_matrices(data)

    def evaluate(self, real: Dataset, synthetic: Dataset, rng: np.random.Generator) -> dict[str, float]:
        if real.domain.attributes != synthetic.domain.attributes or real.domain.shape != synthetic.domain.shape:
            raise DataError("correlation: real and synthetic tables have different domains")
        if real.n == 0 or synthetic.n == 0:
            raise DataError("correlation: a table is empty")
        if len(real.domain.attributes) < 2:
            raise DataError("correlation: needs at least two attributes")
        v_real, nmi_real = association_matrices(real)
        v_syn, nmi_syn = association_matrices(synthetic)
        upper = np.triu_indices(len(real.domain.attributes), 1)
        dv, dmi = np.abs(v_real - v_syn)[upper], np.abs(nmi_real - nmi_syn)[upper]
        self._last = {"real": v_real, "synthetic": v_syn, "names": np.array(real.domain.attributes)}
        return {"cramers_v_mean_abs_diff": float(dv.mean()), "cramers_v_max_abs_diff": float(dv.max()),
                "nmi_mean_abs_diff": float(dmi.mean())}

    def write_artifacts(self, out: Path) -> list[str]:
        if not self.config.heatmap or self._last is None:
            return []
        import matplotlib.pyplot as plt

        fig = self.heatmap_figure()
        path = Path(out) / "correlation_heatmap.png"
        fig.savefig(path, dpi=100, bbox_inches="tight")
        plt.close(fig)
        return [path.name]

    def heatmap_figure(self):
        """The real, synthetic and |difference| Cramér's V matrices side by side (after `evaluate`)."""
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        names = list(self._last["names"])
        mats = [("real", self._last["real"]), ("synthetic", self._last["synthetic"]),
                ("|real − synthetic|", np.abs(self._last["real"] - self._last["synthetic"]))]
        size = max(4.0, 0.35 * len(names))
        # the three matrices share one attribute order: name the rows once, on the left panel, and let the
        # constrained layout keep the tick labels out of the neighbouring panel
        fig, axes = plt.subplots(1, 3, figsize=(3 * size + 2, size + 1), sharey=True, layout="constrained")
        for i, (ax, (title, m)) in enumerate(zip(axes, mats)):
            im = ax.imshow(m, vmin=0, vmax=1, cmap="viridis")
            ax.set_title(f"Cramér's V: {title}")
            ax.set_xticks(range(len(names)), names, rotation=90, fontsize=7)
            ax.set_yticks(range(len(names)), names, fontsize=7)
            ax.tick_params(axis="y", labelleft=i == 0)
        fig.colorbar(im, ax=axes, shrink=0.8)
        return fig
