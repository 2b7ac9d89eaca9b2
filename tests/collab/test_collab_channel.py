"""Collab messages in signed envelopes on an exchange: a share replayed from another run, moved to another slot,
edited, or signed by a role the roster does not name is refused, naming the sender."""
import numpy as np
import pytest

from vertisynth.collab.channel import Channel
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
    return Channel(ids[name], roster, FolderTransport(folder), "cfg", run, timeout=0.2)


SLOT = "collab_share__A__server0__q"


def test_an_honest_share_is_read(tmp_path, roles):
    ids, roster = roles
    f = _ch(ids, roster, "A", tmp_path).post(_share(), SLOT, ["server0"])
    assert _ch(ids, roster, "server0", tmp_path).load(CountShare, f, "A").share.tolist() == [1, 2, 3]


def test_replay_from_another_run_is_refused(tmp_path, roles):
    ids, roster = roles
    f = _ch(ids, roster, "A", tmp_path, "run0").post(_share(), SLOT, ["server0"])
    with pytest.raises(MessageError, match="from 'A': run id run0... is not this run's"):
        _ch(ids, roster, "server0", tmp_path).load(CountShare, f, "A")


def test_moved_edited_forged_and_duplicate_files_are_refused(tmp_path, roles):
    ids, roster = roles
    server = _ch(ids, roster, "server0", tmp_path)
    f = _ch(ids, roster, "A", tmp_path).post(_share(), SLOT, ["server0"])
    env = tmp_path / f"{f}.env"
    (tmp_path / "collab_share__A__server0__other.env").write_bytes(env.read_bytes())
    with pytest.raises(MessageError, match=f"from 'A': round '{SLOT}'"):
        server.load(CountShare, "collab_share__A__server0__other", "A")
    data = env.read_bytes()
    env.write_bytes(data[:-3] + b"xyz")
    with pytest.raises(MessageError, match="from 'A': the body does not match its signed hash"):
        server.load(CountShare, f, "A")
    forged = _ch(ids, roster, "A", tmp_path).post(_share("B"), "collab_share__A__server0__q_B", ["server0"])
    with pytest.raises(MessageError, match="from 'A' where 'B'.s message belongs"):
        server.load(CountShare, forged, "B")
    stranger = Channel(Identity.generate("mallory"), roster, FolderTransport(tmp_path), "cfg", "run1")
    g = stranger.post(_share("B"), "collab_share__mallory__server0__q", ["server0"])
    with pytest.raises(MessageError, match="'mallory' is not in the roster"):
        server.load(CountShare, g, "B")
    with pytest.raises(MessageError, match="already holds"):
        _ch(ids, roster, "A", tmp_path).post(_share(), SLOT, ["server0"])


def test_a_missing_slot_times_out_and_a_bad_role_name_is_refused(tmp_path, roles):
    import time

    from vertisynth.collab.channel import slot
    from vertisynth.core.errors import ConfigError

    ids, roster = roles
    t0 = time.monotonic()
    with pytest.raises(MessageError, match="waited 0 s for A's share .* found 0 of 1"):
        _ch(ids, roster, "server0", tmp_path).receive(CountShare, SLOT, "A", "A's share")
    assert time.monotonic() - t0 < 5
    for bad in ("a/b", "a__b", "", "x*"):
        with pytest.raises(ConfigError, match="cannot name a message on the exchange"):
            slot("hello", bad)


def _sealed(ids, roster, name, folder, run="run1"):
    return Channel(ids[name], roster, FolderTransport(folder), "cfg", run, timeout=0.2, roles=tuple(ids), sealed=True)


def test_a_sealed_share_opens_only_at_its_server_and_refuses_edits_moves_and_clear_copies(tmp_path, roles):
    """A share sealed to server0's run key (deploy's sealed-envelope format, core/courier.py): server0 opens it;
    another role's key does not (B, a server of another run); moved to another slot or re-signed by another
    custodian it does not open; edited or sent in clear it is refused, each in one line."""
    import shutil

    from vertisynth.collab.channel import addressed
    from vertisynth.core.envelope import open_envelope, seal

    ids, roster = roles
    server, a = _sealed(ids, roster, "server0", tmp_path), _sealed(ids, roster, "A", tmp_path)
    server.publish_run_key()
    _sealed(ids, roster, "B", tmp_path).publish_run_key()
    f = addressed(a.post(_share(), SLOT, ["server0"]), "server0")
    assert _share().share.tobytes() not in (tmp_path / f"{f}.env").read_bytes()
    assert server.load(CountShare, SLOT, "A").share.tolist() == [1, 2, 3]

    def refused(who, name, sender="A", match="refused"):
        with pytest.raises(MessageError, match=match) as err:
            who.load(CountShare, name, sender)
        assert "\n" not in str(err.value)
        return str(err.value)

    header, body = open_envelope((tmp_path / f"{f}.env").read_bytes(), roster, None, f)
    b = _sealed(ids, roster, "B", tmp_path)
    b.run_key = None   # B's own key would not open it either: it is not B's slot
    shutil.copy(tmp_path / f"{f}.env", tmp_path / f"{addressed(SLOT, 'B')}.env")
    refused(b, SLOT, match="round")                                    # another role's slot: not addressed to B
    later = _sealed(ids, roster, "server0", tmp_path)
    later.run_key = RunKey()   # server0 in another run: another run key
    assert "does not open" in refused(later, SLOT)
    moved = addressed("collab_share__A__server0__q2", "server0")
    (tmp_path / f"{moved}.env").write_bytes(seal(ids["A"], "run1", "cfg", ["server0"], moved, header.kind, body))
    assert "does not open" in refused(server, "collab_share__A__server0__q2")
    resigned = addressed("collab_share__B__server0__q", "server0")
    (tmp_path / f"{resigned}.env").write_bytes(seal(ids["B"], "run1", "cfg", ["server0"], header.round, header.kind,
                                                    body))
    refused(server, "collab_share__B__server0__q", "B", match="round")
    (tmp_path / f"{resigned}.env").unlink()
    (tmp_path / f"{resigned}.env").write_bytes(seal(ids["B"], "run1", "cfg", ["server0"], resigned, header.kind, body))
    assert "does not open" in refused(server, "collab_share__B__server0__q", "B")
    data = bytearray((tmp_path / f"{f}.env").read_bytes())
    data[-5] ^= 1
    edited = addressed("collab_share__A__server0__q3", "server0")
    (tmp_path / f"{edited}.env").write_bytes(bytes(data))
    refused(server, "collab_share__A__server0__q3", match="refused")
    clear = addressed("collab_share__A__server0__q4", "server0")
    (tmp_path / f"{clear}.env").write_bytes(seal(ids["A"], "run1", "cfg", ["server0"], clear, "count_share",
                                                 _share().to_bytes()))
    assert "sent in clear" in refused(server, "collab_share__A__server0__q4")
