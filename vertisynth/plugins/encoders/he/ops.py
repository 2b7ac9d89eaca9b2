"""What the protocol's parties did, counted where it is done (issues 31/33): the priced operations of
`encoder._op_costs` ("key" a key pair, "enc" a row ciphertext and "enc_bit" each set bit of its plaintext, "setup"
a pool process, "load" a ciphertext read from bytes, "mul" a ciphertext folded into a product, "dec" a decryption,
"noise" one of S's full-randomness encryptions, "draw" one noise draw). One counter per thread: `protocol.Costs`
books the change of the calling thread's counter across each party's step to that party, so roles that step at
once as threads of one process (the deploy tests' `in_process`) each book only their own operations (one counter
per process mixed them). Every operation is counted in the thread that asks for it (`encrypt_many` counts before it
hands chunks to its pool), so nothing a step does is counted elsewhere."""
from __future__ import annotations

import threading
from collections import Counter

class _PerThread(threading.local):
    def __init__(self) -> None:   # run once in each thread that touches it
        self.ops: Counter = Counter()


_LOCAL = _PerThread()


def _mine() -> Counter:
    return _LOCAL.ops


def count(op: str, k: int) -> None:
    if k:
        _mine()[op] += int(k)


def now() -> Counter:
    """This thread's counts so far (a copy)."""
    return Counter(_mine())
