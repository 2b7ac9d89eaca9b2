"""Message-driven m-party PSI and PSU over ristretto255 (seed 001, Algorithm 1, generalised to m parties).

Every party is a small state machine: `step(r, inbox)` consumes the messages addressed to it in round r
and returns the messages it sends. Messages are `BlindedSet` files, so each party can run on its own
machine (`vertisynth party align`); `simulate` runs all parties in one process, round by round.

Parties sit on a ring in config order; `next` is the following party and the *leader* is the first.

PSU (union; nobody learns which of its IDs are in the intersection). Keys per party: a (round 1),
s2 and s3 (round 2 applies b = s2·s3), exactly the seed's (s1; s2, s3) for m = 2.
  rounds 1..m     each party's hashed set travels the ring; every party raises it to its `a` and
                  shuffles, so no one can link an element to a row. Fully blinded sets go to the leader.
  round m+1       the leader merges them (dedup) into (∪)^{Πa} and starts round 2.
  rounds m+2..2m  the union travels the ring; every party raises it to its b and shuffles. The last one
                  broadcasts U = sorted (∪)^{Πa·Πb}: the universal IDs.
  rounds 1..m+1   (in parallel) the private mapping step: party i sends H(x)^{s2_i} in its own order;
                  every other party raises it to its a·b and keeps the order; back home i raises it to
                  a_i·s3_i and holds x -> u(x) for each of its IDs.
  round 2m+1      each party finds its UIDs in U: a mapping from its rows to U's positions.
Leakage: everyone learns all set sizes and |U|; the leader sees which fully-blinded elements repeat
across the m sets, i.e. the sizes of every region of the sets' Venn diagram (for m = 2 only
|I_a ∩ I_b|, which follows from the sizes anyway - the seed's Theorem 1). Nobody learns which of its
own IDs are shared: its own set comes back shuffled by the others.

PSI (intersection; each party learns which of its rows are in it, in one common order). Key k per party.
  round 1         party i sends H(x)^{k_i} in a private random order π_i to next.
  rounds 2..m     every other party raises it to its k and keeps the order; the last returns it home.
  round m+1       i now holds H(x)^{Πk} for its rows (it knows π_i); it sends them, reshuffled, to the leader.
  round m+2       the leader intersects the m sets and broadcasts the sorted intersection.
  round m+3       each party lists its rows whose value is in it, in that sorted (common) order.
Leakage: set sizes and the intersection (to every party, for its own rows); the leader also sees the
Venn-region sizes, and for m >= 3 which of *its own* rows are shared with other parties (it holds the
owner-order of its own set). Make a party with the least to lose the leader (the first in the list).
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import attrs
import numpy as np

from vertisynth.core import progress
from vertisynth.core.errors import DataError, MessageError
from vertisynth.core.messages import Message

from . import group


@attrs.frozen(eq=False)
class BlindedSet(Message):
    """One protocol message: blinded group elements from `party` to `to` in round `round`."""

    kind: ClassVar[str] = "blinded_set"
    to: str = ""
    round: int = 0
    tag: str = ""
    origin: str = ""
    hops: int = 0
    elements: np.ndarray = attrs.field(factory=lambda: np.zeros((0, group.ELEMENT_BYTES), np.uint8))

    def validate(self) -> BlindedSet:
        super().validate()
        if not isinstance(self.to, str) or not self.to:
            raise self._fail("no recipient")
        if not isinstance(self.round, int) or self.round < 1:
            raise self._fail(f"round must be a positive integer, got {self.round!r}")
        group.check_elements(self.elements, f"blinded_set message from {self.party!r} (round {self.round}, {self.tag})")
        return self

    @property
    def filename(self) -> str:
        return f"r{self.round:02d}__{self.party}__to__{self.to}__{self.tag}__{self.origin}.npz"


@attrs.frozen
class PartyResult:
    """What one party knows at the end. PSI: `rows` lists its rows in the common order. PSU: `rows[i]`
    is the position in U of its row i; `n_common` is |U| (PSU) or the intersection size (PSI)."""

    party: str
    protocol: str
    rows: np.ndarray
    n_common: int
    sizes: dict[str, int]

    def held_mask(self) -> np.ndarray:
        """PSU: which positions of U this party holds (True) or must fill (False)."""
        mask = np.zeros(self.n_common, bool)
        mask[self.rows] = True
        return mask


def _secure_permutation(n: int, rng: np.random.Generator | None) -> np.ndarray:
    if rng is not None:
        return rng.permutation(n)
    return np.argsort(np.frombuffer(os.urandom(8 * n), dtype=np.uint64), kind="stable") if n else np.zeros(0, int)


def _sorted_unique(keys: np.ndarray) -> bool:
    uniq = np.unique(keys)
    return len(uniq) == len(keys) and bool(np.all(uniq == keys))


class _Party:
    protocol: ClassVar[str] = ""

    def __init__(self, name: str, ids: Sequence[str], ring: Sequence[str], rng: np.random.Generator | None = None,
                 workers: Any = 1) -> None:
        if name not in ring:
            raise DataError(f"party {name!r} is not in the protocol's party list {list(ring)}")
        if len(ring) < 2 or len(set(ring)) != len(ring):
            raise DataError(f"{self.protocol} needs at least two distinct parties, got {list(ring)}")
        self.name, self.ring, self.m = name, tuple(ring), len(ring)
        self.rng, self.workers = rng, workers
        self.next = self.ring[(self.ring.index(name) + 1) % self.m]
        self.leader = self.ring[0]
        self.hashed = group.hash_to_group(list(ids), self.protocol.encode(), workers)
        self.sizes: dict[str, int] = {name: len(self.hashed)}
        self.result: PartyResult | None = None

    @property
    def rounds(self) -> int:
        raise NotImplementedError

    def expected(self, r: int) -> dict[str, int]:
        raise NotImplementedError

    def _msg(self, to: str, r: int, tag: str, origin: str, hops: int, elements: np.ndarray) -> BlindedSet:
        return BlindedSet(self.name, to, r, tag, origin, hops, elements)

    def _shuffle(self, elements: np.ndarray) -> np.ndarray:
        return elements[_secure_permutation(len(elements), self.rng)]

    def _exp(self, elements: np.ndarray, *scalars: bytes) -> np.ndarray:
        return group.exp(elements, group.scalar_mul(*scalars), self.workers)

    def _expect(self, r: int, inbox: Sequence[BlindedSet], tags: Mapping[str, int]) -> dict[str, list[BlindedSet]]:
        """Check that the inbox holds exactly the expected number of messages per tag for round r."""
        got: dict[str, list[BlindedSet]] = {t: [] for t in tags}
        for msg in inbox:
            msg.validate()
            if msg.to != self.name or msg.round != r - 1 or msg.tag not in tags:
                raise MessageError(f"{self.protocol} party {self.name!r}, round {r}: unexpected message "
                                   f"{msg.tag!r} from {msg.party!r} to {msg.to!r} sent in round {msg.round}")
            if msg.party not in self.ring:
                raise MessageError(f"{self.protocol}: message from unknown party {msg.party!r}")
            got[msg.tag].append(msg)
        for tag, count in tags.items():
            if len(got[tag]) != count:
                raise MessageError(f"{self.protocol} party {self.name!r}, round {r}: expected {count} {tag!r} "
                                   f"message(s) from round {r - 1}, got {len(got[tag])}; is a party's message missing?")
        return got

    def step(self, r: int, inbox: Sequence[BlindedSet]) -> list[BlindedSet]:
        if not 1 <= r <= self.rounds:
            raise MessageError(f"{self.protocol} has rounds 1..{self.rounds}, got round {r}")
        return self._step(r, inbox)

    def _step(self, r: int, inbox: Sequence[BlindedSet]) -> list[BlindedSet]:
        raise NotImplementedError


class PSUParty(_Party):
    protocol: ClassVar[str] = "psu"

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.a = group.random_scalar(self.rng)
        self.s2 = group.random_scalar(self.rng)
        self.s3 = group.random_scalar(self.rng)
        self.own_uids: np.ndarray | None = None

    @property
    def rounds(self) -> int:
        return 2 * self.m + 1

    def expected(self, r: int) -> dict[str, int]:
        """How many messages of each tag this party receives at the start of round r."""
        m, tags = self.m, {}
        if 2 <= r <= m:
            tags["union1"] = 1
            tags["map"] = 1
        if r == m + 1:
            tags["map"] = 1
            if self.name == self.leader:
                tags["union1-full"] = m
        if m + 2 <= r <= 2 * m and self.ring.index(self.name) == r - m - 1:
            tags["union2"] = 1   # round 2 reaches ring position j in round m+1+j
        if r == 2 * m + 1:
            tags["U"] = 1
        return tags

    def _step(self, r: int, inbox: Sequence[BlindedSet]) -> list[BlindedSet]:
        m, out = self.m, []
        if r == 1:
            self._expect(r, inbox, self.expected(r))
            out.append(self._msg(self.next, r, "union1", self.name, 1, self._shuffle(self._exp(self.hashed, self.a))))
            out.append(self._msg(self.next, r, "map", self.name, 1, self._exp(self.hashed, self.s2)))
            return out
        got = self._expect(r, inbox, self.expected(r))
        for msg in got.get("union1", []):
            self.sizes[msg.origin] = len(msg.elements)
            blinded = self._shuffle(self._exp(msg.elements, self.a))
            full = msg.hops + 1 == m
            out.append(self._msg(self.leader if full else self.next, r, "union1-full" if full else "union1",
                                 msg.origin, msg.hops + 1, blinded))
        for msg in got.get("map", []):
            self.sizes[msg.origin] = len(msg.elements)
            if msg.origin == self.name:   # home again: add my own a·s3 (s2 is already in)
                self.own_uids = self._exp(msg.elements, self.a, self.s3)
            else:
                out.append(self._msg(self.next, r, "map", msg.origin, msg.hops + 1,
                                     self._exp(msg.elements, self.a, self.s2, self.s3)))
        if got.get("union1-full"):
            merged = np.unique(group.as_keys(np.concatenate([g.elements for g in got["union1-full"]])))
            union = merged.view(np.uint8).reshape(-1, group.ELEMENT_BYTES)
            out.append(self._msg(self.next, r, "union2", self.name, 1,
                                 self._shuffle(self._exp(union, self.s2, self.s3))))
        for msg in got.get("union2", []):
            blinded = self._exp(msg.elements, self.s2, self.s3)
            if msg.hops + 1 == m:
                uids = np.unique(group.as_keys(blinded)).view(np.uint8).reshape(-1, group.ELEMENT_BYTES)
                out += [self._msg(p, r, "U", self.name, m, uids) for p in self.ring]
            else:
                out.append(self._msg(self.next, r, "union2", msg.origin, msg.hops + 1, self._shuffle(blinded)))
        if got.get("U"):
            self._finish(got["U"][0].elements)
        return out

    def _finish(self, uids: np.ndarray) -> None:
        keys = group.as_keys(uids)
        if not _sorted_unique(keys):
            raise MessageError("psu: the universal ID list is not sorted and duplicate-free")
        mine = group.as_keys(self.own_uids)
        pos = np.minimum(np.searchsorted(keys, mine), max(len(keys) - 1, 0))
        if len(mine) and (len(keys) == 0 or not np.all(keys[pos] == mine)):
            raise MessageError(f"psu party {self.name!r}: some of its universal IDs are not in U; "
                               "a message was altered or a party used inconsistent keys")
        self.result = PartyResult(self.name, "psu", pos.astype(np.int64), len(keys), {**self.sizes, "union": len(keys)})


class PSIParty(_Party):
    protocol: ClassVar[str] = "psi"

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.k = group.random_scalar(self.rng)
        self.order = _secure_permutation(len(self.hashed), self.rng)
        self.full: np.ndarray | None = None

    @property
    def rounds(self) -> int:
        return self.m + 3

    def expected(self, r: int) -> dict[str, int]:
        m, tags = self.m, {}
        if 2 <= r <= m:
            tags["psi"] = 1
        if r == m + 1:
            tags["psi-full"] = 1
        if r == m + 2 and self.name == self.leader:
            tags["psi-set"] = m
        if r == m + 3:
            tags["I"] = 1
        return tags

    def _step(self, r: int, inbox: Sequence[BlindedSet]) -> list[BlindedSet]:
        m, out = self.m, []
        if r == 1:
            self._expect(r, inbox, self.expected(r))
            return [self._msg(self.next, r, "psi", self.name, 1, self._exp(self.hashed[self.order], self.k))]
        got = self._expect(r, inbox, self.expected(r))
        for msg in got.get("psi", []):
            self.sizes[msg.origin] = len(msg.elements)
            blinded = self._exp(msg.elements, self.k)
            full = msg.hops + 1 == m
            out.append(self._msg(msg.origin if full else self.next, r, "psi-full" if full else "psi",
                                 msg.origin, msg.hops + 1, blinded))
        for msg in got.get("psi-full", []):
            if msg.origin != self.name or len(msg.elements) != len(self.hashed):
                raise MessageError(f"psi party {self.name!r}: its blinded set came back wrong "
                                   f"(origin {msg.origin!r}, {len(msg.elements)} of {len(self.hashed)} elements)")
            self.full = np.empty_like(msg.elements)
            self.full[self.order] = msg.elements     # back in row order
            out.append(self._msg(self.leader, r, "psi-set", self.name, m, self._shuffle(msg.elements)))
        if got.get("psi-set"):
            sets = [group.as_keys(g.elements) for g in got["psi-set"]]
            for g in got["psi-set"]:
                self.sizes[g.origin] = len(g.elements)
            common = sets[0]
            for s in sets[1:]:
                common = np.intersect1d(common, s)
            common = np.unique(common).view(np.uint8).reshape(-1, group.ELEMENT_BYTES)
            out += [self._msg(p, r, "I", self.name, m, common) for p in self.ring]
        if got.get("I"):
            self._finish(got["I"][0].elements)
        return out

    def _finish(self, common: np.ndarray) -> None:
        keys = group.as_keys(common)
        if not _sorted_unique(keys):
            raise MessageError("psi: the intersection list is not sorted and duplicate-free")
        mine = group.as_keys(self.full)
        order = np.argsort(mine, kind="stable")
        pos = np.searchsorted(mine[order], keys)
        pos = np.minimum(pos, max(len(mine) - 1, 0))
        if len(keys) and (len(mine) == 0 or not np.all(mine[order][pos] == keys)):
            raise MessageError(f"psi party {self.name!r}: the intersection holds values it does not hold; "
                               "a message was altered")
        rows = order[pos] if len(keys) else np.zeros(0, np.int64)
        self.result = PartyResult(self.name, "psi", rows.astype(np.int64), len(keys),
                                  {**self.sizes, "intersection": len(keys)})


PARTY_CLASSES: dict[str, type[_Party]] = {"psi": PSIParty, "psu": PSUParty}


def make_parties(protocol: str, ids: Mapping[str, Sequence[str]], rng: np.random.Generator | None = None,
                 workers: Any = 1) -> dict[str, _Party]:
    """One party object per entry of `ids` (ring order = mapping order). `rng` seeds keys and shuffles
    (a reproducible simulation); None draws them from the OS CSPRNG, as a real deployment must."""
    if protocol not in PARTY_CLASSES:
        raise DataError(f"unknown alignment protocol {protocol!r}; choose from {sorted(PARTY_CLASSES)}")
    ring = list(ids)
    rngs = (dict(zip(ring, rng.spawn(len(ring)))) if rng is not None else dict.fromkeys(ring))
    return {p: PARTY_CLASSES[protocol](p, ids[p], ring, rngs[p], workers) for p in ring}


def simulate(parties: Mapping[str, _Party], transcript: list[BlindedSet] | None = None) -> dict[str, PartyResult]:
    """Run every party's rounds in turn in this process, routing messages; `transcript` collects them."""
    rounds = next(iter(parties.values())).rounds
    inbox: dict[str, list[BlindedSet]] = {p: [] for p in parties}
    for r in range(1, rounds + 1):
        outgoing = [msg for p, party in parties.items() for msg in party.step(r, inbox[p])]
        inbox = {p: [] for p in parties}
        for msg in outgoing:
            inbox[msg.to].append(msg)
        if transcript is not None:
            transcript += outgoing
        progress.step("alignment rounds", r, rounds)
    results = {p: party.result for p, party in parties.items()}
    assert all(res is not None for res in results.values()), "protocol ended without a result"
    return results  # type: ignore[return-value]
