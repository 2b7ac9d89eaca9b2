"""VertiMRF (seed 003): pieces that exist so far — dimension reduction and histogram recovery (§6.1)."""
