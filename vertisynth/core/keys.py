"""Hash-key agreement among the parties, hidden from the server (VertiMRF Sec. 4.3, Alg. 3 line 1).

The DPFM hash keys must be common to all parties and unknown to the server, which relays every
message. The protocol (X25519 Diffie-Hellman + HKDF-SHA256, AES-GCM key wrapping):
  1. every party makes an X25519 key pair and publishes its public key (through the server);
  2. two parties: both compute the DH shared secret and derive the group key with HKDF;
     more parties: the leader (first party) draws a random 32-byte group key and sends it to each
     other party wrapped with AES-GCM under the HKDF of their pairwise DH secret;
  3. each party derives the FM PRF key from the group key with HKDF (info names the purpose),
     and the t hash keys are ξ_h = (PRF key, h) (see `prf.py`).
The server sees public keys and wrapped ciphertexts only; recovering a key from them is the
computational Diffie-Hellman problem on Curve25519. Nothing on the server path takes a key.

Every derivation is bound to a context (`key_context` in deploy/session.py: the run id and the config
fingerprint), so keys from another run or another config never agree. Across machines each public key
and wrapped key travels in a signed envelope (the sender's long-term Ed25519 key), which makes the
exchange authenticated; the server relays them and learns nothing.

A seeded Generator draws the private keys and the leader's group key only in the one-process simulation
and in reproducible test runs under an explicit high-entropy test secret; a real deployment uses the OS.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

import attrs
import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .errors import DataError, MessageError
from .messages import Message
from .sealing import hkdf

INFO_PAIR = b"vertisynth/dpfm/pairwise-wrap-key/v1"
INFO_GROUP = b"vertisynth/dpfm/group-key/v1"
INFO_FM = b"vertisynth/dpfm/fm-prf-key/v1"


@attrs.define(eq=False)
class KeyParty:
    """One party's side of the protocol. Its private key and group key never leave this object."""

    name: str
    _private: X25519PrivateKey = attrs.field(repr=False)
    _group: bytes | None = attrs.field(default=None, repr=False)
    context: bytes = b""   # run id + config fingerprint across machines; b"" in the simulation

    @classmethod
    def create(cls, name: str, rng: np.random.Generator | None = None, context: bytes = b"") -> KeyParty:
        priv = X25519PrivateKey.from_private_bytes(rng.bytes(32)) if rng is not None else X25519PrivateKey.generate()
        return cls(name, priv, None, context)

    def _info(self, base: bytes) -> bytes:
        return base + (b"|" + self.context if self.context else b"")

    def public_bytes(self) -> bytes:
        return self._private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)

    def _pair_key(self, other_public: bytes, names: tuple[str, str]) -> bytes:
        try:
            shared = self._private.exchange(X25519PublicKey.from_public_bytes(other_public))
        except ValueError as exc:
            raise MessageError(f"key agreement: bad public key from {names}: {exc}") from None
        return hkdf(shared, self._info(INFO_PAIR), salt="|".join(sorted(names)).encode())

    # two parties: the group key is the HKDF of the DH secret itself
    def derive_pair_group(self, other: str, other_public: bytes) -> None:
        try:
            shared = self._private.exchange(X25519PublicKey.from_public_bytes(other_public))
        except ValueError as exc:
            raise MessageError(f"key agreement: bad public key from {other!r}: {exc}") from None
        self._group = hkdf(shared, self._info(INFO_GROUP), salt="|".join(sorted((self.name, other))).encode())

    # three or more: the leader wraps a fresh group key for each member
    def wrap_group_for(self, members: dict[str, bytes], rng: np.random.Generator | None) -> dict[str, bytes]:
        self._group = rng.bytes(32) if rng is not None else _os_random(32)
        out = {}
        for name, pub in members.items():
            nonce = rng.bytes(12) if rng is not None else _os_random(12)
            aead = AESGCM(self._pair_key(pub, (self.name, name)))
            out[name] = nonce + aead.encrypt(nonce, self._group, self._info(f"{self.name}->{name}".encode()))
        return out

    def unwrap_group(self, leader: str, leader_public: bytes, wrapped: bytes) -> None:
        aead = AESGCM(self._pair_key(leader_public, (leader, self.name)))
        try:
            self._group = aead.decrypt(wrapped[:12], wrapped[12:], self._info(f"{leader}->{self.name}".encode()))
        except InvalidTag:
            raise MessageError(f"key agreement: the group key wrapped by {leader!r} for {self.name!r} does not verify") from None

    def draw_group(self, rng: np.random.Generator | None) -> None:
        """A lone party has no one to agree with: it draws the group key itself (OS entropy unless simulated)."""
        self._group = rng.bytes(32) if rng is not None else _os_random(32)

    @classmethod
    def from_group_key(cls, name: str, group: bytes) -> KeyParty:
        """A party that finished the protocol in an earlier process (`vertisynth party keys`)."""
        if not isinstance(group, bytes) or len(group) != 32:
            raise DataError(f"key agreement: party {name!r}'s group key must be 32 bytes")
        return cls(name, X25519PrivateKey.generate(), group)

    def group_fingerprint(self) -> str:
        """A short digest the parties may compare out of band; it reveals nothing useful about the key."""
        if self._group is None:
            raise DataError(f"key agreement: party {self.name!r} has not finished the protocol")
        return hkdf(self._group, b"vertisynth/dpfm/fingerprint/v1")[:8].hex()

    def group_key(self) -> bytes:
        """The raw group key, for the party's own private storage only."""
        if self._group is None:
            raise DataError(f"key agreement: party {self.name!r} has not finished the protocol")
        return self._group

    def fm_key(self) -> bytes:
        """The 32-byte PRF key behind the t hash keys ξ_h."""
        if self._group is None:
            raise DataError(f"key agreement: party {self.name!r} has not finished the protocol")
        return hkdf(self._group, INFO_FM)


def _os_random(k: int) -> bytes:
    import os

    return os.urandom(k)


def agree_keys(names: Sequence[str], rng: np.random.Generator | Mapping[str, np.random.Generator] | None = None,
               context: bytes = b"") -> dict[str, KeyParty]:
    """Run the protocol among `names` (simulated in one process; every step uses only what that
    party may know: its own private key plus what was published). Returns each party's state. `rng`: one stream
    for every draw, or one per party (each party draws from its own, as it does on its own machine)."""
    names = list(names)
    if not names or len(set(names)) != len(names):
        raise DataError(f"key agreement needs distinct party names, got {names}")
    own = (lambda n: rng[n]) if isinstance(rng, Mapping) else (lambda n: rng)  # noqa: E731
    parties = {n: KeyParty.create(n, own(n), context) for n in names}
    published = {n: p.public_bytes() for n, p in parties.items()}  # what the server relays
    if len(names) == 1:
        parties[names[0]].draw_group(own(names[0]))
    elif len(names) == 2:
        a, b = names
        parties[a].derive_pair_group(b, published[b])
        parties[b].derive_pair_group(a, published[a])
    else:
        leader, *rest = names
        wrapped = parties[leader].wrap_group_for({n: published[n] for n in rest}, own(leader))  # relayed by the server
        for n in rest:
            parties[n].unwrap_group(leader, published[leader], wrapped[n])
    return parties


WRAPPED_BYTES = 12 + 32 + 16  # AES-GCM nonce + group key + tag


@attrs.frozen(eq=False)
class KeyAgreementMessage(Message):
    """One key-agreement message between parties (relayed by anyone; public by design): a party's X25519
    public key (`to` = "*"), or the leader's group key wrapped for one member (`to` = that member)."""

    kind: ClassVar[str] = "key_agreement"
    to: str = "*"
    public_key: np.ndarray = attrs.field(factory=lambda: np.zeros(32, np.uint8))
    wrapped: np.ndarray = attrs.field(factory=lambda: np.zeros(0, np.uint8))

    def validate(self) -> KeyAgreementMessage:
        super().validate()
        if not isinstance(self.to, str) or not self.to:
            raise self._fail("no recipient ('*' for a public key)")
        for name, arr, sizes in (("public_key", self.public_key, (32,)), ("wrapped", self.wrapped, (0, WRAPPED_BYTES))):
            if not isinstance(arr, np.ndarray) or arr.dtype != np.uint8 or arr.ndim != 1 or arr.size not in sizes:
                raise self._fail(f"{name} must be a uint8 vector of {' or '.join(map(str, sizes))} bytes")
        if (self.to == "*") != (self.wrapped.size == 0):
            raise self._fail("a public-key message has no wrapped key; a wrapped-key message names its recipient")
        return self

    @property
    def filename(self) -> str:
        return f"keys__{self.party}__to__{'all' if self.to == '*' else self.to}.npz"
