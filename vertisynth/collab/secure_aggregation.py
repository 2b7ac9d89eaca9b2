"""Secure aggregation of custodians' marginal counts with distributed Gaussian noise (seed 004, §4.2).

Threat model: semi-honest (honest-but-curious) compute servers, S >= 2 of them, that do not all collude.

  * Sharing. A custodian splits each count vector x into S additive shares over the ring Z_{2^64}:
    S−1 uniform random vectors and x minus their sum. Any S−1 shares are jointly uniform, so no
    coalition of fewer than S servers learns anything about x.
  * Aggregation. Each server adds up the shares it received from all custodians (the ring sum of
    shares is a share of the sum of counts) — no server ever sees a custodian's marginal in the clear.
  * Randomness. Shares are uniform ring elements read from the OS CSPRNG (os.urandom). Secure noise (the
    separate-process servers' default) is the discrete Gaussian N_Z(0, σ²) from the OS CSPRNG (OpenDP,
    core/noise.py), which is 1/(2σ²)-zCDP on its own (Canonne, Kamath & Steinke 2020); the seeded
    simulation draws round(N(0, σ²)) from numpy instead (the argument below).
  * Sealed shares. Across processes every share travels sealed to its server's X25519 run key by the
    collab channel (collab/channel.py: deploy's sealed-envelope format, core/courier.py; X25519, HKDF-SHA256,
    AES-256-GCM, the run, config, sender and slot as associated data), so a reader of the exchange sees
    ciphertexts only, and a share moved, edited or re-addressed fails to open.
  * Noise as shares. Each server s adds its own integer noise z_s = round(N(0, σ²)) to its share, so
    the reconstructed output is Σx + Σ_s z_s. Why every server draws a *full* σ: a server (or a
    coalition of up to S−1 servers) knows its own z_s and can subtract it, and what remains includes
    at least one unknown z_t; since Σx is an integer, Σx + round(N(0, σ²)) = round(Σx + N(0, σ²)) is
    post-processing of the Gaussian mechanism with sensitivity 1, i.e. 1/(2σ²)-zCDP, and the other
    servers' noise is independent post-processing on top. The price is variance S·σ² in the released
    table instead of σ². (Splitting σ² across servers would leave a curious server with too little
    noise, and sums of rounded Gaussians are not exactly a rounded Gaussian, so we do not.)
  * Reconstruction. Only the noisy sum is reconstructed (by the analyst, from the servers' noisy
    shares), read as signed 64-bit integers.
Messages are files (`Message` subclasses), so custodians and servers can run as separate processes.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import ClassVar

import attrs
import numpy as np
from vertisynth.core.errors import DataError, MessageError
from vertisynth.core.mechanisms import gaussian_sigma
from vertisynth.core.messages import Message
from vertisynth.core.noise import discrete_gaussian, path_stream
from vertisynth.core.privacy import NOISE_KINDS, Charge, PrivacyLedger, ZCDP

STAGE = "secure_aggregation"


@attrs.frozen(eq=False)
class CountShare(Message):
    """One custodian's share of its count table for one query, addressed to one server."""

    kind: ClassVar[str] = "count_share"
    query: str = ""
    server: int = 0
    n_servers: int = 2
    shape: list[int] = attrs.field(factory=list)
    share: np.ndarray = attrs.field(factory=lambda: np.zeros(0, np.uint64))

    def validate(self) -> CountShare:
        super().validate()
        if self.share.dtype != np.uint64:
            raise self._fail(f"share must be uint64 ring elements, got {self.share.dtype}")
        if list(self.share.shape) != list(self.shape):
            raise self._fail(f"share has shape {self.share.shape}, declared {self.shape}")
        if not 0 <= self.server < self.n_servers or self.n_servers < 2:
            raise self._fail(f"server index {self.server} invalid for {self.n_servers} servers")
        return self


@attrs.frozen(eq=False)
class NoisyShare(Message):
    """A server's share of the noisy aggregate; `party` names the server."""

    kind: ClassVar[str] = "noisy_share"
    query: str = ""
    server: int = 0
    n_servers: int = 2
    custodians: list[str] = attrs.field(factory=list)
    shape: list[int] = attrs.field(factory=list)
    share: np.ndarray = attrs.field(factory=lambda: np.zeros(0, np.uint64))
    noise: str = "secure"      # which noise the server added (the publisher reports it)

    def validate(self) -> NoisyShare:
        super().validate()
        if self.noise not in NOISE_KINDS:
            raise self._fail(f"noise must be one of {list(NOISE_KINDS)}, got {self.noise!r}")
        if self.share.dtype != np.uint64 or list(self.share.shape) != list(self.shape):
            raise self._fail(f"share must be uint64 of shape {self.shape}, got {self.share.dtype} {self.share.shape}")
        return self


def _os_ring(shape: tuple[int, ...]) -> np.ndarray:
    """Uniform elements of Z_{2^64} from the OS CSPRNG."""
    n = int(np.prod(shape))
    return np.frombuffer(os.urandom(8 * n), dtype=np.uint64).reshape(shape).copy()


def share_counts(custodian: str, query: str, counts: np.ndarray, n_servers: int,
                 rng: np.random.Generator | None) -> list[CountShare]:
    """Split integer counts into n_servers additive shares over Z_{2^64} (custodian side): uniform masks from
    the OS CSPRNG, or from `rng` in a seeded simulation."""
    if n_servers < 2:
        raise DataError("secure aggregation needs at least 2 servers")
    x = np.asarray(counts)
    if x.dtype.kind not in "iu" or (x < 0).any() or (x.size and int(x.max()) >= 2**62):
        raise DataError(f"custodian {custodian!r}: counts for {query!r} must be non-negative integers below 2^62")
    x = x.astype(np.uint64)
    shares = [_os_ring(x.shape) if rng is None else rng.integers(0, 2**64, size=x.shape, dtype=np.uint64, endpoint=False)
              for _ in range(n_servers - 1)]
    last = x.copy()
    for s in shares:
        last -= s  # wraps mod 2^64
    shares.append(last)
    return [CountShare(party=custodian, query=query, server=i, n_servers=n_servers, shape=list(x.shape), share=s)
            for i, s in enumerate(shares)]


def planned_charge(query: str, sigma: float, sensitivity: float = 1.0) -> Charge:
    """The release of one noisy aggregate with L2 sensitivity Δ and noise N(0, σ²) from any single
    server: Δ²/(2σ²)-zCDP (counts: Δ = 1)."""
    return Charge(STAGE, "distributed_gaussian", ZCDP(sensitivity**2 / (2 * sigma**2)), None, f"query {query!r}")


def sigma_for_rho(rho: float) -> float:
    return gaussian_sigma(rho, 1.0)


def aggregate_at_server(server: int, shares: Sequence[CountShare], sigma: float,
                        rng: np.random.Generator | None) -> NoisyShare:
    """Server side: add the custodians' shares for one query and this server's own noise: discrete Gaussian
    from the OS CSPRNG (`rng` None: secure), or round(N(0, σ²)) from a seeded `rng` (the simulation)."""
    if not shares:
        raise MessageError(f"server {server}: no shares received")
    q = shares[0].query
    for s in shares:
        if s.query != q or s.server != server or s.n_servers != shares[0].n_servers or s.shape != shares[0].shape:
            raise MessageError(f"server {server}: share from {s.party!r} does not match (query {s.query!r}, "
                               f"server {s.server}, shape {s.shape}) the others ({q!r}, {server}, {shares[0].shape})")
    names = [s.party for s in shares]
    if len(set(names)) != len(names):
        raise MessageError(f"server {server}: duplicate shares from {sorted({n for n in names if names.count(n) > 1})}")
    total = np.zeros(tuple(shares[0].shape), np.uint64)
    for s in shares:
        total += s.share
    if sigma <= 0:
        noise = np.zeros(total.shape, np.int64)
    elif rng is None:
        noise = discrete_gaussian(np.zeros(total.shape), 1 / (2 * sigma**2)).astype(np.int64)
    else:
        noise = np.rint(rng.normal(0.0, sigma, size=total.shape)).astype(np.int64)
    total += noise.astype(np.uint64)  # two's complement: adding a negative int64 wraps correctly
    return NoisyShare(party=f"server{server}", query=q, server=server, n_servers=shares[0].n_servers,
                      custodians=sorted(names), shape=list(total.shape), share=total,
                      noise="simulation" if rng is not None else "secure")


def reconstruct(noisy: Sequence[NoisyShare], ledger: PrivacyLedger | None = None,
                sigma: float | None = None, sensitivity: float = 1.0) -> np.ndarray:
    """Analyst side: add all servers' noisy shares; the result is Σ counts + Σ noise as signed integers.

    When a ledger is given, the release is charged to it (it must have been planned).
    """
    if not noisy:
        raise MessageError("no server shares to reconstruct")
    n_servers = noisy[0].n_servers
    got = sorted(s.server for s in noisy)
    if got != list(range(n_servers)):
        raise MessageError(f"need one noisy share from each of {n_servers} servers, got servers {got}")
    first = noisy[0]
    for s in noisy:
        if s.query != first.query or s.shape != first.shape or s.custodians != first.custodians:
            raise MessageError(f"server {s.server}'s share is for a different query, shape or set of custodians")
    if ledger is not None:
        if sigma is None:
            raise DataError("reconstruct: pass sigma with the ledger")
        ledger.spend(planned_charge(first.query, sigma, sensitivity))
    total = np.zeros(tuple(first.shape), np.uint64)
    for s in noisy:
        total += s.share
    return total.view(np.int64)


# -- randomness and transports: one code path for the simulation and for separate processes ----------------
@attrs.frozen
class Randomness:
    """Where shares and server noise come from, per (party, query) and independent of call order, so a
    separate-process run reproduces the one-process simulation under the same seed.

    `seed=None` (real use): shares from the OS CSPRNG and secure noise (discrete Gaussian, OS CSPRNG): the
    streams are None. With a seed (the simulation, tests) the streams are Generators derived from (seed, run,
    role, party, query); `run` names the run ("final", a tuning fold run, ...) so no two releases ever
    reuse noise."""

    seed: int | None = None
    run: str = "final"

    @classmethod
    def from_rng(cls, rng: np.random.Generator, run: str = "run") -> Randomness:
        return cls(int(rng.integers(0, 2**63)), run)

    def scoped(self, run: str) -> Randomness:
        return attrs.evolve(self, run=f"{self.run}/{run}")

    @property
    def noise_kind(self) -> str:
        return "secure" if self.seed is None else "simulation"

    def _rng(self, role: int, index: int | str, query: str) -> np.random.Generator | None:
        if self.seed is None:
            return None
        return path_stream(self.seed, role, index, self.run, query)

    def noise(self, server: int, query: str) -> np.random.Generator | None:
        return self._rng(1, server, query)

    def shares(self, custodian: str, query: str) -> np.random.Generator | None:
        return self._rng(2, custodian, query)


def server_randomness(seed: int | None, run: str = "final") -> Randomness:
    """A server's noise source: secure noise from the OS CSPRNG (no seed), or a seeded simulation."""
    return Randomness(seed, run)


class Transport:
    """One secure-aggregation round: `total(query, per_custodian, sigma)` → Σ counts + Σ_s noise_s (int64).

    The protocol code (binning, measurement) calls this the same way in every role; only what happens
    behind it differs: all in memory (`InMemory`), or signed messages on an exchange, a folder or a URL
    (`vertisynth.collab.distributed`)."""

    servers: int

    def total(self, query: str, per_custodian: Mapping[str, np.ndarray], sigma: float) -> np.ndarray:
        raise NotImplementedError

    def scoped(self, prefix: str) -> Transport:
        return _Scoped(self, prefix)


@attrs.define
class _Scoped(Transport):
    inner: Transport
    prefix: str

    @property
    def servers(self) -> int:  # type: ignore[override]
        return self.inner.servers

    def total(self, query, per_custodian, sigma):
        return self.inner.total(f"{self.prefix}{query}", per_custodian, sigma)


@attrs.define
class InMemory(Transport):
    """The simulation: custodians share, servers add shares and their own noise, the sum is reconstructed."""

    servers: int
    randomness: Randomness

    def total(self, query, per_custodian, sigma):
        inbox: dict[int, list[CountShare]] = {s: [] for s in range(self.servers)}
        for name, counts in per_custodian.items():
            for sh in share_counts(name, query, counts, self.servers, self.randomness.shares(name, query)):
                inbox[sh.server].append(sh)
        noisy = [aggregate_at_server(s, inbox[s], sigma, self.randomness.noise(s, query)) for s in range(self.servers)]
        return reconstruct(noisy)


def as_transport(rng_or_transport, servers: int) -> Transport:
    """Accept a Generator (older call sites: the streams are derived from one draw of it) or a Transport."""
    if isinstance(rng_or_transport, Transport):
        return rng_or_transport
    return InMemory(servers, Randomness.from_rng(rng_or_transport))
