"""Hypothesis strategies for DP components: domains, datasets, neighbouring pairs, vertical
partitions, party ID sets with controlled overlap, and budgets.

The unit of privacy is one person's whole record across all parties (DESIGN.md), so a neighbouring
pair adds/removes one full row (`add_remove`) or replaces one full row (`substitute`).
`adversarial_pairs` lists the pairs most likely to expose a bug and is what the auditor tries first:
an empty table vs one record in a (rare) cell, and one record changed in every attribute.
`neighbouring_pairs` draws from those before random pairs (Hypothesis shrinks towards them too).
"""
from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np
from hypothesis import strategies as st

from vertisynth.core.dataset import Dataset, VerticalPartition
from vertisynth.core.domain import Domain
from vertisynth.core.errors import ConfigError
from vertisynth.core.privacy import Budget

from .audit import NeighbourPair

RELATIONS = ("add_remove", "substitute")


# -- domains and datasets -----------------------------------------------------------------------
@st.composite
def domains(draw, min_attributes: int = 1, max_attributes: int = 5, min_size: int = 1, max_size: int = 6,
            max_cells: int = 10_000) -> Domain:
    """A Domain with attributes a0, a1, ... of sizes in [min_size, max_size], at most `max_cells` cells."""
    if not 1 <= min_attributes <= max_attributes or not 1 <= min_size <= max_size:
        raise ConfigError("domains(): need 1 <= min_attributes <= max_attributes and 1 <= min_size <= max_size")
    d = draw(st.integers(min_attributes, max_attributes))
    sizes: list[int] = []
    for _ in range(d):
        cap = max(min_size, min(max_size, max_cells // max(1, int(np.prod(sizes, dtype=np.int64)))))
        sizes.append(draw(st.integers(min_size, cap)))
    return Domain(tuple(f"a{i}" for i in range(d)), tuple(sizes))


def _records(domain: Domain, n: int) -> st.SearchStrategy[np.ndarray]:
    cols = [st.lists(st.integers(0, s - 1), min_size=n, max_size=n) for s in domain.shape]
    return st.tuples(*cols).map(lambda cs: np.array(cs, dtype=np.int64).T.reshape(n, len(domain)))


@st.composite
def datasets(draw, domain: Domain | st.SearchStrategy[Domain] | None = None, min_rows: int = 0,
             max_rows: int = 30) -> Dataset:
    """A Dataset over `domain` (or a drawn one) with between min_rows and max_rows records."""
    dom = _resolve_domain(draw, domain)
    n = draw(st.integers(min_rows, max_rows))
    return Dataset(draw(_records(dom, n)), dom)


def _resolve_domain(draw, domain) -> Domain:
    if domain is None:
        return draw(domains())
    if isinstance(domain, Domain):
        return domain
    return draw(domain)


# -- neighbouring pairs -------------------------------------------------------------------------
def _empty(domain: Domain) -> Dataset:
    return Dataset(np.zeros((0, len(domain)), dtype=np.int64), domain)


def _rarest_cell(data: Dataset | None, domain: Domain) -> np.ndarray:
    """A record in the least-populated cell of each attribute (the last code when there is no data)."""
    if data is None or data.n == 0:
        return np.array([s - 1 for s in domain.shape], dtype=np.int64)
    return np.array([int(np.argmin(np.bincount(data.codes[:, j], minlength=s)))
                     for j, s in enumerate(domain.shape)], dtype=np.int64)


def _shift_all(record: np.ndarray, domain: Domain) -> np.ndarray:
    """The record with every attribute of size > 1 changed (code + 1 mod size)."""
    return (record + 1) % np.asarray(domain.shape)


def adversarial_pairs(domain: Domain, base: Dataset | None = None) -> list[NeighbourPair]:
    """The pairs tried first, most suspicious first: empty vs one record in a rare cell (add/remove);
    that record vs the same record changed in every attribute (substitute); and, given a `base`
    table, the rarest record added to it and its first record changed in every attribute."""
    rare = _rarest_cell(base, domain)
    one = Dataset(rare[None, :], domain)
    pairs = [NeighbourPair(_empty(domain), one, "add_remove", f"empty vs one record {rare.tolist()} in a rare cell"),
             NeighbourPair(one, Dataset(_shift_all(rare, domain)[None, :], domain), "substitute",
                           "one record changed in every attribute")]
    if base is not None and base.n:
        pairs.append(NeighbourPair(base, Dataset(np.vstack([base.codes, rare]), domain), "add_remove",
                                   f"{base.n} records vs plus one in the rarest cell {rare.tolist()}"))
        changed = base.codes.copy()
        changed[0] = _shift_all(changed[0], domain)
        pairs.append(NeighbourPair(base, Dataset(changed, domain), "substitute",
                                   f"record 0 of {base.n} changed in every attribute"))
    return pairs


@st.composite
def _random_pair(draw, domain: Domain, relation: str, max_rows: int) -> NeighbourPair:
    base = draw(datasets(domain, min_rows=1 if relation == "substitute" else 0, max_rows=max_rows))
    record = draw(_records(domain, 1))
    if relation == "add_remove":
        other = Dataset(np.vstack([base.codes, record]), domain)
        if draw(st.booleans()):  # remove instead of add
            return NeighbourPair(other, base, "add_remove", "one record removed")
        return NeighbourPair(base, other, "add_remove", "one record added")
    row = draw(st.integers(0, base.n - 1))
    codes = base.codes.copy()
    codes[row] = record[0] if not np.array_equal(record[0], codes[row]) else _shift_all(codes[row], domain)
    return NeighbourPair(base, Dataset(codes, domain), "substitute", f"record {row} replaced")


@st.composite
def neighbouring_pairs(draw, domain: Domain | st.SearchStrategy[Domain] | None = None,
                       relation: str = "any", max_rows: int = 20) -> NeighbourPair:
    """A NeighbourPair over `domain`: adversarial pairs first, then random add/remove or substitute."""
    if relation not in (*RELATIONS, "any"):
        raise ConfigError(f"relation must be one of {RELATIONS} or 'any', got {relation!r}")
    dom = _resolve_domain(draw, domain)
    wanted = RELATIONS if relation == "any" else (relation,)
    adversarial = [p for p in adversarial_pairs(dom) if p.relation in wanted]
    rel = draw(st.sampled_from(wanted))
    return draw(st.one_of(st.sampled_from(adversarial), _random_pair(dom, rel, max_rows)))


# -- parties ------------------------------------------------------------------------------------
@st.composite
def vertical_partitions(draw, domain: Domain | st.SearchStrategy[Domain] | None = None,
                        min_parties: int = 1, max_parties: int = 3) -> VerticalPartition:
    """Every attribute owned by exactly one party; every party owns at least one attribute."""
    dom = _resolve_domain(draw, domain)
    k = draw(st.integers(max(1, min_parties), max(1, min(max_parties, len(dom)))))
    owners = draw(st.permutations(list(range(k)) + draw(st.lists(st.integers(0, k - 1),
                                                                 min_size=len(dom) - k, max_size=len(dom) - k))))
    lists = [[a for a, o in zip(dom.attributes, owners) if o == p] for p in range(k)]
    return VerticalPartition.from_lists(lists).validate(dom)


@attrs.frozen
class IdSets:
    """Each party's record IDs; `common` is exactly the IDs every party holds (the PSI answer)."""

    sets: tuple[np.ndarray, ...]
    common: np.ndarray

    @property
    def union(self) -> np.ndarray:
        return np.unique(np.concatenate(self.sets))


@st.composite
def party_id_sets(draw, n_parties: int = 2, max_ids: int = 50, overlap: float | None = None,
                  universe: int = 10**6) -> IdSets:
    """Distinct integer IDs per party with a controlled overlap: a shared core of
    round(overlap * size) IDs (overlap drawn in [0, 1] when None), the rest private to one party."""
    if n_parties < 1:
        raise ConfigError(f"party_id_sets(): n_parties must be >= 1, got {n_parties}")
    frac = draw(st.floats(0, 1)) if overlap is None else overlap
    if not 0 <= frac <= 1:
        raise ConfigError(f"party_id_sets(): overlap must be in [0, 1], got {overlap}")
    sizes = [draw(st.integers(0, max_ids)) for _ in range(n_parties)]
    n_common = int(round(frac * min(sizes)))
    total = n_common + sum(s - n_common for s in sizes)
    seed = draw(st.integers(0, 2**32 - 1))
    ids = np.random.default_rng(seed).choice(universe, size=total, replace=False).astype(np.int64)
    common, rest = ids[:n_common], ids[n_common:]
    sets, at = [], 0
    for s in sizes:
        own = rest[at: at + s - n_common]
        at += s - n_common
        sets.append(np.random.default_rng(seed + 1 + at).permutation(np.concatenate([common, own])))
    return IdSets(tuple(sets), np.sort(common))


# -- budgets ------------------------------------------------------------------------------------
def budgets(min_epsilon: float = 0.05, max_epsilon: float = 10.0,
            deltas: Sequence[float] = (0.0, 1e-9, 1e-5, 1e-3)) -> st.SearchStrategy[Budget]:
    """Budgets with ε in [min_epsilon, max_epsilon] (log-uniform-ish) and δ from `deltas`."""
    return st.builds(Budget, st.floats(min_epsilon, max_epsilon, allow_nan=False, allow_infinity=False),
                     st.sampled_from(list(deltas)))


def gaussian_budgets(min_epsilon: float = 0.05, max_epsilon: float = 10.0) -> st.SearchStrategy[Budget]:
    """Budgets usable by zCDP mechanisms (δ > 0)."""
    return budgets(min_epsilon, max_epsilon, deltas=(1e-9, 1e-5, 1e-3))


# -- query-level neighbours ---------------------------------------------------------------------
# StatDP's patterns (Ding et al. 2018, Sec. 5.1) for k answers of sensitivity-1 queries: the base is
# all ones and the neighbour moves answers by at most 1 each. "one_*" move a single answer (fit
# mechanisms whose neighbours change one count: histograms, one record in one cell); the others move
# several answers in different directions (fit mechanisms over arbitrary sensitivity-1 queries:
# Noisy Max, Sparse Vector, per-query Gaussian or Laplace answers).
QUERY_PATTERNS = ("one_above", "one_below", "one_above_rest_below", "one_below_rest_above", "half_half",
                  "all_above", "all_below", "x_shape")
ONE_DIFFER = ("one_above", "one_below")


def query_pattern(name: str, k: int) -> NeighbourPair:
    """One StatDP pattern as a NeighbourPair of answer vectors (float arrays of length k)."""
    if k < 1:
        raise ConfigError(f"query_pattern(): k must be >= 1, got {k}")
    base = np.ones(k)
    h = k // 2
    moves = {
        "one_above": np.r_[2.0, np.ones(k - 1)],
        "one_below": np.r_[0.0, np.ones(k - 1)],
        "one_above_rest_below": np.r_[2.0, np.zeros(k - 1)],
        "one_below_rest_above": np.r_[0.0, np.full(k - 1, 2.0)],
        "half_half": np.r_[np.full(h, 2.0), np.zeros(k - h)],
        "all_above": np.full(k, 2.0),
        "all_below": np.zeros(k),
    }
    if name == "x_shape":
        base = np.r_[np.ones(h), np.zeros(k - h)]
        return NeighbourPair(base, 1.0 - base, "queries", "x_shape")
    if name not in moves:
        raise ConfigError(f"unknown query pattern {name!r}; choose from {QUERY_PATTERNS}")
    return NeighbourPair(base, moves[name], "queries", name)


def query_pairs(k: int, patterns: Sequence[str] = QUERY_PATTERNS) -> list[NeighbourPair]:
    """StatDP's patterns over k answers, as a plain list for `audit` (ONE_DIFFER for histograms)."""
    return [query_pattern(p, k) for p in patterns]


@st.composite
def query_neighbours(draw, k: int | st.SearchStrategy[int] = st.integers(1, 10),
                     patterns: Sequence[str] = QUERY_PATTERNS, one_differ: bool = False,
                     max_answer: int = 5) -> NeighbourPair:
    """Neighbouring answer vectors of sensitivity-1 queries: StatDP's `patterns` first, then random
    integer answers in [0, max_answer] moved by a random ±1 vector (`one_differ`: one answer by ±1).
    Hypothesis shrinks towards the patterns."""
    size = draw(k) if isinstance(k, st.SearchStrategy) else k
    if size < 1:
        raise ConfigError(f"query_neighbours(): k must be >= 1, got {size}")
    if one_differ:
        patterns = [p for p in patterns if p in ONE_DIFFER]

    @st.composite
    def random_move(draw2) -> NeighbourPair:
        base = np.array(draw2(st.lists(st.integers(0, max_answer), min_size=size, max_size=size)), float)
        if one_differ:
            move = np.zeros(size)
            move[draw2(st.integers(0, size - 1))] = draw2(st.sampled_from([-1.0, 1.0]))
        else:
            move = np.array(draw2(st.lists(st.sampled_from([-1.0, 0.0, 1.0]), min_size=size, max_size=size)))
            if not move.any():
                move[0] = 1.0
        return NeighbourPair(base, base + move, "queries", f"random ±1 move {move.astype(int).tolist()}")

    options = [random_move()]
    if patterns:
        options.insert(0, st.sampled_from([query_pattern(p, size) for p in patterns]))
    return draw(st.one_of(*options))
