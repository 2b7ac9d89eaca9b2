"""Shared server-side helpers of the encoders: merging message domains and the estimate record.

Both encoders answer a marginal query with an `Estimate`: the counts (a Factor) and the variance of
every cell (a Factor on the same domain). VertiMRF weights its measurements by that variance.
"""
from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np

from vertisynth.core.domain import Domain
from vertisynth.core.errors import DomainError, MessageError
from vertisynth.core.factor import Factor
from vertisynth.core.messages import Message


@attrs.frozen(eq=False)
class Estimate:
    """A contingency-table estimate and the (approximate) variance of each of its cells."""

    counts: Factor
    variance: Factor

    @property
    def attributes(self) -> tuple[str, ...]:
        return self.counts.attributes


def owners(messages: Sequence[Message], kind: type, encoder: str) -> dict[str, Message]:
    """Map every attribute to the message that holds it; reject foreign kinds and double claims."""
    if not messages:
        raise MessageError(f"{encoder}: estimate needs at least one message")
    out: dict[str, Message] = {}
    for m in messages:
        if not isinstance(m, kind):
            raise MessageError(f"{encoder}: got a {getattr(m, 'kind', type(m).__name__)!r} message, expected {kind.kind!r}")
        for a in m.domain.attributes:
            if a in out:
                raise MessageError(f"{encoder}: attribute {a!r} is sent by both {out[a].party!r} and {m.party!r}")
            out[a] = m
    return out


def planned_shares(messages: Sequence[Message], kind: type, encoder: str, what: str,
                   planned: dict[str, Domain]) -> dict[str, Message]:
    """A release's shares by party, checked against the plan before any is read: each of type `kind`, one per
    planned party, none missing, each over its planned attributes and sizes (`what` names the share in errors)."""
    by_party: dict[str, Message] = {}
    for m in messages:
        if not isinstance(m, kind):
            raise MessageError(f"{encoder}: a release of {getattr(m, 'party', '?')!r} holds {type(m).__name__}, not "
                               f"{what}; refused")
        if m.party not in planned:
            raise MessageError(f"{encoder}: {what} of {m.party!r}, not a planned party ({list(planned)}); refused")
        if m.party in by_party:
            raise MessageError(f"{encoder}: two releases of {what} from {m.party!r}; refused")
        by_party[m.party] = m
    missing = [p for p in planned if p not in by_party]
    if missing:
        raise MessageError(f"{encoder}: no {what} from {missing}; refused")
    for name, m in by_party.items():
        want = planned[name]
        if (m.domain.attributes, m.domain.shape) != (want.attributes, want.shape):
            raise MessageError(f"{encoder}: {name!r} released {what} of {dict(zip(m.domain.attributes, m.domain.shape))}"
                               f", the plan says {dict(zip(want.attributes, want.shape))}; refused")
    return by_party


def query_domain(by_attr: dict[str, Message], attrs_: Sequence[str], encoder: str) -> Domain:
    """The domain of the queried attributes, with a clear error for unknown or repeated ones."""
    attrs_ = tuple(attrs_)
    if not attrs_:
        raise DomainError(f"{encoder}: estimate needs at least one attribute")
    if len(set(attrs_)) != len(attrs_):
        raise DomainError(f"{encoder}: attribute set {list(attrs_)} repeats an attribute")
    missing = [a for a in attrs_ if a not in by_attr]
    if missing:
        raise DomainError(f"{encoder}: no message holds attribute(s) {missing}; known: {sorted(by_attr)}")
    return Domain(attrs_, [by_attr[a].domain.size(a) for a in attrs_])


def agree(messages: Sequence[Message], field: str, encoder: str, rel: float = 0.0) -> object:
    """The common value of `field` across messages; MessageError naming the parties if they differ."""
    values = {m.party: getattr(m, field) for m in messages}
    first = next(iter(values.values()))
    for party, v in values.items():
        same = (np.isclose(v, first, rtol=rel, atol=0) if rel and v is not None and first is not None else v == first)
        if not same:
            raise MessageError(f"{encoder}: parties disagree on {field}: {values}; all must encode with the same settings")
    return first


def project_to_simplex(values: np.ndarray, total: float) -> np.ndarray:
    """Euclidean projection of a table onto {x >= 0, sum x = total} (sort-based, Duchi et al. 2008)."""
    v = values.ravel().astype(float)
    if total <= 0:
        return np.zeros_like(values, dtype=float)
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - total
    k = np.arange(1, v.size + 1)
    rho = np.nonzero(u - css / k > 0)[0][-1]
    theta = css[rho] / (rho + 1)
    return np.maximum(v - theta, 0.0).reshape(values.shape)
