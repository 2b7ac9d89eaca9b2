"""The HE operation counter (`he/ops.py`) is per thread: roles run as threads of one process (the deploy tests'
`in_process`) each book their own operations through `protocol.Costs`, even when their steps overlap."""
import threading

import numpy as np
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


@pytest.mark.parametrize("randomness, bits", [("full", 512), pytest.param("ou", 1024, marks=pytest.mark.skipif(
    not paillier.short_available(), reason="scheme = 'ou' needs sf-heu"))])
def test_pricing_makes_one_key_pair_and_prices_the_key_from_the_prime_search_model(monkeypatch, randomness, bits):
    """`validate` times its per-operation prices with one key pair (it needs a key to time encryptions) and prices
    a key pair at its expectation, KEY_RATIO reference exponentiations at that key size, without drawing more
    keys (before: the mean of KEY_DRAWS = 3 key pairs, two of them drawn for the price alone, 5-7 CPU s at 2048
    bits). hecost15: the reference is the median of batches taken around the key drawn and between the other
    timings (before: the least of 10 batches in one 0.5 s, which read one phase of the shared machine's speed)."""
    from vertisynth.plugins.encoders.he import encoder as he_encoder, ops

    monkeypatch.setattr(paillier, "MIN_KEY_BITS", 512)
    monkeypatch.setattr(he_encoder, "_OP_COSTS", {})
    events, refs = [], []
    take, keypair, encrypt = he_encoder.KeyReference.take, paillier.keypair, paillier.encrypt_many

    def taken(self, batches=2):
        refs.append(self)
        events.append("ref")
        return take(self, batches)

    monkeypatch.setattr(he_encoder.KeyReference, "take", taken)
    monkeypatch.setattr(paillier, "keypair", lambda *a, **k: events.append("key") or keypair(*a, **k))
    monkeypatch.setattr(paillier, "encrypt_many", lambda *a, **k: events.append("enc") or encrypt(*a, **k))
    before = ops.now()
    price = he_encoder._op_costs(bits, randomness)
    assert (ops.now() - before)["key"] == 1
    ref = refs[0]
    assert all(r is ref for r in refs)
    assert price["key"] == pytest.approx(he_encoder.KEY_RATIO[randomness] * float(np.median(ref.batches)))
    assert price["key"] > 0
    # spread over the pricing: before and after the key drawn, between the encryption batches, after the last timing
    k = events.index("key")
    assert "ref" in events[:k] and events[k + 1] == "ref" and events[-1] == "ref", events
    runs = "".join("r" if e == "ref" else "e" if e == "enc" else "k" for e in events)
    assert runs.count("r") >= 8 and len([s for s in runs.split("e") if "r" in s]) >= 5, runs
    assert len(ref.batches) >= 12


def test_validate_names_each_partys_key_pair_share_of_the_estimate(monkeypatch, tmp_path):
    """At small n a key pair (a prime search of random length) is most of a party's HE CPU, so `validate` prints
    its share beside the total and says that one run's key is a draw around it; the share is the key pairs the
    estimate counts at the priced key."""
    from click.testing import CliRunner

    from vertisynth.cli.main import main
    from vertisynth.plugins.encoders.he import encoder as he_encoder

    monkeypatch.setattr(paillier, "MIN_KEY_BITS", 512)
    monkeypatch.setattr(he_encoder, "_OP_COSTS", {})
    cfg = tmp_path / "twin.toml"
    cfg.write_text('seed = 1\nbudget = { epsilon = 1.0, delta = 1e-5 }\n[dataset]\nname = "zoo"\n'
                   'params = { preset = "small-split", n = 300 }\n[synthesizer]\nuse = "privmrf"\n'
                   'params = { vertical = { measure = "he", trust = "none", params = { crypto = "real", '
                   'key_bits = 512, randomness = "full" } } }\n')
    out = CliRunner().invoke(main, ["validate", str(cfg), "--rows", "1000"])
    assert out.exit_code == 0, out.output
    lines = [ln for ln in out.output.splitlines() if "ciphertexts" in ln and ln.split()[0] != "server"
             and not ln.strip().startswith("(")]   # a party's line, not the notes under it
    assert len(lines) == 2 and all("of which key pair" in ln for ln in lines), out.output
    key = he_encoder._op_costs(512, "full")["key"]
    shares = [float(ln.split("of which key pair")[1].split()[0]) for ln in lines]
    assert all(s == pytest.approx(key, abs=0.05) for s in shares), (shares, key)
    assert "prime search of random length" in out.output
