"""What every CLI command does with an expected error (one red line on stderr, exit status 2), and its
progress bar."""
from __future__ import annotations

import contextlib
import sys
import time
import warnings
from collections.abc import Iterator
from typing import Any

import click

from vertisynth.core.errors import VertisynthWarning
from vertisynth.core.progress import reporting


def is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):   # a closed or file-like stream without isatty
        return False


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


class PlainProgress:
    """The bar's stand-in when stderr is not a terminal (a log file, CI, a pipe): one plain line per stage,
    per first report of an inner step and then at most one every PLAIN_EVERY seconds, instead of frames
    joined by carriage returns. The same methods as the tqdm bar the pipeline drives."""

    PLAIN_EVERY = 10.0

    def __init__(self, label: str, total: int | None = None, initial: int = 0, file: Any = None,
                 line_per_update: bool = False) -> None:
        """`line_per_update`: a bar of items (study cells), a line each; else of stages, a line per stage."""
        self.desc, self.total, self.n, self.file = label, total, initial, file or sys.stderr
        self.line_per_update = line_per_update
        self.t0 = self._last = time.monotonic()
        self._inner: set[str] = set()
        self._line()

    def _line(self, extra: str = "") -> None:
        count = f"{self.n}/{self.total}, " if self.total else ""
        print(f"{self.desc} [{count}{time.monotonic() - self.t0:.0f}s]{extra}", file=self.file, flush=True)
        self._last = time.monotonic()

    def set_description(self, desc: str) -> None:
        if desc != self.desc:
            self.desc = desc
            self._line()

    def update(self, k: int = 1) -> None:
        self.n += k
        if self.line_per_update and k:
            self._line()

    def inner(self, label: str, done: int, of: int) -> None:
        if label not in self._inner or done == of or time.monotonic() - self._last >= self.PLAIN_EVERY:
            self._inner.add(label)
            self._line(f" {label} {done}/{of}")

    def close(self) -> None:
        self._line(" done")


@contextlib.contextmanager
def progress_bar(label: str, enabled: bool = True, total: int | None = None) -> Iterator[Any]:
    """A bar on stderr whose first frame already names the work (`label`), and which shows the inner
    progress (`vertisynth.core.progress.step`: mirror-descent iterations, DPFM repetitions, rounds) as its
    postfix; plain lines (`PlainProgress`) when stderr is not a terminal. Disabled (`-q`): no bar. Yields the
    bar (None when disabled)."""
    if not enabled:   # no bar; a reporter installed around this call (an application's own) still hears
        yield None
        return
    if not is_terminal(sys.stderr):
        plain = PlainProgress(label, total)
        try:
            with reporting(plain.inner):
                yield plain
        finally:
            plain.close()
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
