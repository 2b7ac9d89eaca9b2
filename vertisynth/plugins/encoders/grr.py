"""`grr`: the frequency-oracle encoder (VertiMRF Sec. 4.2, "FO-based LocEnc / CarEst"; App. A.2).

Party side (LocEnc). Every value of every local attribute A_j (domain size u_j) is perturbed by
generalized randomized response, Eq. (6):
    Pr[v' = v] = e^ε₀ / (e^ε₀ + u_j − 1)   (keep)      Pr[v' = w] = 1 / (e^ε₀ + u_j − 1)   (each w ≠ v),
and the perturbed columns (row-aligned, global record order) are sent to the server.

Server side (CarEst). For a marginal M = (A_1..A_l) the server counts the perturbed tuples, T̂, and
returns P⁻¹ T̂, which is unbiased because E[T̂] = P T with P = ⊗_i P_i. Each P_i = (p_i − q_i) I + q_i 11ᵀ
has the closed-form inverse P_i⁻¹ x = (x − q_i Σx) / (p_i − q_i), applied along axis i, so the
Π u_i × Π u_i matrix is never built. Variance of every cell (exact for the estimator, plug-in):
per record the estimator adds Π_i P_i⁻¹[c_i, y_i], whose second moment is a_i (attribute matches c_i)
or b_i (it does not), with a_i = p_i A_i² + (1−p_i) B_i², b_i = q_i A_i² + (1−q_i) B_i²,
A_i = (1−q_i)/(p_i−q_i), B_i = −q_i/(p_i−q_i). Summing over records and expanding the product,
    Var[T̂_M[c]] = Σ_{S ⊆ M} Π_{i∈S}(a_i − b_i) Π_{i∉S} b_i · T_S[c_S]  −  T_M[c],
with T_∅ = n. Its leading term n Π b_i = n Π q_i(1−q_i)/(p_i−q_i)² is Theorem 1's O(n / ε'^{2l}).
The unknown true sub-marginals T_S are replaced by the (clipped) estimates.

Privacy (Theorem 1, App. A.2). Each perturbation is ε₀-DP for its record's attribute (the ratio of
any output's probability under two inputs is at most e^ε₀). A record's d reports compose: the
party-wise charges are PureDP(ε₀) per attribute, and the ledger composes them across parties by
the better of basic composition (d ε₀, δ = 0) and the RDP route (pure ε₀ ⇒ RDP α ε₀²/2, summed and
converted at δ) — Theorem 1's min{basic, RDP} with the exact RDP curve instead of its 2ε₀√(2d log 1/δ)
shortcut. ε₀ is the largest value whose composition fits the encoder's budget.
Neighbouring: GRR releases one row per aligned record, so the record count is public (as after
PSI alignment); its guarantee is the replace-one (bounded) one. Appendix A.2 halves ε₀ to convert
to add/remove, but that implication runs the other way (add/remove ε ⇒ replace 2ε), so no halving
is applied here: the ledger is charged the full ε₀ per attribute.

Per-record randomness comes from a party-local secret PRF key (`prf.py`), keyed by (attribute, global
record id): chunked and one-shot encodings are identical, and the key never leaves the party.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from itertools import combinations
from typing import ClassVar

import attrs
import numpy as np

from vertisynth.core.anova import effect_weight, kept_effects
from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.errors import BudgetError, ConfigError, DataError, DomainError, MessageError
from vertisynth.core.factor import Factor
from vertisynth.core.interfaces import Encoder, PlanContext
from vertisynth.core.messages import Message
from vertisynth.core.noise import party_randomness
from vertisynth.core.privacy import Charge, Composition, PrivacyLedger, PureDP

from .chunked import ChunkJob, ChunksByConfig
from .common import Estimate, agree, owners, planned_shares, project_to_simplex, query_domain
from .prf import TAG_GRR, prf_words, uniform_open0

STAGE = "encoder"
MECHANISM = "grr"


@attrs.frozen
class GRRConfig:
    """epsilon: the encoder's ε (None: all the budget left); postprocess of estimates:
    "none" (unbiased), "clip" (negatives to 0) or "project" (nearest non-negative table summing to n)."""

    epsilon: float | None = None
    postprocess: str = "none"
    chunk_rows: int = 100_000  # chunked.encode_csv: rows per chunk
    dask_scheduler: str | None = None  # chunked.encode_csv: run the chunks on this Dask cluster

    def __attrs_post_init__(self) -> None:
        if self.epsilon is not None and not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise ConfigError(f"grr: epsilon must be a positive number, got {self.epsilon!r}")
        if not (isinstance(self.chunk_rows, int) and self.chunk_rows >= 1):
            raise ConfigError(f"grr: chunk_rows must be a positive integer, got {self.chunk_rows!r}")
        if self.postprocess not in ("none", "clip", "project"):
            raise ConfigError(f"grr: postprocess must be 'none', 'clip' or 'project', got {self.postprocess!r}")


# -- the mechanism ------------------------------------------------------------------------------
def keep_probability(epsilon: float, size: int) -> tuple[float, float]:
    """(p, q) of Eq. (6): keep the true value w.p. p, report each other value w.p. q."""
    denom = math.exp(epsilon) + size - 1
    return math.exp(epsilon) / denom, 1.0 / denom


def grr_perturb(codes: np.ndarray, size: int, epsilon: float, key: bytes, attr_index: int, ids: np.ndarray) -> np.ndarray:
    """Eq. (6) on one column, randomness from PRF(key, attribute, record id): 128 bits per record,
    the first 64 decide keep/flip, the second 64 pick one of the u − 1 other values uniformly."""
    codes = np.asarray(codes, dtype=np.int64)
    if size == 1:
        return codes.copy()
    p, _ = keep_probability(epsilon, size)
    words = prf_words(key, TAG_GRR, np.array([attr_index]), ids)[0]
    keep = uniform_open0(words[:, 0]) <= p
    shift = 1 + np.minimum((uniform_open0(words[:, 1]) * (size - 1)).astype(np.int64), size - 2)
    return np.where(keep, codes, (codes + shift) % size)


def perturb_view(view: Dataset, ids: np.ndarray, *, epsilon: float, key: bytes, index: dict[str, int]) -> dict[str, np.ndarray]:
    """Every column of `view` through Eq. (6); `index` numbers the party's attributes for the PRF."""
    return {a: grr_perturb(view.column(a), view.domain.size(a), epsilon, key, index[a], ids) for a in view.attributes}


def _concat(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: np.concatenate([a[k], b[k]]) for k in a}


def calibrate_epsilon0(d: int, ctx: PlanContext, epsilon: float | None) -> float:
    """Largest per-attribute ε₀ such that d PureDP(ε₀) (plus earlier stages) fit the budget (Theorem 1)."""
    target = ctx.budget.epsilon if epsilon is None else min(epsilon, ctx.budget.epsilon)
    before = list(ctx.planned_before)
    if epsilon is not None:  # an explicit slice: the encoder alone must fit inside it
        before = []

    def fits(e0: float) -> bool:
        return Composition.of(before + [PureDP(e0)] * d).epsilon(ctx.budget.delta) <= target * (1 + 1e-12)

    lo, hi = 0.0, target  # composition of d charges is at least ε₀, so ε₀ <= target
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    if lo <= target * 1e-9:
        raise BudgetError("grr: no budget is left for the encoder after the earlier stages")
    return lo


# -- messages -------------------------------------------------------------------------------------
@attrs.frozen(eq=False)
class GRRMessage(Message):
    """One party's perturbed columns in global record order, and the ε₀ they were perturbed with."""

    kind: ClassVar[str] = "grr_columns"
    domain: Domain = attrs.field(default=None)
    epsilon: float = 0.0
    n: int = 0
    columns: dict[str, np.ndarray] = attrs.field(factory=dict)

    def validate(self) -> GRRMessage:
        super().validate()
        if not isinstance(self.domain, Domain):
            raise self._fail("domain is missing")
        if not (isinstance(self.epsilon, (int, float)) and self.epsilon > 0 and math.isfinite(self.epsilon)):
            raise self._fail(f"epsilon must be positive, got {self.epsilon!r}")
        if not isinstance(self.n, int) or self.n < 0:
            raise self._fail(f"n must be a non-negative integer, got {self.n!r}")
        if set(self.columns) != set(self.domain.attributes):
            raise self._fail(f"columns {sorted(self.columns)} do not match the domain {list(self.domain.attributes)}")
        for a, col in self.columns.items():
            if not isinstance(col, np.ndarray) or col.shape != (self.n,) or col.dtype.kind not in "iu":
                raise self._fail(f"column {a!r} must be {self.n} integer codes, got {getattr(col, 'shape', None)} "
                                 f"{getattr(col, 'dtype', None)}")
            if col.size and (col.min() < 0 or col.max() >= self.domain.size(a)):
                raise self._fail(f"column {a!r} holds codes outside 0..{self.domain.size(a) - 1}")
        return self


# -- the encoder ------------------------------------------------------------------------------------
class GRREncoder(Encoder, ChunksByConfig):
    stage = STAGE

    def __init__(self, config: GRRConfig | None = None) -> None:
        super().__init__(config or GRRConfig())
        self._charges: dict[tuple[str, str], Charge] = {}
        self.epsilon0: float | None = None
        self._attributes: dict[str, tuple[str, ...]] = {}

    # -- plan (public facts only) -------------------------------------------------------------
    def plan(self, ctx: PlanContext) -> list[Charge]:
        d = len(ctx.domain)
        self.epsilon0 = calibrate_epsilon0(d, ctx, self.config.epsilon)
        self._attributes = {p.name: tuple(p.attributes) for p in ctx.partition}
        # kept: `spend` spends these very charges
        self._charges = {(p.name, a): Charge(STAGE, MECHANISM, PureDP(self.epsilon0), p.name, note=f"GRR ε₀ on {a!r}")
                         for p in ctx.partition for a in p.attributes}
        return list(self._charges.values())

    # -- party side ---------------------------------------------------------------------------
    def _check_view(self, party: str, view: Dataset) -> None:
        if self.epsilon0 is None:
            raise DataError("grr: plan() must run before encode() (the budget is unknown)")
        if party not in self._attributes:
            raise DataError(f"grr: unknown party {party!r}; planned parties: {sorted(self._attributes)}")
        extra = [a for a in view.attributes if a not in self._attributes[party]]
        if extra:
            raise DomainError(f"grr: party {party!r} does not hold attribute(s) {extra}; it holds {list(self._attributes[party])}")

    def spend(self, party: str, view_domain: Domain, ledger: PrivacyLedger) -> None:
        for a in view_domain.attributes:
            charge = self._charges.get((party, a))
            if charge is None:
                raise DataError(f"grr: attribute {a!r} of party {party!r} was not in the plan")
            ledger.spend(charge)

    def perturb(self, party: str, view: Dataset, key: bytes, ids: np.ndarray) -> dict[str, np.ndarray]:
        """The perturbed columns of `view` (rows with global ids `ids`); no ledger involved (see `encode`)."""
        self._check_view(party, view)
        ids = np.asarray(ids, dtype=np.int64)
        if ids.shape != (view.n,):
            raise DataError(f"grr: {ids.size} record ids for {view.n} rows")
        index = {a: i for i, a in enumerate(self._attributes[party])}
        return perturb_view(view, ids, epsilon=self.epsilon0, key=key, index=index)

    def chunk_job(self, party: str, domain: Domain, ledger: PrivacyLedger, rng: np.random.Generator) -> ChunkJob:
        """Chunked encoding (see `chunked.py`): charge first, perturb chunk by chunk with global ids
        (a picklable function, runnable on Dask workers), concatenate in order. Equals `encode`."""
        self._check_view(party, Dataset(np.zeros((0, len(domain)), dtype=np.int64), domain))
        key = party_randomness(rng, ledger.noise).bytes(32)   # secret PRF key: OS CSPRNG when secure
        self.spend(party, domain, ledger)
        index = {a: i for i, a in enumerate(self._attributes[party])}
        mapper = partial(perturb_view, epsilon=self.epsilon0, key=key, index=index)

        def finish(cols: dict[str, np.ndarray], n: int) -> GRRMessage:
            return GRRMessage(party=party, domain=domain, epsilon=float(self.epsilon0), n=n, columns=cols).validate()

        return ChunkJob(domain, mapper, _concat, finish)

    def encode_chunks(self, party: str, domain: Domain, chunks: Iterable[tuple[np.ndarray, Dataset]],
                      ledger: PrivacyLedger, rng: np.random.Generator) -> GRRMessage:
        return self.chunk_job(party, domain, ledger, rng).run_local(chunks)

    def encode(self, party: str, view: Dataset, ledger: PrivacyLedger, rng: np.random.Generator,
               ids: np.ndarray | None = None) -> GRRMessage:
        """Runs at the party on its own columns; charges the ledger before perturbing."""
        self._check_view(party, view)
        key = party_randomness(rng, ledger.noise).bytes(32)  # party-local secret PRF key; never leaves the party
        self.spend(party, view.domain, ledger)
        ids = np.arange(view.n, dtype=np.int64) if ids is None else ids
        cols = self.perturb(party, view, key, ids)
        return GRRMessage(party=party, domain=view.domain, epsilon=float(self.epsilon0), n=view.n, columns=cols).validate()

    # -- as a cross-party measure that releases once (core ReleasesOnce: the vertical oracle's) --------------------
    @property
    def trust(self) -> str:
        """"none": each party randomises its own columns with its own secret key; the columns are ε₀-DP per
        attribute against every role (sealed to the server all the same), whoever colludes."""
        return "none"

    def release_cost(self, ctx: PlanContext, rho: float) -> list[Charge]:
        """PureDP(ε₀) per attribute of every party, ε₀ = √(2ρ/d): a pure ε₀ mechanism is (ε₀²/2)-zCDP, so the
        d charges compose to at most zCDP `rho` (the ledger's RDP route is at least as tight)."""
        if self.config.epsilon is not None:
            raise ConfigError("grr: as a cross-party measure its budget is the vertical table's `release` share; "
                              "drop params.epsilon")
        if not rho > 0:
            raise BudgetError("grr: the release needs a positive ρ")
        self.epsilon0 = math.sqrt(2 * rho / len(ctx.domain))
        self._attributes = {p.name: tuple(p.attributes) for p in ctx.partition}
        self._charges = {(p.name, a): Charge(STAGE, MECHANISM, PureDP(self.epsilon0), p.name,
                                             note=f"GRR ε₀ on {a!r}, once for every cross-party marginal")
                         for p in ctx.partition for a in p.attributes}
        self._released = None
        self._release_domains = {p.name: ctx.domain.project(p.attributes) for p in ctx.partition}
        return list(self._charges.values())

    def release(self, views: Mapping[str, Dataset], ledger: PrivacyLedger,
                rngs: Mapping[str, np.random.Generator]) -> None:
        """Each party perturbs its own columns (`release_at`: its charges spent first, its PRF key from the OS
        CSPRNG under secure noise); the columns are sealed to the server (`take_release`)."""
        if self.epsilon0 is None:
            raise DataError("grr: release_cost() must plan the release before it runs")
        if getattr(self, "_released", None) is not None:
            raise DataError("grr: the columns are released once per run")
        self.take_release([self.release_at(p, views[p].project(self._attributes[p]), ledger, rngs[p])
                           for p in self._attributes])

    # -- the release's party/server split (core ReleasesAtParties: each party on its own machine) -----------------
    def release_charges(self, party: str) -> list[Charge]:
        """`party`'s ε₀ charge per attribute, in its planned order (the order `release_at` spends them)."""
        if party not in self._attributes or not self._charges:
            raise DataError(f"grr: no planned release for party {party!r}")
        return [self._charges[(party, a)] for a in self._attributes[party]]

    def agrees_keys(self) -> bool:
        return False   # each party's PRF key is its own and never leaves it

    def seeded_keys(self, noise: str) -> bool:
        return False

    def set_key_context(self, context: bytes) -> None:
        pass   # no key is agreed

    def release_at(self, party: str, view: Dataset, ledger: PrivacyLedger, rng: np.random.Generator,
                   key: object = None) -> GRRMessage:
        """`party`'s perturbed columns (`encode`: its charges spent first, then its own PRF key drawn)."""
        if self.epsilon0 is None:
            raise DataError("grr: release_cost() must plan the release before it runs")
        if set(view.attributes) != set(self._attributes.get(party, ())):
            raise DomainError(f"grr: party {party!r} must release all its planned attributes "
                              f"{list(self._attributes.get(party, ()))}, got {list(view.attributes)}")
        return self.encode(party, view, ledger, rng)

    def take_release(self, messages: Sequence[Message]) -> None:
        """Every party's columns, each checked against the plan before any is read: one message per planned party,
        its planned attributes and sizes, the planned ε₀, one row count for all."""
        if self.epsilon0 is None:
            raise DataError("grr: release_cost() must plan the release before it runs")
        if getattr(self, "_released", None) is not None:
            raise MessageError("grr: the columns were released already; a second release is refused")
        by_party = planned_shares(messages, GRRMessage, "grr", "columns", self._release_domains)
        for name, m in by_party.items():
            if not math.isclose(m.epsilon, self.epsilon0, rel_tol=1e-12):
                raise MessageError(f"grr: {name!r} perturbed its columns at ε₀={m.epsilon:.6g}, the plan says "
                                   f"{self.epsilon0:.6g}; refused")
        rows = {name: m.n for name, m in by_party.items()}
        if len(set(rows.values())) > 1:
            raise MessageError(f"grr: the parties released different row counts {rows}; refused")
        self._released = [by_party[name] for name in self._attributes]

    def answer_released(self, queries: Sequence[tuple[tuple[str, ...], tuple[str, ...]]]
                        ) -> list[tuple[tuple[str, ...], np.ndarray, np.ndarray]]:
        """Each two-party marginal as P⁻¹ T̂ of the released columns (unbiased, not post-processed) and its exact
        per-cell variance with the clipped estimates plugged in for the unknown true sub-marginals."""
        if getattr(self, "_released", None) is None:
            raise DataError("grr: nothing released yet")
        out = []
        for left, right in queries:
            by_attr = owners(self._released, GRRMessage, "grr")
            dom = query_domain(by_attr, tuple(left) + tuple(right), "grr")
            n = agree(list(by_attr.values()), "n", "grr")
            cols = [by_attr[a].columns[a] for a in dom.attributes]
            counts = np.bincount(np.ravel_multi_index(cols, dom.shape), minlength=dom.size()).astype(float)
            pq = [keep_probability(self.epsilon0, u) for u in dom.shape]
            est = unbias(counts.reshape(dom.shape), pq)
            var = grr_variance(dom, pq, n, _clipped_marginal(est))
            out.append((dom.attributes, est, var))
        return out

    def consistent_variance(self, query: tuple[tuple[str, ...], tuple[str, ...]], adjusted: Sequence[str]
                            ) -> np.ndarray:
        """(core ReportsConsistentVariance) The per-cell variance of the answer to `query` (axes as
        `answer_released` gives them) once its mean and the main effects of `adjusted` are removed: exact for
        the estimator, the same plug-in as its variance (`grr_kept_variance`)."""
        if getattr(self, "_released", None) is None:
            raise DataError("grr: nothing released yet")
        (_, est, _), = self.answer_released([query])
        dom = query_domain(owners(self._released, GRRMessage, "grr"), tuple(query[0]) + tuple(query[1]), "grr")
        n = agree(self._released, "n", "grr")
        pq = [keep_probability(self.epsilon0, u) for u in dom.shape]
        return grr_kept_variance(dom, pq, n, _clipped_marginal(est), [dom.attributes.index(a) for a in adjusted])

    # -- server side --------------------------------------------------------------------------
    def estimate(self, messages: Sequence[Message], attrs_: Sequence[str]) -> Factor:
        return self.estimate_with_variance(messages, attrs_).counts

    def estimate_with_variance(self, messages: Sequence[Message], attrs_: Sequence[str]) -> Estimate:
        by_attr = owners(messages, GRRMessage, "grr")
        dom = query_domain(by_attr, attrs_, "grr")
        n = agree(list(by_attr.values()), "n", "grr")
        eps = float(agree(list(by_attr.values()), "epsilon", "grr", rel=1e-9))
        cols = [by_attr[a].columns[a] for a in dom.attributes]
        counts = np.bincount(np.ravel_multi_index(cols, dom.shape), minlength=dom.size()).astype(float).reshape(dom.shape)
        pq = [keep_probability(eps, u) for u in dom.shape]
        est = unbias(counts, pq)

        def estimated_marginal(axes: tuple[int, ...]) -> np.ndarray:  # plug-in for the unknown true T_S
            return np.clip(est.sum(axis=tuple(i for i in range(len(dom)) if i not in axes)), 0, None)

        variance = grr_variance(dom, pq, n, estimated_marginal)
        if self.config.postprocess == "clip":
            est = np.clip(est, 0, None)
        elif self.config.postprocess == "project":
            est = project_to_simplex(est, float(n))
        return Estimate(Factor(dom, est), Factor(dom, variance))


def _clipped_marginal(est: np.ndarray):
    """The plug-in for the unknown true sub-marginal T_S: the estimate's, clipped at 0."""
    return lambda axes: np.clip(est.sum(axis=tuple(i for i in range(est.ndim) if i not in axes)), 0, None)


def unbias(counts: np.ndarray, pq: list[tuple[float, float]]) -> np.ndarray:
    """P⁻¹ T̂ with P = ⊗ P_i: along each axis, P_i⁻¹ x = (x − q_i Σx) / (p_i − q_i) (as p_i + (u_i−1) q_i = 1)."""
    est = np.asarray(counts, float)
    for axis, (p, q) in enumerate(pq):
        est = (est - q * est.sum(axis=axis, keepdims=True)) / (p - q)
    return est


def grr_kept_variance(dom: Domain, pq: list[tuple[float, float]], n: int, marginal,
                      adjusted: Sequence[int]) -> np.ndarray:
    """Var of every cell of P_A P⁻¹T̂, P_A the projection that removes the mean and the main effects of the axes
    `adjusted` (core/anova.py: what the vertical oracle's consistency step does to the error once those 1-ways
    are known). Exact for the estimator, plug-in as `grr_variance`. Per record with true x and report y
    (y_i = c_i with probability π_i = p_i where x_i = c_i, else q_i, independently), P_A P⁻¹ adds at cell c
    h(D) = Σ_{S kept} Π_{i∈S} (1[i∈D] − 1/u_i)/(p_i − q_i) Π_{i∉S} 1/u_i, D = {i: y_i = c_i}, with mean
    k(D') = (P_A e_x)[c], D' = {i: x_i = c_i}: Var = Σ_records E[h²] − k² = Σ_{D'} F(D') #{x: matches c on D'
    exactly}, which Möbius inversion turns into Σ_S coef_S · T_S[c_S] (T_∅ = n). With nothing adjusted it is
    `grr_variance`. GRR's P⁻¹ scales an effect over S by Π_{i∈S} 1/(p_i − q_i), so most of the noise sits in the
    interactions that the projection keeps: the independent-cells share 1 − (1 + Σ(u − 1))/cells understated
    what is left (a pair: ×1.6, docs/vertical.md)."""
    l = len(dom)
    sizes = dom.shape
    kept = kept_effects(l, adjusted)
    scale = [1.0 / (p - q) for p, q in pq]
    subsets = [s for k in range(l + 1) for s in combinations(range(l), k)]
    h = {s: effect_weight([i in s for i in range(l)], sizes, kept, scale) for s in subsets}
    f = {}
    for d_x in subsets:   # x matches c exactly on d_x
        g = 0.0
        for d_y, hv in h.items():   # y matches c exactly on d_y
            pr = 1.0
            for i, (p, q) in enumerate(pq):
                pi = p if i in d_x else q
                pr *= pi if i in d_y else 1.0 - pi
            g += hv * hv * pr
        f[d_x] = g - effect_weight([i in d_x for i in range(l)], sizes, kept) ** 2
    var = np.zeros(dom.shape)
    for s in subsets:
        coef = sum((-1) ** (len(s) - len(e)) * f[e] for k in range(len(s) + 1) for e in combinations(s, k))
        if coef == 0.0:
            continue
        if not s:
            var = var + coef * n
            continue
        m = np.asarray(marginal(s), float)
        var = var + coef * m.reshape([dom.shape[i] if i in s else 1 for i in range(l)])
    return np.maximum(var, 0.0)


def grr_variance(dom: Domain, pq: list[tuple[float, float]], n: int, marginal) -> np.ndarray:
    """Var of every cell of P⁻¹T̂ (formula in the module docstring). `marginal(axes)` returns the
    (true or estimated) marginal on those axes of `dom`, axes kept in increasing order."""
    l = len(dom)
    a, b = [], []
    for p, q in pq:
        big_a, big_b = (1 - q) / (p - q), -q / (p - q)
        a.append(p * big_a**2 + (1 - p) * big_b**2)
        b.append(q * big_a**2 + (1 - q) * big_b**2)
    var = np.zeros(dom.shape)
    for k in range(l + 1):
        for subset in combinations(range(l), k):
            coef = math.prod(a[i] - b[i] if i in subset else b[i] for i in range(l))
            if k == 0:
                var = var + coef * n
                continue
            m = np.asarray(marginal(subset), float)
            shape = [dom.shape[i] if i in subset else 1 for i in range(l)]
            var = var + coef * m.reshape(shape)
    full = np.asarray(marginal(tuple(range(l))), float)
    return np.maximum(var - full, 0.0)
