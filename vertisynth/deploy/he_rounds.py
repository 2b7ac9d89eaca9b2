"""The rounds of a cross-party protocol across machines (`party synth` and `server` with e.g. `encoder = "he"`).

The driver knows no synthesizer and no encoder: it runs a synthesizer that fits in rounds (`FitsInRounds`) with
the encoder it names (`JointRounds`), both core capabilities. Every message travels in the signed envelope of the run
(core/envelope.py) over the run's transport, and every wait is bounded by the encoder's `round_timeout()`. Per
stage ("selection" on the plan's queries, then "cliques" on the server's), each party runs its `StageRounds`: in
each round it sends everything it has, then waits for what the stage expects after it (the stage orders its rounds
so that no ordering of three or more parties can deadlock); then it publishes its answers. Every message but the
run keys is sealed to its one recipient's run key (a sealed `Session`, session.py; a message to several roles goes as
one envelope per recipient), so a relay reads no clique table, row, sum or answer:

  key (tag party)     party -> every role   its X25519 run key for this run, signed (in clear: a public key)
  <the encoder's rounds>  party -> party   e.g. he-key/he-rows/he-sums (plugins/encoders/he/rounds.py), sealed to the
                                        party it goes to
  synth               party -> server   its answers, sealed to the server's run key
  he-done-selection   every party -> server: its selection stage is published
  he-queries          server -> parties   the tables the server chose (signed by the server's roster key), one
                                        envelope per party sealed to it, checked by each party against the plan
                                        (`check_queries`)
  he-queries-seen     party -> parties    the digest of the tables it got: a server that sends parties different
                                        tables is named at once, not after a timeout
  ledger              every party -> server: what it spent (the end of the second stage)

The server reads only answers to what was asked in their stage (`check_published`).
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from typing import Any

import attrs
import numpy as np

from vertisynth.core.capabilities import FitsInRounds, JointRounds, Query
from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.envelope import ALL, canonical
from vertisynth.core.errors import MessageError
from vertisynth.core.messages import Message
from vertisynth.core.privacy import PrivacyLedger
from vertisynth.core.progress import step

from .session import Session

SERVER = "server"
STAGES = ("selection", "cliques")


def joint_encoder(synth: Any) -> JointRounds | None:
    """The encoder whose rounds the synthesizer runs across parties (encoder "he"), else None."""
    return synth.joint_rounds() if isinstance(synth, FitsInRounds) else None


def progress(what: str) -> None:
    """The phase on the CLI's bar (`core.progress`); the inner steps (encrypt, sums, decrypt) follow it."""
    step(what, 0, 1)


# -- the party's side ----------------------------------------------------------------------------------------------
@attrs.define
class Publisher:
    sess: Session
    sent: list[Message] = attrs.field(factory=list)

    def __call__(self, msg: Message) -> None:
        self.sess.send("synth", [SERVER], msg.kind, msg.to_bytes(), tag=f"{len(self.sent):03d}")
        self.sent.append(msg)


def run_stage(sess: Session, stage: Any, publish: Publisher) -> None:
    """One party's stage: every round, sending first, then waiting for what the stage expects after it; then its
    answers to the server."""
    for rnd in stage.rounds():
        for to, kind, body, tag in stage.outgoing(rnd):
            sess.send(rnd, to, kind, body, tag=tag)
        for waited, senders in stage.expects(rnd).items():
            if senders:
                got = sess.receive(waited, senders)
                stage.incoming(waited, {who: [body for _, body in msgs] for who, msgs in got.items()})
    for msg in stage.published():
        publish(msg)


def round_view(synth: Any, domain: Domain, chunks: Callable[[], Iterable]) -> Dataset:
    """This party's columns, every row, as the protocol reads them (`FitsInRounds.round_view`)."""
    parts = [rows.codes for _, rows in chunks()]
    return synth.round_view(Dataset(np.concatenate(parts) if parts else np.zeros((0, len(domain)), np.int64), domain))


def party_rounds(sess: Session, synth: Any, domain: Domain, chunks: Callable[[], Iterable], first: list[Message],
                 ledger: PrivacyLedger, rng: np.random.Generator, test: bool) -> list[Message]:
    """A party's whole release: its own messages (`first`), the selection stage, the server's queries, the second
    stage. Returns every message it published to the server."""
    enc = joint_encoder(synth)
    sess = attrs.evolve(sess, timeout=enc.round_timeout())
    view = round_view(synth, domain, chunks)
    publish = Publisher(sess)
    for m in first:
        publish(m)
    run_stage(sess, enc.party_stage(sess.me, view, enc.selection_queries(), "selection", ledger, rng, test), publish)
    sess.send("he-done-selection", [SERVER], "he_done", canonical({"messages": len(publish.sent)}))
    progress(f"{sess.me}: waiting for the server's clique queries")
    [(_, body)] = sess.receive("he-queries", [SERVER])[SERVER]
    queries = _parse_queries(body, enc)
    _same_queries(sess, enc.parties(), body)
    run_stage(sess, enc.party_stage(sess.me, view, queries, "cliques", ledger, rng, test), publish)
    return publish.sent


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


def _parse_queries(body: bytes, enc: JointRounds) -> list[Query]:
    try:
        raw = json.loads(body)
        queries = [(tuple(map(str, a)), tuple(map(str, b))) for a, b in raw["queries"]]
    except (ValueError, TypeError, KeyError) as exc:
        raise MessageError(f"he-queries from the server: malformed ({exc}); refused") from None
    enc.check_queries(queries)
    return queries


# -- the server's side -----------------------------------------------------------------------------------------------
def _read_counts(sess: Session, seen: set[str], enc: JointRounds, asked: dict[str, list[Query]]
                 ) -> tuple[list[Message], list[str]]:
    """The synth messages not yet read; each may answer only what was asked in its stage (`check_published`)."""
    msgs, names = [], []
    for name in sess.transport.names("synth__*"):
        if name in seen:
            continue
        header, body = sess.open(name, ("synth",))
        msg = Message.from_bytes(body, name)
        if msg.party != header.sender:
            raise MessageError(f"{name}: from {header.sender!r} but holds a message of {msg.party!r}; refused")
        enc.check_published(msg, asked, name)
        msgs.append(msg)
        names.append(name)
        seen.add(name)
    return msgs, names


def serve_rounds(synth: Any, sess: Session, parties: list[str], cross_party: list | None = None) -> list[str]:
    """The server's part: wait for every party's selection stage, fit, send the clique queries (signed), wait for
    every party's ledger, finish the model. Returns the names of the messages it used; `cross_party` gets the
    ledger's record of every cross-party table it received (as the one-process run's `StageOracle` writes it)."""
    enc = joint_encoder(synth)
    sess = attrs.evolve(sess, timeout=enc.round_timeout())
    asked = {"selection": enc.selection_queries()}
    received = cross_party if cross_party is not None else []
    progress("server: waiting for the parties' selection stage")
    sess.receive("he-done-selection", parties, to=SERVER)
    seen: set[str] = set()
    messages, used = _read_counts(sess, seen, enc, asked)
    received += enc.cross_party_entries(messages, "selection")

    def measure(queries: list[Query]) -> list[Message]:
        asked["cliques"] = list(queries)
        sess.send("he-queries", [ALL], "he_queries",
                  canonical({"stage": "cliques", "queries": [[list(a), list(b)] for a, b in queries]}))
        progress("server: waiting for the clique stage")
        sess.receive("ledger", parties, to=SERVER)
        got, names = _read_counts(sess, seen, enc, asked)
        used.extend(names)
        received.extend(enc.cross_party_entries(got, "cliques"))
        return got

    synth.serve_rounds(messages, measure)
    if "cliques" not in asked:   # no cross-party table was chosen: tell the parties so they finish (nothing more is spent)
        sess.send("he-queries", [ALL], "he_queries", canonical({"stage": "cliques", "queries": []}))
        sess.receive("ledger", parties, to=SERVER)
    return used
