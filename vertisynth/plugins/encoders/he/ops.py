"""What the protocol's parties did, counted where it is done (issues 31/33): the priced operations of
`encoder._op_costs` ("key" a key pair, "enc" a row ciphertext and "enc_bit" each set bit of its plaintext, "setup"
a pool process, "load" a ciphertext read from bytes, "mul" a ciphertext folded into a product, "dec" a decryption,
"noise" one of S's full-randomness encryptions, "draw" one noise draw). One counter per process; `protocol.Costs`
books the change of it across each party's step to that party, as it books the CPU, so a run's operations per party
can be set against those `validate` priced before the run."""
from __future__ import annotations

from collections import Counter

OPS: Counter = Counter()


def count(op: str, k: int) -> None:
    if k:
        OPS[op] += int(k)


def now() -> Counter:
    return Counter(OPS)
