"""The party side of the vertical oracle and how the server side reaches it (`PartyLink`).

`VerticalOracle` (oracle.py) is the server's side: it routes a query, checks it, pays for it on the run's ledger and
keeps the released answers. Everything that reads a party's columns or draws a party's noise is a `PartySide`, one
per party, reached through a `PartyLink`:

* `InProcessLink`: every `PartySide` in this process, and the cross-party measure run on both parties' columns at
  once (`CrossPartyMeasure.answer`): the one-process run.
* deploy/oracle_rounds.py: each `PartySide` on its party's machine, every query and answer in the run's signed
  envelopes (answers sealed to the server's run key), cross-party queries through the measure's rounds between
  the two parties.

Each call carries `Spend`, what the server paid for it (the planned charge, or a draw from a zCDP filter opened on
one), so a party on its own machine checks the query against the plan's budget on its own ledger before it reads a
row (`PartyBudget`); in one process the oracle has already paid on the one ledger. Under simulation noise a party
draws from its own stream in the same order wherever it runs, so the answers are the same bit for bit.
"""
from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs
import numpy as np

from vertisynth.core.capabilities import CrossPartyMeasure
from vertisynth.core.dataset import Dataset, VerticalPartition
from vertisynth.core.domain import Domain
from vertisynth.core.errors import BudgetError, ConfigError
from vertisynth.core.mechanisms import exponential_noise
from vertisynth.core.noise import discrete_gaussian
from vertisynth.core.privacy import Charge, PrivacyLedger, ZCDP
from vertisynth.pgm.estimation import Measurement
from vertisynth.pgm.oracle import Bins, CentralOracle, Pay, ZCDPFilter
from vertisynth.pgm.scores import indif

CrossQuery = tuple[tuple[str, ...], tuple[str, str], Bins]   # (attributes, (party, party), bins)
Answer = tuple[tuple[str, ...], np.ndarray, float]            # (attributes, noisy table, per-cell variance)


@attrs.frozen
class Spend:
    """What the server paid for one query: a planned `charge` (ρ its own), or `rho` drawn from the zCDP filter
    opened on the planned `charge` (`filtered`); `what` says for which query."""
    charge: Charge
    rho: float
    filtered: bool
    what: str

    @classmethod
    def of(cls, pay: Pay, rho: float, what: str) -> Spend:
        if isinstance(pay, ZCDPFilter):
            return cls(pay.charge, float(rho), True, what)
        if not isinstance(pay, Charge):
            raise BudgetError(f"{what}: pay with a planned ZCDP charge or a zCDP filter, got {pay!r}")
        return cls(pay, float(rho), False, what)

    def to_dict(self) -> dict[str, Any]:
        return {"charge": self.charge.to_dict(), "rho": self.rho, "filtered": self.filtered, "what": self.what}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Spend:
        try:
            c = dict(d["charge"])
            if c.get("cost_type") != "ZCDP":
                raise BudgetError(f"{d.get('what')}: a query paid with {c.get('cost_type')!r}, not a zCDP charge")
            charge = Charge(str(c["stage"]), str(c["mechanism"]), ZCDP(float(c["rho"])),
                            None if c.get("party") is None else str(c["party"]), str(c.get("note", "")))
            return cls(charge, float(d["rho"]), bool(d["filtered"]), str(d["what"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise BudgetError(f"a query's payment is malformed ({exc}); refused") from None


class PartyBudget:
    """A party's own check of what it is asked to pay: the plan's charges, each spent once, and draws from a filter
    up to its planned ρ, on this party's ledger, before any row is read (refused in one line, as the in-process
    oracle refuses it). `spend` is idempotent per query id: one query asked of a party once is paid once."""

    def __init__(self, ledger: PrivacyLedger) -> None:
        self.ledger = ledger
        self._filters: dict[tuple, ZCDPFilter] = {}
        self._paid: set[str] = set()

    def _planned(self, charge: Charge) -> Charge:
        """The plan's charge equal to `charge` (the note is free text), or a refusal naming it."""
        want = charge.to_dict()
        want.pop("note", None)
        for c in self.ledger.planned:
            d = c.to_dict()
            d.pop("note", None)
            if d == want:
                return c
        raise BudgetError(f"{charge.stage}/{charge.mechanism} ({charge.cost.describe()}) is not a charge of this "
                          "run's plan; refused before any row is read")

    def check_release(self, asked: Sequence[Mapping[str, Any]], planned: Sequence[Charge], what: str) -> None:
        """A release's payment, checked before anything is read: the charges the server paid for this party's share
        (`asked`, as `Charge.to_dict`) are exactly the `planned` ones, each a charge of this run's plan not spent yet;
        the release then spends them itself (`ReleasesAtParties.release_at`)."""
        want = [json.loads(json.dumps(c.to_dict())) for c in planned]
        if [json.loads(json.dumps(dict(a))) for a in asked] != want:
            raise BudgetError(f"{what}: paid with {[a.get('mechanism') for a in asked]}, where this party's share of "
                              f"the release plans {[c.mechanism for c in planned]}; refused before any row is read")
        for c in map(self.ledger.grouped, planned):
            if c not in self.ledger.planned:
                raise BudgetError(f"{what}: {c.stage}/{c.mechanism} is not a charge of this run's plan; refused "
                                  "before any row is read")
            if self.ledger.spent.count(c) >= self.ledger.planned.count(c):
                raise BudgetError(f"{what}: {c.stage}/{c.mechanism} is spent already (a second release); refused "
                                  "before any row is read")

    def spend(self, spend: Spend, query: str) -> None:
        if query in self._paid:
            return
        planned = self._planned(spend.charge)
        if spend.filtered:
            key = (planned.stage, planned.mechanism, planned.party, planned.cost.rho)
            if key not in self._filters:
                self._filters[key] = ZCDPFilter(planned, self.ledger)
            self._filters[key].take(spend.rho, spend.what)
        else:
            if not np.isclose(planned.cost.rho, spend.rho, rtol=1e-12, atol=0.0):
                raise BudgetError(f"{spend.what}: the charge's ρ={planned.cost.rho:.6g} is not what this answer "
                                  f"costs (ρ={spend.rho:.6g})")
            self.ledger.spend(planned)
        self._paid.add(query)


def coarsen(view: Dataset, attributes: Sequence[str], bins: Bins) -> Dataset:
    """A party's columns `attributes`, each binned value replaced by its bin (done at the party, before the
    protocol: the other roles only ever see bin codes)."""
    cols, sizes = [], {}
    for a in attributes:
        col = np.asarray(view.column(a), np.int64)
        if bins and a in bins:
            b = np.asarray(bins[a], np.int64)
            col, sizes[a] = b[col], int(b.max()) + 1
        else:
            sizes[a] = view.domain.size(a)
        cols.append(col)
    return Dataset(np.stack(cols, axis=1) if cols else np.zeros((view.n, 0), np.int64), Domain.from_sizes(sizes))


def coarse_domain(domain: Domain, attributes: Sequence[str], bins: Bins) -> Domain:
    """The public domain of `coarsen(view, attributes, bins)`: from the domain and the bins alone."""
    return Domain.from_sizes({a: int(np.asarray(bins[a]).max()) + 1 if bins and a in bins else domain.size(a)
                              for a in attributes})


def same_binning(size: int, a: np.ndarray | None, b: np.ndarray | None) -> bool:
    """Whether two binnings of an attribute of `size` values (None: none) put every value in the same bin."""
    a = np.arange(size) if a is None else np.asarray(a)
    b = np.arange(size) if b is None else np.asarray(b)
    return a.shape == b.shape and bool(np.array_equal(a, b))


class PartySide:
    """One party's answers from its own columns and its own noise stream (the central oracle's code for counts).

    `noise` is the ledger whose noise kind the party draws (secure: OS CSPRNG; simulation: `rng`). Scores of a
    selection are kept between `best` and `em` (the exponential mechanism runs where the scores are)."""

    def __init__(self, name: str, view: Dataset, rng: np.random.Generator, noise: PrivacyLedger) -> None:
        self.name, self.view, self.rng, self.noise = name, view, rng, noise
        self._counts = CentralOracle(view, noise)   # exact counts only (it never spends here)
        self._scores: tuple[np.ndarray, np.ndarray] | None = None
        self.cpu = 0.0   # CPU s of this party's own steps (not the cross-party protocol's)

    @property
    def secure(self) -> bool:
        return self.noise.noise == "secure"

    def measure(self, attributes: tuple[str, ...], sigma: float, bins: Bins) -> np.ndarray:
        """Noisy counts of a marginal of this party's columns (the central oracle's draws, from this party)."""
        c0 = time.process_time()
        probe = Measurement(attributes, np.zeros(1), 1.0, bins)
        x = self._counts.exact(attributes, probe.bins)
        if self.secure:
            out = discrete_gaussian(x, 1.0 / (2.0 * sigma * sigma), 1.0)
        else:
            out = x + self.rng.normal(0.0, sigma, size=x.shape)
        self.cpu += time.process_time() - c0
        return out

    def coarsened(self, attributes: Sequence[str], bins: Bins) -> Dataset:
        c0 = time.process_time()
        out = coarsen(self.view, attributes, bins)
        self.cpu += time.process_time() - c0
        return out

    def _score(self, candidates: Sequence[tuple[str, ...]], estimates: Sequence[np.ndarray], w: np.ndarray,
               off: np.ndarray, bins: Sequence[Bins]) -> None:
        """AIM's/MST's scores w (‖x − e‖₁ − offset) of this party's candidates, from its own columns."""
        c0 = time.process_time()
        exact = [self._counts.exact(tuple(c), b) for c, b in zip(candidates, bins)]
        errors = np.array([np.abs(x - np.asarray(e, float).reshape(x.shape)).sum() for x, e in zip(exact, estimates)])
        self._scores = (np.asarray(w, float) * (errors - np.asarray(off, float)), np.asarray(w, float))
        self.cpu += time.process_time() - c0

    def best(self, candidates: Sequence[tuple[str, ...]], estimates: Sequence[np.ndarray], w: np.ndarray,
             off: np.ndarray, bins: Sequence[Bins], rho: float, sensitivity: float, sigma: float) -> float:
        """This party's best score plus Gaussian noise: σ `sigma` (simulation), or ρ-zCDP for `sensitivity`
        (secure); the scores stay here for `em`."""
        self._score(candidates, estimates, w, off, bins)
        b = float(self._scores[0].max())
        if self.secure:
            return float(discrete_gaussian(np.array([b]), rho, sensitivity)[0])
        return b + self.rng.normal(0.0, sigma)

    def em(self, epsilon: float, candidates: Sequence[tuple[str, ...]] | None = None,
           estimates: Sequence[np.ndarray] = (), w: np.ndarray | None = None, off: np.ndarray | None = None,
           bins: Sequence[Bins] = ()) -> int:
        """The exponential mechanism (Gumbel-max; sensitivity max w) over this party's candidates: those given, or
        those of its last `best`. The index among them."""
        if candidates is not None:
            self._score(candidates, estimates, w, off, bins)
        if self._scores is None:
            raise ConfigError(f"select at {self.name!r}: no scores to choose from (no selection asked first)")
        scores, w = self._scores
        self._scores = None
        logits = epsilon * (scores - scores.max()) / (2.0 * w.max())
        return int(np.argmax(logits + exponential_noise(logits.shape, self.rng, self.noise)))

    def release(self, measure: Any, key: Any = None) -> Any:
        """This party's share of a `ReleasesAtParties` measure's release from its own columns and stream (its
        charges spent on its ledger first): the message it seals to the server."""
        c0 = time.process_time()
        out = measure.release_at(self.name, self.view, self.noise, self.rng, key)
        self.cpu += time.process_time() - c0
        return out

    def vector(self, kind: str, items: Sequence[tuple[str, ...]], estimates: Sequence[np.ndarray] | None,
               bins: Sequence[Bins] | None, rho: float, sigma: float, sensitivity: float) -> np.ndarray:
        """The entries of a Gaussian score vector this party holds: "indif" of pairs, "l1" errors of candidates
        against their estimates; noised here (one share of a vector of L2 `sensitivity`, ρ for all of it)."""
        c0 = time.process_time()
        if kind == "indif":
            x = np.array([indif(self.view, *p) for p in items], float)
        elif kind == "l1":
            x = np.array([float(np.abs((t := self._counts.exact(tuple(c), Measurement(tuple(c), np.zeros(1), 1.0,
                                                                                       b).bins))
                                       - np.asarray(e, float).reshape(t.shape)).sum())
                          for c, e, b in zip(items, estimates, bins)], float)
        else:
            raise ConfigError(f"score vector {kind!r}: unknown (indif or l1)")
        out = discrete_gaussian(x, rho, sensitivity) if self.secure else x + self.rng.normal(0.0, sigma, size=x.shape)
        self.cpu += time.process_time() - c0
        return out


@runtime_checkable
class PartyLink(Protocol):
    """How the server side of the vertical oracle reaches the parties. Every call is made after the server paid
    for it (`spend`); a party that checks budgets itself refuses what its plan does not allow."""

    noise: str   # the noise the parties draw ("secure" or "simulation"), for the answers' bookkeeping

    def measure(self, party: str, attributes: tuple[str, ...], sigma: float, bins: Bins, spend: Spend) -> np.ndarray:
        """Noisy counts of a marginal that `party` holds alone."""

    def cross(self, queries: Sequence[CrossQuery], sigma: float, spends: Sequence[Spend]) -> list[Answer]:
        """One stage of the cross-party measure over `queries` (each over exactly two parties, coarsened at each on
        its bins), at σ; per query (attributes answered, noisy table, per-cell variance)."""

    def best(self, party: str, candidates: Sequence[tuple[str, ...]], estimates: Sequence[np.ndarray],
             weights: np.ndarray, offsets: np.ndarray, bins: Sequence[Bins], rho: float, sensitivity: float,
             sigma: float, spend: Spend) -> float:
        """`party`'s best selection score among its candidates, noised (`PartySide.best`)."""

    def em(self, party: str, epsilon: float, spend: Spend, candidates: Sequence[tuple[str, ...]] | None = None,
           estimates: Sequence[np.ndarray] = (), weights: np.ndarray | None = None,
           offsets: np.ndarray | None = None, bins: Sequence[Bins] = ()) -> int:
        """The exponential mechanism at `party` (`PartySide.em`): its choice among its candidates."""

    def vector(self, party: str, kind: str, items: Sequence[tuple[str, ...]], estimates: Sequence[np.ndarray] | None,
               bins: Sequence[Bins] | None, rho: float, sigma: float, sensitivity: float, spend: Spend) -> np.ndarray:
        """`party`'s entries of a noisy score vector (`PartySide.vector`)."""


class InProcessLink:
    """Every party in this process: the one-process run (and the tests' reference for every other link)."""

    def __init__(self, views: Mapping[str, Dataset], partition: VerticalPartition, measure: CrossPartyMeasure,
                 ledger: PrivacyLedger, rngs: Mapping[str, np.random.Generator]) -> None:
        self.measure_impl, self.ledger = measure, ledger
        self.sides = {p: PartySide(p, views[p].project(a.attributes), rngs[p], ledger)
                      for p, a in zip(partition.names, partition)}
        self.owner = {a: p.name for p in partition for a in p.attributes}

    @property
    def noise(self) -> str:
        return self.ledger.noise

    @property
    def party_cpu(self) -> dict[str, float]:
        return {p: s.cpu for p, s in self.sides.items()}

    def measure(self, party, attributes, sigma, bins, spend):
        return self.sides[party].measure(attributes, sigma, bins)

    def cross(self, queries, sigma, spends):
        views: dict[str, Dataset] = {}
        asked = []
        for attributes, (p, q), bins in queries:
            left = tuple(a for a in attributes if self.owner[a] == p)
            right = tuple(a for a in attributes if self.owner[a] == q)
            for party, side in ((p, left), (q, right)):
                d = self.sides[party].coarsened(side, bins)
                extra = [x for x in d.domain.attributes if party in views and x not in views[party].domain.attributes]
                views[party] = d if party not in views else (views[party].hstack(d.project(extra)) if extra
                                                             else views[party])
            asked.append((left, right))
        return self.measure_impl.answer(views, asked, sigma, self.ledger.noise,
                                        {p: self.sides[p].rng for p in views},
                                        whole={p: self.sides[p].view for p in views})

    def release(self) -> None:
        """A `ReleasesOnce` measure's one release: each party encodes its own columns (spending its planned
        charges first) with its own stream; what it releases is sealed to the server side (the measure object)."""
        c0 = time.process_time()
        self.measure_impl.release({p: s.view for p, s in self.sides.items()}, self.ledger,
                                  {p: s.rng for p, s in self.sides.items()})
        spent = time.process_time() - c0
        for s in self.sides.values():   # one process: the parties' encodings are timed together, split evenly
            s.cpu += spent / len(self.sides)

    def best(self, party, candidates, estimates, weights, offsets, bins, rho, sensitivity, sigma, spend):
        return self.sides[party].best(candidates, estimates, weights, offsets, bins, rho, sensitivity, sigma)

    def em(self, party, epsilon, spend, candidates=None, estimates=(), weights=None, offsets=None, bins=()):
        return self.sides[party].em(epsilon, candidates, estimates, weights, offsets, bins)

    def vector(self, party, kind, items, estimates, bins, rho, sigma, sensitivity, spend):
        return self.sides[party].vector(kind, items, estimates, bins, rho, sigma, sensitivity)
