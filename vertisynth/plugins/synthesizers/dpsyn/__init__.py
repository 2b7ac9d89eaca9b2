"""DPSyn: noisy 2-way marginals, consistency post-processing, gradual-update record synthesis."""
