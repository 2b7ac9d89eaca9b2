"""The collab roles' messages in signed envelopes (core/envelope.py) over any exchange (core/transport.py: a
folder, `file://`, `sftp://`, an object store): every custodian, server and publisher signs what it posts with its
roster key, and every reader checks sender, signature, run id, config fingerprint and the message's slot (its
name on the exchange: a message copied to another slot or run is refused).

A slot is `<kind>__<sender>__<rest>`, so a store that gives each sender its own prefix (FsspecTransport) puts
every role's messages under its own name. The run id is the hash of the config fingerprint and a fresh nonce in
every custodian's hello, so a message from an earlier run on a reused exchange never verifies."""
from __future__ import annotations

import hashlib
import re

import attrs

from vertisynth.core.envelope import Expect, canonical, open_envelope, seal
from vertisynth.core.errors import ConfigError, MessageError
from vertisynth.core.identity import Identity, Roster
from vertisynth.core.messages import Message
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
    return hashlib.sha256(canonical({"collab": config_fp, "nonces": dict(sorted(nonces.items()))})).hexdigest()[:32]


@attrs.define
class Channel:
    identity: Identity
    roster: Roster
    exchange: Transport   # where every role of the run posts and reads (core/transport.py)
    config: str           # the config fingerprint every role shares
    run: str = ""         # set once every custodian's hello is in
    timeout: float = 600.0
    poll: float = 0.05

    @property
    def me(self) -> str:
        return self.identity.name

    def post(self, msg: Message, name: str, to: list[str]) -> str:
        """Seal `msg` for `to` under slot `name`; the exchange refuses a name already there (never replaced)."""
        data = seal(self.identity, self.run, self.config, to, name, msg.kind, msg.to_bytes())
        self.exchange.send(name, data)
        return name

    def wait(self, name: str, what: str) -> str:
        """Slot `name` once it is on the exchange; a clear error after the channel's timeout."""
        return receive(self.exchange, name, 1, what, self.timeout, self.poll)[0]

    def load(self, cls: type[Message], name: str, sender: str, hello: bool = False) -> Message:
        """The message in slot `name`, after every check; it must come from `sender`."""
        expect = None if hello else Expect(self.run, self.config, self.me, (name,))
        header, body = open_envelope(self.exchange.read(name), self.roster, expect, name)
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
        return self.load(cls, self.wait(name, what), sender)
