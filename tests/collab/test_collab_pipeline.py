"""The [collab] pipeline mode: horizontal custodians, secure aggregation into marginal synthesizers,
DP binning (combined or local), tuning labels, publish once, and clear errors on bad input."""
import json

import numpy as np
import pytest
from deploy_helpers import cli as role

from vertisynth.collab.horizontal import secure_measure, simulate_custodians
from vertisynth.collab.secure_aggregation import NoisyShare
from vertisynth.run.config import parse_config
from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.errors import ConfigError, DataError
from vertisynth.core.interfaces import MarginalQuery
from vertisynth.run.pipeline import make_plan, run
from vertisynth.core.privacy import Budget, PrivacyLedger
from vertisynth.collab.horizontal import query_charges
from vertisynth.plugins.datasets.census import CensusConfig, load

PAIRS = [["age", "income"], ["education", "income"], ["sex", "income"]]


def _cfg(epsilon=2.0, n=2000, synth=None, collab=None, evaluators=None, holdout=None, **extra):
    data = {"seed": 5, "budget": {"epsilon": epsilon, "delta": 1e-5},
            "dataset": {"name": "census", "params": {"n": n}},
            "synthesizer": synth or {"use": "private_pgm",
                                     "params": {"measurements": "workload", "iters": 60, "workload": PAIRS}},
            "evaluators": evaluators or [{"use": "workload_error"}],
            "collab": {"custodians": 2, **(collab or {})}, **extra}
    if holdout:
        data["evaluation"] = {"holdout": holdout}
    return parse_config(data)


def test_secure_measurement_equals_the_combined_counts_up_to_the_noise():
    dom = Domain(["a", "b"], [3, 2])
    rng = np.random.default_rng(0)
    parts = {c: Dataset(rng.integers(0, [3, 2], size=(500, 2)), dom) for c in ("x", "y", "z")}
    queries = [MarginalQuery("q1", [("a",), ("a", "b")], 1e6, 2 ** 0.5)]
    ledger = PrivacyLedger(Budget(1e9, 1e-5))
    ledger.plan(query_charges(queries))
    (ans,), (var,) = secure_measure(queries, parts, 3, ledger, rng)
    joined = Dataset(np.vstack([p.codes for p in parts.values()]), dom)
    truth = np.concatenate([joined.counts(["a"]).values.ravel(), joined.counts(["a", "b"]).values.ravel()])
    assert np.abs(ans - truth).max() <= 3   # σ ≈ 1e-3 per server; rounding to integers
    assert var == pytest.approx(3 * (2 / (2 * 1e6)))   # S·σ², σ² = Δ²/(2ρ)
    assert not ledger.unspent() and len(ledger.spent) == 1


def test_horizontal_run_at_large_epsilon_approaches_the_truth(tmp_path):
    cfg = _cfg(epsilon=5000.0, n=3000)
    res = run(cfg, tmp_path)
    assert res.metrics["workload_error"]["l1_1way"] < 0.04
    real, syn = res.real_codes, res.synthetic_codes
    for pair in PAIRS:   # the measured 2-way marginals are reproduced
        p = real.counts(pair).values.ravel() / real.n
        q = syn.counts(pair).values.ravel() / syn.n
        assert np.abs(p - q).sum() < 0.08
    rep = json.loads((tmp_path / "report.json").read_text())
    assert rep["mode"].startswith("horizontal custodians")
    assert rep["collab"]["custodians"] == {"custodian1": 1500, "custodian2": 1500}
    # every release went through the ledger: 15 one-way + 3 pairs, nothing planned left unspent
    assert len(rep["privacy"]["charges"]) == 18 and not rep["privacy"]["planned_but_unspent"]
    assert rep["privacy"]["spent_epsilon"] == pytest.approx(5000.0, rel=1e-6)


def test_dpsyn_runs_on_securely_aggregated_two_way_marginals(tmp_path):
    cfg = _cfg(epsilon=200.0, n=2000, synth={"use": "dpsyn", "params": {"selection": "all", "rounds": 5}},
               evaluators=[{"use": "workload_error", "params": {"ways": [2], "marginals": 20}}])
    res = run(cfg, tmp_path)
    assert res.metrics["workload_error"]["l1_2way"] < 0.25
    assert [c.mechanism for c in res.ledger.spent] == ["distributed_gaussian"]   # one vector of all pairs


def test_combined_binning_is_shared_and_local_binning_differs_per_custodian(tmp_path):
    common = {"custodians": 3, "split": "sorted:age", "numeric": {"age": [17, 90]}, "bins": 4}
    comb = run(_cfg(epsilon=50.0, collab=common), tmp_path / "c").report["collab"]["numeric_bins"]["age"]
    loc = run(_cfg(epsilon=50.0, collab={**common, "preprocessing": "local"}), tmp_path / "l")
    bins = loc.report["collab"]["numeric_bins"]["age"]
    assert len(comb["edges"]) == 1 and len(bins["edges"]) == 3
    medians = [e[2] for e in bins["edges"]]   # sorted by age: the young custodian's median is the lowest
    assert medians[0] < medians[1] < medians[2]
    # local binning charges its release once (parallel composition over disjoint custodians)
    notes = [c.get("note", "") for c in loc.report["privacy"]["charges"] if "age:" in c.get("note", "") or
             c["mechanism"] == "distributed_gaussian"]
    assert any("parallel" in n for n in notes)
    assert loc.ledger.spent_epsilon() == pytest.approx(50.0, rel=1e-6)
    ages = loc.synthetic["age"]   # de-binned to raw ages inside the public bounds
    assert ages.between(17, 90).all()


def test_simulated_split_is_a_partition():
    frame = load(CensusConfig(n=101)).frame
    parts = simulate_custodians(frame, 3, "random", np.random.default_rng(0))
    assert sum(len(p) for p in parts.values()) == 101
    parts = simulate_custodians(frame, 2, "sorted:age", np.random.default_rng(0))
    assert parts["custodian1"]["age"].max() <= parts["custodian2"]["age"].min()


def _custodian_files(tmp_path, drop=None, extra=None):
    frame = load(CensusConfig(n=600)).frame
    paths = {}
    for i, (name, part) in enumerate(simulate_custodians(frame, 2, "random", np.random.default_rng(1)).items()):
        if i == 1 and drop:
            part = part.drop(columns=[drop])
        if i == 1 and extra:
            part = part.assign(**{extra: 1})
        paths[name] = str(tmp_path / f"{name}.csv")
        part.to_csv(paths[name], index=False)
    return paths


def test_custodian_csvs_run_and_different_schemas_are_refused(tmp_path):
    files = _custodian_files(tmp_path)
    res = run(_cfg(epsilon=20.0, collab={"files": files}), tmp_path / "ok")
    assert set(res.report["collab"]["custodians"]) == {"custodian1", "custodian2"}
    with pytest.raises(DataError, match="custodian 'custodian2' has a different schema: lacks \\['income'\\]"):
        run(_cfg(collab={"files": _custodian_files(tmp_path, drop="income")}))
    with pytest.raises(DataError, match="has extra columns \\['shoe_size'\\]"):
        run(_cfg(collab={"files": _custodian_files(tmp_path, extra="shoe_size")}))


@pytest.mark.parametrize("change, error, match", [
    ({"collab": {"custodians": 2, "servers": 1}}, ConfigError, "servers must be >= 2"),
    ({"collab": {"custodians": 2, "numerics": {}}}, ConfigError, "unknown key 'numerics'.*did you mean 'numeric'"),
    ({"collab": {"custodians": 2, "numeric": {"sex": [0, 1]}}}, ConfigError, "non-numeric categories"),
    ({"collab": {"custodians": 2, "numeric": {"agee": [0, 1]}}}, ConfigError, "'agee' is not in the dataset"),
    ({"parties": [{"attributes": ["age"]}]}, ConfigError, "vertical split"),
    ({"synthesizer": {"use": "vertimrf"}}, ConfigError, "choose one of \\['dpsyn', 'private_pgm'\\]"),
    ({"synthesizer": {"use": "private_pgm"}}, ConfigError, "measurements = 'workload'"),
    ({"synthesizer": {"use": "dpsyn", "params": {"noise": "laplace"}}}, ConfigError, "Gaussian noise"),
])
def test_bad_collab_configs_fail_before_any_data_is_read(change, error, match):
    base = {"seed": 1, "budget": {"epsilon": 1.0, "delta": 1e-5}, "dataset": {"name": "census"},
            "synthesizer": {"use": "private_pgm", "params": {"measurements": "workload"}},
            "collab": {"custodians": 2}}
    base.update(change)
    with pytest.raises(error, match=match):
        make_plan(parse_config(base))


def test_tuning_thresholds_and_metrics_are_checked_against_the_metric_range():
    tune = {"grid": {"iters": [10, 20]}, "folds": 2}
    with pytest.raises(ConfigError, match="outside the range \\[0.0, 2.0\\] of 'dp_workload.l1'"):
        make_plan(_cfg(collab={"tuning": {**tune, "thresholds": {"custodian1": 3.0}}}))
    with pytest.raises(ConfigError, match="outside the range \\[0.0, 1.0\\] of 'ml_utility.lr_accuracy_synthetic'"):
        make_plan(_cfg(collab={"tuning": {**tune, "method": "paper", "metric": "ml_utility.lr_accuracy_synthetic",
                                          "thresholds": {"custodian2": 1.5}}}))
    with pytest.raises(ConfigError, match="outside the range \\[0.5, 1.0\\]"):
        make_plan(_cfg(collab={"tuning": {**tune, "method": "paper", "metric": "membership_attack.auc",
                                          "thresholds": {"custodian2": 0.2}}}))
    with pytest.raises(ConfigError, match="unknown custodian\\(s\\) \\['hospital9'\\]"):
        make_plan(_cfg(collab={"tuning": {**tune, "thresholds": {"hospital9": 0.1}}}))
    with pytest.raises(ConfigError, match="would read real rows without noise"):
        make_plan(_cfg(collab={"tuning": {**tune, "metric": "ml_utility.lr_accuracy_synthetic"}}))
    with pytest.raises(ConfigError, match="method 'paper' scores folds with an evaluator"):
        make_plan(_cfg(collab={"tuning": {**tune, "method": "paper"}}))
    with pytest.raises(ConfigError, match="unknown key 'itres'"):
        make_plan(_cfg(collab={"tuning": {"grid": {"itres": [10]}}}))


TUNE = {"grid": {"iters": [10, 40], "bins": [3, 5]}, "folds": 2, "expected_runs": 2.0}


def test_sound_tuning_publishes_once_and_accounts_the_selection(tmp_path):
    cfg = _cfg(epsilon=4.0, n=1500, collab={"numeric": {"age": [17, 90]}, "tuning": TUNE})
    # the candidate draws (K and the picks) come from the OS CSPRNG: K = 0 publishes nothing, so this test fixes
    # them with an explicit test secret (labelled in the outputs), as a reproducible run does
    plan = make_plan(cfg)
    plan.test_secret = bytes.fromhex("5e0b9d3c71a2f4e8c6b1d0a9e7f35c24")
    res = plan.execute(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["ledger.json", "report.json", "summary.md", "synthetic.csv"]
    assert len(res.synthetic) == res.synthetic_codes.n > 0
    t = res.report["collab"]["tuning"]
    assert t["method"] == "private_selection" and t["label"].startswith("sound")
    assert t["chosen"] in [{"iters": i, "bins": b} for i in (10, 40) for b in (3, 5)]
    # only the selected run's DP score is released (the theorem covers the best output, not every run's)
    assert len(t["dp_scores"]) == 1 and 0 <= t["dp_scores"][0]["dp_score"] <= 2
    assert t["dp_scores"][0]["params"] == t["chosen"]
    stages = res.report["privacy"]["per_stage_epsilon"]
    assert {"tuning", "secure_aggregation"} <= set(stages)
    costs = res.report["collab"]["costs"]
    assert costs["accounted_epsilon"] == pytest.approx(4.0, rel=1e-6)
    assert costs["paper_claimed_epsilon"] < costs["accounted_epsilon"]
    bins = t["chosen"]["bins"]   # the final run used the chosen binning
    assert len(res.report["collab"]["numeric_bins"]["age"]["edges"][0]) == bins + 1


def test_paper_tuning_is_labelled_everywhere_and_publishes_nothing_when_the_vote_fails(tmp_path):
    tune = {**TUNE, "method": "paper", "metric": "workload_error.l1_1way", "thresholds": {"custodian1": 0.0}}
    res = run(_cfg(epsilon=2.0, n=1200, collab={"tuning": {**tune, "grid": {"iters": [10, 20]}}}), tmp_path)
    assert not (tmp_path / "synthetic.csv").exists() and res.synthetic_codes.n == 0
    label = "paper: tuning not accounted — not sound"
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["collab"]["tuning"]["label"] == label and report["collab"]["costs"]["label"] == label
    assert json.loads((tmp_path / "ledger.json").read_text())["tuning_accounting"] == label
    assert label in (tmp_path / "summary.md").read_text(encoding="utf-8")
    assert res.report["collab"]["tuning"]["candidate_runs"] == 2   # every candidate failed the vote
    assert res.report["collab"]["costs"]["honest_composition_epsilon"] > 2.0   # their fold runs, composed


def test_paper_tuning_via_cli_prints_its_label_and_both_costs(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("""seed = 2
budget = { epsilon = 2.0, delta = 1e-5 }
[dataset]
name = "census"
params = { n = 1000 }
[synthesizer]
use = "private_pgm"
params = { measurements = "workload", iters = 20, workload = [["sex", "income"]] }
[[evaluators]]
use = "workload_error"
[collab]
custodians = 2
[collab.tuning]
method = "paper"
folds = 2
grid = { iters = [10, 20] }
metric = "workload_error.l1_1way"
thresholds = { custodian1 = 2.0, custodian2 = 2.0 }
""")
    out = role("run", str(cfg), "-o", str(tmp_path / "o"), "-q", ok=False)
    assert out.returncode == 0, out.stderr
    assert "paper: tuning not accounted — not sound" in out.stdout
    assert "chosen {'iters': 10}" in out.stdout   # the first candidate every custodian votes for
    assert "the paper's argument would claim" in out.stdout and "horizontal custodians" in out.stdout
    assert (tmp_path / "o" / "synthetic.csv").is_file()


def test_a_missing_server_message_is_a_clear_error(tmp_path):
    """Separate processes exchanging files: reconstruct refuses when one server's noisy share is missing."""
    dom = tmp_path / "d.json"
    dom.write_text(json.dumps({"0": {"type": "discrete", "domain": 3}, "1": {"type": "discrete", "domain": 2}}))
    csv = tmp_path / "a.csv"
    csv.write_text("0,1\n0,1\n2,0\n1,1\n")
    role("collab", "share", "--local-only", "--custodian", "A", "--csv", str(csv), "--domain", str(dom), "--marginal",
         "0,1", "--servers", "2", "--out", str(tmp_path / "in"), "--seed", "1")
    role("collab", "aggregate", "--local-only", "--server", "0", "--rho", "1", "--inbox", str(tmp_path / "in"),
         "--out", str(tmp_path / "out"), "--seed", "2")
    out = role("collab", "reconstruct", "--local-only", "--outbox", str(tmp_path / "out"), "--out",
               str(tmp_path / "r.npz"), ok=False)
    assert out.returncode == 2 and "need one noisy share from each of 2 servers, got servers [0]" in out.stderr
    assert NoisyShare.load(next((tmp_path / "out").glob("*.npz"))).server == 0


def test_table1_study_names_local_and_combined_binning_as_methods():
    import tomllib
    from pathlib import Path

    from vertisynth.study.grid import apply_quick, expand_grid
    from vertisynth.study.runner import method_labels

    data = tomllib.loads((Path(__file__).resolve().parents[2] / "studies" / "collab_table1.toml").read_text())
    cells = expand_grid(apply_quick(data))
    assert method_labels([c.config for c in cells]) == ["private_pgm[collab.preprocessing=local]",
                                                       "private_pgm[collab.preprocessing=combined]"]
    make_plan(parse_config(cells[0].config))   # the quick cell plans (census, public bounds)


@pytest.mark.shared_data
def test_table1_study_plans_on_adult(data_dir):
    import tomllib
    from pathlib import Path

    from vertisynth.study.grid import expand_grid

    data = tomllib.loads((Path(__file__).resolve().parents[2] / "studies" / "collab_table1.toml").read_text())
    cells = expand_grid(data, str(data_dir))
    assert len(cells) == 2 * 2 * 2 * 3
    plan = make_plan(parse_config(cells[0].config), data_dir=str(data_dir))
    assert plan.run.base.domain.size("age") == 16 and plan.custodians == ["custodian1", "custodian2"]


def test_sound_tuning_that_fails_the_vote_publishes_nothing_but_pays_for_the_tuning(tmp_path):
    tune = {"grid": {"iters": [10]}, "folds": 2, "expected_runs": 3.0, "thresholds": {"custodian2": 0.0}}
    res = run(_cfg(epsilon=3.0, n=800, collab={"tuning": tune}), tmp_path)
    assert not (tmp_path / "synthetic.csv").exists() and not res.report["collab"]["published"]
    spent = {c.stage for c in res.ledger.spent}
    shown = res.report["collab"]["tuning"]["dp_scores"]   # the best run only (none when K = 0)
    # the test-fold marginals and the selection are spent whatever the outcome (the vote itself is DP)
    assert spent == {"tuning"} and res.ledger.spent_epsilon() > 0
    assert not shown or shown[0]["votes"] == 1


@pytest.mark.parametrize("name, params", [
    ("private_pgm", {"measurements": "workload", "iters": 30}),
    ("dpsyn", {"selection": "all", "rounds": 3}),
])
def test_horizontal_synthesizers_pass_the_kits_contract(name, params):
    from vertisynth.core.registry import default_registry
    from vertisynth.testing.checks import Subject, check_horizontal_contract

    spec = default_registry().get("synthesizer", name)
    check_horizontal_contract(Subject("synthesizer", name, spec.load_factory(), spec.load_config_cls(), params, spec))


def test_the_kit_catches_an_understated_sensitivity():
    from vertisynth.core.interfaces import MarginalQuery
    from vertisynth.plugins.synthesizers.dpsyn.synthesizer import DPSynConfig, DPSynSynthesizer
    from vertisynth.testing.checks import ConformanceError, Subject, check_horizontal_contract

    class Sloppy(DPSynSynthesizer):   # all pairs as one vector, but sensitivity 1 instead of √k
        def marginal_queries(self, domain, rho):
            (q,) = super().marginal_queries(domain, rho)
            return [MarginalQuery(q.name, q.marginals, q.rho, 1.0)]

    with pytest.raises(ConformanceError, match="declares L2 sensitivity 1, below"):
        check_horizontal_contract(Subject("synthesizer", "sloppy", Sloppy, DPSynConfig, {"selection": "all"}))
