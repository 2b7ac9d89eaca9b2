"""Binned linear-query measurements in the engine, and VertiMRF's recovery = "query" that uses them."""
import numpy as np
import pytest

from vertisynth.core.domain import Domain
from vertisynth.core.errors import ConfigError, DomainError
from vertisynth.run.pipeline import run
from vertisynth.pgm import Measurement, estimate
from vertisynth.pgm.estimation import bin_sum

from test_vertimrf import _cfg, _correlated, _fit


def test_bin_sum_is_the_linear_query():
    x = np.arange(24.0).reshape(6, 4)
    bins = np.array([0, 0, 1, 1, 1, 2])
    out = bin_sum(x, 0, bins)
    assert out.shape == (3, 4)
    np.testing.assert_allclose(out, [x[:2].sum(0), x[2:5].sum(0), x[5]])
    np.testing.assert_allclose(bin_sum(x, 1, np.array([1, 0, 1, 0])), np.stack([x[:, [1, 3]].sum(1), x[:, [0, 2]].sum(1)], 1))


def test_noiseless_binned_measurements_are_matched_and_loss_decreases():
    rng = np.random.default_rng(0)
    dom = Domain(["a", "b", "c"], [6, 4, 3])
    p = rng.dirichlet(np.ones(dom.size())).reshape(dom.shape) * 10_000
    bins_a = np.array([0, 0, 1, 1, 2, 2])
    ab = p.sum(2)
    meas = [Measurement(("a",), ab.sum(1)), Measurement(("c",), p.sum((0, 1))),
            Measurement(("b", "a"), bin_sum(ab, 0, bins_a).T, 1.0, {"a": bins_a})]
    res = estimate(dom, meas, total=10_000, iters=2000, tol=0)
    assert all(x >= y - 1e-9 * abs(x) for x, y in zip(res.losses, res.losses[1:]))   # monotone
    fit = res.model.marginal(("b", "a")).values
    np.testing.assert_allclose(bin_sum(fit, 1, bins_a), bin_sum(ab, 0, bins_a).T, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(res.model.marginal(("a",)).values, ab.sum(1), rtol=1e-4)


def test_bad_bins_are_clear_errors():
    dom = Domain(["a", "b"], [4, 2])
    with pytest.raises(ConfigError, match="not measured"):
        Measurement(("a",), np.ones(2), 1.0, {"b": np.array([0, 1])})
    with pytest.raises(ConfigError, match="every bin used"):
        Measurement(("a",), np.ones(3), 1.0, {"a": np.array([0, 0, 2, 2])})
    with pytest.raises(DomainError, match="cover 3 values"):
        estimate(dom, [Measurement(("a",), np.ones(2), 1.0, {"a": np.array([0, 0, 1])})], iters=1)
    with pytest.raises(DomainError, match="shape"):
        estimate(dom, [Measurement(("a",), np.ones(3), 1.0, {"a": np.array([0, 0, 1, 1])})], iters=1)


def test_vertimrf_query_recovery_needs_no_value_distributions_and_spends_its_plan():
    data = _correlated(4000)
    parts = [["a", "b", "c"], ["d", "e"]]
    syn, ledger, _ = _fit(data, parts, {"bins": 4, "recovery": "query"})
    assert not ledger.unspent()
    assert syn.budget_split()["value_distributions"] == 0.0
    assert not any(c.stage == "value_distributions" for c in ledger.spent)
    cross = [m for m in syn._measurements if set(m.attributes) & {"a", "b", "c"} and set(m.attributes) & {"d", "e"}]
    assert cross, "no cross-party marginal was measured"
    for m in cross:   # b (8 values) is binned to 4: its measurements are binned queries, nothing else is
        assert (m.bins is not None and set(m.bins) == {"b"}) == ("b" in m.attributes)
        assert m.values.shape == tuple(4 if a == "b" else data.domain.size(a) for a in m.attributes)


def test_vertimrf_query_recovery_from_config_is_deterministic():
    params = {"encoder_params": {"t": 200}, "local_params": {"iters": 40, "refine_iters": 10}, "iters": 60,
              "rounds": 2, "per_round": 2, "recovery": "query"}
    a = run(_cfg(synthesizer={"use": "vertimrf", "params": params}))
    b = run(_cfg(synthesizer={"use": "vertimrf", "params": params}))
    assert a.synthetic.equals(b.synthetic)
    assert "value_distributions" not in a.report["privacy"]["per_stage_epsilon"]
    assert not a.ledger.unspent()
    assert a.report["synthesizer"]


def test_query_recovery_without_local_models_is_refused():
    from vertisynth.plugins.synthesizers.vertimrf.synthesizer import VertiMRFConfig

    with pytest.raises(ConfigError, match="use_local = false set recovery = 'hisrec'"):
        VertiMRFConfig(use_local=False, local_fraction=0.0, recovery="query")
    VertiMRFConfig(use_local=False, local_fraction=0.0, recovery="hisrec")
