"""Evaluate any two tables: the evaluator plugins outside a pipeline (`vertisynth evaluate`, `vertisynth.evaluate`).

Both tables are encoded with one codec (the public schema if given, else one read off the real table and the
synthetic one together: evaluation is not DP anyway, and reading the synthetic table too keeps a value that
only it holds from being an error). DP quantile bins in a schema become equal-width bins over the same public
bounds here: scoring spends no budget and needs no noise.
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pandas as pd

from vertisynth.core.capabilities import wants_raw_values
from vertisynth.core.dataset import VerticalPartition
from vertisynth.core.encoding import TableSchema, csv_na_args
from vertisynth.core.errors import BudgetError, ConfigError, DataError, SchemaColumnsWarning
from vertisynth.core.interfaces import Evaluator, PlanContext
from vertisynth.core.privacy import Budget
from vertisynth.core.registry import Registry, default_registry
from vertisynth.core.structuring import structure

from .config import EvaluatorConfig
from .pipeline import build_evaluators, column_kinds

DEFAULT_EVALUATORS: tuple[dict[str, Any], ...] = ({"use": "tvd"},)   # tvd's defaults, as a run's


def evaluator_entries(evaluators: Sequence[str | Mapping[str, Any]] | None) -> list[EvaluatorConfig]:
    """"tvd" or {"use": "tvd", "params": {...}, "as": "tvd_3way"} entries, structured like a config's."""
    out = []
    for i, e in enumerate(evaluators if evaluators is not None else DEFAULT_EVALUATORS):
        entry = {"use": e} if isinstance(e, str) else e
        out.append(structure(dict(entry), EvaluatorConfig, f"evaluators[{i}]"))
    if not out:
        raise ConfigError("no evaluators given")
    return out


def _scoring_schema(schema: TableSchema) -> TableSchema:
    cols = tuple(attrs.evolve(c, binning="equal_width", quantile_epsilon=0.0) if c.binning == "quantile" else c
                 for c in schema.columns)
    return TableSchema(cols, schema.inferred)


def _frame(x: Any, what: str, schema: TableSchema | None = None) -> pd.DataFrame:
    if isinstance(x, (str, Path)):
        path = Path(x)
        if not path.is_file():
            raise DataError(f"{what} table {str(path)!r} does not exist")
        try:
            return pd.read_csv(path, **csv_na_args(() if schema is None else schema))   # the run's reading rule
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
            raise DataError(f"cannot read {what} table {str(path)!r}: {exc}") from None
    if not isinstance(x, pd.DataFrame):
        raise DataError(f"the {what} table must be a pandas DataFrame or a CSV path, got a {type(x).__name__}")
    if len(x) == 0:
        raise DataError(f"the {what} table is empty")
    return x


def _extra_columns(tables: Mapping[str, pd.DataFrame | None], schema: TableSchema) -> str:
    """'the real table's ['id']; the holdout's ['id']': the columns each table holds beyond the schema."""
    return "; ".join(f"the {what} table's {extra}" for what, t in tables.items() if t is not None
                     for extra in [[c for c in t.columns if c not in schema.names]] if extra)


def evaluate_tables(real: Any, synthetic: Any, *, schema: Mapping[str, Mapping[str, Any]] | TableSchema | None = None,
                    evaluators: Sequence[str | Mapping[str, Any]] | None = None, holdout: Any = None, seed: int = 0,
                    output_dir: str | Path | None = None,
                    registry: Registry | None = None) -> dict[str, dict[str, float]]:
    registry = registry or default_registry()
    public = schema if isinstance(schema, TableSchema) else TableSchema.from_config(schema) if schema else None
    real, synthetic = _frame(real, "real", public), _frame(synthetic, "synthetic", public)
    hold = None if holdout is None else _frame(holdout, "holdout", public)
    real.columns = [str(c) for c in real.columns]
    synthetic.columns = [str(c) for c in synthetic.columns]
    if public is not None:   # as a run does: columns the public schema does not hold are left out
        beyond = _extra_columns({"real": real, "synthetic": synthetic, "holdout": hold}, public)
        if beyond:
            warnings.warn(f"column(s) not in the schema, not scored: {beyond}", SchemaColumnsWarning, stacklevel=2)
        keep = [c for c in public.names if c in real.columns]
        real, synthetic = real[keep], synthetic[[c for c in public.names if c in synthetic.columns]]
        hold = None if hold is None else hold[[c for c in public.names if c in hold.columns]]
    missing, extra = [c for c in real.columns if c not in synthetic.columns], \
        [c for c in synthetic.columns if c not in real.columns]
    if missing or extra:
        raise DataError(f"the tables have different columns: the synthetic one lacks {missing}, has extra {extra}")
    synthetic = synthetic[list(real.columns)]
    if public is not None:
        table_schema = public
    else:
        table_schema = TableSchema.infer(pd.concat([real, synthetic] + ([hold] if hold is not None else []),
                                                   ignore_index=True))
    table_schema = _scoring_schema(table_schema)
    comps = build_evaluators(registry, evaluator_entries(evaluators))
    rng = np.random.default_rng(seed)
    codec = table_schema.fit(real, None, rng, release=False)
    real_codes, synth_codes = codec.encode(real), codec.encode(synthetic)
    hold_codes = None if hold is None else codec.encode(hold)
    domain = codec.domain
    ctx = PlanContext(domain, VerticalPartition.single(domain), Budget(1.0, 1e-5))
    metrics: dict[str, dict[str, float]] = {}
    for comp in comps:
        if not isinstance(comp.instance, Evaluator):
            raise DataError(f"evaluator {comp.spec.name!r} from {comp.provider} is not an Evaluator")
        if comp.instance.plan(ctx):
            raise BudgetError(f"evaluator {comp.spec.name!r} declares privacy charges; evaluators may not spend budget")
        if comp.instance.uses_alignment:
            raise ConfigError(f"evaluator {comp.spec.name!r} scores an alignment's fill, which two tables do not have")
        if wants_raw_values(comp.spec, comp.instance):   # e.g. sdmetrics_quality: the tables as given, not bins
            against = hold if hold is not None and comp.instance.prefers_holdout else real
            metrics[comp.label] = comp.instance.evaluate_raw(against[list(real.columns)], synthetic,
                                                             column_kinds(table_schema), rng)
            continue
        if hold_codes is None:
            if comp.instance.requires_holdout:
                raise ConfigError(f"evaluator {comp.spec.name!r} scores on records the synthesizer never saw: pass "
                                  "a holdout table (records kept away from the synthesizer)")
            metrics[comp.label] = comp.instance.evaluate(real_codes, synth_codes, rng)
        else:
            metrics[comp.label] = comp.instance.evaluate_holdout(real_codes, hold_codes, synth_codes, rng)
    if output_dir is not None:
        out = Path(output_dir)
        out.mkdir(parents=True, exist_ok=True)
        for comp in comps:
            comp.instance.write_artifacts(out)
    return metrics
