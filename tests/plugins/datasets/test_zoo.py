"""The `zoo` dataset: generated tables with known truth, one network per preset and seed."""
import numpy as np
import pytest

from vertisynth.run.config import parse_config
from vertisynth.core.errors import ConfigError
from vertisynth.run.pipeline import make_plan, run
from vertisynth.plugins.datasets.zoo import ZOO_PRESETS, ZooConfig, correlation_of, load, source


def test_same_seed_same_table_and_other_seed_another():
    a, b = load(ZooConfig("mixed", n=2000, seed=3)), load(ZooConfig("mixed", n=2000, seed=3))
    c = load(ZooConfig("mixed", n=2000, seed=4))
    assert a.frame.equals(b.frame) and a.default_parties == b.default_parties
    assert not a.frame.equals(c.frame)


@pytest.mark.parametrize("preset", sorted(ZOO_PRESETS))
def test_every_preset_has_its_shape(preset):
    shape = ZOO_PRESETS[preset]
    src = source(ZooConfig(preset, n=500, seed=1))
    data = src.load()
    sizes = data.domain.shape
    assert len(sizes) == shape.attributes == data.frame.shape[1] and len(data.frame) == 500
    assert min(sizes) >= shape.domain[0] and max(sizes) <= shape.domain[1]
    parties = [list(p) for p in src.default_parties]
    assert len(parties) == shape.parties and all(parties)
    assert sorted(a for p in parties for a in p) == sorted(data.domain.attributes)
    # every code is inside its domain, and the truth is a probability table
    assert (data.frame.to_numpy().max(axis=0) < np.array(sizes)).all()
    assert data.truth(data.domain.attributes[:2]).values.sum() == pytest.approx(1.0)


def test_the_known_dependence_is_in_the_sample():
    cfg = ZooConfig("strong", n=20000, seed=0)
    net, data = cfg.network(), load(cfg)
    owner = {a: i for i, p in enumerate(net.party_split) for a in p}
    cross = [(p, c) for c in net.names for p in net.parents[c] if owner[p] != owner[c]]
    a, b = max(cross, key=lambda e: abs(net.correlation(*e)))
    truth = net.correlation(a, b)
    assert abs(truth) > 0.5   # a strong preset has a strong cross-party edge
    counts = np.zeros((net.sizes[a], net.sizes[b]))
    np.add.at(counts, (data.frame[a].to_numpy(), data.frame[b].to_numpy()), 1)
    assert correlation_of(counts) == pytest.approx(truth, abs=0.03)
    assert 0.5 * np.abs(counts / counts.sum() - net.marginal([a, b]).values).sum() < 0.05


def test_unknown_preset_names_the_choices():
    with pytest.raises(ConfigError, match="unknown preset 'huge'.*small-domains.*many-parties"):
        ZooConfig("huge")
    with pytest.raises(ConfigError, match="n must be >= 1"):
        ZooConfig("wide", n=0)


def test_zoo_runs_through_a_config():
    cfg = parse_config({"seed": 1, "budget": {"epsilon": 1.0, "delta": 1e-5},
                        "dataset": {"name": "zoo", "params": {"preset": "small-split", "n": 1000, "seed": 2}},
                        "synthesizer": {"use": "independent"},
                        "evaluators": [{"use": "tvd", "params": {"ways": [2], "marginals": 5}}]})
    plan = make_plan(cfg)
    assert len(plan.partition) == 2
    res = run(cfg)
    assert list(res.synthetic.columns) == [f"x{i:02d}" for i in range(5)] and abs(len(res.synthetic) - 1000) < 50


def test_the_hospital_insurer_scenario_is_fixed_and_many_valued():
    data = load(ZooConfig("hospital-insurer", n=3000, seed=1))
    assert data.party_names == ["hospital", "insurer"] and data.default_parties == [["age", "sex"], ["claims", "plan"]]
    assert data.domain.shape == (70, 2, 40, 4)
    assert correlation_of(data.truth(["age", "claims"]).values) == pytest.approx(0.59, abs=0.01)
