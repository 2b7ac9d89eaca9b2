"""Datasets read from files: the NLTCS / Adult benchmark folder, and any CSV.

The benchmark folder (`nltcs/nltcs.csv` + `nltcs.json`, `adult/adult.csv` + `adult.json` +
`adult_int_to_str.json`) is found from, in order: the dataset's `data_dir` param, the CLI's
`--data-dir`, the environment variable VERTISYNTH_DATA.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pandas as pd

from vertisynth.core.encoding import CSV_NULLS, ColumnSchema, TableSchema, csv_na_args
from vertisynth.core.errors import ConfigError, DataError
from vertisynth.core.loaded import DatasetSource, LoadedData, PartyFiles, read_codes_csv, read_domain_json

ENV_VAR = "VERTISYNTH_DATA"
ADULT_COLUMNS = ("age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
                 "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week",
                 "native-country", "income")


def resolve_data_dir(explicit: str | None, cli: str | None) -> Path:
    raw = explicit or cli or os.environ.get(ENV_VAR)
    if not raw:
        raise DataError(
            "benchmark data folder not given: pass --data-dir DIR, set dataset params data_dir, "
            f"or set the environment variable {ENV_VAR} (e.g. {ENV_VAR}=../shared/data)"
        )
    path = Path(raw).expanduser()
    if not path.is_dir():
        raise DataError(f"benchmark data folder {str(path)!r} does not exist (from {'config' if explicit else '--data-dir' if cli else ENV_VAR})")
    return path


@attrs.frozen
class BenchmarkConfig:
    """data_dir: the benchmark folder (else --data-dir or $VERTISYNTH_DATA); sample: keep a random subset of rows."""

    data_dir: str | None = None
    sample: int | None = None
    sample_seed: int = 0


def _subsample(frame: pd.DataFrame, config: BenchmarkConfig) -> pd.DataFrame:
    if config.sample is None or config.sample >= len(frame):
        return frame
    if config.sample < 1:
        raise ConfigError(f"dataset sample must be >= 1, got {config.sample}")
    idx = np.random.default_rng(config.sample_seed).choice(len(frame), config.sample, replace=False)
    return frame.iloc[np.sort(idx)].reset_index(drop=True)


def nltcs(config: BenchmarkConfig, data_dir: str | None = None) -> DatasetSource:
    root = resolve_data_dir(config.data_dir, data_dir) / "nltcs"
    sizes = read_domain_json(root / "nltcs.json")
    schema = TableSchema(tuple(ColumnSchema(c, "categorical", categories=tuple(range(k))) for c, k in sizes.items()))
    cols = list(sizes)
    parties = [cols[:8], cols[8:]]

    def load() -> LoadedData:
        frame = _subsample(read_codes_csv(root / "nltcs.csv", sizes), config)
        return LoadedData(frame, schema, parties, None, f"NLTCS ({len(frame)} x {len(cols)}, binary)",
                          None, {"source": str(root)})

    return DatasetSource(schema, parties, load, None, "NLTCS benchmark (binary)")


def adult(config: BenchmarkConfig, data_dir: str | None = None) -> DatasetSource:
    root = resolve_data_dir(config.data_dir, data_dir) / "adult"
    sizes = read_domain_json(root / "adult.json")
    try:
        labels = json.loads((root / "adult_int_to_str.json").read_text())
        names = list(ADULT_COLUMNS) if len(sizes) == len(ADULT_COLUMNS) else list(sizes)
        cats = [[labels[j][str(i)] for i in range(k)] for j, k in enumerate(sizes.values())]
    except (FileNotFoundError, json.JSONDecodeError, KeyError, IndexError) as exc:
        raise DataError(f"Adult label map {str(root / 'adult_int_to_str.json')!r} unreadable: {exc}") from None
    schema = TableSchema(tuple(ColumnSchema(n, "categorical", categories=tuple(c)) for n, c in zip(names, cats)))
    parties = [names[:8], names[8:]]

    def load() -> LoadedData:
        codes = _subsample(read_codes_csv(root / "adult.csv", sizes), config)
        frame = pd.DataFrame({n: np.asarray(c, dtype=object)[codes[col].to_numpy()]
                              for n, c, col in zip(names, cats, sizes)})
        return LoadedData(frame, schema, parties, None,
                          f"Adult ({len(frame)} x {len(names)}, discretised as in PrivMRF)", None, {"source": str(root)})

    return DatasetSource(schema, parties, load, None, "Adult benchmark (discretised as in PrivMRF)")


@attrs.frozen
class CsvConfig:
    """path: the CSV. schema: per-column public schema (see ColumnSchema), or domain: a PrivMRF-style JSON
    domain for integer-coded CSVs. With neither, the schema is read off the data (NOT DP; a warning and the
    report say so; an identifier-like column is refused); then `bounds` = {column = [low, high]} gives numeric
    columns public ranges and DP-quantile bins, `quantile_epsilon` each (charged to the ledger)."""

    path: str
    schema: dict[str, dict[str, Any]] | None = None
    domain: str | None = None
    parties: list[list[str]] | None = None
    bounds: dict[str, list[float]] | None = None
    quantile_epsilon: float = 0.1


def csv(config: CsvConfig, data_dir: str | None = None) -> DatasetSource:
    """With a public schema (or JSON domain) no row is read, nor the file looked for, until the plan is
    checked; without one the schema must be read off the data first (not DP, and the report says so)."""
    path = Path(config.path).expanduser()
    if config.bounds and (config.domain or config.schema):
        raise ConfigError("csv dataset: `bounds` applies to an inferred schema; with `schema`, put the bounds there")
    if config.domain or config.schema:
        # public schema: the file is read only at load time, so a server (or a party with its own
        # --csv) can plan from the schema alone, without the file
        if config.domain:
            sizes = read_domain_json(Path(config.domain).expanduser())
            schema = TableSchema(tuple(ColumnSchema(c, "categorical", categories=tuple(range(k)))
                                       for c, k in sizes.items()))
        else:
            schema = TableSchema.from_config(config.schema)
        names = schema.names
        half = (len(names) + 1) // 2
        parties = config.parties or [names[:half], names[half:]]
        return DatasetSource(schema, parties, lambda: _load_csv(config), None, f"CSV {path.name}",
                             stream_path=None if config.domain else path)
    loaded = _load_csv(config)
    return DatasetSource(loaded.schema, loaded.default_parties, lambda: loaded, None, loaded.description)


def _load_csv(config: CsvConfig) -> LoadedData:
    path = Path(config.path).expanduser()
    if not path.is_file():
        raise DataError(f"CSV file {str(path)!r} does not exist")
    if config.domain:
        sizes = read_domain_json(Path(config.domain).expanduser())
        frame = read_codes_csv(path, sizes)
        schema = TableSchema(tuple(ColumnSchema(c, "categorical", categories=tuple(range(k))) for c, k in sizes.items()))
    else:
        try:
            public = TableSchema.from_config(config.schema) if config.schema else None
            frame = pd.read_csv(path, **_na_values(public))
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
            raise DataError(f"cannot read CSV {str(path)!r}: {exc}") from None
        if len(frame) == 0:
            raise DataError(f"CSV {str(path)!r} has no rows: there is nothing to synthesise")
        frame.columns = [str(c) for c in frame.columns]
        schema = (TableSchema.from_config(config.schema) if config.schema else
                  TableSchema.infer(frame, bounds=config.bounds, quantile_epsilon=config.quantile_epsilon))
    names = schema.names
    half = (len(names) + 1) // 2
    parties = config.parties or [names[:half], names[half:]]
    return LoadedData(frame, schema, parties, None, f"CSV {path.name} ({len(frame)} rows)", None,
                      {"source": str(path), "schema_inferred_from_data": schema.inferred})


@attrs.frozen
class PartyCsvConfig:
    """files: one CSV per party, {party name = path}; each holds an identifier column `id_column` and that
    party's attributes, rows in any order, people partly overlapping. schema: public per-column schema
    (see ColumnSchema); without it the schema is read off the data (NOT DP; a warning and the report say so), and
    `bounds` = {column = [low, high]} gives numeric columns DP-quantile bins, `quantile_epsilon` each (n·ε ≥ 200).
    Align with `psi` or `psu`."""

    files: dict[str, str]
    id_column: str = "id"
    schema: dict[str, dict[str, Any]] | None = None
    bounds: dict[str, list[float]] | None = None
    quantile_epsilon: float = 0.1


def _na_values(schema: TableSchema | None) -> dict[str, Any]:
    """The one CSV reading rule (`csv_na_args`): a category label spelled like a missing value ("None") stays a
    value, as the streamed reader keeps it (`stream = true` must read the same table)."""
    return csv_na_args(() if schema is None else schema)


def _read_party_csv(path: Path, id_column: str, schema: TableSchema | None = None) -> pd.DataFrame:
    if not path.is_file():
        raise DataError(f"party CSV {str(path)!r} does not exist")
    try:  # identifiers stay strings: no "007" -> 7, no float conversion of large numbers
        frame = pd.read_csv(path, dtype={id_column: str}, **_na_values(schema))
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read party CSV {str(path)!r}: {exc}") from None
    frame.columns = [str(c) for c in frame.columns]
    if id_column not in frame.columns:
        raise DataError(f"party CSV {str(path)!r} has no identifier column {id_column!r}; it has {list(frame.columns)}")
    if schema is not None:   # an identifier spelled like a missing value is missing, whatever the labels
        frame[id_column] = frame[id_column].where(~frame[id_column].isin(CSV_NULLS))
    if frame[id_column].isna().any():
        raise DataError(f"party CSV {str(path)!r}: identifier missing in row(s) "
                        f"{np.flatnonzero(frame[id_column].isna().to_numpy())[:5].tolist()}")
    return frame


def party_csv(config: PartyCsvConfig, data_dir: str | None = None) -> DatasetSource:
    """Only the headers are read before the plan is checked (which columns each party holds), unless the
    schema must be inferred from the rows."""
    if config.bounds and config.schema:
        raise ConfigError("party_csv dataset: `bounds` applies to an inferred schema; with `schema`, put the bounds there")
    if len(config.files) < 2:
        raise ConfigError(f"party_csv needs a CSV for each of at least two parties, got {sorted(config.files)}")
    paths = {p: Path(f).expanduser() for p, f in config.files.items()}
    columns: dict[str, list[str]] = {}
    for p, path in paths.items():
        if not path.is_file():
            raise DataError(f"party {p!r}: CSV {str(path)!r} does not exist")
        header = [str(c) for c in pd.read_csv(path, nrows=0).columns]
        if config.id_column not in header:
            raise DataError(f"party {p!r}: CSV {str(path)!r} has no identifier column {config.id_column!r}; it has {header}")
        columns[p] = [c for c in header if c != config.id_column]
    seen: dict[str, str] = {}
    for p, cols in columns.items():
        for c in cols:
            if c in seen:
                raise DataError(f"column {c!r} is in both {seen[c]!r}'s and {p!r}'s CSV; vertical parties hold "
                                "different columns (rename one, or drop it from one file)")
            seen[c] = p
    names = list(columns)

    def load(schema: TableSchema | None = None) -> LoadedData:
        frames = {p: _read_party_csv(path, config.id_column, None if schema is None else TableSchema(
            tuple(c for c in schema.columns if c.name in columns[p]))) for p, path in paths.items()}
        if schema is None:
            schema = TableSchema.infer_parts([f.drop(columns=[config.id_column]) for f in frames.values()],  # NOT DP
                                             bounds=config.bounds, quantile_epsilon=config.quantile_epsilon)
        ids = {p: f[config.id_column].tolist() for p, f in frames.items()}
        sizes = ", ".join(f"{p} {len(f)}" for p, f in frames.items())
        return LoadedData(None, schema, [columns[p] for p in names], names,
                          f"ID-keyed party CSVs ({sizes} rows)", None,
                          {"source": {p: str(v) for p, v in paths.items()}}, frames, ids)

    if config.schema:
        schema = TableSchema.from_config(config.schema)
        missing = [c for c in seen if c not in schema.names]
        extra = [c for c in schema.names if c not in seen]
        if missing or extra:
            raise ConfigError(f"party_csv schema does not match the files' columns: "
                              f"{'not in schema ' + str(missing) if missing else ''}"
                              f"{'; in schema but in no file ' + str(extra) if extra else ''}")
        order = [c for p in names for c in columns[p]]
        schema = TableSchema(tuple(schema.columns[schema.names.index(c)] for c in order))
        return DatasetSource(schema, [columns[p] for p in names], lambda: load(schema), names,
                             "ID-keyed party CSVs", stream_parties=PartyFiles(paths, config.id_column))
    loaded = load()
    return DatasetSource(loaded.schema, loaded.default_parties, lambda: loaded, names, loaded.description)
