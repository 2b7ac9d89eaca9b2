"""The kit on the classic benchmark (vertisynth.testing.zoo): every incorrect mechanism is caught at the
default level (α = 1e-6, 1e5 samples per side per pair, fixed seed), every correct one passes.
The same cases and settings as benchmarks/dp_kit.py; the measured table is in docs/testing.md."""
import numpy as np
import pytest

from vertisynth.core.errors import ConfigError
from vertisynth.testing.audit import AUDIT_LEVELS, audit
from vertisynth.testing.zoo import (SVT_VARIANTS, NoisyHistogram, NoisyMax, SparseVector, benchmark_cases,
                                    classic_gaussian_sigma)

SEED = 0


def _cases(epsilon):
    # Alg. 2 at c = 1 draws Alg. 1's very samples (test_dwork_roth_at_cutoff_1_draws_lyu_s_samples): its audit would
    # repeat Alg. 1's, so it is audited once; the slow ε = 1.5 verdicts audit it on its own.
    # The Sparse Vector verdicts (≈ 10 CPU s each: 8 pairs, two classifiers per pair) are `slow`: CI's audit step
    # (`pytest -m slow -k "audit or test_kit"`) runs them at these very settings; the default run keeps the cheap
    # cases here and catches Roth's Sparse Vector at `standard` in test_kit_events_and_curves.py
    return [pytest.param(c, id=c.name, marks=[pytest.mark.slow, pytest.mark.audit_cost(10)]
                         if isinstance(c.mechanism, SparseVector) else [])
            for c in benchmark_cases(epsilon, k=10)
            if not (isinstance(c.mechanism, SparseVector) and c.mechanism.variant == 2 and c.mechanism.cutoff == 1)]


def test_dwork_roth_at_cutoff_1_draws_lyu_s_samples():
    """Dwork & Roth's Sparse Vector (Alg. 2) resamples the threshold noise after each ⊤; with the benchmark's
    cutoff c = 1 the first ⊤ ends the run, so it draws exactly Lyu et al.'s Alg. 1 (same scales at c = 1): same
    outputs, from the fresh generator `audit` gives each of its sample calls, at the standard level's selection and
    test sizes on every pair: the same audit and verdict as Alg. 1's case above."""
    svt = {c.mechanism.variant: c for c in benchmark_cases(0.7, k=10) if isinstance(c.mechanism, SparseVector)}
    one, two = svt[1], svt[2]
    assert one.truly_dp and two.truly_dp and two.mechanism.cutoff == 1 and len(one.pairs) == len(two.pairs) == 8
    for p, q in zip(one.pairs, two.pairs):
        assert np.array_equal(p.base, q.base) and np.array_equal(p.neighbour, q.neighbour)
        for data in (p.base, p.neighbour):
            for n in (AUDIT_LEVELS["standard"] // 4, AUDIT_LEVELS["standard"]):   # audit: a fresh generator a call
                assert np.array_equal(one.mechanism.sample(data, n, np.random.default_rng(n)),
                                      two.mechanism.sample(data, n, np.random.default_rng(n)))


def _check(case):
    report = audit(case.mechanism, list(case.pairs), level="standard", seed=SEED)
    if case.truly_dp:
        assert report.passed, report.message()
    else:
        assert not report.passed, f"{case.name} (not DP) passed: {report.message()}"
    return report


@pytest.mark.parametrize("case", _cases(0.7))
def test_benchmark_verdicts_at_the_default_level(case):
    report = _check(case)
    if isinstance(case.mechanism, SparseVector) and case.mechanism.variant == 3:
        # Roth's is caught by the learned event on its feature map; the built-in events alone miss it
        # (test_kit_events_and_curves.py::test_learned_event_catches_roth_sparse_vector_the_built_in_events_miss)
        assert "learned score" in report.violations[0].event, report.message()


# One test per case (CI's audit step runs them on two workers, longest first), the same audits as the loops they
# were. `audit_cost`: CPU s, docs/testing.md's benchmark table (7-11.5 s a Sparse Vector verdict at `standard`,
# under 1.5 s the others; the marks were 60 and 15, which ranked these ahead of audits several times longer).
@pytest.mark.slow
@pytest.mark.parametrize("case", [pytest.param(c, id=f"1.5-{c.name}",
                                               marks=pytest.mark.audit_cost(10 if isinstance(c.mechanism, SparseVector)
                                                                            else 1))
                                  for c in benchmark_cases(1.5, k=10, gaussian=False)])
def test_benchmark_verdicts_at_a_larger_epsilon(case):
    _check(case)


@pytest.mark.slow
@pytest.mark.parametrize("variant", [pytest.param(3, marks=pytest.mark.audit_cost(110)),   # CPU s: profiled 109.6
                                     pytest.param(4, marks=pytest.mark.audit_cost(60))])   # and 58.9 (ninth CI pass)
def test_the_small_epsilon_misses_are_caught_at_thorough(variant):
    """At claimed ε = 0.2, Roth's and Lee & Clifton's Sparse Vector are beyond 1e5 samples for any event
    (test_kit_power.py); at `thorough` (1e6) the kit catches them (docs/testing.md: ε_lb 0.229, 0.264)."""
    (case,) = [c for c in benchmark_cases(0.2, k=10, gaussian=False)
               if isinstance(c.mechanism, SparseVector) and c.mechanism.variant == variant]
    report = audit(case.mechanism, list(case.pairs), level="thorough", seed=SEED)
    assert not report.passed, f"{case.name} (not DP) passed at thorough: {report.message()}"


def test_the_lists_are_what_the_literature_says():
    cases = benchmark_cases(0.7, k=10)
    assert sum(c.truly_dp for c in cases) == 6 and sum(not c.truly_dp for c in cases) == 8
    assert [v for v in SVT_VARIANTS if SVT_VARIANTS[v][6]] == [1, 2]  # Lyu et al. 2017: only Alg. 1, 2 are ε-DP
    assert NoisyHistogram(1.5, broken=True).truly_dp  # Lap(ε) with ε >= 1 is at least Lap(1/ε)
    assert classic_gaussian_sigma(1.0, 1e-5) == pytest.approx(np.sqrt(2 * np.log(1.25e5)))


def test_sparse_vector_outputs():
    rng = np.random.default_rng(0)
    q = np.array([1e4, -1e4, 1e4, 1e4])  # far from the threshold: deterministic answers
    codes = SparseVector(1.0, 1, threshold=0.0, cutoff=2).sample(q, 50, rng)
    assert np.all(codes == [1, 0, 1, -1])  # ⊤, ⊥, ⊤, then the cutoff: unanswered
    roth = SparseVector(1.0, 3, threshold=0.0).sample(q, 50, rng)
    assert roth.shape == (50, 8) and np.all(roth[:, :4] == [1, -1, -1, -1]) and np.all(roth[:, 4] > 0)
    assert np.all(SparseVector(1.0, 6, threshold=0.0).sample(q, 50, rng) == [1, 0, 1, 1])  # no cutoff
    with pytest.raises(ConfigError):
        NoisyMax(0.0)
    with pytest.raises(ConfigError, match="cutoff"):
        SparseVector(1.0, cutoff=0)
    with pytest.raises(ConfigError):
        NoisyMax(1.0).sample([], 10, rng)


def _sparse_vector_query_by_query(m, q, n, rng):
    """Sparse Vector as Lyu et al. state it, one query after the other (the zoo's sampler before it answered every
    query at once where the threshold noise is not redrawn): the reference its outputs must equal."""
    _, rho_scale, nu_scale, has_cutoff, resample, outputs_value, _ = SVT_VARIANTS[m.variant]
    b_rho, b_nu = rho_scale(m.epsilon, m.cutoff), nu_scale(m.epsilon, m.cutoff)
    q = np.asarray(q, float)
    rho = rng.laplace(0.0, b_rho, n)
    nu = rng.laplace(0.0, b_nu, (n, q.size)) if b_nu > 0 else np.zeros((n, q.size))
    codes, values, tops = np.full((n, q.size), -1, np.int64), np.zeros((n, q.size)), np.zeros(n, np.int64)
    for i in range(q.size):
        live = tops < m.cutoff if has_cutoff else np.ones(n, bool)
        noisy = q[i] + nu[:, i]
        above = live & (noisy >= m.threshold + rho)
        codes[live, i] = np.where(above[live], 1, 0)
        values[above, i] = noisy[above]
        tops += above
        if resample and above.any():
            rho[above] = rng.laplace(0.0, b_rho, int(above.sum()))
    return np.hstack([codes, values]) if outputs_value else codes


@pytest.mark.parametrize("variant", sorted(SVT_VARIANTS))
def test_sparse_vector_draws_what_the_query_by_query_definition_draws(variant):
    """The audits' verdicts and bounds rest on these very draws: same generator state, same outputs, bit for bit."""
    for cutoff in (1, 2, 3):
        for q in ([0.5] * 10, [0.0, 1, 2, 0.5, 1, 1, 0, 0, 2, 1], [3.0] * 10):
            m = SparseVector(0.7, variant, threshold=0.5, cutoff=cutoff)
            got = m.sample(q, 3000, np.random.default_rng(cutoff))
            want = _sparse_vector_query_by_query(m, q, 3000, np.random.default_rng(cutoff))
            assert got.dtype == want.dtype and np.array_equal(got, want), (variant, cutoff, q)
