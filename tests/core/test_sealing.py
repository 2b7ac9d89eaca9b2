"""core/sealing.py: the one X25519 + HKDF-SHA256 + AES-256-GCM sealing primitive (deploy and collab use it)."""
import pytest

from vertisynth.core.errors import MessageError
from vertisynth.core.sealing import RunKey, Sealed, seal_to

INFO = b"test/v1"


def test_only_the_recipient_opens_with_the_same_associated_data():
    key = RunKey()
    sealed = seal_to(key.public, b"sketches", b"run=1|sender=a", INFO)
    assert b"sketches" not in sealed.to_bytes()
    again = Sealed.from_bytes(sealed.to_bytes(), "x")
    assert key.open(again, b"run=1|sender=a", INFO, "x") == b"sketches"
    assert RunKey.from_private_bytes(key.private_bytes()).open(again, b"run=1|sender=a", INFO, "x") == b"sketches"
    for aad, info, other in ((b"run=2|sender=a", INFO, key), (b"run=1|sender=b", INFO, key),
                             (b"run=1|sender=a", b"other", key), (b"run=1|sender=a", INFO, RunKey())):
        with pytest.raises(MessageError, match="does not open"):
            other.open(again, aad, info, "x")
    flipped = Sealed(sealed.ephemeral, sealed.nonce, bytes([sealed.ciphertext[0] ^ 1]) + sealed.ciphertext[1:])
    with pytest.raises(MessageError, match="does not open"):
        key.open(flipped, b"run=1|sender=a", INFO, "x")


def test_every_seal_is_fresh_and_bad_sizes_are_refused():
    key = RunKey()
    a, b = seal_to(key.public, b"same", b"", INFO), seal_to(key.public, b"same", b"", INFO)
    assert a.ephemeral != b.ephemeral and a.nonce != b.nonce and a.ciphertext != b.ciphertext
    with pytest.raises(MessageError, match="too short"):
        Sealed.from_bytes(b"\0" * 40, "x")
    with pytest.raises(MessageError, match="not an X25519 public key"):
        seal_to(b"\0" * 31, b"x", b"", INFO)
