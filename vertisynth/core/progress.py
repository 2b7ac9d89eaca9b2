"""Inner progress (mirror-descent iterations, DPFM repetitions, alignment rounds, collab rounds) without
threading a callback through every signature.

A long loop calls `step("mirror descent", i, total)`; whoever wants to show progress installs a reporter for
the duration of a run with `reporting(fn)` (the CLI's bar, `synthesize(progress=True)`). Without one, `step`
is a no-op costing one context-variable lookup, so library code and tests pay nothing. The reporter is held in
a `contextvars.ContextVar`: threads and asyncio tasks started elsewhere do not write into another run's bar.
"""
from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator

Reporter = Callable[[str, int, int], None]   # (label, done, total)

_REPORTER: contextvars.ContextVar[Reporter | None] = contextvars.ContextVar("vertisynth_progress", default=None)


def step(label: str, done: int, total: int) -> None:
    """Report that `done` of `total` units of the inner task `label` are finished."""
    reporter = _REPORTER.get()
    if reporter is not None:
        reporter(label, done, total)


@contextlib.contextmanager
def reporting(reporter: Reporter | None) -> Iterator[None]:
    """Send every `step` inside the block to `reporter` (None: silence)."""
    token = _REPORTER.set(reporter)
    try:
        yield
    finally:
        _REPORTER.reset(token)
