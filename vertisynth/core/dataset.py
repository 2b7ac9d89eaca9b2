"""`Dataset` (a table of integer codes with its Domain) and `VerticalPartition` (who holds which columns)."""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import attrs
import numpy as np

from .domain import Domain
from .errors import DataError, DomainError, choices_text, suggest
from .factor import Factor

if TYPE_CHECKING:   # pandas only for tables as frames (a codes-only run never imports it: docs/speed.md)
    import pandas as pd


@attrs.frozen(eq=False)
class Dataset:
    """Integer-coded records: `codes[:, j]` holds codes of `domain.attributes[j]`, each in 0..size-1."""

    codes: np.ndarray
    domain: Domain

    def __attrs_post_init__(self) -> None:
        c = self.codes
        if c.ndim != 2 or c.shape[1] != len(self.domain):
            raise DataError(f"codes of shape {c.shape} do not fit a domain of {len(self.domain)} attributes")
        if not np.issubdtype(c.dtype, np.integer):
            raise DataError(f"codes must be integers, got dtype {c.dtype}")
        if c.shape[0]:
            lo = c.min(axis=0)
            hi = c.max(axis=0)
            for j, a in enumerate(self.domain.attributes):
                if lo[j] < 0 or hi[j] >= self.domain.shape[j]:
                    bad = int(lo[j]) if lo[j] < 0 else int(hi[j])
                    raise DomainError(
                        f"attribute {a!r} has code {bad} outside its domain 0..{self.domain.shape[j] - 1}"
                    )

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def from_frame(cls, frame: pd.DataFrame, domain: Domain) -> Dataset:
        """Codes from a DataFrame whose columns are (a superset of) the domain's attributes."""
        missing = [a for a in domain.attributes if a not in frame.columns]
        if missing:
            raise DataError(f"table lacks the domain's attributes {missing}; it has {list(map(str, frame.columns))}")
        sub = frame[list(domain.attributes)]
        if sub.isna().any().any():
            cols = [str(c) for c in sub.columns[sub.isna().any()]]
            raise DataError(f"missing values in columns {cols}; encode them first (see TableEncoder missing='category')")
        try:
            codes = sub.to_numpy(dtype=np.int64)
        except (TypeError, ValueError) as exc:
            raise DataError(f"columns must hold integer codes: {exc}") from None
        if not np.array_equal(codes, sub.to_numpy(dtype=np.float64)):
            raise DataError("columns must hold integer codes, found fractional values")
        return cls(codes, domain)

    # -- queries ------------------------------------------------------------------------------
    @property
    def n(self) -> int:
        return int(self.codes.shape[0])

    def __len__(self) -> int:
        return self.n

    @property
    def attributes(self) -> tuple[str, ...]:
        return self.domain.attributes

    def column(self, attr: str) -> np.ndarray:
        return self.codes[:, self.domain.axes([attr])[0]]

    def project(self, attrs_: Iterable[str]) -> Dataset:
        attrs_ = self.domain.check(attrs_)
        return Dataset(self.codes[:, list(self.domain.axes(attrs_))], self.domain.project(attrs_))

    def take(self, rows: np.ndarray) -> Dataset:
        return Dataset(self.codes[np.asarray(rows)], self.domain)

    def counts(self, attrs_: Iterable[str], weights: np.ndarray | None = None) -> Factor:
        """Exact contingency table on `attrs_` (no privacy: a building block for mechanisms)."""
        sub = self.domain.project(attrs_)   # checks the names
        if not sub.attributes:
            return Factor(sub, np.asarray(float(self.n if weights is None else weights.sum())))
        return Factor(sub, self._flat_counts(self.domain.axes(sub.attributes), weights).reshape(sub.shape))

    def count_vector(self, attrs_: Iterable[str]) -> np.ndarray:
        """`counts(attrs_).values.ravel()` without the Factor and its sub-domain (the tvd evaluator counts ~1,000
        marginals a run and reads only the numbers)."""
        axes = self.domain.axes(attrs_)
        if not axes:
            return np.asarray([float(self.n)])
        return self._flat_counts(axes, None)

    def _flat_counts(self, axes: tuple[int, ...], weights: np.ndarray | None) -> np.ndarray:
        # the flat cell index by hand: codes were range-checked at construction, and ravel_multi_index's own checks
        # and per-axis tuple cost 1.6x this
        shape = self.domain.shape
        flat = self.codes[:, axes[0]].astype(np.int64)
        for axis in axes[1:]:
            flat *= shape[axis]
            flat += self.codes[:, axis]
        return np.bincount(flat, weights=weights, minlength=math.prod(shape[a] for a in axes)).astype(float)

    def to_frame(self) -> pd.DataFrame:
        import pandas as pd
        return pd.DataFrame(self.codes, columns=list(self.domain.attributes))

    def hstack(self, other: Dataset) -> Dataset:
        """Join two column blocks of the same records (row-aligned)."""
        if self.n != other.n:
            raise DataError(f"cannot join column blocks of {self.n} and {other.n} rows (are the parties aligned?)")
        overlap = [a for a in other.attributes if a in self.domain]
        if overlap:
            raise DataError(f"both column blocks hold {overlap}")
        return Dataset(np.hstack([self.codes, other.codes]), self.domain.merge(other.domain))


@attrs.frozen
class Party:
    name: str
    attributes: tuple[str, ...] = attrs.field(converter=tuple)


@attrs.frozen
class VerticalPartition:
    """Which party holds which attributes. Every attribute of the domain belongs to exactly one party."""

    parties: tuple[Party, ...] = attrs.field(converter=tuple)

    @classmethod
    def from_lists(cls, lists: Sequence[Sequence[str]], names: Sequence[str] | None = None) -> VerticalPartition:
        names = list(names) if names is not None else [f"party{i + 1}" for i in range(len(lists))]
        return cls(tuple(Party(n, tuple(a)) for n, a in zip(names, lists)))

    @classmethod
    def single(cls, domain: Domain) -> VerticalPartition:
        return cls((Party("party1", domain.attributes),))

    def validate(self, domain: Domain) -> VerticalPartition:
        """Raise a clear error unless the parties cover `domain` exactly once each."""
        if not self.parties:
            raise DataError("a vertical partition needs at least one party")
        names = [p.name for p in self.parties]
        if len(set(names)) != len(names):
            raise DataError(f"party names must be distinct, got {names}")
        owner: dict[str, str] = {}
        for p in self.parties:
            if not p.attributes:
                raise DataError(f"party {p.name!r} holds no attributes")
            for a in p.attributes:
                if a not in domain:
                    raise DomainError(
                        f"party {p.name!r} lists attribute {a!r}, which the dataset does not have"
                        f"{suggest(a, domain.attributes)}; attributes: {choices_text(domain.attributes)}"
                    )
                if a in owner:
                    raise DataError(f"attribute {a!r} is claimed by both party {owner[a]!r} and party {p.name!r}")
                owner[a] = p.name
        unowned = [a for a in domain.attributes if a not in owner]
        if unowned:
            raise DataError(f"attributes {unowned} belong to no party; list each attribute under one party")
        return self

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parties)

    def owner(self, attr: str) -> str:
        for p in self.parties:
            if attr in p.attributes:
                return p.name
        raise DomainError(f"no party holds attribute {attr!r}")

    def views(self, data: Dataset) -> dict[str, Dataset]:
        """Each party's own column block: the only data party-side code may see."""
        self.validate(data.domain)
        return {p.name: data.project(p.attributes) for p in self.parties}

    def to_dict(self) -> list[dict[str, object]]:
        return [{"name": p.name, "attributes": list(p.attributes)} for p in self.parties]

    def __iter__(self):
        return iter(self.parties)

    def __len__(self) -> int:
        return len(self.parties)


def join_views(views: Mapping[str, Dataset]) -> Dataset:
    """Rebuild one table from row-aligned column blocks (only for centralised baselines and evaluation)."""
    blocks = list(views.values())
    out = blocks[0]
    for b in blocks[1:]:
        out = out.hstack(b)
    return out
