"""Collab messages in signed envelopes on an exchange: a share replayed from another run, moved to another slot,
edited, or signed by a role the roster does not name is refused, naming the sender."""
import numpy as np
import pytest

from vertisynth.collab.channel import Channel
from vertisynth.collab.secure_aggregation import CountShare
from vertisynth.core.errors import MessageError
from vertisynth.core.identity import Identity, Roster
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
