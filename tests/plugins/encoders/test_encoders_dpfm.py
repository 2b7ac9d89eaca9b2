"""DPFM encoder: key agreement, PRF geometric values, sketches, the cardinality estimator,
Algorithm 4 estimates with variance, Theorem 3's bound, files, bad input and the privacy audit."""
from __future__ import annotations

import math

import attrs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from encoder_helpers import epsilon_lower_bound, planned, toy_data
from vertisynth.core.dataset import Dataset, VerticalPartition
from vertisynth.core.domain import Domain
from vertisynth.core.errors import ConfigError, DataError, DomainError, MessageError
from vertisynth.core.interfaces import PlanContext
from vertisynth.core.messages import Message
from vertisynth.core.privacy import Budget, zcdp_to_approx
from vertisynth.plugins.encoders.dpfm import DPFMConfig, DPFMEncoder, DPFMMessage, SketchParams, _complement
from vertisynth.plugins.encoders.fm_sketch import (
    EMPTY, asymptotic_constant, cardinality, finalize, fm_parameters, group_max, phantom_max,
)
from vertisynth.core.keys import agree_keys
from vertisynth.plugins.encoders.prf import fm_geometric

SMALL = DPFMConfig(t=300, calibration="paper", postprocess="clip")   # the paper's calibration and clipping


def encode_all(enc, data, part, ledger, rng):
    views = part.views(data)
    return [enc.encode(p, views[p], ledger, rng) for p in part.names]


# -- keys -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("names", [["alice", "bob"], ["p1", "p2", "p3", "p4"], ["solo"]])
def test_key_agreement_gives_every_party_the_same_key(names, rng):
    parties = agree_keys(names, rng)
    keys = {n: p.fm_key() for n, p in parties.items()}
    assert len(set(keys.values())) == 1 and len(next(iter(keys.values()))) == 32
    # the public transcript does not contain it, and new private keys give a new group key
    assert all(keys[names[0]] not in p.public_bytes() for p in parties.values())
    assert agree_keys(names, np.random.default_rng(99))[names[0]].fm_key() != keys[names[0]]
    assert len({p.fm_key() for p in agree_keys(names).values()}) == 1  # OS-entropy mode agrees too


def test_tampered_wrapped_key_is_rejected(rng):
    parties = agree_keys(["a", "b", "c"], rng)
    leader = parties["a"]
    wrapped = leader.wrap_group_for({"b": parties["b"].public_bytes()}, rng)
    forged = wrapped["b"][:-1] + bytes([wrapped["b"][-1] ^ 1])
    with pytest.raises(MessageError, match="does not verify"):
        parties["b"].unwrap_group("a", leader.public_bytes(), forged)


# -- PRF geometric values and sketch pieces --------------------------------------------------------
@pytest.mark.parametrize("gamma", [1.0, 0.5])
def test_prf_values_are_geometric_and_shared(gamma):
    key = b"\x01" * 32
    y = fm_geometric(key, np.arange(4), np.arange(50_000), gamma).ravel()
    n = y.size
    for k in range(1, 6):
        p = (1 + gamma) ** -k
        assert abs((y >= k).mean() - p) < 5 * math.sqrt(p * (1 - p) / n)
    # same (key, h, id) -> same value; another key -> different values
    assert np.array_equal(fm_geometric(key, np.array([2]), np.array([7, 9]), gamma),
                          fm_geometric(key, np.array([2]), np.array([7, 9]), gamma))
    assert not np.array_equal(fm_geometric(key, np.arange(4), np.arange(100), gamma),
                              fm_geometric(b"\x02" * 32, np.arange(4), np.arange(100), gamma))


def test_phantom_max_has_the_law_of_a_maximum_of_k_geometrics(rng):
    k, gamma, n = 7, 1.0, 100_000
    fast = phantom_max(rng, (n,), k, gamma)
    slow = rng.geometric(gamma / (1 + gamma), size=(n, k)).max(axis=1) - 1  # numpy's geometric starts at 1
    for m in range(1, 8):
        assert abs((fast >= m).mean() - (slow >= m).mean()) < 0.01


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 6), st.integers(0, 30), st.integers(1, 5), st.integers(0, 10**6))
def test_group_max_and_complement_match_naive_loops(size, n, h, seed):
    r = np.random.default_rng(seed)
    values = r.integers(0, 20, (h, n)).astype(np.int16)
    codes = r.integers(0, size, n)
    got = group_max(values, codes, size)
    for v in range(size):
        sel = values[:, codes == v]
        want = sel.max(axis=1) if sel.shape[1] else np.full(h, EMPTY)
        assert np.array_equal(got[:, v], want)
    comp = _complement(got)
    for v in range(size):
        others = np.delete(got, v, axis=1)
        want = others.max(axis=1) if others.shape[1] else np.full(h, EMPTY)
        assert np.array_equal(comp[:, v], want)


def test_fm_parameters_follow_lemma4():
    k_p, b = fm_parameters(0.5, 1.0)
    assert k_p == math.ceil(1 / (math.exp(0.5) - 1)) == 2 and b == math.ceil(math.log2(1 / (1 - math.exp(-0.5)))) == 2
    with pytest.raises(ConfigError):
        fm_parameters(0.0, 1.0)


# -- cardinality estimator ----------------------------------------------------------------------------
@pytest.mark.parametrize("gamma", [1.0, 0.25])
def test_harmonic_estimator_constant_and_calibrated_variance(gamma, rng):
    """No floor, large K: K·g(K) → γ/ln(1+γ). With a floor and moderate K, the estimate over t
    repetitions is unbiased and its stated variance matches the spread over replications."""
    q = 1 / (1 + gamma)
    k_big = 1e9
    k_hat, _ = cardinality(np.array([asymptotic_constant(gamma) / k_big]), 100, gamma, 0)
    assert k_hat[0] == pytest.approx(k_big, rel=0.03)
    K, t, reps, floor = 300, 400, 200, 6
    # max of K geometrics per (replication, repetition), floored
    m = phantom_max(rng, (reps, t), K, gamma)
    m = np.maximum(m, floor)
    k_hat, var = cardinality((q ** m.astype(float)).mean(axis=1), t, gamma, floor)
    z = (k_hat - K) / np.sqrt(var)
    assert abs(z.mean()) < 4 / math.sqrt(reps) * 1.5 + 0.05
    assert 0.8 < z.std() < 1.25


# -- encoding and Algorithm 4 -------------------------------------------------------------------------
def test_plan_charges_are_spent_exactly_and_fit_the_budget(rng):
    data, part = toy_data(400)
    for calibration in ("paper", "tight"):
        enc = DPFMEncoder(attrs.evolve(SMALL, calibration=calibration))
        ledger = planned(enc, data, part, 1.0, n_public=data.n)
        encode_all(enc, data, part, ledger, rng)
        assert ledger.unspent() == [] and ledger.spent_epsilon() <= 1.0 + 1e-9
    # "tight" spends the whole budget; "paper" uses Alg. 3's formula with δ = 1/n
    assert ledger.spent_epsilon() == pytest.approx(1.0, rel=1e-4)
    paper = DPFMEncoder(SMALL)
    ctx = PlanContext(data.domain, part, Budget(1.0, 1e-5), n_public=data.n)
    paper.plan(ctx)
    eps_s = zcdp_to_approx(0.9 * ctx.rho, 1e-5)
    assert paper.params.eps_prime == pytest.approx(eps_s / (4 * math.sqrt(300 * 4 * math.log(data.n))))
    assert paper.params.eps_prime < enc.params.eps_prime


def test_estimates_have_calibrated_variance_and_clip():
    """Unclipped cell estimates over independent runs (fresh keys and phantoms each run): z-scores
    against the truth have mean ≈ 0 and sd ≈ 1. (Within one run the cells share the sketches, so their
    errors are correlated; the check needs replications.)"""
    data, part = toy_data(3000, seed=5)
    queries = (["a", "b"], ["c", "d"], ["a", "d"], ["a"], ["a", "b", "d"])
    zs = {tuple(q): [] for q in queries}
    for run in range(40):
        enc = DPFMEncoder(DPFMConfig(t=400, calibration="tight", postprocess="none"))
        rng = np.random.default_rng(run)
        msgs = encode_all(enc, data, part, planned(enc, data, part, 4.0, n_public=data.n), rng)
        for q in queries:
            est = enc.estimate_with_variance(msgs, q)
            zs[tuple(q)].append(((est.counts.values - data.counts(q).values) / np.sqrt(est.variance.values)).ravel())
    for q, z in zs.items():
        z = np.array(z)  # (runs, cells)
        assert np.abs(z.mean(axis=0)).max() < 4.5 / math.sqrt(z.shape[0]), q
        assert 0.75 < z.std() < 1.3, q
    clipped = DPFMEncoder(DPFMConfig(t=400, calibration="paper", postprocess="clip_rescale")).estimate(msgs, ["a", "b", "c", "d"])
    assert clipped.values.min() >= 0
    assert clipped.total() == pytest.approx(enc.noisy_count(msgs)[0])
    projected = DPFMEncoder(DPFMConfig(t=400, calibration="paper", postprocess="project")).estimate(msgs, ["a", "d"])
    assert projected.values.min() >= 0 and projected.total() == pytest.approx(enc.noisy_count(msgs)[0])


def test_error_within_theorem3_bound(rng):
    """Theorem 3: |T̂ − T| <= γ(n − T) + |N̂| + C with probability >= 1 − β, C = O(√log(1/δ) log^¼(1/β) / ε').
    Seeded check with constant 1 in C, β = 0.05, over all cells of the cross-party 2-way marginals."""
    data, part = toy_data(3000, seed=11)
    enc = DPFMEncoder(DPFMConfig(t=500, calibration="paper", postprocess="clip"))
    msgs = encode_all(enc, data, part, planned(enc, data, part, 2.0, n_public=data.n), rng)
    n_hat, _ = enc.noisy_count(msgs)
    beta_, delta = 0.05, 1 / data.n
    c = math.sqrt(math.log(1 / delta)) * math.log(1 / beta_) ** 0.25 / enc.params.eps_prime
    inside = []
    for qa in ("a", "c"):
        for qb in ("b", "d"):
            truth = data.counts([qa, qb]).values
            err = np.abs(enc.estimate(msgs, [qa, qb]).values - truth)
            inside.append((err <= 1.0 * (data.n - truth) + abs(n_hat - data.n) + c).ravel())
    assert np.concatenate(inside).mean() >= 1 - beta_


def test_one_attribute_union_is_everyone(rng):
    data, part = toy_data(2000)
    enc = DPFMEncoder(attrs.evolve(SMALL, postprocess="none"))
    msgs = encode_all(enc, data, part, planned(enc, data, part, 2.0), rng)
    f = enc.estimate(msgs, ["a"])
    assert f.values.shape == (3,) and np.all(np.isfinite(f.values))


def test_chunked_encoding_equals_one_shot(rng):
    data, part = toy_data(1000)
    enc = DPFMEncoder(SMALL)
    planned(enc, data, part, 1.0)
    enc.agree_keys(np.random.default_rng(5))
    view = part.views(data)["bob"]
    from vertisynth.core.privacy import PrivacyLedger

    def ledger():
        led = PrivacyLedger(Budget(1.0, 1e-5))
        led.plan(enc.plan(PlanContext(data.domain, part, Budget(1.0, 1e-5))))
        return led

    one = enc.encode("bob", view, ledger(), np.random.default_rng(1))
    bounds = [0, 137, 138, 600, 1000]
    chunks = [(np.arange(s, e), view.take(np.arange(s, e))) for s, e in zip(bounds[:-1], bounds[1:])]
    many = enc.encode_chunks("bob", view.domain, chunks, ledger(), np.random.default_rng(1))
    for a in view.attributes:
        assert np.array_equal(one.sketches[a], many.sketches[a])


def test_same_seed_same_sketches():
    data, part = toy_data(300)
    runs = []
    for _ in range(2):
        enc = DPFMEncoder(SMALL)
        runs.append(encode_all(enc, data, part, planned(enc, data, part, 1.0), np.random.default_rng(3)))
    for m1, m2 in zip(*runs):
        assert all(np.array_equal(m1.sketches[a], m2.sketches[a]) for a in m1.sketches)
        assert m1.n_hat == m2.n_hat


# -- party boundary and files -------------------------------------------------------------------------
def test_server_estimates_from_files_without_keys(tmp_path, rng):
    data, part = toy_data(500)
    enc = DPFMEncoder(SMALL)
    msgs = encode_all(enc, data, part, planned(enc, data, part, 1.0), rng)
    paths = [m.save(tmp_path / f"{m.party}.dpfm.npz") for m in msgs]
    server = DPFMEncoder(SMALL)  # fresh: never planned, holds no keys and no data
    got = server.estimate_with_variance([Message.load(p) for p in paths], ["a", "b"])
    want = enc.estimate_with_variance(msgs, ["a", "b"])
    assert np.array_equal(got.counts.values, want.counts.values)
    assert server._keys is None and server.params is None
    key = enc._keys["alice"].fm_key()
    assert all(key not in p.read_bytes() for p in paths)


def test_bad_inputs_raise_clear_errors(tmp_path, rng):
    data, part = toy_data(300)
    enc = DPFMEncoder(SMALL)
    with pytest.raises(DataError, match="plan"):
        enc.encode("alice", part.views(data)["alice"], None, rng)
    ledger = planned(enc, data, part, 1.0)
    with pytest.raises(DomainError, match="does not hold"):
        enc.encode("alice", data.project(["a", "b"]), ledger, rng)
    with pytest.raises(DomainError, match="all its planned"):
        enc.encode("alice", data.project(["a"]), ledger, rng)
    msgs = encode_all(enc, data, part, ledger, rng)
    with pytest.raises(DomainError, match="no message holds"):
        enc.estimate(msgs, ["a", "nope"])
    with pytest.raises(DomainError, match="repeats"):
        enc.estimate(msgs, ["a", "a"])
    # disagreeing t or γ across parties
    other = DPFMEncoder(DPFMConfig(t=200, calibration="paper", postprocess="clip"))
    bob200 = encode_all(other, data, part, planned(other, data, part, 1.0), rng)[1]
    with pytest.raises(MessageError, match="disagree on t"):
        enc.estimate([msgs[0], bob200], ["a", "b"])
    g = DPFMEncoder(attrs.evolve(SMALL, gamma=0.5))
    bob_g = encode_all(g, data, part, planned(g, data, part, 1.0), rng)[1]
    with pytest.raises(MessageError, match="disagree on gamma"):
        enc.estimate([msgs[0], bob_g], ["a", "b"])
    # two noisy counts that disagree; no noisy count at all
    fields = {f.name: getattr(msgs[1], f.name) for f in attrs.fields(DPFMMessage)}
    with pytest.raises(MessageError, match="different noisy counts"):
        enc.estimate([msgs[0], DPFMMessage(**{**fields, "n_hat": 1.0, "n_hat_variance": 1.0})], ["a", "b"])
    with pytest.raises(MessageError, match="no message carries"):
        enc.estimate([msgs[1]], ["b"])
    # value out of the domain / wrong shapes / tampered parameters
    with pytest.raises(MessageError, match="shape"):
        DPFMMessage(**{**fields, "sketches": {**msgs[1].sketches, "b": msgs[1].sketches["b"][:, :2]}}).validate()
    with pytest.raises(MessageError, match="do not match"):
        DPFMMessage(**{**fields, "k_p": fields["k_p"] + 1}).validate()
    with pytest.raises(MessageError, match="below the floor"):
        DPFMMessage(**{**fields, "sketches": {**msgs[1].sketches, "b": np.zeros_like(msgs[1].sketches["b"])}}).validate()
    # truncated file
    path = msgs[0].save(tmp_path / "a.npz")
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    with pytest.raises(MessageError, match="truncated"):
        Message.load(path)
    with pytest.raises(ConfigError):
        DPFMConfig(calibration="loose")
    with pytest.raises(ConfigError):
        DPFMConfig(t=0)
    with pytest.raises(ConfigError, match="postprocess"):
        DPFMConfig(postprocess="round")


# -- privacy audit ------------------------------------------------------------------------------------
def sketch_samples(n_records_with_value: int, samples: int, k_p: int, floor: int, seed: int, gamma: float = 1.0) -> np.ndarray:
    """The DP sketch of value 1 of a one-attribute table, once per repetition: repetition h hashes
    with its own key ξ_h = (K, h), so every sample uses a fresh hash key (and fresh phantoms)."""
    dom = Domain(["x"], [2])
    codes = np.array([[0]] + [[1]] * n_records_with_value, dtype=np.int64)
    enc = DPFMEncoder(DPFMConfig(t=samples, rep_block=samples, calibration="paper", postprocess="clip"))
    enc.params = SketchParams(samples, gamma, 0.5, k_p, floor, 1.0, "p")
    r = np.random.default_rng(seed)
    raw = enc.raw_maxima(r.bytes(32), Dataset(codes, dom), np.arange(codes.shape[0]))
    return finalize(raw["x"], r, k_p, floor, gamma)[:, 1]


@pytest.mark.parametrize("gamma", [1.0, 0.5])
def test_dpfm_sketch_audit_and_miscalibrated_variant(gamma):
    """Neighbours: the set of value 1 is empty in D and holds one record in D' (add one person).
    ε' = 0.5 ⇒ k_p = 2 (b = 2 at γ = 1, 3 at γ = 0.5). Events {α >= m}. The calibrated sketch certifies < ε' (but more than
    half of it: the audit has power); with one phantom too few (k_p = 1) the audit exceeds ε'."""
    eps, n = 0.5, 150_000
    k_p, floor = fm_parameters(eps, gamma)
    events = [lambda a, m=m: a >= m for m in range(floor + 1, floor + 7)] + [lambda a: a == floor]
    lb = epsilon_lower_bound(sketch_samples(0, n, k_p, floor, 1, gamma), sketch_samples(1, n, k_p, floor, 2, gamma), events)
    assert 0.25 < lb <= eps
    lb_bad = epsilon_lower_bound(sketch_samples(0, n, k_p - 1, floor, 3, gamma),
                                 sketch_samples(1, n, k_p - 1, floor, 4, gamma), events)
    assert lb_bad > eps


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=50))
def test_bit_trick_geometric_equals_the_logarithm(words):
    from vertisynth.plugins.encoders.prf import geometric_from_uniform, geometric_from_words, uniform_open0

    w = np.array(words + [0, 2**64 - 1, 2**11, 2**63, (2**53 - 1) << 11], dtype=np.uint64)
    assert np.array_equal(geometric_from_words(w, 1.0), geometric_from_uniform(uniform_open0(w), 1.0))


def test_configs_structure_from_toml_like_dicts_and_reject_unknown_keys():
    from vertisynth.core.structuring import structure
    from vertisynth.core.registry import default_registry
    from vertisynth.plugins.encoders.grr import GRRConfig

    reg = default_registry()
    assert {"dpfm", "grr"} <= set(reg.names("encoder"))
    cfg = structure({"t": 500, "gamma": 0.5, "calibration": "tight", "dask_scheduler": "tcp://h:8786"}, DPFMConfig, "dpfm")
    assert cfg.t == 500 and cfg.gamma == 0.5 and cfg.delta is None
    assert structure({"epsilon": 0.3, "postprocess": "project"}, GRRConfig, "grr").epsilon == 0.3
    with pytest.raises(ConfigError):
        structure({"repetitions": 5}, DPFMConfig, "dpfm")
