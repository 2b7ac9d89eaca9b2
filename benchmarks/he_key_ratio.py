"""The key model's ratio (`encoder.KEY_RATIO`): per kind of key, draws of `_op_costs` as `validate` times it, each
draw's key pair CPU over the reference level `KeyReference` read around it (docs/he.md "The key price").

    PYTHONPATH=. nice -n 5 python benchmarks/he_key_ratio.py --rounds 30 [--bits 2048] [--kinds full short ou]

Per round and kind: the previous reference (the least of 10 batches of 8 exponentiations, 50 ms apart) timed just
before, then `_op_costs` (its one key pair's CPU recorded as it is drawn, its reference level read from its key
price), printed with the load average. At the end, per kind: the key pairs' mean, median and range; the mean of
each draw's key / reference (the ratio `KEY_RATIO` takes); and the key price each way (old: the previous least
batch times the committed ratio it was calibrated with; new: this reference times the committed `KEY_RATIO`),
its spread over the rounds and the mean drawn key it aims at."""
from __future__ import annotations

import argparse
import os
import random
import time

import numpy as np

from vertisynth.plugins.encoders.he import encoder as he_encoder, paillier

OLD_RATIO = {"full": 140.0, "short": 4200.0, "ou": 5300.0}   # the previous model's ratios (costest7)


def least_batch(bits: int) -> float:
    """The previous model's reference: the least of 10 batches of 8 exponentiations taken 50 ms apart."""
    import gmpy2

    half = max(bits // 2, 64)
    r = random.Random(half)
    mod = gmpy2.mpz(r.getrandbits(half) | (1 << (half - 1)) | 1)
    base, exp = gmpy2.mpz(r.getrandbits(half - 1)), gmpy2.mpz(r.getrandbits(half) | (1 << (half - 1)))
    out = []
    for i in range(10):
        if i:
            time.sleep(0.05)
        c0 = time.thread_time()
        for _ in range(8):
            gmpy2.powmod(base, exp, mod)
        out.append((time.thread_time() - c0) / 8)
    return min(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=30, help="draws per kind of key")
    ap.add_argument("--bits", type=int, default=2048, help="key size")
    ap.add_argument("--kinds", nargs="+", default=["full", "short", "ou"], choices=["full", "short", "ou"])
    args = ap.parse_args()
    paillier.require()
    real = paillier.keypair
    drawn: list[float] = []

    def timed(bits, randomness="full"):
        c0 = time.process_time()
        out = real(bits, randomness)
        drawn.append(time.process_time() - c0)
        return out

    paillier.keypair = timed
    rows: dict[str, list[tuple[float, float, float]]] = {k: [] for k in args.kinds}
    for r in range(args.rounds):
        for kind in args.kinds:
            if kind != "full" and not paillier.short_available():
                continue
            old = least_batch(args.bits)
            he_encoder._OP_COSTS.clear()
            drawn.clear()
            price = he_encoder._op_costs(args.bits, kind)["key"]
            level = price / he_encoder.KEY_RATIO[kind]
            rows[kind].append((drawn[0], level, old))
            print(f"{r:2d} {kind:5s} key {drawn[0]:6.2f} s  reference {level * 1e3:.4f} ms  previous reference "
                  f"{old * 1e3:.4f} ms  load {os.getloadavg()[0]:.1f}", flush=True)
    for kind, got in rows.items():
        if not got:
            continue
        key, level, old = (np.array(x) for x in zip(*got))
        ratio = float(np.mean(key / level))
        new_p, old_p = he_encoder.KEY_RATIO[kind] * level, OLD_RATIO[kind] * old
        print(f"{kind} {args.bits} n {len(key)}: key mean {key.mean():.3f} median {np.median(key):.3f} range "
              f"{key.min():.2f}-{key.max():.2f}; mean key/reference {ratio:.0f} (ratio of means "
              f"{key.mean() / level.mean():.0f}); price new mean {new_p.mean():.2f} range {new_p.min():.2f}-"
              f"{new_p.max():.2f} sd {new_p.std():.2f}; previous mean {old_p.mean():.2f} range {old_p.min():.2f}-"
              f"{old_p.max():.2f} sd {old_p.std():.2f}")


if __name__ == "__main__":
    main()
