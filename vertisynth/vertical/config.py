"""The `vertical` table of a synthesizer that can run across parties: `params = { vertical = { measure = "he",
trust = "none" } }`. Structured from TOML like every component's params (unknown keys refused)."""
from __future__ import annotations

import itertools
from typing import Any

import attrs

from vertisynth.core.errors import ConfigError


@attrs.frozen
class VerticalConfig:
    measure: str = "he"                   # a registered encoder that is a CrossPartyMeasure or ReleasesOnce
    trust: str = "none"                   # the roles that must not collude ("none": no trusted role)
    params: dict[str, Any] = attrs.field(factory=dict)   # the measure's own params (e.g. crypto = "simulated")
    # share of the synthesizer's budget that measures every cross-party pair once, for the selection's scores (None:
    # the synthesizer's default: aim 0.15 of its rounds' ρ, mst 0.6 of its selection third)
    probe: float | None = None
    probe_bins: int = 4     # each attribute of a probe coarsened to at most this many bins (equal noisy 1-way mass)
    group_share: float = 0.5   # share of each selection round that releases every party's noisy best score
    # privmrf under `he`: leave the side of the party whose whole rows the measure sums unbinned in the probes, so
    # they cost no encryption pass of their own; a finer table at the same σ per cell, so noisier selection scores
    # (off by default: it cost privmrf's trust-none twin 1.06 -> 1.12 median over the grid, docs/vertical.md)
    probe_whole_rows: bool = False
    # a measure that releases once (dpfm, grr): the share of the synthesizer's zCDP ρ its one release costs, planned
    # before the synthesizer's own (within-party) charges, which get the rest
    release: float = 0.5

    def __attrs_post_init__(self) -> None:
        if not self.measure:
            raise ConfigError("vertical: measure must name a registered cross-party measure, e.g. \"he\"")
        if self.probe is not None and not 0 < self.probe < 1:
            raise ConfigError(f"vertical: probe must be in (0, 1), got {self.probe}")
        if self.probe_bins < 2:
            raise ConfigError(f"vertical: probe_bins must be >= 2, got {self.probe_bins}")
        if not 0 < self.release < 1:
            raise ConfigError(f"vertical: release must be in (0, 1), got {self.release}")
        if not 0 < self.group_share < 1:
            raise ConfigError(f"vertical: group_share must be in (0, 1), got {self.group_share}")


def owners(synthesizer: str, vertical: VerticalConfig | None, partition: Any) -> dict[str, str]:
    """Which party holds each attribute; a `vertical` table on a run of one party is refused in one line (every
    twin's plan asks this first)."""
    if vertical is not None and len(partition) < 2:
        raise ConfigError(f"{synthesizer}: params.vertical runs across parties, and this run has one party; drop the "
                          "vertical table or list two [[parties]] or more")
    return {a: p.name for p in partition for a in p.attributes}


def cross_pairs(attributes: Any, owner: dict[str, str]) -> list[tuple[str, str]]:
    """The attribute pairs held by two different parties, in combinations order."""
    return [p for p in itertools.combinations(attributes, 2) if owner[p[0]] != owner[p[1]]]
