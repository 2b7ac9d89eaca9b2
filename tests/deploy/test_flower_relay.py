"""The Flower runtime's two halves without Flower (no flwr needed): the server's relay driving real party
workers through their bridges (each party step a separate process on its own relay folder), and the relay's
checks on the traffic. The loopback deployment with Flower itself is tests/deploy/test_flower.py."""
import numpy as np
import pandas as pd
import pytest
from deploy_helpers import SECRET, collab_census_job, with_roster

from vertisynth.core.errors import MessageError
from vertisynth.deploy.flower.bridge import DONE, FAILED, WAITING, Bridge, NodeSettings, Reply
from vertisynth.core.courier import parse_slot
from vertisynth.deploy.flower.relay import Relay, addressed_to, build, steps_for
from vertisynth.deploy.simulate import simulate
from vertisynth.run.config import load_config

CONFIG = """
seed = 5
budget = {{ epsilon = 8.0, delta = 1e-5 }}
[dataset]
name = "csv"
[dataset.params]
path = "{full}"
[dataset.params.schema]
a = {{ kind = "categorical", categories = ["1", "2", "3"] }}
b = {{ kind = "categorical", categories = ["1", "2"] }}
[[parties]]
name = "hospital"
attributes = ["a"]
[[parties]]
name = "insurer"
attributes = ["b"]
[synthesizer]
use = "vertimrf"
params = {{ encoder_params = {{ t = 32 }}, local_params = {{ iters = 5, refine_iters = 2 }}, iters = 5, rounds = 1 }}
[[evaluators]]
use = "tvd"
params = {{ ways = [2] }}
"""
PARTIES = ["hospital", "insurer"]


def run_relay(relay, config, participants):
    """Every step of `config` through `relay`; each participant's worker is stopped afterwards, whatever happened."""
    try:
        return relay.run(steps_for(config))
    finally:
        for b in participants:
            b.abort("test over")


def test_relay_and_bridges_publish_the_simulated_table(tmp_path):
    # the relay's end-to-end flow with the bridges' real workers (cold `python -m` starts); the others fork them
    rng = np.random.default_rng(1)
    a = rng.integers(1, 4, 300)
    full = pd.DataFrame({"a": a, "b": np.where(rng.random(300) < 0.7, (a > 1) + 1, rng.integers(1, 3, 300))})
    full.to_csv(tmp_path / "full.csv", index=False)
    (tmp_path / "job.toml").write_text(with_roster(tmp_path, CONFIG.format(full=tmp_path / "full.csv"), PARTIES))
    bridges = {}
    for node, (p, col) in enumerate(zip(PARTIES, "ab")):
        full[[col]].to_csv(tmp_path / f"{p}.csv", index=False)
        bridges[node] = Bridge(NodeSettings.from_node_config({
            "party": p, "config": str(tmp_path / "job.toml"), "out": str(tmp_path / f"private_{p}"),
            "work": str(tmp_path / f"work_{p}"), "csv": str(tmp_path / f"{p}.csv"), "test-secret": SECRET,
            "timeout": 60}))

    def ask(requests):   # the runtime's round trip, here a direct call of each party's bridge
        return {n: bridges[n].step(step, envelopes, wait=30) for n, (step, envelopes) in requests.items()}

    from vertisynth.deploy.flower.bridge import ServerBridge
    from vertisynth.deploy.flower.relay import keep_exchange

    # the server role runs beside the parties in the synth step: it publishes the run key they seal to
    server = ServerBridge(tmp_path / "job.toml", tmp_path / "out", tmp_path / "work_server",
                          tmp_path / "private_server" / "server_signing.pem", wait=0.5)
    config = load_config(tmp_path / "job.toml")
    relay = Relay(PARTIES, list(bridges), ask, timeout=120, local=server)
    envelopes = run_relay(relay, config, [*bridges.values(), server])
    assert relay.rounds_per_step["hello"] == 2 and relay.rounds_per_step["keys"] == 2   # post, then collect
    keep_exchange(tmp_path / "out", envelopes)
    assert "key__server__to__all__server" in envelopes
    assert all(n.startswith("key__") or (n.split("__")[0] not in ("synth", "ledger"))
               or b"sealed:" in envelopes[n][:400] for n in envelopes)   # every synth/ledger body sealed
    simulated = simulate(config, SECRET).synthetic
    simulated.to_csv(tmp_path / "sim.csv", index=False)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "out" / "synthetic.csv"), pd.read_csv(tmp_path / "sim.csv"))
    with pytest.raises(Exception, match="reused output folder"):
        build(config, envelopes, tmp_path / "out")   # relay.build (a server with its key in OUT) refuses a reused out


def test_a_failed_step_names_the_party_and_its_error(tmp_path, forked_bridges):
    (tmp_path / "job.toml").write_text(with_roster(tmp_path, CONFIG.format(full=tmp_path / "none.csv"), PARTIES))
    bridge = Bridge(NodeSettings("hospital", tmp_path / "job.toml", tmp_path / "private_hospital",
                                 tmp_path / "work", csv=tmp_path / "missing.csv", timeout=5))
    reply = bridge.step("synth", {}, wait=60)   # no hello first: the party command fails with its one line
    assert reply.status == FAILED and "party hello" in reply.error, reply


def _reply(party, status=DONE, **envelopes):
    return Reply(party, status, {k: v for k, v in envelopes.items()})


def test_the_relay_checks_who_speaks_for_whom():
    parties = ["hospital", "insurer"]
    with pytest.raises(MessageError, match="1 SuperNode"):
        Relay(parties, [1], lambda r: {}, 5)
    bad = {1: _reply("mallory"), 2: _reply("insurer")}
    with pytest.raises(MessageError, match="not a party of this config"):
        Relay(parties, [1, 2], lambda r: bad, 5).step("hello")
    twice = {1: _reply("insurer"), 2: _reply("insurer")}
    with pytest.raises(MessageError, match="two SuperNodes speak for party 'insurer'"):
        Relay(parties, [1, 2], lambda r: twice, 5).step("hello")
    forged = {1: Reply("hospital", DONE, {"hello__insurer__to__all__0": b"x"}), 2: _reply("insurer")}
    with pytest.raises(MessageError, match="under another sender's name"):
        Relay(parties, [1, 2], lambda r: forged, 5).step("hello")
    failed = {1: Reply("hospital", FAILED, {}, "CSV 'h.csv' does not exist"), 2: _reply("insurer")}
    with pytest.raises(MessageError, match="party 'hospital' failed in step 'synth': CSV 'h.csv' does not exist"):
        Relay(parties, [1, 2], lambda r: failed, 5).step("synth")
    stuck = {1: Reply("hospital", WAITING, {}, "round 'keys-pub'"), 2: Reply("insurer", WAITING, {}, "round 'keys-pub'")}
    with pytest.raises(MessageError, match="every party left waits for envelopes nobody sent"):
        Relay(parties, [1, 2], lambda r: stuck, 5).step("keys")


class _Local:
    """A stand-in local participant (the he server role), answering from a script."""
    party, steps = "server", frozenset({"synth"})

    def __init__(self, *replies):
        self.replies, self.seen = list(replies), []

    def __call__(self, step, inbound):
        self.seen.append(sorted(inbound))
        return self.replies.pop(0)


def test_the_local_participant_gets_its_mail_and_its_failure_stops_the_run():
    parties = ["hospital", "insurer"]
    with pytest.raises(Exception, match="clashes with a party"):
        Relay(["server", "insurer"], [1, 2], lambda r: {}, 5, local=_Local())
    sent = {1: Reply("hospital", DONE, {"synth__hospital__to__server__000": b"h"}),
            2: Reply("insurer", DONE, {"hello__insurer__to__all__0": b"i"})}
    local = _Local(Reply("server", DONE, {"he-queries__server__to__all__0": b"q"}))
    relay = Relay(parties, [1, 2], lambda r: sent, 5, local=local)
    relay.step("hello")                       # the local participant takes no part in the hello step
    assert local.seen == []
    relay.step("synth")                       # then it gets what is addressed to it and to all, this round's included
    assert local.seen == [["hello__insurer__to__all__0", "synth__hospital__to__server__000"]]
    assert "he-queries__server__to__all__0" in relay.envelopes
    failing = _Local(Reply("server", FAILED, {}, "he-queries: refused"))
    with pytest.raises(MessageError, match="the server role 'server' failed in step 'synth': he-queries: refused"):
        Relay(parties, [1, 2], lambda r: sent, 5, local=failing).step("synth")
    forging = _Local(Reply("server", DONE, {"synth__hospital__to__server__001": b"x"}))
    with pytest.raises(MessageError, match="under another sender's name"):
        Relay(parties, [1, 2], lambda r: sent, 5, local=forging).step("synth")


def test_envelopes_go_only_to_their_recipients():
    assert addressed_to("hello__hospital__to__all__0", "insurer")
    assert not addressed_to("hello__hospital__to__all__0", "hospital")           # never back to its sender
    assert not addressed_to("synth__hospital__to__server__000", "insurer")        # the server's mail stays there
    assert addressed_to("keys-wrap__hospital__to__bank__bank", "bank")
    assert not addressed_to("keys-wrap__hospital__to__bank__bank", "insurer")
    assert addressed_to("align-r01__a__to__b+c__x", "c")


def test_collab_slots_go_only_to_the_roles_that_read_them():
    """One rule for deploy's and collab's slots (core/courier.py): a slot goes to the roles its name addresses. A
    name outside the one grammar (collab's old `collab_<kind>__<sender>__<rest>[__to__<r>]`) is refused, not routed."""
    roles = ("A", "B", "server0", "server1", "publisher")
    for sealed, to in (("collab_share__A__to__server1__measure-age-income", "server1"),
                       ("collab_noisy__server0__to__A__age-grid", "A"),
                       ("collab_noisy__server0__to__publisher__measure-age-income", "publisher"),
                       ("collab_vote__A__to__publisher__run0001", "publisher"),
                       ("collab_step__publisher__to__server0__0001", "server0")):
        assert [r for r in roles if addressed_to(sealed, r)] == [to], sealed   # only its one recipient
    for broadcast in ("hello__A__to__all__0", "key__server0__to__all__collab", "key__publisher__to__all__collab"):
        sender = broadcast.split("__")[1]
        assert all(addressed_to(broadcast, r) == (r != sender) for r in roles)
    for old in ("collab_noisy__server0__age-grid__to__A", "collab_hello__A", "collab_vote__A__run0001"):
        with pytest.raises(MessageError, match="not a message name"):
            addressed_to(old, "A")


HE = """
seed = 11
budget = { epsilon = 2.0, delta = 1e-5 }
[dataset]
name = "census"
params = { n = 120 }
[synthesizer]
use = "vertimrf"
params = { encoder = "he", bins = 1000, iters = 20, local_params = { iters = 10, refine_iters = 5 }, encoder_params = { crypto = "real", cliques = 2, selection_pairs = 3, workers = 1, key_bits = 512, round_timeout = 120.0 } }
"""


def test_he_rounds_over_the_relay_with_the_server_as_a_local_participant(tmp_path, forked_bridges, monkeypatch):
    """Encoder "he": the server signs its clique queries mid-run; the relay drives it as its own worker beside the
    parties (bridge.ServerBridge) and the table it writes equals the simulation (crypto "simulated")."""
    pytest.importorskip("phe")
    pytest.importorskip("gmpy2")
    from vertisynth.deploy.flower.bridge import ServerBridge
    from vertisynth.deploy.flower.relay import keep_exchange
    from vertisynth.plugins.encoders.he import paillier

    # 512-bit test keys (key_bits in HE; the floor lowered here, which the forked bridges' steps keep): what the relay
    # carries and the table do not depend on the key's size; the 2048-bit key pairs and encryptions were about half
    # this test's CPU (docs/lab/ci-speed-2026-11-30.md); tests/deploy/test_he_deploy.py runs 2048 bits across processes
    monkeypatch.setattr(paillier, "MIN_KEY_BITS", 512)

    parties = ["registry", "employer"]
    text = with_roster(tmp_path, HE, [*parties, "server"])
    (tmp_path / "job.toml").write_text(text)
    bridges = {node: Bridge(NodeSettings.from_node_config({
        "party": p, "config": str(tmp_path / "job.toml"), "out": str(tmp_path / f"private_{p}"),
        "work": str(tmp_path / f"work_{p}"), "test-secret": SECRET, "timeout": 60})) for node, p in enumerate(parties)}
    with pytest.raises(Exception, match="does not exist"):
        ServerBridge(tmp_path / "job.toml", tmp_path / "out", tmp_path / "work_server", tmp_path / "no_key.pem")
    server = ServerBridge(tmp_path / "job.toml", tmp_path / "out", tmp_path / "work_server",
                          tmp_path / "private_server" / "server_signing.pem", wait=0.5)

    def ask(requests):
        return {n: bridges[n].step(step, envelopes, wait=2) for n, (step, envelopes) in requests.items()}

    config = load_config(tmp_path / "job.toml")
    relay = Relay(parties, list(bridges), ask, timeout=120, local=server)
    envelopes = run_relay(relay, config, [*bridges.values(), server])
    keep_exchange(tmp_path / "out", envelopes)
    names = sorted(envelopes)
    assert {f"he-queries__server__to__{p}__0" for p in parties} <= set(names)   # mid-run, sealed to each party
    assert any(n.startswith("he-sums-cliques__") for n in names)               # and the parties answered it
    sim = load_config_text(tmp_path, text.replace('crypto = "real"', 'crypto = "simulated"'))
    simulate(sim, SECRET).synthetic.to_csv(tmp_path / "sim.csv", index=False)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "out" / "synthetic.csv"), pd.read_csv(tmp_path / "sim.csv"))


def load_config_text(tmp_path, text):
    (tmp_path / "sim.toml").write_text(text)
    return load_config(tmp_path / "sim.toml")


def collab_setup(tmp_path):
    """A [collab] run (2 custodians, 2 compute servers, a publisher; as tests/collab/test_collab_distributed.py):
    the custodians' CSVs and the config with every role's roster key (`party init`, private_<role>/)."""
    text, csvs = collab_census_job(tmp_path, 400)
    (tmp_path / "c.toml").write_text(with_roster(tmp_path, text, ["A", "B", "server0", "server1", "publisher"]))
    return tmp_path / "c.toml", csvs


def collab_node(tmp_path, name, csvs, **extra):
    role = "collab-server" if name.startswith("server") else "custodian"
    return {"party": name, "role": role, "config": str(tmp_path / "c.toml"), "out": str(tmp_path / f"private_{name}"),
            "work": str(tmp_path / f"work_{name}"), "seed": 3, "timeout": 120,
            **({"csv": str(csvs[name])} if role == "custodian" else {}), **extra}


def test_collab_rounds_over_the_relay_publish_the_simulation(tmp_path, forked_bridges):
    """Custodians and compute servers behind their bridges, the publisher as the relay's local participant: the
    release equals `vertisynth run` of the same config byte for byte; each server got only its own shares."""
    from vertisynth.deploy.flower.bridge import PublisherBridge
    from vertisynth.deploy.flower.relay import collab_roles, keep_exchange
    from vertisynth.run.pipeline import run

    cfg, csvs = collab_setup(tmp_path)
    config = load_config(cfg)
    roles = collab_roles(config)
    assert roles == ["A", "B", "server0", "server1"] and steps_for(config) == ["collab"]
    bridges = {node: Bridge(NodeSettings.from_node_config(collab_node(tmp_path, name, csvs)))
               for node, name in enumerate(roles)}
    publisher = PublisherBridge(cfg, tmp_path / "out", tmp_path / "work_publisher",
                                tmp_path / "private_publisher" / "publisher_signing.pem", timeout=120, wait=0.5)
    got: dict[str, set[str]] = {name: set() for name in roles}

    def ask(requests):
        for n, (_, envelopes) in requests.items():
            got[roles[n]] |= set(envelopes)
        return {n: bridges[n].step(step, envelopes, wait=2) for n, (step, envelopes) in requests.items()}

    relay = Relay(roles, list(bridges), ask, timeout=120, local=publisher)
    envelopes = run_relay(relay, config, [*bridges.values(), publisher])
    keep_exchange(tmp_path / "out", envelopes)
    sim = run(config, tmp_path / "sim")
    assert (tmp_path / "out" / "synthetic.csv").read_bytes() == (tmp_path / "sim" / "synthetic.csv").read_bytes()
    for s in ("server0", "server1"):   # a compute server got its own shares, never another's nor any noisy share
        kinds = {parse_slot(n).round for n in got[s]}
        assert kinds <= {"hello", "key"} | {"collab_share"}, kinds
        assert all(parse_slot(n).to == (s,) for n in got[s] if n.startswith("collab_share__"))
    assert sim.report["privacy"]["spent_epsilon"] > 0
