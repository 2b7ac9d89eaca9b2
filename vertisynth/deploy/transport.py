"""How envelopes travel between roles. Today a folder (shared, synced or mounted); another transport (issue 19)
implements the same three calls: `send`, `names` and `read`, and `receive` works unchanged on top of it."""
from __future__ import annotations

import fnmatch
import os
import time
from pathlib import Path
from typing import Protocol

from vertisynth.core.errors import MessageError


class Transport(Protocol):
    def send(self, name: str, data: bytes) -> None:
        """Deliver one envelope under a unique name; refuse a name already sent (a duplicate)."""

    def names(self, pattern: str) -> list[str]:
        """The names of delivered envelopes matching a glob pattern, sorted."""

    def read(self, name: str) -> bytes: ...


class FolderTransport:
    """Envelopes as files `<name>.env` in one folder, written atomically (temp file + rename)."""

    SUFFIX = ".env"

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def __str__(self) -> str:
        return str(self.folder)

    def send(self, name: str, data: bytes) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        final = self.folder / (name + self.SUFFIX)
        if final.exists():
            raise MessageError(f"exchange folder {str(self.folder)!r} already holds {final.name} (a reused exchange "
                               "folder or a second run of this step); use a fresh folder for every run")
        tmp = self.folder / f".{name}.{os.getpid()}.part"
        tmp.write_bytes(data)
        try:
            os.link(tmp, final)          # atomic, and fails if another writer got there first
        except FileExistsError:
            raise MessageError(f"exchange folder {str(self.folder)!r} already holds {final.name} (a duplicate); "
                               "refused") from None
        finally:
            tmp.unlink()

    def names(self, pattern: str) -> list[str]:
        if not self.folder.is_dir():
            return []
        return sorted(p.name[:-len(self.SUFFIX)] for p in self.folder.iterdir()
                      if p.name.endswith(self.SUFFIX) and fnmatch.fnmatchcase(p.name[:-len(self.SUFFIX)], pattern))

    def read(self, name: str) -> bytes:
        return (self.folder / (name + self.SUFFIX)).read_bytes()


def receive(transport: Transport, pattern: str, want: int, what: str, timeout: float, poll: float = 0.05) -> list[str]:
    """The names matching `pattern` once there are at least `want`; a clear error after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        found = transport.names(pattern)
        if len(found) >= want:
            return found
        if time.monotonic() > deadline:
            raise MessageError(f"waited {timeout:.0f} s for {what} in {transport}, found {len(found)} of {want}; "
                               "is another party down?")
        time.sleep(poll)
