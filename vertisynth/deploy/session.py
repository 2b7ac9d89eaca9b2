"""A run across machines: who takes part (the roster), which run this is (the hello round) and how every
message is sealed and checked (the envelope, `core/envelope.py`), over a transport (`transport.py`). The slot
grammar, the hello, the run id, the run-key body, the sealed-envelope format, the checked read and the receive are
`core/courier.py`'s, which collab's Channel uses too: a Session is deploy's thin front end of it.

`vertisynth party hello` runs the hello round: every party signs and posts its config fingerprint, every
setting of the resolved public config and a fresh random nonce; each party checks every other party's hello
(roster, signature, same settings: the first differences are named, at once, no wait) and the run id is the
hash of the fingerprint and all nonces, so it is fresh for every party that took part. Every later message of
the run carries that run id and is refused elsewhere. The run state (run id, fingerprint, the optional test
secret) is kept in the party's private folder for the later steps.

The server makes an X25519 run key per run and publishes it in an envelope it signs (the one key round of
core/courier.py, `key__server__to__all__server`, `publish_run_key`); every party verifies it under the roster (`fetch_run_key`) and seals each data-derived message
to the server (rounds `SEALED_ROUNDS`) with it: seal, then sign (`Session.send`). Only the server opens them
(`Session.open`); another party or a relay reads ciphertext (docs/threat-model.md).

A session that is `sealed` (the vertical oracle's runs, deploy/oracle_rounds.py) seals every message to its one
recipient's run key: the server's queries to each party, the parties' rounds with each other, their answers. Each
party publishes an X25519 run key of its own in an envelope it signs (`key__<party>__to__all__party`,
`publish_party_key`), as
the server does; a message to several roles goes as one envelope per recipient. Only the hello round and the key
rounds travel in clear (the public config and public keys): a relay learns who talks to whom, when and how much,
not which marginals are asked. VertiMRF's he rounds (deploy/he_rounds.py) run the same sealed session, and so does
`party align` with a run key of its own step (`key__<party>__to__all__align`): a relay reads no blinded set of the
alignment.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import attrs

from vertisynth.core.courier import (SEAL_INFO, SEALED, check_hello_time, seal_aad)  # noqa: F401 (re-exported)
from vertisynth.core.courier import (ALIGN_KEY, HELLO, KEY, PARTY_KEY, SERVER_KEY, Courier, check_hello, flat,
                                     hello_envelope, key_slot, pattern, read_hello, run_id, run_key_of, wait_for)
from vertisynth.core.envelope import ALL, Header
from vertisynth.core.errors import ConfigError, DataError, MessageError
from vertisynth.core.identity import Identity, Roster, inside, roster_of as _roster_of
from vertisynth.core.sealing import RunKey, hkdf
from vertisynth.run.config import RunConfig, config_fingerprint, public_config

from .transport import Transport, local_folder, transport_for

TEST_LABEL = "TEST SECRET: reproducible run, not for production"
SERVER = "server"
# party -> server rounds whose bodies are data-derived (DP FM sketches, GRR columns, local models, value
# distributions, the he encoder's published tables, the signed ledger with its row tag): sealed to the server's
# run key, so neither another party nor a relay reads them (docs/threat-model.md)
SEALED_ROUNDS = ("synth", "ledger")
# and the rounds of every party's answer to one query of the vertical oracle (deploy/oracle_rounds.py)
SEALED_PREFIXES = ("oracle-answer-",)
CLEAR_ROUNDS = (HELLO, KEY)   # in a sealed session, the only rounds in clear (the public config, public keys)


def sealed_round(round_: str) -> bool:
    """Whether a party seals its messages of `round_` to the server's run key."""
    return round_ in SEALED_ROUNDS or round_.startswith(SEALED_PREFIXES)


def roster_of(config: RunConfig) -> Roster:
    return _roster_of(config.section("roster"))



# -- the explicit test secret ----------------------------------------------------------------------------------
def test_nonce(secret: bytes, party: str) -> bytes:
    return hkdf(secret, b"vertisynth/test-hello-nonce/v1|" + party.encode())[:16]


def test_noise_seed(secret: bytes) -> int:
    return int.from_bytes(hkdf(secret, b"vertisynth/test-noise-seed/v1"), "big")


def key_context(run: str, config_fp: str) -> bytes:
    """What the group key is bound to: this run and this config (HKDF info of the key agreement)."""
    return f"run={run}|config={config_fp}".encode()


# -- the run state kept in a party's private folder --------------------------------------------------------------
@attrs.frozen
class RunState:
    party: str
    run: str
    config: str
    parties: tuple[str, ...]
    test_secret: str | None = None

    def secret(self) -> bytes | None:
        return bytes.fromhex(self.test_secret) if self.test_secret else None

    @staticmethod
    def path(out: Path, party: str) -> Path:
        return out / f"{party}_run.json"

    def save(self, out: Path) -> Path:
        out.mkdir(parents=True, exist_ok=True)
        path = self.path(out, self.party)
        tmp = path.with_suffix(".part")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump({**attrs.asdict(self), "parties": list(self.parties)}, fh, indent=2)
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, out: Path, party: str) -> RunState:
        path = cls.path(out, party)
        if not path.is_file():
            raise DataError(f"no run state {str(path)!r}: run `vertisynth party hello` first (same --out)")
        try:
            raw = json.loads(path.read_text())
            return cls(**{**raw, "parties": tuple(raw["parties"])})
        except (ValueError, TypeError, KeyError) as exc:
            raise DataError(f"run state {str(path)!r} is malformed: {exc}") from None


def private_folder(out: Path, exchange: str | Path) -> None:
    folder = local_folder(exchange)    # a remote store cannot hold a local folder
    if folder is not None and (inside(out, folder) or inside(folder, out)):
        raise ConfigError(f"--out {str(out)!r} is inside (or holds) the exchange folder {str(exchange)!r}: private "
                          "keys and outputs would be where the relay reads them; use a private folder")


def identity_path(out: Path, name: str) -> Path:
    return out / f"{name}_signing.pem"


def load_identity(config: RunConfig, name: str, out: Path, key: Path | None, exchange: str | Path | None) -> Identity:
    path = key or identity_path(out, name)
    folder = local_folder(exchange) if exchange is not None else None
    if folder is not None and inside(path, folder):
        raise ConfigError(f"signing key {str(path)!r} lies in the exchange folder; keep it private")
    identity = Identity.load(name, path)
    roster_of(config).check_own(identity)
    return identity


# -- a session: sealed sends and checked receives ------------------------------------------------------------------
@attrs.define
class Session(Courier):
    identity: Identity | None   # None: a role that only reads
    roster: Roster
    transport: Transport
    state: RunState
    timeout: float = 600.0
    poll: float = 0.05
    server_key: bytes | None = None   # a party: the server's run key (X25519), verified in its signed envelope
    run_key: RunKey | None = None     # its own run key pair (the server's; a party's in a sealed session)
    sealed: bool = False              # every message but CLEAR_ROUNDS sealed to its recipient's run key
    keys: dict[str, bytes] = attrs.field(factory=dict)   # recipients' run keys, verified in their signed envelopes
    key_purpose: str = PARTY_KEY   # the purpose of the parties' run keys of this step (ALIGN_KEY: alignment)

    @property
    def me(self) -> str:
        return self.state.party

    def _bound(self) -> tuple[str, str]:
        return self.state.run, self.state.config

    def _mail(self) -> Transport:
        return self.transport

    def key_of(self, who: str, timeout: float | None = None) -> bytes:
        """`who`'s run key (X25519): verified in its signed envelope of this run, waited for up to `timeout`
        (default: the session's), then kept."""
        if who == SERVER and self.server_key is not None:
            return self.server_key
        if who not in self.keys:
            self.keys[who] = self.fetch_key(who, SERVER_KEY if who == SERVER else self.key_purpose, timeout)
        return self.keys[who]

    def send(self, round_: str, to: list[str], kind: str, body: bytes, tag: str = "0") -> None:
        if self.sealed and not self._clear_round(round_):
            # one envelope per recipient, each sealed to its key
            for who in ([p for p in (*self.state.parties, SERVER) if p != self.me] if to == [ALL] else list(to)):
                self.send_sealed(round_, who, self.key_of(who), kind, body, tag)
            return
        if sealed_round(round_) and to == [SERVER]:
            # seal, then sign the sealed body: every reader checks sender, run and round before any decryption,
            # and the AAD binds the plaintext to this run, config, sender, round and slot, so nobody can move a
            # party's ciphertext into an envelope of their own (it would not open there)
            if self.server_key is None:
                raise MessageError(f"{self.me}: no run key of the server to seal {round_} to; refused to send it in "
                                   "clear")
            self.send_sealed(round_, SERVER, self.server_key, kind, body, tag)
            return
        self.send_clear(round_, to, kind, body, tag)

    def open(self, name: str, rounds: tuple[str, ...], me: str | None = None) -> tuple[Header, bytes]:
        return self.checked_open(name, rounds, me)

    def _clear_round(self, round_: str) -> bool:
        """The hello and the key round: public by design."""
        return round_ in CLEAR_ROUNDS

    def _clear_refused(self, header: Header) -> str:
        if self.run_key is not None and sealed_round(header.round):
            return "every party seals this round to the server's run key"
        if self.sealed and not self._clear_round(header.round):
            return "every message of this run is sealed to its recipient's run key"
        return ""

    def receive(self, round_: str, senders: list[str], to: str | None = None, per_sender: int = 1
                ) -> dict[str, list[tuple[Header, bytes]]]:
        """Every sender's messages of `round_` addressed to `to` (default: me, or everybody): `Courier.collect`."""
        return self.collect(round_, senders, to, per_sender)


def hello(config: RunConfig, identity: Identity, transport: Transport, parties: list[str], out: Path,
          test_secret: bytes | None, timeout: float, poll: float = 0.05) -> RunState:
    """The hello round (see the module doc); returns and saves this party's run state."""
    roster = roster_of(config)
    roster.require(parties, "parties")
    party = identity.name
    if party not in parties:
        raise DataError(f"unknown party {party!r}; the config's parties are {parties}")
    others = [n for n in transport.names("*") if not n.startswith(f"{HELLO}__")]
    if others:
        raise MessageError(f"exchange folder {transport} already holds messages of a run ({others[0]}, ...): a reused "
                           "exchange folder; use a fresh one for every run")
    settings = flat(public_config(config))
    fp = config_fingerprint(config)
    nonce = test_nonce(test_secret, party) if test_secret else os.urandom(16)
    transport.send(*hello_envelope(identity, fp, settings, nonce, bool(test_secret)))
    nonces = {}
    for h in _hellos(transport, roster, parties, f"every party's hello {parties}", timeout, poll):
        check_hello(h, f"hello from {h.sender!r}", settings, fp, bool(test_secret))
        nonces[h.sender] = h.nonce
    state = RunState(party, run_id(fp, nonces), fp, tuple(parties), test_secret.hex() if test_secret else None)
    state.save(out)
    return state


def _hellos(transport: Transport, roster: Roster, parties: list[str], what: str, timeout: float, poll: float,
            want: int | None = None) -> list:
    """Every hello on the exchange (at least `want`, default every party's, waited for), each from a party."""
    names = wait_for(transport, pattern(HELLO), len(parties) if want is None else want, what, timeout, poll)
    out = []
    for name in names:
        h = read_hello(transport.read(name), roster, name)
        if h.sender not in parties:
            raise MessageError(f"{name}: from {h.sender!r}, who is not a party of this config ({parties}); refused")
        out.append(h)
    return out


def read_hellos(config: RunConfig, transport: Transport, parties: list[str], role: str, timeout: float = 0.0,
                poll: float = 0.2) -> str:
    """A role that took no part in the hello round (the server) checks it: same config, and the run id. It waits
    up to `timeout` s for every party's hello (a server started beside the parties)."""
    settings, fp = flat(public_config(config)), config_fingerprint(config)
    try:
        hellos = _hellos(transport, roster_of(config), parties, "every party's hello", timeout, poll)
    except MessageError as exc:
        if "waited" not in str(exc):
            raise
        hellos = _hellos(transport, roster_of(config), parties, "every party's hello", 0.0, poll, want=0)
    nonces = {}
    for h in hellos:
        check_hello(h, f"{role}: party {h.sender!r} ran a different config", settings, fp, h.test, now=h.created)
        nonces[h.sender] = h.nonce
    missing = [p for p in parties if p not in nonces]
    if missing:
        raise MessageError(f"{role}: no hello from parties {missing} in {transport}"
                           + (f" within {timeout:.0f} s" if timeout else "") + ": run `vertisynth party hello` first")
    return run_id(fp, nonces)


def session(config: RunConfig, party: str, exchange: str | Path, out: Path, key: Path | None, timeout: float,
            poll: float = 0.05) -> Session:
    """The session of a step after the hello round, from the run state in `out`."""
    private_folder(out, exchange)
    identity = load_identity(config, party, out, key, exchange)
    state = RunState.load(out, party)
    if state.config != config_fingerprint(config):
        raise ConfigError(f"the run state in {str(out)!r} belongs to another config (fingerprint {state.config[:12]}..."
                          f" vs {config_fingerprint(config)[:12]}...); run `vertisynth party hello` again")
    return Session(identity, roster_of(config), transport_for(exchange), state, timeout, poll)


# -- the server's run key: parties seal their data-derived messages to it ------------------------------------------
def run_key_path(signing_key: Path) -> Path:
    """Beside the server's signing key (its private folder), never in its output folder (the release)."""
    return signing_key.parent / f"{SERVER}_run_key.json"


def publish_run_key(sess: Session, signing_key: Path) -> RunKey:
    """The server's X25519 key pair of this run (OS CSPRNG; kept 0600 beside its signing key, so a later
    `vertisynth server` of the same run opens what was sealed to it), published once in an envelope the server
    signs (`key__server__to__all__server`, to every party). Returns the pair."""
    path = run_key_path(signing_key)
    key = None
    if path.is_file():
        try:
            saved = json.loads(path.read_text())
            if saved.get("run") == sess.state.run and saved.get("config") == sess.state.config:
                key = RunKey.from_private_bytes(bytes.fromhex(saved["x25519_private"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise DataError(f"run key {str(path)!r} is malformed ({exc}); remove it and start the server again") from None
    published = sess.transport.names(key_slot(SERVER, SERVER_KEY))
    if key is None:
        if published:
            raise MessageError(f"the exchange holds the server's run key of this run ({published[0]}) but "
                               f"{str(path)!r} does not: start the server with the --key (private folder) of its "
                               "first start; the parties sealed their messages to that key")
        key = RunKey()
        _private_write(path, {"run": sess.state.run, "config": sess.state.config,
                              "x25519_private": key.private_bytes().hex()})
    if not published:
        sess.publish_key(SERVER_KEY, key)
    else:
        _, body = sess.open(published[0], (KEY,), SERVER)
        if run_key_of(body, SERVER, SERVER_KEY) != key.public:
            raise MessageError(f"{published[0]}: the run key published for this run is not the one in {str(path)!r}; "
                               "refused")
    return key


def fetch_run_key(sess: Session) -> bytes:
    """A party: the server's run key, from its envelope (signed by the server's roster key, bound to this run and
    config), waited for up to the session's timeout."""
    return sess.fetch_key(SERVER, SERVER_KEY, hint="start `vertisynth server` (it publishes the key the parties seal "
                          "their messages to) beside the parties, or `vertisynth server --publish-key-only` before "
                          "`party synth`")


def publish_party_key(sess: Session) -> RunKey:
    """A party of a sealed session: its X25519 key pair for this step (OS CSPRNG, held in memory only: the step is
    one process), published once in an envelope it signs (purpose `sess.key_purpose`, to every role)."""
    step = "party align" if sess.key_purpose == ALIGN_KEY else "party synth"
    return sess.publish_key(sess.key_purpose, again=f"a second `{step}`, or another process under its name")


def _private_write(path: Path, content: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".part")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(content, fh)
    os.replace(tmp, path)
