"""`trust = "server"`: cross-party marginals counted exactly under the server's Paillier key, the noise in three shares
of σ²/2, one per role, so that the two shares any one role does not know sum to the central variance σ² (issue 31).
docs/he.md, "Trust = server".

A query is (SA, SB) as in protocol.py: SA from the encrypting party E, SB from the summing party S. Rounds, each a
`Message`:

  0. server → all   `ServerKey`: a Paillier public key the server makes for the run (phe or HEU: OS CSPRNG primes).
  1. E → S          `EncryptedOneHot` (protocol.py's round 1) under the SERVER's key, and `EncryptedNoise`: E's noise
                    share for every cell of every table, packed like the sums and encrypted under the same key. Only S
                    may read these two (across machines they must be sealed to S: the server holds the key, and would
                    read E's rows and E's share).
  2. S → server     `ServerSums`: protocol.py's round 2 (homomorphic sums by S's values, S's share under encryption,
                    fresh masks outside the declared slots, re-randomised) with E's encrypted share multiplied in.
  3. at the server  decrypt, unpack, remove the offset 2T, add its own share: count + the three shares, variance
                    1.5σ².

Why E's share goes to S encrypted and not to the server: the server must see only the sum of the two shares (it
holds the key; a share it saw alone it would subtract, leaving σ²/2), and S, without the key, reads nothing of it.

Why the server adds a share of its own: the release (and every model and synthetic table fitted on it) reaches the
parties, and each party knows its own share. With the parties' two shares alone (the design until 2026-11-28) S
subtracted its share from what it was given and kept count + E's share: variance σ²/2, twice the ρ the ledger said
against S (and E likewise). With the server's share every role, alone, is left two shares it does not know (σ²);
the released variance is 1.5σ², the least any split gives when all three roles read the release (each pair of
shares must sum to σ²).

Noise: each party draws N_Z(0, σ²/2) (OpenDP over the OS CSPRNG under secure noise, a seeded table under simulation
noise: `noise.py`), conditioned on |z| <= T = support_bound(σ/√2) since both are added inside packed slots (offset T
each, so the layout is planned for offset 2T). The sum of two discrete Gaussians is not a discrete Gaussian: its
privacy is Kairouz, Liu and Steinke, "The Distributed Discrete Gaussian Mechanism for Federated Learning with Secure
Aggregation" (ICML 2021), Proposition 14: for m shares of parameter s >= 1/2 and a change Δ, the Rényi divergence of
order α is at most α·‖Δ‖²/(2 m s²) + τ·d, τ = 10·Σ_{k=1}^{m−1} exp(−2π² s² k/(k+1)). Its d is the coordinates
that change (the bound sums one-dimensional ones, and an unchanged coordinate adds 0); one person changes one cell of
a count table, so each table is ρ = 1/(2σ²) + τ zCDP (`rho_per_table`) against any one role, m = 2: the two
shares it does not know (the server's own is added after decryption, unbounded: `server_share`).

Trust: DP as charged holds while the server colludes with no party. With S it decrypts E's rows; with E it removes
E's share and its own (σ²/2 left). During the rounds E and S see only ciphertexts under a key they lack (E: nothing
at all); afterwards, the release, with one share of their own in it.
"""
from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import attrs
import numpy as np

from vertisynth.core.dataset import Dataset
from vertisynth.core.errors import ConfigError, MessageError
from vertisynth.core.messages import Message

from . import paillier, protocol
from .noise import GeneratorSource, SystemSource, UniformSource, discrete_gaussian, support_bound
from .packing import Layout

TRUST = "server"
SERVER = "server"
PARTIES = 2          # noise shares per cell inside the packed sums: E's and S's (the layout's offset 2T)
SHARES = 3           # with the server's, added after decryption: each role alone knows one, so two it does not
UNKNOWN = SHARES - 1   # the shares (of σ²/2 each) any one role does not know: they sum to the central σ²
MIN_SHARE_SIGMA = 0.5   # Kairouz et al.'s Proposition 14 holds for shares of parameter >= 1/2
TRUST_NOTE = ("trust = server: the server holds the run's Paillier key and decrypts only noisy sums; the guarantee "
              "holds while the server colludes with no party (with the summing party it would decrypt the encrypting "
              "party's rows; with the encrypting party it would remove that party's share and its own, leaving "
              "variance σ²/2); three shares of σ²/2 (encrypting party, summing party, server), so each role alone, "
              "which reads the release and knows its own share, is left variance σ²")

Query = protocol.Query


# -- the noise and its privacy --------------------------------------------------------------------------
def share_sigma(sigma: float) -> float:
    """Each role's share: N_Z(0, σ²/2), so the two any one role does not know sum to the central variance σ²."""
    s = sigma / math.sqrt(UNKNOWN)
    if not s >= MIN_SHARE_SIGMA:
        raise ConfigError(f"he: trust = 'server' needs σ >= {MIN_SHARE_SIGMA * math.sqrt(UNKNOWN):.3g} per count "
                          f"(shares of at least {MIN_SHARE_SIGMA}), got σ = {sigma:.4g}; spend less per table")
    return s


def tau(sigma: float) -> float:
    """Kairouz, Liu, Steinke (ICML 2021), Proposition 14: the zCDP a sum of `UNKNOWN` discrete Gaussian shares
    (of parameter σ/√2 each) costs beyond one discrete Gaussian of variance σ², per changed cell."""
    s2 = share_sigma(sigma) ** 2
    return 10.0 * sum(math.exp(-2 * math.pi**2 * s2 * k / (k + 1)) for k in range(1, UNKNOWN))


def rho_per_table(sigma: float) -> float:
    """The zCDP cost of one count table against any one role (left with the two shares it does not know, σ² in
    all): 1/(2σ²) for one count changed by one person, plus τ for the noise being a sum of shares."""
    return 1.0 / (2.0 * sigma**2) + tau(sigma)


def sigma_for_rho(rho: float) -> float:
    """The least σ (to 1e-12 relative) whose `rho_per_table` is at most `rho`: bisection, as it decreases in σ."""
    if not rho > 0:
        raise ConfigError(f"he: a table's zCDP ρ must be positive, got {rho}")
    lo = max(1.0 / math.sqrt(2.0 * rho), MIN_SHARE_SIGMA * math.sqrt(UNKNOWN))   # τ >= 0: never below this
    if rho_per_table(lo) <= rho:
        return lo
    hi = 2.0 * lo
    while rho_per_table(hi) > rho:
        lo, hi = hi, 2.0 * hi
    while hi - lo > 1e-12 * hi:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if rho_per_table(mid) <= rho else (mid, hi)
    return hi


def released_variance(sigma: float) -> float:
    """The per-cell variance the server estimates with: the three shares' sum, 1.5σ²."""
    share_sigma(sigma)   # refuses a σ the analysis does not cover
    return SHARES / UNKNOWN * float(sigma) ** 2   # each share σ²/2 (exact in floats: 1.5σ²)


def offset(sigma: float) -> int:
    """The layout's noise offset: the parties' two shares, each within ±T and shifted by +T."""
    return PARTIES * support_bound(share_sigma(sigma))


def charge_note(sigma: float, tables: int) -> str:
    """What the ledger's charge for `tables` tables at σ says (ρ with τ, the trust assumption)."""
    t = tau(sigma)
    return (f"{tables} cross-party tables, distributed discrete Gaussian: three shares σ/√2 = "
            f"{share_sigma(sigma):.4g}, any two summing to σ = {sigma:.4g} (released variance 1.5σ² = "
            f"{released_variance(sigma):.4g}); ρ = {tables} x (1/(2σ²) + τ) = "
            f"{tables * rho_per_table(sigma):.6g}, τ = {t:.3g} (Kairouz, Liu, Steinke, ICML 2021, Prop. 14); shares "
            f"conditioned on |z| <= {support_bound(share_sigma(sigma))} (TV < 1e-31 per draw, within δ); {TRUST_NOTE}")


def noise_share(shape: tuple[int, ...], sigma: float, source: Any) -> np.ndarray:
    """One party's share for `shape` cells at total σ (bounded: it is added inside a packed slot)."""
    return discrete_gaussian(shape, share_sigma(sigma), source, bounded=True)


def server_share(shape: tuple[int, ...], sigma: float, source: Any) -> np.ndarray:
    """The server's share, added to the decrypted counts (outside any slot, so not bounded; a seeded source bounds
    every draw: noise.py)."""
    return discrete_gaussian(shape, share_sigma(sigma), source, bounded=False)


def server_source(noise: str, tables: Mapping[str, np.ndarray]) -> UniformSource:
    """Where the server draws its share: the OS CSPRNG, or under simulation noise (not for production: every output
    says so) a stream seeded from the decrypted tables, so that a deployment and the one-process run draw the same
    share without the server holding a test secret. Such a share is a function of what the server decrypted, which
    a party could search for on a small table: private only under secure noise."""
    if noise == "secure":
        return SystemSource()
    if noise != "simulation":
        raise ConfigError(f"he: noise must be 'secure' or 'simulation', got {noise!r}")
    h = hashlib.sha256(b"vertisynth/he-server-share/v1")
    for k in sorted(tables):
        h.update(k.encode() + b"\0" + np.ascontiguousarray(tables[k], np.float64).tobytes())
    return GeneratorSource(np.random.default_rng(int.from_bytes(h.digest()[:16], "big")))


def add_server_share(tables: Mapping[str, np.ndarray], sigma: float, source: UniformSource | None
                     ) -> dict[str, np.ndarray]:
    """The decrypted tables plus the server's share (in the tables' key order: the draw order)."""
    return {k: tables[k] + server_share(np.shape(tables[k]), sigma, source) for k in sorted(tables)}


# -- messages -----------------------------------------------------------------------------------------------
@attrs.frozen(eq=False)
class ServerKey(Message):
    """The server's public key for the run; `heu_key`/`montgomery` let E encrypt with HEU's short exponents."""

    kind: ClassVar[str] = "he_server_key"
    modulus: str = ""
    heu_key: np.ndarray = attrs.field(factory=lambda: np.zeros(0, np.uint8))
    montgomery: str = ""

    def validate(self) -> ServerKey:
        super().validate()
        if paillier.text_bits(self.modulus) < paillier.MIN_KEY_BITS:
            raise self._fail(f"public key's modulus shorter than {paillier.MIN_KEY_BITS} bits")
        if self.heu_key.dtype != np.uint8 or self.heu_key.ndim != 1 or bool(self.heu_key.size) != bool(self.montgomery):
            raise self._fail("heu_key and montgomery come together (short exponents) or not at all")
        return self

    def public_key(self):
        """The key E encrypts under: HEU's short exponents when the server published them and sf-heu is here,
        after checking that HEU's key is this modulus; else phe's full-length randomness on the modulus alone."""
        paillier.require()
        if self.modulus.startswith("ou:"):   # the whole OU key is in the text (HEU's serialised key)
            return paillier.public_from_text(self.modulus)
        n = int(self.modulus, 16)
        if not self.heu_key.size or not paillier.short_available():
            return paillier.phe.PaillierPublicKey(n)
        text = str(paillier.heu.PublicKey.load_from(self.heu_key.tobytes()))
        try:
            heu_n = int(text.split("n=")[1].split("[")[0], 16)
        except (IndexError, ValueError):
            raise MessageError("he: the server's short-exponent key does not parse; publish it without") from None
        if heu_n != n:
            raise MessageError("he: the server's short-exponent key is not its published modulus; refusing to encrypt")
        return paillier.ShortExponentKey(n, self.heu_key.tobytes(), int(self.montgomery, 16))


@attrs.frozen(eq=False)
class EncryptedNoise(Message):
    """E's noise share (+T) for every returned plaintext: per grouping of S, (S's values, columns) ciphertexts."""

    kind: ClassVar[str] = "he_encrypted_noise"
    recipient: str = ""
    modulus: str = ""
    groupings: list = attrs.field(factory=list)   # [{"attrs": SB, "columns": [...], "groups": G}], protocol order
    shares: dict = attrs.field(factory=dict)      # "g<i>" -> uint8 (G, len(columns), bytes)

    def validate(self) -> EncryptedNoise:
        super().validate()
        for i, g in enumerate(self.groupings):
            arr = self.shares.get(f"g{i}")
            if arr is None or arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[:2] != (g["groups"], len(g["columns"])):
                raise self._fail(f"noise shares of grouping {g['attrs']} are missing or misshapen")
        return self


@attrs.frozen(eq=False)
class ServerSums(Message):
    """S's round 2 for the server: the sums (protocol.EncryptedSums' fields), the key they are under, who
    encrypted, the row count and E's layout as S checked it (the server checks it again)."""

    kind: ClassVar[str] = "he_server_sums"
    recipient: str = SERVER
    modulus: str = ""
    encrypting: str = ""
    rows: int = 0
    layout: dict = attrs.field(factory=dict)       # blocks, cells, width, per, groups
    groupings: list = attrs.field(factory=list)
    sums: dict = attrs.field(factory=dict)

    def validate(self) -> ServerSums:
        super().validate()
        protocol.EncryptedSums(self.party, self.recipient, self.groupings, self.sums).validate()
        if set(self.layout) != {"blocks", "cells", "width", "per", "groups"}:
            raise self._fail("the layout needs blocks, cells, width, per and groups")
        return self

    def the_layout(self) -> Layout:
        d = self.layout
        return Layout(tuple(tuple(b) for b in d["blocks"]), tuple(d["cells"]), d["width"], d["per"], tuple(d["groups"]))


# -- the rounds ---------------------------------------------------------------------------------------------
def make_server_key(bits: int, randomness: str = "full", party: str = SERVER) -> tuple[ServerKey, Any]:
    """Round 0 at the server: a fresh key pair (primes from the OS CSPRNG through phe or HEU) and its announcement."""
    pk, sk = paillier.keypair(bits, randomness)
    if isinstance(pk, paillier.ShortExponentKey):
        msg = ServerKey(party, format(pk.n, "x"), np.frombuffer(pk.heu_key, np.uint8).copy(), format(pk.montgomery, "x"))
    else:
        msg = ServerKey(party, paillier.key_text(pk))
    return msg.validate(), sk


def _check_key(what: str, modulus: str, key: ServerKey) -> None:
    if modulus.lower() != key.modulus.lower():
        raise MessageError(f"he: {what}: encrypted under a key other than the server's published one; refusing")


def encrypt_noise(party: str, recipient: str, lay: Layout, queries: Sequence[Query], sigma: float, public_key,
                  source: UniformSource, size: Callable[[tuple[str, ...]], int], workers: int = 0) -> EncryptedNoise:
    """Round 1 at E, its share: N_Z(0, σ²/2) per cell of every table, + T, packed where S's sums put that cell
    (`protocol.grouping_columns`: a pure function of the layout and the queries), encrypted under the server's key.
    `size`: the cells of S's attribute tuples (the public domain)."""
    queries = protocol.unique(queries)
    t = support_bound(share_sigma(sigma))
    block_index = {tuple(b): i for i, b in enumerate(lay.blocks)}
    noise = {q: noise_share((lay.cells[block_index[q[0]]], size(q[1])), sigma, source) for q in queries}
    groupings, plains, shapes = [], [], []
    for sb, mine, cols in protocol.grouping_columns(lay, queries):
        groups = size(sb)
        for v in range(groups):
            packed = lay.pack_values([(b, noise[(lay.blocks[b], sb)][:, v] + t) for b in mine])
            plains += [packed[c] for c in cols]
        groupings.append({"attrs": list(sb), "columns": cols, "groups": groups})
        shapes.append((groups, len(cols)))
    cts = iter(paillier.encrypt_many(public_key, plains, workers, label="encrypt noise share", op="share"))
    shares = {f"g{i}": paillier.to_bytes(public_key, np.array([[next(cts) for _ in range(c)] for _ in range(g)],
                                                               dtype=object).reshape(g, c))
              for i, (g, c) in enumerate(shapes)}
    return EncryptedNoise(party, recipient, paillier.key_text(public_key), groupings, shares).validate()


def sum_for_server(party: str, key: ServerKey, onehot: protocol.EncryptedOneHot, e_noise: EncryptedNoise,
                   view: Dataset, queries: Sequence[Query], sigma: float, source: UniformSource,
                   size: Callable[[tuple[str, ...]], int] | None = None, workers: int = 0,
                   slot_bits: int | None = None) -> ServerSums:
    """Round 2 at S: both of E's messages must be under the server's published key and E's share laid out as S
    will return the sums; then protocol.py's round 2 at share σ/√2 (the layout checked for offset 2T), E's share
    multiplied into every sum before S's own share and the re-randomisation."""
    queries = protocol.unique(queries)
    _check_key(f"the rows of {onehot.party!r}", onehot.modulus, key)
    _check_key(f"the noise share of {e_noise.party!r}", e_noise.modulus, key)
    lay = onehot.layout()
    planned = [{"attrs": list(sb), "columns": cols, "groups": view.domain.project(sb).size()}
               for sb, _, cols in protocol.grouping_columns(lay, queries)] if _blocks_ok(lay, queries) else None
    if planned is not None and e_noise.groupings != planned:
        raise MessageError(f"he: the noise share of {e_noise.party!r} is laid out for {e_noise.groupings}, the sums for "
                           f"{planned}; refusing to sum")
    pk = paillier.public_from_text(key.modulus)
    shares = {i: paillier.from_bytes(pk, e_noise.shares[f"g{i}"]) for i in range(len(e_noise.groupings))}
    m2 = protocol.sum_and_noise(party, onehot, view, queries, share_sigma(sigma), source, workers, size, slot_bits,
                                offset=offset(sigma), extra=lambda gi, v: shares[gi][v], share=False)
    layout = {"blocks": [list(b) for b in lay.blocks], "cells": list(lay.cells), "width": lay.width, "per": lay.per,
              "groups": list(lay.groups)}
    return ServerSums(party, SERVER, key.modulus, onehot.party, view.n, layout, m2.groupings, m2.sums).validate()


def _blocks_ok(lay: Layout, queries: Sequence[Query]) -> bool:
    # a layout with other blocks is refused by protocol.check_layout with its own message; let it speak
    blocks, groups = protocol.block_groups(queries)
    return list(lay.blocks) == blocks and list(lay.groups) == groups


def decrypt(private_key, sums: ServerSums, queries: Sequence[Query], sigma: float, stage: str,
            size: Callable[[tuple[str, ...]], int] | None = None, rows: int | None = None,
            slot_bits: int | None = None, crypto: str = "real", noise: str = "secure",
            source: UniformSource | None = None) -> protocol.NoisyCounts:
    """Round 3 at the server: the sums must be under its key, for the row count it knows and in the planned layout
    (the same check S made: `protocol.check_layout`); decrypt, unpack, remove 2T, add the server's share (from
    `source`, else `server_source(noise, ...)`). The variance is 1.5σ²."""
    queries = protocol.unique(queries)
    if sums.modulus.lower() != paillier.key_text(private_key.public_key).lower():
        raise MessageError(f"he: the sums of {sums.party!r} are under a key other than this server's; refusing to decrypt")
    if rows is not None and sums.rows != rows:
        raise MessageError(f"he: {sums.party!r} summed {sums.rows} rows, the run aligned {rows}")
    lay = sums.the_layout()
    protocol.check_layout(lay, queries, sums.rows, offset(sigma), paillier.plain_bits(private_key.public_key), size,
                          slot_bits, share=False)
    got = protocol.open_sums(private_key, lay, protocol.EncryptedSums(sums.party, SERVER, sums.groupings, sums.sums),
                             queries, offset(sigma))
    tables = {protocol.key_of(q[0] + q[1]): got[q].astype(np.float64) for q in queries}
    tables = add_server_share(tables, sigma, source if source is not None else server_source(noise, tables))
    return protocol.NoisyCounts(SERVER, sums.party, stage, crypto, sums.encrypting, released_variance(sigma),
                                tables).validate()


def run_real(enc_party: str, sum_party: str, enc_view: Dataset, sum_view: Dataset, queries: Sequence[Query],
             sigma: float, enc_source: UniformSource, sum_source: UniformSource, server: tuple[ServerKey, Any],
             stage: str, costs: protocol.Costs | None = None, workers: int = 0, chunk: int = 2048,
             slot_bits: int | None = None, transcript: list | None = None, noise: str = "secure",
             srv_source: UniformSource | None = None) -> protocol.NoisyCounts:
    """The rounds in one process; `server` is (its announcement, its private key); `transcript` collects every
    message as (sender, recipient, message): what each role received; `noise`, `srv_source`: the server's share
    (`decrypt`)."""
    key_msg, private_key = server
    costs = costs if costs is not None else protocol.Costs()
    log = transcript if transcript is not None else []
    size = lambda b: int(np.prod([d.domain.size(a) for d in (enc_view, sum_view) for a in b  # noqa: E731
                                  if a in d.domain.attributes]))   # the public domain
    log += [(SERVER, enc_party, key_msg), (SERVER, sum_party, key_msg)]
    c0 = protocol.mark()
    pk = key_msg.public_key()
    m1 = protocol.encrypt_rows(enc_party, sum_party, enc_view, queries, pk, offset(sigma), workers, chunk, slot_bits,
                               share=False)   # unshared: the server's ServerSums carries no count bits
    mn = encrypt_noise(enc_party, sum_party, m1.layout(), queries, sigma, pk, enc_source, size, workers)
    costs.since(enc_party, c0, m1.ciphertexts.nbytes + sum(a.nbytes for a in mn.shares.values()),
                int(np.prod(m1.ciphertexts.shape[:2])) + sum(int(np.prod(a.shape[:2])) for a in mn.shares.values()))
    log += [(enc_party, sum_party, m1), (enc_party, sum_party, mn)]
    c0 = protocol.mark()
    m2 = sum_for_server(sum_party, key_msg, m1, mn, sum_view, queries, sigma, sum_source, size, workers, slot_bits)
    costs.since(sum_party, c0, sum(a.nbytes for a in m2.sums.values()),
                sum(int(np.prod(a.shape[:2])) for a in m2.sums.values()))
    log.append((sum_party, SERVER, m2))
    c0 = protocol.mark()
    out = decrypt(private_key, m2, queries, sigma, stage, size, enc_view.n, slot_bits, noise=noise,
                  source=srv_source)
    costs.since(SERVER, c0)
    return out


def simulate(enc_party: str, sum_party: str, enc_view: Dataset, sum_view: Dataset, queries: Sequence[Query],
             sigma: float, enc_source: UniformSource, sum_source: UniformSource, stage: str, noise: str = "secure",
             srv_source: UniformSource | None = None) -> protocol.NoisyCounts:
    """The same released tables in plaintext: exact counts + E's share + S's share, drawn from the same sources in
    the same order as `run_real` (E's shares in query order, then S's in query order), + the server's share as
    `decrypt` adds it."""
    queries = protocol.unique(queries)
    exact, shape = {}, {}
    for q in queries:
        ca, na = protocol.tuple_codes(enc_view, q[0])
        cb, nb = protocol.tuple_codes(sum_view, q[1])
        exact[q], shape[q] = np.bincount(ca * nb + cb, minlength=na * nb).reshape(na, nb), (na, nb)
    z_e = {q: noise_share(shape[q], sigma, enc_source) for q in queries}
    z_s = {q: noise_share(shape[q], sigma, sum_source) for q in queries}
    tables = {protocol.key_of(q[0] + q[1]): (exact[q] + z_e[q] + z_s[q]).astype(np.float64) for q in queries}
    tables = add_server_share(tables, sigma, srv_source if srv_source is not None else server_source(noise, tables))
    return protocol.NoisyCounts(SERVER, sum_party, stage, "simulated", enc_party, released_variance(sigma),
                                tables).validate()


# -- the cross-party measure --------------------------------------------------------------------------------
def seeded_source(base: int, pair: tuple[str, str], role: str) -> GeneratorSource:
    """A party's seeded share (simulation noise) for one pair of parties and one role, from the base it drew."""
    tag = hashlib.sha256(f"vertisynth/he-server-noise/v1|{pair[0]}|{pair[1]}|{role}".encode()).digest()[:8]
    return GeneratorSource(np.random.default_rng(np.random.SeedSequence([base, int.from_bytes(tag, "big")])))


class ServerTrust:
    """`CrossPartyMeasure.answer` under trust = "server" for an `HEConfig`: one server key per instance (per run),
    made on the first real answer; `costs` per role ("server" included); `transcript` every message of the runs."""

    trust: str = TRUST

    def __init__(self, config: Any) -> None:
        self.config = config
        self.costs = protocol.Costs()
        self.transcript: list = []
        self.encrypting: list[tuple[str, str]] = []   # (E, S) per run, in order
        self._server: tuple[ServerKey, Any] | None = None
        self.test_sources: Mapping[str, Any] | None = None   # tests only: fixed noise sources per party (and "server")

    def released_variance(self, sigma: float) -> float:
        return released_variance(sigma)

    def rho_per_table(self, sigma: float) -> float:
        return rho_per_table(sigma)

    def server_key(self) -> tuple[ServerKey, Any]:
        if self._server is None:   # the server's key pair: its cost, booked as the rounds' are
            c0 = protocol.mark()
            self._server = make_server_key(self.config.key_bits, paillier.resolve(self.config.randomness,
                                                                                  self.config.scheme))
            self.costs.since(SERVER, c0)
        return self._server

    def answer(self, views: Mapping[str, Dataset], queries: Sequence[Query], sigma: float, noise: str,
               rngs: Mapping[str, np.random.Generator]) -> list[tuple[tuple[str, ...], np.ndarray, float]]:
        """(attributes, noisy counts on left + right attributes, 1.5σ²: the released variance) per query, in order."""
        if noise not in ("secure", "simulation"):
            raise ConfigError(f"he: noise must be 'secure' or 'simulation', got {noise!r}")
        share_sigma(sigma)   # refuses a σ whose shares the analysis does not cover, before any work
        c = self.config
        owner = {a: p for p, v in views.items() for a in v.domain.attributes}
        size = lambda b: int(np.prod([views[owner[a]].domain.size(a) for a in b]))  # noqa: E731
        by_pair = by_pairs(queries, owner)
        n = next(iter(views.values())).n
        if noise == "secure" and self.test_sources is not None:
            raise ConfigError("he: fixed test noise sources are for simulation noise only; this answer runs secure noise")
        # seeded shares only for simulated crypto under simulation noise (as the trust = none rounds): real crypto
        # draws from OpenDP over the OS CSPRNG whatever the noise setting
        bases = ({p: int(rngs[p].integers(0, 2**63)) for p in sorted(views)}
                 if noise == "simulation" and c.crypto == "simulated" and self.test_sources is None else None)
        got: dict[str, np.ndarray] = {}
        for (p, q), qs in by_pair.items():
            enc, summ, part = self._orient(p, q, protocol.unique(qs), size, n, sigma)
            self.encrypting.append((enc, summ))
            if self.test_sources is not None:
                src_e, src_s = self.test_sources[enc], self.test_sources[summ]
            elif bases is None:
                src_e, src_s = SystemSource(), SystemSource()
            else:
                src_e, src_s = seeded_source(bases[enc], (p, q), "enc"), seeded_source(bases[summ], (p, q), "sum")
            src_srv = (self.test_sources or {}).get(SERVER)
            if c.crypto == "simulated":
                c0 = protocol.cpu_now()
                msg = simulate(enc, summ, views[enc], views[summ], part, sigma, src_e, src_s, "answer", noise, src_srv)
                self.costs.add(enc, protocol.cpu_now() - c0)
            else:
                msg = run_real(enc, summ, views[enc], views[summ], part, sigma, src_e, src_s, self.server_key(),
                               "answer", self.costs, c.workers, c.chunk_rows, c.slot_bits, self.transcript, noise,
                               src_srv)
            got.update(msg.tables)
        return assemble(queries, got, size, sigma)

    def answers_cost(self, answers: Sequence[Mapping[str, Any]], n: int, prices: Callable[[float], Any]
                     ) -> dict[str, dict[str, Any]]:
        """Ciphertexts, bytes, operations and CPU per role of a sequence of oracle answers at `n` rows under trust =
        "server", made as `answer` makes them (every answer encrypts E's rows afresh: no rows are kept): per pair
        of parties `orient`'s E, the unshared layout at offset 2T, E's noise shares (one ciphertext per returned
        sum, op "share"), S's sums with E's share and its own multiplied in, the server's decryptions and its
        one key pair. `answers` as `HEEncoder.answers_cost` takes them; `prices(σ)`: the timed per-operation
        prices (None: counts only). Reads only public facts.

        `orient` picks E per answer from its tables, which for an answer marked "adaptive" (the stand-in's: which
        tables a run asks follows the data) are not known before the run: each party then also carries the figures
        it would pay as E of every such answer of its pairs ("as_encrypter") and as S of every one ("as_summer"),
        which `validate` prints beside its line (the probes keep `orient`'s own pick: their tables are planned)."""
        out = self._answers_cost(answers, n, prices)
        if any(a.get("adaptive") for a in answers):
            for p in [p for p in out if p != SERVER]:
                for name, as_enc in (("as_encrypter", True), ("as_summer", False)):
                    got = self._answers_cost(answers, n, prices, (p, as_enc))[p]
                    out[p][name] = {"ciphertexts": got["ciphertexts"], "cpu_s": got["cpu_s"]}
        return out

    def _answers_cost(self, answers: Sequence[Mapping[str, Any]], n: int, prices: Callable[[float], Any],
                      force: tuple[str, bool] | None = None) -> dict[str, dict[str, Any]]:
        """`answers_cost`; `force` = (party, as E): the adaptive answers of that party's pairs oriented so."""
        from .encoder import _book, _pool   # the estimate's bookkeeping, shared with trust none

        c = self.config
        bits = paillier.plan_bits(c.key_bits, c.scheme)
        ct_bytes = paillier.plan_ct_bytes(c.key_bits, c.scheme)
        workers = c.workers or (os.cpu_count() or 1)
        out: dict[str, dict[str, Any]] = {SERVER: {"ciphertexts": 0.0, "bytes": 0.0, "cpu_s": 0.0}}
        for i, ans in enumerate(answers):
            domains, sigma = ans["domains"], float(ans["sigma"])
            op = prices(sigma)
            owner = {a: p for p, d in domains.items() for a in d.attributes}
            for p in domains:
                out.setdefault(p, {"ciphertexts": 0.0, "bytes": 0.0, "cpu_s": 0.0})
            size = lambda b: int(np.prod([domains[owner[a]].size(a) for a in b]))  # noqa: E731
            if i == 0 and c.crypto == "real":
                _book(out[SERVER], op, key=1)
            t = offset(sigma)
            queries = [(tuple(a), tuple(b)) for a, b in ans["queries"]]
            for (p, q), qs in by_pairs(queries, owner).items():
                enc, summ, part = orient(c, p, q, protocol.unique(qs), size, n, sigma)
                if force is not None and ans.get("adaptive") and force[0] in (p, q) and (enc == force[0]) != force[1]:
                    enc, summ, part = summ, enc, [(b, a) for a, b in part]
                blocks, groups = protocol.block_groups(part)
                lay = Layout.build(blocks, [size(b) for b in blocks], n, t, bits, groups, c.slot_bits, False)
                k = protocol.stage_counts(part, size, n, t, bits, c.slot_bits, reuse=lay)
                rows, back = n * lay.plaintexts, k["returned"]
                cells = sum(size(a) * size(b) for a, b in part)
                out[enc]["ciphertexts"] += rows + back
                out[enc]["bytes"] += (rows + back) * ct_bytes
                out[summ]["ciphertexts"] += back
                out[summ]["bytes"] += back * ct_bytes
                _book(out[enc], op, enc=rows, enc_bit=n * len(blocks), share=back, draw=cells,
                      setup=_pool(workers, rows, c.chunk_rows) + _pool(workers, back))
                _book(out[summ], op, load=rows + back, mul=k["adds"] + 2 * back, noise=back, draw=cells,
                      setup=_pool(workers, back))
                _book(out[SERVER], op, load=back, dec=back, draw=cells)
        if c.crypto == "simulated":
            for v in out.values():
                v["note"] = "crypto = simulated: no ciphertexts are made; figures are what real crypto would send"
        return out

    def _orient(self, p: str, q: str, qs: list[Query], size, n: int, sigma: float) -> tuple[str, str, list[Query]]:
        return orient(self.config, p, q, qs, size, n, sigma)


def by_pairs(queries: Sequence[Query], owner: Mapping[str, str]) -> dict[tuple[str, str], list[Query]]:
    """The queries by pair of parties (sorted), each with the first party's side first; each side from one party."""
    out: dict[tuple[str, str], list[Query]] = {}
    for left, right in queries:
        sides = [{owner.get(a) for a in left}, {owner.get(a) for a in right}]
        if not left or not right or None in sides[0] | sides[1] or len(sides[0]) != 1 or len(sides[1]) != 1 \
                or sides[0] == sides[1]:
            raise ConfigError(f"he: query {list(left)} x {list(right)} must take each side from one party, two "
                              "different parties")
        (p,), (q,) = sides
        key, qq = ((p, q), (tuple(left), tuple(right))) if p < q else ((q, p), (tuple(right), tuple(left)))
        out.setdefault(key, []).append(qq)
    return out


def orient(config: Any, p: str, q: str, qs: list[Query], size, n: int, sigma: float) -> tuple[str, str, list[Query]]:
    """The side whose layout needs fewer ciphertexts per row encrypts (fewer slots on a tie): public facts only, so
    every role (each party, the server) computes the same E and S."""
    bits = paillier.plan_bits(config.key_bits, config.scheme)
    sb, t = config.slot_bits, offset(sigma)
    flipped = [(b, a) for a, b in qs]
    rows = lambda q: protocol.row_ciphertexts(q, size, n, t, bits, sb, share=False)  # noqa: E731  (unshared)
    cost_p = (rows(qs), sum(map(size, {x[0] for x in qs})))
    cost_q = (rows(flipped), sum(map(size, {x[0] for x in flipped})))
    return (p, q, qs) if cost_p <= cost_q else (q, p, flipped)


def assemble(queries: Sequence[Query], got: Mapping[str, np.ndarray], size, sigma: float
             ) -> list[tuple[tuple[str, ...], np.ndarray, float]]:
    """(left + right attributes, table with axes in that order, the released variance) per query, from the
    decrypted tables by key."""
    out = []
    for left, right in queries:
        left, right = tuple(left), tuple(right)
        if protocol.key_of(left + right) in got:
            table = got[protocol.key_of(left + right)].reshape([size((a,)) for a in left + right])
        elif protocol.key_of(right + left) in got:   # the other side encrypted: its axes come first
            table = got[protocol.key_of(right + left)].reshape([size((a,)) for a in right + left])
            table = np.moveaxis(table, list(range(len(right))), list(range(len(left), len(left) + len(right))))
        else:
            raise MessageError(f"he: no sums for the table {list(left + right)} asked for; refused")
        out.append((left + right, table, released_variance(sigma)))
    return out


# -- across machines: each party's rounds, the server's reading (deploy's vertical oracle) -----------------------
def server_key_of(offer: bytes) -> ServerKey:
    """The server's public key as the party got it: inside the server's signed (and sealed) query of the stage."""
    key = Message.from_bytes(offer, "the server's Paillier key in its query") if offer else None
    if not isinstance(key, ServerKey) or key.party != SERVER:
        raise MessageError("he: trust = 'server' needs the server's Paillier public key with the stage's query; "
                           "none came (or not the server's); refused")
    return key


@attrs.define
class ServerTrustStage:
    """Party `me`'s part in one answer under trust = "server" (the deploy driver's `StageRounds`). Per pair of parties,
    E and S fixed by `orient` (public facts only):

      he-srows-<stage>   E -> S   E's rows, one-hot under the SERVER's Paillier key (`EncryptedOneHot`)
      he-snoise-<stage>  E -> S   E's noise share, packed and encrypted under the same key (`EncryptedNoise`)

    both sealed to S's run key by the driver (the server holds the Paillier key: unsealed, it would read E's rows and
    E's share). Then S publishes `ServerSums` (its answer, sealed to the server's run key); E publishes nothing."""

    config: Any
    me: str
    view: Dataset
    stage: str
    key: ServerKey
    sigma: float
    size: Callable[[tuple[str, ...]], int]
    runs: list                      # [(pair, E, S, queries E-side first)] with `me` as E or S
    sources: Callable[[tuple[str, str], str], UniformSource]
    rows_in: dict[str, bytes] = attrs.field(factory=dict)
    noise_in: dict[str, bytes] = attrs.field(factory=dict)
    layouts: dict[str, Layout] = attrs.field(factory=dict)   # E: its rows' layout per S, for its noise share

    def rounds(self) -> list[str]:
        return [f"he-srows-{self.stage}", f"he-snoise-{self.stage}"] if self.runs else []

    def _as(self, role: int) -> list:
        return [r for r in self.runs if r[role] == self.me]

    def outgoing(self, rnd: str):
        pk = self.key.public_key()
        for pair, _, summ, qs in self._as(1):
            if rnd.startswith("he-srows-"):
                m = protocol.encrypt_rows(self.me, summ, self.view, qs, pk, offset(self.sigma), self.config.workers,
                                          self.config.chunk_rows, self.config.slot_bits, share=False)
                self.layouts[summ] = m.layout()
            else:
                m = encrypt_noise(self.me, summ, self.layouts[summ], qs, self.sigma, pk, self.sources(pair, "enc"), self.size,
                                  self.config.workers)
            yield [summ], m.kind, m.to_bytes(), summ

    def expects(self, rnd: str) -> dict[str, list[str]]:
        if rnd.startswith("he-snoise-"):   # as S, once every E has sent both
            senders = [r[1] for r in self._as(2)]
            return {f"he-srows-{self.stage}": senders, rnd: senders}
        return {}

    def incoming(self, rnd: str, got: Mapping[str, Sequence[bytes]]) -> None:
        for who, bodies in got.items():
            if len(bodies) != 1:
                raise MessageError(f"{rnd} from {who!r}: {len(bodies)} messages, expected one; refused")
            (self.rows_in if rnd.startswith("he-srows-") else self.noise_in)[who] = bodies[0]

    def published(self):
        for pair, enc, _, qs in self._as(2):
            m1 = Message.from_bytes(self.rows_in[enc], f"he-srows-{self.stage} from {enc}")
            mn = Message.from_bytes(self.noise_in[enc], f"he-snoise-{self.stage} from {enc}")
            if not isinstance(m1, protocol.EncryptedOneHot) or m1.party != enc or m1.recipient != self.me:
                raise MessageError(f"he-srows-{self.stage} from {enc!r}: not {enc!r}'s rows for {self.me!r}; refused")
            if not isinstance(mn, EncryptedNoise) or mn.party != enc or mn.recipient != self.me:
                raise MessageError(f"he-snoise-{self.stage} from {enc!r}: not {enc!r}'s noise share for {self.me!r}; "
                                   "refused")
            yield sum_for_server(self.me, self.key, m1, mn, self.view, qs, self.sigma, self.sources(pair, "sum"),
                                 self.size, self.config.workers, self.config.slot_bits)


def party_stage(config: Any, me: str, view: Dataset, domains: Mapping[str, Any], queries: Sequence[Query],
                sigma: float, noise: str, rng: np.random.Generator, test: bool, stage: str,
                offer: bytes) -> ServerTrustStage:
    """Party `me`'s rounds of one answer under trust = "server": its share drawn as `ServerTrust.answer` draws it with
    crypto = "simulated" under an explicit test secret and simulation noise (one base per answer from its stream,
    sources per pair and role), else from the OS CSPRNG."""
    share_sigma(sigma)
    key = server_key_of(offer)
    paillier.check_scheme(key.modulus, config.scheme, "he: the server's key")
    owner = {a: p for p, d in domains.items() for a in d.attributes}
    size = lambda b: int(np.prod([domains[owner[a]].size(a) for a in b]))  # noqa: E731  (the public domain)
    runs = []
    for pair, qs in by_pairs(queries, owner).items():
        if me in pair:
            enc, summ, part = orient(config, pair[0], pair[1], protocol.unique(qs), size, view.n, sigma)
            runs.append((pair, enc, summ, part))
    base = int(rng.integers(0, 2**63)) if test and noise == "simulation" else None

    def sources(pair: tuple[str, str], role: str) -> UniformSource:
        return seeded_source(base, pair, role) if base is not None else SystemSource()
    return ServerTrustStage(config, me, view, stage, key, sigma, size, runs, sources)


def read_server_sums(config: Any, private_key: Any, messages: Sequence[Message], queries: Sequence[Query],
                     sigma: float, domains: Mapping[str, Any], noise: str = "secure"
                     ) -> list[tuple[tuple[str, ...], np.ndarray, float]]:
    """The server's reading of one answer: exactly one `ServerSums` per pair of parties, from that pair's S, of E's
    rows, in the planned layout (`decrypt` checks it); decrypted: count + both shares + the server's own (drawn
    under the server's `noise`), variance 1.5σ²."""
    owner = {a: p for p, d in domains.items() for a in d.attributes}
    size = lambda b: int(np.prod([domains[owner[a]].size(a) for a in b]))  # noqa: E731
    pairs = by_pairs(queries, owner)
    sums: dict[tuple[str, str], ServerSums] = {}
    for m in messages:
        if not isinstance(m, ServerSums):
            raise MessageError(f"he: a {m.kind!r} message from {m.party!r} where the summing party's sums were "
                               "expected; refused")
        pair = tuple(sorted((m.party, m.encrypting)))
        if pair not in pairs or pair in sums:
            raise MessageError(f"he: sums of {m.party!r} over {m.encrypting!r}'s rows were not asked for (or came "
                               "twice); refused")
        sums[pair] = m
    got: dict[str, np.ndarray] = {}
    for pair, qs in pairs.items():
        if pair not in sums:
            raise MessageError(f"he: no sums from the pair {list(pair)}; refused")
        m = sums[pair]
        enc, summ, part = orient(config, pair[0], pair[1], protocol.unique(qs), size, m.rows, sigma)
        if (m.encrypting, m.party) != (enc, summ):
            raise MessageError(f"he: {m.party!r} summed {m.encrypting!r}'s rows, the plan has {summ!r} sum "
                               f"{enc!r}'s; refused")
        got.update(decrypt(private_key, m, part, sigma, "answer", size, None, config.slot_bits, noise=noise).tables)
    return assemble(queries, got, size, sigma)
