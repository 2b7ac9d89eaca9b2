"""The `he` encoder's rounds across machines (`party synth` and `server` with `encoder = "he"`).

Every message travels in the signed envelope of the run (core/envelope.py) over the run's transport, and every wait
is bounded by the encoder's `round_timeout`. Per stage ("selection", then "cliques") and per pair of parties, with the
encrypting party E and the summing party S fixed by the plan, the queries and the aligned row count (every role
computes them alike: `HEEncoder.pairs`):

  he-key-<stage>    E -> its S parties  E's Paillier public key (made per run from the OS CSPRNG, kept in E's
                                        memory only); the envelope binds it to this run, this config and E's roster
                                        key. S refuses rows under any other modulus (a foreign or swapped key).
  he-rows-<stage>   E -> S              the encrypted one-hot rows (protocol.EncryptedOneHot)
  he-sums-<stage>   S -> E              the noisy, re-randomised homomorphic sums (protocol.EncryptedSums)
  synth             E -> server         the decrypted tables with E's noise (protocol.NoisyCounts), sealed to the
                                        server's run key (session.py): no other party or relay reads them
  he-done-selection every party -> server: its selection stage is published
  he-queries        server -> parties   the clique tables the server chose (signed by the server's roster key)
  he-queries-seen   party -> parties    the digest of the tables it got: a server that sends parties different
                                        tables is named at once, not after a timeout
  ledger            every party -> server: what it spent (the end of the clique stage)

All encryptions of a stage go out before any sum is waited for, and all sums before any decryption, so no
ordering of three or more parties can deadlock. The first party (the leader) records the encoder's two zCDP charges
(one charge per stage for every pair, as planned; the server matches it to the plan).

With an explicit test secret every party draws its noise from its seeded stream exactly as the one-process run with
`crypto = "simulated"` does (`encoder.seeded_source`): the deployment's counts equal the simulation's, with real
ciphertexts on the wire. Without it, noise comes from the OS CSPRNG.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs
import numpy as np

from vertisynth.core.capabilities import MeasuresJointly
from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.envelope import ALL, canonical
from vertisynth.core.errors import MessageError
from vertisynth.core.messages import Message
from vertisynth.core.privacy import PrivacyLedger
from vertisynth.core.progress import step
from vertisynth.plugins.encoders.he import paillier, protocol
from vertisynth.plugins.encoders.he.encoder import seeded_source, stage_base
from vertisynth.plugins.encoders.he.noise import SystemSource, support_bound
from vertisynth.plugins.synthesizers.vertimrf.dimension import bin_dataset
from vertisynth.plugins.synthesizers.vertimrf.joint import server_joint

from .session import Session

SERVER = "server"
STAGES = ("selection", "cliques")


def joint_encoder(synth: Any) -> Any | None:
    """The synthesizer's encoder when it measures across parties in rounds (encoder "he"), else None."""
    enc = getattr(synth, "_encoder", None)
    return enc if isinstance(enc, MeasuresJointly) else None


def _modulus_fingerprint(modulus: str) -> str:
    import hashlib
    return hashlib.sha256(f"vertisynth/paillier-n/v1|{modulus}".encode()).hexdigest()


def progress(what: str) -> None:
    """The phase on the CLI's bar (`core.progress`); the inner steps (encrypt, sums, decrypt) follow it."""
    step(what, 0, 1)


# -- the party's side ----------------------------------------------------------------------------------------------
@attrs.define
class PartyRounds:
    sess: Session
    synth: Any
    view: Dataset                   # this party's binned columns, every row (the protocol reads them whole)
    ledger: PrivacyLedger
    rng: np.random.Generator        # this party's stream (seeded noise only with a test secret)
    test: bool
    keys: Any = None                # this party's Paillier key pair, once it encrypts
    sent: list[Message] = attrs.field(factory=list)

    @property
    def me(self) -> str:
        return self.sess.me

    @property
    def encoder(self) -> Any:
        return self.synth._encoder

    def publish(self, msg: Message) -> None:
        self.sess.send("synth", [SERVER], msg.kind, msg.to_bytes(), tag=f"{len(self.sent):03d}")
        self.sent.append(msg)

    def stage(self, stage: str, queries: Sequence[protocol.Query]) -> None:
        enc = self.encoder
        cfg = enc.config
        if not queries:
            return
        if self.me == enc.parties()[0]:   # the leader records the stage's one planned charge
            self.ledger.plan([enc.charge(stage)])
            self.ledger.spend(enc.charge(stage))
        base = stage_base(self.rng) if self.test else None
        sigma = enc.sigma[stage]
        t = support_bound(sigma)
        runs = [r for r in enc.pairs(queries, self.view.n, stage) if self.me in (r[1], r[2])]

        def source(pair, role):   # secure noise never reads the seeded stream, test secret or not
            return seeded_source(base, stage, pair, role) if self.test and self.ledger.noise != "secure" \
                else SystemSource()

        # 1. as E: the key (once per run, announced per stage to that stage's S parties) and the encrypted rows
        mine_e = [r for r in runs if r[1] == self.me]
        layouts: dict[str, protocol.EncryptedOneHot] = {}   # what E encrypted for each S, less the ciphertexts
        if mine_e:
            if self.keys is None:
                progress(f"{self.me}: Paillier key ({cfg.key_bits} bits)")
                self.keys = paillier.keypair(cfg.key_bits, enc.randomness)
            modulus = format(self.keys[0].n, "x")
            self.sess.send(f"he-key-{stage}", [r[2] for r in mine_e], "paillier_public_key",
                           canonical({"modulus": modulus, "fingerprint": _modulus_fingerprint(modulus)}))
            for pair, _, summ, qs in mine_e:
                progress(f"{self.me}: encrypting {self.view.n:,} rows for {summ} ({stage})")
                m1 = protocol.encrypt_rows(self.me, summ, self.view, qs, self.keys[0], t, cfg.workers,
                                           cfg.chunk_rows, cfg.slot_bits)
                self.sess.send(f"he-rows-{stage}", [summ], m1.kind, m1.to_bytes(), tag=summ)
                layouts[summ] = attrs.evolve(m1, ciphertexts=np.zeros((0,) + m1.ciphertexts.shape[1:], np.uint8))
        # 2. as S: each E's key and rows -> noisy, re-randomised sums
        mine_s = [r for r in runs if r[2] == self.me]
        if mine_s:
            senders = [r[1] for r in mine_s]
            keys = {who: json.loads(body) for who, [(_, body)] in
                    self.sess.receive(f"he-key-{stage}", senders).items()}
            rows = self.sess.receive(f"he-rows-{stage}", senders)
            for pair, enc_party, _, qs in mine_s:
                [(_, body)] = rows[enc_party]
                m1 = Message.from_bytes(body, f"he-rows-{stage} from {enc_party}")
                self._check_rows(m1, enc_party, keys[enc_party])
                progress(f"{self.me}: summing {enc_party}'s ciphertexts ({stage})")
                m2 = protocol.sum_and_noise(self.me, m1, self.view, qs, sigma, source(pair, "sum"), cfg.workers,
                                            enc.cells, cfg.slot_bits)
                self.sess.send(f"he-sums-{stage}", [enc_party], m2.kind, m2.to_bytes(), tag=enc_party)
        # 3. as E: decrypt, add E's noise, publish to the server
        if mine_e:
            sums = self.sess.receive(f"he-sums-{stage}", [r[2] for r in mine_e])
            for pair, _, summ, qs in mine_e:
                [(_, body)] = sums[summ]
                m2 = Message.from_bytes(body, f"he-sums-{stage} from {summ}")
                if not isinstance(m2, protocol.EncryptedSums) or m2.party != summ or m2.recipient != self.me:
                    raise MessageError(f"he-sums-{stage} from {summ!r}: not {summ!r}'s sums for {self.me!r}; refused")
                m1 = layouts[summ]
                progress(f"{self.me}: decrypting {summ}'s sums ({stage})")
                self.publish(protocol.decrypt_and_publish(self.me, self.keys[1], m1, m2, qs, sigma,
                                                          source(pair, "enc"), stage))

    def _check_rows(self, m1: Message, sender: str, key: dict) -> None:
        if not isinstance(m1, protocol.EncryptedOneHot) or m1.party != sender or m1.recipient != self.me:
            raise MessageError(f"he-rows from {sender!r}: not {sender!r}'s encrypted rows for {self.me!r}; refused")
        if key.get("fingerprint") != _modulus_fingerprint(str(key.get("modulus"))):
            raise MessageError(f"he-key from {sender!r}: its fingerprint does not match its modulus; refused")
        if m1.modulus != key["modulus"]:
            raise MessageError(f"he-rows from {sender!r}: encrypted under a Paillier key that is not the one "
                               f"{sender!r} signed for this run (fingerprint {_modulus_fingerprint(m1.modulus)[:12]}... "
                               f"vs {key['fingerprint'][:12]}...); refused")


def binned_view(synth: Any, domain: Domain, chunks: Callable[[], Iterable]) -> Dataset:
    """This party's columns, every row, binned as the one-process run bins them (`fit_joint`)."""
    parts = [rows.codes for _, rows in chunks()]
    view = Dataset(np.concatenate(parts) if parts else np.zeros((0, len(domain)), np.int64), domain)
    mine = [a for a in domain.attributes if a in synth._binned]
    return bin_dataset(view, synth.config.bins, mine) if mine else view


def party_rounds(sess: Session, synth: Any, domain: Domain, chunks: Callable[[], Iterable], first: list[Message],
                 ledger: PrivacyLedger, rng: np.random.Generator, test: bool) -> list[Message]:
    """A party's whole release with encoder "he": its own messages (`first`), the selection stage, the server's
    clique queries, the clique stage. Returns every message it published to the server."""
    enc = joint_encoder(synth)
    sess = attrs.evolve(sess, timeout=enc.config.round_timeout)
    rounds = PartyRounds(sess, synth, binned_view(synth, domain, chunks), ledger, rng, test)
    for m in first:
        rounds.publish(m)
    rounds.stage("selection", enc.selection_queries())
    sess.send("he-done-selection", [SERVER], "he_done", canonical({"messages": len(rounds.sent)}))
    progress(f"{sess.me}: waiting for the server's clique queries")
    [(_, body)] = sess.receive("he-queries", [SERVER])[SERVER]
    queries = _parse_queries(body, enc, synth._low_domain)
    _same_queries(sess, enc.parties(), body)
    rounds.stage("cliques", queries)
    return rounds.sent


def _same_queries(sess: Session, parties: list[str], body: bytes) -> None:
    """Every party answers the same clique tables: each tells the others the digest of the tables it got from the
    server (a server that sends parties different tables would leave each waiting for pairs the other never runs,
    and blame a missing party after the timeout); a difference is named at once."""
    others = [p for p in parties if p != sess.me]
    mine = hashlib.sha256(body).hexdigest()
    sess.send("he-queries-seen", others, "he_queries_digest", canonical({"sha256": mine}))
    for who, [(_, raw)] in sess.receive("he-queries-seen", others).items():
        try:
            theirs = str(json.loads(raw)["sha256"])
        except (ValueError, TypeError, KeyError) as exc:
            raise MessageError(f"he-queries-seen from {who!r}: malformed ({exc}); refused") from None
        if theirs != mine:
            raise MessageError(f"he-queries: the server sent {who!r} other clique tables than {sess.me!r} (sha256 "
                               f"{theirs[:12]}... vs {mine[:12]}...): different tables to different parties; refused")


def _parse_queries(body: bytes, enc: Any, domain: Domain) -> list[protocol.Query]:
    try:
        raw = json.loads(body)
        queries = [(tuple(map(str, a)), tuple(map(str, b))) for a, b in raw["queries"]]
    except (ValueError, TypeError, KeyError) as exc:
        raise MessageError(f"he-queries from the server: malformed ({exc}); refused") from None
    unknown = sorted({x for q in queries for x in q[0] + q[1]} - set(domain.attributes))
    if unknown:
        raise MessageError(f"he-queries from the server: unknown attributes {unknown}; refused")
    if len(protocol.unique(queries)) > enc.config.cliques:
        raise MessageError(f"he-queries from the server: {len(queries)} tables, the plan has {enc.config.cliques}; "
                           "refused (more tables than planned would spend more than the ledger's charge)")
    return queries


# -- the server's side -----------------------------------------------------------------------------------------------
def _read_counts(sess: Session, seen: set[str], allowed: dict[str, set[str]]) -> tuple[list[Message], list[str]]:
    """The synth messages not yet read; every NoisyCounts must hold only tables of its stage's queries."""
    msgs, names = [], []
    for name in sess.transport.names("synth__*"):
        if name in seen:
            continue
        header, body = sess.open(name, ("synth",))
        msg = Message.from_bytes(body, name)
        if msg.party != header.sender:
            raise MessageError(f"{name}: from {header.sender!r} but holds a message of {msg.party!r}; refused")
        if isinstance(msg, protocol.NoisyCounts):
            extra = set(msg.tables) - allowed.get(msg.stage, set())
            if extra:
                raise MessageError(f"{name}: tables {sorted(extra)} were not asked for in stage {msg.stage!r}; refused")
        msgs.append(msg)
        names.append(name)
        seen.add(name)
    return msgs, names


def serve_rounds(synth: Any, sess: Session, parties: list[str]) -> list[str]:
    """The server's part: wait for every party's selection stage, fit, send the clique queries (signed), wait for
    every party's ledger, finish the model. Returns the names of the messages it used."""
    enc = joint_encoder(synth)
    sess = attrs.evolve(sess, timeout=enc.config.round_timeout)
    key = protocol.key_of
    allowed = {"selection": {key(q) for a, b in enc.selection_queries() for q in (a + b, b + a)}}
    progress("server: waiting for the parties' selection stage")
    sess.receive("he-done-selection", parties, to=SERVER)
    seen: set[str] = set()
    messages, used = _read_counts(sess, seen, allowed)
    asked: list[bool] = []

    def measure(queries: list[protocol.Query]) -> list[Message]:
        asked.append(True)
        allowed["cliques"] = {key(a + b) for a, b in queries} | {key(b + a) for a, b in queries}
        sess.send("he-queries", [ALL], "he_queries",
                  canonical({"stage": "cliques", "queries": [[list(a), list(b)] for a, b in queries]}))
        progress("server: waiting for the clique stage")
        sess.receive("ledger", parties, to=SERVER)
        got, names = _read_counts(sess, seen, allowed)
        used.extend(names)
        return got

    synth._timings = {}
    server_joint(synth, messages, measure)
    if not asked:   # no cross-party table was chosen: tell the parties so they finish (nothing more is spent)
        sess.send("he-queries", [ALL], "he_queries", canonical({"stage": "cliques", "queries": []}))
        sess.receive("ledger", parties, to=SERVER)
    return used
