"""The envelope and the identities: every check a reader makes, each refusal naming the sender."""
import os

import pytest

from vertisynth.core.envelope import ALL, Expect, open_envelope, seal
from vertisynth.core.errors import ConfigError, DataError, MessageError
from vertisynth.core.identity import Identity, Roster


@pytest.fixture
def ids():
    return {n: Identity.generate(n) for n in ("a", "b")}


@pytest.fixture
def roster(ids):
    return Roster.parse({n: i.public_text() for n, i in ids.items()})


def test_honest_envelope_opens(ids, roster):
    data = seal(ids["a"], "r1", "cfg", ["b"], "round1", "k", b"body")
    header, body = open_envelope(data, roster, Expect("r1", "cfg", "b", ("round1",)), "f")
    assert body == b"body" and header.sender == "a" and header.to == ("b",)


@pytest.mark.parametrize("change, needle", [
    (lambda d: d[:-1] + b"X", "does not match its signed hash"),
    (lambda d: d.replace(b'"run":"r1"', b'"run":"r2"'), "signature does not verify"),
    (lambda d: b"junk" + d, "not a vertisynth envelope"),
])
def test_edits_are_refused(ids, roster, change, needle):
    data = seal(ids["a"], "r1", "cfg", ["b"], "round1", "k", b"body")
    with pytest.raises(MessageError, match=needle):
        open_envelope(change(data), roster, Expect("r1", "cfg", "b", ("round1",)), "f")


@pytest.mark.parametrize("expect, needle", [
    (Expect("r2", "cfg", "b", ("round1",)), "from 'a': run id r1... is not this run's"),
    (Expect("r1", "other", "b", ("round1",)), "config fingerprint"),
    (Expect("r1", "cfg", "b", ("round2",)), "round 'round1'"),
    (Expect("r1", "cfg", "c", ("round1",)), "not to 'c'"),
])
def test_run_config_round_and_recipient_are_checked(ids, roster, expect, needle):
    data = seal(ids["a"], "r1", "cfg", ["b"], "round1", "k", b"body")
    with pytest.raises(MessageError, match=needle):
        open_envelope(data, roster, expect, "f")


def test_unknown_sender_and_wrong_key_are_refused(ids, roster):
    with pytest.raises(MessageError, match="'mallory' is not in the roster"):
        open_envelope(seal(Identity.generate("mallory"), "r", "c", [ALL], "x", "k", b""), roster, None, "f")
    impostor = Identity.generate("a")                  # claims to be 'a' with another key
    with pytest.raises(MessageError, match="signature does not verify under 'a'"):
        open_envelope(seal(impostor, "r", "c", [ALL], "x", "k", b""), roster, None, "f")
    with pytest.raises(ConfigError, match="not the one the roster pins"):
        roster.check_own(impostor)


def test_signing_key_file_is_private_and_never_overwritten(tmp_path, ids):
    path = ids["a"].save(tmp_path / "a.pem")
    assert (path.stat().st_mode & 0o077) == 0
    assert Identity.load("a", path).public_text() == ids["a"].public_text()
    with pytest.raises(DataError, match="never overwritten"):
        ids["a"].save(path)
    os.chmod(path, 0o644)
    with pytest.raises(DataError, match="readable by others"):
        Identity.load("a", path)
    with pytest.raises(ConfigError, match="ed25519"):
        Roster.parse({"a": "abcd"})
