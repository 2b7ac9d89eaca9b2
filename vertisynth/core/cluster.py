"""A Dask cluster to map chunks over (`--scheduler tcp://...`, `dask_scheduler = ...`): the client, with clear
errors, for every part that maps work (the encoders' chunk jobs, the party's counting passes, PSI/PSU blinding).
dask.distributed is optional (the `dask` extra) and imported only when a scheduler is configured."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from .errors import ConfigError


def dask_client(scheduler: Any) -> Any:
    """A `distributed.Client` for an address (or the Client given), with clear errors."""
    try:
        from distributed import Client
    except ImportError:
        raise ConfigError("a Dask scheduler is configured but dask.distributed is not installed "
                          "(pip install 'vertisynth[dask]')") from None
    if isinstance(scheduler, Client):
        return scheduler
    try:
        return Client(scheduler, timeout="20s")
    except (OSError, TimeoutError) as exc:
        raise ConfigError(f"cannot reach the Dask scheduler {scheduler!r}: {exc}") from None


@contextlib.contextmanager
def dask_session(scheduler: Any) -> Iterator[Any]:
    """A client for an address (closed afterwards) or the Client given (left open: its owner closes it)."""
    client = dask_client(scheduler)
    try:
        yield client
    finally:
        if client is not scheduler:
            client.close()


def is_client(obj: Any) -> bool:
    """Whether `obj` is a `distributed.Client` (False when dask.distributed is not installed)."""
    try:
        from distributed import Client
    except ImportError:
        return False
    return isinstance(obj, Client)
