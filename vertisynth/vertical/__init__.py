"""The measurement protocol across parties: the vertical oracle (`VerticalOracle`), answering the same calls as the
central one (`vertisynth.pgm.oracle`) from each party's own columns and, for a marginal that spans two parties, a
`CrossPartyMeasure` (core/capabilities.py: a protocol per table, e.g. `he`) or a `ReleasesOnce` measure (one release,
every cross-party marginal read off it: `dpfm`, `grr`). docs/vertical.md: who sees what, what each step costs."""
from .config import VerticalConfig, cross_pairs, owners
from .oracle import PartyOracle, VerticalOracle, coarse_bins, party_streams
from .stages import StageOracle

__all__ = ["PartyOracle", "StageOracle", "VerticalConfig", "cross_pairs", "owners", "VerticalOracle", "coarse_bins", "party_streams"]
