"""VertiMRF's GraphCom rule keeps the dependence between many-valued attributes held by different parties."""
import numpy as np
import pytest

from vertisynth.run.config import parse_config
from vertisynth.run.pipeline import run
from vertisynth.plugins.datasets.zoo import correlation_of
from vertisynth.plugins.synthesizers.vertimrf.synthesizer import dependence_evidence


def _hospital(n, eps, **params):
    cfg = parse_config({"seed": 1, "budget": {"epsilon": eps, "delta": 1e-5},
                        "dataset": {"name": "zoo", "params": {"preset": "hospital-insurer", "n": n, "seed": 1}},
                        "synthesizer": {"use": "vertimrf", "params": params}, "evaluators": []})
    res = run(cfg)
    t = np.zeros((70, 40))
    np.add.at(t, (res.synthetic["age"].to_numpy(int), res.synthetic["claims"].to_numpy(int)), 1)
    return correlation_of(t), res.report["synthesizer"]["model"]


def test_a_many_valued_cross_pair_is_kept_and_its_correlation_survives():
    corr, model = _hospital(20000, 2.0)     # truth: corr(age, claims) = 0.59, 70 x 40 values
    linked = [g for g in model["graph_combination"] if g["added"]]
    assert ["age", "claims"] in [g["pair"] for g in linked]
    assert ["age", "claims"] in model["cross_party_marginals"]
    assert corr >= 0.3
    assert model["notes"] == []


def test_no_cross_party_edge_is_said():
    # τ = 60: the pairs that pass the test (age x claims, age x plan, sex x claims: 80 cells) do not fit, and
    # sex x plan (8 cells, no dependence) fails the test, so nothing is linked (and no fallback: pairs passed)
    _, model = _hospital(5000, 1.0, max_clique_cells=60)
    assert not any(g["added"] for g in model["graph_combination"])
    assert any("synthesised as independent" in n for n in model["notes"])


def test_the_evidence_is_per_cell_not_per_table():
    """An 8 x 8 binned table at n 20,000 with the encoder's noise (std 300 a cell, as DPFM gives at ε 2): the old
    rule (R-score above the sum of every cell's noise) drops a real linear trend; the test keeps it, and keeps
    independent tables out at about its nominal level."""
    rng = np.random.default_rng(0)
    u = np.linspace(-1, 1, 8)
    trend = np.exp(1.5 * np.outer(u, u))
    trend = 20000 * trend / trend.sum()
    assert correlation_of(trend) == pytest.approx(0.56, abs=0.01)
    null = np.full((8, 8), 20000 / 64)
    var = np.full((8, 8), 300.0**2)
    draws = [dependence_evidence(null + rng.normal(0, 300, (8, 8)), var)["z"] for _ in range(40)]
    assert sum(z >= 3 for z in draws) <= 2
    noisy = trend + rng.normal(0, 300, (8, 8))
    ev = dependence_evidence(noisy, var)
    assert ev["z_trend"] > 3 and ev["z"] == pytest.approx(max(ev["z_chi"], abs(ev["z_trend"])))
    old_noise = 0.5 * np.sqrt(var).sum() * np.sqrt(2 / np.pi)
    assert ev["r_score"] < old_noise   # what the old rule compared: the pair would have been dropped
    # without encoder noise z_chi is Pearson's chi-square test on a sample
    sample = rng.multinomial(20000, (trend / trend.sum()).ravel()).reshape(8, 8).astype(float)
    assert dependence_evidence(sample, np.zeros((8, 8)))["z_chi"] > 10


def test_the_cli_and_summary_say_when_parties_come_out_independent(tmp_path):
    from click.testing import CliRunner

    from vertisynth.cli import main

    cfg = tmp_path / "run.toml"
    cfg.write_text('seed = 1\nbudget = { epsilon = 1.0, delta = 1e-5 }\n'
                   '[dataset]\nname = "zoo"\nparams = { preset = "hospital-insurer", n = 3000 }\n'
                   '[synthesizer]\nuse = "vertimrf"\nparams = { max_clique_cells = 6, iters = 100 }\n'
                   '[[evaluators]]\nuse = "tvd"\nparams = { ways = [2], marginals = 3 }\n')
    res = CliRunner().invoke(main, ["run", str(cfg), "--out", str(tmp_path / "out"), "--quiet"])
    assert res.exit_code == 0, res.output
    assert "synthesised as independent" in res.output
    assert "synthesised as independent" in (tmp_path / "out" / "summary.md").read_text()


def test_the_interaction_scale_is_the_median_dispersion_clipped():
    from vertisynth.plugins.synthesizers.vertimrf.synthesizer import interaction_scale

    assert interaction_scale([0.1, 0.12, 5.0]) == pytest.approx(0.12)
    assert interaction_scale([3.0, 4.0]) == 1.0 and interaction_scale([0.0, 0.001]) == 0.02
    assert interaction_scale([]) == 1.0
