"""The vertical oracle across machines: a synthesizer that fits on a marginal oracle (`FitsOnOracle`, e.g. `aim` with
`params.vertical`) runs at the server against a `VerticalOracle` whose parties are on their own machines.

The driver knows no synthesizer and no encoder: the server runs `fit_oracle` on `VerticalOracle.over(RemoteLink)`;
each party answers with its `PartySide` (vertisynth/vertical/link.py) from its own columns and stream, and a
cross-party query runs the measure's rounds (`AnswersInRounds`) between the two parties, or, for a measure that
releases once (`ReleasesAtParties`: dpfm, grr), the first one asks every party for its share of the release, which the
server checks against the plan and answers every cross-party question from. Per query k, in the run's
signed envelopes (core/envelope.py) over its transport, each sealed to its one recipient's run key (a sealed
`Session`: only the hellos and the run keys travel in clear):

  key (tag party)    party -> every role             its X25519 run key for this run, signed (session.py)
  oracle-query-k     server -> the parties it asks   what to answer (op, attributes, σ, bins, estimates) and what the
                                                     server paid for it (`Spend`: the plan's charge or a filter draw),
                                                     one envelope per party, sealed to that party's run key
  <the measure's rounds>  party -> party             e.g. he-key/he-rows/he-sums-oracle-k (cross-party queries only),
                                                     each sealed to its recipient's run key
  keys-pub, keys-wrap party -> party                 a release of a measure that agrees a key (dpfm: the FM key), at
                                                     its release query only: the key agreement, sealed to each other
                                                     party (never to the server)
  oracle-answer-k    party -> server                 its answer (a release: its share, e.g. its DP FM sketches or GRR
                                                     columns), sealed to the server's run key (session.py)
  oracle-refused-k   party -> server                 one line: why this party refused the query (nothing read), sealed
  oracle-query-k     server -> every party, op done  the fit is over (or failed: its one line)
  ledger             party -> server                 what it spent (sealed)

Before it reads a row a party checks each query: routed to it (its attributes; a cross-party query over it and one
other party, a side each), paid by a charge of the plan not yet spent or a draw within the filter's planned ρ
(`PartyBudget`, on its own ledger), and no less noise than the payment covers. Every wait is bounded (the measure's
`round_timeout()`); a silent party or server is named in one line.
"""
from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import attrs
import numpy as np

from vertisynth.core.capabilities import AnswersInRounds, ReleasesAtParties
from vertisynth.core.dataset import Dataset, VerticalPartition
from vertisynth.core.domain import Domain
from vertisynth.core.encoding import TableSchema
from vertisynth.core.envelope import ALL, canonical
from vertisynth.core.errors import BudgetError, ConfigError, DomainError, MessageError, VertisynthError
from vertisynth.core.keys import KeyParty
from vertisynth.core.messages import Message
from vertisynth.core.privacy import PrivacyLedger
from vertisynth.core.progress import step
from vertisynth.pgm.scores import INDIF_SENSITIVITY
from vertisynth.run.config import noise_for
from vertisynth.vertical import VerticalOracle
from vertisynth.vertical.link import PartyBudget, PartySide, Spend, coarse_domain

from .he_rounds import run_stage
from .session import SERVER, Session, key_context
from .transport import ReportsWaiting, poll_wait

QUERY, ANSWER, REFUSED = "oracle-query-", "oracle-answer-", "oracle-refused-"
OPS = ("measure", "cross", "best", "em", "vector", "release", "done")


@attrs.frozen(eq=False)
class OracleQuery(Message):
    """The server's query number `number`: `op`, its public arguments (`header`) and arrays (estimates, bins)."""

    kind: ClassVar[str] = "oracle_query"
    number: int = 0
    op: str = ""
    header: dict = attrs.field(factory=dict)
    arrays: dict = attrs.field(factory=dict)

    def validate(self) -> OracleQuery:
        super().validate()
        if self.op not in OPS:
            raise self._fail(f"unknown op {self.op!r} (one of {list(OPS)})")
        return self


@attrs.frozen(eq=False)
class OracleAnswer(Message):
    """A party's answer to query `number`: arrays (noisy counts, a noisy score, a choice) or, for a cross-party
    query, the measure's published messages (bytes)."""

    kind: ClassVar[str] = "oracle_answer"
    number: int = 0
    header: dict = attrs.field(factory=dict)
    arrays: dict = attrs.field(factory=dict)


def _bins_out(prefix: str, bins: Any, arrays: dict) -> list[str] | None:
    if not bins:
        return None
    for a, b in bins.items():
        arrays[f"{prefix}/{a}"] = np.asarray(b, np.int64)
    return sorted(bins)


def _bins_in(prefix: str, names: list[str] | None, arrays: Mapping[str, np.ndarray]) -> dict | None:
    if not names:
        return None
    try:
        return {a: np.asarray(arrays[f"{prefix}/{a}"], np.int64) for a in names}
    except KeyError as exc:
        raise MessageError(f"oracle query: bins {exc} named but not sent; refused") from None


def _pack(messages: Sequence[Message]) -> dict[str, np.ndarray]:
    return {f"m{i:04d}": np.frombuffer(m.to_bytes(), np.uint8) for i, m in enumerate(messages)}


# -- the server's side: a PartyLink over the exchange ----------------------------------------------------------------
class RemoteLink:
    """The parties on their machines: each call is one query envelope and the asked parties' sealed answers."""

    noise = "simulation"   # the parties' noise, reported in their ledgers at the end

    def __init__(self, sess: Session, partition: VerticalPartition, domain: Domain,
                 measure: AnswersInRounds | ReleasesAtParties, timeout: float, poll: float = 0.05,
                 ledger: PrivacyLedger | None = None, server_noise: str = "secure") -> None:
        self.sess, self.partition, self.domain, self.measure_impl = sess, partition, domain, measure
        self.server_noise = server_noise   # what the server draws where a measure has it add noise of its own
        self.ledger = ledger   # the run's: a release's charges are paid on it (every other query is paid by the oracle)
        self.owner = {a: p.name for p in partition for a in p.attributes}
        self.timeout, self.poll = timeout, poll
        self.number = 0
        self._pids: dict[int, tuple[Spend, int]] = {}   # one payment, one id (a select asks two parties, then one)

    def _pid(self, spend: Spend) -> dict:
        if id(spend) not in self._pids:
            self._pids[id(spend)] = (spend, len(self._pids))
        return {"id": self._pids[id(spend)][1], **spend.to_dict()}

    def ask(self, to: list[str], op: str, header: dict, arrays: dict | None = None) -> dict[str, OracleAnswer]:
        k = self.number
        self.number += 1
        q = OracleQuery(SERVER, k, op, header, arrays or {}).validate()
        if self.sess.sealed:   # each party's run key first: a party that never started is named as silent
            for p in (self.partition.names if to == [ALL] else to):
                try:
                    self.sess.key_of(p, 0.0 if to == [ALL] else self.timeout)
                except MessageError:
                    if to != [ALL]:
                        raise MessageError(f"no answer from [{p!r}] to query {k} ({header.get('what', op)}) within "
                                           f"{self.timeout:.0f} s in {self.sess.transport}: it published no run key; "
                                           f"is {p!r} down?") from None
            if to == [ALL]:   # done: every party that can be reached (one that never started published no key)
                to = [p for p in self.partition.names if p in self.sess.keys]
        if to:
            self.sess.send(f"{QUERY}{k:06d}", to, q.kind, q.to_bytes())
        if to == [ALL] or op == "done":
            return {}
        step(f"server: query {k} ({header.get('what', op)}) at {' and '.join(to)}", 0, 1)
        return self._await(k, to, header.get("what", op))

    def _await(self, k: int, parties: list[str], what: str) -> dict[str, OracleAnswer]:
        got: dict[str, OracleAnswer] = {}
        deadline = time.monotonic() + self.timeout
        names = self.sess.transport.names
        while True:
            for p in parties:
                if p in got:
                    continue
                refused = names(f"{REFUSED}{k:06d}__{p}__*")
                if refused:
                    _, body = self.sess.open(refused[0], (f"{REFUSED}{k:06d}",))
                    raise MessageError(f"party {p!r} refused query {k} ({what}): {_reason(body)}")
                answered = names(f"{ANSWER}{k:06d}__{p}__*")
                if answered:
                    header, body = self.sess.open(answered[0], (f"{ANSWER}{k:06d}",))
                    msg = Message.from_bytes(body, answered[0])
                    if not isinstance(msg, OracleAnswer) or msg.party != header.sender or msg.number != k:
                        raise MessageError(f"{answered[0]}: not {p!r}'s answer to query {k}; refused")
                    got[p] = msg
            if len(got) == len(parties):
                return got
            if time.monotonic() > deadline:
                missing = [p for p in parties if p not in got]
                raise MessageError(f"no answer from {missing} to query {k} ({what}) within {self.timeout:.0f} s in "
                                   f"{self.sess.transport}: is {missing[0]!r} down?")
            if isinstance(self.sess.transport, ReportsWaiting):
                self.sess.transport.waiting(f"the answer to query {k}")
            time.sleep(poll_wait(self.sess.transport, self.poll))

    @staticmethod
    def _array(answer: OracleAnswer, name: str, party: str) -> np.ndarray:
        if name not in answer.arrays:
            raise MessageError(f"the answer of {party!r} to query {answer.number} holds no {name!r}; refused")
        return np.asarray(answer.arrays[name])

    def measure(self, party, attributes, sigma, bins, spend):
        arrays: dict = {}
        header = {"attributes": list(attributes), "sigma": sigma, "bins": _bins_out("bins", bins, arrays),
                  "spend": self._pid(spend), "what": spend.what}
        ans = self.ask([party], "measure", header, arrays)[party]
        values = self._array(ans, "values", party).astype(float)
        shape = tuple(int(np.asarray(bins[a]).max()) + 1 if bins and a in bins else self.domain.size(a)
                      for a in attributes)
        if values.shape != shape:
            raise MessageError(f"{party!r} answered {list(attributes)} with shape {values.shape}, expected {shape}; "
                               "refused")
        return values

    def cross(self, queries, sigma, spends):
        arrays: dict = {}
        asked = [{"attributes": list(a), "parties": list(ps), "bins": _bins_out(f"bins{i}", b, arrays),
                  "spend": self._pid(s)} for i, ((a, ps, b), s) in enumerate(zip(queries, spends))]
        parties = list(dict.fromkeys(p for _, ps, _ in queries for p in ps))
        what = f"{len(queries)} cross-party table(s)"
        offer = self.measure_impl.stage_offer()
        if offer:   # e.g. the he measure's trust = "server" key: in the server's signed query, sealed to each party
            arrays["offer"] = np.frombuffer(offer, np.uint8)
        answers = self.ask(parties, "cross", {"queries": asked, "sigma": sigma, "what": what}, arrays)
        messages = [Message.from_bytes(bytes(np.asarray(v, np.uint8)), f"the answer of {p!r}")
                    for p, a in answers.items() for _, v in sorted(a.arrays.items())]
        for m in messages:
            if m.party not in parties:
                raise MessageError(f"a table of {m.party!r} in the answers of {parties}; refused")
        plain, domains = _stage_of(queries, self.owner, self.domain)
        return self.measure_impl.read_answers(messages, plain, sigma, domains, self.server_noise)

    def best(self, party, candidates, estimates, weights, offsets, bins, rho, sensitivity, sigma, spend):
        arrays = {"weights": np.asarray(weights, float), "offsets": np.asarray(offsets, float)}
        header = {"candidates": [list(c) for c in candidates], "rho": rho, "sensitivity": sensitivity,
                  "sigma": sigma, "spend": self._pid(spend), "what": spend.what,
                  "bins": [_bins_out(f"bins{i}", b, arrays) for i, b in enumerate(bins)]}
        arrays.update({f"est{i}": np.asarray(e, float) for i, e in enumerate(estimates)})
        ans = self.ask([party], "best", header, arrays)[party]
        return float(self._array(ans, "value", party).reshape(-1)[0])

    def em(self, party, epsilon, spend, candidates=None, estimates=(), weights=None, offsets=None, bins=()):
        header: dict = {"epsilon": epsilon, "spend": self._pid(spend), "what": spend.what}
        arrays: dict = {}
        if candidates is not None:
            header.update(candidates=[list(c) for c in candidates],
                          bins=[_bins_out(f"bins{i}", b, arrays) for i, b in enumerate(bins)])
            arrays.update({"weights": np.asarray(weights, float), "offsets": np.asarray(offsets, float),
                           **{f"est{i}": np.asarray(e, float) for i, e in enumerate(estimates)}})
        ans = self.ask([party], "em", header, arrays)[party]
        i = int(self._array(ans, "index", party).reshape(-1)[0])
        if candidates is not None and not 0 <= i < len(candidates):
            raise MessageError(f"{party!r} chose candidate {i} of {len(candidates)}; refused")
        return i

    def vector(self, party, kind, items, estimates, bins, rho, sigma, sensitivity, spend):
        arrays: dict = {}
        header = {"kind": kind, "items": [list(c) for c in items], "rho": rho, "sigma": sigma,
                  "sensitivity": sensitivity, "spend": self._pid(spend), "what": spend.what,
                  "bins": None if bins is None else [_bins_out(f"bins{i}", b, arrays) for i, b in enumerate(bins)]}
        if estimates is not None:
            arrays.update({f"est{i}": np.asarray(e, float) for i, e in enumerate(estimates)})
        ans = self.ask([party], "vector", header, arrays)[party]
        out = self._array(ans, "values", party).astype(float)
        if out.shape != (len(items),):
            raise MessageError(f"{party!r} answered {out.shape[0] if out.ndim else 0} entries for {len(items)}; refused")
        return out

    def release(self) -> None:
        """The one release of a `ReleasesAtParties` measure, at the oracle's first cross-party question: the server
        pays every party's planned charges of it on the run's ledger (in the one-process order), asks every party for
        its share (each makes it from its own columns, after agreeing a key with the others where the measure needs
        one, and seals it to the server), and checks every share against the plan (`take_release`)."""
        if not isinstance(self.measure_impl, ReleasesAtParties) or self.ledger is None:
            raise ConfigError("the release: the run's measure does not release at the parties (ReleasesAtParties) "
                              "or the link holds no ledger to pay it on")
        parties = list(self.partition.names)
        charges = {p: self.measure_impl.release_charges(p) for p in parties}
        for p in parties:
            for c in charges[p]:
                self.ledger.spend(c)
        answers = self.ask(parties, "release", {"charges": {p: [c.to_dict() for c in cs] for p, cs in charges.items()},
                                                "what": "the release"})
        messages = []
        for p in parties:
            msg = Message.from_bytes(bytes(np.asarray(self._array(answers[p], "release", p), np.uint8)),
                                     f"the release of {p!r}")
            if msg.party != p:
                raise MessageError(f"the answer of {p!r} to the release holds {msg.party!r}'s share; refused")
            messages.append(msg)
        self.measure_impl.take_release(messages)

    def done(self, error: str | None = None) -> None:
        """Every party stops serving (after the fit, or when it failed: the one line why)."""
        self.ask([ALL], "done", {"error": error} if error else {})


def _reason(body: bytes) -> str:
    try:
        return str(json.loads(body)["error"])
    except (ValueError, KeyError, TypeError):
        return "(no reason given)"


def _stage_of(queries, owner: Mapping[str, str], domain: Domain):
    """The measure's (left, right) queries of a stage and every party's public (coarsened) domain in it."""
    plain, attrs_of, bins_of = [], {}, {}
    for attributes, (p, q), bins in queries:
        left = tuple(a for a in attributes if owner[a] == p)
        right = tuple(a for a in attributes if owner[a] == q)
        plain.append((left, right))
        for party, side in ((p, left), (q, right)):
            seen = attrs_of.setdefault(party, [])
            seen += [a for a in side if a not in seen]
            for a in side:
                if bins and a in bins:
                    bins_of[a] = bins[a]
    domains = {party: coarse_domain(domain, side, bins_of) for party, side in attrs_of.items()}
    return plain, domains


# -- the party's side ----------------------------------------------------------------------------------------------
@attrs.define
class PartyServer:
    """A party answering the server's queries from its own columns (`side`), paying each on its own ledger first."""

    sess: Session
    side: PartySide
    budget: PartyBudget
    measure: AnswersInRounds | ReleasesAtParties
    partition: VerticalPartition
    domain: Domain
    test: bool
    sent: list[str] = attrs.field(factory=list)   # the rounds of its answers
    used: dict[str, float] = attrs.field(factory=dict)   # payment id -> ρ this party released under it
    released: bool = False   # its share of the measure's one release is made

    @property
    def me(self) -> str:
        return self.sess.me

    def serve(self) -> list[str]:
        """Answer every query addressed to this party until the server says done; the rounds of its answers."""
        last = -1
        while True:
            k, name = self._next(last)
            last = k
            _, body = self.sess.open(name, (f"{QUERY}{k:06d}",))
            q = Message.from_bytes(body, name)
            if not isinstance(q, OracleQuery) or q.number != k or q.party != SERVER:
                raise MessageError(f"{name}: not the server's query {k}; refused")
            if q.op == "done":
                if q.header.get("error"):
                    raise MessageError(f"the server stopped the run: {q.header['error']}")
                return list(self.sent)
            try:
                header, arrays = self.handle(q)
            except (VertisynthError, KeyError, TypeError, ValueError) as exc:
                why = str(exc) if isinstance(exc, VertisynthError) else f"malformed ({type(exc).__name__}: {exc})"
                self.sess.send(f"{REFUSED}{k:06d}", [SERVER], "oracle_refused", canonical({"error": why}))
                if isinstance(exc, VertisynthError):
                    raise
                raise MessageError(f"{name}: {why}; refused") from None
            ans = OracleAnswer(self.me, k, header, arrays).validate()
            self.sess.send(f"{ANSWER}{k:06d}", [SERVER], ans.kind, ans.to_bytes())
            self.sent.append(f"{ANSWER}{k:06d}")

    def _next(self, last: int) -> tuple[int, str]:
        """The next query addressed to this party (or to every party), waited for up to the session's timeout."""
        deadline = time.monotonic() + self.sess.timeout
        while True:
            mine = []
            for n in self.sess.transport.names(f"{QUERY}*__{SERVER}__to__*"):
                parts = n.split("__")
                try:
                    k = int(parts[0][len(QUERY):])
                except ValueError:
                    continue
                if k > last and len(parts) >= 4 and (parts[3] == "all" or self.me in parts[3].split("+")):
                    mine.append((k, n))
            if mine:
                return min(mine)
            if time.monotonic() > deadline:
                raise MessageError(f"{self.me}: no query from the server in {self.sess.transport} within "
                                   f"{self.sess.timeout:.0f} s after query {last}: is the server down?")
            if isinstance(self.sess.transport, ReportsWaiting):
                self.sess.transport.waiting("the server's next query")
            time.sleep(poll_wait(self.sess.transport, self.sess.poll))

    # -- checks before anything is read or spent ---------------------------------------------------------------
    def _mine(self, attributes: Sequence[str], what: str) -> tuple[str, ...]:
        attributes = tuple(self.domain.check(attributes))
        others = sorted(a for a in attributes if a not in self.side.view.domain.attributes)
        if others:
            raise DomainError(f"{what}: attributes {others} are not {self.me!r}'s; refused")
        return attributes

    def _pay(self, spend: Mapping[str, Any], cost: float, what: str) -> Spend:
        """Pay for a release of this party's that costs ρ = `cost`: the payment once (on its ledger), and every
        release made under one payment (a selection's noisy best, then its exponential mechanism) within its ρ.
        This party's releases read only its own columns, so this bounds what they reveal of them by the plan."""
        s = Spend.from_dict(spend)
        pid = f"pay{int(spend['id'])}"
        used = self.used.get(pid, 0.0) + cost
        if used > s.rho * (1 + 1e-9):
            raise BudgetError(f"{what}: its noise costs ρ={cost:.6g}" + (f" after ρ={used - cost:.6g} already released"
                                                                        if used > cost else "")
                              + f", more than the ρ={s.rho:.6g} paid for it; refused")
        self.budget.spend(s, pid)
        self.used[pid] = used
        return s

    def handle(self, q: OracleQuery) -> tuple[dict, dict]:
        h, a = q.header, q.arrays
        what = str(h.get("what", q.op))
        if q.op == "measure":
            attributes = self._mine(h["attributes"], what)
            sigma = float(h["sigma"])
            if not sigma > 0:
                raise ConfigError(f"{what}: sigma must be positive, got {sigma}")
            bins = _bins_in("bins", h["bins"], a)
            self._pay(h["spend"], 1.0 / (2.0 * sigma * sigma), what)
            return {}, {"values": self.side.measure(attributes, sigma, bins)}
        if q.op == "best" or (q.op == "em" and "candidates" in h):
            cands = [self._mine(c, what) for c in h["candidates"]]
            w, off = np.asarray(a["weights"], float), np.asarray(a["offsets"], float)
            if len(w) != len(cands) or len(off) != len(cands) or not np.all(w > 0):
                raise ConfigError(f"{what}: weights and offsets must be one positive weight per candidate")
            est = [np.asarray(a[f"est{i}"], float) for i in range(len(cands))]
            bins = [_bins_in(f"bins{i}", b, a) for i, b in enumerate(h["bins"])]
            if q.op == "best":
                rho, sens, sigma = float(h["rho"]), float(h["sensitivity"]), float(h["sigma"])
                if sens < float(w.max()) * (1 - 1e-12) or not rho > 0 or not sigma > 0:
                    raise BudgetError(f"{what}: a best score of sensitivity {float(w.max()):.6g} asked at "
                                      f"sensitivity {sens:.6g}; refused")
                # what its one noisy score costs: secure noise is calibrated to (ρ, sens), simulation noise is σ
                wmax = float(w.max())
                cost = rho * (wmax / sens) ** 2 if self.side.secure else wmax * wmax / (2 * sigma * sigma)
                self._pay(h["spend"], cost, what)
                return {}, {"value": np.array([self.side.best(cands, est, w, off, bins, rho, sens, sigma)])}
            eps = float(h["epsilon"])
            self._pay(h["spend"], eps * eps / 8.0, what)
            return {}, {"index": np.array([self.side.em(eps, cands, est, w, off, bins)])}
        if q.op == "em":
            eps = float(h["epsilon"])
            if not eps > 0:
                raise ConfigError(f"{what}: epsilon must be positive, got {eps}")
            self._pay(h["spend"], eps * eps / 8.0, what)
            return {}, {"index": np.array([self.side.em(eps)])}
        if q.op == "vector":
            items = [self._mine(c, what) for c in h["items"]]
            kind, rho, sigma, sens = str(h["kind"]), float(h["rho"]), float(h["sigma"]), float(h["sensitivity"])
            own = INDIF_SENSITIVITY * math.sqrt(len(items)) if kind == "indif" else math.sqrt(len(items))
            if sens < own * (1 - 1e-12) or not sigma > 0:
                raise BudgetError(f"{what}: {len(items)} entries of sensitivity {own:.6g} asked at {sens:.6g}; refused")
            self._pay(h["spend"], sens * sens / (2 * sigma * sigma), what)
            est = [np.asarray(a[f"est{i}"], float) for i in range(len(items))] if kind == "l1" else None
            bins = ([_bins_in(f"bins{i}", b, a) for i, b in enumerate(h["bins"])] if h["bins"] is not None
                    else [None] * len(items))
            return {}, {"values": self.side.vector(kind, items, est, bins, rho, sigma, sens)}
        if q.op == "cross":
            return {}, self._cross(q.number, h, a, what)
        if q.op == "release":
            return {}, self._release(h, what)
        raise ConfigError(f"oracle query: op {q.op!r} is not answered by a party")

    def _release(self, h: Mapping[str, Any], what: str) -> dict:
        """This party's share of the measure's one release: refused where the run's plan has none, a second time,
        or paid otherwise than the plan's charges of this share (`PartyBudget.check_release`), before a row is
        read; then the key agreement with the other parties where the measure needs one (never with the server),
        and the share from this party's columns and stream, for the server alone (the answer is sealed to it)."""
        if not isinstance(self.measure, ReleasesAtParties):
            raise ConfigError(f"{what}: this run's plan has no release (its measure answers each query); refused")
        if self.released:
            raise MessageError(f"{what}: {self.me!r} made its share of the release already; a second release is "
                               "refused")
        planned = self.measure.release_charges(self.me)
        asked = dict(h.get("charges") or {})
        if self.me not in asked:
            raise BudgetError(f"{what}: the query pays for no share of {self.me!r} (only {sorted(asked)}); refused "
                              "before any row is read")
        self.budget.check_release(asked[self.me], planned, what)
        self.released = True
        key = None
        if self.measure.agrees_keys():
            seeded = self.measure.seeded_keys(self.side.noise.noise)
            me = KeyParty.create(self.me, self.side.rng if seeded else None,
                                 key_context(self.sess.state.run, self.sess.state.config))
            key = agree_group_key(self.sess, list(self.partition.names), me, self.side.rng if seeded else None)
        msg = self.side.release(self.measure, key)
        return {"release": np.frombuffer(msg.to_bytes(), np.uint8)}

    def _cross(self, k: int, h: Mapping[str, Any], a: Mapping[str, np.ndarray], what: str) -> dict:
        sigma = float(h["sigma"])
        if not sigma > 0:
            raise ConfigError(f"{what}: sigma must be positive, got {sigma}")
        owner = {x: p.name for p in self.partition for x in p.attributes}
        queries = []
        for i, item in enumerate(h["queries"]):
            attributes = tuple(self.domain.check(item["attributes"]))
            parties = tuple(str(p) for p in item["parties"])
            held = list(dict.fromkeys(owner[x] for x in attributes))
            if len(held) != 2:
                raise ConfigError(f"{what}: {list(attributes)} is held by {len(held)} part{'y' if len(held) == 1 else 'ies'}"
                                  f" ({', '.join(held)}); a cross-party measure answers tables of exactly two; refused")
            if len(parties) != 2 or set(parties) != set(held) or self.me not in parties:
                raise ConfigError(f"{what}: {list(attributes)} routed to {list(parties)}, held by {held}; refused")
            queries.append((attributes, parties, _bins_in(f"bins{i}", item["bins"], a)))
        for item in h["queries"]:   # every table's payment checked before any is spent
            Spend.from_dict(item["spend"])
        for item in h["queries"]:
            self._pay(item["spend"], self.measure.rho_per_table(sigma), what)
        plain, domains = _stage_of(queries, owner, self.domain)
        mine: list[str] = []
        bins_of: dict[str, np.ndarray] = {}
        for attributes, _, bins in queries:
            mine += [x for x in attributes if owner[x] == self.me and x not in mine]
            bins_of.update({x: b for x, b in (bins or {}).items() if owner[x] == self.me})
        view = self.side.coarsened(mine, bins_of)
        offer = bytes(np.asarray(a["offer"], np.uint8)) if "offer" in a else b""
        stage = self.measure.answer_stage(self.me, view, domains, plain, sigma, self.side.noise.noise,
                                          self.side.rng, self.test, f"oracle-{k:06d}", offer=offer,
                                          parties={p.name: self.domain.project(p.attributes)
                                                   for p in self.partition})
        published: list[Message] = []
        run_stage(attrs.evolve(self.sess, timeout=self.measure.round_timeout()), stage, published.append)
        return _pack(published)


def agree_group_key(sess: Session, names: Sequence[str], me: KeyParty, rng: np.random.Generator | None) -> KeyParty:
    """`me`'s side of the parties' key agreement (core/keys.py: X25519 + HKDF; for three or more the leader wraps a
    fresh group key for each other party under their pairwise key), each public key and wrapped key in an envelope
    its sender signs: in a sealed session (a vertical twin's release) sealed to each other party and never sent to
    the server; in an unsealed one (`party keys`) to every role (public keys, and AES-GCM-wrapped group keys).
    `rng`: the party's seeded stream of a reproducible run, else None (the OS CSPRNG)."""
    names, party = list(names), me.name
    others = [n for n in names if n != party]
    sess.send("keys-pub", others if sess.sealed else [ALL], "x25519_public", me.public_bytes())
    got = sess.receive("keys-pub", others if sess.sealed else names, to=party)
    published = {}
    for who, [(_, body)] in got.items():
        if len(body) != 32:
            raise MessageError(f"keys-pub from {who!r}: a public key of {len(body)} bytes, expected 32; refused")
        published[who] = body
    if published.get(party, me.public_bytes()) != me.public_bytes():
        raise MessageError(f"keys-pub: the exchange holds a public key under {party!r}'s name that is not ours; refused")
    leader = names[0]
    if len(names) == 2:
        me.derive_pair_group(others[0], published[others[0]])
    elif party == leader:
        for n, blob in me.wrap_group_for({n: published[n] for n in names[1:]}, rng).items():
            sess.send("keys-wrap", [n], "wrapped_group_key", blob, tag=n)
    else:
        [(_, blob)] = sess.receive("keys-wrap", [leader], to=party)[leader]
        me.unwrap_group(leader, published[leader], blob)
    return me


def serve_oracle(plan: Any, synth: Any, sess: Session, domain: Domain, rng: np.random.Generator,
                 timeout: float) -> VerticalOracle:
    """The server's fit: `fit_oracle` against the parties, over the exchange. Every party is told when it is over
    (or why it failed)."""
    measure = plan.measure.instance   # an AnswersInRounds or ReleasesAtParties, checked by plans.vertical_plan
    sess.sealed = True   # every query sealed to its party's run key (session.py): a relay reads no marginal asked
    wait = min(timeout, measure.round_timeout()) if isinstance(measure, AnswersInRounds) else timeout
    # the server's own noise (he trust = "server" adds a share after decrypting): the config's, else secure
    link = RemoteLink(sess, plan.partition, domain, measure, wait, ledger=plan.ledger,
                      server_noise=noise_for(plan.config, cross_machine=True))
    oracle = VerticalOracle.over(link, plan.partition, domain, measure, plan.ledger, plan.measure.spec.name,
                                 synth.vertical_request().group_share)
    try:
        synth.fit_oracle(oracle, rng)
    except BaseException as exc:   # every party stops at once, told why (not after its timeout)
        link.done((str(exc).splitlines() or [type(exc).__name__])[0])
        raise
    link.done()
    return oracle


def check_spends(ledger: Any, reports: Mapping[str, Mapping[str, Any]]) -> str:
    """Each party's signed report of what it spent, within what the server's oracle spent (the same charges: a
    party pays only for what it was asked); their noise kind, one for all. Refused in one line otherwise."""
    def key(d: Mapping[str, Any]) -> str:
        return canonical({k: v for k, v in d.items() if k != "note"}).decode()
    server = [key(c.to_dict()) for c in ledger.spent]
    for party, report in reports.items():
        left = list(server)
        for s in report["spent"]:
            if key(s) not in left:
                raise MessageError(f"ledger from {party!r}: spend {s.get('stage')}/{s.get('mechanism')} was not "
                                   "asked by the server's oracle; refused")
            left.remove(key(s))
    kinds = {r.get("noise", "simulation") for r in reports.values()}
    if len(kinds) > 1:
        raise MessageError(f"the parties drew different noise ({sorted(kinds)}): one release, one kind; refused")
    return kinds.pop() if kinds else "simulation"


def party_view(plan: Any, party: str, frame: Any, rng: np.random.Generator) -> Dataset:
    """This party's coded columns (the public schema's codes: what the one-process run codes them to)."""
    own = list(plan.partition.parties[plan.partition.names.index(party)].attributes)
    schema = TableSchema(tuple(c for c in plan.source.schema.columns if c.name in own))
    return schema.fit(frame, plan.ledger, rng).encode(frame).project(own)
