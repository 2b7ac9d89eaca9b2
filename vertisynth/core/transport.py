"""How envelopes travel between roles, the deploy roles and the collab roles alike (so it lives in the kernel): a
folder (shared, synced or mounted) or an object store / SFTP drop box through fsspec (`--exchange s3://...`,
`sftp://...`; docs/network.md). Every transport implements the same three calls, `send`, `names` and `read`;
the receive and the envelope checks (core/courier.py, for deploy's Session and collab's Channel) work unchanged on
top of them."""
from __future__ import annotations

import contextlib
import fnmatch
import os
from pathlib import Path
import json
from typing import Protocol, runtime_checkable
from urllib.parse import urlsplit

from vertisynth.core.errors import ConfigError, MessageError


class Transport(Protocol):
    def send(self, name: str, data: bytes) -> None:
        """Deliver one envelope under a unique name; refuse a name already sent (a duplicate)."""

    def names(self, pattern: str) -> list[str]:
        """The names of delivered envelopes matching a glob pattern, sorted."""

    def read(self, name: str) -> bytes: ...


@runtime_checkable
class ReportsWaiting(Protocol):
    def waiting(self, what: str) -> None:
        """Called by a role that listed the exchange, found too few envelopes and is about to wait."""


@runtime_checkable
class ThrottlesPolls(Protocol):
    """A transport each of whose polls costs (it lists a remote store: a paid LIST on S3): a role waiting for
    envelopes lists it at most once every `min_poll` seconds."""

    min_poll: float


def poll_wait(transport: object, poll: float) -> float:
    """The seconds between two polls of `transport`: `poll`, or the transport's floor if it declares a longer one."""
    return max(poll, transport.min_poll) if isinstance(transport, ThrottlesPolls) else poll


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


class RelayFolderTransport(FolderTransport):
    """A private folder that a relay fills (`relay:///path`; the Flower bridge, deploy/flower/bridge.py). The relay
    writes what arrived, then bumps `.generation`; a role that lists the folder, finds too few envelopes and waits
    records in `.waiting` the generation it listed under. So the relay can tell a role blocked on envelopes it does
    not hold yet from one that is still busy, without guessing from timings."""

    GENERATION, WAITING = ".generation", ".waiting"

    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        self._listed_under = -1

    def names(self, pattern: str) -> list[str]:
        self._listed_under = read_generation(self.folder)   # before listing: what we see is at least this
        return super().names(pattern)

    def waiting(self, what: str) -> None:
        tmp = self.folder / f".waiting.{os.getpid()}.part"
        tmp.write_text(json.dumps({"generation": self._listed_under, "what": what}))
        os.replace(tmp, self.folder / self.WAITING)


def read_generation(folder: Path) -> int:
    try:
        return int((folder / RelayFolderTransport.GENERATION).read_text())
    except (FileNotFoundError, ValueError):
        return 0


class FsspecTransport:
    """Envelopes in an fsspec store (`file://`, `sftp://`, `s3://`, `gcs://`, `abfs://`). Stores cannot rename
    atomically, so a sender writes `<name>.env` and then an empty `<name>.env.done` marker; readers list only names
    whose marker exists. Each sender writes under its own prefix `<url>/<sender>/`, so a store's access rules can
    give every party write access to its own prefix only (and read access to the rest)."""

    SUFFIX, MARKER = ".env", ".env.done"

    def __init__(self, url: str) -> None:
        try:
            import fsspec
        except ImportError:
            raise ConfigError(f"--exchange {url!r} needs fsspec: pip install 'vertisynth[remote]'") from None
        self.url = url
        try:
            self.fs, root = fsspec.core.url_to_fs(url)
        except (ImportError, ValueError) as exc:   # unknown scheme, or its backend (s3fs, gcsfs, adlfs) missing
            raise ConfigError(f"--exchange {url!r}: {exc}") from None
        except store_failures() as exc:   # e.g. the SFTP server is unreachable or refuses our key
            raise MessageError(f"--exchange {url!r}: cannot connect: {exc or type(exc).__name__}") from None
        self.root = root.rstrip("/")
        self.min_poll = 0.0 if "file" in self.fs.protocol else 0.2   # each poll lists the store (paid on S3)
        if "sftp" in self.fs.protocol:
            check_sftp_host_key(self.fs, url)

    def __str__(self) -> str:
        return self.url

    def _path(self, name: str, suffix: str) -> str:
        sender = name.split("__")[1] if name.count("__") >= 1 else ""
        return "/".join(p for p in (self.root, sender, name + suffix) if p)

    def send(self, name: str, data: bytes) -> None:
        with self._failures(f"sending {name}"):
            self._send(name, data)

    def names(self, pattern: str) -> list[str]:
        with self._failures("listing"):
            return self._names(pattern)

    def read(self, name: str) -> bytes:
        with self._failures(f"reading {name}"):
            return self._read(name)

    @contextlib.contextmanager
    def _failures(self, what: str):
        """A store that fails mid-run (connection lost, access denied) is one clear error, not a traceback."""
        try:
            yield
        except MessageError:
            raise
        except store_failures() as exc:
            raise MessageError(f"exchange {self.url!r}: {what} failed: {exc or type(exc).__name__}") from None

    def _send(self, name: str, data: bytes) -> None:
        env, done = self._path(name, self.SUFFIX), self._path(name, self.MARKER)
        if self.fs.exists(env) or self.fs.exists(done):
            raise MessageError(f"exchange {self.url!r} already holds {name}{self.SUFFIX} (a reused exchange or a "
                               "second run of this step); use a fresh exchange for every run")
        self._makedirs(env.rsplit("/", 1)[0])
        with self.fs.open(env, "wb") as fh:      # closed (flushed to the store) before the marker appears
            fh.write(data)
        with self.fs.open(done, "wb"):
            pass

    def _makedirs(self, folder: str) -> None:
        """`folder` and its parents, while another party may create the same parents at the same moment: fsspec's
        sftp makedirs checks, then creates, so two parties starting together raced on the exchange root (seen)."""
        for attempt in range(3):
            try:
                self.fs.makedirs(folder, exist_ok=True)
                return
            except store_failures():
                if self.fs.isdir(folder):
                    return
                if attempt == 2:
                    raise
                # else the other's mkdir of a shared parent won the race: go on from there

    def _names(self, pattern: str) -> list[str]:
        self.fs.invalidate_cache()               # stores that cache listings (s3fs) would hide new envelopes
        # a pattern naming its sender lists that sender's prefix only: one LIST, not one per sender (a role
        # waiting on one message polls the store many times per round)
        sender = pattern.split("__")[1] if pattern.count("__") >= 1 else ""
        folder = self.root if not sender or any(c in sender for c in "*?[") else f"{self.root}/{sender}"
        if not self.fs.exists(folder):
            return []
        found = [p.rsplit("/", 1)[-1][:-len(self.MARKER)] for p in self.fs.find(folder)
                 if p.endswith(self.MARKER)]
        return sorted(n for n in found if fnmatch.fnmatchcase(n, pattern))

    def _read(self, name: str) -> bytes:
        try:
            return self.fs.cat_file(self._path(name, self.SUFFIX))
        except FileNotFoundError:
            raise MessageError(f"exchange {self.url!r}: {name} has a marker but no envelope; refused") from None


def store_failures() -> tuple[type[BaseException], ...]:
    """What a store raises when it fails: OS errors, a closed connection, SSH errors (auth refused, ...), botocore's
    (s3fs turns S3's refusals into OSErrors but lets an unreachable endpoint through as EndpointConnectionError)."""
    failures: tuple[type[BaseException], ...] = (OSError, EOFError)
    try:
        from paramiko import SSHException
        failures += (SSHException,)
    except ImportError:
        pass
    try:
        from botocore.exceptions import BotoCoreError
        failures += (BotoCoreError,)
    except ImportError:
        pass
    return failures


def check_sftp_host_key(fs, url: str) -> None:
    """Refuse an SFTP server whose host key is not in known_hosts (fsspec itself accepts any key on first use).
    Authentication was by public key, which a man in the middle cannot relay; no file has moved yet."""
    import paramiko
    known = Path(os.environ.get("VERTISYNTH_KNOWN_HOSTS", "~/.ssh/known_hosts")).expanduser()
    parts = urlsplit(url)
    host = parts.hostname or ""
    entry = host if parts.port in (None, 22) else f"[{host}]:{parts.port}"
    key = fs.client.get_transport().get_remote_server_key()
    keys = paramiko.HostKeys(str(known)) if known.is_file() else paramiko.HostKeys()
    if not keys.check(entry, key):
        raise MessageError(f"--exchange {url!r}: the server's {key.get_name()} host key is not in {str(known)!r} "
                           f"(set VERTISYNTH_KNOWN_HOSTS); check its fingerprint, then add it "
                           f"(ssh-keyscan -p {parts.port or 22} {host} >> {known}); refused")


def local_folder(exchange: str | Path) -> Path | None:
    """The local folder an exchange lives in (a plain path or `file://`), None for a remote store."""
    text = str(exchange)
    if "://" not in text:
        return Path(text)
    if text.startswith(RELAY):
        return Path(text[len(RELAY):])
    parts = urlsplit(text)
    return Path(parts.path) if parts.scheme in ("file", "local") else None


RELAY = "relay://"


def transport_for(exchange: str | Path) -> Transport:
    """`--exchange`: a plain path is a folder; `relay:///path` a folder a relay fills (the Flower runtime); a URL
    with another scheme (file://, sftp://, s3://, ...) goes to fsspec."""
    text = str(exchange)
    if text.startswith(RELAY):
        return RelayFolderTransport(Path(text[len(RELAY):]))
    return FsspecTransport(text) if "://" in text else FolderTransport(Path(text))
