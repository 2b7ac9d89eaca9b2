"""`StageOracle`: cross-party marginals measured in planned stages (VertiMRF with encoder "he").

`VerticalOracle` pays each cross-party table on its own (a planned charge or a filter draw per table). A stage
measure (`core.capabilities.MeasuresJointly`) instead plans one charge per *stage*: a stage of fixed queries known
at plan time (VertiMRF's selection tables: every cross-party pair, or the encoder's budgeted subset) and a stage
of queries the server chooses from the first stage's answers (the clique tables, at most as many as planned). Its
noise is keyed by the stage, so a stage run in one process and the same stage run with each party on its own
machine (deploy's rounds, `JointRounds.party_stage`) publish the same tables under the test secret.

The oracle checks every query before the stage's charge is spent and refuses in one line: an attribute no party
holds, an empty side, a side whose attributes two parties hold, both sides at one party (a one-party table is
answered at its party, never through the cross-party measure), a fixed stage asked for a table outside its plan,
a stage run twice (its one charge is spent once).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from vertisynth.core.capabilities import MeasuresJointly
from vertisynth.core.dataset import Dataset, VerticalPartition
from vertisynth.core.errors import ConfigError
from vertisynth.core.messages import Message
from vertisynth.core.privacy import PrivacyLedger

Query = tuple[tuple[str, ...], tuple[str, ...]]


class StageOracle:
    """Runs a synthesizer's cross-party stages through a `MeasuresJointly` measure, from the parties' views (each
    party's columns as the protocol reads them, e.g. binned). `fixed` names the stages whose queries the plan
    fixed (stage -> its queries); any other stage takes the queries the synthesizer chooses (the measure refuses
    more than it planned). `answers(queries, stage)` returns the parties' published messages."""

    def __init__(self, views: Mapping[str, Dataset], partition: VerticalPartition, measure: MeasuresJointly,
                 ledger: PrivacyLedger, rngs: Mapping[str, np.random.Generator],
                 fixed: Mapping[str, Sequence[Query]] | None = None) -> None:
        if not isinstance(measure, MeasuresJointly):
            raise ConfigError(f"stage oracle: {type(measure).__name__} does not measure cross-party marginals in "
                              "stages (selection_queries, measure)")
        missing = [p for p in partition.names if p not in views or p not in rngs]
        if missing:
            raise ConfigError(f"stage oracle: no view or stream for parties {missing}")
        self.views, self.partition, self.measure, self.ledger = dict(views), partition, measure, ledger
        self.rngs = dict(rngs)
        self.owner = {a: p.name for p in partition for a in p.attributes}
        self.fixed = {s: {_key(q) for q in qs} for s, qs in (fixed or {}).items()}
        self.ran: list[str] = []

    def check(self, queries: Sequence[Query], stage: str) -> list[Query]:
        """The queries as tuples, each checked (nothing is spent here)."""
        if stage in self.ran:
            raise ConfigError(f"stage oracle: stage {stage!r} has run already; its one planned charge is spent")
        out = []
        for q in queries:
            if len(q) != 2:
                raise ConfigError(f"stage oracle: a query is (attributes of one party, attributes of another), got {q!r}")
            left, right = (tuple(q[0]), tuple(q[1]))
            if not left or not right:
                raise ConfigError(f"stage oracle: query {list(left)} x {list(right)} has an empty side")
            unknown = sorted({a for a in left + right if a not in self.owner})
            if unknown:
                raise ConfigError(f"stage oracle: no party holds {unknown} (query {list(left)} x {list(right)})")
            sides = [sorted({self.owner[a] for a in side}) for side in (left, right)]
            for side, holders in zip((left, right), sides):
                if len(holders) != 1:
                    raise ConfigError(f"stage oracle: {list(side)} spans parties {holders}; each side of a "
                                      "cross-party query comes from one party")
            if sides[0] == sides[1]:
                raise ConfigError(f"stage oracle: {list(left + right)} is held by one party ({sides[0][0]}); it is "
                                  "answered at that party, not through the cross-party measure")
            if stage in self.fixed and _key((left, right)) not in self.fixed[stage]:
                raise ConfigError(f"stage oracle: {list(left)} x {list(right)} is not among stage {stage!r}'s "
                                  "planned queries")
            out.append((left, right))
        return out

    def answers(self, queries: Sequence[Query], stage: str) -> list[Message]:
        """Stage `stage` on `queries`: checked, then the measure spends the stage's planned charge and runs."""
        queries = self.check(queries, stage)
        got = self.measure.measure(self.views, queries, stage, self.ledger, self.rngs)
        self.ran.append(stage)
        # the ledger lists each cross-party table the server receives (the deploy server writes the same list
        # from what it read off the exchange: deploy/he_rounds.py)
        self.ledger.cross_party.extend(self.measure.cross_party_entries(got, stage))
        return got

    def describe(self) -> dict[str, Any]:
        return {"stages": list(self.ran), "parties": list(self.partition.names)}


def _key(q: Query) -> frozenset[str]:
    """A query's identity whichever side comes first."""
    return frozenset((tuple(q[0]), tuple(q[1])))
