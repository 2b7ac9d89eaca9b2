"""Machine-learning utility on a real holdout the synthesizer never saw.

`ml_utility` (seed 004, Table 1): logistic regression and a decision tree predict the label attribute
from the others (one-hot codes); each is trained once on the synthetic table and once on the real
training table, and both are tested on the holdout. Reported: accuracy and macro-F1 of each, and the
absolute gaps (real − synthetic). The models are scikit-learn's LogisticRegression(C=1) and
DecisionTreeClassifier(max_depth=10) written in numpy (models.py): the same objective and tree growth, without
scikit-learn's import (≈ 1.7 CPU s, most of it scipy.stats).
`svm_misclassification` (the VertiMRF paper's protocol, without its flaw: the reference trained on a fold
that included the test rows): StandardScaler + SVC trained on the synthetic table, tested on the holdout;
1 − accuracy, with the same model trained on real training data as the reference. SVC is quadratic in the
training size, so both sides train on at most `max_train` rows (sampled with the evaluator's generator).
"""
from __future__ import annotations

import attrs
import numpy as np

from vertisynth.core.dataset import Dataset
from vertisynth.core.errors import ConfigError, DataError
from vertisynth.core.interfaces import Evaluator, PlanContext


def _xy(data: Dataset, label: str, max_rows: int | None, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    if max_rows is not None and data.n > max_rows:
        data = data.take(np.sort(rng.choice(data.n, max_rows, replace=False)))
    j = data.domain.axes([label])[0]
    x = np.delete(data.codes, j, axis=1)
    return x, data.codes[:, j]


def _same_domains(name: str, *tables: Dataset) -> None:
    first = tables[0].domain
    for t in tables[1:]:
        if t.domain.attributes != first.attributes or t.domain.shape != first.shape:
            raise DataError(f"{name}: the tables have different domains ({first} vs {t.domain})")


def _check_label(label: str | None, ctx: PlanContext, name: str) -> str:
    label = label or ctx.domain.attributes[-1]
    if label not in ctx.domain:
        raise ConfigError(f"{name}: label attribute {label!r} is not in the data; attributes: {list(ctx.domain.attributes)}")
    return label


@attrs.frozen
class MLUtilityConfig:
    label: str | None = None  # default: the last attribute
    max_train: int = 20000

    def __attrs_post_init__(self) -> None:
        if self.max_train < 10:
            raise ConfigError("ml_utility: max_train must be >= 10")


class MLUtility(Evaluator):
    requires_holdout = True

    def __init__(self, config: MLUtilityConfig | None = None) -> None:
        super().__init__(config or MLUtilityConfig())

    def plan(self, ctx: PlanContext) -> list:
        self._label = _check_label(self.config.label, ctx, "ml_utility")
        return []

    def evaluate(self, real: Dataset, synthetic: Dataset, rng: np.random.Generator) -> dict[str, float]:
        """Called without a holdout (outside the pipeline, which requires one): tests on `real` itself, so
        the real-trained reference is scored in-sample."""
        return self.evaluate_holdout(real, real, synthetic, rng)

    def evaluate_holdout(self, train: Dataset, holdout: Dataset, synthetic: Dataset,
                         rng: np.random.Generator) -> dict[str, float]:
        from vertisynth.plugins.evaluators.models import LogisticModel, TreeModel, accuracy, macro_f1

        _same_domains("ml_utility", train, holdout, synthetic)
        label = getattr(self, "_label", None) or train.domain.attributes[-1]
        j = train.domain.axes([label])[0]
        sizes = [s for i, s in enumerate(train.domain.shape) if i != j]
        k = train.domain.shape[j]
        xt, yt = _xy(holdout, label, None, rng)
        out: dict[str, float] = {}
        for name in ["lr", "dt"]:
            for side, data in [("synthetic", synthetic), ("real", train)]:
                x, y = _xy(data, label, self.config.max_train, rng)
                if len(np.unique(y)) < 2:  # one class only: the model predicts it everywhere
                    pred = np.full(yt.shape, y[0] if y.size else 0)
                elif name == "lr":
                    pred = LogisticModel().fit(x, sizes, y).predict(xt)
                else:
                    pred = TreeModel(max_depth=10).fit(x, sizes, y, k).predict(xt)
                out[f"{name}_accuracy_{side}"] = accuracy(yt, pred)
                out[f"{name}_f1_{side}"] = macro_f1(yt, pred)
            out[f"{name}_accuracy_gap"] = abs(out[f"{name}_accuracy_real"] - out[f"{name}_accuracy_synthetic"])
            out[f"{name}_f1_gap"] = abs(out[f"{name}_f1_real"] - out[f"{name}_f1_synthetic"])
        return out


@attrs.frozen
class SVMConfig:
    label: str | None = None
    max_train: int = 5000

    def __attrs_post_init__(self) -> None:
        if self.max_train < 10:
            raise ConfigError("svm_misclassification: max_train must be >= 10")


class SVMMisclassification(Evaluator):
    requires_holdout = True

    def __init__(self, config: SVMConfig | None = None) -> None:
        super().__init__(config or SVMConfig())

    def plan(self, ctx: PlanContext) -> list:
        self._label = _check_label(self.config.label, ctx, "svm_misclassification")
        return []

    def evaluate(self, real: Dataset, synthetic: Dataset, rng: np.random.Generator) -> dict[str, float]:
        """Without a holdout (outside the pipeline): tests on `real` itself (in-sample reference)."""
        return self.evaluate_holdout(real, real, synthetic, rng)

    def evaluate_holdout(self, train: Dataset, holdout: Dataset, synthetic: Dataset,
                         rng: np.random.Generator) -> dict[str, float]:
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler
        from sklearn.svm import SVC

        _same_domains("svm_misclassification", train, holdout, synthetic)
        label = getattr(self, "_label", None) or train.domain.attributes[-1]
        xt, yt = _xy(holdout, label, None, rng)
        out = {}
        for side, data in [("synthetic", synthetic), ("real", train)]:
            x, y = _xy(data, label, self.config.max_train, rng)
            if len(np.unique(y)) < 2:
                pred = np.full(yt.shape, y[0] if y.size else 0)
            else:
                # SVC seeds libsvm from numpy's global RNG unless given a seed: derive one from rng
                svc = SVC(random_state=int(rng.integers(2**31 - 1)))
                pred = make_pipeline(StandardScaler(), svc).fit(x, y).predict(xt)
            out[f"misclassification_{side}"] = float(np.mean(pred != yt))
        return out
