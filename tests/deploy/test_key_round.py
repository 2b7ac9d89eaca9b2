"""Issue 31, "one of each": one key round. Every run key (the deploy server's, a deploy party's of its synth or
align step, a collab role's) travels as `key__<sender>__to__all__<purpose>`, signed, bound to the run and the
config, its purpose signed in the body; the names the key rounds had before (`server-key`, `party-key`,
`align-key`, `collab_key`) are refused in one line wherever a name is read, by the reader waiting for a key and by
the Flower relay, never waited on. On the code before, each protocol had its own key round and a reader took an
old-named key, or waited for its own name until its timeout."""
import time

import pytest

from vertisynth.collab.channel import Channel
from vertisynth.core.courier import (ALIGN_KEY, COLLAB_KEY, KEY, KEY_PURPOSES, PARTY_KEY, RETIRED_KEY_ROUNDS, SERVER_KEY,
                                     key_slot, parse_slot, run_key_body, slot)
from vertisynth.core.envelope import ALL, seal
from vertisynth.core.errors import MessageError
from vertisynth.core.identity import Identity, Roster
from vertisynth.core.sealing import RunKey
from vertisynth.core.transport import FolderTransport
from vertisynth.deploy.flower.relay import addressed_to
from vertisynth.deploy.session import RunState, Session, fetch_run_key, publish_party_key

ROLES = ("A", "B", "server")


@pytest.fixture
def crew(tmp_path):
    ids = {n: Identity.generate(n) for n in ROLES}
    return ids, Roster.parse({n: i.public_text() for n, i in ids.items()}), FolderTransport(tmp_path)


def _session(crew, role, run="run1", config="cfg", timeout=30.0, **kw):
    ids, roster, ex = crew
    return Session(ids[role], roster, ex, RunState(role, run, config, ("A", "B")), timeout=timeout, **kw)


def test_every_run_key_has_one_round_its_purpose_the_tag():
    assert [key_slot("A", p) for p in KEY_PURPOSES] == [
        "key__A__to__all__server", "key__A__to__all__party", "key__A__to__all__align", "key__A__to__all__collab"]
    assert parse_slot(key_slot("server0", COLLAB_KEY)).round == KEY
    with pytest.raises(MessageError, match="run key purpose 'run' is none of"):
        key_slot("A", "run")


@pytest.mark.parametrize("old", sorted(RETIRED_KEY_ROUNDS))
def test_an_old_key_round_name_is_refused_in_one_line_by_every_reader_and_writer(old):
    name = f"{old}__A__to__all__0"
    for read in (parse_slot, lambda n: addressed_to(n, "B")):   # the courier's reader and the Flower relay's rule
        with pytest.raises(MessageError, match=f"round '{old}' is the old name of the run-key round") as err:
            read(name)
        assert "\n" not in str(err.value) and f"key__<sender>__to__all__{RETIRED_KEY_ROUNDS[old]}" in str(err.value)
    with pytest.raises(MessageError, match="old name"):
        slot(old, "A", [ALL])


def test_the_server_and_the_parties_publish_in_the_one_round_and_read_each_other(crew):
    server = _session(crew, "server", run_key=RunKey())
    server.publish_key(SERVER_KEY, server.run_key)
    a, b = (_session(crew, p, sealed=True) for p in ("A", "B"))
    a.run_key, b.run_key = publish_party_key(a), publish_party_key(b)
    assert sorted(crew[2].names("*")) == ["key__A__to__all__party", "key__B__to__all__party",
                                          "key__server__to__all__server"]
    assert fetch_run_key(a) == server.run_key.public
    assert a.key_of("B") == b.run_key.public and b.key_of("A") == a.run_key.public
    with pytest.raises(MessageError, match="already published its run key in this run"):
        publish_party_key(a)
    align = _session(crew, "A", sealed=True, key_purpose=ALIGN_KEY)   # the align step: a key of its own, beside it
    align_key = publish_party_key(align)
    assert _session(crew, "B", key_purpose=ALIGN_KEY).key_of("A") == align_key.public != a.run_key.public


def test_a_key_is_bound_to_its_run_config_and_signed_purpose(crew):
    ids, _, ex = crew
    a = _session(crew, "A")
    a.publish_key(ALIGN_KEY)
    with pytest.raises(MessageError, match="run id"):
        _session(crew, "B", run="run2").fetch_key("A", ALIGN_KEY)
    with pytest.raises(MessageError, match="config fingerprint"):
        _session(crew, "B", config="other").fetch_key("A", ALIGN_KEY)
    # A's signed align key, moved under the slot of its party key: the purpose is in the signed body
    ex.send(key_slot("A", PARTY_KEY), ex.read(key_slot("A", ALIGN_KEY)))
    with pytest.raises(MessageError, match="holds its 'align' key where its 'party' key belongs"):
        _session(crew, "B").fetch_key("A", PARTY_KEY)


@pytest.mark.parametrize("old, purpose", sorted(RETIRED_KEY_ROUNDS.items()))
def test_a_key_under_an_old_round_name_is_a_clear_error_not_a_wait(crew, old, purpose):
    """A role of an older version posted its key under the old round: the reader (30 s timeout) stops at once."""
    ids, _, ex = crew
    ex.send(f"{old}__A__to__all__0", seal(ids["A"], "run1", "cfg", [ALL], old, "run_key",
                                          run_key_body(RunKey().public, purpose)))
    start = time.monotonic()
    with pytest.raises(MessageError, match=f"round '{old}' is the old name"):
        _session(crew, "B").fetch_key("A", purpose)
    assert time.monotonic() - start < 5.0


def test_a_collab_role_reads_a_collab_key_in_the_same_round(crew):
    ids, roster, ex = crew
    chans = {n: Channel(ids[n], roster, ex, "cfg", "run1", timeout=5.0, roles=ROLES) for n in ("A", "server")}
    key = chans["server"].publish_run_key()
    assert ex.names("key__*") == ["key__server__to__all__collab"]
    assert chans["A"].key_of("server") == key.public
    with pytest.raises(MessageError, match="no run key from 'server'"):   # not its deploy run key: another purpose
        _session(crew, "A", timeout=0.3).fetch_key("server", SERVER_KEY)
