"""What a dataset plugin hands to the pipeline."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import pandas as pd

from .domain import Domain
from .encoding import TableSchema
from .factor import Factor


@attrs.frozen(eq=False)
class LoadedData:
    """A raw table, its public schema, and the dataset's default vertical split.

    `truth`, when the data come from a known distribution, returns its exact marginal on a set of
    attributes (in code space); evaluators can then score against the population, not a sample.

    ID-keyed data (each party its own table with an identifier column, partial overlap): `party_frames`
    holds each party's columns and `party_ids` its identifiers, row by row; `frame` is then None and an
    alignment protocol (psi/psu) brings the rows together.
    """

    frame: pd.DataFrame | None
    schema: TableSchema
    default_parties: Sequence[Sequence[str]]
    party_names: Sequence[str] | None = None
    description: str = ""
    truth: Callable[[Sequence[str]], Factor] | None = None
    info: dict[str, Any] = attrs.field(factory=dict)
    party_frames: Mapping[str, pd.DataFrame] | None = None
    party_ids: Mapping[str, Sequence[Any]] | None = None

    @property
    def domain(self) -> Domain:
        return self.schema.preview_domain()


@attrs.frozen(eq=False)
class DatasetSource:
    """What a dataset plugin's factory returns: public facts first, rows only when `load` is called.

    The pipeline plans privacy from `schema` and `default_parties` and checks the budget before it
    calls `load`. (A CSV without a public schema must be read to infer one: it says so.)
    """

    schema: TableSchema
    default_parties: Sequence[Sequence[str]]
    loader: Callable[[], LoadedData]
    party_names: Sequence[str] | None = None
    description: str = ""

    def load(self) -> LoadedData:
        return self.loader()
