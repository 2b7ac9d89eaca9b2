"""Raw tables ⇄ integer codes: categorical columns, binned numeric columns, explicit missing values.

Privacy of the schema: a column's categories and a numeric column's bounds are *public* facts here
(given in the config or by the dataset's documented schema). Two things would leak otherwise and
are handled explicitly:
  * `binning = "quantile"` places bin edges at quantiles of the data. Quantiles of raw data are
    not DP, so they are computed with the exponential mechanism (Smith 2011) inside public bounds,
    spending `quantile_epsilon` per column (pure ε, charged to the ledger's "preprocessing" stage).
  * `infer_schema` reads categories and bounds off the data. That is NOT DP; the pipeline says
    so in the report. Give a public schema for a DP guarantee on the schema too.
"""
from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from .dataset import Dataset
from .domain import Domain
from .errors import ConfigError, DataError, DomainError, InferredSchemaWarning, VertisynthWarning
from .noise import secure_gumbel, secure_uniform
from .privacy import Charge, PrivacyLedger, PureDP

if TYPE_CHECKING:   # pandas (with pyarrow, ≈ 0.4 CPU s to import) only where a table is read or built as a frame:
    import pandas as pd   # a codes-native run (the default job) never imports it (docs/speed.md, fifth pass)

MISSING_LABEL = "<missing>"
# pandas.read_csv's missing-value spellings: the in-memory readers and the streamed one (run/stream.py) see the
# same missing cells, and keep a schema's category label spelled like one ("None") a value
CSV_NULLS = ("", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "<NA>", "N/A",
             "NA", "NULL", "NaN", "None", "n/a", "nan", "null")


def csv_na_args(labels: Any = ()) -> dict[str, Any]:
    """pandas.read_csv arguments of the one CSV reading rule (every reader: run, init, evaluate, party files,
    the streamed reader): a cell spelled as in CSV_NULLS is missing, unless a schema lists that spelling as a
    category (`labels`: a TableSchema, or the labels themselves), which then stays a value."""
    if hasattr(labels, "columns"):
        labels = {str(x) for c in labels.columns if c.categories for x in c.categories}
    keep = {str(x) for x in labels}
    return {"keep_default_na": False, "na_values": [v for v in CSV_NULLS if v not in keep]}


PREPROCESSING_STAGE = "preprocessing"
# below this n·quantile_epsilon, DP quantiles inside wide bounds can miss badly (lognormal income, bounds [0, 1e6],
# 7 quantiles, 20 seeds, split recursively: n·ε 100 -> median edge 1.12x off typically, 43x at worst; 200 -> 1.48x
# at worst; 400 -> 1.09x. Drawn one by one at ε/7 each, as before: 100 -> 4.4x typically, 200 -> 2x at worst)
QUANTILE_MIN_N_EPSILON = 200


@attrs.frozen
class ColumnSchema:
    """Public description of one raw column.

    kind: "categorical" (needs `categories`), "numeric" (needs `bounds` or `edges`) or "datetime" (needs
          public `bounds` as ISO dates or times, e.g. ["2020-01-01", "2025-01-01"]; equal-width bins in time;
          decoded to dates when both bounds are midnights, else to seconds).
    bounds: [low, high], inclusive at both ends (the last bin is closed): a value equal to either encodes,
            and no decoded value leaves them.
    binning: "equal_width" (edges from public bounds), "quantile" (DP quantiles, costs budget)
             or "edges" (public edges given).
    missing: "error" (missing values are refused) or "category" (an explicit extra code).
    """

    name: str
    kind: str = attrs.field(validator=attrs.validators.in_(["categorical", "numeric", "datetime"]))
    categories: tuple[Any, ...] | None = attrs.field(default=None, converter=attrs.converters.optional(tuple))
    bins: int = 8
    binning: str = attrs.field(default="equal_width", validator=attrs.validators.in_(["equal_width", "quantile", "edges"]))
    bounds: tuple[float, float] | None = attrs.field(default=None, converter=attrs.converters.optional(tuple))
    edges: tuple[float, ...] | None = attrs.field(default=None, converter=attrs.converters.optional(tuple))
    integer: bool = False
    missing: str = attrs.field(default="error", validator=attrs.validators.in_(["error", "category"]))
    clip: bool = False
    quantile_epsilon: float = 0.0
    # categorical: the category list is public on purpose (a codebook), even when about as long as the table
    # (`identifier_list_error` refuses such a list otherwise: it would copy real identifiers into the output)
    public: bool = False
    # numeric, not integer: decoded values carry at most this many decimals (a point of the 10^-decimals grid
    # in the bin: 2 for money); unset: as few digits as the bin's width needs (DECODE_STEPS)
    decimals: int | None = None

    def __attrs_post_init__(self) -> None:
        where = f"column {self.name!r}"
        if self.decimals is not None and (self.kind != "numeric" or isinstance(self.decimals, bool)
                                          or not isinstance(self.decimals, int) or not 0 <= self.decimals <= 15):
            raise ConfigError(f"{where}: decimals applies to a numeric column and is a whole number from 0 to 15, "
                              f"got {self.decimals!r} on a {self.kind} column")
        if self.kind == "categorical":
            if not self.categories:
                raise ConfigError(f"{where}: a categorical column needs a non-empty list of categories")
            if len(set(map(str, self.categories))) != len(self.categories):
                raise ConfigError(f"{where}: categories repeat a value")
            return
        if self.kind == "datetime":
            if self.binning != "equal_width":
                raise ConfigError(f"{where}: a datetime column takes equal-width bins between public bounds, "
                                  f"not binning {self.binning!r}")
            if self.bounds is None or len(self.bounds) != 2:
                raise ConfigError(f"{where}: a datetime column needs public bounds [first, last], e.g. "
                                  '["2020-01-01", "2025-01-01"]')
            lo, hi = (_seconds_of(b, where) for b in self.bounds)
            if not lo < hi:
                raise ConfigError(f"{where}: datetime bounds must be increasing, got {list(self.bounds)}")
            if self.bins < 1:
                raise ConfigError(f"{where}: bins must be >= 1, got {self.bins}")
            return
        if self.binning == "edges":
            e = self.edges
            if not e or len(e) < 2 or any(not b > a for a, b in zip(e, e[1:])):
                raise ConfigError(f"{where}: edges must be at least two strictly increasing numbers")
        else:
            if self.bounds is None or len(self.bounds) != 2 or not self.bounds[0] < self.bounds[1]:
                raise ConfigError(f"{where}: numeric binning {self.binning!r} needs public bounds [low, high] with low < high")
            if self.bins < 1:
                raise ConfigError(f"{where}: bins must be >= 1, got {self.bins}")
        if self.binning == "quantile" and not self.quantile_epsilon > 0:
            raise ConfigError(
                f"{where}: quantile binning on raw data is not DP by itself; set quantile_epsilon > 0 "
                "(DP quantiles) or use binning = 'edges' with public edges"
            )

    def planned_charges(self) -> list[Charge]:
        if self.kind == "numeric" and self.binning == "quantile":
            return [Charge(PREPROCESSING_STAGE, "exponential_quantiles", PureDP(self.quantile_epsilon), None,
                           f"{self.bins - 1} DP quantiles of {self.name!r}")]
        return []


ID_LIST_MIN = 50   # categories: a longer list with at least one category per two rows looks like identifiers


def identifier_list_error(columns: Sequence[ColumnSchema], rows: int) -> DataError | None:
    """The one rule (run, validate, the API): a categorical column whose schema lists more than ID_LIST_MIN
    categories and at least one per two rows is an identifier list (init --from wrote every ID so before),
    refused unless declared `public = true`. None when no column is."""
    for c in columns:
        k = len(c.categories or ())
        if c.kind == "categorical" and not c.public and k > ID_LIST_MIN and rows > 0 and 2 * k >= rows:
            return DataError(f"column {c.name!r} lists {k} categories for {rows} rows: an identifier list? Its "
                             "synthetic values would be real ones. Drop the column, align on it (id_column), or, if "
                             "the list is public on purpose (a codebook), set public = true in its schema")
    return None


def dp_quantiles(values: np.ndarray, qs: Sequence[float], bounds: tuple[float, float], epsilon: float,
                 rng: np.random.Generator, secure: bool = False) -> np.ndarray:
    """ε-DP quantiles over a public range by recursive splitting (Kaplan, Schnapp and Stemmer, ICML 2022,
    "ApproximateQuantiles"): the middle quantile asked for is drawn by the exponential mechanism (Smith 2011),
    the values split at it, and each side's quantiles found the same way inside it, rescaled to that side.

    Privacy (add/remove neighbours): the calls of one recursion level read disjoint sets of values (split at
    public points already drawn), so a level costs ε/L for L = ⌈log₂(k + 1)⌉ levels, not ε/k per quantile as
    k independent draws would (on a lognormal income in [0, 1e6], n = 3,000, ε = 0.1, 7 quantiles, the mean
    largest rank error fell 0.158 → 0.070: docs/privacy.md). One quantile is Smith's mechanism at ε.
    """
    lo, hi = bounds
    x = np.sort(np.clip(np.asarray(values, float), lo, hi))
    levels = max(1, math.ceil(math.log2(len(qs) + 1)))
    out: list[float] = []
    _split_quantiles(x, [float(q) for q in qs], lo, hi, epsilon / levels, rng, secure, out)
    return np.sort(np.asarray(out, float))


def _split_quantiles(x: np.ndarray, qs: list[float], lo: float, hi: float, eps: float, rng: np.random.Generator,
                     secure: bool, out: list[float]) -> None:
    """Appends to `out` the quantiles `qs` (sorted, of the values `x`, sorted, inside [lo, hi]), middle first."""
    if not qs:
        return
    m = len(qs) // 2
    q = qs[m]
    v = _exponential_quantile(x, q, lo, hi, eps, rng, secure)
    cut = int(np.searchsorted(x, v, side="right"))
    out.append(v)
    # the recursion is at most ⌈log₂(k + 1)⌉ deep (k quantiles: a column's bins)
    _split_quantiles(x[:cut], [p / q for p in qs[:m]], lo, v, eps, rng, secure, out)
    _split_quantiles(x[cut:], [(p - q) / (1 - q) for p in qs[m + 1:]], v, hi, eps, rng, secure, out)


def _exponential_quantile(x: np.ndarray, q: float, lo: float, hi: float, eps: float, rng: np.random.Generator,
                          secure: bool) -> float:
    """Smith's ε-DP q-quantile of the sorted values `x` in [lo, hi]: the interval between the i-th and (i+1)-th
    value has utility −|i − q·n| (sensitivity 1) and is picked with probability ∝ width · exp(ε · utility / 2)
    (Gumbel-max), then a point in it uniformly."""
    pts = np.concatenate([[lo], x, [hi]])
    widths = np.diff(pts)
    with np.errstate(divide="ignore"):
        score = np.log(widths) - eps * np.abs(np.arange(len(widths)) - q * len(x)) / 2
    gumbel = secure_gumbel(score.shape) if secure else rng.gumbel(size=score.shape)
    i = int(np.argmax(score + gumbel))
    u = float(secure_uniform(1)[0]) if secure else rng.uniform()
    return float(pts[i] + u * (pts[i + 1] - pts[i]))


@attrs.frozen(eq=False)
class ColumnCodec:
    """How one column maps to codes: categories, or bin edges, plus the missing code if any."""

    schema: ColumnSchema
    labels: tuple[str, ...]
    edges: np.ndarray | None  # numeric only
    dtype: str

    @property
    def size(self) -> int:
        return len(self.labels)

    def encode(self, col: pd.Series) -> np.ndarray:
        import pandas as pd
        s = self.schema
        miss = col.isna().to_numpy()
        if miss.any() and s.missing == "error":
            raise DataError(
                f"column {s.name!r} has {int(miss.sum())} missing value(s) (first at row {int(np.argmax(miss))}); "
                f"declare missing = 'category' for this column or clean the data"
            )
        codes = np.empty(len(col), dtype=np.int64)
        if s.kind == "categorical":
            lookup = {str(c): i for i, c in enumerate(s.categories)}
            keys = col[~miss].astype(str)
            # one hash lookup per value (Series.map cast its result back value by value: most of a party's
            # first pass over its file, docs/scale.md)
            at = pd.Index(list(lookup)).get_indexer(keys)
            if (at < 0).any():
                unknown = sorted(set(keys[at < 0]))[:5]
                raise DomainError(
                    f"column {s.name!r} has value(s) {unknown} outside its declared categories {list(map(str, s.categories))[:20]}"
                )
            codes[~miss] = np.fromiter(lookup.values(), dtype=np.int64, count=len(lookup))[at]
        else:
            if s.kind == "datetime":
                try:
                    vals = _seconds(pd.to_datetime(col[~miss]))
                except pd.errors.OutOfBoundsDatetime as exc:
                    raise DomainError(f"datetime column {s.name!r} has a date outside the supported range ({exc}): "
                                      f"{_date_range_note()}") from None
                except (TypeError, ValueError) as exc:
                    raise DomainError(f"datetime column {s.name!r} has values that are not dates: {exc}") from None
            else:
                try:
                    vals = pd.to_numeric(col[~miss]).to_numpy(dtype=float)
                except (TypeError, ValueError) as exc:
                    raise DomainError(f"numeric column {s.name!r} has non-numeric values: {exc}") from None
            lo, hi = self.edges[0], self.edges[-1]
            out = (vals < lo) | (vals > hi)
            if out.any():
                if not s.clip:
                    bad = (col[~miss][out].astype(str) if s.kind == "datetime" else pd.Series(vals[out]))[:5].tolist()
                    shown = list(s.bounds) if s.kind == "datetime" else [lo, hi]
                    raise DomainError(
                        f"column {s.name!r} has value(s) {bad} outside its public range [{shown[0]}, {shown[1]}]; "
                        "widen the bounds or set clip = true"
                    )
                vals = np.clip(vals, lo, hi)
            nb = len(self.edges) - 1
            codes[~miss] = np.clip(np.searchsorted(self.edges, vals, side="right") - 1, 0, nb - 1)
        if s.missing == "category":
            codes[miss] = self.size - 1
        return codes

    @property
    def decodes_to_array(self) -> bool:
        """Whether `decode_array` can decode this column (no pandas): categories all of one plain type (str,
        int or float, not bool) or integer numbers, without a missing code. Known from the schema alone."""
        s = self.schema
        if s.missing == "category":
            return False
        if s.kind == "categorical":
            return _category_type(s.categories) is not None
        return s.kind == "numeric" and s.integer

    def decode_array(self, codes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """`decode`'s values as a numpy array (object array of str for text categories), drawing from `rng`
        exactly as `decode` does; only where `decodes_to_array`. `frame_values` turns it into `decode`'s Series."""
        s = self.schema
        if not self.decodes_to_array:
            raise ConfigError(f"column {s.name!r} decodes through pandas only (missing code, datetime, or mixed "
                              "categories)")
        if s.kind == "categorical":
            cats = np.array(list(s.categories), dtype=object if _category_type(s.categories) is str else None)
            return cats[np.minimum(codes, len(cats) - 1)]
        e = self.edges
        nb = len(e) - 1
        b = np.minimum(codes, nb - 1)
        lo, hi = e[b], e[b + 1]
        return self._integers_in_bins(b, lo, hi, nb, rng).astype(np.int64)

    def series_of(self, values: np.ndarray) -> pd.Series:
        """`decode_array`'s values as the Series `decode` returns (the same values, name and dtype)."""
        import pandas as pd
        s = self.schema
        if s.kind == "categorical":   # the categories carry the column's type (ints stay ints, labels stay strings)
            return pd.Series(values, name=s.name).astype(pd.Series(list(s.categories)).dtype)
        return pd.Series(values, name=s.name)

    @staticmethod
    def _integers_in_bins(b: np.ndarray, lo: np.ndarray, hi: np.ndarray, nb: int,
                          rng: np.random.Generator) -> np.ndarray:
        ilo = np.ceil(lo)
        ihi = np.where(b == nb - 1, np.floor(hi), np.ceil(hi) - 1)  # last bin is closed
        ihi = np.maximum(ihi, ilo)
        return np.floor(rng.uniform(ilo, ihi + 1)).clip(ilo, ihi)

    def decode(self, codes: np.ndarray, rng: np.random.Generator) -> pd.Series:
        if self.decodes_to_array:   # one code path with the pandas-free decode (the same values, bit for bit)
            return self.series_of(self.decode_array(codes, rng))
        import pandas as pd
        s = self.schema
        has_missing_code = s.missing == "category"
        miss = codes == self.size - 1 if has_missing_code else np.zeros(len(codes), bool)
        if s.kind == "categorical":
            # the categories carry the column's type (ints stay ints, labels stay strings)
            cats = pd.Series(list(s.categories))
            out = pd.Series(cats.to_numpy()[np.minimum(codes, len(cats) - 1)], name=s.name).astype(cats.dtype)
            if miss.any():
                out = out.astype(object if cats.dtype.kind not in "iu" else "Int64")
                out[miss] = None
            return out
        e = self.edges
        nb = len(e) - 1
        b = np.minimum(codes, nb - 1)
        lo, hi = e[b], e[b + 1]
        if s.kind == "datetime":
            when = pd.to_datetime(np.floor(rng.uniform(lo, hi)), unit="s")
            if all(pd.Timestamp(x) == pd.Timestamp(x).normalize() for x in s.bounds):
                when = when.normalize()   # bounds given as dates: decode to dates
            out = pd.Series(when, name=s.name)
            out[miss] = pd.NaT
            return out
        if s.integer:
            vals = self._integers_in_bins(b, lo, hi, nb, rng)
        elif s.decimals is not None:
            vals = _uniform_on_decimals(lo, hi, s.decimals, e[0], e[-1], rng)
        else:
            vals = _uniform_on_grid(lo, hi, rng)
        if miss.any():
            vals = vals.astype(float)
            vals[miss] = np.nan
            return pd.Series(vals, name=s.name).astype("Int64" if s.integer else float)
        return pd.Series(vals.astype(np.int64) if s.integer else vals, name=s.name)


DECODE_STEPS = 1000   # a decoded number is one of about this many evenly spaced values of its bin


def _uniform_on_grid(lo: np.ndarray, hi: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Uniform in [lo, hi) as a number with as few digits as the bin's width needs: a point of the grid of step
    10^(⌊log₁₀ width⌋ − 3) inside the bin (37.25, not 37.24981736512093). The edges are public, so this is
    post-processing; where no grid point falls in the bin (float edge cases) the plain uniform draw is kept."""
    width = hi - lo
    with np.errstate(divide="ignore", invalid="ignore"):
        exp = np.floor(np.log10(np.where(width > 0, width, 1.0))) - round(np.log10(DECODE_STEPS))
    exp = np.clip(exp, -15, 300)
    # an integer grid index g, then g / 10^d (or g · 10^e): dividing by an exact power of ten gives the double
    # nearest the decimal, which prints with at most d decimals
    scale = 10.0 ** np.abs(exp)
    to_grid = np.where(exp < 0, lo * scale, lo / scale)
    first = np.ceil(to_grid)
    last = np.ceil(np.where(exp < 0, hi * scale, hi / scale))   # exclusive
    g = first + np.floor(rng.random(len(lo)) * np.maximum(last - first, 1))
    vals = np.where(exp < 0, g / scale, g * scale)
    plain = ~((last > first) & (vals >= lo) & (vals < hi) & np.isfinite(vals))
    if plain.any():
        vals[plain] = rng.uniform(lo[plain], hi[plain])
    return vals


def _uniform_on_decimals(lo: np.ndarray, hi: np.ndarray, d: int, low: float, high: float,
                         rng: np.random.Generator) -> np.ndarray:
    """Uniform on the points with `d` decimals in [lo, hi) (the last bin: up to `high`); a bin narrower than
    that grid gets its nearest grid point, kept inside the column's bounds [low, high]."""
    scale = 10.0 ** d

    def grid(x: Any) -> Any:   # x·10^d, its float error (49986.93 · 100 = 4998692.999…) rounded away
        return np.round(np.asarray(x, float) * scale, 6)

    first = np.ceil(grid(lo))
    last = np.where(hi >= high, np.floor(grid(hi)) + 1, np.ceil(grid(hi)))   # exclusive
    g = np.where(last > first, first + np.floor(rng.random(len(lo)) * np.maximum(last - first, 1)),
                 np.round(rng.uniform(lo, hi) * scale))
    return np.clip(g, np.ceil(grid(low)), np.floor(grid(high))) / scale


@attrs.frozen(eq=False)
class TableCodec:
    """The fitted encoding of a whole table. `domain` is the domain of the codes."""

    columns: tuple[ColumnCodec, ...]

    @property
    def domain(self) -> Domain:
        return Domain(
            [c.schema.name for c in self.columns],
            [c.size for c in self.columns],
            {c.schema.name: c.labels for c in self.columns},
        )

    def encode(self, frame: pd.DataFrame) -> Dataset:
        if len(frame) == 0:
            raise DataError("the table is empty: there is nothing to synthesise")
        missing = [c.schema.name for c in self.columns if c.schema.name not in frame.columns]
        if missing:
            raise DataError(f"table lacks columns {missing}; it has {list(map(str, frame.columns))}")
        codes = np.column_stack([c.encode(frame[c.schema.name]) for c in self.columns])
        return Dataset(codes, self.domain)

    def decode(self, data: Dataset, rng: np.random.Generator) -> pd.DataFrame:
        arrays = self.decode_arrays(data, rng)
        if arrays is not None:
            return self.frame_of(arrays)
        import pandas as pd
        cols = {c.schema.name: c.decode(data.column(c.schema.name), rng) for c in self.columns}
        return pd.DataFrame(cols)

    def decode_arrays(self, data: Dataset, rng: np.random.Generator) -> dict[str, np.ndarray] | None:
        """`decode` without pandas: each column's values as a numpy array (the same draws from `rng`, in the
        same order), or None (and no draw) where a column needs pandas (`ColumnCodec.decodes_to_array`)."""
        if not all(c.decodes_to_array for c in self.columns):
            return None
        return {c.schema.name: c.decode_array(data.column(c.schema.name), rng) for c in self.columns}

    def frame_of(self, arrays: Mapping[str, np.ndarray]) -> pd.DataFrame:
        """`decode_arrays`' columns as the DataFrame `decode` returns."""
        import pandas as pd
        return pd.DataFrame({c.schema.name: c.series_of(arrays[c.schema.name]) for c in self.columns})


@attrs.frozen
class TableSchema:
    columns: tuple[ColumnSchema, ...] = attrs.field(converter=tuple)
    inferred: bool = False  # True when read off the data: the schema itself is then not DP

    def __attrs_post_init__(self) -> None:
        names = [c.name for c in self.columns]
        if len(set(names)) != len(names):
            raise ConfigError(f"schema lists a column twice: {sorted({n for n in names if names.count(n) > 1})}")
        if not names:
            raise ConfigError("schema has no columns")

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    def planned_charges(self) -> list[Charge]:
        return [ch for c in self.columns for ch in c.planned_charges()]

    def preview_domain(self) -> Domain:
        """The code domain, known before any data is read (sizes are public)."""
        sizes = []
        for c in self.columns:
            if c.kind == "categorical":
                k = len(c.categories)
            else:
                k = len(c.edges) - 1 if c.binning == "edges" else c.bins
            sizes.append(k + (1 if c.missing == "category" else 0))
        return Domain(self.names, sizes)

    def fit(self, frame: pd.DataFrame, ledger: PrivacyLedger | None, rng: np.random.Generator,
            release: bool = True) -> TableCodec:
        """`release`: the codec of a DP release (refuses an identifier list, `identifier_list_error`); False
        for scoring two given tables (evaluate), which releases nothing."""
        import pandas as pd
        err = identifier_list_error(self.columns, len(frame)) if release else None
        if err is not None:
            raise err
        out = []
        for c in self.columns:
            if c.name not in frame.columns:
                raise DataError(f"table lacks column {c.name!r}; it has {list(map(str, frame.columns))}")
            dtype = str(frame[c.name].dtype)
            if c.kind == "datetime":
                edges = np.linspace(*(_seconds_of(b, c.name) for b in c.bounds), c.bins + 1)
                labels = tuple(f"{pd.to_datetime(a, unit='s')} .. {pd.to_datetime(b, unit='s')}"
                               for a, b in zip(edges[:-1], edges[1:]))
            elif c.kind == "numeric" and c.binning not in ("edges", "equal_width"):
                if ledger is None:
                    raise DataError(f"column {c.name!r}: DP quantile binning needs a privacy ledger")
                for ch in c.planned_charges():
                    ledger.spend(ch)
                vals = pd.to_numeric(frame[c.name], errors="coerce").dropna().to_numpy(float)
                if len(vals) * c.quantile_epsilon < QUANTILE_MIN_N_EPSILON:
                    warnings.warn(
                        f"column {c.name!r}: DP-quantile bins from quantile_epsilon={c.quantile_epsilon:.3g} on "
                        f"{len(vals)} values (n·ε {len(vals) * c.quantile_epsilon:.0f} < {QUANTILE_MIN_N_EPSILON}) "
                        "can land far from the data (the exponential mechanism favours wide empty stretches of "
                        "the bounds); raise quantile_epsilon, tighten the bounds, or give public edges",
                        VertisynthWarning, stacklevel=2)
                inner = dp_quantiles(vals, np.arange(1, c.bins) / c.bins, c.bounds, c.quantile_epsilon, rng,
                                     secure=ledger.noise == "secure")
                edges = np.concatenate([[c.bounds[0]], inner, [c.bounds[1]]])
                labels = _bin_labels(edges, c.integer)
            else:
                labels, edges = _public_coding(c)
            if c.missing == "category":
                labels = labels + (MISSING_LABEL,)
            out.append(ColumnCodec(c, labels, edges, dtype))
        return TableCodec(tuple(out))

    @property
    def coding_is_public(self) -> bool:
        """Whether every column's coding follows from the schema alone (categories, public edges or equal-width
        bins; no DP quantiles, no datetimes), so that `fit_public` codes the table without reading it."""
        return all(c.kind == "categorical" or (c.kind == "numeric" and c.binning in ("edges", "equal_width"))
                   for c in self.columns)

    def fit_public(self, rows: int, dtypes: Mapping[str, str], release: bool = True) -> TableCodec:
        """`fit`'s codec for a table of `rows` rows whose columns have the pandas `dtypes` (what `fit` records
        from the frame), without the frame: where `coding_is_public`, the codec `fit` would give, as a
        codes-native dataset (the built-in census) hands its codes to the pipeline without a DataFrame."""
        if not self.coding_is_public:
            raise ConfigError("fit_public: a column's coding needs its values (DP quantiles or datetimes)")
        err = identifier_list_error(self.columns, rows) if release else None
        if err is not None:
            raise err
        out = []
        for c in self.columns:
            labels, edges = _public_coding(c)
            if c.missing == "category":
                labels = labels + (MISSING_LABEL,)
            out.append(ColumnCodec(c, labels, edges, dtypes[c.name]))
        return TableCodec(tuple(out))

    @classmethod
    def infer(cls, frame: pd.DataFrame, max_categories: int = 50, bins: int = 8,
              bounds: Mapping[str, Sequence[float]] | None = None, quantile_epsilon: float = 0.0,
              warn: bool = True, identifiers: str = "refuse") -> TableSchema:
        """Schema read off the data (NOT DP: reveals categories and ranges). For convenience only.

        A column that looks like an identifier (distinct values close to the row count) is refused: it would
        copy real IDs into the output. `bounds` names numeric columns whose range is public: they get
        `bins` DP-quantile bins, `quantile_epsilon` each (charged to the ledger); other numeric columns get
        equal-width bins over their observed min-max (not DP). `warn`: give an `InferredSchemaWarning`.
        `identifiers = "keep"` keeps identifier-like columns as categoricals (for a schema a person reviews).
        """
        import pandas as pd
        if len(frame) == 0:
            raise DataError("the table is empty: there is nothing to synthesise")
        bounds = dict(bounds or {})
        unknown = [b for b in bounds if b not in set(map(str, frame.columns))]
        if unknown:
            raise DataError(f"bounds given for column(s) {unknown} that the table does not have; it has "
                            f"{list(map(str, frame.columns))}")
        cols, observed_range = [], []
        for name in frame.columns:
            s = frame[name]
            missing = "category" if s.isna().any() else "error"
            vals = s.dropna()
            numeric = pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s)
            if len(vals) == 0:
                raise DataError(f"column {name!r} holds only missing values")
            integer = numeric and (pd.api.types.is_integer_dtype(vals) or bool(np.all(np.mod(vals, 1) == 0)))
            if str(name) in bounds:
                if not numeric:
                    raise DataError(f"bounds given for column {name!r}, which is not numeric ({s.dtype})")
                if not quantile_epsilon > 0:
                    raise ConfigError(f"column {name!r}: DP-quantile bins inside public bounds need quantile_epsilon > 0")
                try:
                    lo, hi = (float(v) for v in bounds[str(name)])
                except (TypeError, ValueError):
                    raise ConfigError(f"bounds of column {name!r} must be two numbers (low, high), "
                                      f"got {bounds[str(name)]!r}") from None
                cols.append(ColumnSchema(str(name), "numeric", bins=bins, binning="quantile", bounds=(lo, hi),
                                         integer=integer, missing=missing, quantile_epsilon=quantile_epsilon,
                                         decimals=None if integer else _decimals(vals.to_numpy(float))))
                continue
            reason = _identifier_reason(vals, numeric, integer, max_categories)
            if reason and identifiers != "keep":
                raise DataError(
                    f"column {name!r} looks like an identifier ({reason}): synthesising it would copy real IDs into "
                    f"the output. Drop it (df.drop(columns=[{str(name)!r}])), use it to match the parties' rows "
                    f"(synthesize(..., id_column={str(name)!r}), or the party_csv dataset), or, if it is a real "
                    "attribute, declare it in a public schema")
            if numeric and vals.nunique() > max_categories:
                lo, hi = float(vals.min()), float(vals.max())
                # bounds are inclusive at both ends (the last bin is closed): the data's own min and max, not max + 1
                cols.append(ColumnSchema(str(name), "numeric", bins=bins, bounds=(lo, hi),
                                         integer=integer, missing=missing,
                                         decimals=None if integer else _decimals(vals.to_numpy(float))))
                observed_range.append(str(name))
            else:
                cats = sorted(vals.unique().tolist(), key=lambda v: (str(type(v)), v))
                cols.append(ColumnSchema(str(name), "categorical", categories=tuple(cats), missing=missing))
        schema = cls(tuple(cols), inferred=len(bounds) < len(cols))
        if warn and schema.inferred:
            warnings.warn(inferred_schema_message(schema, observed_range), InferredSchemaWarning, stacklevel=2)
        return schema

    @classmethod
    def infer_parts(cls, frames: Sequence[pd.DataFrame], bounds: Mapping[str, Sequence[float]] | None = None,
                    warn: bool = True, **kw: Any) -> TableSchema:
        """One schema from tables with different rows and disjoint columns (ID-keyed parties), each read
        off its own rows (NOT DP)."""
        bounds = dict(bounds or {})
        names = {str(c) for f in frames for c in f.columns}
        unknown = [b for b in bounds if b not in names]
        if unknown:
            raise DataError(f"bounds given for column(s) {unknown} that no party's table has")
        parts = [cls.infer(f, bounds={k: v for k, v in bounds.items() if k in set(map(str, f.columns))}, warn=False,
                           **kw) for f in frames]
        schema = cls(tuple(c for p in parts for c in p.columns), inferred=any(p.inferred for p in parts))
        if warn and schema.inferred:
            observed = [c.name for c in schema.columns if c.kind == "numeric" and c.binning == "equal_width"]
            warnings.warn(inferred_schema_message(schema, observed), InferredSchemaWarning, stacklevel=2)
        return schema

    @classmethod
    def from_config(cls, columns: Mapping[str, Mapping[str, Any]]) -> TableSchema:
        out = []
        allowed = {f.name for f in attrs.fields(ColumnSchema)} - {"name"}
        for name, spec in columns.items():
            unknown = set(spec) - allowed
            if unknown:
                raise ConfigError(f"schema column {name!r}: unknown key(s) {sorted(unknown)}; valid: {sorted(allowed)}")
            try:
                out.append(ColumnSchema(name=name, **spec))
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"schema column {name!r}: {exc}") from None
        return cls(tuple(out))

    def to_dict(self) -> dict[str, Any]:
        return {c.name: {k: v for k, v in attrs.asdict(c).items() if k != "name"} for c in self.columns}


def _seconds(values: pd.Series | pd.DatetimeIndex) -> np.ndarray:
    """Seconds since 1970 as floats (exact to the microsecond for today's dates)."""
    import pandas as pd
    stamps = pd.DatetimeIndex(values)
    if stamps.tz is not None:
        stamps = stamps.tz_convert("UTC").tz_localize(None)
    return (stamps - pd.Timestamp(0)) / pd.Timedelta(seconds=1)


def _date_range_note() -> str:
    """pandas' datetime64[ns]: the dates a datetime column can hold."""
    import pandas as pd
    return (f"datetime columns hold dates from {pd.Timestamp.min.ceil('D'):%Y-%m-%d} to "
            f"{pd.Timestamp.max:%Y-%m-%d} (pandas' datetime64[ns]); for others declare the column numeric "
            "(e.g. the year) or categorical")


def __getattr__(name: str) -> Any:   # DATE_RANGE_NOTE is read off pandas, which this module imports only when used
    if name == "DATE_RANGE_NOTE":
        return _date_range_note()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _category_type(categories: Sequence[Any]) -> type | None:
    """str, int or float when every category is of that one type (int: within int64; bool is not int here),
    else None: the categories numpy holds as pandas does (an object array of str, int64, float64)."""
    kinds = {type(c) for c in categories}
    if len(kinds) != 1:
        return None
    kind = kinds.pop()
    if kind is int:
        return int if np.asarray(list(categories)).dtype == np.int64 else None
    return kind if kind in (str, float) else None


def decoded_dtypes(schema: TableSchema) -> dict[str, str]:
    """The pandas dtype name of each column of the frame `TableCodec.decode` gives (what `fit` records from such
    a frame), without pandas, for a schema whose every column `decode_array` decodes: int64 for integers and
    integer categories, float64 for float categories, pandas' default string dtype for text ("str" from
    pandas 3 on, "object" before)."""
    out = {}
    for c in schema.columns:
        kind = (_category_type(c.categories) if c.kind == "categorical" else
                int if c.kind == "numeric" and c.integer else None)
        if kind is None or c.missing == "category":
            raise ConfigError(f"decoded_dtypes: column {c.name!r} decodes through pandas only")
        out[c.name] = {int: "int64", float: "float64", str: _pandas_str_dtype()}[kind]
    return out


@functools.lru_cache(maxsize=1)
def _pandas_str_dtype() -> str:
    from importlib.metadata import version
    return "str" if int(version("pandas").split(".")[0]) >= 3 else "object"


def _seconds_of(value: Any, where: str) -> float:
    import pandas as pd
    try:
        return float(_seconds(pd.DatetimeIndex([pd.Timestamp(value)]))[0])
    except pd.errors.OutOfBoundsDatetime:
        raise ConfigError(f"{where}: datetime bound {value!r} is outside the supported range: "
                          f"{_date_range_note()}") from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: datetime bound {value!r} is not a date or time ({exc})") from None


def _decimals(vals: np.ndarray) -> int | None:
    """The fewest decimals (up to 6) that write every value as read (2 for money), or None."""
    for d in range(7):
        if np.all(np.abs(np.round(vals, d) - vals) <= 1e-9 * np.maximum(1.0, np.abs(vals))):
            return d
    return None


def _public_coding(c: ColumnSchema) -> tuple[tuple[str, ...], np.ndarray | None]:
    """The labels and edges of a column whose coding the schema fixes (categories, public or equal-width edges)."""
    if c.kind == "categorical":
        return tuple(str(x) for x in c.categories), None
    edges = np.asarray(c.edges, float) if c.binning == "edges" else np.linspace(c.bounds[0], c.bounds[1], c.bins + 1)
    return _bin_labels(edges, c.integer), edges


def _bin_labels(edges: np.ndarray, integer: bool) -> tuple[str, ...]:
    return tuple(_bin_label(a, b, integer, last=i == len(edges) - 2) for i, (a, b) in enumerate(zip(edges[:-1], edges[1:])))


def _bin_label(a: float, b: float, integer: bool, last: bool = False) -> str:
    """'[a, b)'; the last bin is closed, as the bounds are: '[a, b]'."""
    if integer:
        return f"[{math.ceil(a)}, {math.floor(b)}]" if last else f"[{math.ceil(a)}, {math.ceil(b)})"
    return f"[{a:.4g}, {b:.4g}" + ("]" if last else ")")


def _identifier_reason(vals: pd.Series, numeric: bool, integer: bool, max_categories: int) -> str | None:
    """Why a column looks like an identifier (IDs, e-mail addresses, names), or None. Text with distinct values
    for most rows, or integers all distinct and packed into a range about the row count (1..n style)."""
    n, k = len(vals), int(vals.nunique())
    if k <= max_categories:
        return None
    if not numeric and k > n / 2:
        return f"{k} distinct values in {n} rows"
    if integer and k == n and float(vals.max()) - float(vals.min()) < 2 * n:
        return f"{k} distinct integers in {n} rows, from {vals.min()} to {vals.max()}"
    return None


def inferred_schema_message(schema: TableSchema, observed_range: Sequence[str]) -> str:
    """The warning for a schema read off the data: what is not DP, and what to do about it."""
    read = [c.name for c in schema.columns if not (c.kind == "numeric" and c.binning == "quantile")]
    msg = (f"the schema of column(s) {read} was read off the data (categories, ranges): it is NOT covered by the DP "
           "guarantee; pass a public schema for a DP guarantee on the schema too")
    if observed_range:
        msg += (f". Numeric column(s) {list(observed_range)} were cut into equal-width bins over their observed "
                "min-max (not DP, and a skewed column loses its shape): declare their public bounds (synthesize("
                "bounds={name: (low, high)}), or `bounds` in the csv dataset's params) to get DP-quantile bins")
    return msg
