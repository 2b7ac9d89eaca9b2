"""Horizontal custodians (seed 004): same columns, different people; one run of preprocess → measure → fit.

  * Custodians: raw tables with the same columns (checked: a different schema is a DataError naming it),
    read from CSVs or simulated by splitting one table ("random", or "sorted:<col>" for custodians whose
    populations differ, as hospitals' do).
  * Preprocessing: numeric columns are binned at DP quantiles inside public bounds, either over the combined
    data (secure aggregation of fine-grid histograms, `preprocessing.combined_quantile_binning`) or by each
    custodian alone ("local", the paper's Table 1 baseline: bin k then means different things at different
    custodians). De-binning maps a bin to its DP mean (the paper) or to a uniform value inside it.
    Local binning: every custodian releases its own edges and means with the same ρ; custodians hold
    disjoint people, so by parallel composition the whole costs that ρ once.
  * Measurement: each custodian counts the synthesizer's marginal queries (MarginalQuery) on its own codes,
    secret-shares them to the servers, each server adds its own Gaussian noise, and only the noisy total is
    reconstructed (secure_aggregation). The synthesizer then fits on those answers (MeasuresMarginals):
    no one ever holds the joined table or a custodian's marginal in the clear.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs
import numpy as np
import pandas as pd

from vertisynth.core import progress
from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.encoding import TableCodec
from vertisynth.core.errors import ConfigError, DataError
from vertisynth.core.interfaces import MarginalQuery, MeasuresMarginals
from vertisynth.core.mechanisms import gaussian_sigma
from vertisynth.core.privacy import Budget, Charge, PrivacyLedger

from .preprocessing import QuantileBinningPlan, _secure_sum, combined_quantile_binning
from .secure_aggregation import Transport, as_transport, planned_charge

LOCAL_NOTE = "local binning: each custodian releases with this ρ; disjoint custodians compose in parallel"


# -- custodians ------------------------------------------------------------------------------------
def stack(parts: Sequence[Dataset]) -> Dataset:
    """The custodians' code tables one under the other (evaluation only: the protocol never does this)."""
    return Dataset(np.concatenate([p.codes for p in parts]), parts[0].domain)


def check_custodians(frames: Mapping[str, pd.DataFrame], columns: Sequence[str]) -> None:
    """Every custodian must hold exactly the schema's columns (horizontal partitioning) and some rows."""
    want = list(columns)
    for name, f in frames.items():
        have = [str(c) for c in f.columns]
        missing, extra = [c for c in want if c not in have], [c for c in have if c not in want]
        if missing or extra:
            raise DataError(f"custodian {name!r} has a different schema: "
                            + "; ".join(p for p in (f"lacks {missing}" if missing else "",
                                                    f"has extra columns {extra}" if extra else "") if p)
                            + f". Horizontal custodians must hold the same columns: {want}")
        if len(f) == 0:
            raise DataError(f"custodian {name!r} holds no rows")


def simulate_custodians(frame: pd.DataFrame, count: int, split: str, rng: np.random.Generator) -> dict[str, pd.DataFrame]:
    """Split one table's rows among `count` custodians: at random, or "sorted:<col>" (contiguous slices of
    the rows ordered by that column, ties in random order) for custodians with different populations."""
    n = len(frame)
    if n < count:
        raise DataError(f"cannot split {n} records among {count} custodians")
    order = rng.permutation(n)
    if split.startswith("sorted:"):
        col = split.split(":", 1)[1]
        if col not in frame.columns:
            raise ConfigError(f"collab.split: column {col!r} is not in the data; columns: {list(frame.columns)}")
        key = frame[col].iloc[order]
        num = pd.to_numeric(key, errors="coerce")   # numbers sort as numbers ("10" after "9")
        rank = num.to_numpy(float) if not num.isna().any() else pd.factorize(key, sort=True)[0]
        order = order[np.argsort(rank, kind="stable")]
    return {f"custodian{j + 1}": frame.iloc[np.sort(part) if split == "random" else part].reset_index(drop=True)
            for j, part in enumerate(np.array_split(order, count))}


# -- preprocessing and its codec -------------------------------------------------------------------
def binning_plans(numeric: Mapping[str, Sequence[float]], bins: int, rho: float, debinning: str) -> list[QuantileBinningPlan]:
    """ρ split evenly over the numeric columns; with mean de-binning half of each column's share pays for
    the bin counts and sums."""
    if not numeric:
        return []
    each = rho / len(numeric)
    means = each / 2 if debinning == "mean" else 0.0
    return [QuantileBinningPlan(c, (float(b[0]), float(b[1])), bins, each - means, means) for c, b in numeric.items()]


def preprocessing_charges(plans: Sequence[QuantileBinningPlan], local: bool) -> list[Charge]:
    out = [ch for p in plans for ch in p.charges()]
    return [attrs.evolve(ch, note=LOCAL_NOTE) for ch in out] if local else out


@attrs.frozen(eq=False)
class NumericBins:
    """DP edges and bin means of one column: one row per custodian under local binning, else one row."""

    edges: np.ndarray   # (k, bins + 1)
    means: np.ndarray   # (k, bins)
    owners: tuple[str, ...] | None = None  # custodian of each row (local binning)

    def row(self, custodian: str) -> int:
        return 0 if self.owners is None else self.owners.index(custodian)


@attrs.frozen(eq=False)
class HorizontalCodec:
    """Raw rows ⇄ codes of the binned domain. `base` is the dataset's public codec: categorical columns keep
    its codes, and decoded values come back in its raw format (so synthetic and real tables compare in the
    same public domain whatever the binning was)."""

    base: TableCodec
    numeric: dict[str, NumericBins]
    debinning: str

    @property
    def domain(self) -> Domain:
        base = self.base.domain
        sizes = [self.numeric[a].means.shape[1] if a in self.numeric else base.size(a) for a in base.attributes]
        labels = {}
        for a in base.attributes:
            if a in self.numeric and self.numeric[a].owners is None:
                e = self.numeric[a].edges[0]
                labels[a] = tuple(f"[{x:.4g}, {y:.4g})" for x, y in zip(e[:-1], e[1:]))
            elif a in self.numeric:
                labels[a] = tuple(f"local bin {k}" for k in range(sizes[base.attributes.index(a)]))
            else:
                labels[a] = base.labels[a]
        return Domain(list(base.attributes), sizes, labels)

    def encode(self, frame: pd.DataFrame, custodian: str) -> Dataset:
        cols = []
        for c in self.base.columns:
            name = c.schema.name
            if name in self.numeric:
                nb = self.numeric[name]
                e = nb.edges[nb.row(custodian)]
                v = numeric_values(frame[name], name)
                cols.append(np.clip(np.searchsorted(e, v, side="right") - 1, 0, len(e) - 2))
            else:
                cols.append(c.encode(frame[name]))
        return Dataset(np.column_stack(cols).astype(np.int64), self.domain)

    def decode(self, data: Dataset, rng: np.random.Generator) -> pd.DataFrame:
        """Raw-looking rows in the dataset's own format: numeric bins → DP mean (or uniform in the bin; local
        binning averages the custodians' means and edges), then the nearest value the base schema allows."""
        out = {}
        for c in self.base.columns:
            name = c.schema.name
            codes = data.column(name)
            if name not in self.numeric:
                out[name] = c.decode(codes, rng)
                continue
            nb = self.numeric[name]
            if self.debinning == "mean":
                vals = nb.means.mean(axis=0)[codes]
            else:
                e = nb.edges.mean(axis=0)
                vals = rng.uniform(e[codes], e[codes + 1])
            out[name] = to_base_format(c, vals)
        return pd.DataFrame(out)


def numeric_values(col: pd.Series, name: str) -> np.ndarray:
    v = pd.to_numeric(col, errors="coerce").to_numpy(float)
    if np.isnan(v).any():
        raise DataError(f"numeric column {name!r} has missing or non-numeric values (first at row {int(np.argmax(np.isnan(v)))})")
    return v


def to_base_format(codec_col, values: np.ndarray) -> pd.Series:
    """Map de-binned numbers into the base schema: nearest category for numeric-valued categories, else
    clipped to the public range (rounded for integer columns)."""
    s = codec_col.schema
    if s.kind == "categorical":
        cats = np.array([float(x) for x in s.categories])
        idx = np.abs(values[:, None] - cats[None, :]).argmin(axis=1)
        return pd.Series(np.asarray(s.categories, dtype=object)[idx], name=s.name)
    e = codec_col.edges
    v = np.clip(values, e[0], e[-1])
    return pd.Series(np.rint(v).astype(np.int64) if s.integer else v, name=s.name)


def check_numeric_schema(base_columns, numeric: Mapping[str, Sequence[float]]) -> None:
    """Columns binned here must exist; categorical ones need numeric category values (e.g. Adult's ordinal
    codes "0".."15") so a de-binned mean maps back to the nearest category."""
    by_name = {c.name: c for c in base_columns}
    for name in numeric:
        if name not in by_name:
            raise ConfigError(f"collab.numeric: column {name!r} is not in the dataset; columns: {list(by_name)}")
        c = by_name[name]
        if c.kind == "categorical":
            try:
                values = [float(x) for x in c.categories]
            except (TypeError, ValueError):
                raise ConfigError(f"collab.numeric: column {name!r} is categorical with non-numeric categories "
                                  f"{list(c.categories)[:5]}; only numeric values can be binned at quantiles") from None
            lo, hi = (float(b) for b in numeric[name])
            if min(values) < lo or max(values) > hi:   # e.g. raw-age bounds on a coded age: all would clamp
                raise ConfigError(f"collab.numeric.{name}: the public bounds {[lo, hi]} do not cover the column's "
                                  f"public values {min(values):g} .. {max(values):g}; give bounds in the column's "
                                  "own units (a coded column needs bounds on its codes)")


def check_within_bounds(values: np.ndarray, name: str, bounds: Sequence[float]) -> np.ndarray:
    """Values outside the public bounds are refused, as the csv dataset does: clamping them would move them
    silently to the edge bins."""
    lo, hi = float(bounds[0]), float(bounds[1])
    out = (values < lo) | (values > hi)
    if out.any():
        raise DataError(f"column {name!r} has value(s) {values[out][:5].tolist()} outside its public bounds "
                        f"{[lo, hi]} ({int(out.sum())} of {len(values)} rows); widen collab.numeric.{name}")
    return values


def fit_binning(base: TableCodec, frames: Mapping[str, pd.DataFrame], plans: Sequence[QuantileBinningPlan],
                local: bool, debinning: str, servers: int, ledger: PrivacyLedger,
                rng: np.random.Generator | Transport) -> HorizontalCodec:
    """DP bin edges and means for every numeric column; spends the planned preprocessing charges."""
    rng = as_transport(rng, servers)
    numeric = {}
    for p in plans:
        values = {name: check_within_bounds(numeric_values(f[p.column], p.column), p.column, p.bounds)
                  for name, f in frames.items()}
        if not local:
            e, m = combined_quantile_binning(p, values, ledger, rng, servers)
            numeric[p.column] = NumericBins(e[None, :], m[None, :])
            continue
        rows = []
        for name, v in values.items():   # each custodian alone, on its own scratch ledger
            scratch = scratch_ledger(p.charges())
            # a custodian's own rounds: its name scopes the query, so no two custodians share noise
            rows.append(combined_quantile_binning(p, {name: v}, scratch, rng.scoped(f"local:{name}:"), servers))
        for ch in preprocessing_charges([p], local=True):
            ledger.spend(ch)   # once: parallel composition over disjoint custodians
        numeric[p.column] = NumericBins(np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows]), tuple(values))
    return HorizontalCodec(base, numeric, debinning)


def scratch_ledger(charges: Sequence[Charge]) -> PrivacyLedger:
    """A ledger that only checks a sub-run spends exactly what it planned; its cost is accounted elsewhere
    (parallel composition, or a tuning theorem)."""
    ledger = PrivacyLedger(Budget(1e9, 0.5))
    ledger.plan(charges)
    return ledger


# -- measurement by secure aggregation ---------------------------------------------------------------
def query_charges(queries: Sequence[MarginalQuery]) -> list[Charge]:
    return [planned_charge(q.name, gaussian_sigma(q.rho, q.l2_sensitivity), q.l2_sensitivity) for q in queries]


def secure_measure(queries: Sequence[MarginalQuery], codes: Mapping[str, Dataset], servers: int,
                   ledger: PrivacyLedger, rng: np.random.Generator | Transport) -> tuple[list[np.ndarray], list[float]]:
    """Each query's noisy concatenated counts over all custodians, and the per-cell noise variance S·σ²."""
    rng = as_transport(rng, servers)
    answers, variances = [], []
    for i, q in enumerate(queries):
        progress.step("secure aggregation rounds", i + 1, len(queries))
        per = {name: np.concatenate([ds.counts(list(m)).values.ravel() for m in q.marginals]).astype(np.int64)
               for name, ds in codes.items()}
        sigma = gaussian_sigma(q.rho, q.l2_sensitivity)
        answers.append(_secure_sum(q.name, per, sigma, servers, rng, ledger, q.l2_sensitivity).astype(float))
        variances.append(servers * sigma**2)
    return answers, variances


def measure_horizontal(synth: MeasuresMarginals, base: TableCodec, frames: Mapping[str, pd.DataFrame],
                       plans: Sequence[QuantileBinningPlan], local: bool, debinning: str, rho_synth: float,
                       servers: int, ledger: PrivacyLedger, transport: Transport):
    """The protocol's rounds (DP binning, then secure measurement of the synthesizer's queries), the same code
    in every role: the one-process simulation passes every custodian's rows and an in-memory transport; a
    separate process passes its own rows (a custodian) or empty tables (servers, the publisher) and a file
    transport. Returns the codec, the queries and their noisy answers and variances."""
    codec = fit_binning(base, frames, plans, local, debinning, servers, ledger, transport)
    codes = {name: codec.encode(f, name) for name, f in frames.items()}
    queries = synth.marginal_queries(codec.domain, rho_synth)
    answers, variances = secure_measure(queries, codes, servers, ledger, transport.scoped("measure:"))
    return codec, queries, answers, variances


def fit_horizontal(synth: MeasuresMarginals, base: TableCodec, frames: Mapping[str, pd.DataFrame],
                   plans: Sequence[QuantileBinningPlan], local: bool, debinning: str, rho_synth: float,
                   servers: int, ledger: PrivacyLedger, rng: np.random.Generator,
                   transport: Transport | None = None) -> tuple[HorizontalCodec, list[MarginalQuery]]:
    """One complete run: DP binning, secure measurement of the synthesizer's queries, fit. Spends exactly
    `run_charges(...)` of the same arguments. Without a transport, the secure sums' randomness is derived
    from one draw of `rng`; the fit then uses `rng`."""
    transport = as_transport(rng, servers) if transport is None else transport
    codec, queries, answers, variances = measure_horizontal(synth, base, frames, plans, local, debinning, rho_synth,
                                                            servers, ledger, transport)
    synth.fit_marginals(codec.domain, queries, answers, variances, rng)
    return codec, queries


def run_charges(synth: MeasuresMarginals, preview: Domain, plans: Sequence[QuantileBinningPlan], local: bool,
                rho_synth: float) -> list[Charge]:
    """What `fit_horizontal` spends, from public facts only (the binned domain's sizes are public)."""
    return preprocessing_charges(plans, local) + query_charges(synth.marginal_queries(preview, rho_synth))


def binned_preview(base_domain: Domain, numeric: Mapping[str, Sequence[float]], bins: int) -> Domain:
    return Domain(list(base_domain.attributes), [bins if a in numeric else base_domain.size(a)
                                                  for a in base_domain.attributes])


@attrs.frozen(eq=False)
class HorizontalRun:
    """Everything public a run needs besides the rows, its budgets and its hyperparameters: so the final
    run and every tuning fold run are the same code. `make_synth(params)` builds a synthesizer with the
    config's params updated by `params`; the special key "bins" sets the number of quantile bins."""

    base: TableCodec
    numeric: Mapping[str, Sequence[float]]
    bins: int
    local: bool
    debinning: str
    servers: int
    make_synth: object  # Callable[[dict], MeasuresMarginals]

    def _split(self, params: Mapping[str, object]) -> tuple[int, dict]:
        rest = {k: v for k, v in params.items() if k != "bins"}
        return int(params.get("bins", self.bins)), rest

    def charges(self, params: Mapping[str, object], rho_pre: float, rho_synth: float) -> list[Charge]:
        bins, rest = self._split(params)
        plans = binning_plans(self.numeric, bins, rho_pre, self.debinning)
        preview = binned_preview(self.base.domain, self.numeric, bins)
        return run_charges(self.make_synth(rest), preview, plans, self.local, rho_synth)

    def fit(self, frames: Mapping[str, pd.DataFrame], params: Mapping[str, object], rho_pre: float,
            rho_synth: float, ledger: PrivacyLedger, rng: np.random.Generator, transport: Transport | None = None):
        bins, rest = self._split(params)
        synth = self.make_synth(rest)
        plans = binning_plans(self.numeric, bins, rho_pre, self.debinning)
        codec, _ = fit_horizontal(synth, self.base, frames, plans, self.local, self.debinning, rho_synth,
                                  self.servers, ledger, rng, transport)
        return codec, synth

    def measure(self, frames: Mapping[str, pd.DataFrame], params: Mapping[str, object], rho_pre: float,
                rho_synth: float, ledger: PrivacyLedger, transport: Transport):
        """The rounds of `fit` without the final fit: (synthesizer, codec, queries, answers, variances)."""
        bins, rest = self._split(params)
        synth = self.make_synth(rest)
        plans = binning_plans(self.numeric, bins, rho_pre, self.debinning)
        return (synth, *measure_horizontal(synth, self.base, frames, plans, self.local, self.debinning, rho_synth,
                                           self.servers, ledger, transport))

