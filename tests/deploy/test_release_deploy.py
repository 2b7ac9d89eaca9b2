"""Vertical twins over a measure that releases once (`dpfm`, `grr`) across machines: the server runs the synthesizer,
and at its first cross-party question asks every party for its share of the release (deploy/oracle_rounds.py,
`RemoteLink.release`). Each party pays the plan's charges of its share on its own ledger, agrees the FM key with the
other parties (dpfm; sealed to each other party, never to the server), sketches or randomises its own columns with its
own stream and seals the share to the server, who checks each share against the plan before it answers anything from
them. Under a test secret the table and the ledger equal `simulate` bit for bit."""
import json

import pandas as pd
import pytest
from deploy_helpers import SECRET, SERVER_KEY, hello_all, parallel, with_roster

from vertisynth.deploy.simulate import simulate
from vertisynth.run.config import load_config

CONFIG = """
seed = 11
budget = { epsilon = 2.0, delta = 1e-5 }
[dataset]
name = "zoo"
params = { preset = "small-split", n = 160 }
[synthesizer]
use = "SYNTH"
params = { PARAMS vertical = VERTICAL }
"""
DPFM = '{ measure = "dpfm", trust = "server", params = { t = 200 } }'
GRR = '{ measure = "grr", trust = "none" }'
PARTIES = ["party1", "party2"]


def _setup(tmp_path, synth, params, vertical, exchange="shared"):
    text = CONFIG.replace("SYNTH", synth).replace("PARAMS", params).replace("VERTICAL", vertical)
    (tmp_path / "job.toml").write_text(with_roster(tmp_path, text, [*PARTIES, "server"]))
    hello_all(tmp_path, PARTIES, exchange=exchange, secret=SECRET)


def _party(p, exchange="shared"):
    return ["party", "job.toml", "--party", p, "--exchange", exchange, "--out", f"private_{p}", "--timeout", "60", "-q"]


def _server(exchange="shared"):
    return ["server", "job.toml", "--exchange", exchange, "--out", "out", *SERVER_KEY, "--timeout", "60", "-q"]


def _deployed_equals_simulated(tmp_path):
    res = parallel([_party(p) for p in PARTIES] + [_server()], tmp_path, timeout=300)
    assert all(r[0] == 0 for r in res), res
    sim = simulate(load_config(tmp_path / "job.toml"), SECRET)
    sim.synthetic.to_csv(tmp_path / "sim.csv", index=False)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "out" / "synthetic.csv"), pd.read_csv(tmp_path / "sim.csv"))
    ledger = json.loads((tmp_path / "out" / "ledger.json").read_text())
    want = json.loads(json.dumps(sim.ledger.to_dict()))
    assert {k: ledger[k] for k in want} == want   # every charge, ε, the cross-party answers: bit for bit
    assert not ledger["planned_but_unspent"]
    return ledger


TWINS = [("mst", "iters = 40,", DPFM),
         pytest.param("privmrf", "iters = 20, refine_iters = 5,", DPFM, marks=pytest.mark.slow),
         pytest.param("aim", "iters = 40, rounds = 10, degree = 2,", GRR, marks=pytest.mark.slow),
         pytest.param("mst", "iters = 40,", GRR, marks=pytest.mark.slow),
         pytest.param("private_pgm", "iters = 40,", DPFM, marks=pytest.mark.slow),
         pytest.param("dpsyn", "", GRR, marks=pytest.mark.slow)]


@pytest.mark.parametrize("synth, params, vertical", TWINS,
                         ids=["mst-dpfm", "privmrf-dpfm", "aim-grr", "mst-grr", "private_pgm-dpfm", "dpsyn-grr"])
def test_a_twin_over_a_release_across_processes_equals_the_one_process_run(tmp_path, synth, params, vertical):
    _setup(tmp_path, synth, params, vertical)
    ledger = _deployed_equals_simulated(tmp_path)
    measure = "dpfm (trust = server)" if "dpfm" in vertical else "grr (trust = none)"
    # the release spent (aim may choose no cross-party marginal at this size: then it only scored them off it)
    assert [c for c in ledger["charges"] if c["stage"] == "encoder"] and "not for production" in json.dumps(ledger)
    assert ledger.get("cross_party", {"through": [measure]})["through"] == [measure]
    names = sorted(p.name for p in (tmp_path / "shared").iterdir())
    assert all(n.endswith(".env") for n in names)   # only signed envelopes crossed
    keys = [n for n in names if n.startswith("keys-")]
    # dpfm: the FM key agreed between the two parties, each public key sealed to the other (none to the server)
    assert sorted(n.split("__")[1] + ">" + n.split("__")[3] for n in keys) == (
        ["party1>party2", "party2>party1"] if "dpfm" in vertical else [])


@pytest.mark.slow
def test_without_a_test_secret_a_twin_over_dpfm_draws_secure_noise_and_os_keys(tmp_path):
    """Production mode: no test secret, so each party draws its side of the key agreement, the phantoms and n̂'s
    noise from the OS CSPRNG; the released ledger says secure noise and spends exactly the plan."""
    text = CONFIG.replace("SYNTH", "mst").replace("PARAMS", "iters = 40,").replace("VERTICAL", DPFM)
    (tmp_path / "job.toml").write_text(with_roster(tmp_path, text, [*PARTIES, "server"]))
    hello_all(tmp_path, PARTIES)
    res = parallel([_party(p) for p in PARTIES] + [_server()], tmp_path, timeout=300)
    assert all(r[0] == 0 for r in res), res
    ledger = json.loads((tmp_path / "out" / "ledger.json").read_text())
    assert ledger["noise"].startswith("secure") and not ledger["planned_but_unspent"], ledger["noise"]
    assert "not for production" not in json.dumps(ledger) and len(pd.read_csv(tmp_path / "out" / "synthetic.csv"))


# -- the release over the exchange, every role a thread of this process (fast) ----------------------------------------
def _measures():
    from vertisynth.plugins.encoders.dpfm import DPFMConfig, DPFMEncoder
    from vertisynth.plugins.encoders.grr import GRREncoder
    return {"dpfm": lambda: DPFMEncoder(DPFMConfig(t=300)), "grr": GRREncoder}


class _Run:
    """A two-party table, the plan's release charges, and the roles' identities over a folder exchange."""

    def __init__(self, tmp_path, kind, noise="simulation", n=300, parts=(("a", "c", "e"), ("b", "d"))):
        from tests.synthetic_tables import correlated
        from vertisynth.core.dataset import VerticalPartition
        from vertisynth.core.identity import Identity, Roster
        from vertisynth.core.interfaces import PlanContext
        from vertisynth.core.privacy import Budget
        from vertisynth.core.sealing import RunKey
        from vertisynth.core.transport import FolderTransport

        self.data = correlated(n)
        self.part = VerticalPartition.from_lists([list(p) for p in parts], [f"P{i}" for i in range(len(parts))]
                                                 ).validate(self.data.domain)
        self.views = self.part.views(self.data)
        self.budget, self.noise, self.kind = Budget(1e6, 1e-9), noise, kind
        self.ctx = PlanContext(self.data.domain, self.part, self.budget)
        self.ids = {r: Identity.generate(r) for r in ["server", *self.part.names]}
        self.roster = Roster.parse({r: i.public_text() for r, i in self.ids.items()})
        self.transport, self.key = FolderTransport(tmp_path / "ex"), RunKey()
        self.party_keys, self.errors, self.servers = {}, [], {}

    def measure(self):
        """A measure planned on the run's public facts, and a ledger holding its release's charges."""
        from vertisynth.core.privacy import PrivacyLedger
        enc = _measures()[self.kind]()
        led = PrivacyLedger(self.budget, noise=self.noise)
        led.plan(enc.release_cost(self.ctx, 4.0))
        return enc, led

    def state(self, role):
        from vertisynth.deploy.session import RunState
        return RunState(role, "run", "cfg", tuple(self.part.names))

    def rngs(self):
        import numpy as np
        return {p: np.random.default_rng(7 + i) for i, p in enumerate(self.part.names)}

    def party_session(self, p, timeout=30.0):
        from vertisynth.deploy.session import Session, publish_party_key
        sess = Session(self.ids[p], self.roster, self.transport, self.state(p), timeout, 0.01,
                       server_key=self.key.public, sealed=True)
        sess.run_key = self.party_keys[p] = publish_party_key(sess)
        return sess

    def serve(self, p, rng, measure=None):
        from vertisynth.deploy.oracle_rounds import PartyServer
        from vertisynth.vertical.link import PartyBudget, PartySide
        enc, led = measure or self.measure()
        sess = self.party_session(p)
        server = self.servers[p] = PartyServer(sess, PartySide(p, self.views[p], rng, led), PartyBudget(led), enc,
                                               self.part, self.data.domain, True)
        try:
            server.serve()
        except Exception as exc:   # noqa: BLE001 - reported by the test
            self.errors.append(exc)

    def server(self, enc, led, timeout=30.0):
        from vertisynth.deploy.oracle_rounds import RemoteLink
        from vertisynth.deploy.session import Session
        sess = Session(self.ids["server"], self.roster, self.transport, self.state("server"), timeout, 0.01,
                       run_key=self.key, sealed=True)
        return sess, RemoteLink(sess, self.part, self.data.domain, enc, timeout, 0.01, ledger=led)


def _threads(run):
    import threading
    rngs = run.rngs()
    threads = [threading.Thread(target=run.serve, args=(p, rngs[p])) for p in run.part.names]
    for t in threads:
        t.start()
    return threads


ASKS = [("a", "b"), ("d", "c"), ("e", "b")]
# two parties; three (dpfm: the leader wraps a fresh group key for each other party, sealed to it)
PARTS = {2: (("a", "c", "e"), ("b", "d")), 3: (("a", "c"), ("b",), ("d", "e"))}


@pytest.mark.parametrize("kind, parts", [("dpfm", 2), ("grr", 2), ("dpfm", 3)], ids=["dpfm", "grr", "dpfm-3"])
def test_the_release_over_the_exchange_answers_what_the_one_process_release_answers(tmp_path, kind, parts):
    """The server's RemoteLink and two PartyServers over a folder exchange against the one-process oracle with the
    same streams (and the same key binding): every cross-party answer equal bit for bit, the server's ledger the same
    spends in the same order, each party's ledger its own share's charges only. The server's measure never holds an
    FM key; the parties' agree. A curious party holding that key opens no share but its own: every share is sealed
    to the server."""
    import numpy as np

    from vertisynth.core.envelope import open_envelope
    from vertisynth.core.errors import MessageError
    from vertisynth.core.sealing import Sealed
    from vertisynth.deploy.session import SEAL_INFO, Session, key_context, seal_aad
    from vertisynth.vertical import VerticalOracle

    run = _Run(tmp_path, kind, parts=PARTS[parts])
    local_enc, local_led = run.measure()
    local_enc.set_key_context(key_context("run", "cfg"))
    oracle = VerticalOracle(run.views, run.part, local_enc, local_led, run.rngs(), kind)
    local = [oracle.measure(q, None, np.random.default_rng(0)).values for q in ASKS]
    threads = _threads(run)
    enc, led = run.measure()
    sess, link = run.server(enc, led)
    try:
        remote_oracle = VerticalOracle.over(link, run.part, run.data.domain, enc, led, kind)
        remote = [remote_oracle.measure(q, None, np.random.default_rng(0)).values for q in ASKS]
    finally:
        link.done()
        for t in threads:
            t.join(60)
    assert not run.errors, run.errors
    for x, y in zip(local, remote):
        np.testing.assert_array_equal(x, y)
    assert led.spent == local_led.spent
    assert led.cross_party == local_led.cross_party
    for p in run.part.names:   # each party spent its own share's charges, nothing else
        assert run.servers[p].side.noise.spent == enc.release_charges(p)
    names = sorted(f.name.removesuffix(".env") for f in (tmp_path / "ex").iterdir())
    shares = [n for n in names if n.startswith("oracle-answer-")]
    assert len(shares) == parts   # one release, one share per party
    if kind == "dpfm":
        fm = {s.measure.__dict__["_keys"][p].fm_key() for p, s in run.servers.items()}
        assert len(fm) == 1 and enc.__dict__["_keys"] is None   # agreed by the parties; the server has none
        # each public key to each other party, the wrapped group key (three parties) from the leader to each other
        assert len([n for n in names if n.startswith("keys-pub__")]) == parts * (parts - 1)
        assert len([n for n in names if n.startswith("keys-wrap__P0__")]) == (parts - 1 if parts > 2 else 0)
        assert all(n.split("__")[3] != "server" for n in names if n.startswith("keys-"))
    else:
        assert not [n for n in names if n.startswith("keys-")]   # grr's PRF keys stay at their parties
    for p in run.part.names:   # a curious party, with its run key (and dpfm's FM key), reads no other share
        reader = Session(None, run.roster, run.transport, run.state(p), 5.0, run_key=run.party_keys[p], sealed=True)
        other = next(n for n in shares if n.split("__")[1] != p)
        with pytest.raises(MessageError, match="only the server opens it|does not open with this run key"):
            reader.open(other, (other.split("__")[0],), "server")
        header, body = open_envelope(run.transport.read(other), run.roster, None, other)   # its run key on the body
        with pytest.raises(MessageError):
            run.party_keys[p].open(Sealed.from_bytes(body, other), seal_aad(header.run, header.config, header.sender,
                                                                             header.round, other), SEAL_INFO, other)


# -- refusals, each in one line, before a row is read or a share is used -----------------------------------------------
def _one_line(exc):
    assert "\n" not in str(exc.value).strip(), str(exc.value)


def _release_query(charges, k=0):
    from vertisynth.deploy.oracle_rounds import OracleQuery
    return OracleQuery("server", k, "release", {"charges": charges, "what": "the release"}, {})


def _grr_party(run):
    import types

    from vertisynth.deploy.oracle_rounds import PartyServer
    from vertisynth.vertical.link import PartyBudget, PartySide
    enc, led = run.measure()
    return enc, led, PartyServer(types.SimpleNamespace(me="P0"), PartySide("P0", run.views["P0"], run.rngs()["P0"], led),
                                 PartyBudget(led), enc, run.part, run.data.domain, True)


def test_a_party_refuses_a_release_its_plan_lacks_a_second_one_and_one_paid_otherwise(tmp_path):
    import types

    import numpy as np

    from vertisynth.core.errors import VertisynthError
    from vertisynth.core.privacy import PrivacyLedger
    from vertisynth.deploy.oracle_rounds import PartyServer
    from vertisynth.plugins.encoders.he.encoder import HEConfig, HEEncoder
    from vertisynth.vertical.link import PartyBudget, PartySide

    run = _Run(tmp_path, "grr")
    enc, led, party = _grr_party(run)
    mine = [c.to_dict() for c in enc.release_charges("P0")]
    theirs = [c.to_dict() for c in enc.release_charges("P1")]
    # paid otherwise than the plan's charges of this share: another party's, one short, one charge changed
    changed = [dict(mine[0], rho=1.0, cost_type="ZCDP", epsilon=None)] + mine[1:]
    for charges, match in (({"P0": theirs}, "plans"), ({"P0": mine[:-1]}, "plans"), ({"P0": changed}, "plans"),
                           ({"P1": mine}, "P0")):
        with pytest.raises(VertisynthError, match=match) as exc:
            party.handle(_release_query(charges))
        _one_line(exc)
    assert led.spent == [] and not party.released
    header, arrays = party.handle(_release_query({"P0": mine, "P1": theirs}))
    assert led.spent == enc.release_charges("P0") and arrays["release"].dtype == np.uint8
    with pytest.raises(VertisynthError, match="a second release is refused") as exc:   # a second release
        party.handle(_release_query({"P0": mine}, 1))
    _one_line(exc)
    assert led.spent == enc.release_charges("P0")
    # a run whose plan has no release (a twin over he): the party makes none
    he_led = PrivacyLedger(run.budget, noise="simulation")
    he = PartyServer(types.SimpleNamespace(me="P0"), PartySide("P0", run.views["P0"], run.rngs()["P0"], he_led),
                     PartyBudget(he_led), HEEncoder(HEConfig(crypto="simulated")), run.part, run.data.domain, True)
    with pytest.raises(VertisynthError, match="plan has no release") as exc:
        he.handle(_release_query({"P0": mine}))
    _one_line(exc)
    assert he_led.spent == []


@pytest.mark.parametrize("kind", ["dpfm", "grr"])
def test_the_server_refuses_a_share_that_does_not_match_the_plan_and_a_second_release(tmp_path, kind):
    """What the server checks before it answers anything from a release: one share per planned party, each of the
    planned attributes and sizes and made with the planned parameters (t, ε', k_p, b, γ for dpfm; ε₀ and one row
    count for grr); and a release is taken once."""
    import attrs
    import numpy as np

    from vertisynth.core.domain import Domain
    from vertisynth.core.errors import VertisynthError
    from vertisynth.core.keys import agree_keys

    run = _Run(tmp_path, kind)
    enc, led = run.measure()
    keys = agree_keys(run.part.names, np.random.default_rng(1)) if enc.agrees_keys() else {}
    shares = [enc.release_at(p, run.views[p], led, r, keys.get(p)) for p, r in run.rngs().items()]
    wide = Domain(shares[0].domain.attributes, tuple(s + 1 for s in shares[0].domain.shape))
    if kind == "dpfm":   # sketches of a wider domain, and of a t other than the plan's
        grown = attrs.evolve(shares[0], domain=wide, sketches={a: np.pad(x, ((0, 0), (0, 1)), constant_values=x.min())
                                                                for a, x in shares[0].sketches.items()})
        other = attrs.evolve(shares[0], t=shares[0].t - 1, sketches={a: x[1:] for a, x in shares[0].sketches.items()})
    else:                # columns of a wider domain, and at an ε₀ other than the plan's
        grown = attrs.evolve(shares[0], domain=wide)
        other = attrs.evolve(shares[0], epsilon=shares[0].epsilon * 2)
    bad = [([grown.validate(), shares[1]], "the plan says"), ([other.validate(), shares[1]], "the plan says"),
           ([shares[0]], "no "), ([shares[0], shares[0], shares[1]], "two releases"),
           ([shares[1], attrs.evolve(shares[1], party="P9")], "not a planned party")]
    for messages, match in bad:
        with pytest.raises(VertisynthError, match=match) as exc:
            enc.take_release(messages)
        _one_line(exc)
    enc.take_release(shares)
    with pytest.raises(VertisynthError, match="a second release is refused") as exc:
        enc.take_release(shares)
    _one_line(exc)


@pytest.mark.parametrize("how", ["in clear", "sealed to another role"])
def test_the_server_refuses_a_share_in_clear_or_sealed_to_another_role(tmp_path, how):
    """A party's share reaches the server only sealed to the server's run key: one signed but in clear, or sealed to
    the other party's run key, is refused in one line before it is read (and nothing is answered from it)."""
    import numpy as np

    from vertisynth.core.envelope import seal
    from vertisynth.core.errors import MessageError
    from vertisynth.core.sealing import seal_to
    from vertisynth.deploy.oracle_rounds import ANSWER, OracleAnswer
    from vertisynth.deploy.session import SEAL_INFO, SEALED, seal_aad
    from vertisynth.vertical import VerticalOracle

    run = _Run(tmp_path, "grr")
    for p in run.part.names:
        run.party_session(p)
    enc, led = run.measure()
    share = enc.release_at("P0", run.views["P0"], led, np.random.default_rng(0))
    body = OracleAnswer("P0", 0, {}, {"release": np.frombuffer(share.to_bytes(), np.uint8)}).to_bytes()
    name = f"{ANSWER}000000__P0__to__server__0"
    if how == "in clear":
        data = seal(run.ids["P0"], "run", "cfg", ["server"], f"{ANSWER}000000", "oracle_answer", body)
    else:
        raw = seal_to(run.party_keys["P1"].public, body, seal_aad("run", "cfg", "P0", f"{ANSWER}000000", name),
                      SEAL_INFO)
        data = seal(run.ids["P0"], "run", "cfg", ["server"], f"{ANSWER}000000", SEALED + "oracle_answer",
                    raw.to_bytes())
    run.transport.send(name, data)
    s_enc, s_led = run.measure()
    _, link = run.server(s_enc, s_led, timeout=5.0)
    oracle = VerticalOracle.over(link, run.part, run.data.domain, s_enc, s_led, "grr")
    with pytest.raises(MessageError, match="in clear" if how == "in clear" else "does not open") as exc:
        oracle.measure(("a", "b"), None, np.random.default_rng(0))
    _one_line(exc)
    assert s_enc.__dict__.get("_released") is None and not s_led.cross_party


def test_party_keys_is_refused_for_a_twin_whose_parties_agree_the_key_in_party_synth(tmp_path):
    from vertisynth.core.errors import ConfigError
    from vertisynth.deploy.party import run_party_keys
    from vertisynth.run.config import parse_config
    import tomllib

    text = CONFIG.replace("SYNTH", "mst").replace("PARAMS", "iters = 40,").replace("VERTICAL", DPFM)
    with pytest.raises(ConfigError, match="inside `party synth`") as exc:
        run_party_keys(parse_config(tomllib.loads(text)), "party1", tmp_path / "shared", tmp_path / "private")
    _one_line(exc)
