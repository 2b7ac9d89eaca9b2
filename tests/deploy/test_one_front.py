"""Issue 31, "one of each": deploy's Session and collab's Channel are one messaging front end over core/courier.py:
one slot grammar (`parse_slot`), one hello, one run id, one run-key body, one receive. Each test reads what one
front end wrote with the other's code; on the code before (two slot grammars, two hellos, two run-key bodies, two
receives) each failed."""
import threading

import numpy as np
import pytest
from deploy_helpers import collab_census_job

from vertisynth.collab.channel import Channel, where
from vertisynth.collab.secure_aggregation import CountShare
from vertisynth.core.courier import Slot, parse_slot, pattern, slot
from vertisynth.core.envelope import ALL
from vertisynth.core.errors import ConfigError, MessageError
from vertisynth.core.identity import Identity, Roster
from vertisynth.core.transport import FolderTransport
from vertisynth.deploy.session import RunState, Session, hello, read_hellos
from vertisynth.run.config import load_config
from vertisynth.run.pipeline import make_plan


def _share(party="A"):
    return CountShare(party=party, query="q", server=0, n_servers=2, shape=[3],
                      share=np.array([1, 2, 3], np.uint64)).validate()


def test_the_one_grammar_round_trips_and_refuses_what_it_cannot_name():
    assert parse_slot(slot("synth", "hospital", ["server"], "003")) == Slot("synth", "hospital", ("server",), "003")
    assert parse_slot(slot("hello", "A", [ALL])) == Slot("hello", "A", (ALL,), "0")
    assert parse_slot("align-r01__a__to__b+c__x").to == ("b", "c")
    assert slot("collab_noisy", "server0", ["publisher"], "measure-age-1f2e") == \
        "collab_noisy__server0__to__publisher__measure-age-1f2e"
    assert pattern("collab_share", "A") == "collab_share__A__to__*__*"
    for bad in ("collab_hello__A", "synth__a__b__c__d", "x__a__to____t", "x__a+b__to__c__t", "x__a__to__c__t+u",
                "x__a__to__c__t/u"):
        with pytest.raises(MessageError, match="not a message name"):
            parse_slot(bad)
    for role in ("a__b", "all", "a+b", ""):
        with pytest.raises(ConfigError, match="cannot name a message"):
            slot("synth", role, ["server"])


def test_a_collab_message_is_read_by_deploys_session_and_the_reverse(tmp_path):
    """A custodian's share posted by collab's Channel is received by a deploy Session (its `receive`, the one
    `Courier.collect`); a deploy Session seals to a collab role's run key, taken from the collab key envelope (the one
    run-key body), and the collab Channel receives it."""
    ids = {n: Identity.generate(n) for n in ("A", "B", "server0")}
    roster = Roster.parse({n: i.public_text() for n, i in ids.items()})
    ex = FolderTransport(tmp_path)
    chans = {n: Channel(i, roster, ex, "cfg", "run1", timeout=0.5, roles=tuple(ids)) for n, i in ids.items()}
    for c in chans.values():
        c.publish_run_key()
    [name] = chans["A"].post(_share(), where("share", "A", "q"), ["server0"])
    assert parse_slot(name) == Slot("collab_share", "A", ("server0",), "q")

    def deploy(role, run_key=None):
        return Session(ids[role], roster, ex, RunState(role, "run1", "cfg", ("A", "B")), timeout=0.5, run_key=run_key,
                       sealed=True, key_purpose="collab")
    [(header, body)] = deploy("server0", chans["server0"].run_key).receive("collab_share", ["A"])["A"]
    assert header.kind == "count_share" and CountShare.from_bytes(body).share.tolist() == [1, 2, 3]
    deploy("A").send("collab_share", ["server0"], "count_share", _share().to_bytes(), tag="q2")
    assert chans["server0"].receive(CountShare, where("share", "A", "q2"), "A's share").share.tolist() == [1, 2, 3]
    with pytest.raises(MessageError, match="not to 'B'"):   # a wrong recipient, whichever front end reads
        deploy("B", chans["B"].run_key).open("collab_share__A__to__server0__q2", ("collab_share",))


def _collab_config(tmp_path):
    text, csvs = collab_census_job(tmp_path, 200, iters=5, simulation=True)
    ids = {r: Identity.generate(r) for r in ("A", "B", "server0", "server1", "publisher")}
    (tmp_path / "c.toml").write_text(text + "\n[roster.keys]\n" + "".join(f'{r} = "{i.public_text()}"\n'
                                                                         for r, i in ids.items()))
    return tmp_path / "c.toml", csvs, ids


def test_one_hello_collabs_custodians_hellos_make_deploys_run_id_and_the_reverse(tmp_path):
    """Both custodians open a collab run (each stops, timed out, once its hello is in); deploy's server reads
    their hellos with its own code (`read_hellos`: the same settings, the same config) and derives the run id the
    collab roles derive. The reverse: a deploy party's hello is read by collab's reader, which refuses it for what
    it lacks (a custodian's columns), in one line."""
    from vertisynth.collab.distributed import channel_for, run_custodian, wait_for_custodians

    cfg, csvs, ids = _collab_config(tmp_path)
    ex = tmp_path / "ex"

    stopped, plans = {}, {n: make_plan(load_config(cfg)) for n in ("A", "B")}   # each its own, as in its process

    def custodian(name):   # no server ever answers: it stops waiting for one, its hello in
        try:
            run_custodian(plans[name], name, csvs[name], ex, timeout=3.0, identity=ids[name])
        except MessageError as exc:
            stopped[name] = str(exc)
    threads = [threading.Thread(target=custodian, args=(n,)) for n in ("A", "B")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(stopped) == ["A", "B"] and all("no run key from 'server0'" in e for e in stopped.values()), stopped
    assert sorted(FolderTransport(ex).names("hello__*")) == ["hello__A__to__all__0", "hello__B__to__all__0"]
    plan = make_plan(load_config(cfg))
    publisher = channel_for(plan, ids["publisher"], "publisher", ex, timeout=5)
    wait_for_custodians(plan, publisher)
    assert publisher.run and read_hellos(load_config(cfg), FolderTransport(ex), ["A", "B"], "server") == publisher.run

    other = tmp_path / "deploy_ex"
    hello(load_config(cfg), ids["A"], FolderTransport(other), ["A"], tmp_path / "private_A", None, 5)
    with pytest.raises(MessageError, match="hello__A__to__all__0: from 'A': a hello without its CSV's columns"):
        wait_for_custodians(plan, channel_for(plan, ids["publisher"], "publisher", other, timeout=1))
