"""Pandas in, pandas out: synthesise from DataFrames held by several parties, in one call.

    import vertisynth
    result = vertisynth.synthesize({"hospital": df_a, "insurer": df_b}, epsilon=1.0, delta=1e-5)
    result.synthetic          # one DataFrame with every party's columns
    result.ledger.to_dict()   # the privacy spend, composed across parties

This runs all parties in one process (a simulation of the protocol: party-side code still only sees
its own columns). The party DataFrames are matched by index label (the same people; indexes that
disagree are an error), or by an identifier column through an alignment protocol (`id_column=`).

It is also the one front door for plugin authors: every name a plugin needs (hookimpl, the spec
descriptors, the interfaces and capability Protocols, the ledger's charges and costs, the mechanisms, the
data model and the errors) is importable from here; docs/plugins.md shows a skeleton per kind.
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from .core.capabilities import (EstimatesWithVariance, HasPrivacyNotes, PartyServerSplit, ReleasesNoisyCount,
                                ReportsBudgetSplit, ReportsModel, SharedKeyEncoder)
from .core.dataset import Dataset, VerticalPartition
from .core.domain import Domain
from .core.encoding import ColumnSchema, TableSchema, inferred_schema_message
from .core.errors import (BudgetError, ConfigError, DataError, DomainError, InferredSchemaWarning, MessageError,
                          NoCrossPartyWarning, PluginError, VertisynthError, VertisynthWarning)
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
from .run.config import DEFAULT_SYNTHESIZER, RunConfig, parse_config
from .run.evaluate import evaluate_tables
from .run.model import FittedModel
from .run.pipeline import RunResult, execute, make_plan
from .run.report import cross_party_note


QUANTILE_SHARE = 0.1   # of ε, for the DP-quantile bins of numeric columns with public `bounds`, split among them


def synthesize(
    data: Mapping[str, pd.DataFrame] | pd.DataFrame | str | Path,
    *,
    epsilon: float,
    delta: float = 1e-5,
    synthesizer: str = DEFAULT_SYNTHESIZER,
    params: Mapping[str, Any] | None = None,
    parties: Mapping[str, list[str]] | None = None,
    schema: Mapping[str, Mapping[str, Any]] | None = None,
    bounds: Mapping[str, tuple[float, float]] | None = None,
    evaluators: list[dict[str, Any]] | None = None,
    n: int | None = None,
    seed: int = 0,
    output_dir: str | Path | None = None,
    id_column: str | None = None,
    alignment: str | None = None,
    alignment_params: Mapping[str, Any] | None = None,
    progress: bool = False,
    noise: str | None = None,
    overwrite: bool = False,
) -> RunResult:
    """Synthesise one DP table from the columns several parties hold about the same people.

    data: {party name: DataFrame}, one frame per party, each holding that party's columns. Rows are matched
        by index label (the same label is the same person; the order may differ); indexes that disagree are
        an error. Or one DataFrame together with `parties`. Or the path of a CSV or Parquet file (with `parties`
        and a public `schema`): it is then read in chunks, never whole (the synthesizer's chunk_rows bound the
        memory; vertimrf; the evaluators score from marginal counts; docs/scale.md), and the synthetic table is
        written in blocks: `.synthetic` holds it only when it is one block (131,072 rows), else read the CSV at
        `.synthetic_path` (without `output_dir`: in a temporary folder, named in a warning).
    epsilon, delta: the privacy budget for the whole run, composed across all parties (one person's record
        spans every party).
    synthesizer: "vertimrf" (default: parties share only DP messages and the cross-party correlations are
        modelled), "independent" (the no-correlation baseline), or a centralised comparison point ("privmrf",
        "dpsyn", "private_pgm"). `params` are its options (see its module docstring).
    parties: {party name: [columns]}, only with a single DataFrame.
    schema: a public per-column schema, the dict a config's `[dataset.params.schema]` table is (the same keys,
        the same meaning; see `ColumnSchema` and docs/config.md), e.g. {"sex": {"kind": "categorical",
        "categories": ["F", "M"]}, "age": {"kind": "numeric", "bounds": [0, 100], "integer": True},
        "income": {"kind": "numeric", "bounds": [0, 1e6], "binning": "quantile", "quantile_epsilon": 0.05}}:
        numeric bounds alone give equal-width bins; DP-quantile bins (for a skewed column) are asked for with
        `binning` and `quantile_epsilon`, charged to the ledger. Without it the schema is read off the data,
        which is NOT covered by the DP guarantee: an `InferredSchemaWarning` says so, and a column that looks
        like an identifier (IDs, e-mail addresses) is refused.
    bounds: without `schema`, {column: (low, high)}: public ranges of numeric columns, which then get DP-quantile
        bins (QUANTILE_SHARE of ε split among them, in the ledger) instead of equal-width bins over the data's
        min-max.
    evaluators: metrics against the real data (default: 2-way TVD); not part of the DP release.
    n: number of synthetic records (default: as many as the real table). seed: the run's seed.
    output_dir: if given, synthetic.csv, report.json, ledger.json and summary.md are written there.
    id_column: the parties' tables are keyed by this column (any row order, partial overlap); they are
        aligned by `alignment` ("psi" by default, or "psu" with synthetic fill; docs/alignment.md), with
        `alignment_params`.
    progress: show a progress bar on stderr.

    Returns a RunResult: `.synthetic` (the DataFrame), `.ledger` (the privacy spend), `.metrics`, `.report`.
    A `NoCrossPartyWarning` says when the fitted model has no cross-party edge (the parties' columns then come
    out independent of each other).
    noise: "secure" (the default on your data: discrete noise from the OS CSPRNG, for a release;
        docs/privacy.md) or "simulation" (seeded numpy noise, reproducible: for studies and tests, chosen
        explicitly). The ledger and the report say which ran.
    overwrite: with `output_dir`, overwrite files there that no vertisynth run wrote (refused otherwise).
    """
    if bounds and schema:
        raise DataError("give `bounds` or a full `schema`, not both (put the bounds in the schema's numeric columns)")
    if id_column is not None:
        result = _synthesize_keyed(data, id_column, alignment or "psi", alignment_params, epsilon=epsilon,
                                   delta=delta, synthesizer=synthesizer, params=params, schema=schema, bounds=bounds,
                                   evaluators=evaluators, n=n, seed=seed, output_dir=output_dir, progress=progress,
                                   noise=noise, overwrite=overwrite)
        _warn_if_independent(result)
        return result
    if isinstance(data, (str, Path)):
        result = _synthesize_file(Path(data), epsilon=epsilon, delta=delta, synthesizer=synthesizer, params=params,
                                  parties=parties, schema=schema, evaluators=evaluators, n=n, seed=seed,
                                  output_dir=output_dir, progress=progress, noise=noise, overwrite=overwrite)
        _warn_if_independent(result)
        return result
    if isinstance(data, pd.DataFrame):
        frame = data
        if parties is None:
            raise DataError("pass `parties` ({name: [columns]}) with a single DataFrame, or a dict of DataFrames")
        split = {k: list(v) for k, v in parties.items()}
    else:
        data = _check_party_frames(data)
        aligned = _align_by_index(data)
        seen: dict[str, str] = {}
        for name, df in aligned.items():
            for c in df.columns:
                if str(c) in seen:
                    raise DataError(f"column {c!r} is held by both {seen[str(c)]!r} and {name!r}")
                seen[str(c)] = name
        frame = pd.concat([df.reset_index(drop=True) for df in aligned.values()], axis=1)
        split = {k: [str(c) for c in v.columns] for k, v in aligned.items()}
    frame = frame.copy()
    frame.columns = [str(c) for c in frame.columns]
    table_schema = (_public_schema(schema, epsilon) if schema else
                    TableSchema.infer(frame, **_bounds_kw(bounds, epsilon), warn=False))
    _warn_inferred(table_schema)
    loaded = LoadedData(frame, table_schema, list(split.values()), list(split), "in-memory DataFrames",
                        info={"schema_inferred_from_data": table_schema.inferred})
    source = DatasetSource(table_schema, list(split.values()), lambda: loaded, list(split), loaded.description)
    config = _api_config(seed, noise, epsilon, delta, split, synthesizer, params, evaluators, n,
                         alignment={"use": alignment, "params": dict(alignment_params or {})} if alignment else None)
    result = execute(make_plan(config, source=source), output_dir, progress=progress, overwrite=overwrite)
    _warn_if_independent(result)
    return result


def _synthesize_file(path: Path, *, epsilon: float, delta: float, synthesizer: str, params: Mapping[str, Any] | None,
                     parties: Mapping[str, list[str]] | None, schema: Mapping[str, Mapping[str, Any]] | None,
                     evaluators: list[dict[str, Any]] | None, n: int | None, seed: int,
                     output_dir: str | Path | None, progress: bool, noise: str | None, overwrite: bool = False) -> RunResult:
    """A file's table read in chunks (`stream = true`): its schema must be public, since reading one off the
    rows would need the whole table (and is not DP)."""
    if schema is None or parties is None:
        raise DataError(f"synthesize({str(path)!r}): a file is read in chunks and needs `parties` and a public "
                        "`schema`; or read it yourself and pass a DataFrame")
    if not path.is_file():
        raise DataError(f"synthesize: {str(path)!r} does not exist")
    table_schema = _public_schema(schema, epsilon)
    split = {k: [str(c) for c in v] for k, v in parties.items()}

    def whole() -> LoadedData:   # never called: a streamed run reads the file through stream_path
        raise DataError("internal: a streamed run does not load the whole table")

    source = DatasetSource(table_schema, list(split.values()), whole, list(split), f"file {path.name}",
                           stream_path=path)
    config = _api_config(seed, noise, epsilon, delta, split, synthesizer, params, evaluators, n, stream=True)
    result = execute(make_plan(config, source=source), output_dir, progress=progress, overwrite=overwrite)
    _warn_if_independent(result)
    return result


def _api_config(seed: int, noise: str | None, epsilon: float, delta: float, split: dict[str, list[str]], synthesizer: str,
                params: Mapping[str, Any] | None, evaluators: list[dict[str, Any]] | None, n: int | None,
                alignment: dict[str, Any] | None = None, stream: bool = False) -> RunConfig:
    """The run config `synthesize` builds for an in-memory or streamed source (checked like a TOML file's)."""
    return parse_config({
        "seed": seed, **({"noise": noise} if noise is not None else {}), **({"stream": True} if stream else {}),
        "budget": {"epsilon": epsilon, "delta": delta},
        "dataset": {"name": "in-memory"},
        "parties": [{"name": k, "attributes": v} for k, v in split.items()],
        **({"alignment": alignment} if alignment else {}),
        "synthesizer": {"use": synthesizer, "params": dict(params or {})},
        "evaluators": evaluators if evaluators is not None else [{"use": "tvd", "params": {"ways": [2]}}],
        **({"sample_size": n} if n is not None else {}),
    }, where="synthesize()")


def _check_party_frames(data: Any) -> dict[str, pd.DataFrame]:
    """{party name: DataFrame}, or a one-line error that says what was passed instead and what to pass."""
    if isinstance(data, pd.Series):
        raise DataError("synthesize() takes DataFrames, got a pandas Series: pass {party: series.to_frame(), ...}")
    if not isinstance(data, Mapping):
        raise DataError(f"synthesize() takes {{party name: DataFrame}} (or one DataFrame with `parties`), "
                        f"got a {type(data).__name__}")
    if not data:
        raise DataError("no party data given")
    for name, df in data.items():
        if not isinstance(name, str):
            raise DataError(f"party names must be strings, got {name!r}")
        if isinstance(df, pd.Series):
            raise DataError(f"party {name!r}: got a pandas Series; pass a DataFrame (series.to_frame())")
        if not isinstance(df, pd.DataFrame):
            raise DataError(f"party {name!r}: expected a pandas DataFrame, got a {type(df).__name__}")
    return dict(data)


def _align_by_index(data: Mapping[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """Match the parties' rows by index label (the order may differ); indexes that disagree are an error."""
    names = list(data)
    for name, df in data.items():
        if not df.index.is_unique:
            dup = df.index[df.index.duplicated()].unique()[:3].tolist()
            raise DataError(f"party {name!r}'s index repeats labels (e.g. {dup}); rows are matched by index, one "
                            "label per person: give each row its own label, or pass id_column=")
    ref = data[names[0]].index
    out = {names[0]: data[names[0]]}
    for name in names[1:]:
        df = data[name]
        if df.index.equals(ref):
            out[name] = df
            continue
        only_ref, only_this = ref.difference(df.index, sort=False), df.index.difference(ref, sort=False)
        if len(only_ref) or len(only_this):
            raise DataError(
                f"party tables are not row-aligned: the indexes of {names[0]!r} ({len(ref)} rows) and {name!r} "
                f"({len(df)} rows) disagree ({len(only_ref)} labels only in {names[0]!r}, e.g. "
                f"{only_ref[:3].tolist()}; {len(only_this)} only in {name!r}, e.g. {only_this[:3].tolist()}). "
                "Rows are matched by index label: give the tables the same index (the same people), or pass "
                "id_column= to align ID-keyed tables by private set intersection")
        out[name] = df.loc[ref]   # the same people in another order
    return out


def _public_schema(schema: Mapping[str, Mapping[str, Any]], epsilon: float) -> TableSchema:
    """The caller's schema, read as a config's `[dataset.params.schema]` is (`TableSchema.from_config`): one
    format, one meaning (numeric `bounds` alone: equal-width bins; DP quantiles only when asked for)."""
    if not isinstance(schema, Mapping):
        raise DataError(f"schema must be {{column: {{kind: ...}}}}, got a {type(schema).__name__}")
    return TableSchema.from_config(schema)


def _bounds_kw(bounds: Mapping[str, tuple[float, float]] | None, epsilon: float) -> dict[str, Any]:
    if not bounds:
        return {}
    return {"bounds": dict(bounds), "quantile_epsilon": QUANTILE_SHARE * epsilon / len(bounds)}


def _warn_inferred(schema: TableSchema) -> None:
    if schema.inferred:
        observed = [c.name for c in schema.columns if c.kind == "numeric" and c.binning == "equal_width"]
        warnings.warn(inferred_schema_message(schema, observed), InferredSchemaWarning, stacklevel=3)


def _warn_if_independent(result: RunResult) -> None:
    note = cross_party_note(result.report)
    if note:
        warnings.warn(note, NoCrossPartyWarning, stacklevel=3)


def fit(data: pd.DataFrame | Mapping[str, pd.DataFrame], **kwargs: Any) -> FittedModel:
    """Fit once (SDV's `fit`): the same arguments as `synthesize`; returns the fitted model, a DP release that
    `sample(n, seed=...)`, `save(path)` and `vertisynth.load_model(path)` use without spending budget.
    Synthesizers with no graphical model (dpsyn) are refused with the reason."""
    result = synthesize(data, **kwargs)
    if result.model is None:
        raise ConfigError(result.report["privacy"]["releases"]["model.npz"])
    return result.model


def load_model(path: str | Path, config: RunConfig | str | Path | None = None) -> FittedModel:
    """A fitted model file (`model.npz` beside a run's table, or `FittedModel.save`); `.sample(n, seed=...)`
    draws more raw-looking rows as post-processing. A malformed or altered file raises a MessageError.
    With `config` (a cross-machine run's config) the file must carry a signature by a role its [roster] pins."""
    return FittedModel.load(path, config)


def evaluate(real: pd.DataFrame | str | Path, synthetic: pd.DataFrame | str | Path, *,
             schema: Mapping[str, Mapping[str, Any]] | None = None,
             evaluators: list[str | Mapping[str, Any]] | None = None, holdout: pd.DataFrame | str | Path | None = None,
             seed: int = 0, output_dir: str | Path | None = None) -> dict[str, dict[str, float]]:
    """Score any synthetic table against a real one with the evaluator plugins, outside a pipeline.

    real, synthetic (and holdout): DataFrames or CSV paths with the same columns. schema: the public schema
    (as for `synthesize`); without it one is read off both tables. evaluators: names or
    {"use": ..., "params": {...}, "as": ...} entries (default: TVD over 1-, 2- and 3-way marginals).
    Returns {evaluator: {metric: value}}; these numbers read the real data and are not DP."""
    return evaluate_tables(real, synthetic, schema=schema, evaluators=evaluators, holdout=holdout, seed=seed,
                           output_dir=output_dir)


def _synthesize_keyed(data: Any, id_column: str, alignment: str, alignment_params: Mapping[str, Any] | None,
                      **kw: Any) -> RunResult:
    if isinstance(data, pd.DataFrame):
        raise DataError("with id_column, pass one DataFrame per party: {name: frame}, at least two")
    data = _check_party_frames(data)
    if len(data) < 2:
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
    schema, bounds = kw.pop("schema"), kw.pop("bounds")
    table_schema = (_public_schema(schema, kw["epsilon"]) if schema else
                    TableSchema.infer_parts(list(frames.values()), **_bounds_kw(bounds, kw["epsilon"]), warn=False))
    _warn_inferred(table_schema)
    loaded = LoadedData(None, table_schema, list(split.values()), list(split), "in-memory ID-keyed DataFrames",
                        info={"schema_inferred_from_data": table_schema.inferred}, party_frames=frames, party_ids=ids)
    source = DatasetSource(table_schema, list(split.values()), lambda: loaded, list(split), loaded.description)
    n, evaluators = kw.pop("n"), kw.pop("evaluators")
    config = parse_config({
        "seed": kw["seed"],
        **({"noise": kw["noise"]} if kw["noise"] is not None else {}),
        "budget": {"epsilon": kw["epsilon"], "delta": kw["delta"]},
        "dataset": {"name": "in-memory"},
        "parties": [{"name": k, "attributes": v} for k, v in split.items()],
        "alignment": {"use": alignment, "params": dict(alignment_params or {})},
        "synthesizer": {"use": kw["synthesizer"], "params": dict(kw["params"] or {})},
        "evaluators": evaluators if evaluators is not None else [{"use": "tvd", "params": {"ways": [2]}}],
        **({"sample_size": n} if n is not None else {}),
    }, where="synthesize()")
    return execute(make_plan(config, source=source), kw["output_dir"], progress=kw["progress"],
                   overwrite=kw["overwrite"])


__all__ = [
    # pandas in, pandas out
    "synthesize", "RunResult",
    # fit once, sample many; evaluate any two tables
    "fit", "load_model", "FittedModel", "evaluate",
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
    # warnings
    "InferredSchemaWarning", "NoCrossPartyWarning", "VertisynthWarning",
]
