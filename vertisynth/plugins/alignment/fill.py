"""Synthetic fill after PSU: each party fills its attributes for the universal IDs it does not hold.

Strategies (seed 001, Section 2.4), all in code space and run by the party alone:
  sample    copy the whole attribute vector of a uniformly random real record of the same party (the
            seed's fea-sampling: filled rows look like real ones, which is what resists the spectral
            attack; no budget: the copied rows are the party's own, and the filled table only goes into
            the DP synthesizer, which accounts for every record it sees - see `docs/alignment.md`).
  marginal  draw every attribute independently from the party's DP 1-way marginals (Gaussian, charged).
  uniform   uniform codes: a comparison point only (like the seed's fea-random, easy to detect).
Per-column overrides for a label column: `constant` (a public value) and `majority` (the most frequent
value by a DP count, charged).

Effect on utility: a filled row pairs one party's real values with another party's unrelated ones, so
cross-party correlations are diluted by about the non-overlap fraction (|U| - |∩|) / |U|.
"""
from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence

import attrs
import numpy as np

from vertisynth.core.dataset import Dataset, VerticalPartition
from vertisynth.core.errors import ConfigError, DataError
from vertisynth.core.mechanisms import gaussian_mechanism
from vertisynth.core.noise import party_randomness
from vertisynth.core.privacy import Charge, PrivacyLedger, ZCDP

STRATEGIES = ("sample", "marginal", "uniform")
COLUMN_STRATEGIES = ("constant", "majority")
STAGE = "alignment"


@attrs.frozen
class ColumnFill:
    """strategy: constant (needs value, a label of the column) or majority (DP count)."""

    strategy: str
    value: str | None = None


def check_fill(strategy: str, columns: Mapping[str, ColumnFill]) -> None:
    if strategy not in STRATEGIES:
        raise ConfigError(f"unknown fill strategy {strategy!r}; choose from {', '.join(STRATEGIES)}")
    for col, spec in columns.items():
        if spec.strategy not in COLUMN_STRATEGIES:
            raise ConfigError(f"fill column {col!r}: unknown strategy {spec.strategy!r}; "
                              f"choose from {', '.join(COLUMN_STRATEGIES)}")
        if spec.strategy == "constant" and spec.value is None:
            raise ConfigError(f"fill column {col!r}: strategy 'constant' needs a value")


def dp_attributes(strategy: str, columns: Mapping[str, ColumnFill], partition: VerticalPartition) -> dict[str, list[str]]:
    """Per party, the attributes whose DP 1-way marginal the fill releases."""
    out: dict[str, list[str]] = {}
    for party in partition:
        attrs_ = [a for a in party.attributes
                  if (a in columns and columns[a].strategy == "majority")
                  or (a not in columns and strategy == "marginal")]
        if attrs_:
            out[party.name] = attrs_
    return out


def plan_charges(rho: float, dp_attrs: Mapping[str, Sequence[str]]) -> list[Charge]:
    """The 1-way marginals of d attributes have L2 sensitivity sqrt(d) (one person moves one count per
    attribute, whichever party holds it), so one σ for all: ρ = d/(2σ²), split by party in proportion."""
    d = sum(len(v) for v in dp_attrs.values())
    return [Charge(STAGE, "fill marginals (gaussian)", ZCDP(rho * len(v) / d), p) for p, v in dp_attrs.items()]


def fill_view(view: Dataset, positions: np.ndarray, n_u: int, strategy: str, columns: Mapping[str, ColumnFill],
              dp_attrs: Sequence[str], charge: Charge | None, ledger: PrivacyLedger, party: str,
              rng: np.random.Generator, max_copies: int = 1) -> Dataset:
    """A table over all `n_u` universal IDs: the party's row i at U position `positions[i]`, filled rows
    at the positions it does not hold.

    `charge` is this party's planned share of the fill budget (from `plan_charges`) for the DP 1-way marginals of `dp_attrs`
    (L2 sensitivity sqrt(len(dp_attrs)), so every party's marginals get the same σ)."""
    dom = view.domain
    positions = np.asarray(positions, dtype=np.int64)
    if (len(positions) != view.n or len(np.unique(positions)) != view.n
            or (view.n and not 0 <= positions.min() <= positions.max() < n_u)):
        raise DataError(f"party {party!r}: positions must place each of its {view.n} rows at a distinct U position")
    held = np.zeros(n_u, bool)
    held[positions] = True
    missing = ~held
    k = int(missing.sum())
    counts = np.concatenate([view.counts([a]).values.ravel() for a in dp_attrs]) if dp_attrs else None
    noisy = _noisy_marginals(dom, counts, dp_attrs, charge, ledger, rng)
    rng = party_randomness(rng, ledger.noise)   # secure noise: which rows are copied, and the draws, from the OS
    codes = np.zeros((n_u, len(dom)), dtype=view.codes.dtype)
    codes[positions] = view.codes   # row i goes where its identifier sits in U (not in row order)
    if k:
        if strategy == "sample":
            if view.n == 0:
                raise ConfigError(f"party {party!r} holds no records: 'sample' fill has nothing to copy")
            # without replacement (each record at most max_copies times): that bounds the group size
            pool = np.tile(np.arange(view.n), max_copies)
            codes[missing] = view.codes[pool[rng.permutation(len(pool))[:k]]]
        for j, a in enumerate(dom.attributes):
            spec = columns.get(a)
            if spec is not None and spec.strategy == "constant":
                codes[missing, j] = _code_of(dom, a, spec.value)
            elif spec is not None and spec.strategy == "majority":
                codes[missing, j] = int(np.argmax(noisy[a]))
            elif strategy == "marginal":
                p = np.clip(noisy[a], 0, None)
                p = p / p.sum() if p.sum() > 0 else np.full(dom.size(a), 1 / dom.size(a))
                codes[missing, j] = rng.choice(dom.size(a), size=k, p=p)
            elif strategy == "uniform":
                codes[missing, j] = rng.integers(0, dom.size(a), size=k)
    return Dataset(codes, dom)


def _noisy_marginals(dom, counts: np.ndarray | None, dp_attrs: Sequence[str], charge: Charge | None,
                     ledger: PrivacyLedger, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The DP 1-way marginals of `dp_attrs` from their exact counts (concatenated in that order)."""
    noisy: dict[str, np.ndarray] = {}
    if dp_attrs:  # released (and charged) even when nothing is missing: the spend must not depend on data
        noisy_all = gaussian_mechanism(counts, charge, rng, ledger, l2_sensitivity=math.sqrt(len(dp_attrs)))
        at = 0
        for a in dp_attrs:
            noisy[a] = noisy_all[at:at + dom.size(a)]
            at += dom.size(a)
    return noisy


class ChunkFill:
    """`fill_view` one block of U positions at a time, for a run that never holds the party's table over U
    (`stream = true`): `fill(s, e, codes, gather)` fills the positions of [s, e) the party does not hold, the
    same codes as rows s..e-1 of `fill_view`'s table under the same `rng`, whatever the blocks.

    `counts`: the exact 1-way counts of `dp_attrs` over the party's n records (summed over chunks), released
    as in `fill_view` (the same charge and noise). 'sample' draws its n_u-sized choice of source records
    once, as `fill_view` does, and `gather(records)` reads them (`records[i]`: what `gather` calls record i).
    'marginal' draws column by column in `fill_view`; a block jumps the generator to its own draws instead
    (PCG64's `advance`: one double per drawn code), so the codes equal the whole-table draw without
    generating it. 'uniform' draws integers by
    rejection (an unknown number of words per code), so it has no such jump: refused here."""

    def __init__(self, dom, n: int, positions: np.ndarray, n_u: int, strategy: str,
                 columns: Mapping[str, ColumnFill], dp_attrs: Sequence[str], charge: Charge | None,
                 ledger: PrivacyLedger, party: str, rng: np.random.Generator, counts: np.ndarray | None,
                 max_copies: int = 1, records: np.ndarray | None = None):
        positions = np.asarray(positions, dtype=np.int64)
        if strategy == "uniform":
            raise ConfigError("fill 'uniform' cannot be drawn in chunks equal to the whole-table draw; use "
                              "fill = 'marginal' or 'sample' with stream = true")
        if len(positions) != n or (n and not 0 <= positions.min() <= positions.max() < n_u):
            raise DataError(f"party {party!r}: positions must place each of its {n} rows at a distinct U position")
        self.held = np.zeros(n_u, bool)
        self.held[positions] = True
        if int(self.held.sum()) != n:
            raise DataError(f"party {party!r}: positions must place each of its {n} rows at a distinct U position")
        self.dom, self.strategy, self.columns = dom, strategy, dict(columns)
        self.k = n_u - n
        self.noisy = _noisy_marginals(dom, counts, dp_attrs, charge, ledger, rng)
        if ledger.noise == "secure":   # the chunks' draws jump ahead in one PCG64 stream: seeded from the OS
            rng = np.random.default_rng(int.from_bytes(os.urandom(32), "big"))
        self.source: np.ndarray | None = None
        if self.k and strategy == "sample":
            if n == 0:
                raise ConfigError(f"party {party!r} holds no records: 'sample' fill has nothing to copy")
            pool = np.tile(np.arange(n), max_copies)
            self.source = pool[rng.permutation(len(pool))[:self.k]]   # the record copied to each missing position
            if records is not None:   # the party's records as `gather` knows them (its file rows)
                self.source = np.asarray(records, dtype=np.int64)[self.source]
        self.probs: dict[str, np.ndarray] = {}
        if strategy == "marginal":
            for a in dom.attributes:
                if a not in self.columns:
                    p = np.clip(self.noisy[a], 0, None)
                    self.probs[a] = p / p.sum() if p.sum() > 0 else np.full(dom.size(a), 1 / dom.size(a))
            if self.probs and not hasattr(rng.bit_generator, "advance"):
                raise ConfigError(f"fill in chunks needs a generator that can jump ahead (PCG64), got "
                                  f"{type(rng.bit_generator).__name__}")
        self._bitgen, self._state = type(rng.bit_generator), rng.bit_generator.state
        self.constants = {a: _code_of(dom, a, spec.value) for a, spec in self.columns.items()   # checked now
                          if self.k and a in dom.attributes and spec.strategy == "constant"}
        self._at = (0, 0)   # (position, missing positions before it): consecutive blocks count from there

    def _missing_before(self, s: int) -> int:
        at, m = self._at
        return m if at == s else int(np.count_nonzero(~self.held[:s]))

    def _draws(self, offset: int) -> np.random.Generator:
        gen = self._bitgen(0)
        gen.state = self._state
        gen.advance(offset)
        return np.random.Generator(gen)

    def fill(self, s: int, e: int, codes: np.ndarray, gather) -> None:
        """Fill codes[i] for each position s + i of [s, e) the party does not hold (the held rows are left)."""
        miss = ~self.held[s:e]
        m = int(miss.sum())
        m0 = self._missing_before(s)
        self._at = (e, m0 + m)
        if not m:
            return
        if self.source is not None:
            codes[miss] = gather(self.source[m0:m0 + m])
        drawn = 0
        for j, a in enumerate(self.dom.attributes):
            spec = self.columns.get(a)
            if spec is not None and spec.strategy == "constant":
                codes[miss, j] = self.constants[a]
            elif spec is not None and spec.strategy == "majority":
                codes[miss, j] = int(np.argmax(self.noisy[a]))
            elif self.strategy == "marginal":   # fill_view's draw for column a starts drawn·k doubles in
                codes[miss, j] = self._draws(drawn * self.k + m0).choice(self.dom.size(a), size=m, p=self.probs[a])
                drawn += 1


def _code_of(dom, attr: str, value: str) -> int:
    labels = dom.labels.get(attr)
    if labels is not None and str(value) in labels:
        return labels.index(str(value))
    if labels is None and str(value).isdigit() and int(value) < dom.size(attr):
        return int(value)
    raise ConfigError(f"fill column {attr!r}: constant {value!r} is not one of its values "
                      f"{list(labels) if labels is not None else list(range(dom.size(attr)))}")
