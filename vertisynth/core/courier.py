"""The one messaging stack of deploy's `Session` (deploy/session.py) and collab's `Channel` (collab/channel.py):
one slot grammar, one hello, one run id, one run-key body, one sealed-envelope format, one checked read and one
receive.

**Slots.** Every message has one name on the exchange, `<round>__<sender>__to__<recipients>__<tag>` (`slot`,
read back by `parse_slot` only): the round (deploy's `synth`, `oracle-query-000003`, collab's `collab_share`,
...), the sender (a store's per-sender prefix), who it is for (`all`, one role, or `a+b`) and what tells it apart
from the sender's other messages of that round. A relay routes a message by its name alone (`Slot.routes_to`);
every reader checks the envelope against it.

**Hello.** Every role that opens a run posts one hello (`hello_envelope`, round `hello`, to `all`, in clear): the
config fingerprint (in the signed header), every setting of the resolved public config, a fresh nonce, its clock,
whether the run uses the test secret, and what its protocol adds (`columns`: a collab custodian's CSV header as
the schema names it). `read_hello` opens one, `check_hello` compares it with the reader's own (the first differing
settings named at once). The run id is the hash of the config fingerprint and every hello's nonce (`run_id`), so
it is new for every role that took part; a message of another run never verifies.

**Run keys.** A role that is sent sealed messages publishes an X25519 key of this run in an envelope it signs, in
the one key round `key`, the key's purpose in the tag and in the signed body (`key__<sender>__to__all__<purpose>`:
`server`, the deploy server's run key; `party`, a deploy party's key of its synth step; `align`, of its `party
align` step; `collab`, a collab role's run key). `Courier.publish_key` sends it (body `run_key_body`), `fetch_key`
takes it only from that envelope (`run_key_of` checks the purpose). The names these rounds had before (`server-key`,
`party-key`, `align-key`, `collab_key`) are refused wherever a name is read (`parse_slot`): a role of an older
version is named at once, not waited for.

**Sealing.** A sealed message carries, as its body, the plaintext sealed to its one recipient's run key
(core/sealing.py), with the run id, the config fingerprint, the sender, the round and the slot as associated
data: seal, then sign. Every reader checks the envelope (roster, signature, run, config, round, recipient, the
sender named in the slot) before any decryption, and a body moved to another run, config, sender, round or slot
does not open. A message to several roles goes as one envelope per recipient.
"""
from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from .envelope import ALL, Expect, Header, canonical, open_envelope, seal
from .errors import ConfigError, MessageError
from .identity import Identity, Roster
from .sealing import RunKey, Sealed, seal_to
from .transport import ReportsWaiting, Transport, poll_wait

SEALED = "sealed:"                       # the kind of a sealed body: "sealed:<kind of the plaintext>"
SEAL_INFO = b"vertisynth/deploy-seal/v1"  # the HKDF info of every sealed body (deploy's and collab's)
HELLO = "hello"                          # the round of every role's hello (deploy's parties, collab's custodians)
EVERYONE = "all"                         # a slot's recipients: every role of the run
SAFE = re.compile(r"[A-Za-z0-9_.-]+")    # a slot is a file name and a glob pattern matching only itself
NAME = re.compile(r"[A-Za-z0-9_.+-]+")   # and '+' between several recipients
MAX_HELLO_AGE = 3600.0   # seconds: an older hello is an earlier run's (or its sender's clock is that far behind)
MAX_CLOCK_AHEAD = 300.0  # seconds: a hello dated further in the future comes from a clock that far ahead
KEY = "key"              # the one round of every run key; the purpose is its tag (and in its signed body)
SERVER_KEY = "server"    # the deploy server's run key: the parties seal their data-derived messages to it
PARTY_KEY = "party"      # a deploy party's run key of its synth step (a sealed session: he rounds, oracle answers)
ALIGN_KEY = "align"      # a deploy party's run key of its `party align` step (its own process, its own key)
COLLAB_KEY = "collab"    # a collab role's run key
KEY_PURPOSES = (SERVER_KEY, PARTY_KEY, ALIGN_KEY, COLLAB_KEY)
# the rounds that carried these keys before: a message under one of them is an older version's, refused by name
RETIRED_KEY_ROUNDS = {"server-key": SERVER_KEY, "party-key": PARTY_KEY, "align-key": ALIGN_KEY, "collab_key": COLLAB_KEY}


# -- the one slot grammar --------------------------------------------------------------------------------------------
@attrs.frozen
class Slot:
    round: str
    sender: str
    to: tuple[str, ...]   # (ALL,): every role
    tag: str

    @property
    def name(self) -> str:
        label = EVERYONE if ALL in self.to else "+".join(self.to)
        return f"{self.round}__{self.sender}__to__{label}__{self.tag}"

    def addresses(self, role: str) -> bool:
        """Whether the name says this message is for `role` (every role, or `role` among its recipients)."""
        return ALL in self.to or role in self.to

    def routes_to(self, role: str) -> bool:
        """The relay's one rule: a message goes to every role its name addresses, never back to its sender."""
        return role != self.sender and self.addresses(role)


def _retired(round_: str, name: str) -> None:
    if round_ in RETIRED_KEY_ROUNDS:
        raise MessageError(f"{name}: round {round_!r} is the old name of the run-key round (now "
                           f"`{KEY}__<sender>__to__all__{RETIRED_KEY_ROUNDS[round_]}`): a role runs an older vertisynth; "
                           "refused (run every role on the same version)")


def _part(value: str, what: str) -> str:
    if what == "round":
        _retired(value, value)
    if not value or "__" in value or not SAFE.fullmatch(value) or value == EVERYONE and what == "role":
        raise ConfigError(f"{what} name {value!r} cannot name a message on the exchange: use letters, digits, "
                          "'.', '-' and single '_' only")
    return value


def slot(round_: str, sender: str, to: list[str] | tuple[str, ...], tag: object = "0") -> str:
    """The exchange name of one message (see the module doc)."""
    to = tuple(to)
    if not to:
        raise MessageError(f"{round_}: a message for nobody")
    for r in (sender, *(r for r in to if r != ALL)):
        _part(r, "role")
    tag = str(tag)
    if not tag or not SAFE.fullmatch(tag):
        raise ConfigError(f"tag {tag!r} cannot name a message on the exchange: use letters, digits, '.', '-', '_'")
    return Slot(_part(round_, "round"), sender, (ALL,) if ALL in to else to, tag).name


def parse_slot(name: str) -> Slot:
    """The round, sender, recipients and tag of a slot name; a name outside the grammar is refused in one line."""
    parts = name.split("__", 4)
    if (len(parts) != 5 or parts[2] != "to" or not all(parts) or not NAME.fullmatch(name)
            or "+" in parts[0] + parts[1] + parts[4]):
        raise MessageError(f"{name}: not a message name (<round>__<sender>__to__<recipients>__<tag>); refused")
    _retired(parts[0], name)
    label = parts[3]
    return Slot(parts[0], parts[1], (ALL,) if label == EVERYONE else tuple(label.split("+")), parts[4])


def pattern(round_: str = "*", sender: str = "*", to: str = "*", tag: str = "*") -> str:
    """A glob over slot names (`*` for any field)."""
    return f"{round_}__{sender}__to__{to}__{tag}"


# -- the one hello -----------------------------------------------------------------------------------------------------
@attrs.frozen
class Hello:
    """A role's hello, opened (`read_hello`): who, which config, its nonce, clock and settings, and what its
    protocol adds (`columns`: a collab custodian's CSV columns; None in deploy)."""

    sender: str
    config: str                # the config fingerprint of its signed header
    nonce: bytes
    created: float
    settings: dict[str, Any]   # every setting of the resolved public config, flattened (`flat`)
    test: bool                 # the run uses the explicit test secret
    columns: tuple[str, ...] | None = None


def flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: d}


def differences(mine: dict[str, Any], theirs: dict[str, Any], limit: int = 4) -> list[str]:
    keys = sorted(set(mine) | set(theirs), key=lambda k: (not k.startswith(("budget", "parties", "alignment")), k))
    diffs = [f"{k} = {json.dumps(theirs.get(k, '<unset>'))} there, {json.dumps(mine.get(k, '<unset>'))} here"
             for k in keys if mine.get(k, "<unset>") != theirs.get(k, "<unset>")]
    return diffs[:limit] + ([f"and {len(diffs) - limit} more"] if len(diffs) > limit else [])


def hello_envelope(identity: Identity, config_fp: str, settings: Mapping[str, Any], nonce: bytes, test: bool,
                   columns: list[str] | None = None, created: float | None = None) -> tuple[str, bytes]:
    """(slot, signed envelope) of this role's hello: in clear, to every role, bound to no run yet (it makes it)."""
    body = {"nonce": nonce.hex(), "created": time.time() if created is None else created, "settings": dict(settings),
            "test": bool(test)}
    if columns is not None:
        body["columns"] = list(columns)
    return (slot(HELLO, identity.name, [ALL]),
            seal(identity, "", config_fp, [ALL], HELLO, "hello", canonical(body)))


def read_hello(data: bytes, roster: Roster, name: str) -> Hello:
    """The hello in slot `name`: signed by a roster role, filed under its sender's own name, well formed."""
    header, raw = open_envelope(data, roster, None, name)
    who = header.sender
    if parse_slot(name).sender != who or parse_slot(name).round != HELLO or header.round != HELLO:
        raise MessageError(f"{name}: from {who!r}: not {who!r}'s hello; refused")
    try:
        body = json.loads(raw)
        cols = body.get("columns")
        return Hello(who, header.config, bytes.fromhex(body["nonce"]), float(body["created"]), dict(body["settings"]),
                     bool(body["test"]), None if cols is None else tuple(str(c) for c in cols))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise MessageError(f"{name}: from {who!r}: a malformed hello ({exc}); refused") from None


def check_hello(hello: Hello, where: str, settings: dict[str, Any], config_fp: str, test: bool,
                now: float | None = None) -> None:
    """`hello` against this role's own run: the same settings (the first differences named), the same config
    fingerprint, the same use of the test secret, a clock near ours. `where` starts every error line."""
    diffs = differences(settings, hello.settings)
    if diffs:
        raise ConfigError(f"{where}: its config differs from this one: " + "; ".join(diffs))
    if hello.config != config_fp:
        raise ConfigError(f"{where}: config fingerprint {hello.config[:12]}... is not ours {config_fp[:12]}...")
    if hello.test != bool(test):
        raise ConfigError(f"{where}: {'a' if hello.test else 'no'} test secret there, "
                          f"{'a' if test else 'no'} test secret here; every role must run the same way")
    check_hello_time(slot(HELLO, hello.sender, [ALL]), hello.sender, hello.created, time.time() if now is None else now)


def check_hello_time(name: str, who: str, created: float, now: float) -> None:
    """A hello too old is an earlier run's (a reused exchange folder) or comes from a clock behind ours; one dated
    in the future comes from a clock ahead of ours. Either way the skew is named."""
    age = now - created
    if age > MAX_HELLO_AGE:
        raise MessageError(f"{name}: from {who!r}: dated {age:.0f} s before our clock (more than {MAX_HELLO_AGE:.0f} s): "
                           f"an earlier run's hello (a reused exchange folder), or {who!r}'s clock is {age:.0f} s "
                           "behind ours (clock skew: sync the clocks); refused")
    if -age > MAX_CLOCK_AHEAD:
        raise MessageError(f"{name}: from {who!r}: dated {-age:.0f} s after our clock (more than {MAX_CLOCK_AHEAD:.0f} "
                           f"s): {who!r}'s clock is {-age:.0f} s ahead of ours (clock skew: sync the clocks); refused")


def run_id(config_fp: str, nonces: Mapping[str, bytes]) -> str:
    """The run id: every hello's nonce and the config fingerprint (deploy's parties, collab's custodians)."""
    return hashlib.sha256(canonical({"config": config_fp, "nonces": {p: n.hex() for p, n in sorted(nonces.items())}})
                          ).hexdigest()[:32]


# -- the one run-key round and body ------------------------------------------------------------------------------------
def key_purpose(purpose: str) -> str:
    if purpose not in KEY_PURPOSES:
        raise MessageError(f"run key purpose {purpose!r} is none of {list(KEY_PURPOSES)}")
    return purpose


def key_slot(sender: str, purpose: str) -> str:
    """The one slot of `sender`'s run key of `purpose`: `key__<sender>__to__all__<purpose>`."""
    return slot(KEY, sender, [ALL], key_purpose(purpose))


def run_key_body(public: bytes, purpose: str) -> bytes:
    return canonical({"x25519": public.hex(), "purpose": key_purpose(purpose)})


def run_key_of(body: bytes, who: str, purpose: str | None = None) -> bytes:
    """The X25519 public key in `who`'s verified run key envelope, refused in one line if it is not one, or (unless
    `purpose` is None) is a key of another purpose: the purpose is signed, a renamed slot does not change it."""
    try:
        raw_body = json.loads(body)
        raw = bytes.fromhex(raw_body["x25519"])
        got = raw_body["purpose"]
    except (ValueError, KeyError, TypeError) as exc:
        raise MessageError(f"the run key envelope of {who!r} is malformed ({exc}); refused") from None
    if purpose is not None and got != purpose:
        raise MessageError(f"the run key envelope of {who!r} holds its {got!r} key where its {purpose!r} key belongs "
                           "(a moved or renamed envelope); refused")
    if len(raw) != 32:
        raise MessageError(f"the run key of {who!r} has {len(raw)} bytes, not 32 (X25519); refused")
    return raw


def seal_aad(run: str, config: str, sender: str, round_: str, name: str) -> bytes:
    """What a sealed body is bound to: this run, this config, its sender, its round and its slot (file name)."""
    return canonical({"run": run, "config": config, "sender": sender, "round": round_, "name": name})


def wait_for(mail: Transport, glob: str, want: int, what: str, timeout: float, poll: float,
             keep: Callable[[list[str]], list[str]] = list) -> list[str]:
    """The names matching `glob` (those `keep` keeps) once there are at least `want`; a clear error after `timeout`
    s. A relay (Flower) learns that this role waits."""
    deadline = time.monotonic() + timeout
    while len(names := keep(mail.names(glob))) < want:
        if time.monotonic() > deadline:
            raise MessageError(f"waited {timeout:.0f} s for {what} in {mail}, found {len(names)} of {want}; is "
                               "another role down?")
        if isinstance(mail, ReportsWaiting):
            mail.waiting(what)
        time.sleep(poll_wait(mail, poll))   # a remote store: fewer LISTs
    return names


class Courier:
    """The sealing, checked reading and receiving of a role's messages; a subclass says where the run id, the config
    fingerprint and the exchange are (`_bound`, `_mail`), why a body may not travel in clear (`_clear_refused`) and
    holds `identity`, `roster`, `run_key`, `timeout`, `poll`."""

    identity: Identity | None
    roster: Roster
    run_key: RunKey | None
    timeout: float
    poll: float

    @property
    def me(self) -> str:
        raise NotImplementedError

    def _bound(self) -> tuple[str, str]:
        """(run id, config fingerprint) of this run."""
        raise NotImplementedError

    def _mail(self) -> Transport:
        raise NotImplementedError

    def _clear_refused(self, header: Header) -> str:
        """Why `header`'s body may not travel in clear ("": it may)."""
        return ""

    def sealed_envelope(self, recipient: str, key: bytes, name: str, round_: str, kind: str, body: bytes) -> bytes:
        """`body` sealed to `recipient`'s run key `key` for slot `name`, in an envelope this role signs."""
        run, config = self._bound()
        sealed = seal_to(key, body, seal_aad(run, config, self.me, round_, name), SEAL_INFO).to_bytes()
        return seal(self.identity, run, config, [recipient], round_, SEALED + kind, sealed)

    def send_sealed(self, round_: str, recipient: str, key: bytes, kind: str, body: bytes, tag: object = "0") -> str:
        """`body` sealed to `recipient` under its slot of `round_`; returns the slot."""
        name = slot(round_, self.me, [recipient], tag)
        self._mail().send(name, self.sealed_envelope(recipient, key, name, round_, kind, body))
        return name

    def send_clear(self, round_: str, to: list[str], kind: str, body: bytes, tag: object = "0") -> str:
        """`body` in clear (signed, bound to this run) for `to` under its slot of `round_`; returns the slot."""
        run, config = self._bound()
        name = slot(round_, self.me, to, tag)
        self._mail().send(name, seal(self.identity, run, config, to, round_, kind, body))
        return name

    def checked_open(self, name: str, rounds: tuple[str, ...], me: str | None = None,
                     sealed_by: Callable[[Header], str] | None = None, sender: str | None = None
                     ) -> tuple[Header, bytes]:
        """The envelope in slot `name`, every check passed, its body opened with this role's run key if sealed.
        `sealed_by(header)`: why a body in clear is refused ("" when this one may travel in clear; default
        `_clear_refused`); `sender`: who must have sent it."""
        run, config = self._bound()
        header, body = open_envelope(self._mail().read(name), self.roster, Expect(run, config, me or self.me, rounds),
                                     name)
        if sender is not None and header.sender != sender:
            raise MessageError(f"{name}: from {header.sender!r} where {sender!r}'s message belongs; refused")
        if parse_slot(name).sender != header.sender:
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
        why = (sealed_by or self._clear_refused)(header)
        if why:
            raise MessageError(f"{name}: from {header.sender!r}: sent in clear, where {why}; refused")
        return header, body

    def gather(self, round_: str, senders: list[str], to: str | None = None, per_sender: int | None = 1,
               tag: str = "*", what: str | None = None, timeout: float | None = None, total: int | None = None
               ) -> list[tuple[str, Header, bytes]]:
        """The one receive: every sender's `per_sender` message(s) of `round_` (None: `total` messages from any of
        `senders`; slots matching `tag`) addressed to `to` (default: me, or everybody), each checked and opened,
        as (slot, header, body) in slot order; waited for up to `timeout` s (default: the role's), then a clear
        error naming what is missing. A message from a role not in `senders`, or a count that differs, is refused."""
        to = to or self.me
        want = {"*": total or 0} if per_sender is None else dict.fromkeys(senders, per_sender)
        sender = senders[0] if len(senders) == 1 else "*"   # one sender: a store lists that sender's prefix only

        def mine(names: list[str]) -> list[str]:   # addressed to everybody or to `to` (never count another's mail)
            return [n for n in names if parse_slot(n).addresses(to)]
        what = what or f"round {round_!r} from {senders}"
        names = wait_for(self._mail(), pattern(round_, sender, tag=tag), sum(want.values()), what,
                         self.timeout if timeout is None else timeout, self.poll, mine)
        out, count = [], dict.fromkeys(senders, 0)
        for name in names:
            header, body = self.checked_open(name, (round_,), to)
            if header.sender not in count:
                raise MessageError(f"{name}: from {header.sender!r}, who is not expected in round {round_!r} "
                                   f"({senders}); refused")
            count[header.sender] += 1
            out.append((name, header, body))
        short = ({"in all": len(out)} if len(out) != want.get("*") else {}) if per_sender is None else \
            {s: n for s, n in count.items() if n != want.get(s, 0)}
        if short:
            raise MessageError(f"round {round_!r}: expected {per_sender} message(s) from each of {senders}, got {short}")
        return out

    def collect(self, round_: str, senders: list[str], to: str | None = None, per_sender: int = 1, tag: str = "*",
                what: str | None = None, timeout: float | None = None) -> dict[str, list[tuple[Header, bytes]]]:
        """`gather`, by sender: sender -> its [(header, body)] in slot order."""
        got: dict[str, list[tuple[Header, bytes]]] = {s: [] for s in senders}
        for _, header, body in self.gather(round_, senders, to, per_sender, tag, what, timeout):
            got[header.sender].append((header, body))
        return got

    def publish_key(self, purpose: str, key: RunKey | None = None, again: str = "") -> RunKey:
        """This role's run key of `purpose` (a fresh one from the OS CSPRNG unless `key`), published once in clear in
        an envelope it signs, bound to this run (so only once the run id is known). A second one of the same
        purpose in this run is refused (`again`: what that would mean for this role)."""
        if self._mail().names(key_slot(self.me, purpose)):
            raise MessageError(f"{self.me!r} already published its run key in this run ("
                               f"{again or 'a second role under its name on the same exchange'}); refused")
        key = RunKey() if key is None else key
        self.send_clear(KEY, [ALL], "run_key", run_key_body(key.public, purpose), purpose)
        return key

    def fetch_key(self, who: str, purpose: str, timeout: float | None = None, hint: str = "") -> bytes:
        """`who`'s run key of `purpose`, from its one envelope of the key round (signed by `who`'s roster key, bound
        to this run and config), waited for up to `timeout` s (default: the role's). `hint`: what to do when it
        does not come. A key under a retired round name is refused at once (`parse_slot`), not waited for."""
        wait = self.timeout if timeout is None else timeout
        want = key_slot(who, purpose)

        def keys(names: list[str]) -> list[str]:   # `*key`: the key round and its retired names, `who`'s prefix only
            return [n for n in names if parse_slot(n).round == KEY and n == want]
        try:
            names = wait_for(self._mail(), pattern(f"*{KEY}", who), 1, f"{who}'s run key", wait, self.poll, keys)
        except MessageError as exc:
            if "waited" not in str(exc):
                raise
            raise MessageError(f"{self.me}: no run key from {who!r} in {self._mail()} within {wait:.0f} s: "
                               + (hint or f"is {who!r} down?")) from None
        header, body = self.checked_open(names[0], (KEY,), self.me)
        if header.sender != who:
            raise MessageError(f"{names[0]}: a run key of {header.sender!r} filed under {who!r}; refused")
        return run_key_of(body, who, purpose)
