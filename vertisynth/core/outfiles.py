"""Writing output files safely: whole or not at all, private where they hold real rows, one writer per folder.

- `replace_atomically`: a file is written under a per-process temporary name beside its target and renamed
  over it once complete (os.replace is atomic on one filesystem): a reader, or a second writer, never sees a
  half-written file, and two writers of one name leave one whole file (the last rename wins).
- `private=True` creates the file 0600 (real rows, identifiers, alignments: like the keys), whatever the umask.
- `FolderLock`: one run at a time per output folder. The lock file names its holder (pid, host, start); a
  second run refuses, naming it. A lock whose process is gone (same host) is stale and taken over.
- `check_not_foreign`: a run never overwrites a file it did not write: what it wrote is listed in the
  folder's manifest (`OUTPUTS_MANIFEST`); any other file under a name the run would write is refused by name,
  unless the caller forces it.
"""
from __future__ import annotations

import contextlib
import csv
import datetime
import errno
import json
import os
import secrets
import socket
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from .errors import ConfigError, DataError
from .processes import process_alive

OUTPUTS_MANIFEST = ".vertisynth-outputs.json"   # the files the tool wrote into an output folder
LOCK_FILE = ".vertisynth-run.lock"


def _os_error(path: Path, exc: OSError, what: str = "write") -> DataError:
    return DataError(f"cannot {what} {str(path)!r}: {exc.strerror or exc}")


def temp_name(path: Path, suffix: str = "") -> Path:
    """A name beside `path` that no other process picks (pid and a random token); `suffix` keeps an extension
    a writer insists on (numpy's .npz)."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.part{suffix}")


def make_folder(folder: Path) -> Path:
    """mkdir -p with a one-line error (a path under a file, /proc, no permission)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _os_error(folder, exc, "create the folder") from None
    if not folder.is_dir():
        raise DataError(f"cannot write into {str(folder)!r}: it is not a folder")
    return folder


@contextlib.contextmanager
def replace_atomically(path: str | Path, mode: str = "w", private: bool = False,
                       suffix: str = "") -> Iterator[Any]:
    """Yield (an open file, or with mode "path" the temporary Path to write to) for `path`; on success the
    temporary file replaces `path`; on any error it is removed and `path` is left as it was."""
    path = Path(path)
    make_folder(path.parent)
    tmp = temp_name(path, suffix)
    ok = False
    try:
        if mode == "path":
            yield tmp
            if private and tmp.exists():
                os.chmod(tmp, 0o600)
        else:
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o666)
            except OSError as exc:
                raise _os_error(path, exc) from None
            kw = {} if "b" in mode else {"newline": "", "encoding": "utf-8"}
            with os.fdopen(fd, mode, **kw) as fh:
                try:
                    yield fh
                except OSError as exc:   # a full disk, a quota: one line naming the file
                    raise _os_error(path, exc) from None
        try:
            os.replace(tmp, path)
        except OSError as exc:
            raise _os_error(path, exc) from None
        ok = True
    finally:
        if not ok:
            with contextlib.suppress(OSError):
                tmp.unlink()


def write_text(path: str | Path, text: str, private: bool = False) -> Path:
    with replace_atomically(path, "w", private) as fh:
        fh.write(text)
    return Path(path)


def write_csv(path: str | Path, frame: Any, private: bool = False, **kw: Any) -> Path:
    """A DataFrame as CSV, whole or not at all; `private`: 0600 (real rows, identifiers)."""
    with replace_atomically(path, "w", private) as fh:
        frame.to_csv(fh, index=False, **kw)
    return Path(path)


def write_columns_csv(path: str | Path, columns: Mapping[str, Any], private: bool = False) -> Path:
    """Equal-length numpy columns, int64 or object arrays of str, as the CSV `DataFrame(columns).to_csv(index=
    False)` writes, without pandas: pandas writes such cells as str() and hands the rows to the csv module with
    these dialect settings (minimal quoting, '"' doubled, the platform's line ending). Other columns (floats,
    missing values) are pandas' to format: the caller writes those with `write_csv`."""
    if any(a.dtype != "int64" and a.dtype != object for a in columns.values()):
        raise DataError("write_columns_csv: only int64 columns and columns of str are written without pandas")
    cells = [a.astype(str).tolist() if a.dtype == "int64" else a.tolist() for a in columns.values()]
    with replace_atomically(path, "w", private) as fh:
        writer = csv.writer(fh, lineterminator=os.linesep, quoting=csv.QUOTE_MINIMAL, quotechar='"',
                            doublequote=True, escapechar=None)
        writer.writerow([str(c) for c in columns])
        writer.writerows(zip(*cells))
    return Path(path)


def written_by_tool(folder: Path) -> set[str]:
    try:
        names = json.loads((folder / OUTPUTS_MANIFEST).read_text())
    except (OSError, ValueError):
        return set()
    return {n for n in names if isinstance(n, str)} if isinstance(names, list) else set()


def check_not_foreign(folder: Path, names: Iterable[str], force: bool = False) -> None:
    """Refuse to overwrite a file under one of `names` that the tool did not write (not in the manifest)."""
    if force or not folder.is_dir():
        return
    ours = written_by_tool(folder)
    foreign = [n for n in names if (folder / n).exists() and n not in ours]
    if foreign:
        raise ConfigError(f"{str(folder)!r} already holds {', '.join(foreign)}, not written by a vertisynth run "
                          "(no record of it in the folder's manifest): refusing to overwrite; choose another "
                          "output folder, move the file(s), or pass --force (API: overwrite=True)")


class FolderLock:
    """An exclusive lock on an output folder for one run (see the module docstring)."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.path = self.folder / LOCK_FILE
        self._held = False

    def __enter__(self) -> FolderLock:
        make_folder(self.folder)
        me = {"pid": os.getpid(), "host": socket.gethostname(),
              "start": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        for _ in range(3):
            try:
                self._create(me)
            except FileExistsError:
                holder = self._holder()
                if holder is not None and self._stale(holder):
                    with contextlib.suppress(FileNotFoundError):
                        self.path.unlink()
                    continue
                raise ConfigError(self._busy(holder)) from None
            except OSError as exc:
                raise _os_error(self.path, exc, "lock the output folder with") from None
            self._held = True
            return self
        raise ConfigError(self._busy(self._holder()))

    def _create(self, me: dict[str, Any]) -> None:
        """The lock file, created whole: written beside it, then hard-linked into place (a link fails where the
        name exists, as O_EXCL does), so a second run never reads it empty and can always name its holder. Where
        the file system has no hard links: O_EXCL, then the content (a reader may then see it being written)."""
        tmp = temp_name(self.path)
        tmp.write_text(json.dumps(me))
        try:
            os.link(tmp, self.path)
            return
        except (PermissionError, NotImplementedError):   # FileExistsError propagates: the lock is held
            pass
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV):
                raise
        finally:
            tmp.unlink(missing_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "w") as fh:
            json.dump(me, fh)

    def _holder(self) -> dict[str, Any] | None:
        try:
            holder = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}   # released meanwhile: try again
        except (OSError, ValueError):
            return None   # being written, or not ours to judge: busy
        return holder if isinstance(holder, dict) else None

    @staticmethod
    def _stale(holder: dict[str, Any]) -> bool:
        if not holder:
            return True
        pid = holder.get("pid")
        return holder.get("host") == socket.gethostname() and isinstance(pid, int) and not process_alive(pid)

    def _busy(self, holder: dict[str, Any] | None) -> str:
        who = (f"pid {holder.get('pid')} on {holder.get('host')}, started {holder.get('start')}" if holder else
               "another process")
        return (f"output folder {str(self.folder)!r} is in use by another vertisynth run ({who}; lock file "
                f"{LOCK_FILE}): wait for it to finish or choose another output folder (remove the lock file only "
                "if that run is gone)")

    def __exit__(self, *exc: Any) -> None:
        if self._held:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            self._held = False
