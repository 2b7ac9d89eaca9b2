"""The one envelope every cross-machine message travels in.

    MAGIC | u32 header length | header (canonical JSON) | Ed25519 signature of the header (64 bytes) | body

The header names the protocol version, the run id, the fingerprint of the resolved public config, the
sender, the recipients, the round, the body's kind and its SHA-256; the sender signs the header, so the
signature covers every byte of the body too. `open_envelope` checks, in this order and before the body is
used: format, sender in the roster, signature, content hash, run id, config fingerprint, round, recipient,
and refuses with one line naming the sender and what did not match.
"""
from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from .errors import MessageError
from .identity import Identity, Roster

PROTOCOL = "vertisynth-envelope/1"
MAGIC = b"VSENV\x01"
ALL = "*"


def canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def fingerprint(public_config: Mapping[str, Any]) -> str:
    """SHA-256 of the resolved public config (canonical JSON): every role of a run must hold the same."""
    return hashlib.sha256(canonical({"protocol": PROTOCOL, "config": public_config})).hexdigest()


@attrs.frozen
class Header:
    run: str           # hex run id ("" only in the hello round, which agrees it)
    config: str        # config fingerprint
    sender: str
    to: tuple[str, ...]
    round: str
    kind: str
    sha256: str
    protocol: str = PROTOCOL

    def to_dict(self) -> dict[str, Any]:
        return {**attrs.asdict(self), "to": list(self.to)}


@attrs.frozen
class Expect:
    """What the reader holds true for this run; a message that disagrees is refused."""

    run: str
    config: str
    me: str
    rounds: tuple[str, ...]


def seal(identity: Identity, run: str, config: str, to: Iterable[str], round_: str, kind: str, body: bytes) -> bytes:
    header = Header(run, config, identity.name, tuple(to), round_, kind, hashlib.sha256(body).hexdigest())
    head = canonical(header.to_dict())
    return MAGIC + struct.pack(">I", len(head)) + head + identity.sign(head) + body


def open_envelope(data: bytes, roster: Roster, expect: Expect | None, where: str) -> tuple[Header, bytes]:
    """Verify an envelope against the roster and (unless None: the hello round) this run; (header, body)."""
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 4:
        raise MessageError(f"{where}: not a vertisynth envelope ({PROTOCOL}); refused")
    (n,) = struct.unpack(">I", data[len(MAGIC):len(MAGIC) + 4])
    start = len(MAGIC) + 4
    head, sig, body = data[start:start + n], data[start + n:start + n + 64], data[start + n + 64:]
    try:
        raw = json.loads(head)
        header = Header(**{**raw, "to": tuple(raw["to"])})
    except (ValueError, TypeError, KeyError) as exc:
        raise MessageError(f"{where}: malformed envelope header ({exc}); refused") from None
    who = header.sender
    if header.protocol != PROTOCOL:
        raise MessageError(f"{where}: from {who!r}: protocol {header.protocol!r}, expected {PROTOCOL!r}; refused")
    roster.verify(who, sig, head, where)
    if hashlib.sha256(body).hexdigest() != header.sha256:
        raise MessageError(f"{where}: from {who!r}: the body does not match its signed hash (edited); refused")
    if expect is None:
        return header, body
    if header.run != expect.run:
        raise MessageError(f"{where}: from {who!r}: run id {header.run[:12]}... is not this run's {expect.run[:12]}... "
                           "(a message from another run, a reused exchange folder or a replay); refused")
    if header.config != expect.config:
        raise MessageError(f"{where}: from {who!r}: config fingerprint {header.config[:12]}... is not ours "
                           f"{expect.config[:12]}... (a different config); refused")
    if header.round not in expect.rounds:
        raise MessageError(f"{where}: from {who!r}: round {header.round!r} where {list(expect.rounds)} was expected "
                           "(a replayed or misplaced message); refused")
    if ALL not in header.to and expect.me not in header.to:
        raise MessageError(f"{where}: from {who!r}: addressed to {list(header.to)}, not to {expect.me!r}; refused")
    return header, body
