"""`vertimrf`: DP vertical data synthesis across m parties (seed 003, Algorithm 2, §§3–6).

Party side (own columns only → Messages): LocMRF (PrivMRF on the party's attributes), LocEnc (binning, DP
value distributions, the encoder's sketches or perturbed columns). Server side (messages only): GraphCom,
InitMRF, OptMRF, sampling. The budget split, the deviations from the paper, the defaults and the measurements
behind them are in docs/synthesizers/vertimrf.md.
"""
from __future__ import annotations

import itertools
import math
import time
from functools import partial
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

import attrs
import numpy as np

from vertisynth.core.capabilities import (BuffersBlocks, ChunksOnCluster, CostEstimate, CountsPhantoms,
                                          EncodesInChunks, MeasuresJointly, ReleasesNoisyCount, SharedKeyEncoder)
from vertisynth.core.cluster import dask_session
from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.errors import ConfigError, DataError, MessageError
from vertisynth.core.factor import Factor
from vertisynth.core.interfaces import PlanContext, Synthesizer, VerticalData
from vertisynth.core.messages import Message
from vertisynth.core.privacy import Charge, PrivacyLedger
from vertisynth.core.registry import default_registry
from vertisynth.core.structuring import CONVERTER, structure

from vertisynth.pgm import GraphicalModel, Measurement, estimate
from vertisynth.pgm.estimation import bin_query
from vertisynth.pgm.graph import build_junction_tree, min_fill_cliques
from vertisynth.vertical import PartyOracle
from ..privmrf import LocalModel, PrivMRFConfig, PrivMRFSynthesizer
from .joint import JointFit
from .streaming import ChunkedCounts, Chunks, mapped, party_phase, start_early_map, view_chunks
from .dimension import (ValueDistributions, bin_dataset, bin_map, binned_domain, hisrec, mass_bin_map,
                        measure_value_distributions,
                        planned_charges as value_charges, uniform_distributions)


def dependence_evidence(counts: np.ndarray, variance: np.ndarray) -> dict[str, float]:
    """How sure an estimated 2-way table shows dependence, in units of its own measurement error.

    r_score: the paper's R-score (half the L1 distance from independence, in counts, on the clipped table).
    z_chi: the chi-square statistic Σ (T − E)² / (v + E), E the independence table from T's own margins and
      v + E each cell's variance (the encoder's plus sampling), standardised against its null
      ((D − df) / sqrt(2 df)); per cell, so a many-valued pair is not penalised for its size.
    z_trend: the linear-trend statistic Σ x̃ ỹ T (centred codes) over its null std (encoder + sampling): one
      degree of freedom for ordinal dependence (age × claims), valid (if less powerful) for any coding.
    z: the larger of z_chi and |z_trend|.
    dispersion: D / df, about 1 under the null when `variance` is the noise of the table's interaction part.
    DPFM's per-cell variance is mostly row and column noise (a cell's estimate shares its sketches with its
    row and column), which the independence table's margins cancel: on Adult and the zoo, pairs without
    dependence show a dispersion of about 0.1. `interaction_scale` calibrates that (see server_step)."""
    t = np.asarray(counts, float)
    v = np.clip(np.asarray(variance, float), 0, None)
    tc = np.clip(t, 0, None)
    total = max(tc.sum(), 1.0)
    r_score = 0.5 * float(np.abs(tc - np.outer(tc.sum(1), tc.sum(0)) / total).sum())
    rows, cols = t.sum(1), t.sum(0)   # the raw table's own margins, so the statistics are centred under the null
    total = rows.sum() if rows.sum() > 0 else total
    expected = np.outer(rows, cols) / total
    df = max((t.shape[0] - 1) * (t.shape[1] - 1), 1)
    d = float(((t - expected) ** 2 / (v + np.maximum(expected, 1.0))).sum())
    x = np.arange(t.shape[0], dtype=float) - rows @ np.arange(t.shape[0]) / total
    y = np.arange(t.shape[1], dtype=float) - cols @ np.arange(t.shape[1]) / total
    x2y2 = np.outer(x**2, y**2)
    trend = float((np.outer(x, y) * t).sum())
    null_var = float((x2y2 * v).sum() + (x2y2 * expected).sum())
    z_chi = (d - df) / math.sqrt(2 * df)
    z_trend = trend / math.sqrt(null_var) if null_var > 0 else 0.0
    return {"r_score": r_score, "z_chi": z_chi, "z_trend": z_trend, "z": max(z_chi, abs(z_trend)),
            "dispersion": d / df}


def interaction_scale(dispersions: Sequence[float], floor: float = 0.02) -> float:
    """The share of the encoder's per-cell variance left in a 2-way table's interaction part, from every cross
    pair's dispersion: their median (most cross pairs are near independence; the dependent ones sit in the upper
    half and can only make the scale conservative), clipped to [floor, 1]."""
    if not dispersions:
        return 1.0
    return float(np.clip(np.median(dispersions), floor, 1.0))


@attrs.frozen
class VertiMRFConfig:
    """The budget split: the local models get `local_fraction` (with use_local), the value distributions
    `value_fraction` (only for binned attributes and recovery other than "query"), the encoder all that is left."""

    # keys that are gone, with what replaced them (a config that still names one is refused in one line)
    removed_keys: ClassVar[dict[str, str]] = {
        "encoder_fraction": "the encoder takes what local_fraction and value_fraction leave (value_fraction only "
                            "with binned attributes and recovery 'hisrec' or 'uniform'); the report's budget_split "
                            "shows the split a run used"}
    encoder: str = "dpfm"
    encoder_params: dict[str, Any] = attrs.field(factory=dict)
    local_params: dict[str, Any] = attrs.field(factory=dict)
    local_fraction: float = 0.4
    value_fraction: float = 0.2
    bins: int | None = 8
    binning: str = "width"
    recovery: str = "query"
    max_clique_cells: float = 1e5
    weighting: str = "variance"
    d_c: float = 50.0
    z: float = 3.0
    test_z: float = 3.0
    consistency: bool = True
    use_local: bool = True
    rounds: int = 3
    per_round: int = 64
    max_std_ratio: float = 5.0
    iters: int = 1500
    sampling: str = "round"
    local_start: bool = True
    round_iters: int | None = 500
    # the server fits (pgm.estimation): a stop once the loss left to gain is estimated below fit_tolerance per
    # measured cell (squared noise stds: the measured marginals are then within √(2 fit_tolerance) noise stds per
    # cell, RMS, of the optimum's); 0: run to `iters`. fit_accelerate: momentum with restarts, "auto" (the default)
    # only where plain descent would be cut off by `iters` far from converged (pgm.estimation; on the zoo, NLTCS and
    # Adult plain descent stopped early scored better at the same loss: docs/speed.md), true always, false never
    fit_accelerate: Any = "auto"   # true, false or "auto"
    fit_tolerance: float = 1e-2
    party_processes: int = 1   # the one-process run: parties stepping at once, a forked process each (same result)

    def fit_atol(self, meas: Sequence[Measurement]) -> float | None:
        """`estimate`'s atol for a fit of these measurements (None: off)."""
        return self.fit_tolerance * sum(m.values.size for m in meas) if self.fit_tolerance > 0 else None

    def fit_momentum(self) -> bool | str:
        """`estimate`'s accelerate ("auto" needs the tolerance's stop: without it, plain descent)."""
        return False if self.fit_accelerate == "auto" and self.fit_tolerance == 0 else self.fit_accelerate

    def __attrs_post_init__(self) -> None:
        if min(self.local_fraction, self.value_fraction) < 0 or self.local_fraction + self.value_fraction >= 1:
            raise ConfigError(f"vertimrf: local_fraction ({self.local_fraction}) and value_fraction "
                              f"({self.value_fraction}) must be >= 0 and leave the encoder a share (sum < 1)")
        if self.use_local and self.local_fraction <= 0:
            raise ConfigError("vertimrf: use_local needs local_fraction > 0")
        if not self.use_local and self.recovery == "query" and self.bins is not None:
            raise ConfigError("vertimrf: recovery 'query' leaves the values inside a bin to the local models; "
                              "with use_local = false set recovery = 'hisrec' (DP within-bin value distributions)")
        if self.bins is not None and self.bins < 2:
            raise ConfigError(f"vertimrf: bins must be >= 2 or omitted, got {self.bins}")
        if self.binning not in ("width", "mass"):
            raise ConfigError(f"vertimrf: binning must be 'width' or 'mass', got {self.binning!r}")
        if self.binning == "mass" and (self.recovery != "query" or not self.use_local):
            raise ConfigError("vertimrf: binning 'mass' takes its edges from the local models' 1-way tables and "
                              "needs recovery = 'query' and use_local = true")
        if self.recovery not in ("hisrec", "uniform", "query"):
            raise ConfigError(f"vertimrf: recovery must be 'hisrec', 'uniform' or 'query', got {self.recovery!r}")
        if self.weighting not in ("paper", "variance"):
            raise ConfigError(f"vertimrf: weighting must be 'paper' or 'variance', got {self.weighting!r}")
        if self.sampling not in ("sample", "round"):
            raise ConfigError(f"vertimrf: sampling must be 'sample' or 'round', got {self.sampling!r}")
        if self.party_processes < 1:
            raise ConfigError(f"vertimrf: party_processes must be >= 1, got {self.party_processes}")
        if self.round_iters is not None and self.round_iters < 1:
            raise ConfigError(f"vertimrf: round_iters must be >= 1 or omitted, got {self.round_iters}")
        if not (isinstance(self.fit_accelerate, bool) or self.fit_accelerate == "auto"):
            raise ConfigError(f"vertimrf: fit_accelerate must be true, false or 'auto', got {self.fit_accelerate!r}")
        if not (isinstance(self.fit_tolerance, (int, float)) and 0 <= self.fit_tolerance < math.inf):
            raise ConfigError(f"vertimrf: fit_tolerance must be a number >= 0 (0: run to iters), got {self.fit_tolerance!r}")
        if self.rounds < 0 or self.per_round < 1 or self.iters < 1 or self.max_clique_cells < 4:
            raise ConfigError("vertimrf: rounds >= 0, per_round >= 1, iters >= 1, max_clique_cells >= 4")


def mass_maps(local: LocalModel, bins: int, attrs_: Sequence[str]) -> dict[str, np.ndarray]:
    """Equal-mass bin maps of `attrs_` from a party's local model (DP): the same on the party and the server."""
    model = local.model()
    return {a: mass_bin_map(model.marginal([a]).values, bins) for a in attrs_}


class VertiMRFSynthesizer(JointFit, Synthesizer):
    _model: Any = None   # set by fit

    def __init__(self, config: VertiMRFConfig | None = None) -> None:
        super().__init__(config or VertiMRFConfig())
        self._timings: dict[str, float] = {}
        self._local_queries: dict[str, list[dict[str, Any]]] = {}   # party -> its local fit's oracle queries

    # -- plan ---------------------------------------------------------------------------------
    def plan(self, ctx: PlanContext) -> list[Charge]:
        c = self.config
        self._domain, self._partition = ctx.domain, ctx.partition
        if len(ctx.partition) < 1:
            raise ConfigError("vertimrf needs at least one party")
        for a, s in zip(ctx.domain.attributes, ctx.domain.shape):
            if s < 2:
                raise ConfigError(f"vertimrf: attribute {a!r} has domain size {s}; every attribute needs >= 2 values")
        delta = ctx.budget.delta
        if delta <= 0:
            raise ConfigError("vertimrf uses zCDP mechanisms: set budget.delta > 0")
        rho = ctx.rho
        self._binned = [a for a in ctx.domain.attributes if c.bins is not None and ctx.domain.size(a) > c.bins]
        # "query" fits the binned estimates as binned linear queries: no value distributions are needed,
        # and their share goes to the encoder (as without binning)
        value_frac = c.value_fraction if self._binned and c.recovery != "query" else 0.0
        local_frac = c.local_fraction if c.use_local else 0.0
        enc_frac = 1.0 - value_frac - local_frac
        self._split = {"local": local_frac, "encoder": enc_frac, "value_distributions": value_frac}
        charges: list[Charge] = []
        # Phase 1: PrivMRF per party, the local share split across parties (their outputs compose)
        self._local: dict[str, PrivMRFSynthesizer] = {}
        if c.use_local:
            # local cliques get a tenth of τ by default, so the global graph has room for cross-party edges (the local
            # fits keep PrivMRF's fixed budgets: local_params fit_tolerance = 1e-2 was no faster measurably on the
            # default job and its tree accuracy fell in 4 of 6 seeds, docs/speed.md)
            lp = structure({"max_clique_cells": max(c.max_clique_cells / 10, 4.0), **c.local_params}, PrivMRFConfig,
                           "vertimrf.local_params")
            for p in ctx.partition:
                syn = PrivMRFSynthesizer(lp)
                charges += syn.plan_for(ctx.domain.project(p.attributes), rho * local_frac / len(ctx.partition), p.name)
                self._local[p.name] = syn
        # Phase 2: value distributions (pure ε per binned attribute, Σ ε²/2 = their ρ) and the encoder
        self._eps_value = math.sqrt(2 * rho * value_frac / len(self._binned)) if value_frac > 0 else 0.0
        self._value_charges: dict[str, Charge] = {}   # attribute -> its planned charge, spent as planned
        for p in ctx.partition:
            mine = [a for a in p.attributes if a in self._binned]
            if value_frac > 0:
                planned = value_charges(p.name, mine, self._eps_value)
                self._value_charges.update(zip(mine, planned))
                charges += planned
        self._low_domain = binned_domain(ctx.domain, c.bins, self._binned) if self._binned else ctx.domain
        spec = default_registry().get("encoder", c.encoder)
        enc_cls = spec.load_config_cls()
        # the encoder's own config class holds its defaults (the DPFM ones measured best: docs/synthesizers/vertimrf.md)
        enc_cfg = structure(dict(c.encoder_params), enc_cls, f"vertimrf.encoder_params of {c.encoder!r}")
        self._encoder = spec.load_factory()(enc_cfg)
        # the encoder plans last, granted exactly what is left after the pipeline's earlier stages and our
        # local and value-distribution charges (counted with group privacy, as the ledger will record them)
        charges += self._encoder.plan(ctx.after(charges, domain=self._low_domain))
        # the report shows the configuration that ran, nested defaults included
        self.config = attrs.evolve(c, encoder_params=CONVERTER.unstructure(enc_cfg) if enc_cfg is not None else {},
                                   local_params=CONVERTER.unstructure(lp) if c.use_local else dict(c.local_params))
        k_p = self._encoder.k_p if isinstance(self._encoder, CountsPhantoms) else None
        if k_p is not None and k_p > 10**6:
            raise ConfigError(
                f"vertimrf: the encoder's budget is too small: every DP FM sketch would carry k_p = {k_p:,} phantom "
                "elements, far more than any table's records, so every estimate would be noise. Raise epsilon or "
                "lower local_fraction, lower the encoder's t, or use weighting/binning that needs fewer sketches")
        return charges

    # -- party side ---------------------------------------------------------------------------
    def party_step(self, party: str, view: Dataset, ledger: PrivacyLedger, rng: np.random.Generator) -> list[Message]:
        """Everything party `party` computes on its own columns; returns the messages it sends. The
        in-memory table is the streamed one cut into slices: one code path (`party_step_chunks`)."""
        return self.party_step_chunks(party, view.domain, view_chunks(view, self.chunk_rows()), ledger, rng)

    def party_steps(self, steps: Callable[[str, PrivacyLedger], list[Message]], ledger: PrivacyLedger) -> list[Message]:
        """Every party's step (`steps(party, ledger)`), at once in `party_processes` forked processes if set, or,
        on a Dask cluster, at once in threads sharing one client (their chunk tasks all queued on the cluster)."""
        return self._party_phase(steps, ledger)

    def _party_phase(self, steps: Callable[[str, PrivacyLedger], list[Message]], ledger: PrivacyLedger) -> list[Message]:
        scheduler = self._scheduler()
        if scheduler is None or self.config.party_processes > 1:
            return party_phase(steps, self._partition.names, ledger, self.config.party_processes)
        with dask_session(scheduler) as client:   # party_step_chunks maps on it
            self._client = client
            try:
                return party_phase(steps, self._partition.names, ledger, threads=True)
            finally:
                self._client = None

    def streams_parties(self) -> bool:
        """Party steps then the server step (StepsInChunks); the `he` encoder measures in rounds instead."""
        return not isinstance(self._encoder, MeasuresJointly)

    def chunk_rows(self) -> int:
        """Rows per chunk of the party phase: the encoder's `chunk_rows` (bounds memory independent of n)."""
        return int((self._encoder.chunk_rows if isinstance(self._encoder, ChunksOnCluster) else None) or 100_000)

    def _scheduler(self) -> Any:
        """The Dask cluster the encoder's chunks map on (its `dask_scheduler`), or None: here."""
        return self._encoder.dask_scheduler if isinstance(self._encoder, ChunksOnCluster) else None

    def memory_estimate(self) -> dict[str, Any]:
        """Peak bytes per party of the streamed party phase and of the server's fit, from the plan alone
        (before any row is read): an estimate, not a bound (docs/scale.md shows it against measured RSS).
        Party: one chunk as text and codes, the encoder's step buffers, the pair counts, the local model.
        Server: its largest clique is capped at max_clique_cells; the estimator keeps a few arrays per clique."""
        rows = self.chunk_rows()
        block_mb = self._encoder.block_mb if isinstance(self._encoder, BuffersBlocks) else 0
        out: dict[str, Any] = {"parties": {}}
        for p in self._partition:
            dom = self._domain.project(p.attributes)
            k = len(dom)
            chunk = rows * k * (64 + 3 * 8)            # pyarrow/pandas text (~64 B a value), codes, bins, ids
            step = int(block_mb * 2**20) or rows * k * 8 * 2   # DPFM step buffers, else GRR columns
            pairs = sum(dom.size(a) * dom.size(b) for a, b in itertools.combinations(dom.attributes, 2)) * 16
            local = 0
            if self.config.use_local:
                local_cells = min(float(dom.size()), float(self._local[p.name].config.max_model_cells))
                local = int(local_cells * 8 * 4)        # model, marginals, gradient, measurements
            out["parties"][p.name] = int(chunk + step + pairs + local + 150 * 2**20)   # + the interpreter and libraries
        cells = min(float(self._domain.size()), float(self.config.max_clique_cells))
        out["server_largest_clique_cells"] = int(cells)
        out["server"] = int(cells * 8 * 6 * max(len(self._domain) - 1, 1) + 150 * 2**20)
        return out

    def party_step_chunks(self, party: str, domain: Domain, chunks: Chunks, ledger: PrivacyLedger,
                          rng: np.random.Generator, scheduler: Any = None) -> list[Message]:
        """`party_step` on a re-startable stream of (global ids, rows) chunks: the local fit and the value
        distributions read marginal counts summed over chunks (counted in this process), binning maps each
        chunk, the encoder's chunk job maps the chunks (on a Dask cluster when `scheduler` is an address or a
        Client; default: the encoder's `dask_scheduler`). Equals the in-memory run bit for bit."""
        if scheduler is None:
            scheduler = getattr(self, "_client", None) or self._scheduler()
        if scheduler is None:
            return self._party_chunks(party, domain, chunks, ledger, rng, None)
        with dask_session(scheduler) as client:   # the encoding map on it
            return self._party_chunks(party, domain, chunks, ledger, rng, client)

    def _party_chunks(self, party: str, domain: Domain, chunks: Chunks, ledger: PrivacyLedger,
                      rng: np.random.Generator, client: Any) -> list[Message]:
        c = self.config
        out: list[Message] = []
        # counted here, not on the cluster: shipping a chunk to a worker costs this process more than the
        # bincounts it would save (docs/scale.md, "Counting passes stay in the party process"); but a file's
        # first pass (read, code, spill, the pair counts) runs on the workers where they see the file
        table = ChunkedCounts(chunks, domain, first_pass=client)
        mine = [a for a in domain.attributes if a in self._binned]
        early = None
        try:
            if c.use_local:
                local = self._local[party]
                early_on = client is not None and not (mine and c.binning == "mass")

                def start() -> Any:   # the cluster encodes the rows as the first pass below spills them (or
                    # once it has: an ID-keyed stream), while the local model is fitted; the job's map, below
                    return start_early_map(self._encoder, party, *self._low(chunks, domain, mine, self._maps_now()),
                                           client, self.chunk_rows()) if early_on else None
                early = start()
                table.prefetch_pairs()   # R-scores and 1-way counts in one pass; later marginals a pass each
                early = early or start()
                # every read of the party's columns is a within-party oracle query, charged as planned
                oracle = PartyOracle(table, ledger, party)
                local.fit_oracle(oracle, rng)
                self._local_queries[party] = oracle.asked
                out.append(local.export(party))
            if mine and self._eps_value > 0:
                out.append(measure_value_distributions(party, table, c.bins, mine, self._value_charges, ledger, rng))
            maps = self._maps_now()
            if mine and c.binning == "mass":   # edges from the local model just sent (DP), as the server will compute
                maps = {**(maps or {}), **mass_maps(out[0], c.bins, mine)}   # this party's, whatever others store
                self._maps = {**getattr(self, "_maps", {}), **maps}
            low, low_domain = self._low(chunks, domain, mine, maps)
            if not isinstance(self._encoder, EncodesInChunks):   # a plugin encoder without a chunk job: one chunk
                parts = [rows.codes for _, rows in low()]
                view = Dataset(np.concatenate(parts) if parts else np.zeros((0, len(low_domain)), np.int64), low_domain)
                out.append(self._encoder.encode(party, view, ledger, rng))
                return out
            job = self._encoder.chunk_job(party, low_domain, ledger, rng)
            out.append(job.run_local(low()) if client is None else
                       job.run_cluster(low, client, self.chunk_rows(), early=early))
            return out
        finally:
            if early is not None:
                early.stop()

    def _maps_now(self) -> dict[str, np.ndarray] | None:
        return getattr(self, "_maps", None)

    def _low(self, chunks: Chunks, domain: Domain, mine: list[str], maps: Any) -> tuple[Chunks, Domain]:
        """The stream binned for the encoder (a picklable map: a worker reading the spilled rows bins them too)."""
        if not mine:
            return chunks, domain
        c = self.config
        return (mapped(chunks, partial(bin_dataset, bins=c.bins, attrs_=mine, maps=maps)),
                binned_domain(domain, c.bins, mine))

    # -- server side --------------------------------------------------------------------------
    def _value_distributions(self, messages: Sequence[Message]) -> dict[str, np.ndarray]:
        """The value distribution inside each bin of a binned attribute: the parties' released ones, or uniform."""
        if self.config.recovery == "uniform" and self._binned:
            return uniform_distributions(self._domain, self.config.bins, self._binned)
        dists: dict[str, np.ndarray] = {}
        for m in messages:
            if isinstance(m, ValueDistributions):
                dists.update(m.distributions)
        return dists

    def _encoded(self, messages: Sequence[Message]) -> list[Message]:
        return [m for m in messages if not isinstance(m, (LocalModel, ValueDistributions))]

    def _cross_estimate(self, enc: Sequence[Message], attrs_: tuple[str, ...],
                        dists: Mapping[str, np.ndarray]) -> tuple[Factor, float]:
        """Encoder estimate on binned attributes, recovered to raw values (HisRec / uniform; "query" keeps
        it binned); and its mean per-cell variance."""
        est = self._encoder.estimate_with_variance(enc, list(attrs_))
        counts = est.counts.transpose(attrs_)
        var = float(np.mean(est.variance.values))
        if self.config.recovery != "query" and any(a in self._binned for a in attrs_):
            counts = hisrec(counts, self._domain, {a: dists[a] for a in attrs_ if a in self._binned}, self.config.bins)
        return counts, var

    def _bins_of(self, attrs_: Sequence[str]) -> dict[str, np.ndarray] | None:
        """For "query": each binned attribute's value -> bin map (the measurement is a binned linear query)."""
        if self.config.recovery != "query":
            return None
        maps = getattr(self, "_maps", {})
        return {a: maps[a] if a in maps else bin_map(self._domain.size(a), self.config.bins)
                for a in attrs_ if a in self._binned} or None

    def server_step(self, messages: Sequence[Message]) -> None:
        """Phases 3-5 from the parties' messages only."""
        if isinstance(self._encoder, MeasuresJointly):
            raise ConfigError(f"vertimrf: encoder {self.config.encoder!r} measures across parties in interactive "
                              "rounds; the separate-process server does not run them yet: use `vertisynth run`")
        c = self.config
        dom = self._domain
        owner = {a: p.name for p in self._partition for a in p.attributes}
        # the partition's order, whatever order they arrived in: the result must not depend on it (the count
        # is read off the first sketch, the graph's edges are taken in the local models' order)
        rank = {p: i for i, p in enumerate(self._partition.names)}
        strangers = sorted({m.party for m in messages} - set(rank))
        if strangers:
            raise MessageError(f"vertimrf: messages from {strangers}, who are not parties of this run {list(rank)}")
        messages = sorted(messages, key=lambda m: rank[m.party])   # stable: a party's own order is kept
        locals_ = {m.party: m for m in messages if isinstance(m, LocalModel)}
        if c.binning == "mass":   # the parties' equal-mass bins, recomputed from their local models
            self._maps = {a: bm for lm in locals_.values()
                          for a, bm in mass_maps(lm, c.bins, [a for a in lm.domain.attributes if a in self._binned]).items()}
        dists = self._value_distributions(messages)
        enc = self._encoded(messages)
        n_hat = float(self._encoder.noisy_count(enc)[0]) if isinstance(self._encoder, ReleasesNoisyCount) else float(enc[0].n)
        n_hat = max(n_hat, 1.0)
        t0 = time.perf_counter()
        # Phase 3: GraphCom
        edges = [tuple(e) for m in locals_.values() for e in m.edges]
        cross = [(a, b) for a, b in itertools.combinations(dom.attributes, 2) if owner[a] != owner[b]]
        tables = {}
        for a, b in cross:
            est = self._encoder.estimate_with_variance(enc, [a, b])
            tables[(a, b)] = (est.counts.transpose((a, b)).values, est.variance.transpose((a, b)).values)
        # the test's null: the encoder's noise in the interaction part, calibrated on all cross pairs at once
        self._kappa = interaction_scale([dependence_evidence(*tables[p])["dispersion"] for p in cross])
        evidence = {p: dependence_evidence(t, self._kappa * v) for p, (t, v) in tables.items()}
        # "paper": every pair, by descending R-score; "variance": the pairs whose dependence test passes (in
        # the paper's R-score order), or, when none does, the best-evidenced pair of every two parties
        passed = [p for p in cross if c.weighting == "paper" or evidence[p]["z"] >= c.test_z]
        self._fallback: list[tuple[str, str]] = []
        if not passed and cross:
            best: dict[frozenset[str], tuple[str, str]] = {}
            for p in sorted(cross, key=lambda p: -evidence[p]["z"]):
                best.setdefault(frozenset((owner[p[0]], owner[p[1]])), p)
            self._fallback = passed = list(best.values())
        self._graph_info: list[dict[str, Any]] = []
        for pair in sorted(passed, key=lambda p: -evidence[p]["r_score"]):
            trial = edges + [pair]
            cl = min_fill_cliques(dom, trial)
            added = max(dom.project(q).size() for q in cl) <= c.max_clique_cells
            if added:
                edges = trial
            self._graph_info.append({"pair": list(pair), **{k: round(v, 3) for k, v in evidence[pair].items()},
                                     "added": added, "fallback": pair in self._fallback})
        self._graph_info += [{"pair": list(p), **{k: round(v, 3) for k, v in evidence[p].items()}, "added": False,
                              "fallback": False, "test_failed": True} for p in cross if p not in passed]
        cliques = min_fill_cliques(dom, edges)
        t1 = time.perf_counter()
        # Phase 4: InitMRF from the local models' marginals
        meas: list[Measurement] = []
        one_way: dict[str, tuple[np.ndarray, float]] = {}
        for party, lm in locals_.items():
            model = lm.model()
            scale = n_hat / max(model.total, 1.0)
            for attrs_, std in zip(lm.marginals, lm.marginal_std):
                vals = model.marginal(attrs_).values * scale
                meas.append(Measurement(tuple(attrs_), vals, std if c.weighting == "variance" else 1.0))
            for a in lm.domain.attributes:
                std_a = min((s for m_, s in zip(lm.marginals, lm.marginal_std) if a in m_), default=1.0)
                one_way[a] = (model.marginal([a]).values * scale, std_a**2)
        if not meas:  # without local models, start from the encoder's 1-way estimates
            for a in dom.attributes:
                counts, var = self._cross_estimate(enc, (a,), dists)
                one_way[a] = (np.clip(counts.values, 0, None), var)
                meas.append(Measurement((a,), counts.values, math.sqrt(var) if c.weighting == "variance" else 1.0,
                                        self._bins_of((a,))))
        # the product start with equal-mass bins lost the cross-party correlation (hospital-insurer: 0.51 -> 0.00,
        # tests/plugins/synthesizers/test_vertimrf_mass_bins.py); not yet understood, so mass binning starts cold
        warm = c.local_start and locals_ and c.binning != "mass"
        start = self._local_start(dom, meas, cliques, locals_, n_hat) if warm else None
        res = estimate(dom, meas, total=n_hat, iters=c.iters, extra_cliques=cliques, max_cells=float("inf"),
                       warm_start=start, atol=c.fit_atol(meas), accelerate=c.fit_momentum())
        t2 = time.perf_counter()
        # Phase 5: OptMRF with cross-party marginals inside the global cliques
        cands = sorted({p for q in cliques for p in itertools.combinations(q, 2) if owner[p[0]] != owner[p[1]]})
        usable = []
        self._candidate_info: list[dict[str, Any]] = []
        for p in cands:
            counts, var = self._cross_estimate(enc, p, dists)
            low_cells = self._low_domain.project(p).size()
            if c.weighting == "paper":
                ok = n_hat / low_cells >= c.d_c
            else:   # the marginal is measured well enough on average, or its pair showed real dependence
                ev = evidence.get(p) or evidence.get(p[::-1]) or {"z": 0.0}
                ok = (n_hat / low_cells >= c.z * math.sqrt(max(var, 1e-12)) or ev["z"] >= c.test_z
                      or p in self._fallback or p[::-1] in self._fallback)
            self._candidate_info.append({"pair": list(p), "mean_cell_count": n_hat / low_cells,
                                         "cell_std": math.sqrt(max(var, 0.0)), "usable": bool(ok)})
            if ok:
                usable.append((p, counts, var))
        std_cap = c.max_std_ratio * float(np.median([m.std for m in meas]))
        chosen: list[tuple[str, ...]] = []
        for rnd in range(c.rounds):
            left = [u for u in usable if u[0] not in chosen]
            if not left:
                break
            errs = [np.abs(self._query(res.model, p) - np.clip(cnt.values, 0, None)).sum() for p, cnt, _ in left]
            for i in np.argsort(errs)[::-1][: c.per_round]:
                p, cnt, var = left[i]
                vals = cnt.values
                if c.consistency:
                    vals = self._consistent(p, vals, var, self._one_way_at(one_way, p), n_hat)
                std = min(math.sqrt(max(var, 1e-12)), std_cap) if c.weighting == "variance" else 1.0
                meas.append(Measurement(p, vals, std, self._bins_of(p)))
                chosen.append(p)
            # a round's model only ranks the next candidates and warm-starts the next fit: the last fit gets `iters`
            last = rnd == c.rounds - 1 or not [u for u in usable if u[0] not in chosen]
            iters = c.iters if last or c.round_iters is None else min(c.round_iters, c.iters)
            res = estimate(dom, meas, total=n_hat, iters=iters, warm_start=res.model, max_cells=float("inf"),
                           step=res.step or None, atol=c.fit_atol(meas), accelerate=c.fit_momentum())
        self._model = res.model
        self._n_hat = n_hat
        self._measurements = meas
        self._chosen = chosen
        self._cliques = cliques
        self._timings.update({"GraphCom (server)": t1 - t0, "InitMRF (server)": t2 - t1,
                              "OptMRF (server)": time.perf_counter() - t2})

    @staticmethod
    def _local_start(dom: Any, meas: Sequence[Measurement], cliques: Sequence[tuple[str, ...]],
                     locals_: Mapping[str, LocalModel], n_hat: float) -> GraphicalModel | None:
        """InitMRF's starting point: the product of the parties' local models (independent across parties)
        as log-potentials on the global junction tree. It already has every local marginal InitMRF fits, so
        the fit starts at its optimum instead of 1500 steps from uniform. None if a local clique does not
        fit in a global one (min-fill on the joint graph may triangulate a party's attributes otherwise)."""
        tree = build_junction_tree(dom, [m.attributes for m in meas] + [tuple(q) for q in cliques], float("inf"))
        theta = [np.zeros(dom.project(q).shape) for q in tree.cliques]
        for lm in locals_.values():
            model = lm.model()
            for q, th in zip(model.tree.cliques, model.theta):
                i = tree.clique_for(q)
                if i is None:
                    return None
                target = tree.cliques[i]
                axes = sorted(range(len(q)), key=lambda k: target.index(q[k]))  # into the global clique's order
                theta[i] += np.transpose(th, axes).reshape([dom.size(a) if a in q else 1 for a in target])
        return GraphicalModel(tree, theta, n_hat)

    def _query(self, model: Any, attrs_: tuple[str, ...]) -> np.ndarray:
        """The model's marginal on `attrs_`, summed into bins where the measurement is binned ("query")."""
        return bin_query(model.marginal(attrs_).values, attrs_, self._bins_of(attrs_))

    def _one_way_at(self, one_way: Mapping[str, tuple[np.ndarray, float]],
                    attrs_: tuple[str, ...]) -> Mapping[str, tuple[np.ndarray, float]]:
        """The local 1-way tables at the resolution of a measurement on `attrs_` (summed into bins for "query";
        a bin's variance is the sum of its cells')."""
        bins = self._bins_of(attrs_)
        if not bins:
            return one_way
        out = dict(one_way)
        for a, b in bins.items():
            if a in one_way and len(one_way[a][0]) == len(b):   # (already binned without local models)
                vals, var = one_way[a]
                out[a] = (np.bincount(b, weights=vals), var * len(b) / (int(b.max()) + 1))
        return out

    def _consistent(self, pair: tuple[str, ...], vals: np.ndarray, var: float,
                    one_way: Mapping[str, tuple[np.ndarray, float]], n_hat: float, rounds: int = 20) -> np.ndarray:
        """§6.2: make the estimate's 1-way projections agree with the local models' 1-way tables, then
        keep it non-negative; as distributions, iterated, then scaled by n̂. "paper": plain averages;
        "variance": inverse-variance weights (the projection of a cell-variance `var` table onto attribute
        a sums cells/u_a cells)."""
        t = np.clip(np.asarray(vals, float), 0, None)
        t = t / t.sum() if t.sum() > 0 else np.full(t.shape, 1.0 / t.size)
        locals_ = {}
        for a in pair:
            if a in one_way:
                loc = np.clip(one_way[a][0], 0, None)
                locals_[a] = [loc / loc.sum() if loc.sum() > 0 else np.full(loc.shape, 1.0 / loc.size), one_way[a][1]]
        for _ in range(rounds):
            for axis, a in enumerate(pair):
                if a not in locals_:
                    continue
                local, local_var = locals_[a]
                other = tuple(i for i in range(t.ndim) if i != axis)
                proj = t.sum(axis=other)
                if self.config.weighting == "variance":
                    w_est = 1.0 / max(var * (t.size / t.shape[axis]), 1e-300)
                    w_loc = 1.0 / max(local_var, 1e-300)
                    target = (w_est * proj + w_loc * local) / (w_est + w_loc)
                else:
                    target = (proj + local) / 2
                locals_[a][0] = target  # both sides take the agreed table (the paper sets T̃ to T̄)
                shape = [1] * t.ndim
                shape[axis] = t.shape[axis]
                t = t + ((target - proj) / (t.size / t.shape[axis])).reshape(shape)
            t = np.clip(t, 0, None)
            t = t / t.sum() if t.sum() > 0 else np.full(t.shape, 1.0 / t.size)
        return t * n_hat

    # -- the one-process simulation -----------------------------------------------------------
    def party_rngs(self, rng: np.random.Generator) -> tuple[np.random.Generator, dict[str, np.random.Generator]]:
        """The key-agreement stream (shared by the parties, never by the server) and one stream per party,
        derived from one seed, so separate party processes reproduce the one-process simulation."""
        seeds = rng.integers(0, 2**63, size=len(self._partition) + 1)
        return (np.random.default_rng(seeds[-1]),
                {p: np.random.default_rng(s) for p, s in zip(self._partition.names, seeds)})

    def agree_keys(self, key_rng: np.random.Generator) -> None:
        if isinstance(self._encoder, SharedKeyEncoder):
            self._encoder.agree_keys(key_rng)

    def set_key_context(self, context: bytes) -> None:
        """Bind the simulated key agreement to a run (deploy/simulate.py reproduces a run across machines)."""
        if isinstance(self._encoder, SharedKeyEncoder):
            self._encoder.key_context = context

    def needs_keys(self) -> bool:
        """Whether the encoder needs hash keys shared by the parties and hidden from the server (DPFM)."""
        return isinstance(self._encoder, SharedKeyEncoder)

    def set_keys(self, keys: Mapping[str, Any]) -> None:
        """Keys agreed in an earlier step (`vertisynth party keys`), for the parties in `keys`."""
        if not self.needs_keys():
            raise ConfigError(f"vertimrf: the {self.config.encoder!r} encoder takes no shared keys")
        self._encoder.set_keys(dict(keys))

    def fit(self, data: VerticalData, ledger: PrivacyLedger, rng: np.random.Generator) -> None:
        sizes = {p: v.n for p, v in data.views.items()}
        if len(set(sizes.values())) > 1:
            raise DataError(f"vertimrf: parties are not row-aligned (row counts {sizes}); align them first (psi/psu)")
        if isinstance(self._encoder, MeasuresJointly):   # encoder "he": cross-party counts measured exactly
            return self.fit_joint(data, ledger, rng)
        messages: list[Message] = []
        t0 = time.perf_counter()
        key_rng, rngs = self.party_rngs(rng)
        self.agree_keys(key_rng)
        messages = self._party_phase(lambda p, led: self.party_step(p, data.views[p], led, rngs[p]), ledger)
        self._timings = {"parties (LocMRF, binning, LocEnc)": time.perf_counter() - t0}
        self.server_step(messages)

    def sample(self, n: int | None, rng: np.random.Generator) -> Dataset:
        if self._model is None:
            raise DataError("vertimrf: fit() before sample()")
        t0 = time.perf_counter()
        out = self._model.sample(int(round(self._n_hat)) if n is None else int(n), rng, self.config.sampling)
        self._timings["sample"] = time.perf_counter() - t0
        return out

    def sample_blocks(self, n: int | None, rng: np.random.Generator, block_rows: int) -> Iterator[Dataset]:
        """`sample` one block at a time (SamplesInBlocks): what a run with `sample_block_rows` draws."""
        if self._model is None:
            raise DataError("vertimrf: fit() before sample()")
        blocks = self._model.sample_blocks(int(round(self._n_hat)) if n is None else int(n), rng,
                                           self.config.sampling, block_rows)
        return _timed_blocks(blocks, self._timings)

    def cost_estimate(self, n: int) -> dict[str, dict[str, float]]:
        """The encoder's expected cost per party for n rows (`vertisynth validate`); {} when it has none."""
        return self._encoder.cost_estimate(n) if isinstance(self._encoder, CostEstimate) else {}

    def budget_split(self) -> dict[str, float]:
        return dict(self._split)

    def privacy_notes(self) -> list[str]:
        notes = ["each party's local model, value distributions and sketches compose: one person spans all parties"]
        if self.config.encoder == "grr":
            notes.append("the GRR encoder sends one perturbed row per aligned record, so the row count is public: "
                         "its guarantee is for replace-one (bounded) neighbours, as after PSI alignment")
        return notes

    def fitted_model(self) -> tuple[Any, str]:
        """The fitted GraphicalModel and the sampling method (HasGraphicalModel): a DP release to sample from."""
        if self._model is None:
            raise DataError("vertimrf: fit() before fitted_model()")
        return self._model, self.config.sampling

    def timings(self) -> dict[str, float]:
        return dict(self._timings)

    def local_queries(self) -> dict[str, list[dict[str, Any]]]:
        """What each party's local PrivMRF asked its within-party oracle (query, attributes, ρ paid), for the parties
        whose step ran in this process (a forked or remote party keeps its own)."""
        return {p: list(q) for p, q in self._local_queries.items()}

    def model_notes(self) -> list[str]:
        """What a user must know about the fitted model's cross-party structure (CLI output and summary)."""
        if self._model is None:
            return []
        owner = {a: p.name for p in self._partition for a in p.attributes}
        crossing = [q for q in self._cliques if len({owner[a] for a in q}) > 1]
        notes = []
        if len(self._partition) > 1 and not crossing:
            notes.append("the model has no cross-party edge: your parties' columns are synthesised as independent "
                         "(raise epsilon, give the encoder more budget, or bin many-valued attributes more coarsely)")
        elif self._fallback:
            notes.append("no cross-party pair passed the dependence test; kept the best-evidenced pair of every two "
                         "parties anyway: " + ", ".join(" x ".join(p) for p in self._fallback))
        return notes

    def model_details(self) -> dict[str, Any]:
        """What the server built, for the report: the cross-party pairs GraphCom scored (R-score, its noise,
        whether the edge fit under τ), the OptMRF candidates and the cross-party marginals it measured."""
        if self._model is None:
            return {}
        return {"notes": self.model_notes(), "graph_combination": self._graph_info,
                "cross_party_candidates": self._candidate_info,
                "cross_party_marginals": [list(p) for p in self._chosen], "interaction_scale": self._kappa,
                "cliques": [list(q) for q in self._cliques if len(q) > 1], "n_hat": self._n_hat}


def _timed_blocks(blocks: Iterator[Dataset], timings: dict[str, float]) -> Iterator[Dataset]:
    """The blocks, their drawing time summed into timings["sample"] (the consumer's time between them not)."""
    timings["sample"] = 0.0
    while True:
        t0 = time.perf_counter()
        try:
            block = next(blocks)
        except StopIteration:
            return
        finally:
            timings["sample"] += time.perf_counter() - t0
        yield block
