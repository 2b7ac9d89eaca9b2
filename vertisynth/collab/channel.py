"""The collab roles' messages over any exchange (core/transport.py: a folder, `file://`, `sftp://`, an object
store), on the one messaging stack of core/courier.py that deploy's Session uses too: one slot grammar
(`<round>__<sender>__to__<recipient>__<tag>`, so a store that gives each sender its own prefix puts every role's
messages under its own name), one hello, one run id, one run-key body, one sealed-envelope format, one receive.

Every custodian opens the run with a hello (round `hello`, in clear: every setting of the public config, a fresh
nonce, its clock and its CSV's columns as the schema names them); the run id is the hash of the config fingerprint
and every custodian's nonce, so a message from an earlier run on a reused exchange never verifies. Each role then
makes an X25519 run key (OS CSPRNG, memory only) and publishes it in an envelope it signs (the one key round of core/courier.py,
`key__<role>__to__all__collab`, in clear); a sender takes a recipient's key only from that envelope, verified under the roster. Every other
message is sealed to its one recipient's run key, one envelope per recipient: a relay, and every role it is not
addressed to, reads ciphertext, and a message moved to another slot, run or sender does not open."""
from __future__ import annotations

from collections.abc import Sequence

import attrs

from vertisynth.core.courier import COLLAB_KEY, HELLO, KEY, Courier, pattern, slot
from vertisynth.core.envelope import ALL, Header
from vertisynth.core.errors import ConfigError, MessageError
from vertisynth.core.identity import Identity, Roster
from vertisynth.core.messages import Message
from vertisynth.core.sealing import RunKey
from vertisynth.core.transport import Transport

PUBLISHER = "publisher"
CLEAR = (HELLO, KEY)   # the only rounds in clear: public by design (the public config, public keys)


def server_name(index: int) -> str:
    return f"server{index}"


@attrs.frozen
class Where:
    """One collab message before it is addressed: its round, its sender and what tells it apart from the sender's
    other messages of that round (the tag). Its envelope for role r lies in slot `<round>__<sender>__to__r__<tag>`."""

    round: str
    sender: str
    tag: str

    def __str__(self) -> str:
        return pattern(self.round, self.sender, tag=self.tag)


def where(kind: str, sender: str, *rest: object) -> Where:
    """Where a message of `kind` from `sender` goes, told apart by `rest` (the role name is checked here)."""
    tag = ".".join(map(str, rest)) or "0"
    slot(f"collab_{kind}", sender, [ALL], tag)   # a role name that cannot name a message: refused here, in one line
    return Where(f"collab_{kind}", sender, tag)


@attrs.define
class Channel(Courier):
    identity: Identity
    roster: Roster
    exchange: Transport   # where every role of the run posts and reads (core/transport.py)
    config: str           # the config fingerprint every role shares
    run: str = ""         # set once every custodian's hello is in
    timeout: float = 600.0
    poll: float = 0.05
    roles: tuple[str, ...] = ()        # every role of the run (`ALL`: all of them but me)
    run_key: RunKey | None = None      # this role's run key (publish_run_key)
    keys: dict[str, bytes] = attrs.field(factory=dict)   # recipients' run keys, verified in their envelopes

    @property
    def me(self) -> str:
        return self.identity.name

    def _bound(self) -> tuple[str, str]:
        return self.run, self.config

    def _mail(self) -> Transport:
        return self.exchange

    def _clear_refused(self, header: Header) -> str:
        return "" if header.round in CLEAR else "every message of this run is sealed to its recipient's run key"

    def publish_run_key(self) -> RunKey:
        """This role's X25519 run key for this run (OS CSPRNG, memory only), published in clear in an envelope it
        signs; only after the run id is known (the envelope is bound to it)."""
        if not self.run:
            raise MessageError(f"{self.me}: no run id yet; a run key is published after every custodian's hello")
        self.run_key = self.publish_key(COLLAB_KEY, again="a second role under its name on the same exchange: what "
                                        "was sealed to the first one's key opens with no other")
        return self.run_key

    def key_of(self, who: str) -> bytes:
        """`who`'s run key: from its envelope (signed by `who`'s roster key, bound to this run), waited for."""
        if who not in self.keys:
            self.keys[who] = self.fetch_key(who, COLLAB_KEY)
        return self.keys[who]

    def recipients(self, to: Sequence[str]) -> list[str]:
        if ALL not in to:
            return list(to)
        if not self.roles:
            raise MessageError(f"{self.me}: a sealed message to every role, but the channel knows no roles")
        return [r for r in self.roles if r != self.me]

    def post(self, msg: Message, at: Where, to: list[str]) -> list[str]:
        """Post `msg` for `to`, one envelope per recipient sealed to its run key; the exchange refuses a slot
        already there (never replaced). Returns the slots."""
        if at.sender != self.me:
            raise MessageError(f"{self.me}: cannot post under {at.sender!r}'s name ({at}); refused")
        body = msg.to_bytes()
        return [self.send_sealed(at.round, r, self.key_of(r), msg.kind, body, at.tag) for r in self.recipients(to)]

    def receive(self, cls: type[Message], at: Where, what: str) -> Message:
        """This role's message at `at` from its sender, waited for (the channel's timeout), checked and opened."""
        [(_, body)] = self.collect(at.round, [at.sender], tag=at.tag, what=what)[at.sender]
        msg = cls.from_bytes(body, str(at))
        if msg.party != at.sender:
            raise MessageError(f"{at}: from {at.sender!r} but holds a message of {msg.party!r}; refused")
        return msg


def check_role_name(name: str) -> None:
    """Every role's name must be usable in a slot: refused before anything is sent."""
    if not isinstance(name, str):
        raise ConfigError(f"role name {name!r} is not a string")
    slot(HELLO, name, [ALL])
