"""Secure noise: the discrete Gaussian/Laplace samplers (OpenDP over the OS CSPRNG) have the exact
distributions their costs assume, pass the kit's privacy audit, and production paths never touch numpy's
float samplers. The samplers are unseeded by design, so the statistical checks use thresholds whose
false-alarm probability is at most 1e-6 each."""
import math

import numpy as np
import pytest
from scipy import stats

from vertisynth.core.dataset import Dataset, VerticalPartition
from vertisynth.core.domain import Domain
from vertisynth.core.interfaces import PlanContext
from vertisynth.core.mechanisms import gaussian_mechanism, laplace_mechanism
from vertisynth.core.noise import discrete_gaussian, discrete_laplace
from vertisynth.core.privacy import Budget, Charge, PrivacyLedger, PureDP, ZCDP
from vertisynth.testing.audit import NeighbourPair, audit, claimed_profile

P_FLOOR = 1e-6


def _pmf_check(draws: np.ndarray, log_weight, support: int) -> None:
    """Chi-square of integer draws against the pmf ∝ exp(log_weight(k)) on |k| <= support, each tail pooled
    inwards until it expects >= 5 draws: a bin expecting 0.02 draws made one stray draw worth chi² ≈ 40 and two
    worth 160, a false alarm about once in 1,000 runs instead of the 1e-6 the floor promises (CI saw it)."""
    assert np.array_equal(draws, np.rint(draws))
    wide = support + 200
    ks = np.arange(-wide, wide + 1)
    p = np.exp(log_weight(ks) - log_weight(ks).max())
    p /= p.sum()
    expected = p * len(draws)
    lo = int(np.argmax(np.cumsum(expected) >= 5))                 # first bin where the left tail holds >= 5
    hi = len(ks) - 1 - int(np.argmax(np.cumsum(expected[::-1]) >= 5))
    assert hi - lo >= 2 * support // 3, "the pmf check pooled away most of its bins"
    bins = np.concatenate([[expected[:lo + 1].sum()], expected[lo + 1:hi], [expected[hi:].sum()]])
    k = np.clip(draws.astype(np.int64) + wide, lo, hi) - lo
    observed = np.bincount(k, minlength=len(bins))
    assert observed.size == bins.size and bins.min() >= 5
    assert stats.chisquare(observed, bins).pvalue > P_FLOOR


def test_discrete_gaussian_has_the_exact_pmf_mean_variance_and_symmetry():
    rho = 0.08
    sigma = 1 / math.sqrt(2 * rho)                      # 2.5
    noise = discrete_gaussian(np.zeros(100_000), rho)
    _pmf_check(noise, lambda k: -(k.astype(float) ** 2) / (2 * sigma**2), 12)
    ks = np.arange(-60, 61)
    w = np.exp(-ks**2 / (2 * sigma**2))
    exact_var = float((w * ks**2).sum() / w.sum())      # slightly below σ² (CKS 2020, Cor. 9)
    assert exact_var <= sigma**2
    se = math.sqrt(2 * exact_var**2 / len(noise))
    assert abs(noise.var() - exact_var) < 6 * se
    assert abs(noise.mean()) < 6 * math.sqrt(exact_var / len(noise))
    pos, neg = (noise > 0).sum(), (noise < 0).sum()     # symmetric: the sign is a fair coin
    assert stats.binomtest(int(pos), int(pos + neg)).pvalue > P_FLOOR


def test_discrete_laplace_has_the_exact_pmf_and_variance():
    eps = 0.7
    noise = discrete_laplace(np.full(100_000, 5.0), eps) - 5.0
    _pmf_check(noise, lambda k: -eps * np.abs(k).astype(float), 15)
    q = math.exp(-eps)
    exact_var = 2 * q / (1 - q) ** 2
    assert abs(noise.var() - exact_var) < 6 * math.sqrt(2 * exact_var**2 * 3 / len(noise))


def test_non_integer_queries_are_noised_on_a_fine_grid_at_the_planned_scale():
    """An R-score-like float query with sensitivity 2.5·√m: output on the 2^k grid, σ within 1 + 2^-20."""
    m = 10
    sens = 2.5 * math.sqrt(m)
    values = np.linspace(0.1, 9.3, 50_000)
    rho = 0.5
    out = discrete_gaussian(values, rho, sens)
    noise = out - values
    sigma = sens / math.sqrt(2 * rho)
    assert abs(noise.std() / sigma - 1) < 0.02
    k = math.floor(math.log2(sens / math.sqrt(values.size))) - 20
    assert np.array_equal(out / 2.0**k, np.rint(out / 2.0**k))          # every release is on the grid
    assert not np.array_equal(out, np.rint(out))


class _DiscreteCount:
    """The noisy record count through the real mechanism with secure noise (audit sampling hook)."""

    def __init__(self, kind, claimed, used):
        self.kind, self.claimed, self.used = kind, claimed, used

    def sample(self, data, n, rng):
        cost = ZCDP(self.used) if self.kind == "gaussian" else PureDP(self.used)
        ledger = PrivacyLedger(Budget(1e9, 1e-5), noise="secure")
        charge = Charge("audit", self.kind, cost)
        ledger.plan([charge])
        mech = gaussian_mechanism if self.kind == "gaussian" else laplace_mechanism
        return mech(np.full(n, float(data.n)), charge, rng, ledger)


def _pairs():
    dom = Domain(["a"], [2])
    return [NeighbourPair(Dataset(np.zeros((3, 1), dtype=np.int64), dom), Dataset(np.zeros((4, 1), dtype=np.int64), dom),
                          "add_remove", "3 vs 4 records")]


def _audit(kind, claimed, used, n, sequential=False):
    costs = [ZCDP(claimed)] if kind == "gaussian" else [PureDP(claimed)]
    return audit(_DiscreteCount(kind, claimed, used), _pairs(), claims=claimed_profile(costs, 1e-5),
                 n_samples=n, seed=5, name=f"discrete {kind}", sequential=sequential)


@pytest.mark.parametrize("kind, budget", [("laplace", 1.0), ("gaussian", 0.5)])
def test_discrete_mechanisms_pass_the_audit_and_an_overclaim_fails(kind, budget):
    ok = _audit(kind, budget, budget, 20_000)
    assert ok.passed, ok.message()
    bad = _audit(kind, budget, 4 * budget if kind == "gaussian" else 2 * budget, 20_000)
    assert not bad.passed


@pytest.mark.slow
@pytest.mark.parametrize("kind, budget", [   # audit_cost: CPU s, the median wall of four quiet CI runs
    pytest.param(k, b, marks=pytest.mark.audit_cost(cost))
    for k, b, cost in [("laplace", 0.5, 26), ("laplace", 2.0, 37), ("gaussian", 0.1, 24), ("gaussian", 2.0, 23)]])
def test_discrete_mechanisms_thorough_audit(kind, budget):
    report = _audit(kind, budget, budget, 1_000_000, sequential=True)
    assert report.passed, report.message()


class Tripwire(np.random.Generator):
    """A seeded Generator whose samplers raise: what production (secure) paths must never call. The float noise
    samplers, and the uniform paths a hand-rolled sampler or a seeded secret would go through (integers, choice,
    permutation, random, bytes, ...): under secure noise no draw may come from a seeded stream."""

    def _refuse(self, *a, **k):
        raise AssertionError("numpy float sampler called on a secure path")

    def _refuse_uniform(self, *a, **k):
        raise AssertionError("numpy seeded uniform sampler (integers/choice/...) called on a secure path")

    normal = laplace = gumbel = exponential = standard_normal = _refuse
    integers = choice = permutation = permuted = shuffle = random = uniform = bytes = _refuse_uniform
    binomial = multinomial = geometric = poisson = hypergeometric = standard_exponential = _refuse_uniform


def test_secure_party_paths_never_call_numpy_float_samplers():
    from vertisynth.plugins.alignment.fill import fill_view, plan_charges
    from vertisynth.plugins.encoders.grr import GRRConfig, GRREncoder
    from vertisynth.plugins.synthesizers.dpsyn.synthesizer import DPSynConfig, DPSynSynthesizer
    from vertisynth.plugins.synthesizers.vertimrf.synthesizer import VertiMRFConfig, VertiMRFSynthesizer
    from vertisynth.core.interfaces import VerticalData

    rng = np.random.default_rng(0)
    dom = Domain(["a", "b", "c", "d"], [3, 12, 2, 4])
    data = Dataset(np.column_stack([rng.integers(0, s, 800) for s in dom.shape]), dom)
    part = VerticalPartition.from_lists([["a", "b"], ["c", "d"]])
    budget = Budget(4.0, 1e-5)
    trip = Tripwire(np.random.PCG64(1))
    # VertiMRF's whole party side: local PrivMRF (count, R-scores, marginals, refinement), value
    # distributions of the binned attribute, DP FM sketches (phantoms) and the noisy count n̂
    syn = VertiMRFSynthesizer(VertiMRFConfig(encoder_params={"t": 50}, local_params={"iters": 10, "refine_iters": 5},
                                             bins=4))
    ledger = PrivacyLedger(budget, noise="secure")
    ledger.plan(syn.plan(PlanContext(dom, part, budget)))
    key_rng, _ = syn.party_rngs(np.random.default_rng(3))
    syn.agree_keys(key_rng)
    for p in part.names:
        assert syn.party_step(p, part.views(data)[p], ledger, trip)
    assert not ledger.unspent() and ledger.to_dict()["noise"].startswith("secure")
    # GRR's perturbation key, DPSyn's selection and marginals, the PSU fill's DP marginals
    grr = GRREncoder(GRRConfig())
    gl = PrivacyLedger(budget, noise="secure")
    gl.plan(grr.plan(PlanContext(dom, part, budget)))
    first = part.names[0]
    grr.encode(first, part.views(data)[first], gl, trip)
    dpsyn = DPSynSynthesizer(DPSynConfig(selection="greedy"))
    dl = PrivacyLedger(budget, noise="secure")
    dl.plan(dpsyn.plan(PlanContext(dom, part, budget)))
    dpsyn.measure(VerticalData(part, part.views(data)), dl, trip)
    fl = PrivacyLedger(budget, noise="secure")
    charges = plan_charges(0.1, {first: ["a", "b"]})
    fl.plan(charges)
    view = part.views(data)[first]
    fill_view(view, np.arange(view.n), view.n + 50, "marginal", {}, ["a", "b"], charges[0], fl, first, trip)
    assert not fl.unspent()
    # the streamed fill, and a local PrivMRF whose query cap makes it sample candidates by weight
    from vertisynth.plugins.alignment.fill import ChunkFill
    from vertisynth.plugins.synthesizers.privmrf.synthesizer import PrivMRFConfig, PrivMRFSynthesizer
    sl = PrivacyLedger(budget, noise="secure")
    sl.plan(charges)
    counts = np.concatenate([view.counts([x]).values.ravel() for x in ["a", "b"]])
    ChunkFill(view.domain, view.n, np.arange(view.n), view.n + 50, "sample", {}, ["a", "b"], charges[0], sl, first,
              trip, counts)
    one = VerticalPartition.from_lists([list(dom.attributes)])
    mrf = PrivMRFSynthesizer(PrivMRFConfig(iters=10, refine_iters=5, max_queries=1))
    ml = PrivacyLedger(budget, noise="secure")
    ml.plan(mrf.plan(PlanContext(dom, one, budget)))
    mrf.fit(VerticalData(one, one.views(data)), ml, trip)
    assert not ml.unspent()
    # the he encoder with crypto = "simulated": both parties' noise from OpenDP over the OS CSPRNG, whatever crypto says
    from vertisynth.plugins.encoders.he.encoder import HEConfig, HEEncoder
    he = HEEncoder(HEConfig(crypto="simulated"))
    hl = PrivacyLedger(budget, noise="secure")
    hl.plan(he.plan(PlanContext(dom, part, budget)))
    assert he.measure(part.views(data), he.selection_queries(), "selection", hl, {p: trip for p in part.names})
    # the tripwire is live: the same party step on a simulation ledger calls numpy's samplers
    sim = PrivacyLedger(budget, noise="simulation")
    sim.plan(syn.plan(PlanContext(dom, part, budget)))
    with pytest.raises(AssertionError, match="float sampler"):
        syn.party_step(first, part.views(data)[first], sim, trip)


def test_system_random_uniform_paths_have_their_laws():
    """What secure paths draw instead of a seeded Generator's integers/choice/permutation (OS CSPRNG)."""
    from vertisynth.core.noise import SystemRandom, secure_integers

    r = SystemRandom()
    x = secure_integers(7, 70_000)
    assert x.min() >= 0 and x.max() < 7
    assert stats.chisquare(np.bincount(x, minlength=7)).pvalue > P_FLOOR
    assert 3 <= r.integers(3, 10) < 10 and r.integers(0, 2**63, size=4).dtype == np.int64
    assert sorted(r.permutation(50)) == list(range(50))
    p = np.array([0.5, 0.3, 0.2, 0.0])
    draws = r.choice(4, 60_000, p=p)
    assert stats.chisquare(np.bincount(draws, minlength=4)[:3], 60_000 * p[:3]).pvalue > P_FLOOR
    firsts = np.array([r.choice(4, 2, replace=False, p=p) for _ in range(3000)])
    assert (firsts[:, 0] != firsts[:, 1]).all() and not (firsts == 3).any()       # distinct, never a zero weight
    assert stats.chisquare(np.bincount(firsts[:, 0], minlength=3)[:3], 3000 * p[:3]).pvalue > P_FLOOR


def test_secure_noise_uses_the_preludes_own_samplers():
    """noise.py imports OpenDP's submodules, not `opendp.prelude`: the very functions the prelude names."""
    import opendp.prelude as prelude

    from vertisynth.core.noise import _dp

    dp = _dp()
    assert dp.m is prelude.m and dp.m.make_gaussian is prelude.m.make_gaussian
    assert dp.m.make_laplace is prelude.m.make_laplace
    for name in ["vector_domain", "atom_domain", "l1_distance", "l2_distance"]:
        assert getattr(dp, name) is getattr(prelude, name), name


def test_secure_noise_in_a_fresh_interpreter_imports_no_scikit_learn_or_scipy():
    """`opendp.prelude` imports opendp.extras: scikit-learn and scipy.stats, ≈ 3 CPU s of every run that draws
    secure noise. Both mechanisms and both paths (integer and grid) draw without them."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = ("import json, sys, numpy as np\n"
            "from vertisynth.core.noise import discrete_gaussian, discrete_laplace\n"
            "a = discrete_gaussian(np.zeros(4), 1.0); b = discrete_laplace(np.zeros(4), 1.0)\n"
            "c = discrete_gaussian(np.full(3, 0.5), 1.0); d = discrete_laplace(np.full(3, 0.5), 1.0)\n"
            "assert all(x.shape in {(4,), (3,)} for x in (a, b, c, d))\n"
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n")
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    loaded = set(json.loads(res.stdout.splitlines()[-1]))
    assert "opendp" in loaded
    assert not loaded & {"sklearn", "scipy", "pandas", "polars"}, sorted(loaded & {"sklearn", "scipy", "pandas"})
