"""Pandas in, pandas out: synthesise from DataFrames held by several parties, in one call.

    import vertisynth
    result = vertisynth.synthesize({"hospital": df_a, "insurer": df_b}, epsilon=1.0, delta=1e-5)
    result.synthetic          # one DataFrame with every party's columns
    result.ledger.to_dict()   # the privacy spend, composed across parties

This runs all parties in one process (a simulation of the protocol: party-side code still only sees
its own columns). The party DataFrames must be row-aligned (same people, same order) unless an
alignment protocol is chosen.

It is also the one front door for plugin authors: every name a plugin needs (hookimpl, the spec
descriptors, the interfaces and capability Protocols, the ledger's charges and costs, the mechanisms, the
data model and the errors) is importable from here; docs/plugins.md shows a skeleton per kind.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from .core.capabilities import (EstimatesWithVariance, HasPrivacyNotes, PartyServerSplit, ReleasesNoisyCount,
                                ReportsBudgetSplit, ReportsModel, SharedKeyEncoder)
from .core.dataset import Dataset, VerticalPartition
from .core.domain import Domain
from .core.encoding import ColumnSchema, TableSchema
from .core.errors import BudgetError, ConfigError, DataError, DomainError, MessageError, PluginError, VertisynthError
from .core.factor import Factor
from .core.hookspecs import hookimpl
from .core.interfaces import (Aligner, Alignment, Encoder, Evaluator, MarginalQuery, MeasuresMarginals, PlanContext,
                              Synthesizer, VerticalData)
from .core.loaded import DatasetSource, LoadedData
from .core.mechanisms import gaussian_mechanism, gaussian_sigma, laplace_mechanism, laplace_scale
from .core.messages import Message
from .core.privacy import RDP, ZCDP, ApproxDP, Budget, Charge, PrivacyLedger, PureDP
from .core.specs import (AlignerSpec, CommandSpec, DatasetSpec, EncoderSpec, EvaluatorSpec, RunModeSpec, SectionSpec,
                         SynthesizerSpec)
from .run.config import parse_config
from .run.pipeline import RunResult, execute, make_plan


def synthesize(
    data: pd.DataFrame | Mapping[str, pd.DataFrame],
    *,
    epsilon: float,
    delta: float = 1e-5,
    synthesizer: str = "independent",
    params: Mapping[str, Any] | None = None,
    parties: Mapping[str, list[str]] | None = None,
    schema: Mapping[str, Mapping[str, Any]] | None = None,
    evaluators: list[dict[str, Any]] | None = None,
    n: int | None = None,
    seed: int = 0,
    output_dir: str | Path | None = None,
    id_column: str | None = None,
    alignment: str | None = None,
    alignment_params: Mapping[str, Any] | None = None,
    noise: str = "simulation",
) -> RunResult:
    """Synthesise a DP table from one DataFrame per party (or one DataFrame plus `parties`).

    schema: public per-column schema (see `ColumnSchema`); without it the schema is read off the data,
    which is NOT covered by the DP guarantee (the report says so).
    id_column: the parties' tables are keyed by this column (any row order, partial overlap); they are
    aligned by `alignment` ("psi" by default, or "psu" with synthetic fill; docs/alignment.md).
    noise: "simulation" (seeded numpy noise, reproducible) or "secure" (discrete noise from the OS CSPRNG
    for a release; docs/privacy.md).
    """
    if id_column is not None:
        return _synthesize_keyed(data, id_column, alignment or "psi", alignment_params, epsilon=epsilon,
                                 delta=delta, synthesizer=synthesizer, params=params, schema=schema,
                                 evaluators=evaluators, n=n, seed=seed, output_dir=output_dir, noise=noise)
    if isinstance(data, pd.DataFrame):
        frame = data
        if parties is None:
            raise DataError("pass `parties` ({name: [columns]}) with a single DataFrame, or a dict of DataFrames")
        split = {k: list(v) for k, v in parties.items()}
    else:
        if not data:
            raise DataError("no party data given")
        lengths = {k: len(v) for k, v in data.items()}
        if len(set(lengths.values())) > 1:
            raise DataError(f"party tables are not row-aligned: row counts {lengths}")
        seen: dict[str, str] = {}
        for name, df in data.items():
            for c in df.columns:
                if str(c) in seen:
                    raise DataError(f"column {c!r} is held by both {seen[str(c)]!r} and {name!r}")
                seen[str(c)] = name
        frame = pd.concat([df.reset_index(drop=True) for df in data.values()], axis=1)
        split = {k: [str(c) for c in v.columns] for k, v in data.items()}
    frame = frame.copy()
    frame.columns = [str(c) for c in frame.columns]
    table_schema = TableSchema.from_config(schema) if schema else TableSchema.infer(frame)
    loaded = LoadedData(frame, table_schema, list(split.values()), list(split), "in-memory DataFrames",
                        info={"schema_inferred_from_data": table_schema.inferred})
    source = DatasetSource(table_schema, list(split.values()), lambda: loaded, list(split), loaded.description)
    config = parse_config({
        "seed": seed,
        "noise": noise,
        "budget": {"epsilon": epsilon, "delta": delta},
        "dataset": {"name": "in-memory"},
        "parties": [{"name": k, "attributes": v} for k, v in split.items()],
        **({"alignment": {"use": alignment, "params": dict(alignment_params or {})}} if alignment else {}),
        "synthesizer": {"use": synthesizer, "params": dict(params or {})},
        "evaluators": evaluators if evaluators is not None else [{"use": "tvd", "params": {"ways": [2]}}],
        **({"sample_size": n} if n is not None else {}),
    }, where="synthesize()")
    return execute(make_plan(config, source=source), output_dir)


def _synthesize_keyed(data: Any, id_column: str, alignment: str, alignment_params: Mapping[str, Any] | None,
                      **kw: Any) -> RunResult:
    if isinstance(data, pd.DataFrame) or not data or len(data) < 2:
        raise DataError("with id_column, pass one DataFrame per party: {name: frame}, at least two")
    frames, ids, seen = {}, {}, {}
    for name, df in data.items():
        if id_column not in df.columns:
            raise DataError(f"party {name!r}'s table has no identifier column {id_column!r}")
        body = df.drop(columns=[id_column]).reset_index(drop=True)
        body.columns = [str(c) for c in body.columns]
        for c in body.columns:
            if c in seen:
                raise DataError(f"column {c!r} is held by both {seen[c]!r} and {name!r}")
            seen[c] = name
        frames[name], ids[name] = body, df[id_column].tolist()
    split = {k: list(v.columns) for k, v in frames.items()}
    schema = kw.pop("schema")
    table_schema = TableSchema.from_config(schema) if schema else TableSchema.infer_parts(list(frames.values()))
    loaded = LoadedData(None, table_schema, list(split.values()), list(split), "in-memory ID-keyed DataFrames",
                        info={"schema_inferred_from_data": table_schema.inferred}, party_frames=frames, party_ids=ids)
    source = DatasetSource(table_schema, list(split.values()), lambda: loaded, list(split), loaded.description)
    n, evaluators = kw.pop("n"), kw.pop("evaluators")
    config = parse_config({
        "seed": kw["seed"],
        "noise": kw["noise"],
        "budget": {"epsilon": kw["epsilon"], "delta": kw["delta"]},
        "dataset": {"name": "in-memory"},
        "parties": [{"name": k, "attributes": v} for k, v in split.items()],
        "alignment": {"use": alignment, "params": dict(alignment_params or {})},
        "synthesizer": {"use": kw["synthesizer"], "params": dict(kw["params"] or {})},
        "evaluators": evaluators if evaluators is not None else [{"use": "tvd", "params": {"ways": [2]}}],
        **({"sample_size": n} if n is not None else {}),
    }, where="synthesize()")
    return execute(make_plan(config, source=source), kw["output_dir"])


__all__ = [
    # pandas in, pandas out
    "synthesize", "RunResult",
    # plugin authors: registration
    "hookimpl", "AlignerSpec", "CommandSpec", "DatasetSpec", "EncoderSpec", "EvaluatorSpec", "RunModeSpec",
    "SectionSpec", "SynthesizerSpec",
    # interfaces, the planning context and the optional capabilities
    "Aligner", "Alignment", "Encoder", "Evaluator", "MarginalQuery", "MeasuresMarginals", "PlanContext",
    "Synthesizer", "VerticalData", "EstimatesWithVariance", "HasPrivacyNotes", "PartyServerSplit",
    "ReleasesNoisyCount", "ReportsBudgetSplit", "ReportsModel", "SharedKeyEncoder",
    # privacy accounting and mechanisms
    "ApproxDP", "Budget", "Charge", "PrivacyLedger", "PureDP", "RDP", "ZCDP", "gaussian_mechanism",
    "gaussian_sigma", "laplace_mechanism", "laplace_scale",
    # data model, sources and messages
    "ColumnSchema", "Dataset", "DatasetSource", "Domain", "Factor", "LoadedData", "Message", "TableSchema",
    "VerticalPartition",
    # errors
    "BudgetError", "ConfigError", "DataError", "DomainError", "MessageError", "PluginError", "VertisynthError",
]
