"""`Factor`: a table over a few attributes (a marginal, a potential, a contingency table)."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs
import numpy as np

from .domain import Domain
from .errors import DomainError


@attrs.frozen(eq=False)
class Factor:
    """Values indexed by the codes of `domain`'s attributes, one array axis per attribute."""

    domain: Domain
    values: np.ndarray = attrs.field(converter=np.asarray)

    def __attrs_post_init__(self) -> None:
        if self.values.shape != self.domain.shape:
            raise DomainError(
                f"factor values have shape {self.values.shape} but domain {self.domain} needs {self.domain.shape}"
            )

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def zeros(cls, domain: Domain) -> Factor:
        return cls(domain, np.zeros(domain.shape))

    @classmethod
    def ones(cls, domain: Domain) -> Factor:
        return cls(domain, np.ones(domain.shape))

    @classmethod
    def uniform(cls, domain: Domain, total: float = 1.0) -> Factor:
        return cls(domain, np.full(domain.shape, total / domain.size()))

    # -- basic queries ------------------------------------------------------------------------
    @property
    def attributes(self) -> tuple[str, ...]:
        return self.domain.attributes

    def total(self) -> float:
        return float(self.values.sum())

    def datavector(self) -> np.ndarray:
        """The values flattened in C order (attribute order of the domain)."""
        return self.values.ravel()

    # -- algebra ------------------------------------------------------------------------------
    def transpose(self, attrs_: Iterable[str]) -> Factor:
        attrs_ = tuple(attrs_)
        if set(attrs_) != set(self.attributes) or len(attrs_) != len(self.attributes):
            raise DomainError(f"transpose needs a permutation of {list(self.attributes)}, got {list(attrs_)}")
        return Factor(self.domain.project(attrs_), np.transpose(self.values, self.domain.axes(attrs_)))

    def project(self, attrs_: Iterable[str]) -> Factor:
        """Marginal on `attrs_` (summing out the others), axes in the order of `attrs_`."""
        attrs_ = self.domain.check(attrs_)
        drop = tuple(i for i, a in enumerate(self.attributes) if a not in attrs_)
        summed = self.values.sum(axis=drop) if drop else self.values
        kept = [a for a in self.attributes if a in attrs_]
        sub = Factor(self.domain.project(kept), summed)
        return sub if tuple(kept) == attrs_ else sub.transpose(attrs_)

    def logsumexp_project(self, attrs_: Iterable[str]) -> Factor:
        """Like `project` for log-values: log of the sum of exp over the dropped axes."""
        attrs_ = self.domain.check(attrs_)
        drop = tuple(i for i, a in enumerate(self.attributes) if a not in attrs_)
        vals = self.values
        if drop:
            m = np.max(vals, axis=drop, keepdims=True)
            m = np.where(np.isfinite(m), m, 0.0)
            vals = np.log(np.sum(np.exp(vals - m), axis=drop)) + np.squeeze(m, axis=drop)
        kept = [a for a in self.attributes if a in attrs_]
        sub = Factor(self.domain.project(kept), vals)
        return sub if tuple(kept) == attrs_ else sub.transpose(attrs_)

    def expand(self, domain: Domain) -> Factor:
        """Broadcast onto a larger domain containing all of this factor's attributes."""
        for a in self.attributes:
            if a not in domain:
                raise DomainError(f"cannot expand {list(self.attributes)} onto {domain}: {a!r} missing")
            if domain.size(a) != self.domain.size(a):
                raise DomainError(f"attribute {a!r} has size {self.domain.size(a)} here, {domain.size(a)} there")
        order = [a for a in domain.attributes if a in self.attributes]
        vals = self.transpose(order).values if tuple(order) != self.attributes else self.values
        shape = tuple(domain.size(a) if a in self.attributes else 1 for a in domain.attributes)
        return Factor(domain, np.broadcast_to(vals.reshape(shape), domain.shape).copy())

    def normalize(self, total: float = 1.0) -> Factor:
        s = self.values.sum()
        if not np.isfinite(s) or s <= 0:
            raise DomainError(f"cannot normalise a factor whose total is {s}")
        return Factor(self.domain, self.values / s * total)  # divide first: s may be subnormal

    def _binary(self, other: Any, op) -> Factor:
        if isinstance(other, Factor):
            dom = self.domain.merge(other.domain)
            return Factor(dom, op(self.expand(dom).values, other.expand(dom).values))
        return Factor(self.domain, op(self.values, other))

    def __add__(self, other: Any) -> Factor:
        return self._binary(other, np.add)

    __radd__ = __add__

    def __sub__(self, other: Any) -> Factor:
        return self._binary(other, np.subtract)

    def __mul__(self, other: Any) -> Factor:
        return self._binary(other, np.multiply)

    __rmul__ = __mul__

    def __truediv__(self, other: Any) -> Factor:
        return self._binary(other, lambda a, b: np.divide(a, b, out=np.zeros(np.broadcast_shapes(np.shape(a), np.shape(b))), where=np.asarray(b) != 0))

    def exp(self) -> Factor:
        return Factor(self.domain, np.exp(self.values))

    def log(self) -> Factor:
        with np.errstate(divide="ignore"):
            return Factor(self.domain, np.log(self.values))

    def allclose(self, other: Factor, **kw: Any) -> bool:
        if set(self.attributes) != set(other.attributes):
            return False
        return bool(np.allclose(self.values, other.transpose(self.attributes).values, **kw))

    def __repr__(self) -> str:
        return f"Factor({list(self.attributes)}, shape={self.values.shape}, total={self.total():.4g})"
