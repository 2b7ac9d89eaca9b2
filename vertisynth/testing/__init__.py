"""vertisynth.testing: a conformance kit for differentially private components.

  * `audit`      two-phase statistical privacy auditor (empirical ε lower bound, Clopper-Pearson), with
                 user events/summaries, learned (classifier) events and claims on a privacy curve
  * `strategies` Hypothesis strategies: domains, datasets, neighbouring pairs, partitions, ID sets, budgets,
                 query-level neighbours (StatDP's patterns, random ±1 moves)
  * `features`   feature maps for structured outputs (variable-length answer sequences)
  * `zoo`        correct and incorrect mechanisms of the DP-testing literature (Noisy Max, Sparse Vector, ...)
  * `power`      the best bound any event could give on known output distributions (what n samples can catch)
  * `checks`     per-kind conformance checks and `parametrize_with_checks` for pytest
  * `reference`  textbook mechanisms (GRR, Laplace, Gaussian) to calibrate the auditor
  * `plugin`     opt-in pytest plugin: `pytest_plugins = ["vertisynth.testing.plugin"]`

See docs/testing.md. Hypothesis and pytest are needed only by `strategies`, `checks.parametrize_with_checks`
and `plugin` (the `test` extra).
"""
from .audit import (AUDIT_LEVELS, AuditReport, GaussianNoise, NeighbourPair, PrivacyViolation, audit,
                    claimed_epsilon, curve_claims, epsilon_lower_bound, gaussian_claims, looped)

__all__ = ["AUDIT_LEVELS", "AuditReport", "GaussianNoise", "NeighbourPair", "PrivacyViolation", "audit",
           "claimed_epsilon", "curve_claims", "epsilon_lower_bound", "gaussian_claims", "looped"]
