"""What every CLI command does with an expected error (one red line on stderr, exit status 2), and its
progress bar."""
from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import click

from vertisynth.core.errors import VertisynthWarning
from vertisynth.core.progress import reporting


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


@contextlib.contextmanager
def progress_bar(label: str, enabled: bool = True, total: int | None = None) -> Iterator[Any]:
    """A bar on stderr whose first frame already names the work (`label`), and which shows the inner
    progress (`vertisynth.core.progress.step`: mirror-descent iterations, DPFM repetitions, rounds) as its
    postfix. Disabled (`-q`): no bar. Yields the bar (None when disabled)."""
    if not enabled:   # no bar; a reporter installed around this call (an application's own) still hears
        yield None
        return
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc=label, unit="stage" if total else "it", file=sys.stderr, leave=total is not None,
               bar_format="{desc:<28}{bar}| {n_fmt}/{total_fmt} [{elapsed}]{postfix}" if total else
               "{desc:<28}[{elapsed}]{postfix}")
    bar.refresh()   # the first frame, with its label, before any work starts

    def report(inner: str, done: int, of: int) -> None:
        bar.set_postfix_str(f"{inner} {done}/{of}", refresh=False)
        bar.refresh() if total is None else bar.update(0)

    try:
        with reporting(report):
            yield bar
    finally:
        bar.close()
