"""Secure aggregation: shares look uniform, reconstruction is exact, the noise is never known to one server."""
import numpy as np
import pytest
from scipy import stats

from vertisynth.collab.secure_aggregation import (CountShare, aggregate_at_server, planned_charge,
                                                  reconstruct, share_counts)
from vertisynth.core.errors import BudgetError, DataError, MessageError
from vertisynth.core.privacy import Budget, PrivacyLedger


def _run(counts_by_custodian, n_servers=2, sigma=0.0, seed=0):
    rng = np.random.default_rng(seed)
    inbox = {s: [] for s in range(n_servers)}
    for name, counts in counts_by_custodian.items():
        for sh in share_counts(name, "q", counts, n_servers, rng):
            inbox[sh.server].append(sh)
    noisy = [aggregate_at_server(s, inbox[s], sigma, np.random.default_rng(seed * 100 + s)) if sigma > 0 else
             aggregate_at_server(s, inbox[s], 1e-12, np.random.default_rng(s)) for s in range(n_servers)]
    return inbox, noisy


def test_reconstruction_without_noise_is_exact():
    a = np.array([[3, 0], [5, 7]])
    b = np.array([[1, 2], [0, 9]])
    for servers in (2, 3, 5):
        _, noisy = _run({"a": a, "b": b}, servers)
        assert np.array_equal(reconstruct(noisy), a + b)


def test_single_shares_are_uniform_whatever_the_counts():
    """A server's share of x is uniform on Z_2^64: its top byte is uniform (chi-square, fixed seed)."""
    for counts in (np.zeros(20000, np.int64), np.full(20000, 7, np.int64)):
        shares = share_counts("a", "q", counts, 2, np.random.default_rng(1))
        for sh in shares:
            top = (sh.share >> np.uint64(56)).astype(np.int64)
            _, p = stats.chisquare(np.bincount(top, minlength=256))
            assert p > 1e-4


def test_noise_comes_from_every_server_and_is_unknown_to_each():
    counts = np.zeros(50000, np.int64)
    sigma = 3.0
    inbox, noisy = _run({"a": counts}, 2, sigma, seed=4)
    out = reconstruct(noisy)
    assert np.var(out) == pytest.approx(2 * sigma**2, rel=0.05)  # S·σ²
    # server 0 knows its own noise: what it cannot remove still has variance σ² (the other server's)
    own = (noisy[0].share - sum(s.share for s in inbox[0])).view(np.int64)
    assert np.var(out - own) == pytest.approx(sigma**2, rel=0.05)
    assert abs(np.corrcoef(own, out - own)[0, 1]) < 0.02


def test_ledger_charges_the_release_once():
    budget = Budget(1.0, 1e-5)
    ledger = PrivacyLedger(budget)
    sigma = 5.0
    ledger.plan([planned_charge("q", sigma)])
    _, noisy = _run({"a": np.array([1, 2])}, 2, sigma)
    reconstruct(noisy, ledger, sigma)
    assert ledger.spent[0].cost.rho == pytest.approx(1 / (2 * sigma**2))
    with pytest.raises(BudgetError, match="unplanned"):
        reconstruct(noisy, ledger, sigma)


def test_messages_round_trip_and_bad_inputs(tmp_path):
    (s0, s1) = share_counts("a", "q", np.array([1, 2, 3]), 2, np.random.default_rng(0))
    s0.save(tmp_path / "s0.npz")
    back = CountShare.load(tmp_path / "s0.npz")
    assert np.array_equal(back.share, s0.share)
    with pytest.raises(MessageError, match="expected 'count_share'"):
        _, noisy = _run({"a": np.array([1])})
        noisy[0].save(tmp_path / "n0.npz")
        CountShare.load(tmp_path / "n0.npz")
    with pytest.raises(MessageError, match="need one noisy share from each of 2 servers"):
        reconstruct(noisy[:1])
    with pytest.raises(MessageError, match="does not match"):
        aggregate_at_server(0, [s0, s1], 1.0, np.random.default_rng(0))
    with pytest.raises(DataError, match="non-negative integers"):
        share_counts("a", "q", np.array([1.5]), 2, np.random.default_rng(0))
    with pytest.raises(DataError, match="at least 2 servers"):
        share_counts("a", "q", np.array([1]), 1, np.random.default_rng(0))
    path = tmp_path / "trunc.npz"
    path.write_bytes((tmp_path / "s0.npz").read_bytes()[:40])
    with pytest.raises(MessageError, match="truncated"):
        CountShare.load(path)


def test_custodians_and_servers_as_separate_processes(tmp_path):
    """Two custodians and two servers run as separate processes and exchange only files."""
    import json

    import pandas as pd
    from deploy_helpers import cli as role

    rng = np.random.default_rng(0)
    dom = {"0": {"type": "discrete", "domain": 3}, "1": {"type": "discrete", "domain": 2}}
    (tmp_path / "d.json").write_text(json.dumps(dom))
    frames = {}
    for name in ("a", "b"):
        frames[name] = pd.DataFrame({"0": rng.integers(0, 3, 200), "1": rng.integers(0, 2, 200)})
        frames[name].to_csv(tmp_path / f"{name}.csv", index=False)

    def cli(*args):
        return role("collab", *args, cwd=tmp_path)

    for name in ("a", "b"):
        cli("share", "--local-only", "--custodian", name, "--csv", f"{name}.csv", "--domain", "d.json", "--marginal", "0,1",
            "--marginal", "0", "--servers", "2", "--out", "inbox", "--seed", "1" if name == "a" else "2")
    for s in (0, 1):
        cli("aggregate", "--local-only", "--server", str(s), "--rho", "1000", "--inbox", "inbox", "--out", "outbox", "--seed", str(s))
    cli("reconstruct", "--local-only", "--outbox", "outbox", "--out", "noisy.npz")
    with np.load(tmp_path / "noisy.npz") as z:
        got = z["0,1"]
    truth = sum(pd.crosstab(f["0"], f["1"]).reindex(index=range(3), columns=range(2), fill_value=0).to_numpy()
                for f in frames.values())
    assert np.abs(got - truth).max() <= 1  # ρ = 1000: σ ≈ 0.02 per server


def test_shares_and_noise_from_the_os_when_unseeded(monkeypatch):
    """No seed: masks from os.urandom and discrete Gaussian noise; numpy's samplers are never called."""
    def refuse(*a, **k):
        raise AssertionError("a numpy Generator was made on the secure path")

    monkeypatch.setattr(np.random, "default_rng", refuse)
    counts = np.arange(2000, dtype=np.int64)
    shares = share_counts("a", "q", counts, 3, None)
    assert np.array_equal(sum(s.share for s in shares), counts.astype(np.uint64))
    noisy = [aggregate_at_server(s.server, [s], 2.0, None) for s in shares]
    assert {n.noise for n in noisy} == {"secure"}
    out = reconstruct(noisy)
    assert out.dtype == np.int64 and np.var(out - counts) == pytest.approx(3 * 4.0, rel=0.15)
