"""scikit-learn's CategoricalNB as a DP synthesizer: plan -> spend what was planned -> let sklearn post-process.

Privacy: one record changes each label x attribute table by one count (add/remove neighbours), so each of the
m tables gets Laplace noise of scale m/ε (ε/m each, basic composition: ε in all). Everything sklearn computes
afterwards reads the noisy tables only. The columns are joined in one place: a centralised comparison point
(declared "centralized", which the report states), not a vertical protocol.
"""
from __future__ import annotations

import attrs
import numpy as np

from vertisynth.api import (Charge, ConfigError, DataError, Dataset, PlanContext, PrivacyLedger, PureDP, Synthesizer,
                            VerticalData, laplace_mechanism)

STAGE = "synthesizer"


@attrs.frozen
class NaiveBayesConfig:
    """label: the attribute every other one is conditioned on (default: the last). alpha: sklearn's additive
    smoothing, applied to the noisy counts (post-processing)."""

    label: str | None = None
    alpha: float = 1.0

    def __attrs_post_init__(self) -> None:
        if not self.alpha > 0:
            raise ConfigError(f"nb_synth: alpha must be > 0, got {self.alpha}")


class NaiveBayesSynthesizer(Synthesizer):
    def __init__(self, config: NaiveBayesConfig | None = None) -> None:
        super().__init__(config or NaiveBayesConfig())
        self._models: dict[str, object] = {}

    def plan(self, ctx: PlanContext) -> list[Charge]:
        attrs_ = list(ctx.domain.attributes)
        label = self.config.label or attrs_[-1]
        if label not in attrs_:
            raise ConfigError(f"nb_synth: label {label!r} is not an attribute; attributes: {attrs_}")
        if len(attrs_) < 2:
            raise ConfigError("nb_synth: needs at least two attributes")
        self._domain, self._label = ctx.domain, label
        self._features = [a for a in attrs_ if a != label]
        self._eps = ctx.epsilon / len(self._features)
        self._charges = [Charge(STAGE, "laplace_2way", PureDP(self._eps), note=a) for a in self._features]
        return list(self._charges)   # fit spends these very objects

    def measure(self, table: Dataset, ledger: PrivacyLedger, rng: np.random.Generator) -> list[np.ndarray]:
        """The noisy label x attribute tables: the only step that reads data (what the privacy audit repeats)."""
        return [laplace_mechanism(self._label_first(table, a), charge, rng, ledger)
                for a, charge in zip(self._features, self._charges)]

    def _label_first(self, table: Dataset, a: str) -> np.ndarray:
        f = table.counts([self._label, a])
        return f.values if f.domain.attributes[0] == self._label else f.values.T

    def fit(self, data: VerticalData, ledger: PrivacyLedger, rng: np.random.Generator) -> None:
        from sklearn.naive_bayes import CategoricalNB

        noisy = self.measure(data.joined().project(self._domain.attributes), ledger, rng)
        k_label = self._domain.size(self._label)
        self._n_hat = max(1, int(round(float(np.mean([t.sum() for t in noisy])))))   # noisy n: mean of the totals
        prior = np.zeros(k_label)
        for a, table in zip(self._features, noisy):
            k = self._domain.size(a)
            weights = np.clip(table, 0, None)          # post-processing: negative noisy counts carry no weight
            y, x = np.divmod(np.arange(k_label * k), k)
            keep = weights.ravel() > 0
            if keep.sum() == 0 or len(np.unique(y[keep])) < 1:
                raise DataError(f"nb_synth: every noisy count of {self._label} x {a} is <= 0; raise epsilon")
            model = CategoricalNB(alpha=self.config.alpha, min_categories=[k], fit_prior=True)
            # sklearn sees only the public grid of cells and their noisy counts, never a record
            model.fit(x[keep, None], y[keep], sample_weight=weights.ravel()[keep])
            self._models[a] = model
            prior[model.classes_] += model.class_count_
        self._prior = (prior + self.config.alpha) / (prior + self.config.alpha).sum()

    def sample(self, n: int | None, rng: np.random.Generator) -> Dataset:
        if not self._models:
            raise DataError("nb_synth: fit() before sample()")
        n = self._n_hat if n is None else int(n)
        cols = {self._label: rng.choice(len(self._prior), size=n, p=self._prior)}
        for a, model in self._models.items():
            k = self._domain.size(a)
            probs = np.full((len(self._prior), k), 1.0 / k)    # a label value with no noisy mass: uniform
            probs[model.classes_] = np.exp(model.feature_log_prob_[0])
            cum = np.cumsum(probs, axis=1)[cols[self._label]]
            cols[a] = np.minimum((cum < rng.random(n)[:, None] * cum[:, -1:]).sum(axis=1), k - 1)
        return Dataset(np.column_stack([cols[a] for a in self._domain.attributes]).astype(np.int64), self._domain)
