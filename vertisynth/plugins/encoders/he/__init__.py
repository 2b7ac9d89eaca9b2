"""`he`: cross-party marginals measured exactly under additively homomorphic encryption (issue 25).

noise.py (two-sided discrete Gaussian), packing.py (slots per plaintext), paillier.py (phe + gmpy2, process pool),
protocol.py (the three rounds as messages, and the plaintext simulation), encoder.py (the plugin). docs/he.md.
"""
