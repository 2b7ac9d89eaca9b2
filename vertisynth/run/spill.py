"""Where streamed runs keep the parties' coded rows between passes (CodeSpill): one private root per user,
`$VERTISYNTH_SPILL_DIR` or <system temp>/vertisynth-spill-<uid> (0700, refused if another user owns it or it
is a link), one folder per spill in it (0700; files 0600), each marked with its owner's pid, host and
process start time. A SIGKILLed run cannot remove its folder, so every new spill made on this host sweeps
every folder whose owner is dead (or whose pid now names another process): coded rows of a killed run stay
only until the next streamed run, and never where another user can read them."""
from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import tempfile
import time
from pathlib import Path

from vertisynth.core.errors import ConfigError
from vertisynth.core.processes import process_alive, start_time

OWNER = "owner.json"
ORPHAN_AGE = 600.0   # seconds: a folder that never got its owner file (killed in between) is an orphan after this


def spill_root() -> Path:
    env = os.environ.get("VERTISYNTH_SPILL_DIR")
    uid = os.getuid() if hasattr(os, "getuid") else 0
    root = Path(env) if env else Path(tempfile.gettempdir()) / f"vertisynth-spill-{uid}"
    try:
        root.mkdir(mode=0o700, parents=bool(env), exist_ok=True)
        st = os.lstat(root)
    except OSError as exc:
        raise ConfigError(f"cannot make the private spill folder {str(root)!r}: {exc.strerror}; set "
                          "VERTISYNTH_SPILL_DIR to a folder only you can write") from None
    if not stat.S_ISDIR(st.st_mode) or (hasattr(os, "getuid") and st.st_uid != uid):
        raise ConfigError(f"the spill folder {str(root)!r} is not a folder of yours (a link, or another user's): "
                          "coded rows will not go there; remove it or set VERTISYNTH_SPILL_DIR")
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(root, 0o700)
    return root


def new_spill_folder(prefix: str) -> Path:
    """A fresh private folder for one spill, marked with this process as its owner; sweeps dead owners' first
    (every time: a long-lived process, a SuperNode say, outlives the runs killed beside it; a sweep is a
    listing of a few folders)."""
    root = spill_root()
    sweep(root)
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=root))   # 0700
    hand_to(folder, os.getpid())
    return folder


def hand_to(folder: Path, pid: int) -> None:
    """Mark the spill `folder` as process `pid`'s (a forked party process hands its spill to its parent before
    it exits, so no sweep takes it for an orphan). Written whole and renamed into place: a reader never sees a
    half-written mark."""
    mark = {"pid": pid, "host": socket.gethostname(), "started": start_time(pid)}
    tmp = folder / (OWNER + ".new")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(mark, fh)
    os.replace(tmp, folder / OWNER)


def private_file(path: Path):
    """A new file only its owner reads (0600), opened for binary writing."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb")


def sweep(root: Path | None = None) -> list[Path]:
    """Remove the spill folders under `root` whose owner process on this host is gone; the removed folders."""
    root = spill_root() if root is None else root
    host, gone = socket.gethostname(), []
    for folder in root.iterdir():
        if not folder.is_dir() or folder.is_symlink():
            continue
        try:
            mark = json.loads((folder / OWNER).read_text())
            dead = mark.get("host") == host and not process_alive(int(mark["pid"]), mark.get("started"))
        except FileNotFoundError:
            try:
                dead = time.time() - folder.stat().st_mtime > ORPHAN_AGE
            except OSError:
                continue
        except (OSError, ValueError, KeyError, TypeError):
            continue   # unreadable or not ours to judge: left alone
        if dead:
            shutil.rmtree(folder, ignore_errors=True)
            gone.append(folder)
    return gone
