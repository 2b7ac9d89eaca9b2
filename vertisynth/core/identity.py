"""Long-term identities of the roles of a cross-machine run, and the roster that pins them.

Every party (and every collab custodian, server and publisher) holds an Ed25519 signing key it made itself
(`vertisynth party init`); the shared config's `[roster]` table names each participant's public key. A message
is trusted only when it verifies under the key the roster gives its sender: nothing the roster does not name
is trusted. Keys are `cryptography`'s Ed25519, never a hand-rolled primitive.
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

import attrs
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from .errors import ConfigError, DataError, MessageError

PREFIX = "ed25519:"


def public_text(key: Ed25519PublicKey) -> str:
    """The roster form of a public key: 'ed25519:' + 64 hex digits."""
    return PREFIX + key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


def parse_public(text: str, who: str) -> Ed25519PublicKey:
    if not isinstance(text, str) or not text.startswith(PREFIX):
        raise ConfigError(f"roster: {who!r}'s key must read 'ed25519:<64 hex digits>', got {text!r}")
    try:
        raw = bytes.fromhex(text[len(PREFIX):])
        if len(raw) != 32:
            raise ValueError("not 32 bytes")
        return Ed25519PublicKey.from_public_bytes(raw)
    except ValueError as exc:
        raise ConfigError(f"roster: {who!r}'s key {text!r} is not an Ed25519 public key ({exc})") from None


def inside(path: Path, folder: Path) -> bool:
    """Whether `path` is `folder` or lies under it (after resolving links)."""
    p, f = Path(path).resolve(), Path(folder).resolve()
    return p == f or f in p.parents


@attrs.define(eq=False)
class Identity:
    """A role's long-term signing key. The private key never leaves this object except into its 0600 file."""

    name: str
    _private: Ed25519PrivateKey = attrs.field(repr=False)

    @classmethod
    def generate(cls, name: str) -> Identity:
        return cls(name, Ed25519PrivateKey.generate())   # OS CSPRNG

    @property
    def public(self) -> Ed25519PublicKey:
        return self._private.public_key()

    def public_text(self) -> str:
        return public_text(self.public)

    def sign(self, data: bytes) -> bytes:
        return self._private.sign(data)

    def save(self, path: Path) -> Path:
        """Write the private key owner-only (0600); refuses to overwrite an existing key."""
        path.parent.mkdir(parents=True, exist_ok=True)
        pem = self._private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption())
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise DataError(f"{str(path)!r} already exists: a signing key is never overwritten (its public key "
                            "is pinned in rosters); remove it yourself to make a new one") from None
        with os.fdopen(fd, "wb") as fh:
            fh.write(pem)
        return path

    @classmethod
    def load(cls, name: str, path: Path) -> Identity:
        if not path.is_file():
            raise DataError(f"signing key {str(path)!r} does not exist; make it with `vertisynth party init`")
        if os.name == "posix" and path.stat().st_mode & 0o077:
            raise DataError(f"signing key {str(path)!r} is readable by others (mode {path.stat().st_mode & 0o777:o}); "
                            "chmod 600 it")
        try:
            key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        except (ValueError, TypeError) as exc:
            raise DataError(f"signing key {str(path)!r} is not a PEM private key ({exc})") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise DataError(f"signing key {str(path)!r} is not an Ed25519 key")
        return cls(name, key)


@attrs.frozen
class RosterConfig:
    """The config's `[roster]`: every participant's pinned public key, `keys = { name = "ed25519:..." }`."""

    keys: dict[str, str] = attrs.field(factory=dict)


def roster_of(section: RosterConfig | None) -> Roster:
    """The roster of a config's `[roster]` table (`config.section("roster")`); refuses a config without one."""
    if section is None or not section.keys:
        raise ConfigError("cross-machine runs need a [roster] in the shared config pinning every participant's "
                          "public key: [roster.keys] name = \"ed25519:...\" (printed by `vertisynth party init`)")
    return Roster.parse(section.keys)


@attrs.frozen
class Roster:
    """Participant name -> pinned public key, from the shared config."""

    keys: Mapping[str, Ed25519PublicKey]

    @classmethod
    def parse(cls, table: Mapping[str, str]) -> Roster:
        return cls({str(n): parse_public(k, n) for n, k in table.items()})

    def require(self, names: list[str], what: str) -> None:
        missing = [n for n in names if n not in self.keys]
        if missing:
            raise ConfigError(f"the config's [roster] names no public key for {what} {missing}; add "
                              f"`{missing[0]} = \"ed25519:...\"` (printed by `vertisynth party init`)")

    def check_own(self, identity: Identity) -> None:
        """Refuse to run with a signing key the roster does not pin under this name."""
        pinned = self.keys.get(identity.name)
        if pinned is None:
            raise ConfigError(f"{identity.name!r} is not in the config's [roster]")
        if public_text(pinned) != identity.public_text():
            raise ConfigError(f"the signing key given for {identity.name!r} is not the one the roster pins "
                              f"({identity.public_text()[:20]}... vs {public_text(pinned)[:20]}...)")

    def verify(self, sender: str, signature: bytes, data: bytes, where: str) -> None:
        key = self.keys.get(sender)
        if key is None:
            raise MessageError(f"{where}: sender {sender!r} is not in the roster ({sorted(self.keys)}); refused")
        try:
            key.verify(signature, data)
        except InvalidSignature:
            raise MessageError(f"{where}: from {sender!r}: the signature does not verify under {sender!r}'s roster "
                               "key (edited, or signed by someone else); refused") from None


# -- an explicit test secret (deploy's keys and noise, collab's candidate draws) ----------------------------------
def parse_test_secret(text: str, config_seed: int) -> bytes:
    """A reproducible run's secret: >= 128 bits of hex, never the public config seed or made from it."""
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        raise ConfigError("--test-secret must be hex digits (e.g. from `python -c \"import secrets; "
                          "print(secrets.token_hex(16))\"`)") from None
    if len(raw) < 16:
        raise ConfigError(f"--test-secret has {len(raw) * 8} bits; a test secret needs at least 128")
    value = int.from_bytes(raw, "big")
    seedish = {config_seed, abs(config_seed)}
    derived = {hashlib.sha256(str(config_seed).encode()).digest(), str(config_seed).encode(),
               config_seed.to_bytes(32, "big", signed=True) if -2**255 <= config_seed < 2**255 else b""}
    if value in seedish or raw in derived or raw.lstrip(b"\0") in derived or value < 2**64 or len(set(raw)) < 8:
        raise ConfigError(f"--test-secret is equal to, made from or as guessable as the public config seed "
                          f"({config_seed}): anyone holding the config would rebuild the keys and remove the noise")
    return raw
