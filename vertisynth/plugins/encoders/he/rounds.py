"""One party's side of a stage of the `he` protocol across machines (the `StageRounds` the deploy driver runs).

Per stage and per pair of parties, with the encrypting party E and the summing party S fixed by the plan
(`HEEncoder.pairs`, computed alike by every role), three rounds:

  he-key-<stage>    E -> its S parties  E's Paillier public key (made once per run from the OS CSPRNG, kept in E's
                                        memory only); the envelope binds it to the run, the config and E's roster
                                        key. S refuses rows under any other modulus (a foreign or swapped key).
  he-rows-<stage>   E -> S              the encrypted one-hot rows (protocol.EncryptedOneHot)
  he-sums-<stage>   S -> E              the noisy, re-randomised homomorphic sums (protocol.EncryptedSums)

then E decrypts, adds its noise and publishes the tables (protocol.NoisyCounts) to the server. Every encryption
of a stage goes out before any sum is waited for, and every sum before any decryption, so no ordering of three or
more parties deadlocks.

With an explicit test secret every party draws its noise from its seeded stream exactly as the one-process run with
`crypto = "simulated"` does (`encoder.seeded_source`): the deployment's counts equal the simulation's, with real
ciphertexts on the wire. Without it (or with secure noise), noise comes from the OS CSPRNG.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from vertisynth.core.dataset import Dataset
from vertisynth.core.envelope import canonical
from vertisynth.core.errors import MessageError
from vertisynth.core.messages import Message
from vertisynth.core.progress import step

from . import paillier, protocol
from .noise import SystemSource, support_bound

Outgoing = tuple[list[str], str, bytes, str]   # (recipients, kind, body, tag)


def modulus_fingerprint(modulus: str) -> str:
    return hashlib.sha256(f"vertisynth/paillier-n/v1|{modulus}".encode()).hexdigest()


def check_rows(me: str, m1: Message, sender: str, key: Mapping[str, Any], scheme: str = "paillier") -> None:
    """S's checks on E's rows: E's own rows for S, under the modulus E announced (and signed) for this run, a key
    of the run's `scheme`."""
    if not isinstance(m1, protocol.EncryptedOneHot) or m1.party != sender or m1.recipient != me:
        raise MessageError(f"he-rows from {sender!r}: not {sender!r}'s encrypted rows for {me!r}; refused")
    paillier.check_scheme(str(key.get("modulus")), scheme, f"he-key from {sender!r}")
    if key.get("fingerprint") != modulus_fingerprint(str(key.get("modulus"))):
        raise MessageError(f"he-key from {sender!r}: its fingerprint does not match its modulus; refused")
    if m1.modulus != key["modulus"]:
        raise MessageError(f"he-rows from {sender!r}: encrypted under a Paillier key that is not the one "
                           f"{sender!r} signed for this run (fingerprint {modulus_fingerprint(m1.modulus)[:12]}... "
                           f"vs {key['fingerprint'][:12]}...); refused")


def _progress(what: str) -> None:
    step(what, 0, 1)


@attrs.define
class PartyStage:
    """Party `me`'s part in one stage: the runs it takes part in (as E, as S) and what it holds between rounds."""

    encoder: Any                    # the HEEncoder (plan made): pairs, sigma, keys, config
    me: str
    view: Dataset                   # this party's binned columns, every row
    stage: str
    runs: list                      # [(pair, E, S, queries E-side first)] with `me` as E or S
    sources: Any                    # (pair, role) -> this party's noise source
    keys_in: dict[str, dict] = attrs.field(factory=dict)
    rows_in: dict[str, bytes] = attrs.field(factory=dict)
    sums_in: dict[str, bytes] = attrs.field(factory=dict)
    layouts: dict[str, protocol.EncryptedOneHot] = attrs.field(factory=dict)   # E's rows less the ciphertexts
    fan: dict = attrs.field(factory=dict)   # E -> (queries, layout): E encrypts once for all its S (`fanout`)

    @property
    def as_e(self) -> list:
        return [r for r in self.runs if r[1] == self.me]

    @property
    def as_s(self) -> list:
        return [r for r in self.runs if r[2] == self.me]

    def rounds(self) -> list[str]:
        return [f"he-{r}-{self.stage}" for r in ("key", "rows", "sums")] if self.runs else []

    def outgoing(self, rnd: str) -> Iterator[Outgoing]:
        kind = rnd.split("-")[1]
        cfg = self.encoder.config
        if kind == "key" and self.as_e:
            _progress(f"{self.me}: Paillier key ({cfg.key_bits} bits)")
            public, _ = self.encoder.keypair(self.me)
            modulus = paillier.key_text(public)
            yield ([r[2] for r in self.as_e], "paillier_public_key",
                   canonical({"modulus": modulus, "fingerprint": modulus_fingerprint(modulus)}), "0")
        elif kind == "rows":
            public, _ = self.encoder.keypair(self.me) if self.as_e else (None, None)
            t = support_bound(self.encoder.sigma[self.stage])
            kept = self.encoder.__dict__.setdefault("_layouts_kept", {})
            once = None
            for _, _, summ, qs in self.as_e:
                if self._reused(self.me, summ, qs) is not None:   # S sums the selection rows it holds: no new rows
                    self.layouts[summ] = kept[(self.me, summ)]
                    continue
                separate = self.encoder.separate(self.me, summ, self.view.n, self.stage)
                m1 = self._blocks(summ, qs, public, t) if self.oracle else None
                if m1 is not None:
                    pass
                elif self.me in self.fan:   # one encryption for every S (`HEEncoder.fanout`)
                    if once is None:
                        _progress(f"{self.me}: encrypting {self.view.n:,} rows for its peers ({self.stage})")
                        once = protocol.encrypt_rows(self.me, summ, self.view, self.fan[self.me][0], public, t,
                                                     cfg.workers, cfg.chunk_rows, cfg.slot_bits, separate=True)
                    m1 = attrs.evolve(once, recipient=summ)
                else:
                    _progress(f"{self.me}: encrypting {self.view.n:,} rows for {summ} ({self.stage})")
                    m1 = protocol.encrypt_rows(self.me, summ, self.view, qs, public, t, cfg.workers, cfg.chunk_rows,
                                               cfg.slot_bits, separate=separate)
                self.layouts[summ] = attrs.evolve(m1, ciphertexts=np.zeros((0,) + m1.ciphertexts.shape[1:], np.uint8))
                if separate:
                    kept[(self.me, summ)] = self.layouts[summ]
                yield [summ], m1.kind, m1.to_bytes(), summ
        elif kind == "sums":
            sigma = self.encoder.sigma[self.stage]
            kept = self.encoder.__dict__.setdefault("_rows_kept", {})
            for pair, enc_party, _, qs in self.as_s:
                plan = self._reused(enc_party, self.me, qs)
                fanned = plan is None and enc_party in self.fan
                if plan is None:
                    m1 = Message.from_bytes(self.rows_in[enc_party], f"{rnd.replace('sums', 'rows')} from {enc_party}")
                else:   # E's selection rows, kept (and checked) then; checked again against this stage's key
                    m1 = kept[(enc_party, self.me)]
                check_rows(self.me, m1, enc_party, self.keys_in[enc_party], cfg.scheme)
                if m1.block_ids:   # rows made of blocks (`encrypt_blocks`): an oracle answer's only
                    if not self.oracle:
                        raise MessageError(f"{rnd.replace('sums', 'rows')} from {enc_party!r}: rows made of kept "
                                           f"blocks outside an oracle answer; refused")
                    held = self.encoder.blocks_store(enc_party, self.me, m1.modulus, "S")
                    m1 = protocol.expand_rows(m1, held)
                    _progress(f"{self.me}: summing {enc_party}'s ciphertexts ({self.stage})")
                    m2 = protocol.sum_and_noise(self.me, m1, self.view, qs, sigma, self.sources(pair, "sum"),
                                                cfg.workers, self.encoder.cells, cfg.slot_bits, share=False,
                                                separate=True)
                    yield [enc_party], m2.kind, m2.to_bytes(), enc_party
                    continue
                separate = self.encoder.separate(enc_party, self.me, self.view.n, self.stage)
                if separate:
                    kept[(enc_party, self.me)] = m1
                _progress(f"{self.me}: summing {enc_party}'s ciphertexts ({self.stage})")
                m2 = protocol.sum_and_noise(
                    self.me, m1, self.view, qs, sigma, self.sources(pair, "sum"), cfg.workers, self.encoder.cells,
                    cfg.slot_bits, offset=None if plan is None else support_bound(self.encoder.sigma["selection"]),
                    plan_queries=self.fan[enc_party][0] if fanned else None if plan is None else plan[0],
                    separate=separate or plan is not None or fanned)
                yield [enc_party], m2.kind, m2.to_bytes(), enc_party

    @property
    def oracle(self) -> bool:
        """An answer of the vertical oracle (stage "oracle-<k>"), not one of VertiMRF's planned stages."""
        return self.stage.startswith(self.encoder.ORACLE_STAGE)

    def _blocks(self, summ: str, queries, public: Any, offset: int) -> protocol.EncryptedOneHot | None:
        """An oracle answer's rows as E makes them in one process (`HEEncoder.oracle_rows`): the blocks S holds
        from earlier answers named, not sent; E's record of what S holds updated as S's store will be."""
        record = self.encoder.blocks_store(self.me, summ, paillier.key_text(public), "E")
        m1 = self.encoder.oracle_rows(self.me, summ, self.view, queries, offset, record)
        if m1 is not None:
            _progress(f"{self.me}: encrypting new blocks of {self.view.n:,} rows for {summ} ({self.stage})")
            protocol.keep_blocks(record, m1)
        return m1

    def _reused(self, enc: str, summ: str, queries) -> tuple[list, Any] | None:
        """The selection run whose rows this run sums again (`HEEncoder.reused`), or None."""
        return self.encoder.reused(enc, summ, queries, self.view.n, self.stage)

    def expects(self, rnd: str) -> dict[str, list[str]]:
        """As S, E's key and rows once its own rows are out (E sends both before it waits for anything: a party
        encrypting for one peer never waits on another first); as E, the sums once its sums are out."""
        kind = rnd.split("-")[1]
        if kind == "rows":
            fresh = [r[1] for r in self.as_s if self._reused(r[1], self.me, r[3]) is None]
            return {f"he-key-{self.stage}": [r[1] for r in self.as_s], rnd: fresh}
        if kind == "sums":
            return {rnd: [r[2] for r in self.as_e]}
        return {}

    def incoming(self, rnd: str, got: Mapping[str, Sequence[bytes]]) -> None:
        kind = rnd.split("-")[1]
        for who, bodies in got.items():
            if len(bodies) != 1:
                raise MessageError(f"{rnd} from {who!r}: {len(bodies)} messages, expected one; refused")
            if kind == "key":
                try:
                    self.keys_in[who] = dict(json.loads(bodies[0]))
                except (ValueError, TypeError) as exc:
                    raise MessageError(f"{rnd} from {who!r}: malformed ({exc}); refused") from None
            else:
                (self.rows_in if kind == "rows" else self.sums_in)[who] = bodies[0]

    def published(self) -> Iterator[Message]:
        """As E: decrypt each S's sums, add E's noise: the tables for the server."""
        sigma = self.encoder.sigma[self.stage]
        for pair, _, summ, qs in self.as_e:
            m2 = Message.from_bytes(self.sums_in[summ], f"he-sums-{self.stage} from {summ}")
            if not isinstance(m2, protocol.EncryptedSums) or m2.party != summ or m2.recipient != self.me:
                raise MessageError(f"he-sums-{self.stage} from {summ!r}: not {summ!r}'s sums for {self.me!r}; refused")
            _progress(f"{self.me}: decrypting {summ}'s sums ({self.stage})")
            yield protocol.decrypt_and_publish(self.me, self.encoder.keypair(self.me)[1], self.layouts[summ], m2, qs,
                                               sigma, self.sources(pair, "enc"), self.stage)


def seeded_or_system(base: int | None, stage: str, secure: bool):
    """A party's noise source per (pair, role): its seeded stream under a test secret and simulation noise (as the
    one-process run with crypto = "simulated" draws), else the OS CSPRNG (secure noise never reads a seeded stream)."""
    from .encoder import seeded_source

    def source(pair: tuple[str, str], role: str):
        return seeded_source(base, stage, pair, role) if base is not None and not secure else SystemSource()
    return source
