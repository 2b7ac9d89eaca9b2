"""`aim`: AIM, an adaptive and iterative mechanism (McKenna, Mullins, Sheldon, Miklau, VLDB 2022), on the pgm engine.

zCDP throughout, ρ from the plan. T = `rounds` (default 16·d), α = `alpha` (0.9):
  * initialise: every 1-way marginal measured with σ₀ = √(T / (2αρ)) (planned charges, one per attribute);
  * the rest of ρ is one planned charge opened as a zCDP filter (pgm/oracle.py); each round draws from it
    ε²/8 for an exponential mechanism over the candidates (the workload's downward closure, kept when the model
    with the candidate stays under `max_model_mb` · ρ_used/ρ, or the candidate fits a clique already) with score
    w_r (‖M_r(D) − M_r(p̂)‖₁ − √(2/π) σ |Ω_r|), w_r = Σ_{s∈W} c_s |r ∩ s|, sensitivity max w_r, and 1/(2σ²) for
    measuring the chosen marginal; when the model's marginal on it moved by at most √(2/π) σ |Ω_r|, σ halves and
    ε doubles (annealing); when less than two rounds' cost is left, the last round spends all of it;
  * the engine re-fits after each round (warm-started from the previous fit) and samples n̂ records.
The workload is every `degree`-way marginal (default 3) with weight 1, or the marginals listed in `workload`.
Every question goes through a MarginalOracle. With `vertical = { measure = "he", trust = "none" }` the run's oracle
is a vertical one (vertisynth/vertical): the same charges, and two deviations (docs/vertical.md): every cross-party
pair of the candidates is measured once first (`probe` of the rounds' ρ; estimation uses a pair's once chosen; under
trust = "server" a pair measured at full resolution gets PROBE_FULL times a coarse one's ρ, under trust = "none"
PROBE_FULL_NONE times where every probe is at full resolution), so the
selection can score cross-party candidates on released answers; a triple over two parties is a candidate under
trust = "server" (scored at the party holding two of its attributes, with its cross-party pairs' released estimates),
left out under two-sided noise; candidates over three parties or more are left out (no measure answers them).
Under trust = "none" the last fit also takes the probes no round chose whose released table shows the model's error
above the probe's own (`last_probes`: post-processing, nothing charged).
"""
from __future__ import annotations

import itertools
import math
import time

import attrs
import numpy as np

from vertisynth.core.capabilities import below_two_sided
from vertisynth.core.domain import Domain
from vertisynth.core.errors import ConfigError
from vertisynth.core.interfaces import PlanContext, Synthesizer, VerticalData
from vertisynth.core.privacy import Charge, PrivacyLedger, ZCDP

from vertisynth.plugins.synthesizers.fitted import FittedGraphicalModel
from vertisynth.pgm import estimate
from vertisynth.pgm.graph import min_fill_cliques
from vertisynth.pgm.oracle import CentralOracle, MarginalOracle, ZCDPFilter
from vertisynth.vertical import owners, VerticalConfig, VerticalOracle
from vertisynth.vertical.probes import mass_bins, measure_probes, residual_l1

STAGE = "synthesizer"
PROBE = 0.15   # vertical: the share of the rounds' ρ that measures every cross-party pair once
# vertical, trust = "server", `probe` left at its default: a probe at its pair's full resolution (no attribute
# coarsened) gets this many times a coarse probe's ρ (σ_p / √PROBE_FULL), coarse probes keep theirs (the share grows
# by what the full ones add). Late in a run a pair's error is of the order of one probe's noise, and the probe is
# what selection scores it by (docs/vertical.md, "aim, seventh pass"); a coarse probe's score is coarse whatever its
# noise, and more ρ for every probe cost the larger-domain presets more than it gave
PROBE_FULL = 3.0
# the same under trust = "none" (two-sided noise: each probe releases twice trust server's variance at its ρ), where
# every probe is at full resolution (zoo small-domains, NLTCS: 0.8 of main's ratio on small-domains, 8 cells of 8).
# Where only some are (mixed, strong, weak) the full ones' sharper scores lost ε 0.4 cells there, and ×3 lost NLTCS
# (docs/vertical.md, "aim under trust = none, eleventh pass")
PROBE_FULL_NONE = 2.0
CELL_BYTES = 8  # the model-size cap counts float64 cells, as the paper's megabytes do


@attrs.frozen
class AIMConfig:
    degree: int = 3
    workload: list[list[str]] | None = None
    rounds: int | None = None        # T; default 16·d
    alpha: float = 0.9               # the share of each round's ρ that measures (the rest selects)
    max_model_mb: float = 80.0
    iters: int = 1000                # mirror-descent steps per fit (early stop on a flat loss)
    # > 0: the rounds' fits (they steer selection and annealing) stop when the loss left to gain is below this per
    # measured cell (estimate's atol, as VertiMRF's fits; 0.01 halves the CPU, docs/synthesizers/aim.md); the last
    # round's fit, the model sampled, runs to `iters`. 0 (default until checked on Adult): every fit runs to `iters`
    fit_tolerance: float = 0.0
    sampling: str = "round"          # round (mbi's default) | sample
    vertical: VerticalConfig | None = None   # run across parties (docs/vertical.md); None: central

    def __attrs_post_init__(self) -> None:
        if self.degree < 1:
            raise ConfigError(f"aim: degree must be >= 1, got {self.degree}")
        if self.rounds is not None and self.rounds < 1:
            raise ConfigError(f"aim: rounds must be >= 1, got {self.rounds}")
        if not 0 < self.alpha < 1:
            raise ConfigError(f"aim: alpha must be in (0, 1), got {self.alpha}")
        if not self.max_model_mb > 0:
            raise ConfigError(f"aim: max_model_mb must be positive, got {self.max_model_mb}")
        if not 0 <= self.fit_tolerance < math.inf:
            raise ConfigError(f"aim: fit_tolerance must be a finite number >= 0 (0: run to iters), got {self.fit_tolerance}")
        if self.iters < 1:
            raise ConfigError(f"aim: iters must be >= 1, got {self.iters}")
        if self.sampling not in ("sample", "round"):
            raise ConfigError(f"aim: sampling must be 'sample' or 'round', got {self.sampling!r}")
        if self.workload is not None and (not self.workload or any(not w for w in self.workload)):
            raise ConfigError("aim: workload must list at least one non-empty marginal")


def workload_of(domain: Domain, degree: int, workload: list[list[str]] | None) -> list[tuple[str, ...]]:
    """The workload's marginals, each in the domain's attribute order (duplicates dropped)."""
    if workload is None:
        k = min(degree, len(domain))
        return list(itertools.combinations(domain.attributes, k))
    out: list[tuple[str, ...]] = []
    for w in workload:
        names = domain.check(w)   # unknown or repeated attributes: a DomainError naming them
        t = tuple(a for a in domain.attributes if a in names)
        if t not in out:
            out.append(t)
    return out


def candidates_of(workload: list[tuple[str, ...]]) -> dict[tuple[str, ...], float]:
    """The downward closure of the workload → w_r = Σ_{s∈W} |r ∩ s| (every c_s = 1)."""
    closure = {sub for w in workload for k in range(1, len(w) + 1) for sub in itertools.combinations(w, k)}
    # |r ∩ s| = Σ_{a∈r} [a ∈ s], so w_r = Σ_{a∈r} (how many workload marginals hold a): O(|closure|), where the
    # pairwise sum took |closure|·|W| set intersections (10⁸ on 40 attributes, minutes before the first round)
    holding: dict[str, int] = {}
    for s in workload:
        for a in s:
            holding[a] = holding.get(a, 0) + 1
    return {r: float(sum(holding[a] for a in r)) for r in sorted(closure, key=lambda r: (len(r), r))}


def model_cells(domain: Domain, cliques: list[tuple[str, ...]]) -> int:
    """Cells of the model on `cliques` (the min-fill triangulation's maximal cliques, as the engine builds it)."""
    return int(sum(domain.project(c).size() for c in min_fill_cliques(domain, cliques)))


class ModelSize:
    """`model_cells` for many hypothetical cliques added to one graph, on bitmasks: the same min-fill elimination
    (fewest fill edges, then fewest cells, then domain order) as pgm.graph, without building a graph per call.
    Min-fill eliminates each connected component as it would alone (a vertex's key reads only its component,
    ties break on the global order), so the cells are a sum over components: a hypothetical clique re-eliminates
    only the components it joins. `cache` (component adjacency → cells) may be shared by successive graphs."""

    def __init__(self, domain: Domain, cliques: list[tuple[str, ...]],
                 cache: dict[tuple[int, ...], int] | None = None) -> None:
        self.index = {a: i for i, a in enumerate(domain.attributes)}
        self.sizes = list(domain.shape)
        self.adj = [0] * len(self.sizes)
        for c in cliques:
            self._link(self.adj, [self.index[a] for a in c])
        self.cache = {} if cache is None else cache
        self.memo: dict[tuple[tuple[int, int], ...], int] = {}   # missing edges -> cells, for this graph
        self.comp = [0] * len(self.sizes)   # each vertex's component, as a vertex mask
        left = (1 << len(self.sizes)) - 1
        while left:
            mask = frontier = left & -left
            while frontier:
                reach = 0
                m = frontier
                while m:
                    u = (m & -m).bit_length() - 1
                    m &= m - 1
                    reach |= self.adj[u]
                frontier = reach & ~mask
                mask |= frontier
            left &= ~mask
            m = mask
            while m:
                u = (m & -m).bit_length() - 1
                m &= m - 1
                self.comp[u] = mask
        self.total = sum(self._cells(mask, self.adj) for mask in set(self.comp))

    @staticmethod
    def _link(adj: list[int], idx: list[int]) -> None:
        mask = sum(1 << i for i in idx)
        for i in idx:
            adj[i] |= mask & ~(1 << i)

    def cells(self, extra: tuple[str, ...]) -> int:
        idx = [self.index[a] for a in extra]
        # the graph with `extra` is this one plus the edges of `extra` it lacks: candidates lacking the same edges
        # (a triple one of whose pairs is missing, and that pair) have the same model
        missing = tuple((i, j) for k, i in enumerate(idx) for j in idx[k + 1:] if not self.adj[i] >> j & 1)
        if missing not in self.memo:
            joined = set(self.comp[i] for i in idx)
            merged = 0
            for mask in joined:
                merged |= mask
            adj = list(self.adj)
            self._link(adj, idx)
            self.memo[missing] = (self.total - sum(self._cells(mask, self.adj) for mask in joined)
                                  + self._cells(merged, adj, False))
        return self.memo[missing]

    def _cells(self, alive: int, adj: list[int], keep: bool = True) -> int:
        """Cells of the maximal elimination cliques of the component(s) `alive` (closed under `adj`); `keep`: look
        up and store them in the cache (the graph's own components: what successive graphs share).

        Min-fill eliminates a simplicial vertex (fill 0) whenever there is one, and such a step adds no edge and
        leaves the others simplicial, so which simplicial vertex goes first changes neither the graph that each
        step with fill meets (all simplicial vertices peeled: the same core) nor its choice there, hence not the
        filled graph nor its maximal cliques. So the simplicial vertices are peeled off a worklist (a vertex can
        only become simplicial when a neighbour goes, or after a step with fill), and the full key (fill, cells,
        order) is computed only on a core: O(vertices x degree) per call where re-keying every vertex at every
        step was O(vertices² x degree), which dominated AIM's rounds once the model's graph was connected."""
        if keep:
            verts = []
            m = alive
            while m:
                u = (m & -m).bit_length() - 1
                m &= m - 1
                verts.append(u)
            key = (alive, *(adj[v] for v in verts))
            if key in self.cache:
                return self.cache[key]
        adj = list(adj)
        sizes = self.sizes
        elim: list[tuple[int, int]] = []   # (vertex, its neighbours left) in elimination order
        todo = alive
        while alive:
            while todo:   # peel the simplicial vertices
                low = todo & -todo
                todo ^= low
                if not alive & low:
                    continue
                v = low.bit_length() - 1
                nb = adj[v] & alive
                m = nb
                while m:
                    lu = m & -m
                    m ^= lu
                    if nb & ~adj[lu.bit_length() - 1] & ~lu:
                        break
                else:
                    elim.append((v, nb))
                    alive ^= low
                    todo |= nb   # only a neighbour of v can have become simplicial
            if not alive:
                break
            best, best_key = -1, None   # no simplicial vertex left: min-fill's key on the core
            rest = alive
            while rest:
                v = (rest & -rest).bit_length() - 1
                rest &= rest - 1
                nb = adj[v] & alive
                fill, cells, m = 0, sizes[v], nb
                while m:
                    u = (m & -m).bit_length() - 1
                    m &= m - 1
                    fill += (nb & ~adj[u] & ~(1 << u)).bit_count()
                    cells *= sizes[u]
                key_v = (fill, cells, v)
                if best_key is None or key_v < best_key:
                    best, best_key = v, key_v
            nb = adj[best] & alive
            m = nb
            while m:
                u = (m & -m).bit_length() - 1
                m &= m - 1
                adj[u] |= nb & ~(1 << u)
            elim.append((best, nb))
            alive &= ~(1 << best)
            todo = alive   # the fill changed neighbourhoods: every vertex is checked again
        # the order is a perfect elimination order of the filled graph: a vertex's clique {v} + N⁺(v) is not
        # maximal iff some u whose first later neighbour is v has N⁺(u) = {v} + N⁺(v) (Blair & Peyton 1993)
        pos = {v: i for i, (v, _) in enumerate(elim)}
        later = dict(elim)
        inner = set()
        for u, nb in elim:
            if nb:
                m, p = nb, None
                while m:
                    w = (m & -m).bit_length() - 1
                    m &= m - 1
                    if p is None or pos[w] < pos[p]:
                        p = w
                if nb.bit_count() == later[p].bit_count() + 1:
                    inner.add(p)
        total = 0
        for v, nb in elim:
            if v in inner:
                continue
            cells, m = sizes[v], nb
            while m:
                u = (m & -m).bit_length() - 1
                m &= m - 1
                cells *= sizes[u]
            total += cells
        if keep:
            self.cache[key] = total
        return total


def last_probes(dom: Domain, model, meas: list, pending: dict, limit_cells: float) -> list[tuple[str, ...]]:
    """The pending probes (paid, never chosen by a round) that the last fit takes: those AIM's own rule would measure
    at the probe's released σ_p, the model's error on the pair, estimated from the probe (`residual_l1`, as
    selection scores it), above √(2/π) σ_p |y| (the offset of AIM's score: the error that measuring at σ_p leaves),
    strongest first (by that excess in units of σ_p), each while the model stays under `limit_cells`.
    Post-processing of released answers: nothing is charged. Central AIM has no probes; without this the twin's
    release ignored most of what it paid for (docs/vertical.md, "aim, twelfth pass"; kept for trust none on held-out
    data: "aim, thirteenth pass")."""
    excess = {}
    for q, m in pending.items():
        gap = residual_l1(m, model.marginal(q).values) - math.sqrt(2 / math.pi) * m.std * m.values.size
        if gap > 0:
            excess[q] = gap / m.std
    taken: list[tuple[str, ...]] = []
    cliques = [tuple(m.attributes) for m in meas]
    graph = ModelSize(dom, cliques)
    for q in sorted(excess, key=lambda q: -excess[q]):
        if graph.cells(q) <= limit_cells:
            taken.append(q)
            cliques.append(q)
            graph = ModelSize(dom, cliques, graph.cache)
    return taken


# a vertical twin over a measure that releases once scores cross-party triples of at most this many cells
RELEASE_CELLS = 512


class AIMSynthesizer(FittedGraphicalModel, Synthesizer):
    _name = "aim"

    def __init__(self, config: AIMConfig | None = None) -> None:
        super().__init__(config or AIMConfig())
        self._timings: dict[str, float] = {}

    def plan(self, ctx: PlanContext) -> list[Charge]:
        dom = ctx.domain
        d = len(dom)
        if d < 1:
            raise ConfigError("aim needs at least one attribute")
        self._domain = dom
        self._owner = owners("aim", self.config.vertical, ctx.partition)
        self._free = bool(ctx.cross_release)   # cross-party answers come from a release: no probes, nothing drawn
        self._workload = workload_of(dom, self.config.degree, self.config.workload)
        self._rho = ctx.rho
        self._T = self.config.rounds or 16 * d
        if d * self.config.alpha >= self._T:   # the d one-ways at σ0 (ρ α/T each) would take all of ρ, or more
            raise ConfigError(f"aim: rounds = {self._T} is too few for {d} attributes: the first one-way "
                              f"measurements alone take d·alpha/rounds = {d * self.config.alpha / self._T:.0%} of the "
                              f"budget; set rounds above alpha·d = {d * self.config.alpha:.3g} (AIM's default is 16·d "
                              f"= {16 * d}) or lower alpha")
        self._sigma0 = math.sqrt(self._T / (2 * self.config.alpha * self._rho))
        rho1 = 1.0 / (2 * self._sigma0 ** 2)
        # kept: fit spends these very charges (the rounds draw the last one down as a zCDP filter)
        self._charges = {"gaussian_1way": [Charge(STAGE, "gaussian_1way", ZCDP(rho1)) for _ in range(d)],
                         "rounds": Charge(STAGE, "aim_rounds", ZCDP(self._rho - d * rho1),
                                          note="adaptive rounds (exponential + Gaussian), drawn down as a zCDP filter")}
        return [*self._charges["gaussian_1way"], self._charges["rounds"]]

    def fit(self, data: VerticalData, ledger: PrivacyLedger, rng: np.random.Generator) -> None:
        self.fit_oracle(CentralOracle(data.joined().project(self._domain.attributes), ledger), rng)

    def vertical_request(self) -> VerticalConfig | None:
        return self.config.vertical

    def probe_stages(self, central: bool) -> list[tuple[list[tuple[str, ...]], float]]:
        """The probe stages `fit_oracle` asks on a vertical oracle, (pairs, σ) each, from the plan alone (what
        selects them there: the candidates, the rounds' ρ, probe_bins against the domain), so that `vertisynth
        validate` prices them (hecost15; the rounds after them follow the data). `central`: `below_two_sided` of the
        measure (trust "server")."""
        c = self.config
        if c.vertical is None or getattr(self, "_free", False):
            return []
        probe = [r for r in candidates_of(self._workload) if len(r) == 2
                 and len({self._owner[a] for a in r}) == 2]
        if not probe:
            return []
        binned = {a for a in self._domain.attributes if self._domain.size(a) > c.vertical.probe_bins}
        return self._probe_groups(probe, binned, central, self._charges["rounds"].cost.rho)

    def _probe_groups(self, probe: list[tuple[str, ...]], binned: set[str], central: bool, rho_rounds: float
                      ) -> list[tuple[list[tuple[str, ...]], float]]:
        """The probes in their stages, (pairs, σ) each, coarse first: σ_p from the probe share of the rounds' ρ;
        with the default share the full-resolution ones (no attribute in `binned`) at σ_p / √PROBE_FULL where
        `central` (trust server), at σ_p / √PROBE_FULL_NONE under trust none only where every probe is full.
        `fit_oracle` asks these and `probe_stages` prices them: one rule for both."""
        c = self.config
        share = c.vertical.probe if c.vertical.probe is not None else PROBE
        sigma_p = math.sqrt(len(probe) / (2 * share * rho_rounds))
        times = PROBE_FULL if central else PROBE_FULL_NONE
        full = [r for r in probe if not set(r) & binned] if c.vertical.probe is None and times != 1 else []
        if not central and len(full) < len(probe):
            full = []   # trust none: only where every probe is full (PROBE_FULL_NONE)
        coarse = [r for r in probe if r not in full]
        return [(g, s) for g, s in ((coarse, sigma_p), (full, sigma_p / math.sqrt(times))) if g]

    def fit_oracle(self, oracle: MarginalOracle, rng: np.random.Generator) -> None:
        """AIM's rounds, every data access through `oracle` (which holds the ledger)."""
        c = self.config
        dom = self._domain
        t0 = time.perf_counter()
        cands = candidates_of(self._workload)
        parties = lambda r: len({self._owner[a] for a in r})  # noqa: E731
        server = False   # a cross-party answer carries less than two-sided noise's 2σ² (trust = "server": 1.5σ²)
        if c.vertical is not None and getattr(self, "_free", False):
            # a release answers any marginal of two parties: cross-party triples too, up to RELEASE_CELLS cells
            # (each is estimated from the release once, for its score: post-processing, but not free of CPU)
            cands = {r: w for r, w in cands.items() if parties(r) == 1 or len(r) == 2
                     or (parties(r) == 2 and dom.project(r).size() <= RELEASE_CELLS)}
        elif c.vertical is not None:
            # a triple over two parties is a candidate where a cross-party answer carries less than two-sided
            # noise (trust server, 1.5σ²: three shares): VerticalOracle.select scores it at the party holding two of
            # its attributes, and it is measured across parties. Under two-sided noise (2σ² a cell) such triples made
            # the twin worse (docs/vertical.md, "aim, fifth pass"): left out there, as over three parties (no measure
            # answers them)
            server = isinstance(oracle, VerticalOracle) and below_two_sided(oracle.cross_measure)
            cands = {r: w for r, w in cands.items() if parties(r) == 1 or len(r) == 2
                     or (server and parties(r) == 2)}
        names = list(cands)
        weight = np.array([cands[r] for r in names])
        cells = np.array([dom.project(r).size() for r in names], dtype=float)
        limit_cells = c.max_model_mb * 2**20 / CELL_BYTES
        meas = [oracle.measure((a,), ch, rng) for a, ch in zip(dom.attributes, self._charges["gaussian_1way"])]
        filt = ZCDPFilter(self._charges["rounds"], oracle.ledger)
        probe = [r for r in names if len(r) == 2 and parties(r) == 2] if c.vertical is not None and \
            not getattr(self, "_free", False) else []
        pending: dict[tuple[str, ...], object] = {}
        if probe:   # every cross-party pair once, from the filter: what selection scores them by; a probe joins
            # estimation when its pair is chosen (all of them at once would make the model's graph dense)
            bins = mass_bins(meas, c.vertical.probe_bins)
            # the stages and their σ known before any is answered (from the public domain, probe_bins and the
            # released 1-ways' bins): the draws below
            for group, s_p in self._probe_groups(probe, set(bins), server, filt.total):
                pending.update(zip(group, measure_probes(oracle, group, [filt] * len(group), rng, bins, s_p)))
            pending = {r: pending[r] for r in probe}   # in the candidates' order, as before
        res = estimate(dom, meas, iters=c.iters, max_cells=limit_cells)
        rho_init = self._rho - filt.total
        sigma = self._sigma0
        eps = math.sqrt(8 * (1 - c.alpha) * self._rho / self._T)
        sizes: dict[tuple[str, ...], int] = {}   # the current graph's hypothetical model sizes
        graphs: dict[tuple[int, ...], int] = {}   # a component's cells, for every graph of the run
        last_cliques: list[tuple[str, ...]] = []
        read: set[tuple[str, ...]] = set()   # candidates already read off a release
        # over a release a cross-party candidate is scored and read for free (post-processing): each round adds the
        # best one whose score beats the release's noise, and the round's paid selection runs on one party's
        # candidates only (docs/vertical.md)
        free = bool(getattr(self, "_free", False)) and isinstance(oracle, VerticalOracle) and oracle.releases
        t_select = t_fit = 0.0
        rounds = anneals = 0
        while True:
            last = filt.remaining < 2 * (0.5 / sigma**2 + eps**2 / 8)
            if last:  # spend what is left in one final round
                sigma = math.sqrt(1 / (2 * c.alpha * filt.remaining))
                eps = math.sqrt(8 * (1 - c.alpha) * filt.remaining)
            used = rho_init + filt.used + eps**2 / 8 + 0.5 / sigma**2
            ts = time.perf_counter()
            model = res.model
            cliques = [tuple(q) for q in model.tree.cliques]
            graph = None
            if cliques != last_cliques:
                sizes, last_cliques = {}, cliques

            def under_cap(i: int) -> bool:   # the candidate is in a clique, or the model with it stays under the cap
                nonlocal graph
                r = names[i]
                if model.tree.clique_for(r) is not None:
                    return True
                if r not in sizes:
                    graph = graph or ModelSize(dom, cliques, graphs)
                    sizes[r] = graph.cells(r)
                return sizes[r] <= limit_cells * used / self._rho
            # the central oracle's selection asks the cap lazily (the same mechanism, a few size tests a round
            # instead of one per candidate: on zoo wide they were most of a round); elsewhere every candidate first
            lazy = isinstance(oracle, CentralOracle)
            ok = [i for i, r in enumerate(names) if r not in read and (lazy or under_cap(i))]
            if free:
                xs = [i for i in ok if parties(names[i]) == 2]
                if xs:
                    # every candidate at its lower bound (as privmrf's): aim decides *whether* to add a free read,
                    # so a noisy read that only beats the bound's gate must not pass (docs/vertical.md, fourth pass)
                    sc = oracle.release_scores([names[i] for i in xs], [model.marginal(names[i]).values for i in xs],
                                               bound=True)
                    if sc.max() > 0:
                        x = names[xs[int(np.argmax(sc))]]
                        read.add(x)
                        meas.append(oracle.measure(x, None, rng))
                own = [i for i in ok if parties(names[i]) == 1 and names[i] not in read]
                ok = own or [i for i in ok if names[i] not in read] or ok
            est = [model.marginal(names[i]).values for i in ok]
            offsets = math.sqrt(2 / math.pi) * sigma * cells[ok]
            if lazy:
                pick = ok[oracle.select([names[i] for i in ok], est, weight[ok], offsets, eps, filt, rng,
                                        admissible=lambda j: under_cap(ok[j]))]
            else:
                pick = ok[oracle.select([names[i] for i in ok], est, weight[ok], offsets, eps, filt, rng)]
            r = names[pick]
            if getattr(self, "_free", False) and parties(r) == 2:
                read.add(r)   # read off a release: asked again, the same table would come back (no new information)
            m = oracle.measure(r, filt, rng, sigma)
            before = est[ok.index(pick)]
            t_select += time.perf_counter() - ts
            tf = time.perf_counter()
            meas.append(m)
            if r in pending:
                meas.append(pending.pop(r))
            fits = [q for q in pending if res.model.tree.clique_for(q) is not None]
            meas += [pending.pop(q) for q in fits]   # probes inside the model's cliques: information at no new clique
            # the probes' answers are paid for: the last fit keeps those that carry signal, under trust none (under
            # trust server no direction: docs/vertical.md, "aim, twelfth pass" and "thirteenth pass")
            if last and pending and not server:
                meas += [pending.pop(q) for q in last_probes(dom, res.model, meas, pending, limit_cells)]
            atol = c.fit_tolerance * sum(q.values.size for q in meas) if c.fit_tolerance > 0 and not last else None
            res = estimate(dom, meas, iters=c.iters, max_cells=float("inf"), phi0=res.phi, step=res.step, atol=atol)
            t_fit += time.perf_counter() - tf
            rounds += 1
            if last:
                break
            after = res.model.marginal(r).values
            if np.abs(after - before).sum() <= math.sqrt(2 / math.pi) * sigma * cells[pick]:
                sigma /= 2
                eps *= 2
                anneals += 1
        self._model = res.model
        self._measurements = meas
        self._n_hat = max(1, int(round(res.model.total)))
        self._rounds_run, self._anneals = rounds, anneals
        self._filter_log = list(filt.log)
        self._timings = {"select": t_select, "estimate": t_fit, "total fit": time.perf_counter() - t0}
