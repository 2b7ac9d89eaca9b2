"""The collab roles' messages in signed envelopes (core/envelope.py) over any exchange (core/transport.py: a
folder, `file://`, `sftp://`, an object store): every custodian, server and publisher signs what it posts with its
roster key, and every reader checks sender, signature, run id, config fingerprint and the message's slot (its
name on the exchange: a message copied to another slot or run is refused).

A slot is `<kind>__<sender>__<rest>`, so a store that gives each sender its own prefix (FsspecTransport) puts
every role's messages under its own name. The run id is the hash of the config fingerprint and a fresh nonce in
every custodian's hello (core/courier.py: deploy's run id), so a message from an earlier run on a reused exchange
never verifies.

A `sealed` channel (every role across processes, distributed.py) seals every message but the hellos and the run
keys to its recipient's X25519 run key, one envelope per recipient under `<slot>__to__<recipient>`, in deploy's
sealed-envelope format (core/courier.py): a relay, and every role it is not addressed to, reads ciphertext. Each
role makes its run key once the run id is known (OS CSPRNG, memory only) and publishes it in an envelope it signs
(`collab_key__<role>`); a sender takes a recipient's key only from that envelope, verified under the roster."""
from __future__ import annotations

import re
from collections.abc import Sequence
from typing import ClassVar

import attrs
import numpy as np

from vertisynth.core.courier import Courier, run_id
from vertisynth.core.envelope import ALL, Header, open_envelope, seal
from vertisynth.core.errors import ConfigError, MessageError
from vertisynth.core.identity import Identity, Roster
from vertisynth.core.messages import Message
from vertisynth.core.sealing import RunKey
from vertisynth.core.transport import Transport, receive

PUBLISHER = "publisher"
SAFE = re.compile(r"[A-Za-z0-9_.-]+")   # a slot is a file name and a glob pattern matching only itself


def server_name(index: int) -> str:
    return f"server{index}"


def slot(kind: str, sender: str, *rest: object) -> str:
    """The exchange name of one message: its kind, its sender (the store's per-sender prefix), then what tells it
    apart from the sender's other messages of that kind."""
    name = "__".join([f"collab_{kind}", sender, *map(str, rest)])
    if not SAFE.fullmatch(name) or "__" in sender or not sender:
        raise ConfigError(f"role name {sender!r} cannot name a message on the exchange: use letters, digits, "
                          "'.', '-' and single '_' only")
    return name


def collab_run_id(config_fp: str, nonces: dict[str, str]) -> str:
    """The run id from every custodian's hello nonce (hex): deploy's derivation (core/courier.py)."""
    return run_id(config_fp, {n: bytes.fromhex(h) for n, h in nonces.items()})


CLEAR = ("collab_hello", "collab_key")   # the only kinds a sealed channel sends in clear: public by design


def key_slot(role: str) -> str:
    return slot("key", role)


def addressed(name: str, recipient: str) -> str:
    """The slot of `name`'s envelope for `recipient` on a sealed channel."""
    return f"{name}__to__{recipient}"


@attrs.frozen(eq=False)
class RunKeyMessage(Message):
    """A role's X25519 run key, published on the exchange (signed, bound to the run) for those who seal to it."""

    kind: ClassVar[str] = "collab_run_key"
    public_key: np.ndarray = attrs.field(factory=lambda: np.zeros(32, np.uint8))

    def validate(self) -> RunKeyMessage:
        super().validate()
        if self.public_key.dtype != np.uint8 or self.public_key.shape != (32,):
            raise self._fail("public_key must be 32 bytes (X25519)")
        return self


@attrs.define
class Channel(Courier):
    identity: Identity
    roster: Roster
    exchange: Transport   # where every role of the run posts and reads (core/transport.py)
    config: str           # the config fingerprint every role shares
    run: str = ""         # set once every custodian's hello is in
    timeout: float = 600.0
    poll: float = 0.05
    roles: tuple[str, ...] = ()        # every role of the run (`ALL` on a sealed channel: all of them but me)
    sealed: bool = False               # every message but CLEAR sealed to its recipient's run key
    run_key: RunKey | None = None      # this role's run key (publish_run_key)
    keys: dict[str, bytes] = attrs.field(factory=dict)   # recipients' run keys, verified in their envelopes

    @property
    def me(self) -> str:
        return self.identity.name

    def _bound(self) -> tuple[str, str]:
        return self.run, self.config

    def _mail(self) -> Transport:
        return self.exchange

    def _clear(self, name: str) -> bool:
        return not self.sealed or name.split("__")[0] in CLEAR

    def publish_run_key(self) -> RunKey:
        """This role's X25519 run key for this run (OS CSPRNG, memory only), published in clear in an envelope it
        signs; only after the run id is known (the envelope is bound to it)."""
        if not self.run:
            raise MessageError(f"{self.me}: no run id yet; a run key is published after every custodian's hello")
        if self.exchange.names(key_slot(self.me)):
            raise MessageError(f"{self.me!r} already published its run key in this run (a second role under its name "
                               "on the same exchange: what was sealed to the first one's key opens with no other); "
                               "refused")
        self.run_key = RunKey()
        self.post(RunKeyMessage(party=self.me, public_key=np.frombuffer(self.run_key.public, np.uint8).copy()),
                  key_slot(self.me), [ALL])
        return self.run_key

    def key_of(self, who: str) -> bytes:
        """`who`'s run key: from its envelope (signed by `who`'s roster key, bound to this run), waited for."""
        if who not in self.keys:
            msg = self.receive(RunKeyMessage, key_slot(who), who, f"{who}'s run key")
            self.keys[who] = msg.public_key.tobytes()
        return self.keys[who]

    def recipients(self, to: Sequence[str]) -> list[str]:
        if ALL not in to:
            return list(to)
        if not self.roles:
            raise MessageError(f"{self.me}: a sealed message to every role, but the channel knows no roles")
        return [r for r in self.roles if r != self.me]

    def post(self, msg: Message, name: str, to: list[str]) -> str:
        """Post `msg` for `to` under slot `name` (sealed: one envelope per recipient under `addressed(name, r)`);
        the exchange refuses a name already there (never replaced)."""
        if self._clear(name):
            data = seal(self.identity, self.run, self.config, to, name, msg.kind, msg.to_bytes())
            self.exchange.send(name, data)
            return name
        body = msg.to_bytes()
        for r in self.recipients(to):
            slot_r = addressed(name, r)
            self.exchange.send(slot_r, self.sealed_envelope(r, self.key_of(r), slot_r, slot_r, msg.kind, body))
        return name

    def mine(self, name: str) -> str:
        """The slot this role reads for message `name`."""
        return name if self._clear(name) else addressed(name, self.me)

    def wait(self, name: str, what: str) -> str:
        """Slot `name` (this role's envelope of it) once it is on the exchange; a clear error after the timeout."""
        return receive(self.exchange, self.mine(name), 1, what, self.timeout, self.poll)[0]

    def _sealed_by(self, header: Header) -> str:
        return "" if self._clear(header.round) else "every message of this run is sealed to its recipient's run key"

    def load(self, cls: type[Message], name: str, sender: str, hello: bool = False) -> Message:
        """The message in slot `name` (or this role's envelope of it), after every check; it must come from
        `sender`."""
        if hello:
            header, body = open_envelope(self.exchange.read(name), self.roster, None, name)
        else:
            name = self.mine(name)
            header, body = self.checked_open(name, (name,), self.me, self._sealed_by, sender)
        if header.sender != sender:
            raise MessageError(f"{name}: from {header.sender!r} where {sender!r}'s message belongs; refused")
        if hello and header.round != name:
            raise MessageError(f"{name}: from {sender!r}: a hello written for slot {header.round!r}; refused")
        msg = cls.from_bytes(body, name)
        if msg.party != sender:
            raise MessageError(f"{name}: from {sender!r} but holds a message of {msg.party!r}; refused")
        return msg

    def receive(self, cls: type[Message], name: str, sender: str, what: str) -> Message:
        """Wait for slot `name`, then load it."""
        self.wait(name, what)
        return self.load(cls, name, sender)
