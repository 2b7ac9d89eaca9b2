"""Issue 21's server speed-ups keep the estimate: InitMRF starts at the product of the local models (which
already fits every local marginal), a re-estimate can start from the previous step size, and OptMRF's
intermediate rounds are shorter fits while the last one gets `iters`."""
from __future__ import annotations

import numpy as np
import pytest

from vertisynth.core.dataset import Dataset, VerticalPartition
from vertisynth.core.domain import Domain
from vertisynth.core.errors import ConfigError
from vertisynth.core.interfaces import PlanContext, VerticalData
from vertisynth.core.privacy import Budget, PrivacyLedger
from vertisynth.pgm import Measurement, estimate
from vertisynth.plugins.synthesizers.vertimrf import synthesizer as vsyn
from synthetic_tables import correlated

FAST = {"encoder_params": {"t": 200}, "local_params": {"iters": 40, "refine_iters": 10}, "iters": 60, "rounds": 3,
        "per_round": 1}




def fit_recording(monkeypatch, params, parts=(("a", "b"), ("c", "d", "e")), seed=0, budget=8.0):
    calls = []
    real = vsyn.estimate

    def spy(dom, meas, **kw):
        res = real(dom, meas, **kw)
        calls.append((list(meas), kw, res))
        return res

    monkeypatch.setattr(vsyn, "estimate", spy)
    data = correlated(4000)
    part = VerticalPartition.from_lists([list(p) for p in parts])
    syn = vsyn.VertiMRFSynthesizer(vsyn.VertiMRFConfig(**{**FAST, **params}))
    budget = Budget(budget, 1e-5)
    ledger = PrivacyLedger(budget)
    ledger.plan(syn.plan(PlanContext(data.domain, part, budget)))
    syn.fit(VerticalData(part, part.views(data)), ledger, np.random.default_rng(seed))
    return syn, calls


def test_init_starts_at_the_product_of_the_local_models(monkeypatch):
    _, calls = fit_recording(monkeypatch, {})
    meas, kw, res = calls[0]
    assert kw["warm_start"] is not None
    start = kw["warm_start"]
    for m in meas:  # every local marginal InitMRF fits is already the start's marginal
        assert np.allclose(start.marginal(m.attributes).transpose(m.attributes).values, m.values,
                           rtol=1e-6, atol=1e-6 * kw["total"])
    assert res.losses[0] <= 1e-8 * kw["total"] and len(res.losses) - 1 <= 10   # accepted steps (momentum restarts aside)
    _, cold = fit_recording(monkeypatch, {"local_start": False})
    assert cold[0][1]["warm_start"] is None and cold[0][2].losses[-1] > res.losses[-1]


def test_rounds_shorter_except_the_last(monkeypatch):
    syn, calls = fit_recording(monkeypatch, {"round_iters": 7, "encoder_params": {"t": 1000}}, budget=200.0,
                               parts=(("a",), ("b", "d"), ("c", "e")))
    opt = calls[1:]
    assert len(opt) >= 2, "the toy data should give OptMRF rounds"
    assert [c[1]["iters"] for c in opt] == [7] * (len(opt) - 1) + [FAST["iters"]]
    assert all(c[1]["step"] is None or c[1]["step"] > 0 for c in opt)
    with pytest.raises(ConfigError, match="round_iters"):
        vsyn.VertiMRFConfig(round_iters=0)


def test_step_warm_start_continues_the_descent():
    dom = Domain(["x", "y", "z"], [3, 4, 2])
    rng = np.random.default_rng(1)
    meas = [Measurement(("x", "y"), rng.random((3, 4)) * 100 + 5, 1.0),
            Measurement(("y", "z"), rng.random((4, 2)) * 100 + 5, 2.0)]
    first = estimate(dom, meas, iters=40)
    assert first.step > 0
    more = estimate(dom, meas, iters=40, warm_start=first.model, step=first.step)
    assert more.losses[0] == pytest.approx(first.losses[-1], rel=1e-6)
    assert more.losses[-1] <= first.losses[-1]


def test_estimation_runs_blas_on_one_thread_and_restores_it():
    """Why the server's OptMRF grew with n (docs/scale.md): past ~10k measurement cells OpenBLAS threads its dot
    products and its spinning workers cost 5x the CPU of a step; estimation pins BLAS to one thread, then restores."""
    from threadpoolctl import threadpool_info, threadpool_limits

    def blas_threads() -> list[int]:
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    dom = Domain(["x", "y"], [3, 4])
    meas = [Measurement(("x", "y"), np.arange(12.0).reshape(3, 4) + 5, 1.0)]
    seen: list[list[int]] = []
    with threadpool_limits(2, user_api="blas"):   # as on a multi-core machine, whatever this one has
        before = blas_threads()
        estimate(dom, meas, iters=3, callback=lambda it, loss: seen.append(blas_threads()))
        after = blas_threads()
    assert before and set(before) == {2}
    assert seen and all(set(t) == {1} for t in seen)
    assert after == before


def test_server_fits_stop_at_the_tolerance_per_measured_cell(monkeypatch):
    """VertiMRF's server fits: momentum "auto" by default (only where plain descent would be cut off far from the
    stop: pgm.estimation), and estimate's atol = fit_tolerance × measured cells; fit_tolerance = 0 gives the plain
    fixed-budget fits (no momentum), and fit_accelerate = true / false passes momentum always / never."""
    _, calls = fit_recording(monkeypatch, {})
    assert calls and all(kw["accelerate"] == "auto" for _, kw, _ in calls)
    for meas, kw, _ in calls:
        assert kw["atol"] == pytest.approx(1e-2 * sum(m.values.size for m in meas))
    _, plain = fit_recording(monkeypatch, {"fit_tolerance": 0})
    assert all(kw["atol"] is None and kw["accelerate"] is False for _, kw, _ in plain)
    for setting in (True, False):
        _, got = fit_recording(monkeypatch, {"fit_accelerate": setting})
        assert all(kw["accelerate"] is setting for _, kw, _ in got)
    for bad in (-1.0, float("inf"), "x"):
        with pytest.raises(ConfigError, match="fit_tolerance"):
            vsyn.VertiMRFConfig(fit_tolerance=bad)
    for bad in ("sometimes", 1):
        with pytest.raises(ConfigError, match="fit_accelerate"):
            vsyn.VertiMRFConfig(fit_accelerate=bad)
