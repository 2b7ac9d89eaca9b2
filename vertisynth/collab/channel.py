"""The collab roles' files in signed envelopes (core/envelope.py): every custodian, server and publisher signs
what it writes with its roster key, and every reader checks sender, signature, run id, config fingerprint and
the file's slot (its path in the exchange folder: a message copied to another slot or run is refused).

The run id is the hash of the config fingerprint and a fresh nonce in every custodian's hello, so a file from an
earlier run in a reused folder never verifies."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import attrs

from vertisynth.core.envelope import Expect, canonical, open_envelope, seal
from vertisynth.core.errors import MessageError
from vertisynth.core.identity import Identity, Roster
from vertisynth.core.messages import Message

PUBLISHER = "publisher"


def server_name(index: int) -> str:
    return f"server{index}"


def collab_run_id(config_fp: str, nonces: dict[str, str]) -> str:
    return hashlib.sha256(canonical({"collab": config_fp, "nonces": dict(sorted(nonces.items()))})).hexdigest()[:32]


@attrs.define
class Channel:
    identity: Identity
    roster: Roster
    root: Path          # the exchange folder
    config: str         # the config fingerprint every role shares
    run: str = ""       # set once every custodian's hello is in

    @property
    def me(self) -> str:
        return self.identity.name

    def _slot(self, path: Path) -> str:
        return Path(path).resolve().relative_to(self.root.resolve()).as_posix()

    def post(self, msg: Message, path: Path, to: list[str]) -> Path:
        """Seal `msg` for `to` and write it to `path` atomically; a file already there is never replaced."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = seal(self.identity, self.run, self.config, to, self._slot(path), msg.kind, msg.to_bytes())
        tmp = path.parent / f".{path.name}.{os.getpid()}.part"
        tmp.write_bytes(data)
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise MessageError(f"{path.name} already exists in {str(path.parent)!r} (a reused exchange folder or a "
                               "duplicate); use a fresh folder for every run") from None
        finally:
            tmp.unlink()
        return path

    def load(self, cls: type[Message], path: Path, sender: str, hello: bool = False) -> Message:
        """The message in `path`, after every check; it must come from `sender`."""
        path = Path(path)
        expect = None if hello else Expect(self.run, self.config, self.me, (self._slot(path),))
        header, body = open_envelope(path.read_bytes(), self.roster, expect, path.name)
        if header.sender != sender:
            raise MessageError(f"{path.name}: from {header.sender!r} where {sender!r}'s message belongs; refused")
        if hello and header.round != self._slot(path):
            raise MessageError(f"{path.name}: from {sender!r}: a hello written for slot {header.round!r}; refused")
        msg = cls.from_bytes(body, path)
        if msg.party != sender:
            raise MessageError(f"{path.name}: from {sender!r} but holds a message of {msg.party!r}; refused")
        return msg
