"""Sealing a message to one recipient's X25519 key: ephemeral-static X25519, HKDF-SHA256, AES-256-GCM.

The one sealing primitive of the project: collab seals each secret share to its compute server's run key
(collab/secure_aggregation.py) and deploy seals every party-to-server message that carries data-derived content
to the server's run key (deploy/session.py). A fresh ephemeral key and a fresh 96-bit nonce (OS CSPRNG) per
message; the key is HKDF(shared secret, info | ephemeral public | recipient public); the caller's associated
data (for deploy: run id, config fingerprint, sender, round, slot) must match on opening, so a sealed body moved
to another run, config, sender or slot does not open. Only `cryptography`'s primitives, nothing hand-rolled.
"""
from __future__ import annotations

import os

import attrs
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from .errors import MessageError

KEY_BYTES = 32
NONCE_BYTES = 12


@attrs.frozen
class Sealed:
    ephemeral: bytes    # the sender's one-time X25519 public key (32 bytes)
    nonce: bytes        # 12 bytes
    ciphertext: bytes   # AES-256-GCM ciphertext and tag

    def to_bytes(self) -> bytes:
        return self.ephemeral + self.nonce + self.ciphertext

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> Sealed:
        if len(data) < KEY_BYTES + NONCE_BYTES + 16:
            raise MessageError(f"{where}: a sealed body of {len(data)} bytes is too short; refused")
        return cls(data[:KEY_BYTES], data[KEY_BYTES:KEY_BYTES + NONCE_BYTES], data[KEY_BYTES + NONCE_BYTES:])


def hkdf(secret: bytes, info: bytes, salt: bytes = b"") -> bytes:
    """HKDF-SHA256 to 32 bytes: every key derivation of the project (sealing, the DPFM key agreement, test streams)."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=salt or None, info=info).derive(secret)


def _key(shared: bytes, info: bytes, ephemeral: bytes, recipient: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info + b"|" + ephemeral + recipient).derive(shared)


def raw_public(key: X25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def seal_to(recipient: bytes, plaintext: bytes, aad: bytes, info: bytes) -> Sealed:
    """Encrypt `plaintext` so that only the holder of `recipient`'s private key opens it (with this `aad`)."""
    if len(recipient) != KEY_BYTES:
        raise MessageError(f"a recipient key of {len(recipient)} bytes is not an X25519 public key")
    eph = X25519PrivateKey.generate()
    eph_pub = raw_public(eph.public_key())
    shared = eph.exchange(X25519PublicKey.from_public_bytes(recipient))
    nonce = os.urandom(NONCE_BYTES)
    return Sealed(eph_pub, nonce, AESGCM(_key(shared, info, eph_pub, recipient)).encrypt(nonce, plaintext, aad))


class RunKey:
    """A recipient's X25519 key pair for one run (OS CSPRNG); the private key never leaves its holder except into
    the holder's own 0600 file (`private_bytes`)."""

    def __init__(self, private: X25519PrivateKey | None = None) -> None:
        self._private = private or X25519PrivateKey.generate()

    @classmethod
    def from_private_bytes(cls, raw: bytes) -> RunKey:
        return cls(X25519PrivateKey.from_private_bytes(raw))

    def private_bytes(self) -> bytes:
        return self._private.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                           serialization.NoEncryption())

    @property
    def public(self) -> bytes:
        return raw_public(self._private.public_key())

    def open(self, sealed: Sealed, aad: bytes, info: bytes, what: str) -> bytes:
        """The plaintext, or one line: `what` was edited, moved, or sealed to another key."""
        try:
            shared = self._private.exchange(X25519PublicKey.from_public_bytes(sealed.ephemeral))
            return AESGCM(_key(shared, info, sealed.ephemeral, self.public)).decrypt(sealed.nonce, sealed.ciphertext, aad)
        except (InvalidTag, ValueError):
            raise MessageError(f"{what} does not open with this run key: it was edited, moved to another run, "
                               "sender or slot, or sealed to another key; refused") from None
