"""vertisynth.testing: a conformance kit for differentially private components.

  * `audit`      two-phase statistical privacy auditor (empirical ε lower bound, Clopper-Pearson)
  * `strategies` Hypothesis strategies: domains, datasets, neighbouring pairs, partitions, ID sets, budgets
  * `checks`     per-kind conformance checks and `parametrize_with_checks` for pytest
  * `reference`  textbook mechanisms (GRR, Laplace, Gaussian) to calibrate the auditor
  * `plugin`     opt-in pytest plugin: `pytest_plugins = ["vertisynth.testing.plugin"]`

See docs/testing.md. Hypothesis and pytest are needed only by `strategies`, `checks.parametrize_with_checks`
and `plugin` (the `test` extra).
"""
from .audit import (AUDIT_LEVELS, AuditReport, NeighbourPair, PrivacyViolation, audit, claimed_epsilon,
                    epsilon_lower_bound, looped)

__all__ = ["AUDIT_LEVELS", "AuditReport", "NeighbourPair", "PrivacyViolation", "audit", "claimed_epsilon",
           "epsilon_lower_bound", "looped"]
