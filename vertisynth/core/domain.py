"""`Domain`: the ordered attributes of a table, their sizes and (optionally) the label of every code."""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from .errors import DomainError, choices_text, suggest


def _as_tuple_of_str(value: Iterable[Any]) -> tuple[str, ...]:
    return tuple(str(v) for v in value)


@attrs.frozen
class Domain:
    """Ordered attribute names with their sizes; codes of attribute `a` are the integers 0..size(a)-1.

    `labels` optionally maps an attribute to the label of each of its codes (for decoding).
    """

    attributes: tuple[str, ...] = attrs.field(converter=_as_tuple_of_str)
    shape: tuple[int, ...] = attrs.field(converter=lambda s: tuple(int(x) for x in s))
    labels: Mapping[str, tuple[str, ...]] = attrs.field(
        factory=dict,
        converter=lambda m: {str(k): tuple(str(x) for x in v) for k, v in dict(m).items()},
        eq=False,
        hash=False,
    )
    # attribute -> axis; lookups by name are the inner loop of counting and of the model fits
    _index: dict[str, int] = attrs.field(init=False, repr=False, eq=False, hash=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_index", {a: i for i, a in enumerate(self.attributes)})
        if len(self.attributes) != len(self.shape):
            raise DomainError(
                f"domain has {len(self.attributes)} attributes but {len(self.shape)} sizes"
            )
        if len(set(self.attributes)) != len(self.attributes):
            dupes = sorted({a for a in self.attributes if self.attributes.count(a) > 1})
            raise DomainError(f"domain lists attributes more than once: {dupes}")
        for a, s in zip(self.attributes, self.shape):
            if s < 1:
                raise DomainError(f"attribute {a!r} has size {s}; sizes must be >= 1")
        for a, labs in self.labels.items():
            if a not in self.attributes:
                raise DomainError(f"labels given for unknown attribute {a!r}")
            if len(labs) != self.size(a):
                raise DomainError(
                    f"attribute {a!r} has size {self.size(a)} but {len(labs)} labels"
                )

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def from_sizes(cls, sizes: Mapping[str, int], labels: Mapping[str, Sequence[str]] | None = None) -> Domain:
        return cls(tuple(sizes), tuple(sizes.values()), labels or {})

    # -- queries ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.attributes)

    def __contains__(self, attr: object) -> bool:
        return attr in self.attributes

    def __iter__(self):
        return iter(self.attributes)

    def check(self, attrs_: Iterable[str]) -> tuple[str, ...]:
        """Return `attrs_` as a tuple, raising a clear error for any unknown or repeated attribute."""
        out = tuple(attrs_)
        for a in out:
            if not self._known(a):
                raise DomainError(
                    f"unknown attribute {a!r}{suggest(str(a), self.attributes)}; "
                    f"known: {choices_text(self.attributes)}"
                )
        if len(set(out)) != len(out):
            raise DomainError(f"attribute set {list(out)} repeats an attribute")
        return out

    def _known(self, attr: object) -> bool:
        try:
            return attr in self._index
        except TypeError:   # unhashable: no attribute's name
            return False

    def size(self, attr: str | None = None) -> int:
        """Size of one attribute, or the number of cells of the whole domain."""
        if attr is None:
            return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1
        if not self._known(attr):
            self.check([attr])   # raises the unknown attribute's error
        return self.shape[self._index[attr]]

    def axes(self, attrs_: Iterable[str]) -> tuple[int, ...]:
        index = self._index
        return tuple(index[a] for a in self.check(attrs_))

    def project(self, attrs_: Iterable[str]) -> Domain:
        """Sub-domain on `attrs_`, in the order given."""
        axes = self.axes(attrs_)
        names = tuple(self.attributes[i] for i in axes)
        return Domain._part_of_valid(names, tuple(self.shape[i] for i in axes),
                                     {a: self.labels[a] for a in names if a in self.labels})

    @classmethod
    def _part_of_valid(cls, attributes: tuple[str, ...], shape: tuple[int, ...],
                       labels: dict[str, tuple[str, ...]]) -> Domain:
        """A sub-domain taken from a valid domain (its names, sizes and label tuples, distinct names): equal to
        `Domain(attributes, shape, labels)` without redoing the conversions and checks that hold already (a
        projection is made per counted marginal and per model step)."""
        new = object.__new__(cls)
        for name, value in (("attributes", attributes), ("shape", shape), ("labels", labels),
                            ("_index", {a: i for i, a in enumerate(attributes)})):
            object.__setattr__(new, name, value)
        return new

    def marginalize(self, attrs_: Iterable[str]) -> Domain:
        """Domain without `attrs_`."""
        drop = set(self.check(attrs_))
        return self.project([a for a in self.attributes if a not in drop])

    def merge(self, other: Domain) -> Domain:
        """Union of two domains (self's order first); shared attributes must agree in size."""
        extra = [a for a in other.attributes if a not in self.attributes]
        for a in other.attributes:
            if a in self.attributes and self.size(a) != other.size(a):
                raise DomainError(
                    f"attribute {a!r} has size {self.size(a)} in one domain and {other.size(a)} in the other"
                )
        labels = {**other.labels, **self.labels}
        return Domain(
            self.attributes + tuple(extra),
            self.shape + tuple(other.size(a) for a in extra),
            {a: v for a, v in labels.items() if a in self.attributes or a in extra},
        )

    def intersects(self, attrs_: Iterable[str]) -> bool:
        return any(a in self.attributes for a in attrs_)

    def label(self, attr: str, code: int) -> str:
        labs = self.labels.get(attr)
        return labs[code] if labs else str(code)

    # -- serialisation ------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "attributes": list(self.attributes),
            "shape": list(self.shape),
            "labels": {a: list(v) for a, v in self.labels.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Domain:
        try:
            return cls(data["attributes"], data["shape"], data.get("labels", {}))
        except (KeyError, TypeError, ValueError) as exc:
            raise DomainError(f"malformed domain description: {exc}") from None

    def __repr__(self) -> str:
        inner = ", ".join(f"{a}: {s}" for a, s in zip(self.attributes, self.shape))
        return f"Domain({inner})"
