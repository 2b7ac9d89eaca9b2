"""Issue 31: `vertisynth validate --rows N` prices a vertical twin's HE cost per party and for the server before any
row is read (vertisynth/vertical/cost.py: the planned probes and a stated stand-in for the adaptive answers,
priced by `HEEncoder.answers_cost`). Where the queries are fixed, the ciphertexts are exactly those a run makes;
the CPU is within 25% of a measured run at a small n (slow: real 2048-bit Paillier)."""
import itertools
import math

import numpy as np
import pytest

from vertisynth.core.dataset import Dataset, VerticalPartition
from vertisynth.core.domain import Domain
from vertisynth.core.privacy import Budget, Charge, PrivacyLedger, ZCDP
from vertisynth.plugins.encoders.he import paillier
from vertisynth.plugins.encoders.he.encoder import HEConfig, HEEncoder
from vertisynth.vertical import VerticalOracle
from vertisynth.vertical.cost import answers
from vertisynth.vertical.probes import width_bins

from tests.synthetic_tables import correlated

pytest.importorskip("phe", reason="real crypto needs `pip install vertisynth[he]`")


def _plan(pairs, marginals):
    return ([Charge("s", "gaussian_cross_probe", ZCDP(0.05)) for _ in range(pairs)]
            + [Charge("s", "gaussian_marginal", ZCDP(0.2)) for _ in range(marginals)])



SCHEME_CASES = [({}, 512), pytest.param({"scheme": "ou"}, 1024, marks=pytest.mark.skipif(
    not paillier.short_available(), reason="scheme = 'ou' needs sf-heu"))]


def _two_parties_real_crypto(monkeypatch, scheme=None, bits=512):
    """160 correlated rows split 3 + 2 attributes, the cross-party pairs, 7 planned marginals, real 512-bit Paillier
    (or `scheme`, e.g. OU at 1024 bits)."""
    monkeypatch.setattr(paillier, "MIN_KEY_BITS", 512)
    data = correlated(160, seed=2)
    part = VerticalPartition.from_lists([["a", "c", "e"], ["b", "d"]], ["P0", "P1"]).validate(data.domain)
    pairs = [(a, b) for a in data.domain.attributes for b in data.domain.attributes
             if a < b and {a, b} & {"a", "c", "e"} and {a, b} & {"b", "d"}]
    planned = _plan(len(pairs), 7)
    enc = HEEncoder(HEConfig(crypto="real", key_bits=bits, workers=1, **(scheme or {})))
    return data, part, pairs, planned, enc


def _replay(data, part, planned, asked, run) -> None:
    """Asks `run` (an he encoder) through a VerticalOracle what the estimate's stand-in asked: the one probe
    answer (all probes as one stage, on 2 equal-width bins), then each adaptive answer."""
    led = PrivacyLedger(Budget(1e6, 1e-9))
    led.plan(planned)
    rngs = {p: np.random.default_rng(i) for i, p in enumerate(part.names)}
    oracle = VerticalOracle(part.views(data), part, run, led, rngs, "he")
    bins = width_bins(data.domain, 2)
    rng = np.random.default_rng(0)
    probed = [tuple(x for q in a["queries"][i] for x in q) for a in asked[:1] for i in range(len(a["queries"]))]
    oracle.measure_many(probed, planned[:6], rng, None, [{x: bins[x] for x in p if x in bins} or None for p in probed])
    for a, ch in zip(asked[1:], planned[6:]):
        (left, right), = a["queries"]
        oracle.measure(left + right, ch, rng)


@pytest.mark.parametrize("scheme, bits", SCHEME_CASES, ids=["paillier", "ou"])
def test_the_estimate_counts_the_ciphertexts_a_run_of_the_same_answers_makes(monkeypatch, scheme, bits):
    """The probes (fixed by the plan) and the stand-in's adaptive answers, asked of the oracle with real crypto:
    every party's ciphertexts (encrypted rows and returned sums) are what `answers_cost` said before, exactly:
    the probe stage's one packed run, each party's whole rows once, the rest summed again. Under each scheme (OU:
    fewer slots per ciphertext, priced from `paillier.plan_bits`)."""
    data, part, pairs, planned, enc = _two_parties_real_crypto(monkeypatch, scheme, bits)
    asked, counted = answers(data.domain, part, 2, planned, enc.sigma_for_rho)
    # 6 of the 10 pairs cross parties: 7 marginals -> ceil(4.2) = 5 stand-in answers after the one probe answer
    assert counted == {"probes": 6, "adaptive": 5, "marginals": 7, "pairs": 0, "stages": 6} and len(asked) == 6
    parties = {p.name: data.domain.project(p.attributes) for p in part}
    want = enc.answers_cost(asked, data.n, parties)
    run = HEEncoder(HEConfig(crypto="real", key_bits=bits, workers=1, **(scheme or {})))
    _replay(data, part, planned, asked, run)
    got = run.costs["oracle"].ciphertexts
    assert got == {p: want[p]["ciphertexts"] for p in got}, (got, want)
    # each party encrypted its rows at most twice (its probe run: one ciphertext per row; its whole rows: one pass of
    # their plaintexts, two per row under OU where they carry every pair), not once per answer
    from vertisynth.plugins.encoders.he import protocol
    from vertisynth.plugins.encoders.he.noise import support_bound

    t = support_bound(asked[-1]["sigma"])
    for p, k in got.items():
        size = lambda b, d=parties[p]: int(np.prod([d.size(a) for a in b]))  # noqa: E731
        whole = protocol.usual_layout(enc.whole_queries(parties[p], data.n, t), size, data.n, t, enc.plan_bits(),
                                      separate=True).plaintexts
        assert k < data.n * (1 + whole) + data.n, (p, got, whole)


@pytest.mark.parametrize("scheme, bits", SCHEME_CASES, ids=["paillier", "ou"])
def test_the_estimate_counts_every_operation_a_run_of_the_same_answers_performs(monkeypatch, scheme, bits):
    """`answers_cost`'s CPU is (operations) x (their timed prices); its operations per party (key pairs, row
    encryptions and their set bits, ciphertexts read, folded into sums, decrypted, S's noise encryptions, noise
    draws) are those the run performs as `Costs.ops` counts them where they are done, exactly, under either
    scheme: E's key pair too (the twin's run did not book it, so its CPU was short of the estimate by one key per
    encrypting party), and S reads E's kept whole rows once, not once per answer."""
    data, part, pairs, planned, enc = _two_parties_real_crypto(monkeypatch, scheme, bits)
    asked, _ = answers(data.domain, part, 2, planned, enc.sigma_for_rho)
    parties = {p.name: data.domain.project(p.attributes) for p in part}
    want = enc.answers_cost(asked, data.n, parties)
    run = HEEncoder(HEConfig(crypto="real", key_bits=bits, workers=1, **(scheme or {})))
    _replay(data, part, planned, asked, run)
    done = run.costs["oracle"].ops
    assert {p: done.get(p, {}) for p in want} == {p: v["ops"] for p, v in want.items()}, (done, want)
    assert done["P0"]["key"] == 1   # the whole rows' party encrypts; its key pair is booked, once
    ran = run.costs["oracle"].cpu
    assert all(ran[p] > 0 for p in done)


@pytest.mark.parametrize("scheme, bits", SCHEME_CASES, ids=["paillier", "ou"])
def test_under_trust_server_the_estimate_counts_every_operation_of_each_role(monkeypatch, scheme, bits):
    """trust = "server": `answers_cost` prices every role (before: no estimate at all) from public facts, as
    `ServerTrust.answer` runs (each answer encrypts E's rows afresh, with E's noise shares; S sums and multiplies
    both shares in; the server makes its key once and decrypts); every role's ciphertexts and operations equal
    those the run performs, exactly, under either scheme."""
    data, part, pairs, planned, _ = _two_parties_real_crypto(monkeypatch, scheme, bits)
    enc = HEEncoder(HEConfig(crypto="real", key_bits=bits, workers=1, trust="server", **(scheme or {})))
    asked, _ = answers(data.domain, part, 2, planned, enc.sigma_for_rho)
    want = enc.answers_cost(asked, data.n, {p.name: data.domain.project(p.attributes) for p in part})
    run = HEEncoder(HEConfig(crypto="real", key_bits=bits, workers=1, trust="server", **(scheme or {})))
    _replay(data, part, planned, asked, run)
    costs = run.server_trust.costs
    assert {p: v["ops"] for p, v in want.items()} == costs.ops, (costs.ops, want)
    assert {p: v["ciphertexts"] for p, v in want.items() if v["ciphertexts"]} == \
        {p: v for p, v in costs.ciphertexts.items() if v}
    assert costs.ops["server"]["key"] == 1 and want["server"]["cpu_s"] > 0


def test_probes_on_whole_rows_cost_no_pass_of_their_own_and_the_estimate_counts_them(monkeypatch):
    """Issue 31: privmrf's probes leave the side of the party whose whole rows the measure sums unbinned
    (`measure_probes(whole=True)`), so the probes, every adaptive answer with a side of one attribute (or a joint
    pair in the rows' spare slots) and each party's whole rows are one pass over each party's rows at most (the old
    code: the probes a pass of their own, binned on both sides). `answers(whole_party=...)` prices them as asked:
    the ciphertexts are exactly the run's."""
    from vertisynth.vertical.probes import measure_probes

    data, part, pairs, planned, enc = _two_parties_real_crypto(monkeypatch)
    assert enc.whole_rows_party(["P1", "P0"]) == "P0"
    asked, _ = answers(data.domain, part, 2, planned, enc.sigma_for_rho, whole_party="P0")
    probe_bins = [b for q in asked[0]["queries"] for side in q for b in side]
    assert all(asked[0]["domains"]["P0"].size(a) == data.domain.size(a) for a in ("a", "c", "e") if a in probe_bins)
    want = enc.answers_cost(asked, data.n, {p.name: data.domain.project(p.attributes) for p in part})
    led = PrivacyLedger(Budget(1e6, 1e-9))
    led.plan(planned)
    rngs = {p: np.random.default_rng(i) for i, p in enumerate(part.names)}
    run = HEEncoder(HEConfig(crypto="real", key_bits=512, workers=1))
    oracle = VerticalOracle(part.views(data), part, run, led, rngs, "he")
    rng = np.random.default_rng(0)
    probes = measure_probes(oracle, [(q[0][0], q[1][0]) for q in asked[0]["queries"]], planned[:6], rng,
                            width_bins(data.domain, 2), whole=True)
    assert all(not (m.bins or {}).keys() & {"a", "c", "e"} for m in probes)   # P0's side unbinned, P1's binned
    assert any(m.bins for m in probes)
    for a, ch in zip(asked[1:], planned[6:]):
        (left, right), = a["queries"]
        oracle.measure(left + right, ch, rng)
    got = run.costs["oracle"].ciphertexts
    assert got == {p: want[p]["ciphertexts"] for p in got}, (got, want)
    assert all(k < 2 * data.n for k in got.values()), got   # one pass per party at most


def test_validate_prints_a_twins_he_cost_per_party_and_the_server(tmp_path):
    from click.testing import CliRunner

    from vertisynth.cli.main import main

    cfg = tmp_path / "twin.toml"
    cfg.write_text('seed = 1\nbudget = { epsilon = 1.0, delta = 1e-5 }\n[dataset]\nname = "zoo"\n'
                   'params = { preset = "small-split", n = 300 }\n[synthesizer]\nuse = "privmrf"\n'
                   'params = { vertical = { measure = "he", trust = "none", params = { crypto = "simulated" } } }\n')
    out = CliRunner().invoke(main, ["validate", str(cfg), "--rows", "45222"])
    assert out.exit_code == 0, out.output
    assert "Expected HE cost per party for 45,222 rows, before any row is read" in out.output
    lines = [ln for ln in out.output.splitlines() if "ciphertexts" in ln and not ln.strip().startswith("(")]
    assert len(lines) == 3 and lines[-1].split()[0] == "server", lines   # two parties and the server
    assert all(int(ln.split()[2].replace(",", "")) > 45222 for ln in lines[:2])   # each encrypts its rows


@pytest.mark.slow
def test_the_estimate_is_within_a_quarter_of_a_measured_runs_cpu(tmp_path):
    """A vertical privmrf run on a zoo table with real 2048-bit Paillier: the HE CPU each party spent (the
    measure's `Costs`, its pool workers included) against `validate`'s estimate for the same plan and rows, made
    before the runs: each party's median of three runs within 25% (of the figure with or without its one pass
    where that follows the adaptive picks: validate prints both). Three, not one: which party's answers are
    encrypted follows privmrf's adaptive picks, which follow secure noise, and a key pair is a prime search of
    random length, so one run is one draw of what the estimate prices at its expectation (docs/he.md)."""
    from vertisynth.run.config import load_config
    from vertisynth.run.pipeline import execute, make_plan, twin_cost_estimate

    cfg = tmp_path / "twin.toml"
    cfg.write_text('seed = 3\nbudget = { epsilon = 1.6, delta = 1e-9 }\n[dataset]\nname = "zoo"\n'
                   'params = { preset = "strong", n = 3000 }\n[synthesizer]\nuse = "privmrf"\n'
                   'params = { vertical = { measure = "he", trust = "none", params = { crypto = "real" } } }\n')
    est, _ = twin_cost_estimate(make_plan(load_config(cfg)), 3000)
    runs = []
    for i in range(3):
        plan = make_plan(load_config(cfg))
        execute(plan, tmp_path / f"out{i}", progress=False)
        runs.append(plan.measure.instance.costs["oracle"].cpu)
    got = {p: float(np.median([r.get(p, 0.0) for r in runs])) for p in est if p != "server"}
    print(f"\nHE CPU s: runs {runs}, medians {got}, estimated {est}")
    for p, v in got.items():
        # a party whose one pass follows the adaptive picks has two figures, both printed by validate (with the pass,
        # the stand-in's case, and without it, `unasked`): its median is within 25% of one of them (hecost14: at
        # 3,000 rows party2 encrypted in none of three runs, at 4,000 in two of three)
        want = [est[p]["cpu_s"]] + ([est[p]["unasked"]["cpu_s"]] if est[p].get("unasked") else [])
        assert any(math.isclose(v, w, rel_tol=0.25) for w in want), (p, runs, est)


@pytest.mark.skipif(not paillier.short_available(), reason="scheme = 'ou' needs sf-heu")
def test_ou_estimate_prices_the_set_bits_the_runs_encryptions_take(monkeypatch):
    """OU's G^m costs per set bit of the packed plaintext (docs/he.md "Scheme OU: validate's estimate against
    runs"): the set bits `answers_cost` prices (its CPU at `enc_bit` 1 minus at 0) are those of the plaintexts E
    hands `encrypt_many` in a real OU run of the same answers, S's full-randomness noise not counted."""
    from vertisynth.plugins.encoders.he import encoder as he_encoder

    data, part, pairs, planned, enc = _two_parties_real_crypto(monkeypatch, {"scheme": "ou"}, 1024)
    asked, _ = answers(data.domain, part, 2, planned, enc.sigma_for_rho)
    parties = {p.name: data.domain.project(p.attributes) for p in part}
    zero = {"key": 0.0, "enc": 0.0, "setup": 0.0, "load": 0.0, "mul": 0.0, "dec": 0.0, "noise": 0.0, "draw": 0.0}
    monkeypatch.setattr(he_encoder, "_op_costs", lambda bits, randomness="full", sigma=None: {**zero, "enc_bit": 1.0})
    priced = sum(v["cpu_s"] for v in enc.answers_cost(asked, data.n, parties).values())
    monkeypatch.undo()
    monkeypatch.setattr(paillier, "MIN_KEY_BITS", 512)
    encrypt, ones = paillier.encrypt_many, []

    def counting(public_key, plaintexts, *a, **k):
        if isinstance(public_key, paillier.OUPublicKey) and not public_key.full:
            ones.append(sum(bin(int(m)).count("1") for m in plaintexts))
        return encrypt(public_key, plaintexts, *a, **k)

    monkeypatch.setattr(paillier, "encrypt_many", counting)
    run = HEEncoder(HEConfig(crypto="real", key_bits=1024, workers=1, scheme="ou"))
    _replay(data, part, planned, asked, run)
    assert sum(ones) > 0 and priced == sum(ones), (priced, ones)


def test_whole_rows_carry_every_pair_so_pair_answers_encrypt_the_rows_once(monkeypatch):
    """Issues 31/33: a party's whole rows carry every pair of its attributes where that takes at most one plaintext
    per row more (`WHOLE_PAIRS_EXTRA`), so answers whose side at that party is any pair of its attributes are all
    summed from one pass of its rows, a count known before the run. The old rows carried only the pairs that fit
    their spare slots (7 of 15 here): each answer on another pair encrypted a block pass of its own (NLTCS, a
    4,000-row twin run: party1's rows encrypted 5 times)."""
    from vertisynth.plugins.encoders.he import protocol
    from vertisynth.plugins.encoders.he.noise import support_bound

    monkeypatch.setattr(paillier, "MIN_KEY_BITS", 1024)
    rng = np.random.default_rng(5)
    names = [f"a{i}" for i in range(6)] + ["b0", "b1"]
    codes = rng.integers(0, 2, (160, 8))
    codes[:, 6] = codes[:, 0] ^ (rng.random(160) < 0.2)
    data = Dataset(codes, Domain(names, [2] * 8))
    part = VerticalPartition.from_lists([names[:6], names[6:]], ["P0", "P1"]).validate(data.domain)
    duos = list(itertools.combinations(names[:6], 2))
    planned = [Charge("s", "gaussian_marginal", ZCDP(0.5)) for _ in duos]
    led = PrivacyLedger(Budget(1e6, 1e-9))
    led.plan(planned)
    run = HEEncoder(HEConfig(crypto="real", key_bits=1024, workers=1))
    oracle = VerticalOracle(part.views(data), part, run, led, {p: np.random.default_rng(i) for i, p in
                                                               enumerate(part.names)}, "he")
    sigma = run.sigma_for_rho(0.5)
    p0 = data.domain.project(names[:6])
    whole = run.whole_blocks(p0, data.n, support_bound(sigma))
    assert {frozenset(d) for d in duos} <= {frozenset(b) for b in whole}
    size = lambda b: int(np.prod([p0.size(a) for a in b]))  # noqa: E731
    lay = protocol.usual_layout([(b, ()) for b in whole], size, data.n, support_bound(sigma), run.plan_bits(),
                                separate=True)
    for duo, ch in zip(duos, planned):
        oracle.measure(duo + ("b0",), ch, np.random.default_rng(0))
    got = run.costs["oracle"].ciphertexts
    assert got["P0"] == data.n * lay.plaintexts == 2 * data.n, got   # one pass of P0's rows, two per row
    asked = [{"domains": {"P0": p0.project(d), "P1": data.domain.project(["b0"])}, "queries": [(d, ("b0",))],
              "sigma": sigma} for d in duos]
    want = run.answers_cost(asked, data.n, {p.name: data.domain.project(p.attributes) for p in part})
    assert {p: want[p]["ciphertexts"] for p in got} == got


def _nltcs_twin_estimated_and_run(data_dir, monkeypatch, rows: int, he_params: dict):
    """The privmrf twin on an NLTCS sample of `rows` (measure he, trust none, `he_params`): `validate`'s estimate
    (and its counts), then the run, whose answers are recorded and priced by the same counting model (which the
    tests above show exact). Returns (estimate, counted, priced run, each party's domain)."""
    from vertisynth.run.config import parse_config
    from vertisynth.run.pipeline import execute, make_plan, twin_cost_estimate

    raw = {"seed": 0, "budget": {"epsilon": 1.6, "delta": 1e-9},
           "dataset": {"name": "nltcs", "params": {"data_dir": str(data_dir), "sample": rows, "sample_seed": 1}},
           "synthesizer": {"use": "privmrf", "params": {"vertical": {"measure": "he", "trust": "none",
                                                                      "params": he_params}}}}
    plan = make_plan(parse_config(raw))
    est, counted = twin_cost_estimate(plan, rows)
    asked, answer = [], HEEncoder.answer

    def recorded(self, views, queries, sigma, noise, rngs, whole=None):
        asked.append({"domains": {p: v.domain for p, v in views.items()}, "queries": list(queries), "sigma": sigma})
        return answer(self, views, queries, sigma, noise, rngs, whole)

    monkeypatch.setattr(HEEncoder, "answer", recorded)
    execute(plan)
    parties = {p.name: plan.source.schema.preview_domain().project(p.attributes) for p in plan.partition}
    return est, counted, HEEncoder(plan.measure.instance.config).answers_cost(asked, rows, parties), parties


def test_the_twins_estimate_prices_each_partys_encryption_as_its_answers_make_it(data_dir, monkeypatch):
    """Issues 31/33: `validate`'s estimate for the privmrf twin on NLTCS (no `probe_whole_rows`) against the answers
    the run asked (recorded, then priced by the same counting model, which the tests above show exact): each
    party's ciphertexts within 25%. Before: the stand-in gave the second party no encryption of its whole rows
    (48 against 4,090 ciphertexts at 4,000 rows: its `absorbed` rule was read only with unbinned probes), and
    party1 encrypted a block pass for every pair its whole rows lacked (20,016 against 4,004)."""
    est, _, ran, parties = _nltcs_twin_estimated_and_run(data_dir, monkeypatch, 3000, {"crypto": "simulated"})
    for p in parties:
        assert ran[p]["ciphertexts"] >= 3000, (p, ran)   # both parties encrypt their rows in this run
        assert math.isclose(est[p]["ciphertexts"], ran[p]["ciphertexts"], rel_tol=0.25), (p, est, ran)
    # whether the second party encrypts follows the adaptive picks (a real run with secure noise on the zoo did not):
    # the estimate also gives its figures without that pass, which validate prints beside them
    assert est["party2"]["unasked"]["ciphertexts"] < 3000 and "unasked" not in est["party1"], est


@pytest.mark.parametrize("dataset, trust", [("nltcs", "none"), ("nltcs", "server"), ("adult", "server")])
def test_aims_probe_stages_are_priced_as_its_run_asks_them(data_dir, monkeypatch, dataset, trust):
    """hecost15 (issues 31/33): aim draws its probes from its rounds' filter, not from planned charges, so
    `validate` priced no answer for aim at all (0 probes, 0 stages). Its probe stages follow from its plan
    (`PlansProbeStages`: the cross-party candidate pairs, the rounds' ρ, probe_bins against the domain): the
    estimate's probe answers are the run's first answers, the same pairs at the same σ, each side on at most the
    run's bins, priced within 25% (NLTCS: every probe at full resolution, σ_p/√PROBE_FULL(_NONE); Adult: binned,
    σ_p)."""
    from vertisynth.run.config import parse_config
    from vertisynth.run.pipeline import execute, make_plan, twin_cost_estimate

    params = {"data_dir": str(data_dir), "sample": 1500, "sample_seed": 1}
    raw = {"seed": 0, "budget": {"epsilon": 1.0, "delta": 1e-9}, "dataset": {"name": dataset, "params": params},
           "synthesizer": {"use": "aim", "params": {"rounds": 40, "vertical": {
               "measure": "he", "trust": trust, "params": {"crypto": "simulated"}}}}}
    plan = make_plan(parse_config(raw))
    from vertisynth.core.capabilities import below_two_sided
    assert below_two_sided(plan.measure.instance) is (trust == "server")   # what validate and the fit decide by
    staged = plan.synthesizer.instance.probe_stages(trust == "server")
    est, counted = twin_cost_estimate(plan, 1500)
    assert staged and counted["probes"] == sum(len(p) for p, _ in staged) > 0, counted
    asked, answer = [], HEEncoder.answer

    class Probed(Exception):
        pass

    def recorded(self, views, queries, sigma, noise, rngs, whole=None):
        if len(asked) == len(staged):
            raise Probed   # the probe stages asked: the rounds after them are not what this test checks
        asked.append({"domains": {p: v.domain for p, v in views.items()}, "queries": list(queries), "sigma": sigma})
        return answer(self, views, queries, sigma, noise, rngs, whole)

    monkeypatch.setattr(HEEncoder, "answer", recorded)
    with pytest.raises(Probed):
        execute(plan)
    from vertisynth.vertical.cost import answers as twin_answers
    mine = twin_answers(plan.source.schema.preview_domain(), plan.partition,
                        plan.synthesizer.instance.vertical_request().probe_bins, plan.ledger.planned,
                        plan.measure.instance.sigma_for_rho, probe_stages=staged)[0][:len(staged)]
    ran = asked[:len(staged)]
    for e, r in zip(mine, ran):
        assert math.isclose(e["sigma"], r["sigma"], rel_tol=1e-9), (e["sigma"], r["sigma"])
        pairs = lambda a: {frozenset(tuple(x) + tuple(y)) for x, y in a["queries"]}  # noqa: E731
        assert pairs(e) == pairs(r)
        sizes = lambda a: {x: d.size(x) for d in a["domains"].values() for x in d.attributes}  # noqa: E731
        # each attribute on at most probe_bins bins: the run's bins of equal noisy mass may be fewer (Adult's
        # capital-gain, mostly 0: 2 of 4), so the estimate's tables bound the run's
        assert set(sizes(e)) == set(sizes(r)) and all(sizes(r)[x] <= n for x, n in sizes(e).items()), (sizes(e),
                                                                                                        sizes(r))
    enc = HEEncoder(plan.measure.instance.config)
    est_ct, ran_ct = enc.answers_cost(mine, 1500), enc.answers_cost(ran, 1500)
    for p in ran_ct:
        assert ran_ct[p]["ciphertexts"] <= est_ct[p]["ciphertexts"] <= 1.25 * ran_ct[p]["ciphertexts"], (est_ct, ran_ct)


def test_under_trust_server_validate_gives_each_partys_figures_as_encrypter_and_as_summer(tmp_path):
    """hecost15 (issues 31/33): under trust = "server" `orient` picks E per answer from its tables, public once the
    tables are, but the adaptive answers' tables follow the data, so the stand-in's single pick was far off for the
    party it did not pick (NLTCS party2 0.15x, the zoo 0.47x). The estimate now carries each party's figures as E of
    every adaptive answer and as S of every one, which bracket the stand-in's, and `validate` prints them."""
    from click.testing import CliRunner

    from vertisynth.cli.main import main
    from vertisynth.run.config import load_config
    from vertisynth.run.pipeline import make_plan, twin_cost_estimate

    cfg = tmp_path / "twin.toml"
    cfg.write_text('seed = 1\nbudget = { epsilon = 1.0, delta = 1e-5 }\n[dataset]\nname = "zoo"\n'
                   'params = { preset = "small-split", n = 300 }\n[synthesizer]\nuse = "privmrf"\n'
                   'params = { vertical = { measure = "he", trust = "server", params = { crypto = "simulated" } } }\n')
    est, _ = twin_cost_estimate(make_plan(load_config(cfg)), 4000)
    for p in ("party1", "party2"):
        hi, lo = est[p]["as_encrypter"]["ciphertexts"], est[p]["as_summer"]["ciphertexts"]
        assert lo <= est[p]["ciphertexts"] <= hi and hi > lo + 4000, (p, est[p])   # E pays n a row per answer
    out = CliRunner().invoke(main, ["validate", str(cfg), "--rows", "4000"])
    assert out.exit_code == 0, out.output
    assert out.output.count("as E of every one") == 2, out.output


def test_a_kept_block_pass_is_priced_as_the_run_encrypts_it(monkeypatch):
    """hecost17 (issues 31/33): an answer none of whose sides is a block of either party's whole rows (here a triple
    against a triple) has its E encrypt its side as kept blocks, one pass of its rows; `block_pass` prices that pass
    for the estimate's range (below): its ciphertexts and E's operations are those the run makes for it."""
    monkeypatch.setattr(paillier, "MIN_KEY_BITS", 512)
    rng = np.random.default_rng(7)
    names = [f"a{i}" for i in range(5)] + [f"b{i}" for i in range(5)]
    data = Dataset(rng.integers(0, 2, (160, 10)), Domain(names, [2] * 10))
    part = VerticalPartition.from_lists([names[:5], names[5:]], ["P0", "P1"]).validate(data.domain)
    planned = [Charge("s", "gaussian_marginal", ZCDP(0.5))]
    led = PrivacyLedger(Budget(1e6, 1e-9))
    led.plan(planned)
    run = HEEncoder(HEConfig(crypto="real", key_bits=512, workers=1))
    oracle = VerticalOracle(part.views(data), part, run, led, {p: np.random.default_rng(i) for i, p in
                                                               enumerate(part.names)}, "he")
    oracle.measure(("a0", "a1", "a2", "b0", "b1", "b2"), planned[0], np.random.default_rng(0))
    got, ops = run.costs["oracle"].ciphertexts, run.costs["oracle"].ops
    (enc, made), = [(p, k) for p, k in got.items() if k >= data.n]   # one party encrypted its side, one pass
    mine = {p.name: p.attributes for p in part}[enc]
    one = run.block_pass(data.domain.project(mine), data.n, run.sigma_for_rho(0.5))
    assert one is not None and made == one["ciphertexts"] == data.n, (got, one)
    assert ops[enc]["enc"] == one["ops"]["enc"] and ops[enc]["enc_bit"] == one["ops"]["enc_bit"], (ops, one)


def test_the_twins_estimate_gives_the_kept_block_passes_its_picks_may_ask_as_a_range(data_dir, monkeypatch):
    """hecost17 (issues 31/33): on NLTCS under OU a party's whole rows carry few pairs (one plaintext a row holds
    the 16 one-hot cells and 5 pairs of 4 cells), so privmrf's pair-by-pair answers made party1 encrypt a block
    pass each (a real 4,000-row run: 36,016 ciphertexts against the estimate's 8,004, 0.32x). Which answers do
    follows the picks: the estimate now gives each party's figure with one such pass per adaptive answer, and the
    run's count lies between the two (the answers the run asked, recorded and priced by the count model, which the
    tests above show exact). Before: no such figure, and the run's party1 above the estimate by more than 25%."""
    if not paillier.short_available():
        pytest.skip("scheme = 'ou' needs sf-heu")
    rows = 4000   # at 2,000 rows narrower slots let the whole rows carry more pairs: no pass asked
    est, counted, ran, parties = _nltcs_twin_estimated_and_run(data_dir, monkeypatch, rows,
                                                               {"crypto": "simulated", "scheme": "ou"})
    assert ran["party1"]["ciphertexts"] > 1.25 * est["party1"]["ciphertexts"], (ran, est)   # the point misses
    for p in parties:
        b = est[p]["blocks"]
        assert b["passes"] == counted["adaptive"] and b["pass_ciphertexts"] == rows, b   # one plaintext a row
        assert est[p].get("unasked", est[p])["ciphertexts"] <= ran[p]["ciphertexts"] <= b["ciphertexts"], (p, est, ran)


def test_each_partys_key_draw_band_is_given_from_the_measured_spread(monkeypatch):
    """hecost17 (issues 31/33): a party's key pair is one draw of a prime search a run (OU at 2048 bits: 0.39-4.2x
    of its mean), so at 3,000-4,000 rows, where it is 20-50% of a party's HE CPU, no estimate holds every single run
    within 25%. `key_band` says which draws keep this estimate within 25% and what share of the measured draws
    (KEY_SPREAD) fell there; the estimate carries it per party and `validate` prints it."""
    from vertisynth.plugins.encoders.he.encoder import KEY_SPREAD, key_band

    assert key_band("ou", 0.0) == (0.0, math.inf, 1.0)
    lo, hi, frac = key_band("ou", 0.5)   # run / estimate = 1 - s + s·x within [1/1.25, 1/0.75]
    assert math.isclose(lo, 0.6) and math.isclose(hi, 5 / 3)
    assert frac == sum(0.6 <= x <= 5 / 3 for x in KEY_SPREAD["ou"]) / len(KEY_SPREAD["ou"]) < 1
    assert key_band("ou", 0.2)[2] >= frac >= key_band("ou", 0.8)[2]   # the larger the key's share, the fewer runs
    assert all(math.isclose(sum(v) / len(v), 1.0, abs_tol=0.02) for v in KEY_SPREAD.values())   # over their mean
    data, part, pairs, planned, enc = _two_parties_real_crypto(monkeypatch)
    asked, _ = answers(data.domain, part, 2, planned, enc.sigma_for_rho)
    est = enc.answers_cost(asked, data.n, {p.name: data.domain.project(p.attributes) for p in part})
    keyed = [v for v in est.values() if v.get("key_s")]
    assert keyed
    for v in keyed:
        lo, hi, frac = key_band(enc.randomness, v["key_s"] / v["cpu_s"])
        assert v["key_band"] == {"low_s": lo * v["key_s"], "high_s": hi * v["key_s"], "runs": frac}, v


def test_validate_prints_the_kept_block_range_and_the_key_draw_band(tmp_path, monkeypatch):
    """hecost17: `validate` prints, per party, its figure with one kept-block pass per adaptive answer and the key
    draws within which its figure holds a run within 25% (the share of measured draws that did)."""
    from click.testing import CliRunner

    from vertisynth.cli.main import main

    monkeypatch.setattr(paillier, "MIN_KEY_BITS", 512)
    cfg = tmp_path / "twin.toml"
    cfg.write_text('seed = 1\nbudget = { epsilon = 1.0, delta = 1e-5 }\n[dataset]\nname = "zoo"\n'
                   'params = { preset = "small-split", n = 300 }\n[synthesizer]\nuse = "privmrf"\n'
                   'params = { vertical = { measure = "he", trust = "none", params = { crypto = "real", '
                   'key_bits = 512, workers = 1 } } }\n')
    out = CliRunner().invoke(main, ["validate", str(cfg), "--rows", "4000"])
    assert out.exit_code == 0, out.output
    assert out.output.count("(kept blocks: ") == 2, out.output
    assert out.output.count("its key pair is one draw a run: this figure is within 25% of a run whose draw") == 2, \
        out.output
