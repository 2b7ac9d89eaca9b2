"""The abstract interfaces every plugin implements, and the context they are planned in.

Life of a component in a pipeline run:
  1. constructed from its attrs config (`Component(config)`), before any data is loaded;
  2. `plan(ctx)` returns the privacy charges it will make, computed from public facts only;
  3. the ledger checks the plan against the budget; only then is data loaded;
  4. the component runs, spending exactly the charges it planned (via `vertisynth.core.mechanisms`).
"""
from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import attrs
import numpy as np

from .dataset import Dataset, VerticalPartition, join_views
from .domain import Domain
from .factor import Factor
from .messages import Message
from .errors import BudgetError
from .privacy import Budget, Charge, Composition, Cost, PrivacyLedger, group_cost, remaining_rho


@attrs.frozen(slots=False)   # not slotted: the grant below is computed once per context (cached_property)
class PlanContext:
    """Public facts a component may use to plan its privacy spend (no data).

    `planned_before` holds the costs that earlier stages (preprocessing, alignment) already planned;
    `rho` and `epsilon` are what is left of the budget for this component.
    """

    domain: Domain
    partition: VerticalPartition
    budget: Budget
    planned_before: tuple[Cost, ...] = ()
    n_public: int | None = None  # a public bound on the record count, when the config gives one
    group_size: int = 1  # rows one person may fill after alignment (ledger charges group privacy)
    # the run's cross-party measure released once, planned before this component (core.capabilities.ReleasesOnce):
    # a cross-party marginal is answered from that release for free, so a vertical twin plans no charge for one
    cross_release: bool = False

    @functools.cached_property
    def rho(self) -> float:
        """The largest zCDP ρ this component may spend so that everything fits the budget
        (divided by group_size², since the ledger charges c²ρ for groups of c)."""
        return remaining_rho(self.budget, self.planned_before) / self.group_size ** 2

    @functools.cached_property
    def epsilon(self) -> float:
        """The pure ε left for this component (basic composition with what is planned before)."""
        if not self.planned_before:
            return self.budget.epsilon
        used = Composition.of(self.planned_before).epsilon(self.budget.delta)
        left = self.budget.epsilon - used
        if left <= 0:
            raise BudgetError(f"earlier stages already plan ε={used:.4g} of the budget ε={self.budget.epsilon:.4g}")
        return left / self.group_size

    def after(self, charges: Sequence[Charge], domain: Domain | None = None) -> PlanContext:
        """The grant of a sub-component that plans after `charges` (e.g. VertiMRF's encoder after its local
        models): what is left once they are counted as the ledger will record them (group privacy included)."""
        before = tuple(self.planned_before) + tuple(group_cost(ch.cost, self.group_size) for ch in charges)
        return attrs.evolve(self, domain=self.domain if domain is None else domain, planned_before=before)


@attrs.frozen(eq=False)
class VerticalData:
    """Row-aligned column blocks, one per party, as the synthesizer receives them."""

    partition: VerticalPartition
    views: Mapping[str, Dataset]

    @property
    def domain(self) -> Domain:
        dom = None
        for name in self.partition.names:
            d = self.views[name].domain
            dom = d if dom is None else dom.merge(d)
        return dom

    def joined(self) -> Dataset:
        """All columns in one table. Only centralised baselines call this (the report says so)."""
        return join_views({n: self.views[n] for n in self.partition.names})


class Component(ABC):
    """Base of all plugin components: holds its structured config."""

    def __init__(self, config: Any = None) -> None:
        self.config = config

    def plan(self, ctx: PlanContext) -> list[Charge]:
        """Privacy charges this component will make. Default: none (post-processing only)."""
        return []


class Synthesizer(Component):
    """Fits on the parties' data (spending its planned budget) and samples synthetic records."""

    stage: ClassVar[str] = "synthesizer"

    @abstractmethod
    def fit(self, data: VerticalData, ledger: PrivacyLedger, rng: np.random.Generator) -> None: ...

    @abstractmethod
    def sample(self, n: int | None, rng: np.random.Generator) -> Dataset:
        """Draw `n` records (None: the synthesizer's own DP estimate of the record count)."""

    def timings(self) -> dict[str, float]:
        """Per-phase wall-clock seconds of the last fit, for the report."""
        return {}


@attrs.frozen
class MarginalQuery:
    """One Gaussian release a marginal-based synthesizer asks for: the counts of `marginals`, concatenated
    (each flattened in its attributes' order), with L2 sensitivity `l2_sensitivity` at zCDP cost `rho`."""

    name: str
    marginals: tuple[tuple[str, ...], ...] = attrs.field(converter=lambda ms: tuple(tuple(m) for m in ms))
    rho: float
    l2_sensitivity: float = 1.0


class MeasuresMarginals(ABC):
    """A synthesizer whose only contact with the data is Gaussian-noised marginal counts, so the counts may
    come from elsewhere: e.g. secure aggregation across horizontal custodians (vertisynth.collab), where
    no one holds the joined table. `fit_marginals` is post-processing of the noisy answers only."""

    @abstractmethod
    def marginal_queries(self, domain: Domain, rho: float) -> list[MarginalQuery]:
        """The releases to make with total zCDP cost `rho` (public facts only)."""

    @abstractmethod
    def fit_marginals(self, domain: Domain, queries: Sequence[MarginalQuery], answers: Sequence[np.ndarray],
                      variances: Sequence[float], rng: np.random.Generator) -> None:
        """Fit from the noisy answer vector of each query and its per-cell noise variance."""


class Evaluator(Component):
    """Scores a synthetic table against a real one. Reads real data: its numbers are not DP.

    `prefers_holdout`: when the run keeps a holdout, `evaluate` gets it as `real` instead of the training
    table. `requires_holdout`: the evaluator needs both, through `evaluate_holdout`, and the pipeline
    refuses to plan without a holdout.
    """

    prefers_holdout: ClassVar[bool] = False
    requires_holdout: ClassVar[bool] = False
    uses_alignment: ClassVar[bool] = False  # scores the aligned (filled) party tables via evaluate_alignment

    @abstractmethod
    def evaluate(self, real: Dataset, synthetic: Dataset, rng: np.random.Generator) -> dict[str, float]: ...

    def evaluate_holdout(self, train: Dataset, holdout: Dataset, synthetic: Dataset,
                         rng: np.random.Generator) -> dict[str, float]:
        return self.evaluate(holdout if self.prefers_holdout else train, synthetic, rng)

    def evaluate_alignment(self, alignment: Alignment, rng: np.random.Generator) -> dict[str, float]:
        """Evaluators with `uses_alignment` score the aligned party tables and their fill masks instead."""
        raise NotImplementedError(f"{type(self).__name__} sets uses_alignment but has no evaluate_alignment")

    def write_artifacts(self, out: Path) -> list[str]:
        """Write files (e.g. figures) about the last evaluation into the run's output folder; their names."""
        return []


@attrs.frozen(eq=False)
class Alignment:
    """What an aligner returns: row-aligned views, a JSON-able `info` for the report (protocol, sizes it
    revealed, fill rates), and per party a mask of the rows it filled (empty when nothing was filled)."""

    views: dict[str, Dataset]
    info: dict[str, Any]
    filled: dict[str, np.ndarray] = attrs.field(factory=dict)

    def __iter__(self):  # `views, info = aligner.align(...)` keeps working
        return iter((self.views, self.info))

    def real_everywhere(self) -> np.ndarray:
        """Rows that every party holds for real (the people in the intersection)."""
        n = next(iter(self.views.values())).n
        mask = np.ones(n, bool)
        for m in self.filled.values():
            mask &= ~m
        return mask


class Aligner(Component):
    """Brings the parties' tables into one common row order (e.g. PSI/PSU on an ID column).

    `ids`, when the data are keyed by an identifier, holds each party's raw identifiers, one per row of
    its view. `group_size` is how many rows one person's record may occupy afterwards (a fill that
    copies real records makes it > 1; the ledger then charges every later stage group privacy).
    """

    def group_size(self) -> int:
        return 1

    @abstractmethod
    def align(self, views: Mapping[str, Dataset], ledger: PrivacyLedger, rng: np.random.Generator,
              ids: Mapping[str, Sequence[Any]] | None = None) -> Alignment:
        """Return the aligned views, a JSON-able info dict and the fill masks."""


class Encoder(Component):
    """Two halves on opposite sides of the party boundary: `encode` at a party, `estimate` at the server."""

    @abstractmethod
    def encode(self, party: str, view: Dataset, ledger: PrivacyLedger, rng: np.random.Generator) -> Message: ...

    @abstractmethod
    def estimate(self, messages: Sequence[Message], attrs_: Sequence[str]) -> Factor: ...
