"""`dpfm`: the sketch-based encoder of VertiMRF (Sec. 4.3: Sketch-based LocEnc, Alg. 3, and CarEst, Alg. 4).

Party side. With the t hash keys ξ_h agreed among the parties (`core/keys.py`) and unknown to the server,
every party hashes every record id to a geometric value H_ξh(id) (`prf.py`: the same value at every
party and for every attribute) and, for each attribute A_j and value v, sends the DP FM sketch of the
id set {records with A_j = v} (`fm_sketch.py`). Vectorised in blocks of rows × repetitions bounded by
`block_mb` (`sketch_maxima`): one PRF call per block, then a sorted group reduction per attribute (or pair
of attributes); by default (γ = 1, floor b >= 6) only the hash values >= b, the only ones a published sketch can
show, are looked for and scattered (`_sparse_maxima`: the same sketches bit for bit). One party also sends a
Gaussian noisy count n̂.

Server side. The count of cell v = (v_1..v_l) of marginal M is n̂ minus the union of the complements:
the complement sketch of v_i is the max over A_i's other values, the union of complements is the max
over i, its cardinality comes from the harmonic-mean estimator, and the union holds
P = k_p Σ_i (u_i − 1) phantoms (each attribute's own u_i; the reference code used u_1 for all):
    T̂[v] = n̂ − (K̂[v] − P),  Var[T̂[v]] ≈ Var[n̂] + Var[K̂[v]],  then clipped at 0 (Alg. 4 line 9)
or, optionally, projected onto the tables >= 0 that sum to n̂. The variance is that of the raw T̂.
`estimator = "inclusion_exclusion"` (the default; "complement" is the paper's, above) reads the same sketches
by inclusion–exclusion over the cell's own value sets, |∩_i A_i| = Σ_{S ≠ ∅} (−1)^{|S|+1} K̂(∪_{i∈S} A_i); each
union holds |S| k_p phantoms, which cancel for l >= 2 (k_p is subtracted for l = 1). A union of complements
has about n records plus k_p Σ(u_i − 1) phantoms, the cell's own sets far fewer, so the estimate's error is
about half (Adult, ε 1.6: cross pairs' TVD after consistency 0.034 → 0.019; docs/synthesizers/vertimrf.md).
Its variance is the delta method's over the repetitions (the terms are correlated); post-processing as above.

Privacy (Theorem 2, App. A.3). Each sketch is ε'-DP (Lemma 4). In one repetition a record touches one
sketch per attribute, d in all across the parties; App. A.3 bounds the repetition's Rényi divergence by
the product of the d per-sketch terms, and t repetitions compose. The paper bounds each ε'-DP term by
RDP 2λε'²; the tight bound is λε'²/2 (pure ε ⇒ ε²/2-zCDP, Bun & Steinke 2016 Prop. 1.4), so a party
holding d_p attributes is charged ZCDP(t · d_p · ε'² / 2), and the parties' charges compose to
ZCDP(t d ε'²/2). Two calibrations of ε' from the sketches' slice of the encoder budget:
  * "paper" (default, Alg. 3 line 2): ε' = ε_s / (4 √(t d ln(1/δ))), with δ = 1/n when n is public;
    the ledger then records the (smaller) true cost above;
  * "tight": the largest ε' whose true cost fits the slice, ε' = √(2 ρ_s / (t d)) — fewer phantoms.
The noisy count n̂ is the Gaussian mechanism (sensitivity 1) on its own slice ρ_n = count_fraction · ρ.
"""
from __future__ import annotations

import itertools
import math
import weakref
from functools import partial
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

import attrs
import numpy as np

from vertisynth.core import progress
from vertisynth.core.anova import remove_main_effects
from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.errors import BudgetError, ConfigError, DataError, DomainError, MessageError
from vertisynth.core.factor import Factor
from vertisynth.core.interfaces import Encoder, PlanContext
from vertisynth.core.mechanisms import gaussian_mechanism, gaussian_sigma
from vertisynth.core.noise import party_randomness
from vertisynth.core.messages import Message
from vertisynth.core.privacy import Budget, Charge, PrivacyLedger, ZCDP, zcdp_to_approx

from .chunked import ChunkJob, ChunksByConfig
from .common import Estimate, agree, owners, planned_shares, project_to_simplex, query_domain
from .fm_sketch import EMPTY, block_bytes, cardinality, finalize, fm_parameters, grouping
from vertisynth.core.keys import KeyParty, agree_keys
from .prf import FM_LAYOUT, FM_PER_BLOCK, LZ16, FMRecordStream, geometric_from_prefix

STAGE = "encoder"
RELEASE_MAX_BYTES = 2**31   # one party's released sketches (t × its values × int16) as a cross-party measure
SKETCH = "dpfm_sketches"
COUNT = "gaussian_count"


@attrs.frozen
class DPFMConfig:
    """t repetitions, geometric parameter γ, δ of Alg. 3 (None: 1/n when the config gives n, else the
    budget's δ), count_fraction of the encoder's ρ for n̂, calibration "paper" | "tight", epsilon: the
    encoder's ε (None: all that is left), postprocess of estimates: "clip" (Alg. 4 line 9: negatives to 0),
    "clip_rescale" (then scaled to sum n̂), "project" (the nearest table >= 0 summing to n̂: every cell
    moves by the same amount before clipping, so small cells are not inflated as by clipping alone;
    much lower TVD in the benchmark) or "none" (unbiased up to O(1/t)), rep_block: repetitions hashed per
    vectorised step, block_mb: memory of one step's buffers in MB (8 bytes per repetition·row for γ = 1, 20 otherwise: the
    rows per step are block_mb / (8 × rep_block), at least 1; the old whole-view block took ≈ 47 B × rep_block × n),
    kernel: "sparse" (γ = 1 with a floor b >= 6: only the hash values >= b are looked for, the others cannot show
    in a sketch; same sketches bit for bit, docs/scale.md) or "dense" (every raw maximum, the reference path),
    reproducible_keys: draw the X25519 keys from
    the seeded Generator (simulation) rather than the OS (deployment); chunk_rows / dask_scheduler: how
    `chunked.encode_csv` reads a party's CSV (a scheduler address such as "tcp://host:8786" runs the
    chunks on that Dask cluster)."""

    t: int = 32000             # the paper: 2000 (docs/synthesizers/vertimrf.md: with inclusion-exclusion the cells' std falls as 1/√t)
    gamma: float = 1.0
    delta: float | None = None
    count_fraction: float = 0.1
    calibration: str = "tight"   # the paper: "paper"
    epsilon: float | None = None
    postprocess: str = "project"  # the paper (Alg. 4): "clip"
    estimator: str = "inclusion_exclusion"   # the paper (Alg. 4): "complement"
    rep_block: int = 256
    block_mb: float = 16.0
    kernel: str = "sparse"
    reproducible_keys: bool = True
    chunk_rows: int = 100_000
    dask_scheduler: str | None = None

    def __attrs_post_init__(self) -> None:
        if not (isinstance(self.t, int) and self.t >= 1):
            raise ConfigError(f"dpfm: t must be a positive integer, got {self.t!r}")
        if not (isinstance(self.gamma, (int, float)) and 0 < self.gamma <= 10):
            raise ConfigError(f"dpfm: gamma must be in (0, 10], got {self.gamma!r}")
        if self.delta is not None and not (0 < self.delta < 1):
            raise ConfigError(f"dpfm: delta must be in (0, 1), got {self.delta!r}")
        if not (0 < self.count_fraction < 1):
            raise ConfigError(f"dpfm: count_fraction must be in (0, 1), got {self.count_fraction!r}")
        if self.calibration not in ("paper", "tight"):
            raise ConfigError(f"dpfm: calibration must be 'paper' or 'tight', got {self.calibration!r}")
        if self.epsilon is not None and not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise ConfigError(f"dpfm: epsilon must be positive, got {self.epsilon!r}")
        if self.estimator not in ("complement", "inclusion_exclusion"):
            raise ConfigError(f"dpfm: estimator must be 'complement' or 'inclusion_exclusion', got {self.estimator!r}")
        if self.postprocess not in ("clip", "clip_rescale", "project", "none"):
            raise ConfigError(f"dpfm: postprocess must be 'clip', 'clip_rescale', 'project' or 'none', got {self.postprocess!r}")
        if not (isinstance(self.chunk_rows, int) and self.chunk_rows >= 1):
            raise ConfigError(f"dpfm: chunk_rows must be a positive integer, got {self.chunk_rows!r}")
        if self.kernel not in ("sparse", "dense"):
            raise ConfigError(f"dpfm: kernel must be 'sparse' or 'dense', got {self.kernel!r}")
        if not (isinstance(self.rep_block, int) and self.rep_block >= 1):
            raise ConfigError(f"dpfm: rep_block must be a positive integer, got {self.rep_block!r}")
        if not (isinstance(self.block_mb, (int, float)) and math.isfinite(self.block_mb) and self.block_mb > 0):
            raise ConfigError(f"dpfm: block_mb must be a positive number of MB, got {self.block_mb!r}")


@attrs.frozen
class SketchParams:
    """Everything the two sides must agree on, derived from public facts in plan()."""

    t: int
    gamma: float
    eps_prime: float
    k_p: int
    floor: int
    rho_count: float
    count_party: str


# -- messages ----------------------------------------------------------------------------------------
@attrs.frozen(eq=False)
class DPFMMessage(Message):
    """One party's t × u_j sketches per attribute, the sketch parameters and (from one party) n̂."""

    kind: ClassVar[str] = "dpfm_sketches"
    domain: Domain = attrs.field(default=None)
    t: int = 0
    gamma: float = 0.0
    eps_prime: float = 0.0
    k_p: int = 0
    floor: int = 0
    n_hat: float | None = None
    n_hat_variance: float | None = None
    sketches: dict[str, np.ndarray] = attrs.field(factory=dict)
    prf: str = FM_LAYOUT

    def validate(self) -> DPFMMessage:
        super().validate()
        if not isinstance(self.domain, Domain):
            raise self._fail("domain is missing")
        if self.prf != FM_LAYOUT:
            raise self._fail(f"sketches hashed with PRF layout {self.prf!r}, this version uses {FM_LAYOUT!r}: every "
                             "party and the server must run the same vertisynth version")
        if not (isinstance(self.t, int) and self.t >= 1):
            raise self._fail(f"t must be a positive integer, got {self.t!r}")
        try:
            k_p, floor = fm_parameters(float(self.eps_prime), float(self.gamma))
        except (ConfigError, TypeError, ValueError) as exc:
            raise self._fail(f"bad sketch parameters: {exc}") from None
        if (k_p, floor) != (self.k_p, self.floor):
            raise self._fail(f"k_p={self.k_p}, floor={self.floor} do not match ε'={self.eps_prime}, γ={self.gamma} "
                             f"(expected {k_p}, {floor})")
        if (self.n_hat is None) != (self.n_hat_variance is None):
            raise self._fail("n_hat and n_hat_variance must be given together")
        if self.n_hat is not None and not (math.isfinite(self.n_hat) and self.n_hat_variance > 0):
            raise self._fail(f"bad noisy count {self.n_hat!r} (variance {self.n_hat_variance!r})")
        if set(self.sketches) != set(self.domain.attributes):
            raise self._fail(f"sketches {sorted(self.sketches)} do not match the domain {list(self.domain.attributes)}")
        for a, s in self.sketches.items():
            shape = (self.t, self.domain.size(a))
            if not isinstance(s, np.ndarray) or s.shape != shape or s.dtype.kind not in "iu":
                raise self._fail(f"sketch of {a!r} must be integers of shape {shape}, got "
                                 f"{getattr(s, 'shape', None)} {getattr(s, 'dtype', None)}")
            if s.size and s.min() < self.floor:
                raise self._fail(f"sketch of {a!r} has values below the floor b={self.floor}")
        return self


# -- the encoder -------------------------------------------------------------------------------------
class DPFMEncoder(Encoder, ChunksByConfig):
    stage = STAGE

    def __init__(self, config: DPFMConfig | None = None) -> None:
        super().__init__(config or DPFMConfig())
        self.params: SketchParams | None = None
        self._attributes: dict[str, tuple[str, ...]] = {}
        self._keys: dict[str, KeyParty] | None = None
        self._sketch_codes = SketchCodes()   # the pair estimator's per-sketch codes, made once per sketch
        self.key_context = b""   # what the agreed keys are bound to (a run across machines; see core/keys.py)
        self._charges: dict[str, Charge] = {}
        self._count_charge: Charge | None = None
        self._released: list[DPFMMessage] | None = None   # the sealed sketches (as a cross-party measure)
        self._release_domains: dict[str, Domain] = {}   # each party's planned attributes of the release
        self._answer_terms: dict[tuple[str, ...], tuple[np.ndarray, dict]] = {}   # per answer: its variance, terms

    @property
    def block_mb(self) -> float:   # BuffersBlocks: the sketch blocks' working buffer
        return self.config.block_mb

    @property
    def k_p(self) -> int | None:   # CountsPhantoms: phantom elements per sketch, once planned
        return None if self.params is None else self.params.k_p

    # -- plan (public facts only) -------------------------------------------------------------
    def plan(self, ctx: PlanContext) -> list[Charge]:
        cfg = self.config
        rho = ctx.rho if cfg.epsilon is None else Budget(min(cfg.epsilon, ctx.budget.epsilon), ctx.budget.delta).rho()
        return self._plan_rho(ctx, rho)

    def _plan_rho(self, ctx: PlanContext, rho: float) -> list[Charge]:
        """The sketches' and n̂'s charges for a slice of zCDP `rho` (public facts only)."""
        cfg = self.config
        d = len(ctx.domain)
        rho_count, rho_sketch = cfg.count_fraction * rho, (1 - cfg.count_fraction) * rho
        if cfg.calibration == "tight":
            eps_prime = math.sqrt(2 * rho_sketch / (cfg.t * d))
        else:
            delta = cfg.delta or (1.0 / ctx.n_public if ctx.n_public else ctx.budget.delta)
            if not delta or delta <= 0:
                raise BudgetError("dpfm: Alg. 3 needs δ > 0: set budget.delta, dataset n, or dpfm delta")
            eps_sketch = zcdp_to_approx(rho_sketch, ctx.budget.delta)  # the slice as (ε, δ)
            eps_prime = eps_sketch / (4 * math.sqrt(cfg.t * d * math.log(1 / delta)))
        k_p, floor = fm_parameters(eps_prime, cfg.gamma)
        names = [p.name for p in ctx.partition]
        self.params = SketchParams(cfg.t, float(cfg.gamma), eps_prime, k_p, floor, rho_count, names[0])
        self._attributes = {p.name: tuple(p.attributes) for p in ctx.partition}
        if self._keys is not None and set(self._keys) != set(names):
            self._keys = None  # a different set of parties must agree on new keys
        # kept: the parties spend these very charges
        self._charges = {p.name: Charge(STAGE, SKETCH, self._sketch_cost(len(p.attributes)), p.name,
                                        note=f"t={cfg.t} × {len(p.attributes)} attributes at ε'={eps_prime:.4g}")
                         for p in ctx.partition}
        self._count_charge = Charge(STAGE, COUNT, ZCDP(rho_count), names[0], note="noisy record count n̂")
        return [*self._charges.values(), self._count_charge]

    def _sketch_cost(self, d_p: int) -> ZCDP:
        # ε'-DP sketch ⇒ (ε'²/2)-zCDP; t repetitions × d_p attributes compose (Theorem 2, tight form).
        return ZCDP(self.params.t * d_p * self.params.eps_prime**2 / 2)

    # -- keys ---------------------------------------------------------------------------------
    def agree_keys(self, rng: np.random.Generator | None) -> dict[str, KeyParty]:
        """Run the key agreement among the planned parties (simulated here; see `core/keys.py`)."""
        if not self._attributes:
            raise DataError("dpfm: plan() must run before the key agreement")
        self._keys = agree_keys(list(self._attributes), rng if self.config.reproducible_keys else None,
                                self.key_context)
        return self._keys

    def set_keys(self, keys: dict[str, KeyParty]) -> None:
        self._keys = dict(keys)

    # -- party side ---------------------------------------------------------------------------
    def _check_view(self, party: str, view: Dataset) -> None:
        if self.params is None:
            raise DataError("dpfm: plan() must run before encode() (the budget is unknown)")
        if party not in self._attributes:
            raise DataError(f"dpfm: unknown party {party!r}; planned parties: {sorted(self._attributes)}")
        extra = [a for a in view.attributes if a not in self._attributes[party]]
        if extra:
            raise DomainError(f"dpfm: party {party!r} does not hold attribute(s) {extra}; it holds {list(self._attributes[party])}")

    def raw_maxima(self, key: bytes, view: Dataset, ids: np.ndarray) -> dict[str, np.ndarray]:
        """See `sketch_maxima`; uses the planned t and γ."""
        return sketch_maxima(key, view, ids, self.params.t, self.params.gamma, self.config.rep_block,
                             self.config.block_mb, self._kernel_floor())

    def _kernel_floor(self) -> int | None:
        """The floor b the kernel may clip at (the finished sketches are the same: `sketch_maxima`); None:
        the exact raw maxima (kernel = "dense", the reference path)."""
        return self.params.floor if self.config.kernel == "sparse" else None

    def finish(self, party: str, domain: Domain, raw: dict[str, np.ndarray], n: int,
               ledger: PrivacyLedger, rng: np.random.Generator) -> DPFMMessage:
        """Phantoms and floor (Alg. 1 line 4) on the merged maxima, plus n̂ at the counting party."""
        p = self.params
        phantoms = party_randomness(rng, ledger.noise)   # the sketches' DP randomness: OS CSPRNG when secure
        sketches = {a: finalize(raw[a], phantoms, p.k_p, p.floor, p.gamma) for a in domain.attributes}
        n_hat = n_var = None
        if party == p.count_party:
            n_hat = float(gaussian_mechanism(np.array(float(n)), self._count_charge, rng, ledger))
            n_var = gaussian_sigma(p.rho_count) ** 2
        return DPFMMessage(party=party, domain=domain, t=p.t, gamma=p.gamma, eps_prime=p.eps_prime, k_p=p.k_p,
                           floor=p.floor, n_hat=n_hat, n_hat_variance=n_var, sketches=sketches).validate()

    def _spend_sketches(self, party: str, domain: Domain, ledger: PrivacyLedger) -> None:
        ledger.spend(self._charges[party])

    def party_key(self, party: str, rng: np.random.Generator) -> bytes:
        if self._keys is None:
            self.agree_keys(rng)
        if party not in self._keys:
            raise DataError(f"dpfm: no agreed key for party {party!r}")
        return self._keys[party].fm_key()

    def encode(self, party: str, view: Dataset, ledger: PrivacyLedger, rng: np.random.Generator,
               ids: np.ndarray | None = None) -> DPFMMessage:
        """Runs at the party on its own columns (rows carry global ids `ids`, default 0..n-1)."""
        self._check_view(party, view)
        if set(view.attributes) != set(self._attributes[party]):
            raise DomainError(f"dpfm: party {party!r} must encode all its planned attributes {list(self._attributes[party])}")
        key = self.party_key(party, rng)
        self._spend_sketches(party, view.domain, ledger)
        ids = np.arange(view.n, dtype=np.int64) if ids is None else ids
        raw = self.raw_maxima(key, view, ids)
        return self.finish(party, view.domain, raw, view.n, ledger, rng)

    def chunk_job(self, party: str, domain: Domain, ledger: PrivacyLedger, rng: np.random.Generator) -> ChunkJob:
        """Chunked encoding (see `chunked.py`): keys and the ledger charge first, then per chunk the
        raw maxima (a picklable function, runnable on Dask workers), merged by element-wise max, then
        phantoms and floor once. Equals the one-shot `encode` bit for bit."""
        self._check_view(party, Dataset(np.zeros((0, len(domain)), dtype=np.int64), domain))
        if set(domain.attributes) != set(self._attributes[party]):
            raise DomainError(f"dpfm: party {party!r} must encode all its planned attributes {list(self._attributes[party])}")
        key = self.party_key(party, rng)
        self._spend_sketches(party, domain, ledger)
        return ChunkJob(domain, self._mapper(key), _max_merge,
                        lambda raw, n: self.finish(party, domain, raw, n, ledger, rng))

    def _mapper(self, key: bytes) -> Any:
        return partial(sketch_maxima, key, t=self.params.t, gamma=self.params.gamma, rep_block=self.config.rep_block,
                       block_mb=self.config.block_mb, floor=self._kernel_floor())

    def early_mapper(self, party: str, domain: Domain) -> tuple[Any, Any] | None:
        """(`chunk_job`'s map, its merge) where they are known before the job is made: the keys are agreed,
        so the map draws nothing from the party's stream. The merge (element-wise max) is order-free. A
        cluster can then compute the raw maxima while the party fits its local model; nothing derived from
        them leaves the party before `chunk_job` has spent the charge and `finish` has added the phantoms."""
        if self._keys is None or party not in self._keys or set(domain.attributes) != set(self._attributes[party]):
            return None
        return self._mapper(self._keys[party].fm_key()), _max_merge

    def encode_chunks(self, party: str, domain: Domain, chunks: Iterable[tuple[np.ndarray, Dataset]],
                      ledger: PrivacyLedger, rng: np.random.Generator) -> DPFMMessage:
        """Like `encode`, one (global ids, rows) chunk at a time; memory holds one chunk."""
        return self.chunk_job(party, domain, ledger, rng).run_local(chunks)

    # -- server side --------------------------------------------------------------------------
    def estimate(self, messages: Sequence[Message], attrs_: Sequence[str]) -> Factor:
        return self.estimate_with_variance(messages, attrs_).counts

    def estimate_with_variance(self, messages: Sequence[Message], attrs_: Sequence[str]) -> Estimate:
        """Alg. 4 on the messages alone (no keys, no rows)."""
        dom, est, var, n_hat = self._raw_estimate(messages, attrs_)
        return self._postprocess(dom, est, var, n_hat)

    def _raw_estimate(self, messages: Sequence[Message], attrs_: Sequence[str],
                      terms: dict | None = None) -> tuple[Domain, Any, Any, float]:
        """(domain, raw estimate, its variance, n̂) of Alg. 4 before any post-processing; `terms` (inclusion–
        exclusion only) receives the delta method's means and slopes (`_inclusion_exclusion`)."""
        by_attr = owners(messages, DPFMMessage, "dpfm")
        dom = query_domain(by_attr, attrs_, "dpfm")
        msgs = list({m.party: m for m in messages}.values())
        t = agree(msgs, "t", "dpfm")
        gamma = float(agree(msgs, "gamma", "dpfm", rel=1e-12))
        agree(msgs, "eps_prime", "dpfm", rel=1e-12)
        k_p, floor = msgs[0].k_p, msgs[0].floor
        n_hat, n_var = _noisy_count(msgs)
        if self.config.estimator == "inclusion_exclusion":
            est, var = _inclusion_exclusion([by_attr[a].sketches[a] for a in dom.attributes], t, gamma, floor, k_p,
                                            self._sketch_codes, terms)
            return dom, est, var, n_hat
        q = 1.0 / (1.0 + gamma)
        comps = [_complement(by_attr[a].sketches[a]) for a in dom.attributes]
        qpow = q ** np.arange(np.iinfo(np.int16).max + 1, dtype=float)
        qpow_floor = q**floor
        # Σ_h q^{max(max_i C_i[h, v_i], b)}, in blocks of repetitions to bound memory.
        cells = dom.size()
        block = max(1, min(t, (1 << 22) // max(cells, 1)))
        acc = np.zeros(dom.shape)
        l = len(dom)
        for h0 in range(0, t, block):
            union = None
            for i, c in enumerate(comps):
                shape = [c.shape[0]] + [dom.shape[i] if j == i else 1 for j in range(l)]
                ci = c[h0:h0 + block].reshape([min(block, t - h0)] + shape[1:])
                union = ci if union is None else np.maximum(union, ci)
            union = np.broadcast_to(union, (union.shape[0],) + dom.shape)
            vals = np.where(union < floor, qpow_floor, qpow[np.maximum(union, 0)])
            acc += vals.sum(axis=0)
        k_hat, k_var = cardinality(acc / t, t, gamma, floor)
        phantoms = k_p * sum(u - 1 for u in dom.shape)
        est = n_hat - (k_hat - phantoms)
        return dom, est, n_var + k_var, n_hat

    def _postprocess(self, dom: Domain, est: np.ndarray, var: np.ndarray | float, n_hat: float) -> Estimate:
        """The configured post-processing of a raw estimate; the variance stays the raw estimate's."""
        how = self.config.postprocess
        if how in ("clip", "clip_rescale"):
            est = np.clip(est, 0, None)
        if how == "clip_rescale" and est.sum() > 0:
            est = est * (max(n_hat, 0.0) / est.sum())
        if how == "project":
            est = project_to_simplex(est, max(n_hat, 0.0))
        return Estimate(Factor(dom, est), Factor(dom, np.broadcast_to(var, dom.shape).copy()))

    def noisy_count(self, messages: Sequence[Message]) -> tuple[float, float]:
        """(n̂, Var[n̂]) from the messages."""
        return _noisy_count(list(messages))

    # -- as a cross-party measure that releases once (core ReleasesOnce: the vertical oracle's) --------------------
    @property
    def trust(self) -> str:
        """"server": every party holds the FM PRF key, so a sketch is DP only against a role without it; the
        sketches are sealed to the server, which must collude with no party (docs/threat-model.md)."""
        return "server"

    def release_cost(self, ctx: PlanContext, rho: float) -> list[Charge]:
        """The sketches' charges (one per party) and n̂'s, composing to zCDP `rho` (`plan` on that slice)."""
        if self.config.epsilon is not None:
            raise ConfigError("dpfm: as a cross-party measure its budget is the vertical table's `release` share; "
                              "drop params.epsilon")
        values = {p.name: sum(ctx.domain.size(a) for a in p.attributes) for p in ctx.partition}
        worst = max(values, key=values.get)
        size = self.config.t * values[worst] * 2
        if size > RELEASE_MAX_BYTES:
            raise ConfigError(f"dpfm: party {worst!r}'s sketches would take {size / 2**30:.1f} GB (t={self.config.t} "
                              f"× its {values[worst]} values × 2 B), over the {RELEASE_MAX_BYTES / 2**30:.0f} GB a release holds: lower dpfm t or bin the "
                              "attributes")
        self._released = None
        self._answer_terms = {}
        self._release_domains = {p.name: ctx.domain.project(p.attributes) for p in ctx.partition}
        return self._plan_rho(ctx, rho)

    def release(self, views: Mapping[str, Dataset], ledger: PrivacyLedger,
                rngs: Mapping[str, np.random.Generator]) -> None:
        """Each party sketches its own columns (`release_at`: its planned charge spent first), sealed to the server
        (`take_release`). The FM keys are agreed among the parties, each drawing from the OS CSPRNG under secure
        noise (its own seeded stream only for reproducible simulation, as on its own machine); the server never
        holds them."""
        if self.params is None:
            raise DataError("dpfm: release_cost() must plan the release before it runs")
        if self._released is not None:
            raise DataError("dpfm: the sketches are released once per run")
        names = list(self._attributes)
        keys = agree_keys(names, {p: rngs[p] for p in names} if self.seeded_keys(ledger.noise) else None,
                          self.key_context)
        self.take_release([self.release_at(p, views[p].project(self._attributes[p]), ledger, rngs[p], keys[p])
                           for p in names])

    # -- the release's party/server split (core ReleasesAtParties: each party on its own machine) -----------------
    def release_charges(self, party: str) -> list[Charge]:
        """`party`'s sketches charge, then n̂'s at the counting party: the order `release_at` spends them."""
        if self.params is None or party not in self._charges:
            raise DataError(f"dpfm: no planned release for party {party!r}")
        return [self._charges[party], *([self._count_charge] if party == self.params.count_party else [])]

    def agrees_keys(self) -> bool:
        return True

    def seeded_keys(self, noise: str) -> bool:
        return noise != "secure" and self.config.reproducible_keys

    def set_key_context(self, context: bytes) -> None:
        self.key_context = bytes(context)

    def release_at(self, party: str, view: Dataset, ledger: PrivacyLedger, rng: np.random.Generator,
                   key: KeyParty | None = None) -> DPFMMessage:
        """`party`'s sketches of its columns with the FM key of its `key` (agreed among the parties), its charges
        spent on `ledger` first (`encode`)."""
        if self.params is None:
            raise DataError("dpfm: release_cost() must plan the release before it runs")
        if not isinstance(key, KeyParty) or key.name != party:
            raise DataError(f"dpfm: party {party!r}'s sketches need its key of the agreement among the parties")
        self._keys = {**(self._keys or {}), party: key}
        return self.encode(party, view, ledger, rng)

    def take_release(self, messages: Sequence[Message]) -> None:
        """Every party's sketches, each checked against the plan before any is read: one message per planned party,
        its planned attributes and sizes, the planned t, γ, ε', k_p and b, n̂ from the counting party only."""
        if self.params is None:
            raise DataError("dpfm: release_cost() must plan the release before it runs")
        if self._released is not None:
            raise MessageError("dpfm: the sketches were released already; a second release is refused")
        by_party = planned_shares(messages, DPFMMessage, "dpfm", "sketches", self._release_domains)
        p = self.params
        for name, m in by_party.items():
            if (m.t, m.k_p, m.floor) != (p.t, p.k_p, p.floor) or not (
                    math.isclose(m.gamma, p.gamma, rel_tol=1e-12) and math.isclose(m.eps_prime, p.eps_prime,
                                                                                     rel_tol=1e-12)):
                raise MessageError(f"dpfm: {name!r} released sketches with t={m.t}, γ={m.gamma}, ε'={m.eps_prime:.6g}, "
                                   f"the plan says t={p.t}, γ={p.gamma}, ε'={p.eps_prime:.6g}; refused")
            if (m.n_hat is not None) != (name == p.count_party):
                raise MessageError(f"dpfm: the noisy count n̂ comes from {p.count_party!r} alone, not "
                                   f"{'also ' if m.n_hat is not None else 'without '}{name!r}; refused")
        self._released = [by_party[name] for name in self._attributes]

    def released_count(self) -> tuple[float, float]:
        """(n̂, Var[n̂]) of the release (core CountsInRelease): the Gaussian count its planned charge paid."""
        if self._released is None:
            raise DataError("dpfm: nothing released yet")
        return _noisy_count(self._released)

    def answer_released(self, queries: Sequence[tuple[tuple[str, ...], tuple[str, ...]]]
                        ) -> list[tuple[tuple[str, ...], np.ndarray, np.ndarray]]:
        """Each two-party marginal from the sealed sketches (Alg. 4 with this encoder's estimator, no
        post-processing: the engine wants the unbiased estimate) and the estimator's per-cell variance (the delta
        method over the repetitions: read off the sketches, no true count needed)."""
        if self._released is None:
            raise DataError("dpfm: nothing released yet")
        out = []
        for left, right in queries:
            terms: dict = {}
            dom, est, var, _ = self._raw_estimate(self._released, tuple(left) + tuple(right), terms)
            var = np.broadcast_to(var, dom.shape).astype(float)
            if terms:
                self._answer_terms[dom.attributes] = (var, terms)
            out.append((dom.attributes, np.asarray(est, float), var))
        return out

    def consistent_variance(self, query: tuple[tuple[str, ...], tuple[str, ...]], adjusted: Sequence[str]
                            ) -> np.ndarray | None:
        """(core ReportsConsistentVariance) The per-cell variance of the answer to `query` (axes as
        `answer_released` gives them) once its mean and the main effects of `adjusted` are removed: the delta
        method over the repetitions with the projection inside (`_kept_variance`), covariances between cells
        included. None for the "complement" estimator (no such terms)."""
        if self._released is None:
            raise DataError("dpfm: nothing released yet")
        left, right = query
        attrs_ = tuple(left) + tuple(right)
        by_attr = owners(self._released, DPFMMessage, "dpfm")
        dom = query_domain(by_attr, attrs_, "dpfm")
        if dom.attributes not in self._answer_terms:
            self.answer_released([query])
        if dom.attributes not in self._answer_terms:
            return None
        var, terms = self._answer_terms[dom.attributes]
        p = self.params
        axes = [dom.attributes.index(a) for a in adjusted]
        return _kept_variance([by_attr[a].sketches[a] for a in dom.attributes], p.t, p.gamma, p.floor, terms, var,
                              axes)


def sketch_maxima(key: bytes, view: Dataset, ids: np.ndarray, t: int, gamma: float, rep_block: int,
                  block_mb: float = 16.0, floor: int | None = None) -> dict[str, np.ndarray]:
    """max_{x: A_j(x)=v} H_ξh(id_x) for every repetition h, attribute and value (EMPTY if no record):
    the data-dependent part of the sketches, mergeable across record chunks by element-wise max.
    A plain function of picklable arguments, so Dask workers can run it on their chunk.

    `floor` (the sketches' b): maxima below it are returned as EMPTY. Alg. 1 line 4 publishes
    max(raw, phantoms, b), so a raw maximum below b never shows: the finished sketches are the same bit for
    bit, and so is the merge across chunks (max commutes with the clipping). With γ = 1 and b >= SPARSE_FLOOR
    only the records' values >= b are looked for (probability 2^-b each, `_sparse_maxima`), which skips
    the group reductions; otherwise (and with floor None: the exact raw maxima) the dense kernel below.

    Dense kernel: blocks of rows × `rep_block` repetitions, record-major (each record's repetitions contiguous), so
    the group max per attribute gathers whole rows and reduces contiguous runs of them; the rows per
    block keep the block's buffers (`block_bytes(γ)` per repetition·row) within `block_mb` MB."""
    ids = np.asarray(ids)
    if ids.shape != (view.n,) or ids.dtype.kind not in "iu" or (ids.size and ids.min() < 0):
        raise DataError(f"dpfm: need {view.n} non-negative integer record ids, got shape {ids.shape} {ids.dtype}")
    out = {a: np.full((t, view.domain.size(a)), EMPTY, dtype=np.int16) for a in view.attributes}
    if view.n == 0:
        return out
    if floor is not None and gamma == 1.0 and floor >= SPARSE_FLOOR:
        return _sparse_maxima(key, view, ids, t, int(floor), block_mb, out)
    per = FM_PER_BLOCK if gamma == 1.0 else 2  # repetitions per AES block; a block of repetitions starts on a block's first word
    reps = min(-(-rep_block // per) * per, -(-t // per) * per)
    rows = int(max(1, min(view.n, block_mb * 2**20 // (block_bytes(gamma) * reps))))
    stream = FMRecordStream(key, gamma, rows, reps)
    gathered = np.empty(rows * reps, dtype=np.uint16 if gamma == 1.0 else np.int16)
    # γ = 1: group min of the 16-bit words (see FMRecordStream); ufunc.reduce directly (np.min's wrapper costs
    # ~1 µs a call, and there is a call per cell per block)
    reduce = np.minimum.reduce if gamma == 1.0 else np.maximum.reduce
    combine = np.minimum if gamma == 1.0 else np.maximum
    passes = _passes(view.domain, rows)
    for r0 in range(0, view.n, rows):
        # the block's records are hashed in the first pass's order, so that pass reduces the PRF output
        # as it comes (no gather); the other passes gather rows by their own order
        first = _joint_code(view, passes[0], r0, rows)
        perm = np.argsort(first, kind="stable")
        stream.set_ids(ids[r0:r0 + rows][perm])
        plans = [_pass_plan(view, attrs_, r0, rows, perm, sorted_first=(k == 0)) for k, attrs_ in enumerate(passes)]
        for h0 in range(0, t, reps):
            nr = min(reps, t - h0)
            values, words = stream.values(h0, nr)
            rare = None
            for order, bounds, per_attr in plans:
                if order is None:  # already in this pass's order
                    g = values
                else:
                    g = np.take(values, order, axis=0, out=gathered[: values.size].reshape(values.shape))
                red = np.empty((len(bounds), nr), dtype=values.dtype)  # one row per present (joint) cell
                for j, (s, e) in enumerate(bounds):
                    reduce(g[s:e], axis=0, out=red[j])  # contiguous rows: a streamed reduction
                if gamma == 1.0 and rare is None:  # a record whose top 16 bits are 0 (prob. 2^-16): exact value
                    hit = np.flatnonzero((red == 0).any(axis=0))  # the repetitions with such a record
                    i, k = np.nonzero(values[:, hit] == 0)
                    rare = (i, hit[k], stream.exact(words, i, hit[k]))
                for a, (cell_order, seg, present, group_of) in per_attr.items():
                    red_a = combine.reduceat(red[cell_order], seg, axis=0)  # joint cells onto a's values
                    if gamma == 1.0:
                        red_a = LZ16[red_a]  # the value of each group's smallest word
                        if rare[0].size:
                            np.maximum.at(red_a, (group_of[rare[0]], rare[1]), rare[2])
                    blk = out[a][h0:h0 + nr]
                    blk[:, present] = np.maximum(blk[:, present], red_a.T)
            progress.step("DPFM repetitions", h0 + nr, t)
    if floor is not None:
        for a in out:
            out[a][out[a] < floor] = EMPTY
    return out


# the sparse kernel runs where at most 2^-SPARSE_FLOOR of the values reach the floor (Adult at the defaults: b = 12)
SPARSE_FLOOR = 6
SPARSE_REPS = 512      # repetitions per AES call of the sparse kernel
SPARSE_BLOCK_MB = 1.0  # its AES buffers (32 bytes per 8 repetitions·row, input and output): about the L2 cache


def _sparse_maxima(key: bytes, view: Dataset, ids: np.ndarray, t: int, floor: int, block_mb: float,
                   out: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """γ = 1, `sketch_maxima` with a floor b: the maxima >= b, EMPTY elsewhere. The value of a 16-bit word w
    (`FMRecordStream`) is >= b exactly when w < 2^(16-b) (b <= 16; for b > 16 only w = 0 can reach it and
    the extension decides); only those words (a 2^-min(b, 16) share) are converted (`geometric_from_prefix`)
    and scattered into the sketches by a maximum per (repetition, value). Each row block's hits are
    scattered before the next block, so memory stays at the AES buffers plus about rows × t × 2^-b hits."""
    n = view.n
    per = FM_PER_BLOCK
    reps = min(-(-SPARSE_REPS // per) * per, -(-t // per) * per)
    rows = int(max(1, min(n, min(block_mb, SPARSE_BLOCK_MB) * 2**20 // (4 * reps))))
    thr = np.uint16(1 << (16 - min(floor, 16)))  # clz16(w) >= min(b, 16)
    stream = FMRecordStream(key, 1.0, rows, reps)
    below = np.empty(rows * reps, dtype=bool)
    cols = {a: view.column(a) for a in view.attributes}
    for r0 in range(0, n, rows):
        block_ids = ids[r0:r0 + rows]
        stream.set_ids(block_ids)
        found = []   # per AES call: (flat positions of the hits, their words, first repetition, row width)
        for h0 in range(0, t, reps):
            w = stream.words16(h0, min(reps, t - h0)).reshape(-1)
            hit = np.less(w, thr, out=below[:w.size])   # (w.size: a multiple of 8, whole AES blocks)
            k = _hits(hit)
            if k.size:
                found.append((k, w[k], h0, per * -(-min(reps, t - h0) // per)))
        if found:   # converted once per row block (few numpy calls per AES call: they cost as much as its AES)
            counts = [k.size for k, _, _, _ in found]   # each call's width and first repetition, one repeat each
            i, r = np.divmod(np.concatenate([k for k, _, _, _ in found]),
                             np.repeat(np.array([width for _, _, _, width in found]), counts))
            h = r + np.repeat(np.array([h0 for _, _, h0, _ in found]), counts)
            keep = h < t   # the last block's padding words are no repetition
            i, h = i[keep], h[keep]
            g = geometric_from_prefix(key, np.concatenate([v for _, v, _, _ in found])[keep], h,
                                      block_ids[i]).astype(np.int16)
            if floor > 16:   # w = 0: the extension decides
                i, h, g = i[g >= floor], h[g >= floor], g[g >= floor]
            rows_i = i + r0
            for a, col in cols.items():   # on the flat (contiguous) sketch: ufunc.at's fast 1-d path, ~5x a 2-d index
                np.maximum.at(out[a].reshape(-1), h * out[a].shape[1] + col[rows_i], g)
        progress.step("DPFM repetitions", min(r0 + rows, n) * t, n * t)
    return out


def _hits(mask: np.ndarray) -> np.ndarray:
    """np.flatnonzero(mask) for a rare-True mask whose size is a multiple of 8: the 8-byte chunks holding a
    True first (an eighth of the entries to scan), then the entries inside them (1.6x faster than flatnonzero)."""
    chunks = (mask.view(np.uint64) != 0).nonzero()[0]   # flatnonzero without its Python wrapper (4,000 calls a run)
    j, o = np.nonzero(mask.reshape(-1, 8)[chunks])
    return chunks[j] * 8 + o


# attributes whose joint domain has at most this many cells share one gather and group reduction (per
# block of rows, at least PAIR_MIN_ROWS rows per cell on average): each attribute's maxima are then read
# off the joint cells' table, which is small (two attributes, or more when they are small: 2 × 2 × 8)
PAIR_MAX_CELLS = 64
PAIR_MIN_ROWS = 32


def _passes(domain: Domain, rows: int) -> list[tuple[str, ...]]:
    """The party's attributes in passes sharing a joint table of at most min(PAIR_MAX_CELLS, rows /
    PAIR_MIN_ROWS) cells: the smallest attribute left, then the largest that still fits, repeatedly."""
    cap = min(PAIR_MAX_CELLS, rows // PAIR_MIN_ROWS)
    left = sorted(domain.attributes, key=domain.size)
    out: list[tuple[str, ...]] = []
    while left:
        group = [left.pop(0)]
        cells = domain.size(group[0])
        while True:
            fits = [b for b in left if cells * domain.size(b) <= cap]
            if not fits:
                break
            left.remove(fits[-1])
            group.append(fits[-1])
            cells *= domain.size(fits[-1])
        out.append(tuple(group))
    return out


def _joint_code(view: Dataset, attrs_: tuple[str, ...], r0: int, rows: int) -> np.ndarray:
    """The joint code of attributes `attrs_` (mixed radix) for rows r0..r0+rows-1."""
    joint = view.column(attrs_[0])[r0:r0 + rows].astype(np.int64)
    for a in attrs_[1:]:
        joint = joint * view.domain.size(a) + view.column(a)[r0:r0 + rows]
    return joint


def _pass_plan(view: Dataset, attrs_: tuple[str, ...], r0: int, rows: int, perm: np.ndarray,
               sorted_first: bool = False) -> tuple:
    """For one pass over rows r0..r0+rows-1 taken in the order `perm`: the records' order by joint code
    (None when `perm` already sorts them: the first pass), the (start, end) row range of each present
    joint cell, and per attribute how the joint cells reduce onto its values (cell order, segment starts,
    present values, each record's value index)."""
    cols = [view.column(a)[r0:r0 + rows][perm] for a in attrs_]
    sizes = [view.domain.size(a) for a in attrs_]
    joint = cols[0].astype(np.int64)
    for c, u in zip(cols[1:], sizes[1:]):
        joint = joint * u + c
    order, starts, present = grouping(joint)
    if sorted_first:
        order = None  # `grouping` is a stable sort: on sorted codes it is the identity
    bounds = list(zip(starts.tolist(), starts[1:].tolist() + [joint.size]))
    per_attr = {}
    for k, a in enumerate(attrs_):
        comp = (present // math.prod(sizes[k + 1:])) % sizes[k]  # attribute a's value of each joint cell
        cell_order = np.argsort(comp, kind="stable")
        sc = comp[cell_order]
        seg = np.flatnonzero(np.r_[True, sc[1:] != sc[:-1]])
        values_a = sc[seg]
        per_attr[a] = (cell_order, seg, values_a, np.searchsorted(values_a, cols[k]))
    return order, bounds, per_attr


def _max_merge(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: np.maximum(a[k], b[k]) for k in a}


def _noisy_count(messages: Sequence[DPFMMessage]) -> tuple[float, float]:
    counts = {m.party: (m.n_hat, m.n_hat_variance) for m in messages if m.n_hat is not None}
    if not counts:
        raise MessageError("dpfm: no message carries the noisy record count n̂ (the counting party's message is missing)")
    values = set(counts.values())
    if len(values) > 1:
        raise MessageError(f"dpfm: parties report different noisy counts n̂: {counts}")
    return values.pop()


def _inclusion_exclusion(sketches: Sequence[np.ndarray], t: int, gamma: float, floor: int,
                         k_p: int, codes: SketchCodes | None = None,
                         terms: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """|∩_i A_i| for every cell of the l sketches' joint table by inclusion–exclusion over the unions of the
    cell's own value sets (module docstring), and its variance; t × u_i sketches. The terms share
    repetitions and are strongly correlated (the sum of their variances overstates the estimate's about 4x),
    so the variance is the delta method's over the repetitions themselves: the estimate is Σ_S ± g⁻¹(m_S),
    m_S the mean of q^α over repetitions, so Var ≈ Var_h[Σ_S ± q^{α_h^S} / g'(K̂_S)] / t. `terms` (a dict), where
    given, receives each subset's mean and slope ("means", "slope": broadcastable to the joint shape), which
    `_kept_variance` reads."""
    l = len(sketches)
    shape = tuple(s.shape[1] for s in sketches)
    q = 1.0 / (1.0 + gamma)
    if l == 2:
        codes = SketchCodes() if codes is None else codes
        levels = [codes.levels(s, floor) for s in sketches]
        if shape[0] * levels[0] * shape[1] * levels[1] <= PAIR_HISTOGRAM_BINS:
            return _pair_inclusion_exclusion(sketches, t, gamma, floor, levels, codes, terms)
    qpow = q ** np.arange(np.iinfo(np.int16).max + 1, dtype=float)
    # q^{max(α, b)} of every sketch entry, once (t × u_i, small): q < 1, so q^{max(α, b)} of a union is the
    # minimum of its members' (no table lookup on the joint-sized arrays)
    qs = [qpow[np.maximum(s, max(floor, 0))] for s in sketches]
    subsets = [sub for size in range(1, l + 1) for sub in itertools.combinations(range(l), size)]
    # repetitions per step: the step's tables stay in the cache (~64k cells, 512 KB); the unions are
    # recomputed in the variance pass (a minimum of small broadcast tables is cheaper than keeping them)
    block = max(1, min(t, (1 << 16) // max(math.prod(shape), 1)))

    def q_alpha(subset: tuple[int, ...], h0: int) -> np.ndarray:   # q^{max(α, b)} of the union, per repetition
        union = None
        for i in subset:
            ci = qs[i][h0:h0 + block].reshape([-1] + [shape[j] if j == i else 1 for j in range(l)])
            union = ci if union is None else np.minimum(union, ci)
        return union

    means = {sub: sum(q_alpha(sub, h0).sum(axis=0) for h0 in range(0, t, block)) / t for sub in subsets}
    est = np.zeros(shape)
    slope = {}
    for sub in subsets:
        k_hat, _ = cardinality(means[sub], t, gamma, floor)
        k_up, _ = cardinality(means[sub] * (1 + 1e-4), t, gamma, floor)   # dK/dm = 1/g'(K), numerically
        sign = 1.0 if len(sub) % 2 else -1.0
        est = est + sign * k_hat
        slope[sub] = sign * (k_up - k_hat) / (means[sub] * 1e-4)
    if terms is not None:
        terms.update(means=means, slope=slope)
    total, total2 = np.zeros(shape), np.zeros(shape)
    full = subsets[-1]   # the union of all l sets: its table has the joint shape, into which the others add
    for h0 in range(0, t, block):
        y = q_alpha(full, h0) if l > 1 else qs[0][h0:h0 + block].copy()   # (one set: a view of qs)
        y = np.multiply(np.subtract(y, means[full], out=y), slope[full], out=y)
        for sub in subsets[:-1]:
            y += slope[sub] * (q_alpha(sub, h0) - means[sub])
        total += y.sum(axis=0)
        total2 += np.einsum("i...,i...->...", y, y)
    var = np.maximum(total2 / t - (total / t) ** 2, 0.0) / t
    if l == 1:   # the phantoms of the unions cancel for l >= 2; a single set's sketch keeps its k_p
        est = est - k_p
    return est, var


# a pair's joint histogram of sketch values (u_1 × levels_1 × u_2 × levels_2 counts, 8 bytes each) up to this size;
# larger pairs (many values, no binning) take the per-repetition path of `_inclusion_exclusion`
PAIR_HISTOGRAM_BINS = 1 << 20
PAIR_HISTOGRAM_STEP = 1 << 16   # (repetition, cell) codes per bincount (cache-sized)


class SketchCodes:
    """Per sketch (t × u, int16), what the pair estimator reads of it: its number of levels at and above the floor b
    and the codes v·levels + max(α[h, v] − b, 0) (intp, t × u). A sketch is in every pair with the other party's
    attributes (the server estimates all of them), so both are made once per sketch and kept while it lives
    (looked up by identity; an entry is dropped with its sketch)."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[weakref.ref, int, int, np.ndarray | None]] = {}

    def _entry(self, sketch: np.ndarray, floor: int) -> tuple[weakref.ref, int, int, np.ndarray | None]:
        key = id(sketch)
        hit = self._by_id.get(key)
        if hit is None or hit[0]() is not sketch or hit[1] != floor:
            levels = int(np.max(sketch, initial=floor)) - max(floor, 0) + 1
            hit = self._by_id[key] = (weakref.ref(sketch, lambda _, k=key, d=self._by_id: d.pop(k, None)),
                                      floor, levels, None)
        return hit

    def levels(self, sketch: np.ndarray, floor: int) -> int:
        return self._entry(sketch, floor)[2]

    def codes(self, sketch: np.ndarray, floor: int) -> np.ndarray:
        ref, _, levels, codes = self._entry(sketch, floor)
        if codes is None:
            b = max(floor, 0)
            codes = np.maximum(sketch, b).astype(np.intp)
            codes -= b
            codes += np.arange(sketch.shape[1], dtype=np.intp) * levels
            self._by_id[id(sketch)] = (ref, floor, levels, codes)
        return codes


def _pair_inclusion_exclusion(sketches: Sequence[np.ndarray], t: int, gamma: float, floor: int,
                              levels: Sequence[int], codes: SketchCodes | None = None,
                              terms: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """`_inclusion_exclusion` for a pair, from the joint histogram of the two sketch values over the repetitions:
    N[v, a, w, c] = #{h: max(α_1[h, v], b) = b + a, max(α_2[h, w], b) = b + c}. The three unions' q^α and
    the delta-method term y_h of cell (v, w) are functions of (a, c) alone, so every mean over repetitions
    is a sum over the histogram: the same estimate and variance up to rounding (summation order), with one
    counting pass over (repetition × cell) instead of a dozen floating-point passes."""
    q = 1.0 / (1.0 + gamma)
    b = max(floor, 0)
    (u1, u2), (l1, l2) = (s.shape[1] for s in sketches), levels
    codes = SketchCodes() if codes is None else codes
    a, c = codes.codes(sketches[0], floor), codes.codes(sketches[1], floor)   # v·l1 + a, w·l2 + c
    counts = np.zeros(u1 * l1 * u2 * l2, dtype=np.int64)
    step = max(1, PAIR_HISTOGRAM_STEP // (u1 * u2))
    # intp codes: bincount takes them as they are (int32 ones it would copy to intp first)
    buf = np.empty(min(step, t) * u1 * u2, dtype=np.intp)
    scale = np.intp(u2 * l2)
    for h0 in range(0, t, step):
        m = min(step, t - h0)
        cell = buf[:m * u1 * u2].reshape(m, u1, u2)
        np.multiply(a[h0:h0 + m, :, None], scale, out=cell)   # (v·l1 + a)·u2·l2, broadcast over w
        cell += c[h0:h0 + m, None, :]
        counts += np.bincount(buf[:m * u1 * u2], minlength=counts.size)
    n = counts.reshape(u1, l1, u2, l2).astype(float)
    qa, qc = q ** (b + np.arange(l1, dtype=float)), q ** (b + np.arange(l2, dtype=float))
    qm = np.minimum(qa[:, None], qc[None, :])                         # q^{max} of the union, per (a, c)
    m1 = (n.sum(axis=3) * qa[None, :, None]).sum(axis=1) / t           # (u1, u2): mean q^α_1 (the same for every w)
    m2 = (n.sum(axis=1) * qc[None, None, :]).sum(axis=2) / t           # (u1, u2): mean q^α_2 (the same for every v)
    m12 = np.einsum("vawc,ac->vw", n, qm) / t
    means = {(0,): m1[:, :1], (1,): m2[:1, :], (0, 1): m12}
    est = np.zeros((u1, u2))
    slope = {}
    for sub, m in means.items():
        k_hat, _ = cardinality(m, t, gamma, floor)
        k_up, _ = cardinality(m * (1 + 1e-4), t, gamma, floor)   # dK/dm = 1/g'(K), numerically (as the general path)
        sign = 1.0 if len(sub) % 2 else -1.0
        est = est + sign * k_hat
        slope[sub] = sign * (k_up - k_hat) / (m * 1e-4)
    if terms is not None:
        terms.update(means=means, slope=slope)
    # y(v, w, a, c) = Σ_S slope_S (q_S − m_S): its mean and mean square under the histogram
    y = (slope[(0, 1)][:, None, :, None] * (qm[None, :, None, :] - m12[:, None, :, None])
         + (slope[(0,)] * 1.0)[:, None, :, None] * (qa[None, :, None, None] - m1[:, :1, None, None])
         + (slope[(1,)] * 1.0)[:, None, :, None] * (qc[None, None, None, :] - m2[:1, None, :, None]))
    total = np.einsum("vawc,vawc->vw", n, y)
    total2 = np.einsum("vawc,vawc->vw", n, y * y)
    var = np.maximum(total2 / t - (total / t) ** 2, 0.0) / t
    return est, var


# repetitions × cells × unions read to measure the share of a consistent answer's variance (`_kept_variance`)
KEPT_VARIANCE_WORK = 1 << 23
KEPT_VARIANCE_MIN_REPS = 512


def _kept_variance(sketches: Sequence[np.ndarray], t: int, gamma: float, floor: int, terms: dict,
                   var: np.ndarray, adjusted: Sequence[int]) -> np.ndarray:
    """The delta-method variance of `_inclusion_exclusion`'s estimate after the vertical oracle's consistency
    projection (core/anova.py: the mean and the main effects of the `adjusted` axes removed). The estimate's
    influence per repetition y_h = Σ_S slope_S (q^{α_h^S} − m_S) is a table; its projection P y_h gives the
    projected estimate's variance Var_h[P y_h] / t, covariances between cells included. Inclusion–exclusion puts
    much of the error in terms of one attribute's value (K̂ of a single value set: a whole row or column), which the
    projection removes, so far less is left than the independent-cells share 1 − (1 + Σ(u − 1))/cells says.
    Read over the first R repetitions (all t where R · cells · terms <= KEPT_VARIANCE_WORK, at least
    KEPT_VARIANCE_MIN_REPS; terms: the 2^l − 1 unions) as the share Var_R[P y]/Var_R[y] of the full variance
    `var`, so a subset only estimates a ratio (relative error about √(2/R))."""
    l = len(sketches)
    shape = tuple(s.shape[1] for s in sketches)
    cells = math.prod(shape)
    reps = int(min(t, max(KEPT_VARIANCE_MIN_REPS, KEPT_VARIANCE_WORK // max(cells * len(terms["means"]), 1))))
    q = 1.0 / (1.0 + gamma)
    qpow = q ** np.arange(np.iinfo(np.int16).max + 1, dtype=float)
    qs = [qpow[np.maximum(s[:reps], max(floor, 0))] for s in sketches]
    means, slope = terms["means"], terms["slope"]
    block = max(1, min(reps, (1 << 16) // max(cells, 1)))
    sums = {k: np.zeros(shape) for k in ("y", "y2", "p", "p2")}
    for h0 in range(0, reps, block):
        y = np.zeros((min(block, reps - h0),) + shape)
        for sub in means:
            union = None
            for i in sub:
                ci = qs[i][h0:h0 + block].reshape([-1] + [shape[j] if j == i else 1 for j in range(l)])
                union = ci if union is None else np.minimum(union, ci)
            y += slope[sub] * (union - means[sub])
        py = remove_main_effects(y, adjusted, lead=1)
        sums["y"] += y.sum(axis=0)
        sums["y2"] += np.einsum("i...,i...->...", y, y)
        sums["p"] += py.sum(axis=0)
        sums["p2"] += np.einsum("i...,i...->...", py, py)
    var_y = np.maximum(sums["y2"] / reps - (sums["y"] / reps) ** 2, 0.0)
    var_p = np.maximum(sums["p2"] / reps - (sums["p"] / reps) ** 2, 0.0)
    share = np.where(var_y > 0, var_p / np.where(var_y > 0, var_y, 1.0), 1.0)
    return np.broadcast_to(var, shape) * share


def _complement(sketch: np.ndarray) -> np.ndarray:
    """C[h, v] = max_{w ≠ v} S[h, w]: the sketch of the records whose value is not v (EMPTY if u = 1)."""
    t, u = sketch.shape
    if u == 1:
        return np.full((t, 1), EMPTY, dtype=np.int16)
    arg = sketch.argmax(axis=1)
    top1 = sketch[np.arange(t), arg]
    masked = sketch.copy()
    masked[np.arange(t), arg] = np.iinfo(np.int16).min
    top2 = masked.max(axis=1)
    return np.where(np.arange(u)[None, :] == arg[:, None], top2[:, None], top1[:, None]).astype(np.int16)
