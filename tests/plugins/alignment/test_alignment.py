"""PSI / PSU protocols, synthetic fill and ID-keyed pipeline runs (issue 7)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.stats import chi2_contingency

from vertisynth.core.dataset import Dataset, VerticalPartition
from vertisynth.core.domain import Domain
from vertisynth.core.errors import ConfigError, DataError, MessageError
from vertisynth.core.interfaces import Alignment, PlanContext
from vertisynth.core.privacy import Budget, PrivacyLedger, ZCDP
from vertisynth.plugins.alignment import group
from vertisynth.plugins.alignment.fill import ColumnFill
from vertisynth.plugins.alignment.private_sets import PSIAligner, PSIConfig, PSUAligner, PSUConfig
from vertisynth.plugins.alignment.protocol import BlindedSet, make_parties, simulate

IDS = st.text(alphabet=st.sampled_from(list("abcxyz019 éß😀")), min_size=1, max_size=4).map(lambda s: s.strip() or "q")


def _psi_rows(ids, results):
    return {p: [ids[p][i] for i in r.rows] for p, r in results.items()}


def _psu_table(ids, results):
    n = next(iter(results.values())).n_common
    table: list[set] = [set() for _ in range(n)]
    for p, r in results.items():
        for i, pos in enumerate(r.rows):
            table[pos].add(ids[p][i])
    return table


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(IDS, max_size=12, unique=True), min_size=2, max_size=3), st.integers(0, 2**32 - 1))
def test_psi_and_psu_match_plain_set_operations(sets, seed):
    ids = {f"P{i}": s for i, s in enumerate(sets)}
    inter = set.intersection(*map(set, sets))
    union = set().union(*map(set, sets))
    psi = simulate(make_parties("psi", ids, np.random.default_rng(seed)))
    rows = _psi_rows(ids, psi)
    assert set(rows["P0"]) == inter and len(rows["P0"]) == len(inter)
    assert all(r == rows["P0"] for r in rows.values())  # one common order: the rows line up
    psu = simulate(make_parties("psu", ids, np.random.default_rng(seed)))
    table = _psu_table(ids, psu)
    assert len(table) == len(union)
    assert all(len(cell) == 1 for cell in table)  # every UID is one identifier, held consistently
    assert set().union(*table) == union if table else not union


def test_identical_disjoint_and_empty_sets():
    same = {"A": ["1", "2", "3"], "B": ["3", "1", "2"]}
    assert simulate(make_parties("psi", same))["A"].n_common == 3
    assert simulate(make_parties("psu", same))["B"].n_common == 3
    disjoint = {"A": ["1", "2"], "B": ["3"]}
    assert simulate(make_parties("psi", disjoint))["A"].n_common == 0
    res = simulate(make_parties("psu", disjoint))
    assert res["A"].n_common == 3 and not res["A"].held_mask()[res["B"].rows].any()
    empty = {"A": [], "B": ["x"]}
    assert simulate(make_parties("psi", empty))["B"].rows.size == 0
    assert simulate(make_parties("psu", empty))["B"].n_common == 1


def _views(n_rows: dict[str, int]) -> dict[str, Dataset]:
    return {p: Dataset(np.zeros((n, 1), np.int64), Domain([f"{p}_x"], [2])) for p, n in n_rows.items()}


def test_normalisation_spaces_and_unicode_forms_match():
    ids = {"A": ["  alice@x.org", "Bob", "ﬁle"], "B": ["alice@x.org ", "bob", "file"]}
    out = PSIAligner(PSIConfig()).align(_views({"A": 3, "B": 3}), PrivacyLedger(Budget(1, 1e-6)),
                                        np.random.default_rng(0), ids)
    assert out.info["intersection"] == 2  # strip + NFKC ("ﬁ" ligature), but case kept by default
    out = PSIAligner(PSIConfig(normalize=["strip", "nfkc", "casefold"])).align(
        _views({"A": 3, "B": 3}), PrivacyLedger(Budget(1, 1e-6)), np.random.default_rng(0), ids)
    assert out.info["intersection"] == 3


def test_duplicates_error_or_first():
    ids = {"A": ["a", "b", " a"], "B": ["a", "c"]}
    with pytest.raises(DataError, match="duplicate identifier"):
        PSIAligner(PSIConfig()).align(_views({"A": 3, "B": 2}), PrivacyLedger(Budget(1, 1e-6)),
                                      np.random.default_rng(0), ids)
    out = PSIAligner(PSIConfig(duplicates="first")).align(_views({"A": 3, "B": 2}), PrivacyLedger(Budget(1, 1e-6)),
                                                          np.random.default_rng(0), ids)
    assert out.info["duplicates_dropped"] == {"A": 1, "B": 0} and out.info["intersection"] == 1


def test_missing_or_empty_identifiers_are_errors():
    with pytest.raises(DataError, match="missing"):
        PSIAligner(PSIConfig()).align(_views({"A": 2, "B": 1}), PrivacyLedger(Budget(1, 1e-6)),
                                      np.random.default_rng(0), {"A": ["a", None], "B": ["a"]})
    with pytest.raises(DataError, match="empty"):
        PSIAligner(PSIConfig()).align(_views({"A": 2, "B": 1}), PrivacyLedger(Budget(1, 1e-6)),
                                      np.random.default_rng(0), {"A": ["a", "  "], "B": ["a"]})


# -- transcripts: what a party receives does not depend on which of its IDs are shared ------------------
def _a_view(b_ids: list[str], seed: int) -> tuple[list[BlindedSet], np.ndarray]:
    a_ids = [f"a{i}" for i in range(40)]
    transcript: list[BlindedSet] = []
    parties = make_parties("psu", {"A": a_ids, "B": b_ids}, np.random.default_rng(seed))
    simulate(parties, transcript)
    own = group.exp(parties["A"].hashed, parties["A"].a)  # what A can compute from its own IDs
    return [m for m in transcript if m.to == "A"], own


def test_psu_transcript_independent_of_intersection_beyond_sizes():
    # two inputs for B with equal sizes (also |∩| and |U|): it shares A's IDs 0-9, or A's IDs 30-39
    first = [f"a{i}" for i in range(10)] + [f"b{i}" for i in range(30)]
    last = [f"a{i}" for i in range(30, 40)] + [f"b{i}" for i in range(30)]
    hists, sizes = [], []
    for b_ids in (first, last):
        first_bytes, shape = [], []
        for seed in range(20):
            received, own = _a_view(b_ids, seed)
            shape.append(sorted((m.tag, len(m.elements)) for m in received if m.tag != "union1-full"))
            everything = np.concatenate([m.elements for m in received])
            # A cannot recognise any of its own blinded IDs among what it receives
            assert not np.isin(group.as_keys(everything), group.as_keys(own)).any()
            first_bytes.append(everything[:, 0])
        hists.append(np.bincount(np.concatenate(first_bytes) // 16, minlength=16))
        sizes.append(shape[0])
    assert sizes[0] == sizes[1]  # the same message sizes in both worlds
    _, p, _, _ = chi2_contingency(np.stack(hists))
    assert p > 1e-3, f"byte distribution differs between the two worlds (p={p:.2g})"


def test_leader_learns_only_the_intersection_size():
    ids = {"A": [f"x{i}" for i in range(30)], "B": [f"x{i}" for i in range(20, 50)]}
    transcript: list[BlindedSet] = []
    simulate(make_parties("psu", ids, np.random.default_rng(0)), transcript)
    full = [m for m in transcript if m.tag == "union1-full"]
    keys = np.concatenate([group.as_keys(m.elements) for m in full])
    assert len(keys) - len(np.unique(keys)) == 10  # repeats = |I_A ∩ I_B|, nothing about which rows


# -- malformed messages ---------------------------------------------------------------------------------
def test_malformed_and_missing_messages():
    ids = {"A": ["1", "2"], "B": ["2", "3"]}
    parties = make_parties("psu", ids, np.random.default_rng(0))
    out_a = parties["A"].step(1, [])
    out_b = parties["B"].step(1, [])
    to_a = [m for m in out_b if m.to == "A"]
    with pytest.raises(MessageError, match="expected 1 'map'"):
        parties["A"].step(2, [m for m in to_a if m.tag != "map"])
    bad = BlindedSet("B", "A", 1, "map", "B", 1, np.full((2, 32), 255, np.uint8))
    with pytest.raises(MessageError, match="not a valid ristretto255"):
        parties["A"].step(2, [m for m in to_a if m.tag != "map"] + [bad])
    with pytest.raises(MessageError, match="uint8 array"):
        BlindedSet("B", "A", 1, "map", "B", 1, np.zeros((2, 31), np.uint8)).validate()
    assert out_a  # A's first round was well-formed


def test_message_files_round_trip(tmp_path):
    msg = BlindedSet("A", "B", 1, "union1", "A", 1, group.hash_to_group(["x", "y"], b"t"))
    back = BlindedSet.load(msg.save(tmp_path / msg.filename))
    assert np.array_equal(back.elements, msg.elements) and back.tag == "union1" and back.to == "B"


# -- fill -------------------------------------------------------------------------------------------------
def _party_data(n_people=4000, overlap=0.6, seed=0, k_cols=6):
    rng = np.random.default_rng(seed)
    latent = rng.random(n_people) < 0.3
    def block(k):  # k correlated binary columns: copies of a latent bit with 10% flips
        return np.column_stack([latent ^ (rng.random(n_people) < 0.1) for _ in range(k)]).astype(np.int64)
    a, b = block(k_cols), block(k_cols)
    every = rng.random(n_people) < overlap
    only = rng.integers(0, 2, n_people)
    rows = {"A": np.flatnonzero(every | (only == 0)), "B": np.flatnonzero(every | (only == 1))}
    views = {"A": Dataset(a[rows["A"]], Domain([f"a{i}" for i in range(k_cols)], [2] * k_cols)),
             "B": Dataset(b[rows["B"]], Domain([f"b{i}" for i in range(k_cols)], [2] * k_cols))}
    ids = {p: [f"id{r}" for r in rows[p]] for p in rows}
    part = VerticalPartition.from_lists([views["A"].domain.attributes, views["B"].domain.attributes], ["A", "B"])
    return views, ids, part


def _align(config, views, ids, part, budget=Budget(1.0, 1e-5)):
    aligner = PSUAligner(config)
    dom = views["A"].domain.merge(views["B"].domain)
    ledger = PrivacyLedger(budget)
    ledger.plan(aligner.plan(PlanContext(dom, part, budget)))
    return aligner.align(views, ledger, np.random.default_rng(3), ids), ledger


@pytest.mark.parametrize("strategy", ["sample", "marginal"])
def test_fill_keeps_each_partys_marginals(strategy):
    # 2,000 people (was 4,000; the protocol is most of the cost): max marginal error sample 0.006, marginal 0.017,
    # and a uniform fill, the wrong one, 0.041 (0.039 at 4,000): the 0.03 bound still tells them apart
    views, ids, part = _party_data(n_people=2000)
    out, ledger = _align(PSUConfig(fill=strategy), views, ids, part)
    for p, v in views.items():
        real = v.codes.mean(axis=0)
        aligned = out.views[p].codes.mean(axis=0)
        assert np.max(np.abs(real - aligned)) < 0.03
        assert np.array_equal(out.views[p].codes[~out.filled[p]].mean(axis=0), real)  # real rows untouched
    assert out.info["fill_rates"]["A"] == pytest.approx(out.filled["A"].mean())
    assert not ledger.unspent()  # spent exactly what was planned


@pytest.mark.parametrize("strategy", ["sample", "uniform"])
def test_psu_puts_every_held_row_at_its_own_identifier(strategy):
    """Each party lists its people in its own order; after PSU a person's real rows share one position in U."""
    rng = np.random.default_rng(4)
    people_a, people_b = rng.permutation(300)[:220], rng.permutation(300)[:250]
    views = {"A": Dataset(people_a[:, None], Domain(["a"], [300])), "B": Dataset(people_b[:, None], Domain(["b"], [300]))}
    ids = {"A": [f"p{i}" for i in people_a], "B": [f"p{i}" for i in people_b]}
    part = VerticalPartition.from_lists([["a"], ["b"]], ["A", "B"])
    out, _ = _align(PSUConfig(fill=strategy), views, ids, part)
    both = ~out.filled["A"] & ~out.filled["B"]
    assert both.sum() == len(set(people_a) & set(people_b))
    assert np.array_equal(out.views["A"].codes[both, 0], out.views["B"].codes[both, 0])  # same person per row
    for p, v in views.items():   # and each party's real rows are exactly its records
        assert sorted(out.views[p].codes[~out.filled[p], 0]) == sorted(v.codes[:, 0])


def test_marginal_fill_is_charged_and_sample_fill_costs_group_privacy():
    views, ids, part = _party_data(n_people=500)   # ledger checks: any size (the crypto is per identifier)
    out, ledger = _align(PSUConfig(fill="marginal", fill_budget=0.1), views, ids, part)
    rho_total = sum(c.cost.rho for c in ledger.spent)
    assert rho_total == pytest.approx(0.1 * Budget(1.0, 1e-5).rho(), rel=1e-9)
    assert {c.party for c in ledger.spent} == {"A", "B"}
    out, ledger = _align(PSUConfig(fill="sample"), views, ids, part)
    assert not ledger.spent and PSUAligner(PSUConfig(fill="sample")).group_size() == 2
    ledger = PrivacyLedger(Budget(1.0, 1e-5), group_size=2)
    from vertisynth.core.privacy import Charge
    planned = Charge("synthesizer", "m", ZCDP(0.01))
    ledger.plan([planned])
    assert ledger.planned[0].cost.rho == pytest.approx(0.04)  # c² ρ for groups of c = 2
    ledger.spend(planned)
    assert not ledger.unspent()


def test_column_overrides_and_bad_fill_config():
    views, ids, part = _party_data(n_people=500)
    out, _ = _align(PSUConfig(fill="sample", fill_columns={"a0": ColumnFill("constant", "1"),
                                                           "b0": ColumnFill("majority")}), views, ids, part)
    assert (out.views["A"].codes[out.filled["A"], 0] == 1).all()
    assert (out.views["B"].codes[out.filled["B"], 0] == 0).all()  # the majority of b0 is 0 (latent 30%)
    with pytest.raises(ConfigError, match="unknown fill strategy"):
        PSUAligner(PSUConfig(fill="gaussian"))
    with pytest.raises(ConfigError, match="needs a value"):
        PSUAligner(PSUConfig(fill_columns={"a0": ColumnFill("constant")}))
    with pytest.raises(ConfigError, match="not one of its values"):
        _align(PSUConfig(fill_columns={"a0": ColumnFill("constant", "7")}), views, ids, part)


def test_spectral_attack_orders_fill_strategies():
    from vertisynth.plugins.evaluators.membership import MembershipAttack

    # 3,000 people (was 6,000; the protocol's curve arithmetic is most of the cost, 5.0 -> 3.0 CPU s). AUCs at data
    # seeds 0-3, 6,000 / 3,000 people: sample 0.502-0.518 / 0.509-0.543 (bound 0.56), marginal 0.93-0.95 / 0.93-0.94,
    # uniform 0.889-0.925 / 0.901-0.923 (bound 0.9: as thin at either size; seed 0 here); docs/lab/ci-speed-2026-11-30.md
    views, ids, part = _party_data(n_people=3000, overlap=0.5, k_cols=16)
    dom = views["A"].domain.merge(views["B"].domain)
    # the protocol once (half this test's CPU): each strategy fills the same union, party by party, as `align` and
    # a deployed party do (fill_party); the fill, not the protocol, is what the attack tells apart
    union = simulate(make_parties("psu", ids, np.random.default_rng(3)))
    auc = {}
    for strategy in ("sample", "marginal", "uniform"):
        aligner, ledger = PSUAligner(PSUConfig(fill=strategy)), PrivacyLedger(Budget(1.0, 1e-5))
        ledger.plan(aligner.plan(PlanContext(dom, part, Budget(1.0, 1e-5))))
        rngs = dict(zip(views, np.random.default_rng(4).spawn(len(views))))
        out = Alignment({p: aligner.fill_party(p, v, union[p], ledger, rngs[p]) for p, v in views.items()}, {},
                        {p: ~union[p].held_mask() for p in views})
        assert not ledger.unspent()
        auc[strategy] = MembershipAttack().evaluate_alignment(out, np.random.default_rng(0))["attack_auc_max"]
    assert auc["sample"] < 0.56, auc          # fea-sampling: indistinguishable
    assert auc["uniform"] > 0.9, auc          # random fill: caught
    assert auc["sample"] < auc["marginal"], auc


# -- pipeline: ID-keyed party tables ---------------------------------------------------------------------
def _run_config(tmp_path, alignment: str, extra: str = "", synth: str = "independent", overlap: float = 0.8,
                n: int = 1000):
    from vertisynth.run.config import load_config
    from vertisynth.run.pipeline import run

    cfg = tmp_path / f"{alignment}.toml"
    cfg.write_text(f"""
seed = 5
budget = {{ epsilon = 1.6, delta = 1e-5 }}
[dataset]
name = "census"
params = {{ n = {n}, id_overlap = {overlap} }}
[alignment]
use = "{alignment}"
{extra}
[synthesizer]
use = "{synth}"
[[evaluators]]
use = "tvd"
""")
    return run(load_config(cfg), output_dir=tmp_path / f"out_{alignment}")


def test_pipeline_psu_reports_sizes_fill_rates_and_ledger(tmp_path):
    res = _run_config(tmp_path, "psu")
    info = res.report["alignment"]["info"]
    assert info["protocol"] == "psu" and info["union"] == 1000  # everybody is held by some party
    assert set(info["fill_rates"]) == {"registry", "employer"} and 0 < info["fill_rates"]["registry"] < 0.2
    assert "alignment" in res.report["privacy"]["per_stage_epsilon"]
    assert res.report["privacy"]["within_budget"]
    assert res.real_codes.n == info["rows_held_by_every_party"]  # scored against the overlapping people
    psi = _run_config(tmp_path, "psi")
    assert psi.report["alignment"]["info"]["intersection"] == info["rows_held_by_every_party"]
    assert "alignment" not in psi.report["privacy"]["per_stage_epsilon"]


def test_pipeline_psu_sample_fill_charges_group_privacy(tmp_path):
    res = _run_config(tmp_path, "psu", 'params = { fill = "sample" }')
    notes = [c.get("note", "") for c in res.report["privacy"]["charges"] if c["stage"] != "alignment"]
    assert notes and all("group privacy x2" in n for n in notes)
    assert res.report["privacy"]["within_budget"]


def test_vertimrf_with_sample_fill_plans_group_privacy_within_budget(tmp_path):
    """Every VertiMRF charge (local models, encoder) is recorded at c²ρ: the plan still fits the budget exactly."""
    from vertisynth.run.config import load_config
    from vertisynth.run.pipeline import make_plan

    cfg = tmp_path / "s.toml"
    cfg.write_text("""
budget = { epsilon = 1.6, delta = 1e-5 }
[dataset]
name = "census"
params = { n = 4000, id_overlap = 0.8 }
[alignment]
use = "psu"
params = { fill = "sample" }
[synthesizer]
use = "vertimrf"
""")
    plan = make_plan(load_config(cfg))
    assert plan.ledger.group_size == 2
    assert plan.ledger.planned_epsilon() == pytest.approx(1.6, rel=1e-6)
    assert all("group privacy x2" in c.note for c in plan.ledger.planned if c.stage != "alignment")


def test_positional_alignment_refuses_keyed_tables(tmp_path):
    with pytest.raises(DataError, match="row counts|different identifiers"):
        _run_config(tmp_path, "positional")


def test_vertimrf_on_psu_close_to_psi(tmp_path):
    """80% overlap: the union run's 3-way TVD (vs the overlapping people) within 1.15x of the PSI run's."""
    # n = 3,000 and 1.15x (was 8,000 and 1.5x: 11 CPU s, three quarters of it the protocols' curve arithmetic).
    # Config seeds 0-11 at 3,000 (the correct code): ratio 0.944-0.984; a broken fill (every filled cell code 0)
    # at seeds 0-5: 1.30-1.36, failing here; at 8,000 that fill gave 1.66 against the old 1.5 bound, correct code
    # 0.95-0.98 (docs/lab/ci-speed-2026-11-30.md, tenth pass)
    psu = _run_config(tmp_path, "psu", synth="vertimrf", n=3000)
    psi = _run_config(tmp_path, "psi", synth="vertimrf", n=3000)
    ratio = psu.metrics["tvd"]["tvd_3way"] / psi.metrics["tvd"]["tvd_3way"]
    assert ratio <= 1.15, (psu.metrics, psi.metrics)


def test_party_csv_dataset_runs_psi_with_unicode_ids(tmp_path):
    import pandas as pd
    from vertisynth.run.config import load_config
    from vertisynth.run.pipeline import run

    rng = np.random.default_rng(0)
    n = 600
    people = [f"pérson-{i}@exämple.org" for i in range(n)]
    x = rng.integers(0, 3, n)
    y = (x + (rng.random(n) < 0.2)) % 3
    a_rows, b_rows = rng.permutation(n)[:500], rng.permutation(n)[:450]
    pd.DataFrame({"id": [f"  {people[i]}" for i in a_rows], "x": x[a_rows]}).to_csv(tmp_path / "a.csv", index=False)
    pd.DataFrame({"y": y[b_rows], "id": [people[i].upper().lower() for i in b_rows]}).to_csv(tmp_path / "b.csv",
                                                                                            index=False)
    cfg = tmp_path / "run.toml"
    cfg.write_text(f"""
seed = 1
budget = {{ epsilon = 2.0, delta = 1e-5 }}
[dataset]
name = "party_csv"
[dataset.params.files]
hospital = "{tmp_path / 'a.csv'}"
insurer = "{tmp_path / 'b.csv'}"
[dataset.params.schema]
x = {{ kind = "categorical", categories = [0, 1, 2] }}
y = {{ kind = "categorical", categories = [0, 1, 2] }}
[alignment]
use = "psi"
[synthesizer]
use = "independent"
[[evaluators]]
use = "tvd"
params = {{ ways = [2] }}
""")
    res = run(load_config(cfg))
    expected = len(set(a_rows) & set(b_rows))
    assert res.report["alignment"]["info"]["intersection"] == expected == res.real_codes.n
    joined = res.real_codes
    assert np.mean(joined.column("y") == (joined.column("x") % 3)) > 0.7  # rows line up: x and y agree mostly
    bad = tmp_path / "bad.toml"
    bad.write_text(cfg.read_text().replace('"{}"'.format(tmp_path / "b.csv"), '"{}"'.format(tmp_path / "a.csv")))
    with pytest.raises(DataError, match="in both"):
        run(load_config(bad))


@pytest.mark.parametrize("protocol", ["psi", "psu"])
def test_party_align_across_processes(tmp_path, protocol, in_process):
    """Two `vertisynth party align` roles exchange only message files and agree with set operations."""
    # the roles in threads (issue 33): `party align` as OS processes, both protocols, is
    # tests/deploy/test_psi_deploy.py's flow (align, then synthesise); this one checks the positions against set operations
    import pandas as pd

    a = [f"id{i}" for i in range(0, 60)]
    b = [f"id{i}" for i in range(40, 90)]
    pd.DataFrame({"id": a[::-1], "x": 1}).to_csv(tmp_path / "a.csv", index=False)
    pd.DataFrame({"id": b, "y": 2}).to_csv(tmp_path / "b.csv", index=False)
    from deploy_helpers import hello_all, parallel, with_roster

    (tmp_path / "job.toml").write_text(with_roster(tmp_path, f"""
budget = {{ epsilon = 1.0, delta = 1e-5 }}
[[parties]]
name = "hospital"
attributes = ["x"]
[[parties]]
name = "insurer"
attributes = ["y"]
[alignment]
use = "{protocol}"
params = {{ workers = 1 }}
""", ["hospital", "insurer"], private=lambda n: f"out_{n}"))
    hello_all(tmp_path, ["hospital", "insurer"], exchange="exchange", private=lambda n: f"out_{n}")
    res = parallel([["party", "align", "job.toml", "--party", p, "--csv", f, "--exchange", "exchange", "--out",
                     f"out_{p}", "--timeout", "60", "--no-table"] for p, f in [("hospital", "a.csv"), ("insurer", "b.csv")]],
                   tmp_path, timeout=120)
    assert all(code == 0 for code, _, _ in res), res
    ha = pd.read_csv(tmp_path / "out_hospital" / "hospital_alignment.csv")
    ib = pd.read_csv(tmp_path / "out_insurer" / "insurer_alignment.csv")
    if protocol == "psi":
        assert list(ha.sort_values("position").id) == list(ib.sort_values("position").id)
        assert set(ha.id) == set(a) & set(b)
    else:
        both = pd.concat([ha, ib])
        assert both.groupby("position").id.nunique().eq(1).all()   # one identifier per UID
        assert both.position.nunique() == len(set(a) | set(b))
    assert all(f.name.endswith(".env") for f in (tmp_path / "exchange").iterdir())  # only signed envelopes shared


def test_synthesize_api_with_id_column_and_psu():
    import pandas as pd

    import vertisynth

    rng = np.random.default_rng(0)
    n = 800
    x = rng.integers(0, 3, n)
    y = (x + (rng.random(n) < 0.2)) % 3
    a_rows, b_rows = rng.permutation(n)[:700], rng.permutation(n)[:650]
    hospital = pd.DataFrame({"email": [f"p{i}@x.org" for i in a_rows], "x": x[a_rows]})
    insurer = pd.DataFrame({"email": [f"P{i}@X.org " for i in b_rows], "y": y[b_rows]})
    res = vertisynth.synthesize({"hospital": hospital, "insurer": insurer}, epsilon=2.0, id_column="email",
                                alignment="psu", alignment_params={"normalize": ["strip", "casefold"]})
    info = res.report["alignment"]["info"]
    assert info["union"] == len(set(a_rows) | set(b_rows))
    assert res.real_codes.n == len(set(a_rows) & set(b_rows))
    assert set(res.synthetic.columns) == {"x", "y"}
    assert res.report["dataset"]["schema_inferred_from_data"] is True  # inferred here, and said so
    with pytest.raises(DataError, match="no identifier column"):
        vertisynth.synthesize({"hospital": hospital, "insurer": insurer.drop(columns=["email"])}, epsilon=1.0,
                              id_column="email")
