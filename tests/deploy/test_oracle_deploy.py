"""A vertical twin across machines: `aim` with `params.vertical` runs at the server against a vertical oracle whose
parties are separate OS processes on a folder exchange (deploy/oracle_rounds.py), every query and answer in signed
envelopes, cross-party tables through real Paillier between the parties; under a test secret the published table
equals the one-process run (`simulate`, with crypto = "simulated"). A forged or tampered query, and a query outside
the plan, are refused in one line before the party reads a row."""
import json

import pandas as pd
import pytest
import forked_cli
from deploy_helpers import (SECRET, SERVER_KEY, cli, hello_all, move_one_cell_of_every_answer, parallel, popen,
                            relay_reads, with_roster)

from vertisynth.deploy.simulate import simulate
from vertisynth.run.config import load_config

pytest.importorskip("phe", reason="the he measure's real crypto needs `pip install vertisynth[he]` (phe, gmpy2)")
pytest.importorskip("gmpy2", reason="the he measure's real crypto needs `pip install vertisynth[he]` (phe, gmpy2)")

CONFIG = """
seed = 11
budget = { epsilon = 2.0, delta = 1e-5 }
[dataset]
name = "zoo"
params = { preset = "small-split", n = 160 }
[synthesizer]
use = "SYNTH"
params = { PARAMS vertical = { measure = "he", trust = "none", params = { crypto = "CRYPTO", workers = 1, round_timeout = 60.0 } } }
"""
AIM = ("aim", "iters = 40, rounds = 10, degree = 2,")
# aim's equality case runs on the hospital-insurer scenario: on small-split at 160 rows aim chose no cross-party pair,
# so its release did not depend on a single cross-party answer and the equality said nothing about them
# (test_the_aim_case_releases_what_its_cross_party_answers_say keeps it so)
AIM_PRESET = "hospital-insurer"
MST = ("mst", "iters = 40,")
PRIVMRF = ("privmrf", "iters = 20, refine_iters = 5,")
OTHERS = [("private_pgm", ""), ("dpsyn", "")]
PARTIES = ["party1", "party2"]
PARTIES_OF = {"small-split": PARTIES, AIM_PRESET: ["hospital", "insurer"]}


def _setup(tmp_path, synth=AIM, small_keys=False, preset="small-split"):
    """`small_keys`: 512-bit Paillier keys, for roles run in this process (`_in_process` lowers the floor here, which
    a forked role would keep too: forked_cli._key_floor). What is encrypted, summed, decrypted and sealed, and so the release, does not depend on
    the key's size; the 2048-bit flows across processes are the slow private_pgm and dpsyn twins'."""
    text = CONFIG.replace("SYNTH", synth[0]).replace("PARAMS", synth[1]).replace("small-split", preset)
    if small_keys:
        text = text.replace("workers = 1,", "workers = 1, key_bits = 512,")
    text = with_roster(tmp_path, text.replace("CRYPTO", "real"), [*PARTIES_OF[preset], "server"])
    (tmp_path / "job.toml").write_text(text)
    (tmp_path / "sim.toml").write_text(text.replace('crypto = "real"', 'crypto = "simulated"'))
    hello_all(tmp_path, PARTIES_OF[preset], secret=SECRET)


def _in_process(request, monkeypatch, yes=True):
    """The roles in threads of this process (the `in_process` fixture), the Paillier key floor lowered to 512 bits."""
    if yes:
        from vertisynth.plugins.encoders.he import paillier

        request.getfixturevalue("in_process")
        monkeypatch.setattr(paillier, "MIN_KEY_BITS", 512)


def _party(p, *extra):
    return ["party", "job.toml", "--party", p, "--exchange", "shared", "--out", f"private_{p}", "--timeout", "60",
            "-q", *extra]


def _server(*extra):
    return ["server", "job.toml", "--exchange", "shared", "--out", "out", *SERVER_KEY, "--timeout", "60", "-q", *extra]


@pytest.mark.parametrize("synth", [AIM, MST, PRIVMRF, *[pytest.param(o, marks=pytest.mark.slow) for o in OTHERS]],
                         ids=["aim", "mst", "privmrf", *[o[0] for o in OTHERS]])
def test_a_vertical_twin_across_processes_equals_the_one_process_run(tmp_path, synth, monkeypatch, request):
    # aim's roles are separate OS processes: the twin kind's end-to-end flow across processes in the default run,
    # on 512-bit test keys (a forked role keeps the lowered floor: forked_cli._key_floor; the release does not
    # depend on the key's size). The slow private_pgm and dpsyn twins (CI's slow-flows step) run across processes
    # at 2048 bits, as does test_he_deploy.py's default-run flow. mst and privmrf run the same commands with each
    # role in a thread of this process (issue 33: one subprocess flow per deployment kind, the rest in process):
    # what they add is their synthesizer's queries over the exchange
    threads = synth in (MST, PRIVMRF)
    small = synth in (AIM, MST, PRIVMRF)
    _in_process(request, monkeypatch, threads)
    if small and not threads:
        from vertisynth.plugins.encoders.he import paillier

        monkeypatch.setattr(paillier, "MIN_KEY_BITS", 512)
    preset = AIM_PRESET if synth is AIM else "small-split"
    _setup(tmp_path, synth, small_keys=small, preset=preset)
    res = parallel([_party(p) for p in PARTIES_OF[preset]] + [_server()], tmp_path, timeout=300)
    assert all(r[0] == 0 for r in res), res
    deployed = pd.read_csv(tmp_path / "out" / "synthetic.csv")
    simulate(load_config(tmp_path / "sim.toml"), SECRET).synthetic.to_csv(tmp_path / "sim.csv", index=False)
    pd.testing.assert_frame_equal(deployed, pd.read_csv(tmp_path / "sim.csv"))
    names = sorted(p.name for p in (tmp_path / "shared").iterdir())
    assert all(n.endswith(".env") for n in names)   # only signed envelopes crossed
    for round_ in ("oracle-query-", "oracle-answer-", "he-rows-oracle-", "he-sums-oracle-", "ledger__"):
        assert any(n.startswith(round_) for n in names), round_
    ledger = json.loads((tmp_path / "out" / "ledger.json").read_text())
    assert ledger["cross_party"] and "not for production" in json.dumps(ledger)
    assert not ledger["planned_but_unspent"]
    # every answer is sealed to the server's run key: a party or a relay holding the exchange opens none
    from vertisynth.core.errors import MessageError
    from vertisynth.deploy.session import RunState, Session, roster_of
    from vertisynth.deploy.transport import transport_for
    config = load_config(tmp_path / "job.toml")
    last = PARTIES_OF[preset][-1]
    state = RunState.load(tmp_path / f"private_{last}", last)
    reader = Session(None, roster_of(config), transport_for(tmp_path / "shared"), state)
    answers = [n.removesuffix(".env") for n in names if n.startswith("oracle-answer-")]
    for name in answers:
        with pytest.raises(MessageError, match="only the server opens it"):
            reader.open(name, (name.split("__")[0],), "server")


def test_the_aim_case_releases_what_its_cross_party_answers_say(tmp_path, monkeypatch):
    """The aim equality case above proves something about the cross-party rounds only if its release reads their
    answers: in one process, every cross-party answer with one cell moved must change the synthetic table."""
    _setup(tmp_path, AIM, preset=AIM_PRESET)
    before = simulate(load_config(tmp_path / "sim.toml"), SECRET).synthetic
    move_one_cell_of_every_answer(monkeypatch)
    after = simulate(load_config(tmp_path / "sim.toml"), SECRET)
    assert after.ledger.cross_party   # answers were asked
    assert not before.equals(after.synthetic)


@pytest.mark.slow   # CI's slow-flows step: the roles in threads, ~10 CPU s
def test_two_stage_probes_across_the_exchange_equal_the_one_process_run(tmp_path, monkeypatch, request):
    """mst's probes in two stages (trust none, many cross pairs per attribute: vertical/probes.py `reprobes`, forced
    here on the small table): the second stage's pairs follow from the first's released answers, at the server; the
    parties check them against the plan and answer them as one more cross-party stage. Over the exchange the
    release equals the one-process run's, and the ledger holds both stages' charges, spent."""
    from vertisynth.vertical import probes
    monkeypatch.setattr(probes, "REPROBE_PER_ATTRIBUTE", 0)
    _in_process(request, monkeypatch)
    _setup(tmp_path, MST, small_keys=True)
    res = parallel([_party(p) for p in PARTIES] + [_server()], tmp_path, timeout=300)
    assert all(r[0] == 0 for r in res), res
    simulate(load_config(tmp_path / "sim.toml"), SECRET).synthetic.to_csv(tmp_path / "sim.csv", index=False)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "out" / "synthetic.csv"), pd.read_csv(tmp_path / "sim.csv"))
    ledger = json.loads((tmp_path / "out" / "ledger.json").read_text())
    assert not ledger["planned_but_unspent"]
    assert "gaussian_cross_reprobe" in json.dumps(ledger) and "gaussian_cross_probe" in json.dumps(ledger)


# slow (CI's deploy step runs it): a second subprocess flow over the folder exchange, OU only in the crypto
@pytest.mark.slow
@pytest.mark.parametrize("trust", ["none", "server"])
def test_scheme_ou_across_processes_equals_the_one_process_run(tmp_path, trust):
    """scheme = "ou" across machines over a folder exchange: E's OU key crosses as text (trust none: each E's; trust
    server: the server's, with its query), S sums mod n and re-randomises, E (or the server) decrypts within the
    public bound; under the test secret the release equals the one-process run."""
    pytest.importorskip("heu", reason="scheme = 'ou' needs sf-heu")
    _setup(tmp_path, MST)
    for name in ("job.toml", "sim.toml"):
        text = (tmp_path / name).read_text().replace("workers = 1,", 'workers = 1, scheme = "ou",')
        # simulation noise, the config's: under trust server the server (which holds no test secret) draws its
        # share from a stream seeded by what it decrypted only then
        (tmp_path / name).write_text('noise = "simulation"\n' + text.replace('trust = "none"', f'trust = "{trust}"'))
    hello_all(tmp_path, PARTIES, exchange="ou", secret=SECRET)
    res = parallel([[*_party(p)[:5], "ou", *_party(p)[6:]] for p in PARTIES]
                   + [[*_server()[:3], "ou", *_server()[4:]]], tmp_path, timeout=300)
    assert all(r[0] == 0 for r in res), res
    simulate(load_config(tmp_path / "sim.toml"), SECRET).synthetic.to_csv(tmp_path / "sim.csv", index=False)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "out" / "synthetic.csv"), pd.read_csv(tmp_path / "sim.csv"))
    names = {p.name.split("__")[0].rstrip("0123456789") for p in (tmp_path / "ou").iterdir()}
    assert ("he-srows-oracle-" if trust == "server" else "he-rows-oracle-") in names, names
    params = load_config(tmp_path / "job.toml").synthesizer.params["vertical"]["params"]
    assert params["scheme"] == "ou"   # the parties' measure (HEConfig refuses an unknown key, so it ran under OU)


RELAY_CONFIG = """
seed = 3
budget = { epsilon = 2.0, delta = 1e-5 }
[dataset]
name = "csv"
[dataset.params]
path = "PATH"
[dataset.params.schema]
hospital_length_of_stay_days = { kind = "categorical", categories = ["1", "2", "3", "4"] }
hospital_discharge_ward_code = { kind = "categorical", categories = ["1", "2", "3"] }
insurer_claimed_amount_band = { kind = "categorical", categories = ["1", "2", "3", "4"] }
[[parties]]
name = "party1"
attributes = ["hospital_length_of_stay_days", "hospital_discharge_ward_code"]
[[parties]]
name = "party2"
attributes = ["insurer_claimed_amount_band"]
[synthesizer]
use = "mst"
params = { iters = 40, vertical = { measure = "he", trust = "none", params = { crypto = "CRYPTO", workers = 1, round_timeout = 60.0 } } }
"""


def test_a_curious_relay_reads_no_query_of_a_vertical_twin(tmp_path, monkeypatch, request):
    """Every query, every round between the parties and every answer is sealed to its one recipient's run key: the
    relay (a folder, sftp or s3 host, a Flower SuperLink), holding every byte of the exchange after the run and
    unpacking every body it can (messages are compressed npz), finds no attribute name in any of them; only the
    hellos (the public config, which every party holds) carry the names. Long names, so a chance match in
    ciphertext is out of the question (2^-200 per position). Before the seal the queries, the he rows' layouts and
    the sums' groupings named them. The run still equals the one-process simulation. The roles run the same
    commands in threads of this process, on 512-bit keys: what the relay holds is the same envelopes, smaller
    ciphertexts (the twin kind's flows across processes at 2048 bits: the slow private_pgm and dpsyn twins')."""
    import numpy as np

    from vertisynth.core.envelope import open_envelope
    from vertisynth.deploy.session import CLEAR_ROUNDS, SEALED, roster_of
    rng = np.random.default_rng(4)
    los = rng.integers(1, 5, 200)
    pd.DataFrame({"hospital_length_of_stay_days": los, "hospital_discharge_ward_code": rng.integers(1, 4, 200),
                  "insurer_claimed_amount_band": np.clip(los + rng.integers(-1, 2, 200), 1, 4)}
                 ).to_csv(tmp_path / "full.csv", index=False)
    _in_process(request, monkeypatch)
    text = with_roster(tmp_path, RELAY_CONFIG.replace("PATH", str(tmp_path / "full.csv")).replace("CRYPTO", "real")
                       .replace("workers = 1,", "workers = 1, key_bits = 512,"), [*PARTIES, "server"])
    (tmp_path / "job.toml").write_text(text)
    (tmp_path / "sim.toml").write_text(text.replace('crypto = "real"', 'crypto = "simulated"'))
    hello_all(tmp_path, PARTIES, secret=SECRET)
    res = parallel([_party(p) for p in PARTIES] + [_server()], tmp_path, timeout=300)
    assert all(r[0] == 0 for r in res), res
    simulate(load_config(tmp_path / "sim.toml"), SECRET).synthetic.to_csv(tmp_path / "sim.csv", index=False)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "out" / "synthetic.csv"), pd.read_csv(tmp_path / "sim.csv"))
    names = [b"hospital_length_of_stay_days", b"hospital_discharge_ward_code", b"insurer_claimed_amount_band"]
    roster = roster_of(load_config(tmp_path / "job.toml"))
    files = sorted((tmp_path / "shared").iterdir())
    rounds = set()
    for path in files:
        header, body = open_envelope(path.read_bytes(), roster, None, path.name)
        data = path.read_bytes() + relay_reads(body)
        if header.round == "hello":   # the public config: every party holds the schema anyway
            assert all(n in data for n in names)
            continue
        rounds.add(header.round.rstrip("0123456789"))
        assert not [n for n in names if n in data], path.name
        assert header.round in CLEAR_ROUNDS or header.kind.startswith(SEALED), (path.name, header.kind)
        assert len(header.to) == 1 or header.round in CLEAR_ROUNDS, path.name
    # the relay held queries, the parties' rounds and answers: all of them sealed
    assert {"oracle-query-", "oracle-answer-", "he-rows-oracle-", "he-sums-oracle-", "key"} <= rounds, rounds


def _as_server(tmp_path, exchange="shared"):
    """The server's session of this run, driven by the test (it signs and seals queries as `vertisynth server`
    does)."""
    from vertisynth.deploy.session import (SERVER, RunState, Session, config_fingerprint, load_identity,
                                           publish_run_key, read_hellos, roster_of)
    from vertisynth.deploy.transport import transport_for
    config = load_config(tmp_path / "job.toml")
    transport = transport_for(tmp_path / exchange)
    run = read_hellos(config, transport, PARTIES, "server")
    identity = load_identity(config, SERVER, tmp_path / "private_server", None, tmp_path / exchange)
    sess = Session(identity, roster_of(config), transport, RunState(SERVER, run, config_fingerprint(config),
                                                                     tuple(PARTIES)), 30.0, sealed=True)
    sess.run_key = publish_run_key(sess, tmp_path / "private_server" / "server_signing.pem")
    return sess


def _query(sess, k, op, header, arrays=None, to=("party1",)):
    from vertisynth.deploy.oracle_rounds import QUERY, OracleQuery
    q = OracleQuery("server", k, op, header, arrays or {})
    sess.send(f"{QUERY}{k:06d}", list(to), q.kind, q.to_bytes())


def _answering(tmp_path, party, send, exchange="shared"):
    """`party synth` started first (it publishes the run key the server seals its queries to), then `send()` files
    the query; the party's result."""
    import subprocess
    proc = popen(["party", "job.toml", "--party", party, "--exchange", exchange, "--out", f"private_{party}",
                  "--timeout", "30", "-q"], tmp_path)
    try:
        send()
        out, err = proc.communicate(timeout=120)
    except BaseException:
        proc.kill()
        raise
    return subprocess.CompletedProcess([], proc.returncode, out, err)


def _measure(attribute, charge, rho, sigma=1.0):
    from vertisynth.vertical.link import Spend
    return {"attributes": [attribute], "sigma": sigma, "bins": None, "what": f"measure [{attribute!r}]",
            "spend": {"id": 0, **Spend(charge, rho, False, f"measure [{attribute!r}]").to_dict()}}


def _one_line_refusal(res, *words):
    err = res.stderr.strip()
    assert res.returncode != 0 and all(w in err for w in words), err
    assert len(err.splitlines()) == 1, err


def test_a_query_outside_the_plan_a_tampered_and_a_foreign_query_are_refused_in_one_line(tmp_path, in_process):
    # the answering party in a thread of this process (`in_process`, issue 33): what is checked is its refusal of
    # each query, not the process boundary (the oracle's flows across processes are the twins' above)
    from vertisynth.core.envelope import open_envelope, seal
    from vertisynth.core.privacy import ZCDP, Charge
    from vertisynth.deploy.oracle_rounds import OracleQuery
    from vertisynth.deploy.session import SEAL_INFO, SEALED, load_identity, seal_aad
    from vertisynth.core.sealing import seal_to
    from vertisynth.run.pipeline import make_plan
    _setup(tmp_path)
    sess = _as_server(tmp_path)
    config = load_config(tmp_path / "job.toml")
    plan = make_plan(config)
    a, b = plan.partition.parties[0].attributes[0], plan.partition.parties[1].attributes[0]
    one_way = next(c for c in plan.ledger.planned if c.mechanism == "gaussian_1way")
    # a charge the plan does not hold: the party refuses before it reads a row, and tells the server why
    res = _answering(tmp_path, "party1", lambda: _query(sess, 0, "measure",
                                                         _measure(a, Charge("synthesizer", "made_up", ZCDP(0.5)), 0.5)))
    _one_line_refusal(res, "made_up", "not a charge of this run's plan")
    assert list((tmp_path / "shared").glob("oracle-refused-000000__party1__*"))
    assert not list((tmp_path / "shared").glob("oracle-answer-*"))
    # a planned charge, but less noise than it pays for
    res = _answering(tmp_path, "party2", lambda: _query(sess, 1, "measure",
                                                         _measure(b, one_way, one_way.cost.rho, sigma=0.01),
                                                         to=("party2",)))
    _one_line_refusal(res, "its noise costs")
    # tampered on the exchange, signed by another role under the server's name, re-signed by a stranger, sealed to
    # another party, or sent in clear: refused unread
    body = OracleQuery("server", 0, "measure", _measure(a, one_way, one_way.cost.rho), {}).to_bytes()

    def genuine(s2):   # the server's sealed, signed query as it would file it (kept, not filed)
        import attrs
        kept = {}
        capture = type("Capture", (), {"send": lambda self, n, d: kept.update({n: d}), "names": s2.transport.names,
                                        "read": s2.transport.read})()
        _query(attrs.evolve(s2, transport=capture), 0, "measure", _measure(a, one_way, one_way.cost.rho))
        return kept[name]
    name = "oracle-query-000000__server__to__party1__0"
    for case in ("tampered", "foreign", "re-signed", "to another party", "in clear"):
        ex = f"{case.replace(' ', '_')}_shared"
        hello_all(tmp_path, PARTIES, exchange=ex, secret=SECRET)
        s2 = _as_server(tmp_path, ex)
        forger = load_identity(config, "party2", tmp_path / "private_party2", None, None)

        def send():
            if case == "tampered":   # the server's genuine envelope, one bit flipped on the way
                data = bytearray(genuine(s2))
                data[-40] ^= 1
                s2.transport.send(name, bytes(data))
            elif case in ("foreign", "re-signed"):   # party2 signs a query it sealed itself, or the server's
                if case == "re-signed":
                    _, raw = open_envelope(genuine(s2), s2.roster, None, name)
                else:
                    raw = seal_to(s2.key_of("party1"), body, seal_aad(s2.state.run, s2.state.config, "server",
                                                                      "oracle-query-000000", name), SEAL_INFO).to_bytes()
                s2.transport.send(name, seal(forger, s2.state.run, s2.state.config, ["party1"],
                                             "oracle-query-000000", SEALED + "oracle_query", raw))
            elif case == "to another party":   # the server's envelope to party1 holds a body sealed to party2
                raw = seal_to(s2.key_of("party2", 30.0), body, seal_aad(s2.state.run, s2.state.config, "server",
                                                                       "oracle-query-000000", name), SEAL_INFO)
                s2.transport.send(name, seal(s2.identity, s2.state.run, s2.state.config, ["party1"],
                                             "oracle-query-000000", SEALED + "oracle_query", raw.to_bytes()))
            else:   # the server's query, signed but not sealed
                s2.sealed = False
                _query(s2, 0, "measure", _measure(a, one_way, one_way.cost.rho))

        if case == "to another party":   # party2's run key is in the exchange (its process waits for queries;
            # forked, not a thread: it is killed once party1 has refused, before its own timeout)
            other = forked_cli.Forked(["party", "job.toml", "--party", "party2", "--exchange", ex, "--out", "private_party2",
                           "--timeout", "20", "-q"], cwd=tmp_path)
        res = _answering(tmp_path, "party1", send, exchange=ex)
        if case == "to another party":
            other.kill()
            other.communicate()
        why = {"tampered": "edited", "foreign": "under another sender's name",
               "re-signed": "under another sender's name", "to another party": "does not open with this run key",
               "in clear": "sent in clear"}[case]
        _one_line_refusal(res, "refused", "oracle-query-000000", why)
        assert not list((tmp_path / ex).glob("oracle-answer-*")), case


@pytest.mark.parametrize("query, match", [
    ({"attributes": [["a", "c"]], "parties": [["P0", "P1"]]}, "held by 1 party"),            # one party's table
    ({"attributes": [["a", "b"]], "parties": [["P0", "P0"]]}, "routed to"),                   # an empty side
    ({"attributes": [["a", "zz"]], "parties": [["P0", "P1"]]}, "zz"),                         # outside the domain
    ({"attributes": [["a", "b"], ["a", "d"]], "parties": [["P0", "P1"], ["P1", "P0"]]}, None),   # fine: checks pass
])
def test_a_party_refuses_a_misrouted_cross_party_query_before_it_pays(query, match):
    """Checked by the party itself (the server may be wrong or hostile): a one-party table routed as cross-party, a
    side with no attribute, an attribute outside the domain; nothing is spent."""
    import types

    import numpy as np

    from vertisynth.core.dataset import VerticalPartition
    from vertisynth.core.errors import VertisynthError
    from vertisynth.core.privacy import ZCDP, Budget, Charge, PrivacyLedger
    from vertisynth.deploy.oracle_rounds import OracleQuery, PartyServer
    from vertisynth.plugins.encoders.he.encoder import HEConfig, HEEncoder
    from vertisynth.vertical.link import PartyBudget, PartySide, Spend
    from tests.synthetic_tables import correlated

    data = correlated(50)
    part = VerticalPartition.from_lists([["a", "c", "e"], ["b", "d"]], ["P0", "P1"]).validate(data.domain)
    ch = Charge("s", "m", ZCDP(0.5))
    led = PrivacyLedger(Budget(1e6, 1e-9))
    led.plan([ch, ch])
    enc = HEEncoder(HEConfig(crypto="simulated"))
    server = PartyServer(types.SimpleNamespace(me="P0"), PartySide("P0", part.views(data)["P0"],
                                                                   np.random.default_rng(0), led),
                         PartyBudget(led), enc, part, data.domain, True)
    sigma = enc.sigma_for_rho(0.5)
    items = [{"attributes": a, "parties": p, "bins": None,
              "spend": {"id": i, **Spend(ch, 0.5, False, "x").to_dict()}}
             for i, (a, p) in enumerate(zip(query["attributes"], query["parties"]))]
    q = OracleQuery("server", 3, "cross", {"queries": items, "sigma": sigma, "what": "x"}, {})
    if match is None:   # past every check, the party pays for each table, then starts the measure's rounds
        class Started(Exception):
            pass

        def start(*args, **kw):
            raise Started

        server.measure = types.SimpleNamespace(rho_per_table=enc.rho_per_table, answer_stage=start)
        with pytest.raises(Started):
            server.handle(q)
        assert led.spent == [ch, ch]
        return
    with pytest.raises(VertisynthError, match=match):
        server.handle(q)
    assert led.spent == []


def test_trust_server_over_a_folder_exchange_equals_the_one_process_run(tmp_path, monkeypatch, request):
    """he with trust = "server" across machines: the server makes the run's Paillier key and sends its public half
    with each cross-party query (signed, sealed to each party); E sends S its rows and its noise share under that
    key, sealed to S's run key; S returns the sums with both shares to the server, who decrypts count + both shares
    (variance σ²) and adds its own share (1.5σ²). Under the test secret and simulation noise (the config's: the
    server holds no test secret, and draws its share from a stream seeded by what it decrypted) the release equals
    the one-process run, and so does the ledger's list of cross-party tables with its trust assumption. mst, whose
    tree's cross-party edges are measured and fitted (aim's probes here only steer a choice that came out the same
    with other noise). The roles run the same commands in threads of this process, on 512-bit keys (the twin kind's
    flows across processes at 2048 bits: the slow private_pgm and dpsyn twins', trust = "none")."""
    _in_process(request, monkeypatch)
    _setup(tmp_path, synth=MST, small_keys=True)
    for name in ("job.toml", "sim.toml"):
        text = (tmp_path / name).read_text().replace('trust = "none"', 'trust = "server"')
        (tmp_path / name).write_text('noise = "simulation"\n' + text)
    hello_all(tmp_path, PARTIES, exchange="server_trust", secret=SECRET)
    res = parallel([[*_party(p)[:5], "server_trust", *_party(p)[6:]] for p in PARTIES]
                   + [[*_server()[:3], "server_trust", *_server()[4:]]], tmp_path, timeout=300)
    assert all(r[0] == 0 for r in res), res
    sim = simulate(load_config(tmp_path / "sim.toml"), SECRET)
    sim.synthetic.to_csv(tmp_path / "sim.csv", index=False)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "out" / "synthetic.csv"), pd.read_csv(tmp_path / "sim.csv"))
    ledger = json.loads((tmp_path / "out" / "ledger.json").read_text())
    assert ledger["cross_party"]["through"] == ["he (trust = server)"], ledger["cross_party"]
    assert ledger["cross_party"] == sim.ledger.to_dict()["cross_party"]
    names = {p.name.split("__")[0].rstrip("0123456789") for p in (tmp_path / "server_trust").iterdir()}
    assert {"he-srows-oracle-", "he-snoise-oracle-"} <= names and "he-sums-oracle-" not in names, names


def test_trust_server_the_curious_server_decrypts_counts_plus_both_shares_never_one(tmp_path, monkeypatch):
    """The server of a trust = "server" run across machines (parties in threads over a folder exchange, real
    Paillier with 512-bit test keys: what is decrypted and what opens does not depend on the key's size; the whole
    run over the exchange is test_trust_server_over_a_folder_exchange_equals_the_one_process_run, across processes
    the slow test_scheme_ou_across_processes_equals_the_one_process_run[server]; the test secret's seeded shares), holding everything it legitimately has: its Paillier private
    key, its run key, every file of the exchange. What it decrypts is count + E's share + S's share (both shares
    reproduced from the parties' seeded sources, each non-zero); E's rows and E's share travel sealed to S's run key
    and do not open with the server's. Opened with S's key (the collusion the mode excludes), E's share would read
    alone: that is what the seal keeps from the server."""
    import threading

    import numpy as np

    from vertisynth.core.dataset import VerticalPartition
    from vertisynth.core.errors import MessageError
    from vertisynth.core.identity import Identity, Roster
    from vertisynth.core.messages import Message
    from vertisynth.core.privacy import ZCDP, Budget, Charge, PrivacyLedger
    from vertisynth.core.sealing import RunKey
    from vertisynth.core.transport import FolderTransport
    from vertisynth.deploy.oracle_rounds import PartyServer, RemoteLink
    from vertisynth.deploy.session import RunState, Session, publish_party_key
    from vertisynth.plugins.encoders.he import protocol
    from vertisynth.plugins.encoders.he import server_trust as st
    from vertisynth.plugins.encoders.he.encoder import HEConfig, HEEncoder
    from vertisynth.vertical import VerticalOracle
    from vertisynth.vertical.link import PartyBudget, PartySide
    from tests.synthetic_tables import correlated

    data = correlated(120)
    part = VerticalPartition.from_lists([["a", "c", "e"], ["b", "d"]], ["P0", "P1"]).validate(data.domain)
    views = part.views(data)
    charge = Charge("s", "cross", ZCDP(0.2))
    from vertisynth.plugins.encoders.he import paillier
    monkeypatch.setattr(paillier, "MIN_KEY_BITS", 512)
    config = HEConfig(crypto="real", trust="server", workers=1, key_bits=512)

    def ledger():
        led = PrivacyLedger(Budget(1e6, 1e-9), noise="simulation")
        led.plan([charge])
        return led

    ids = {n: Identity.generate(n) for n in ["server", "P0", "P1"]}
    roster = Roster.parse({n: i.public_text() for n, i in ids.items()})
    transport, key = FolderTransport(tmp_path / "ex"), RunKey()
    state = lambda n: RunState(n, "run", "cfg", ("P0", "P1"))  # noqa: E731
    party_keys, errors = {}, []

    def party(i, p):
        led = ledger()
        sess = Session(ids[p], roster, transport, state(p), 60.0, 0.01, server_key=key.public, sealed=True)
        sess.run_key = party_keys[p] = publish_party_key(sess)
        server = PartyServer(sess, PartySide(p, views[p], np.random.default_rng(7 + i), led), PartyBudget(led),
                             HEEncoder(config), part, data.domain, True)   # each party its own measure instance
        try:
            server.serve()
        except Exception as exc:   # noqa: BLE001 - reported by the test thread below
            errors.append(exc)

    threads = [threading.Thread(target=party, args=(i, p)) for i, p in enumerate(part.names)]
    for t in threads:
        t.start()
    enc = HEEncoder(config)   # the server's: it makes and holds the run's Paillier key
    sess = Session(ids["server"], roster, transport, state("server"), 60.0, 0.01, run_key=key, sealed=True)
    link = RemoteLink(sess, part, data.domain, enc, 60.0, 0.01, server_noise="simulation")   # its share reproducible
    try:
        got = VerticalOracle.over(link, part, data.domain, enc, ledger(), "he").measure(
            ("a", "b"), charge, np.random.default_rng(0)).values
    finally:
        link.done()
        for t in threads:
            t.join(60)
    assert not errors, errors
    # the shares, from the parties' seeded sources (the cross query is the first draw of each party's stream)
    sigma = enc.sigma_for_rho(charge.cost.rho)
    size = lambda b: data.domain.project(b).size()  # noqa: E731
    e, s_, oriented = st.orient(config, "P0", "P1", [(("a",), ("b",))], size, data.n, sigma)
    base = {p: int(np.random.default_rng(7 + i).integers(0, 2**63)) for i, p in enumerate(part.names)}
    shape = (size(oriented[0][0]), size(oriented[0][1]))
    z_e = st.noise_share(shape, sigma, st.seeded_source(base[e], ("P0", "P1"), "enc"))
    z_s = st.noise_share(shape, sigma, st.seeded_source(base[s_], ("P0", "P1"), "sum"))
    exact = np.zeros((3, 8))
    np.add.at(exact, (data.column("a"), data.column("b")), 1)
    residual = got - exact if e == "P0" else (got - exact).T
    # what the server decrypts: count + both shares (variance σ², never σ²/2); then it adds its own share (drawn,
    # under simulation noise, from a stream seeded by what it decrypted: reproduced here)
    key = protocol.key_of(oriented[0][0] + oriented[0][1])
    decrypted = {key: ((exact if e == "P0" else exact.T) + z_e + z_s).astype(np.float64)}
    z_srv = st.add_server_share(decrypted, sigma, st.server_source("simulation", decrypted))[key] - decrypted[key]
    np.testing.assert_array_equal(residual, z_e + z_s + z_srv)
    assert np.any(z_srv != 0)
    assert np.any(z_e != 0) and np.any(z_s != 0) and not np.array_equal(residual, z_e)
    # E's rows and E's share: sealed to S; the server's run key opens neither
    sealed = [n.removesuffix(".env") for n in sorted(p.name for p in (tmp_path / "ex").iterdir())
              if n.startswith(("he-srows-", "he-snoise-"))]
    assert len(sealed) == 2, sealed
    for name in sealed:
        with pytest.raises(MessageError, match="does not open with this run key"):
            sess.open(name, (name.split("__")[0],), s_)
    # with S's run key (the collusion trust = "server" excludes), E's share alone would read
    s_sess = Session(None, roster, transport, state(s_), 5.0, run_key=party_keys[s_], sealed=True)
    noise_name = next(n for n in sealed if n.startswith("he-snoise-"))
    rows_name = next(n for n in sealed if n.startswith("he-srows-"))
    share = Message.from_bytes(s_sess.open(noise_name, (noise_name.split("__")[0],))[1], noise_name)
    rows = Message.from_bytes(s_sess.open(rows_name, (rows_name.split("__")[0],))[1], rows_name)
    alone = protocol.open_sums(enc.server_trust.server_key()[1], rows.layout(),
                               protocol.EncryptedSums(e, "server", share.groupings, share.shares), oriented,
                               st.support_bound(st.share_sigma(sigma)))
    np.testing.assert_array_equal(alone[oriented[0]], z_e)


@pytest.mark.parametrize("noise", ["simulation", "secure"])
def test_every_oracle_call_over_the_exchange_answers_what_the_in_process_link_answers(tmp_path, noise):
    """The server's RemoteLink and two PartyServers (threads here, processes in the test above) over a folder
    exchange, against the same oracle in one process with the same streams: a marginal of each party, the record
    count, a selection over both parties' candidates (noisy best scores, then the winner's exponential mechanism),
    InDif and l1 score vectors: equal bit for bit under simulation noise (secure noise: the same shapes, OS noise),
    and the parties' ledgers hold exactly what they were asked to pay."""
    import threading

    import numpy as np

    from vertisynth.core.dataset import VerticalPartition
    from vertisynth.core.identity import Identity, Roster
    from vertisynth.core.privacy import ZCDP, Budget, Charge, PrivacyLedger
    from vertisynth.core.sealing import RunKey
    from vertisynth.core.transport import FolderTransport
    from vertisynth.deploy.oracle_rounds import PartyServer, RemoteLink
    from vertisynth.deploy.session import RunState, Session, publish_party_key
    from vertisynth.pgm.oracle import ZCDPFilter
    from vertisynth.plugins.encoders.he.encoder import HEConfig, HEEncoder
    from vertisynth.vertical import VerticalOracle
    from vertisynth.vertical.link import PartyBudget, PartySide
    from tests.synthetic_tables import correlated

    data = correlated(400)
    part = VerticalPartition.from_lists([["a", "c", "e"], ["b", "d"]], ["P0", "P1"]).validate(data.domain)
    views = part.views(data)
    charges = [Charge("s", "m1", ZCDP(0.2)), Charge("s", "count", ZCDP(0.1)), Charge("s", "rounds", ZCDP(2.0)),
               Charge("s", "indif", ZCDP(0.3)), Charge("s", "l1", ZCDP(0.3))]

    def ledger():
        led = PrivacyLedger(Budget(1e6, 1e-9), noise=noise)
        led.plan(charges)
        return led

    def calls(oracle, led):
        rng = np.random.default_rng(0)
        out = [oracle.measure(("a", "c"), charges[0], rng).values, oracle.measure((), charges[1], rng).values]
        filt = ZCDPFilter(charges[2], led)
        cands = [("a", "c"), ("c", "e"), ("b", "d")]
        est = [np.full(oracle.domain.project(c).shape, data.n / oracle.domain.project(c).size()) for c in cands]
        for eps in (0.5, 1.0):
            out.append(np.array([oracle.select(cands, est, [1.0, 2.0, 1.5], [0.0, 0.0, 0.0], eps, filt, rng)]))
        out.append(oracle.measure(("b", "d"), filt, rng, sigma=2.0).values)
        out.append(oracle.indif([("a", "c"), ("b", "d"), ("c", "e")], charges[3], rng))
        out.append(oracle.l1_errors(cands, est, charges[4], rng))
        return out

    enc = HEEncoder(HEConfig(crypto="simulated"))
    local = calls(VerticalOracle(views, part, enc, led := ledger(), {p: np.random.default_rng(7 + i) for i, p
                                                                      in enumerate(part.names)}, "he"), led)
    ids = {n: Identity.generate(n) for n in ["server", "P0", "P1"]}
    roster = Roster.parse({n: i.public_text() for n, i in ids.items()})
    transport, key = FolderTransport(tmp_path / "ex"), RunKey()
    state = lambda n: RunState(n, "run", "cfg", ("P0", "P1"))  # noqa: E731
    party_ledgers, errors = {}, []

    def party(i, p):
        led = party_ledgers[p] = ledger()
        sess = Session(ids[p], roster, transport, state(p), 30.0, 0.01, server_key=key.public, sealed=True)
        sess.run_key = publish_party_key(sess)   # every query to it and every round with the other party sealed to it
        server = PartyServer(sess, PartySide(p, views[p], np.random.default_rng(7 + i), led), PartyBudget(led), enc,
                             part, data.domain, True)
        try:
            server.serve()
        except Exception as exc:   # noqa: BLE001 - reported by the test thread below
            errors.append(exc)

    threads = [threading.Thread(target=party, args=(i, p)) for i, p in enumerate(part.names)]
    for t in threads:
        t.start()
    sess = Session(ids["server"], roster, transport, state("server"), 30.0, 0.01, run_key=key, sealed=True)
    link = RemoteLink(sess, part, data.domain, enc, 30.0, 0.01)
    try:
        remote = calls(VerticalOracle.over(link, part, data.domain, enc, led2 := ledger(), "he"), led2)
    finally:
        link.done()
        for t in threads:
            t.join(30)
    assert not errors, errors
    for x, y in zip(local, remote):
        assert x.shape == y.shape
        if noise == "simulation":
            np.testing.assert_array_equal(x, y)
    assert led2.spent == led.spent
    spent = {p: [c.mechanism for c in party_ledgers[p].spent] for p in part.names}
    assert spent == {"P0": ["m1", "count", "rounds", "indif", "l1"], "P1": ["rounds", "indif", "l1"]}, spent


def test_a_silent_party_is_named_by_the_server_and_every_other_role_stops(tmp_path):
    """party2 never starts: the server's wait for its answer is bounded and names it in one line; the server tells
    party1 why the run stopped, and party1 stops at once with that line (not after its own timeout)."""
    _setup(tmp_path)
    server = popen(_server("--timeout", "15"), tmp_path)
    res1 = cli(*_party("party1"), cwd=tmp_path, ok=False, timeout=120)
    out, err = server.communicate(timeout=120)
    assert server.returncode != 0 and "no answer from ['party2']" in err and "is 'party2' down?" in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert res1.returncode != 0 and "the server stopped the run" in res1.stderr and "party2" in res1.stderr, res1.stderr


@pytest.mark.slow
def test_without_a_test_secret_the_parties_draw_secure_noise_and_the_release_says_so(tmp_path):
    """Production mode: no test secret, so every party draws its noise from the OS CSPRNG (secure noise) and the
    released ledger says so; the run completes with the same messages."""
    text = with_roster(tmp_path, CONFIG.replace("SYNTH", "aim").replace("PARAMS", AIM[1]).replace("CRYPTO", "real"),
                       [*PARTIES, "server"])
    (tmp_path / "job.toml").write_text(text)
    hello_all(tmp_path, PARTIES)
    res = parallel([_party(p) for p in PARTIES] + [_server()], tmp_path, timeout=300)
    assert all(r[0] == 0 for r in res), res
    ledger = json.loads((tmp_path / "out" / "ledger.json").read_text())
    assert "not for production" not in json.dumps(ledger) and ledger["cross_party"]
    assert ledger["noise"].startswith("secure"), ledger["noise"]
    assert len(pd.read_csv(tmp_path / "out" / "synthetic.csv")) > 0


def test_a_party_releases_no_more_under_one_payment_than_it_covers():
    """A selection round paid once: the party's noisy best score, then its exponential mechanism, together within
    the round's ρ; a server asking for the mechanism at the round's whole ε after the best score is refused."""
    import math
    import types

    import numpy as np

    from vertisynth.core.dataset import VerticalPartition
    from vertisynth.core.errors import BudgetError
    from vertisynth.core.privacy import ZCDP, Budget, Charge, PrivacyLedger
    from vertisynth.deploy.oracle_rounds import OracleQuery, PartyServer
    from vertisynth.plugins.encoders.he.encoder import HEConfig, HEEncoder
    from vertisynth.vertical.link import PartyBudget, PartySide, Spend
    from tests.synthetic_tables import correlated

    data = correlated(100)
    part = VerticalPartition.from_lists([["a", "c", "e"], ["b", "d"]], ["P0", "P1"]).validate(data.domain)
    ch = Charge("s", "rounds", ZCDP(1.0))
    led = PrivacyLedger(Budget(1e6, 1e-9))
    led.plan([ch])
    server = PartyServer(types.SimpleNamespace(me="P0"), PartySide("P0", part.views(data)["P0"],
                                                                   np.random.default_rng(0), led),
                         PartyBudget(led), HEEncoder(HEConfig(crypto="simulated")), part, data.domain, True)
    eps = 1.0
    rho_round, rho_g = eps * eps / 8, 0.5 * eps * eps / 8
    spend = {"id": 0, **Spend(ch, rho_round, True, "select").to_dict()}
    cands = [["a", "c"], ["c", "e"]]
    est = {f"est{i}": np.full(data.domain.project(c).shape, 1.0) for i, c in enumerate(cands)}
    best = OracleQuery("server", 0, "best", {"candidates": cands, "rho": rho_g, "sensitivity": 1.0,
                                             "sigma": 1 / math.sqrt(2 * rho_g), "spend": spend, "what": "select",
                                             "bins": [None, None]},
                       {"weights": np.ones(2), "offsets": np.zeros(2), **est})
    server.handle(best)
    with pytest.raises(BudgetError, match="already released"):
        server.handle(OracleQuery("server", 1, "em", {"epsilon": eps, "spend": spend, "what": "select"}, {}))
    server.handle(OracleQuery("server", 2, "em", {"epsilon": math.sqrt(8 * (rho_round - rho_g)), "spend": spend,
                                                  "what": "select"}, {}))   # the split the oracle makes: fine
    assert led.spent == [ch]


def test_across_machines_the_summing_party_keeps_the_blocks_and_the_answers_equal_the_one_process_run(
        tmp_path, monkeypatch):
    """Issue 31: across machines, E encrypts each block of its rows once per run; a later answer on a block names it
    and S sums the ciphertexts it kept (fresh sums and noise). Cross-party answers over the exchange (real Paillier,
    small test keys) equal the one-process run under the test secret, E's record of what S holds is S's store, and
    only the new blocks' ciphertexts cross the exchange."""
    import threading

    import numpy as np

    from vertisynth.core.dataset import VerticalPartition
    from vertisynth.core.identity import Identity, Roster
    from vertisynth.core.privacy import ZCDP, Budget, Charge, PrivacyLedger
    from vertisynth.core.sealing import RunKey
    from vertisynth.core.transport import FolderTransport
    from vertisynth.deploy.oracle_rounds import PartyServer, RemoteLink
    from vertisynth.deploy.session import RunState, Session, publish_party_key
    from vertisynth.plugins.encoders.he import paillier
    from vertisynth.plugins.encoders.he.encoder import HEConfig, HEEncoder
    from vertisynth.vertical import VerticalOracle
    from vertisynth.vertical.link import PartyBudget, PartySide
    from tests.synthetic_tables import correlated

    monkeypatch.setattr(paillier, "MIN_KEY_BITS", 512)
    data = correlated(150)
    part = VerticalPartition.from_lists([["a", "c", "e"], ["b", "d"]], ["P0", "P1"]).validate(data.domain)
    views = part.views(data)
    asks = [(("a", "b"), None), (("d", "a"), None), (("a", "b"), None), (("a", "c", "b"), None),
            (("a", "b"), {"b": np.array([0, 0, 1, 1, 2, 2, 3, 3])})]
    charges = [Charge("s", f"m{i}", ZCDP(0.5)) for i in range(len(asks))]

    def ledger():
        led = PrivacyLedger(Budget(1e6, 1e-9))
        led.plan(charges)
        return led

    def calls(oracle):
        rng = np.random.default_rng(0)
        return [oracle.measure(q, ch, rng, bins=b).values for (q, b), ch in zip(asks, charges)]

    rngs = lambda: {p: np.random.default_rng(7 + i) for i, p in enumerate(part.names)}  # noqa: E731
    local = calls(VerticalOracle(views, part, HEEncoder(HEConfig(crypto="simulated")), ledger(), rngs(), "he"))
    enc = HEEncoder(HEConfig(crypto="real", key_bits=512, workers=1, round_timeout=30.0))
    ids = {n: Identity.generate(n) for n in ["server", "P0", "P1"]}
    roster = Roster.parse({n: i.public_text() for n, i in ids.items()})
    transport, key = FolderTransport(tmp_path / "ex"), RunKey()
    state = lambda n: RunState(n, "run", "cfg", ("P0", "P1"))  # noqa: E731
    errors = []

    def party(p, rng):
        sess = Session(ids[p], roster, transport, state(p), 30.0, 0.01, server_key=key.public, sealed=True)
        sess.run_key = publish_party_key(sess)
        led = ledger()
        try:
            PartyServer(sess, PartySide(p, views[p], rng, led), PartyBudget(led), enc, part, data.domain,
                        True).serve()
        except Exception as exc:   # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=party, args=(p, r)) for p, r in rngs().items()]
    for t in threads:
        t.start()
    sess = Session(ids["server"], roster, transport, state("server"), 30.0, 0.01, run_key=key, sealed=True)
    link = RemoteLink(sess, part, data.domain, enc, 30.0, 0.01)
    try:
        remote = calls(VerticalOracle.over(link, part, data.domain, enc, ledger(), "he"))
    finally:
        link.done()
        for t in threads:
            t.join(30)
    assert not errors, errors
    for x, y in zip(local, remote):
        np.testing.assert_array_equal(x, y)
    stores = enc.__dict__["_blocks"]
    held = {k[1:3]: v for k, v in stores.items() if k[0] == "S"}
    # the one-process orientation: a at P0 for (a, b), (d, a) and (a, b on bins), and (a, c) at P0 for (a, c, b)
    # (a joint block of P0's whole rows): five answers, two blocks encrypted, both P0's
    assert {k: len(v.items) for k, v in held.items()} == {("P0", "P1"): 2}
    for k, v in stores.items():
        if k[0] == "S":
            record = stores[("E",) + k[1:]]
            assert list(record.items) == list(v.items) and record.bytes == v.bytes
            assert all(x is None for x, _ in record.items.values())   # E keeps no ciphertext, only what S holds
    rows = {f.name.split("__")[0]: f.stat().st_size for f in (tmp_path / "ex").iterdir()
            if f.name.startswith("he-rows-oracle-")}
    full, kept = rows["he-rows-oracle-000000"], rows["he-rows-oracle-000002"]   # a's rows, then a named again
    assert kept < full / 5, rows
