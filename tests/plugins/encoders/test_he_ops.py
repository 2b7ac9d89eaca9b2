"""The HE operation counter (`he/ops.py`) is per thread: roles run as threads of one process (the deploy tests'
`in_process`) each book their own operations through `protocol.Costs`, even when their steps overlap."""
import threading

import pytest

from vertisynth.plugins.encoders.he import paillier, protocol

phe = pytest.importorskip("phe", reason="real crypto needs `pip install vertisynth[he]`")


def test_two_roles_stepping_at_once_in_threads_book_only_their_own_operations():
    """Party A's step spans party B's whole step (barriers fix the overlap): with one counter per process, A's
    booked operations held B's 5 encryptions and 2 decryptions as well as its own 3 and 1."""
    pk, sk = phe.generate_paillier_keypair(n_length=512)
    costs = protocol.Costs()
    b_may_start, b_done = threading.Barrier(2, timeout=60), threading.Barrier(2, timeout=60)
    errors = []

    def work(k, d):
        paillier.decrypt_many(sk, paillier.encrypt_many(pk, list(range(1, k + 1)), workers=1)[:d])

    def party_a():
        try:
            start = protocol.mark()
            b_may_start.wait()
            b_done.wait()   # B's whole step lies inside A's
            work(3, 1)
            costs.since("A", start)
        except Exception as e:   # surfaced below: an error in a thread would vanish
            errors.append(e)

    def party_b():
        try:
            b_may_start.wait()
            start = protocol.mark()
            work(5, 2)
            costs.since("B", start)
            b_done.wait()
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=party_a), threading.Thread(target=party_b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and not any(t.is_alive() for t in threads), errors
    bits = lambda k: sum(m.bit_count() for m in range(1, k + 1))  # noqa: E731
    assert costs.ops["A"] == {"enc": 3, "enc_bit": bits(3), "dec": 1}, costs.ops
    assert costs.ops["B"] == {"enc": 5, "enc_bit": bits(5), "dec": 2}, costs.ops

