"""The kit catches the defects a wrapped library brings (found trying smartnoise-synth 1.0.8 as a plugin): a
component that declares a tenth of what it spends, one whose default row count is the true record count, and
one that draws from numpy's global RNG even when it puts the state back. Each defective component is small and
deliberate; each check must fail on it and pass on its honest twin."""
import numpy as np
import pytest

from vertisynth.core.dataset import Dataset
from vertisynth.core.interfaces import Synthesizer
from vertisynth.core.privacy import Charge, PureDP
from vertisynth.testing.audit import AUDIT_LEVELS, PrivacyViolation
from vertisynth.testing.checks import (ConformanceError, Subject, audit_samples_for, check_no_global_rng,
                                       check_privacy_audit)
from vertisynth.testing.power import samples_for_claim


class Marginals(Synthesizer):
    """Laplace-noised 1-way marginals, rows drawn column by column; its noise is for the whole budget.
    `declared`: the share of that cost it declares (1: honest). `true_count`: sample(None) draws as many rows
    as the table had. `library`: the noise comes from a 'library' that uses np.random, seeded from the run's
    generator and with numpy's global state put back afterwards (so runs repeat and the state is untouched)."""

    declared, true_count, library = 1.0, False, False

    def __init__(self, config=None):
        super().__init__(config)

    def plan(self, ctx):
        self._dom, d = ctx.domain, len(ctx.domain.attributes)
        self._eps = ctx.epsilon / d
        self._charges = [Charge("synthesizer", "laplace_1way", PureDP(self.declared * self._eps), party=p.name)
                         for p in ctx.partition for _ in p.attributes]
        return list(self._charges)

    def _noise(self, size, rng):
        if not self.library:
            return rng.laplace(0.0, 1.0 / self._eps, size)
        saved = np.random.get_state()
        np.random.seed(int(rng.integers(2**32)))
        try:
            return np.random.laplace(0.0, 1.0 / self._eps, size)
        finally:
            np.random.set_state(saved)

    def fit(self, data, ledger, rng):
        table = data.joined().project(self._dom.attributes)
        self._rows = table.n
        self._p = []
        for a, charge in zip(self._dom.attributes, self._charges):
            ledger.spend(charge)
            noisy = np.clip(table.counts((a,)).values + self._noise(self._dom.size(a), rng), 0, None) + 1e-9
            self._p.append(noisy / noisy.sum())
        self._cdf = [np.cumsum(p) / np.cumsum(p)[-1] for p in self._p]
        self._n_hat = max(1, int(round(noisy.sum())))   # a noisy count (the last marginal's total)

    def sample(self, n, rng):
        n = (self._rows if self.true_count else self._n_hat) if n is None else int(n)
        # rng.choice(len(p), size=n, p=p)'s very draws (its cdf and uniforms), without its checks of p on every
        # call: the audits below sample this ~10⁵ times
        cols = [cdf.searchsorted(rng.random(n), side="right") for cdf in self._cdf]
        return Dataset(np.column_stack(cols).astype(np.int64).reshape(n, len(self._p)), self._dom)


def variant(**flags):
    return type("Defective" if flags else "Honest", (Marginals,), flags)


def subject(cls, **fields):
    return Subject("synthesizer", cls.__name__.lower(), cls, **fields)


def test_a_library_on_numpys_global_rng_is_flagged_even_when_it_restores_the_state():
    check_no_global_rng(subject(variant()))
    with pytest.raises(ConformanceError, match=r"calls numpy's global RNG \(np.random.laplace, np.random.seed, "
                                               r"np.random.set_state\).*even if it puts the state back"):
        check_no_global_rng(subject(variant(library=True)))


def test_a_default_row_count_that_is_the_true_count_fails_the_audit():
    check_privacy_audit(subject(variant(), audit_samples=500))
    with pytest.raises(PrivacyViolation, match="a default row count that follows the true record count"):
        check_privacy_audit(subject(variant(true_count=True), audit_samples=500))


def test_samples_are_sized_from_the_claim():
    # a violation twice the claim, certified 9 times in 10: about 1/ε² samples, never below the level's count
    assert samples_for_claim(0.1) < AUDIT_LEVELS["smoke"] < samples_for_claim(0.05) < samples_for_claim(0.02)
    assert 3.5 < samples_for_claim(0.05) / samples_for_claim(0.1) < 4.5
    assert audit_samples_for([(1.0, 0.0)], "smoke") == AUDIT_LEVELS["smoke"]
    assert audit_samples_for([(0.05, 0.0)], "smoke") == samples_for_claim(0.05)
    assert audit_samples_for([(0.001, 0.0)], "smoke") == AUDIT_LEVELS["thorough"]


@pytest.mark.slow
@pytest.mark.audit_cost(28)   # CPU s: the median of its wall in four quiet CI runs (21 paired alone at the ninth pass)
def test_a_tenfold_underclaim_fails_the_audit_at_the_default_settings():
    """The kit's documented test bed and default settings (no measure hook, no audit_samples): a component that
    declares ε = 0.1 while its noise is for ε = 1 is caught (it passed at 2,000 and 20,000 samples when the
    default output was the contingency table of a 100-row sample). A few minutes on one core.

    The two audits draw the same samples: the noise is for the whole ε either way (only the declared share differs),
    and the seed, pairs and sample count are the same, so the honest twin's draws are exactly the defective one's.
    They are drawn once (checked below, and the second audit's sample calls are all answered from the first's);
    each audit still selects and tests on its own, as it would have."""
    import vertisynth.testing.checks as checks

    honest, defective = subject(variant()), subject(variant(declared=0.1))
    pair = [p for p in checks.adversarial_pairs(honest.domain) if p.relation == honest.neighbours][0]
    twins = []
    for s in (honest, defective):
        component = s.build()
        checks._plan(s, component)
        twins.append(checks._measurement(s, component).sample(pair.base, 20, np.random.default_rng(7)))
    assert np.array_equal(*twins)

    drawn, calls = {}, {"hit": 0, "miss": 0}
    measurement = checks._measurement

    def shared(subj, component):
        inner = measurement(subj, component)

        class Shared:
            def sample(self, data, n, r):
                key = (data.codes.tobytes(), data.codes.shape, n, repr(r.bit_generator.state))
                calls["hit" if key in drawn else "miss"] += 1
                if key not in drawn:
                    drawn[key] = inner.sample(data, n, r)
                return drawn[key]
        return Shared()

    checks._measurement = shared
    try:
        check_privacy_audit(honest)
        first = dict(calls)
        with pytest.raises(PrivacyViolation, match="claimed"):
            check_privacy_audit(defective)
    finally:
        checks._measurement = measurement
    assert first == {"hit": 0, "miss": 4} and calls == {"hit": 4, "miss": 4}, calls
