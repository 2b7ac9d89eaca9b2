"""Statistical privacy audits of the mechanisms outside the plugin kinds: DP quantiles and secure aggregation."""
import numpy as np
import pytest

from vertisynth.collab.secure_aggregation import aggregate_at_server, reconstruct, share_counts
from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.encoding import dp_quantiles
from vertisynth.core.privacy import zcdp_to_approx
from vertisynth.testing.audit import NeighbourPair, audit, looped

DOM = Domain(["x"], [10])


def _pair(base_codes, extra):
    base = Dataset(np.asarray(base_codes, dtype=np.int64).reshape(-1, 1), DOM)
    return [NeighbourPair(base, Dataset(np.vstack([base.codes, [[extra]]]), DOM), "add_remove", "one record added")]


def test_dp_median_passes_its_audit_and_an_overclaim_fails():
    eps = 1.0

    def median(data, rng, scale=1.0):
        return dp_quantiles(data.codes[:, 0].astype(float), [0.5], (0.0, 10.0), eps * scale, rng)

    pairs = _pair([2, 2, 3, 7, 8], 9)
    ok = audit(looped(median), pairs, eps, 0.0, n_samples=20_000, seed=7, name="dp median")
    assert ok.passed, ok.message()
    bad = audit(looped(lambda d, r: median(d, r, scale=4.0)), pairs, eps, 0.0, n_samples=20_000, seed=7,
                name="dp median with 4x the epsilon it claims")
    assert not bad.passed


@pytest.mark.slow   # ~15 CPU s: 80,000 looped draws of three quantiles (CI's audit step)
@pytest.mark.audit_cost(15)
def test_dp_quantiles_split_recursively_pass_their_audit_and_an_overclaim_fails():
    """Three quantiles: two recursion levels at ε/2 each over disjoint values (core/encoding.py). The added
    record (9) lands above the median, so it moves the median's draw and then the upper side's."""
    eps = 1.0

    def quartiles(data, rng, scale=1.0):
        return dp_quantiles(data.codes[:, 0].astype(float), [0.25, 0.5, 0.75], (0.0, 10.0), eps * scale, rng)

    pairs = _pair([1, 2, 2, 3, 5, 7, 8, 8], 9)
    ok = audit(looped(quartiles), pairs, eps, 0.0, n_samples=20_000, seed=11, name="dp quartiles")
    assert ok.passed, ok.message()
    bad = audit(looped(lambda d, r: quartiles(d, r, scale=4.0)), pairs, eps, 0.0, n_samples=20_000, seed=11,
                name="dp quartiles with 4x the epsilon they claim")
    assert not bad.passed


def test_secure_aggregation_release_passes_its_audit():
    sigma = 1.0
    rho = 1 / (2 * sigma**2)

    def release(data, rng):
        counts = np.bincount(data.codes[:, 0], minlength=10).astype(np.int64)
        inbox = {0: [], 1: []}
        for name, part in (("a", counts), ("b", np.zeros(10, np.int64))):
            for sh in share_counts(name, "q", part, 2, rng):
                inbox[sh.server].append(sh)
        # what server 0 can see after removing its own noise: the sum plus server 1's noise only
        own = aggregate_at_server(0, inbox[0], 1e-12, rng)
        other = aggregate_at_server(1, inbox[1], sigma, rng)
        return reconstruct([own, other]).astype(float)

    ok = audit(looped(release), _pair([1, 4, 4], 4), zcdp_to_approx(rho, 1e-5), 1e-5, n_samples=8000, seed=3,
               name="secure aggregation, one curious server")
    assert ok.passed, ok.message()
