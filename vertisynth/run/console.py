"""What every CLI command does with an expected error: one red line on stderr, exit status 2."""
from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Iterator

import click

from vertisynth.core.errors import VertisynthWarning


def fail(exc: Exception) -> None:
    click.secho(f"error: {exc}", fg="red", err=True)
    sys.exit(2)


@contextlib.contextmanager
def warnings_as_lines() -> Iterator[None]:
    """vertisynth's own warnings (an inferred schema, no cross-party edge) as one yellow `warning:` line each on
    stderr, when they happen, instead of Python's file:line format; other warnings pass through unchanged."""
    with warnings.catch_warnings():
        warnings.simplefilter("always", VertisynthWarning)
        seen: set[str] = set()
        plain = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):  # type: ignore[no-untyped-def]
            if not issubclass(category, VertisynthWarning):
                plain(message, category, filename, lineno, file, line)
            elif str(message) not in seen:
                seen.add(str(message))
                click.secho(f"warning: {message}", fg="yellow", err=True)

        warnings.showwarning = show
        yield
