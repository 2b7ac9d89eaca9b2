"""The audit's phase 2 maps only the views its chosen events read (issue 33, the audit step's CPU): a feature map
that no chosen event reads is not run on the 10⁶ phase-2 outputs, and skipping it changes no count or verdict."""
import math

import numpy as np

from vertisynth.pgm.oracle import _same_rho
from vertisynth.testing.audit import audit
from vertisynth.testing.features import answer_features
from vertisynth.testing.zoo import SparseVector, benchmark_cases


class _CountedFeatures:
    """Roth's Sparse Vector, its feature map counting the outputs it maps."""

    def __init__(self):
        self.mech = SparseVector(0.7, 3, threshold=0.5)
        self.rows = 0

    def sample(self, q, n, rng):
        return self.mech.sample(q, n, rng)

    def features(self, outputs):
        self.rows += len(outputs)
        return self.mech.features(outputs)


def test_phase_two_maps_no_features_that_no_chosen_event_reads():
    (case,) = [c for c in benchmark_cases(0.7, k=10) if isinstance(c.mechanism, SparseVector)
               and c.mechanism.variant == 3]
    pair = case.pairs[0]
    m, n = 2000, 8000
    counted = _CountedFeatures()
    # without learned events only the built-in events (on the outputs themselves) are chosen: the feature map runs
    # on phase 1 (m a side) and never on phase 2's n a side (it ran on both before)
    no_learned = audit(counted, [pair], epsilon=0.7, n_samples=n, selection_samples=m, seed=3, learned=False)
    assert counted.rows == 2 * m
    plain = audit(counted.mech, [pair], epsilon=0.7, n_samples=n, selection_samples=m, seed=3, learned=False)
    assert [(r.event, r.k1, r.k2) for r in no_learned.results] == [(r.event, r.k1, r.k2) for r in plain.results]
    # with a learned event chosen, phase 2 maps its outputs
    counted.rows = 0
    learned = audit(counted, [pair], epsilon=0.7, n_samples=n, selection_samples=m, seed=3)
    if "learned" in learned.results[0].event:
        assert counted.rows == 2 * (m + n)


def test_roth_outputs_are_codes_then_values_and_their_features_are_the_definition():
    """The zoo's Roth sampler writes codes and values into one array: the codes as numbers, a value only where ⊤."""
    q = np.array([0.0, 1.0, 0.0, 2.0, 0.0])
    out = SparseVector(0.7, 3, threshold=0.5, cutoff=1).sample(q, 4000, np.random.default_rng(1))
    codes, values = out[:, :5], out[:, 5:]
    assert out.dtype == float and out.shape == (4000, 10)
    assert np.all((values != 0) == (codes == 1))
    assert np.all((codes == 1).sum(1) <= 1)   # cutoff 1: at most one ⊤ an output
    assert np.array_equal(answer_features(codes.astype(np.int64), values),
                          SparseVector(0.7, 3, threshold=0.5).features(out))


def test_the_oracle_s_rho_check_is_numpy_isclose_on_scalars():
    vals = [0.0, -0.0, 1.0, 1 + 1e-12, 1 + 2e-12, 1 - 1e-12, 5e-324, math.inf, -math.inf, math.nan, 0.5]
    rng = np.random.default_rng(0)
    base = rng.random(20)
    vals += list(base) + list(base * (1 + rng.choice([0.99e-12, 1e-12, 1.01e-12, 3e-12], 20)))
    for a in vals:
        for b in vals:
            assert _same_rho(a, b) == bool(np.isclose(a, b, rtol=1e-12, atol=0.0)), (a, b)
