"""The `vertical` table of a synthesizer that can run across parties: `params = { vertical = { measure = "he",
trust = "none" } }`. Structured from TOML like every component's params (unknown keys refused)."""
from __future__ import annotations

from typing import Any

import attrs

from vertisynth.core.errors import ConfigError


@attrs.frozen
class VerticalConfig:
    measure: str = "he"                   # a registered encoder that is a CrossPartyMeasure
    trust: str = "none"                   # the roles that must not collude ("none": no trusted role)
    params: dict[str, Any] = attrs.field(factory=dict)   # the measure's own params (e.g. crypto = "simulated")
    probe: float = 0.1      # share of the synthesizer's selection budget that measures the cross-party candidates once
    group_share: float = 0.5   # share of each selection round that releases every party's noisy best score

    def __attrs_post_init__(self) -> None:
        if not self.measure:
            raise ConfigError("vertical: measure must name a registered cross-party measure, e.g. \"he\"")
        if not 0 < self.probe < 1:
            raise ConfigError(f"vertical: probe must be in (0, 1), got {self.probe}")
        if not 0 < self.group_share < 1:
            raise ConfigError(f"vertical: group_share must be in (0, 1), got {self.group_share}")
