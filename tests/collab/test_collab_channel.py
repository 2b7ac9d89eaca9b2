"""Collab messages in signed envelopes on an exchange: a share replayed from another run, moved to another slot,
edited, or signed by a role the roster does not name is refused, naming the sender."""
import numpy as np
import pytest

from vertisynth.collab.channel import Channel, where
from vertisynth.collab.secure_aggregation import CountShare
from vertisynth.core.errors import MessageError
from vertisynth.core.identity import Identity, Roster
from vertisynth.core.sealing import RunKey
from vertisynth.core.transport import FolderTransport


@pytest.fixture
def roles():
    ids = {n: Identity.generate(n) for n in ("A", "B", "server0")}
    return ids, Roster.parse({n: i.public_text() for n, i in ids.items()})


def _share(party="A"):
    return CountShare(party=party, query="q", server=0, n_servers=2, shape=[3],
                      share=np.array([1, 2, 3], np.uint64)).validate()


def _ch(ids, roster, name, folder, run="run1"):
    return Channel(ids[name], roster, FolderTransport(folder), "cfg", run, timeout=0.2, roles=tuple(ids))


SLOT = where("share", "A", "q")   # A's share of query q: one envelope per server, collab_share__A__to__server0__q


def test_a_missing_slot_times_out_and_a_bad_role_name_is_refused(tmp_path, roles):
    import time

    from vertisynth.core.errors import ConfigError

    ids, roster = roles
    t0 = time.monotonic()
    with pytest.raises(MessageError, match="waited 0 s for A's share .* found 0 of 1"):
        _ch(ids, roster, "server0", tmp_path).receive(CountShare, SLOT, "A's share")
    assert time.monotonic() - t0 < 5
    for bad in ("a/b", "a__b", "", "x*", "all"):
        with pytest.raises(ConfigError, match="cannot name a message on the exchange"):
            where("hello", bad)


_sealed = _ch


def _keys(ids, roster, folder, run="run1"):
    """Every role's run key published; the channels, by role."""
    chans = {n: _ch(ids, roster, n, folder, run) for n in ids}
    for c in chans.values():
        c.publish_run_key()
    return chans


def test_an_honest_share_is_read_and_a_replay_from_another_run_is_refused(tmp_path, roles):
    ids, roster = roles
    ch = _keys(ids, roster, tmp_path)
    [f] = ch["A"].post(_share(), SLOT, ["server0"])
    assert f == "collab_share__A__to__server0__q"
    assert ch["server0"].receive(CountShare, SLOT, "A's share").share.tolist() == [1, 2, 3]
    old = _keys(ids, roster, tmp_path / "old", "run0")
    old["A"].post(_share(), SLOT, ["server0"])
    (tmp_path / f"{f}.env").write_bytes((tmp_path / "old" / f"{f}.env").read_bytes())
    with pytest.raises(MessageError, match="from 'A': run id run0... is not this run's"):
        ch["server0"].receive(CountShare, SLOT, "A's share")


def test_forged_stranger_and_duplicate_shares_are_refused(tmp_path, roles):
    ids, roster = roles
    ch = _keys(ids, roster, tmp_path)
    ch["A"].post(_share("B"), where("share", "A", "q_B"), ["server0"])   # A's envelope holding B's share
    with pytest.raises(MessageError, match="from 'A' but holds a message of 'B'"):
        ch["server0"].receive(CountShare, where("share", "A", "q_B"), "A's share")
    with pytest.raises(MessageError, match="cannot post under 'B'.s name"):
        ch["A"].post(_share("B"), where("share", "B", "q"), ["server0"])
    stranger = Channel(Identity.generate("mallory"), roster, FolderTransport(tmp_path), "cfg", "run1")
    stranger.keys["server0"] = ch["A"].key_of("server0")
    stranger.post(_share("B"), where("share", "mallory", "q"), ["server0"])
    with pytest.raises(MessageError, match="'mallory' is not in the roster"):
        ch["server0"].receive(CountShare, where("share", "mallory", "q"), "mallory's share")
    ch["A"].post(_share(), SLOT, ["server0"])
    with pytest.raises(MessageError, match="already holds"):
        ch["A"].post(_share(), SLOT, ["server0"])


def test_a_sealed_share_opens_only_at_its_server_and_refuses_edits_moves_and_clear_copies(tmp_path, roles):
    """A share sealed to server0's run key (deploy's sealed-envelope format, core/courier.py): server0 opens it;
    another role's key does not (B, a server of another run); moved to another slot or re-signed by another
    custodian it does not open; edited or sent in clear it is refused, each in one line."""
    import shutil

    from vertisynth.core.envelope import open_envelope, seal

    ids, roster = roles
    ch = _keys(ids, roster, tmp_path)
    server, a = ch["server0"], ch["A"]
    [f] = a.post(_share(), SLOT, ["server0"])
    assert _share().share.tobytes() not in (tmp_path / f"{f}.env").read_bytes()
    assert server.receive(CountShare, SLOT, "A's share").share.tolist() == [1, 2, 3]

    def refused(who, at, match="refused"):
        with pytest.raises(MessageError, match=match) as err:
            who.receive(CountShare, at, "a share")
        assert "\n" not in str(err.value)
        return str(err.value)

    def put(name, data):
        (tmp_path / f"{name}.env").write_bytes(data)

    header, body = open_envelope((tmp_path / f"{f}.env").read_bytes(), roster, None, f)
    b = _sealed(ids, roster, "B", tmp_path)
    b.run_key = ch["B"].run_key
    shutil.copy(tmp_path / f"{f}.env", tmp_path / "collab_share__A__to__B__q.env")
    refused(b, SLOT, match="addressed to \\['server0'\\], not to 'B'")   # another role's slot: not for B
    later = _sealed(ids, roster, "server0", tmp_path)
    later.run_key = RunKey()   # server0 in another run: another run key
    assert "does not open" in refused(later, SLOT)
    put("collab_share__A__to__server0__q2", seal(ids["A"], "run1", "cfg", ["server0"], header.round, header.kind, body))
    assert "does not open" in refused(server, where("share", "A", "q2"))      # moved to another slot
    put("collab_share__B__to__server0__q", seal(ids["B"], "run1", "cfg", ["server0"], header.round, header.kind, body))
    assert "does not open" in refused(server, where("share", "B", "q"))       # re-signed by B
    data = bytearray((tmp_path / f"{f}.env").read_bytes())
    data[-5] ^= 1
    put("collab_share__A__to__server0__q3", bytes(data))
    refused(server, where("share", "A", "q3"), match="refused")             # edited
    put("collab_share__A__to__server0__q4", seal(ids["A"], "run1", "cfg", ["server0"], "collab_share", "count_share",
                                                 _share().to_bytes()))
    assert "sent in clear" in refused(server, where("share", "A", "q4"))     # in clear
