"""`vertisynth init --from data.csv`: a config whose schema was read off the data, written out for review.

A schema read off the data is not covered by the DP guarantee: a numeric column's min and max, and the list
of a categorical column's values, can single out a person (the one 97-year-old; the one rare category).
So the inferred schema is written as TOML with a `# REVIEW` comment on every column that needs a public
decision: bounds to replace by public ones (a legal range, a survey's codebook), categories to check against
a public list, identifier-like columns to drop. The config runs as written; after review it is DP end to end.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from vertisynth.core.encoding import (CSV_NULLS, DATE_RANGE_NOTE, ColumnSchema, TableSchema, _identifier_reason,
                                      csv_na_args)
from vertisynth.core.errors import DataError

MANY_CATEGORIES = 20     # more values than this: ask whether the list is public or should be coarsened


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if isinstance(v, float) and not math.isfinite(v):
            raise DataError(f"cannot write the non-finite number {v} into a schema")
        return repr(int(v)) if isinstance(v, int) else repr(float(v))
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(str(v), ensure_ascii=False)   # a TOML basic string is a JSON string


def _key(name: str) -> str:
    return name if name.replace("_", "").replace("-", "").isalnum() and name.isascii() else json.dumps(name)


def _column_line(c: ColumnSchema) -> str:
    fields: dict[str, Any] = {"kind": c.kind}
    if c.kind == "categorical":
        fields["categories"] = list(c.categories)
    elif c.kind == "datetime":
        fields.update(bounds=list(c.bounds), bins=c.bins)
    else:
        fields.update(bounds=list(c.bounds), bins=c.bins)
        if c.integer:
            fields["integer"] = True
        if c.decimals is not None:
            fields["decimals"] = c.decimals
    if c.missing != "error":
        fields["missing"] = c.missing
    return f"{_key(c.name)} = {{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in fields.items()) + " }"


def _as_datetime(c: ColumnSchema, col: pd.Series) -> ColumnSchema:
    """A text column whose every value parses as a date becomes kind = "datetime" (bounds: first and last day);
    one whose dates fall outside what a datetime column holds stays categorical, with a review note saying so."""
    if c.kind != "categorical" or pd.api.types.is_numeric_dtype(col) or len(c.categories) <= MANY_CATEGORIES:
        return c
    span = _date_span(col)
    if span is None or not _in_datetime_range(span):
        return c
    first, last = span[0].floor("D"), span[1].floor("D") + pd.Timedelta(days=1)
    return ColumnSchema(c.name, "datetime", bounds=(first.strftime("%Y-%m-%d"), last.strftime("%Y-%m-%d")),
                        missing=c.missing)


def _date_span(col: pd.Series) -> tuple[pd.Timestamp, pd.Timestamp] | str | None:
    """(first, last) when every value of a text column parses as a date; "out" when they are dates pandas cannot
    hold at all; None when they are not dates."""
    try:
        when = pd.to_datetime(col.dropna().astype(str), format="mixed")
    except pd.errors.OutOfBoundsDatetime:
        return "out"
    except (TypeError, ValueError):
        return None
    return when.min(), when.max()


def _in_datetime_range(span: tuple[pd.Timestamp, pd.Timestamp] | str) -> bool:
    """Whether a datetime column (pandas' datetime64[ns]: 1677-09-22 to 2262-04-11) holds these dates."""
    return span != "out" and pd.Timestamp.min.ceil("D") <= span[0] and span[1] + pd.Timedelta(days=1) <= pd.Timestamp.max


def identifier_note(col: pd.Series) -> str | None:
    """Why a column read off the data is an identifier (IDs, names, e-mail addresses: text mostly distinct, or
    integers all distinct packed into about the row count), or None. A number that merely never repeats (a
    continuous salary) is no identifier: it is binned like any numeric column."""
    vals = col.dropna()
    numeric = pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col)
    integer = numeric and (pd.api.types.is_integer_dtype(vals) or bool(np.all(np.mod(vals, 1) == 0)))
    why = _identifier_reason(vals, numeric, integer, MANY_CATEGORIES)
    if why is not None and not numeric:   # dates that never repeat are a datetime column, binned
        if _date_span(vals) is not None:   # dates, even outside datetime64[ns] (the review note says so)
            return None
    return why


def _review_note(c: ColumnSchema, col: pd.Series) -> str | None:
    if c.kind == "datetime":
        return (f"dates: bounds {list(c.bounds)} were read off the data's first and last day (not DP): replace "
                "them by public ones (e.g. the study period)")
    if c.kind == "numeric":
        return (f"bounds {list(c.bounds)} were read off the data's min and max (not DP): replace them by public "
                "bounds (a legal or survey range); set clip = true to fold outliers in")
    if (len(c.categories) > MANY_CATEGORIES and not pd.api.types.is_numeric_dtype(col)
            and (span := _date_span(col)) is not None and not _in_datetime_range(span)):
        return (f"{len(c.categories)} values that read as dates, some outside what a datetime column holds, so it "
                f"stays categorical: {DATE_RANGE_NOTE}")
    if len(c.categories) > MANY_CATEGORIES:
        return (f"{len(c.categories)} categories read off the data (not DP): keep only a public list "
                "(rare values can single a person out), or declare missing = \"category\" for the rest")
    spelled = [v for v in c.categories if str(v) in CSV_NULLS]
    return ("categories read off the data (not DP): check them against a public list (a codebook)" + (
        f"; {spelled} are read as values (the run keeps a listed label a value): remove one that means missing"
        if spelled else ""))


def null_spelled_labels(path: Path) -> set[str]:
    """Values of text columns spelled like a missing value other than the empty cell ("None", "NA"): read as
    categories, so that the schema lists them and every reader (`csv_na_args`) then keeps them values."""
    raw = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[])
    std = pd.read_csv(path, **csv_na_args())
    spelled = [v for v in CSV_NULLS if v]
    return {v for c in std.columns if not pd.api.types.is_numeric_dtype(std[c])
            for v in raw[c][raw[c].isin(spelled)].unique().tolist()}


def read_for_review(path: Path) -> pd.DataFrame:
    """The CSV as the run will read it under the schema written from it (the one reading rule)."""
    return pd.read_csv(path, **csv_na_args(null_spelled_labels(path)))


def review_config(csv_path: str | Path, frame: pd.DataFrame | None = None) -> str:
    """The TOML text of a runnable config for `csv_path`, its inferred schema marked for review."""
    path = Path(csv_path)
    if frame is None:
        if not path.is_file():
            raise DataError(f"CSV {str(path)!r} does not exist")
        try:
            frame = read_for_review(path)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
            raise DataError(f"cannot read CSV {str(path)!r}: {exc}") from None
    frame.columns = [str(c) for c in frame.columns]
    # an identifier's values are never written (the config is shared): the column is left out, with a note
    ids = {str(c): why for c in frame.columns if (why := identifier_note(frame[c])) is not None}
    kept = frame[[c for c in frame.columns if c not in ids]]
    if len(kept.columns) < 2:
        raise DataError(f"CSV {str(path)!r} has {len(kept.columns)} column(s) besides its identifier(s) "
                        f"{sorted(ids)}; parties need at least two")
    read = TableSchema.infer(kept, identifiers="keep")
    schema = TableSchema(tuple(_as_datetime(c, frame[c.name]) for c in read.columns), inferred=True)
    names = schema.names
    half = (len(names) + 1) // 2
    lines = [f"# A config for {path.name}, its schema read off the data by `vertisynth init --from`.",
             "# The schema below is NOT DP yet: every line marked REVIEW needs a public decision. Then:",
             "#   vertisynth validate THIS_FILE && vertisynth run THIS_FILE",
             "seed = 0",
             "budget = { epsilon = 1.0, delta = 1e-5 }",
             "",
             "[dataset]",
             'name = "csv"',
             "",
             "[dataset.params]",
             f"path = {_toml_value(str(path))}",
             "",
             "[dataset.params.schema]"]
    for name, why in ids.items():
        lines.append(f"# REVIEW {name}: left out, an identifier ({why}); its values are not written here and it "
                     "is not synthesised. Align the parties on it (party_csv, id_column), or, if it is a real "
                     "attribute, declare it with a public category list (public = true)")
    reviewed = 0
    for c in schema.columns:
        note = _review_note(c, frame[c.name])
        if note:
            reviewed += 1
            lines.append(f"# REVIEW {c.name}: {note}")
        lines.append(_column_line(c))
    lines += ["",
              "# REVIEW parties: who holds which columns (here: the first and second half of the table)",
              "[[parties]]", 'name = "party1"', f"attributes = {_toml_value(names[:half])}",
              "", "[[parties]]", 'name = "party2"', f"attributes = {_toml_value(names[half:])}",
              "", "[synthesizer]", 'use = "vertimrf"',
              "", "[[evaluators]]", 'use = "tvd"', f"params = {{ ways = {[w for w in (2, 3) if w <= len(names)] or [1]} }}", ""]
    if len(names) < 2:
        raise DataError(f"CSV {str(path)!r} has {len(names)} column(s); parties need at least two")
    return "\n".join(lines)
