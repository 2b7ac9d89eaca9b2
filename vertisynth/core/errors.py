"""One exception hierarchy, so users can catch `VertisynthError` and see a message, not a numpy traceback."""
from __future__ import annotations

import difflib
from collections.abc import Iterable


class VertisynthError(Exception):
    """Base class of every error vertisynth raises on purpose."""


class ConfigError(VertisynthError):
    """A config file or component parameter is malformed (unknown key, wrong type, bad value)."""


class DomainError(VertisynthError):
    """Data does not agree with its declared domain (unknown attribute, value out of range)."""


class DataError(VertisynthError):
    """Input data cannot be used as given (missing values, empty table, unaligned parties)."""


class BudgetError(VertisynthError):
    """A privacy budget is invalid, or a plan or a spend exceeds it."""


class PluginError(VertisynthError):
    """A plugin is unknown, broken, duplicated or declares a misspelt hook."""


class MessageError(VertisynthError):
    """A message between a party and the server is malformed, truncated or inconsistent."""


class EstimationError(VertisynthError):
    """A model fit went numerically wrong (a non-finite loss or model): refused rather than sampled from."""


def suggest(name: str, choices: Iterable[str]) -> str:
    """' (did you mean 'x'?)' when a close match exists, else ''."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def choices_text(choices: Iterable[str]) -> str:
    items = sorted(choices)
    return ", ".join(repr(c) for c in items) if items else "(none)"


class VertisynthWarning(UserWarning):
    """Base class of the warnings vertisynth gives (something ran, but you should know this)."""


class InferredSchemaWarning(VertisynthWarning):
    """The schema (categories, ranges) was read off the data: it is not covered by the DP guarantee."""


class NoCrossPartyWarning(VertisynthWarning):
    """The synthesizer's model has no cross-party edge: the parties' columns come out independent."""


class SchemaColumnsWarning(VertisynthWarning):
    """A table holds columns its public schema does not: they are left out, as a run leaves them out."""
