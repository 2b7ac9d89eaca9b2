"""Whether a process named in a lock or spill marker still runs (one rule for the folder lock, the spills, the
study runner's workers)."""
from __future__ import annotations

import os
from pathlib import Path


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux /proc), to tell a reused pid from the owner;
    None where there is no such process, it is a zombie, or there is no /proc."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()
    return None if not fields or fields[0] == "Z" else fields[19]   # field 22 of stat is starttime


def process_alive(pid: int, started: str | None = None) -> bool:
    """Whether `pid` runs: a zombie (killed, not yet reaped) counts as gone, and so does a pid now naming a process
    that started later than `started` (a reused pid)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # it exists, under another user
        return True
    if Path("/proc").is_dir():
        now = start_time(pid)
        return now is not None and (started is None or now == started)
    return True   # no /proc (not Linux): os.kill said it exists
