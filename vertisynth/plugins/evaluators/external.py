"""Well-known metrics from peer libraries, as optional evaluators (each under its own pip extra).

`sdmetrics_quality`: SDMetrics' single-table quality report, its two properties: Column Shapes (per column,
1 − TVD of the marginal) and Column Pair Trends (per pair, 1 − TVD of the 2-way contingency table); both in
[0, 1], higher is better. `anonymeter_risk`: anonymeter's singling-out, linkability and inference attacks
(Giomi et al., PoPETs 2023), scored against a holdout (the attacks' control set): each risk in [0, 1], lower
is better, with the upper end of its 95% interval. In a vertical run the linkability attack links the first
party's columns to the other parties' by default, the question a vertical release raises.

`sdmetrics_quality` scores the raw tables (it declares `ScoresRawTables`): the real rows as read and the
synthetic table as decoded, with numerical, categorical and datetime columns as the public schema says, so its
scores are the ones SDMetrics (and SDV's published results) give on the same two tables; where the raw rows are
not at hand (ID-keyed or filled alignments) it falls back to the codes and the report says so. `anonymeter_risk`
reads the codes (bins and categories), like every built-in evaluator. Without the extra installed the evaluator is skipped with a warning that names the extra; a score the library returns
as NaN is left out with a warning, never reported as a number.
"""
from __future__ import annotations

import importlib
import warnings
from collections.abc import Mapping

import attrs
import numpy as np
import pandas as pd

from vertisynth.core.dataset import Dataset
from vertisynth.core.errors import ConfigError, DataError
from vertisynth.core.interfaces import Evaluator, PlanContext


class MissingExtraWarning(UserWarning):
    """An optional evaluator was skipped because its extra is not installed."""


def _import_extra(module: str, extra: str, evaluator: str):
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        warnings.warn(f"evaluator {evaluator!r} skipped: it needs the optional extra, "
                      f"pip install 'vertisynth[{extra}]' ({exc})", MissingExtraWarning, stacklevel=3)
        return None


def _labelled(data: Dataset) -> pd.DataFrame:
    """Codes as category labels (strings), so the libraries treat every column as categorical."""
    return pd.DataFrame({a: np.asarray(data.domain.labels.get(a, range(data.domain.size(a))), dtype=object)[
        data.column(a)].astype(str) if data.domain.labels.get(a) else data.column(a).astype(str)
        for a in data.domain.attributes})


def _same_domain(evaluator: str, *tables: Dataset) -> None:
    first = tables[0].domain
    for t in tables[1:]:
        if t.domain.attributes != first.attributes or t.domain.shape != first.shape:
            raise DataError(f"{evaluator}: the tables have different domains ({first} vs {t.domain})")


def _finite(evaluator: str, scores: dict[str, float]) -> dict[str, float]:
    bad = [k for k, v in scores.items() if not np.isfinite(v)]
    if bad:
        warnings.warn(f"evaluator {evaluator!r}: the library returned no number for {bad}; left out", stacklevel=3)
    return {k: float(v) for k, v in scores.items() if k not in bad}


SDMETRICS_TYPES = ("numerical", "categorical", "datetime")


class SDMetricsQuality(Evaluator):
    """Declares `ScoresRawTables`: the pipeline and `vertisynth.evaluate` call `evaluate_raw` with the raw tables."""

    def __init__(self, config: None = None) -> None:
        super().__init__(config)

    def plan(self, ctx: PlanContext) -> list:
        return []

    def evaluate(self, real: Dataset, synthetic: Dataset, rng: np.random.Generator) -> dict[str, float]:
        """On codes (every column categorical): the fallback where the raw rows are not at hand."""
        _same_domain("sdmetrics_quality", real, synthetic)
        kinds = {a: "categorical" for a in real.domain.attributes}
        return self._score(_labelled(real), _labelled(synthetic), kinds)

    def evaluate_raw(self, real: pd.DataFrame, synthetic: pd.DataFrame, kinds: Mapping[str, str],
                     rng: np.random.Generator) -> dict[str, float]:
        if list(real.columns) != list(synthetic.columns):
            raise DataError(f"sdmetrics_quality: the tables have different columns ({list(real.columns)} vs "
                            f"{list(synthetic.columns)})")
        return self._score(real, synthetic, {c: kinds.get(c, "categorical") for c in real.columns})

    @staticmethod
    def _score(real: pd.DataFrame, synthetic: pd.DataFrame, kinds: Mapping[str, str]) -> dict[str, float]:
        mod = _import_extra("sdmetrics.reports.single_table", "sdmetrics", "sdmetrics_quality")
        if mod is None:
            return {}
        unknown = {c: k for c, k in kinds.items() if k not in SDMETRICS_TYPES}
        if unknown:
            raise DataError(f"sdmetrics_quality: column kinds {unknown} are not among {list(SDMETRICS_TYPES)}")
        metadata = {"columns": {c: {"sdtype": k} for c, k in kinds.items()}}
        report = mod.QualityReport()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            report.generate(real, synthetic, metadata, verbose=False)
        props = report.get_properties().set_index("Property")["Score"]
        return _finite("sdmetrics_quality", {"column_shapes": props.get("Column Shapes", np.nan),
                                             "column_pair_trends": props.get("Column Pair Trends", np.nan)})


@attrs.frozen
class AnonymeterConfig:
    """n_attacks: attack records per attack. secret: the attribute the inference attack guesses (default: the
    last); linkability: two lists of columns an attacker holds separately (default: the first party's
    columns and the rest, or the two halves of the table in a one-party run)."""

    n_attacks: int = 500
    secret: str | None = None
    linkability: list[list[str]] | None = None

    def __attrs_post_init__(self) -> None:
        if self.n_attacks < 1:
            raise ConfigError(f"anonymeter_risk: n_attacks must be >= 1, got {self.n_attacks}")
        if self.linkability is not None and len(self.linkability) != 2:
            raise ConfigError("anonymeter_risk: linkability takes two lists of columns")


class AnonymeterRisk(Evaluator):
    requires_holdout = True   # the attacks' control set: records the synthesizer never saw (in a pipeline)

    def __init__(self, config: AnonymeterConfig | None = None) -> None:
        super().__init__(config or AnonymeterConfig())
        self._split: tuple[list[str], list[str]] | None = None

    def plan(self, ctx: PlanContext) -> list:
        attrs_ = list(ctx.domain.attributes)
        c = self.config
        for a in [c.secret] + [x for side in (c.linkability or []) for x in side]:
            if a is not None and a not in attrs_:
                raise ConfigError(f"anonymeter_risk: unknown attribute {a!r}; attributes: {attrs_}")
        if len(attrs_) < 2:
            raise ConfigError("anonymeter_risk: needs at least two attributes")
        if c.linkability:
            self._split = (list(c.linkability[0]), list(c.linkability[1]))
        elif len(ctx.partition) > 1:
            first = list(ctx.partition.parties[0].attributes)
            self._split = (first, [a for a in attrs_ if a not in first])
        else:
            self._split = (attrs_[: len(attrs_) // 2], attrs_[len(attrs_) // 2:])
        return []

    def evaluate(self, real: Dataset, synthetic: Dataset, rng: np.random.Generator) -> dict[str, float]:
        """Without a holdout, half of `real` (a seeded split) stands in as the control set. Prefer a real holdout:
        records the synthesizer never saw ([evaluation] holdout, or `evaluate(..., holdout=)`)."""
        _same_domain("anonymeter_risk", real, synthetic)
        order = rng.permutation(real.n)
        half = real.n // 2
        if half < 1:
            raise DataError("anonymeter_risk: the real table is too small to split into attacked and control sets")
        return self.evaluate_holdout(real.take(np.sort(order[:half])), real.take(np.sort(order[half:])), synthetic, rng)

    def evaluate_holdout(self, train: Dataset, holdout: Dataset, synthetic: Dataset,
                         rng: np.random.Generator) -> dict[str, float]:
        _same_domain("anonymeter_risk", train, holdout, synthetic)
        mod = _import_extra("anonymeter.evaluators", "anonymeter", "anonymeter_risk")
        if mod is None:
            return {}
        attrs_ = list(train.domain.attributes)
        split = self._split or (attrs_[: len(attrs_) // 2], attrs_[len(attrs_) // 2:])
        ori, syn, ctl = _labelled(train), _labelled(synthetic), _labelled(holdout)
        n = int(min(self.config.n_attacks, len(ctl), len(ori)))
        secret = self.config.secret or attrs_[-1]
        out: dict[str, float] = {}
        # linkability and inference draw their attack records from numpy's global generator: seed it from this
        # run's stream for the attacks and put its state back afterwards, so runs repeat and nothing else moves
        saved = np.random.get_state()
        np.random.seed(int(rng.integers(2**32)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # anonymeter warns when it finds few queries; the CI says so
            attacks = [
                ("singling_out", mod.SinglingOutEvaluator(ori=ori, syn=syn, control=ctl, n_attacks=n,
                                                          seed=int(rng.integers(2**31))), {"mode": "univariate"}),
                ("linkability", mod.LinkabilityEvaluator(ori=ori, syn=syn, control=ctl, n_attacks=n,
                                                         aux_cols=split), {}),
                ("inference", mod.InferenceEvaluator(ori=ori, syn=syn, control=ctl, n_attacks=n,
                                                     aux_cols=[a for a in attrs_ if a != secret], secret=secret), {}),
            ]
            try:
                results = []
                for name, attack, kw in attacks:
                    attack.evaluate(**kw)
                    results.append((name, attack.risk()))
            finally:
                np.random.set_state(saved)
            for name, risk in results:
                out[f"{name}_risk"] = risk.value
                out[f"{name}_risk_ci_high"] = risk.ci[1]
        return _finite("anonymeter_risk", out)
