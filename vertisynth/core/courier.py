"""What deploy's `Session` (deploy/session.py) and collab's `Channel` (collab/channel.py) share: one run id, one
sealed-envelope format and one checked read.

A message travels in a signed envelope (core/envelope.py). A sealed one carries, as its body, the plaintext sealed
to its one recipient's X25519 run key (core/sealing.py), with the run id, the config fingerprint, the sender, the
round and the slot (its name on the exchange) as associated data: seal, then sign. Every reader checks the
envelope (roster, signature, run, config, round, recipient, the sender named in the slot) before any decryption,
and a body moved to another run, config, sender, round or slot does not open. A message to several roles goes as
one envelope per recipient.

The run id is the hash of the config fingerprint and a fresh nonce from every role of the hello round, so it is new
for every role that took part; a message of another run never verifies.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping

import attrs

from .envelope import Expect, Header, canonical, open_envelope, seal
from .errors import MessageError
from .identity import Identity, Roster
from .sealing import RunKey, Sealed, seal_to

SEALED = "sealed:"                       # the kind of a sealed body: "sealed:<kind of the plaintext>"
SEAL_INFO = b"vertisynth/deploy-seal/v1"  # the HKDF info of every sealed body (deploy's and collab's)


def run_id(config_fp: str, nonces: Mapping[str, bytes]) -> str:
    """The run id: every hello's nonce and the config fingerprint (deploy's parties, collab's custodians)."""
    return hashlib.sha256(canonical({"config": config_fp, "nonces": {p: n.hex() for p, n in sorted(nonces.items())}})
                          ).hexdigest()[:32]


def seal_aad(run: str, config: str, sender: str, round_: str, name: str) -> bytes:
    """What a sealed body is bound to: this run, this config, its sender, its round and its slot (file name)."""
    return canonical({"run": run, "config": config, "sender": sender, "round": round_, "name": name})


class Courier:
    """The sealing and checked reading of a role's messages; a subclass says where the run id, the config
    fingerprint and the exchange are (`_bound`, `_mail`) and holds `identity`, `roster`, `run_key`."""

    identity: Identity | None
    roster: Roster
    run_key: RunKey | None

    @property
    def me(self) -> str:
        raise NotImplementedError

    def _bound(self) -> tuple[str, str]:
        """(run id, config fingerprint) of this run."""
        raise NotImplementedError

    def _mail(self):
        raise NotImplementedError

    def sealed_envelope(self, recipient: str, key: bytes, name: str, round_: str, kind: str, body: bytes) -> bytes:
        """`body` sealed to `recipient`'s run key `key` for slot `name`, in an envelope this role signs."""
        run, config = self._bound()
        sealed = seal_to(key, body, seal_aad(run, config, self.me, round_, name), SEAL_INFO).to_bytes()
        return seal(self.identity, run, config, [recipient], round_, SEALED + kind, sealed)

    def checked_open(self, name: str, rounds: tuple[str, ...], me: str | None = None,
                     sealed_by: Callable[[Header], str] | None = None, sender: str | None = None
                     ) -> tuple[Header, bytes]:
        """The envelope in slot `name`, every check passed, its body opened with this role's run key if sealed.
        `sealed_by(header)`: why a body in clear is refused ("" when this one may travel in clear); `sender`: who
        must have sent it."""
        run, config = self._bound()
        header, body = open_envelope(self._mail().read(name), self.roster, Expect(run, config, me or self.me, rounds),
                                     name)
        if sender is not None and header.sender != sender:
            raise MessageError(f"{name}: from {header.sender!r} where {sender!r}'s message belongs; refused")
        if name.split("__")[1:2] != [header.sender]:
            raise MessageError(f"{name}: from {header.sender!r} under another sender's name; refused")
        if header.kind.startswith(SEALED):
            if self.run_key is None:
                who = "+".join(header.to)
                raise MessageError(f"{name}: sealed to the run key of {who}; only "
                                   f"{'the server' if who == 'server' else repr(who)} opens it")
            body = self.run_key.open(Sealed.from_bytes(body, name),
                                     seal_aad(header.run, header.config, header.sender, header.round, name),
                                     SEAL_INFO, f"{name} from {header.sender!r}")
            return attrs.evolve(header, kind=header.kind[len(SEALED):]), body
        why = sealed_by(header) if sealed_by is not None else ""
        if why:
            raise MessageError(f"{name}: from {header.sender!r}: sent in clear, where {why}; refused")
        return header, body
