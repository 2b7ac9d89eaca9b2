"""VertiMRF with an encoder that measures cross-party marginals jointly (encoder "he"): the exact-count path.

Kept apart from synthesizer.py (whose GraphCom/OptMRF serve the sketch encoders) so the two evolve separately.
The phases (seed 003, Alg. 2) with measured counts instead of sketch estimates:
  1. parties: LocMRF (and value distributions) as in the sketch path; then the selection stage of the protocol:
     every cross-party 2-way marginal (or the encoder's budgeted subset) with a small share of the encoder's budget;
  2. GraphCom on those tables: R-scores minus their noise level, edges added greedily under max_clique_cells;
  3. InitMRF from the local models' marginals AND the selection tables (their variance 2σ² is known exactly);
  4. the chosen tables: cross-party pairs and triples inside the cliques (each spanning two parties, cells under
     the encoder's max_cells and n/z·σ), picked greedily by the model's error on the cross pairs they cover beyond
     the selection tables' own noise; the top `cliques` measured with the rest of the budget; OptMRF once more.
Cliques spanning three or more parties are measured through their two-party pairs and triples, not by chaining
the protocol nor by sketches: every count stays exact and the model joins them; what is lost is the direct
three-party term (docs/he.md measures it on 3-party data).
"""
from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from vertisynth.core.capabilities import JointRounds
from vertisynth.core.dataset import Dataset
from vertisynth.core.interfaces import VerticalData
from vertisynth.core.messages import Message
from vertisynth.core.privacy import PrivacyLedger
from vertisynth.pgm import Measurement, estimate
from vertisynth.pgm.graph import min_fill_cliques
from vertisynth.vertical import StageOracle

from ..privmrf import LocalModel
from .dimension import bin_dataset


def _n_hat(encoder: Any, enc: Sequence[Message]) -> float:
    """Inverse-variance mean of the selection tables' totals (each total's variance: cells x 2σ²)."""
    num = den = 0.0
    for q in encoder.selection_queries():
        est = encoder.estimate_with_variance(enc, q[0] + q[1])
        w = 1.0 / (est.variance.values.sum())
        num += w * est.counts.values.sum()
        den += w
    return max(num / den, 1.0)


class JointFit:
    """VertiMRF's fit when its encoder measures cross-party marginals in rounds (FitsInRounds): the one-process run
    here, the same server side across machines (`serve_rounds`, driven by deploy)."""

    def joint_rounds(self) -> JointRounds | None:
        return self._encoder if isinstance(self._encoder, JointRounds) else None

    def round_view(self, view: Dataset) -> Dataset:
        """A party's columns as the protocol reads them: binned as the server's model is."""
        mine = [a for a in view.attributes if a in self._binned]
        return bin_dataset(view, self.config.bins, mine) if mine else view

    def fit_joint(self, data: VerticalData, ledger: PrivacyLedger, rng: np.random.Generator) -> None:
        """The one-process run: the parties' steps and protocol rounds, then the server's (messages only)."""
        encoder = self._encoder
        t0 = time.perf_counter()
        key_rng, rngs = self.party_rngs(rng)
        messages: list[Message] = []
        low = {}
        for p in self._partition.names:
            view = data.views[p]
            messages += self.party_step(p, view, ledger, rngs[p])
            low[p] = self.round_view(view)
        # the cross-party stages through the stage oracle: the selection tables are the plan's, the clique tables
        # the server's choice (at most the plan's count); each stage spends its one planned charge
        oracle = StageOracle(low, self._partition, encoder, ledger, rngs,
                             fixed={"selection": encoder.selection_queries()})
        messages += oracle.answers(encoder.selection_queries(), "selection")
        self._timings = {"parties (LocMRF, binning, HE selection)": time.perf_counter() - t0}
        self._serve(messages, lambda queries: oracle.answers(queries, "cliques"))

    def serve_rounds(self, messages: Sequence[Message], measure: Callable[[list], list[Message]]) -> None:
        """The server's side across machines: `measure(queries)` runs the clique stage between the parties."""
        self._timings = {}
        self._serve(messages, measure)

    def _serve(self, messages: Sequence[Message], measure: Callable[[list], list[Message]]) -> None:
        """The server's side (messages only): GraphCom on the selection tables, InitMRF, the chosen tables, OptMRF."""
        c, encoder, dom = self.config, self._encoder, self._domain
        owner = {a: p.name for p in self._partition for a in p.attributes}
        locals_ = {m.party: m for m in messages if isinstance(m, LocalModel)}
        dists = self._value_distributions(messages)
        enc = self._encoded(messages)
        n_hat = _n_hat(encoder, enc)
        t0 = time.perf_counter()
        # GraphCom on the selection tables
        edges = [tuple(e) for m in locals_.values() for e in m.edges]
        sel = {}
        scored = []
        for sa, sb in encoder.selection_queries():
            pair = sa + sb
            est = encoder.estimate_with_variance(enc, pair)
            sel[pair] = est
            t = np.clip(est.counts.values, 0, None)
            tot = max(t.sum(), 1.0)
            r = 0.5 * np.abs(t - np.outer(t.sum(1), t.sum(0)) / tot).sum()
            noise = 0.5 * np.sqrt(est.variance.values).sum() * math.sqrt(2 / math.pi)
            if r > noise:   # an R-score within its own noise is no evidence of correlation
                scored.append((r - noise, pair, noise))
        self._graph_info = []
        for r, pair, noise in sorted(scored, reverse=True):
            trial = edges + [pair]
            added = max(dom.project(q).size() for q in min_fill_cliques(dom, trial)) <= c.max_clique_cells
            if added:
                edges = trial
            self._graph_info.append({"pair": list(pair), "r_score": float(r + noise), "noise": float(noise), "added": added})
        cliques = min_fill_cliques(dom, edges)
        t1 = time.perf_counter()
        # InitMRF: local models' marginals and the selection tables
        meas: list[Measurement] = []
        one_way: dict[str, tuple[np.ndarray, float]] = {}
        for lm in locals_.values():
            model = lm.model()
            scale = n_hat / max(model.total, 1.0)
            for attrs_, std in zip(lm.marginals, lm.marginal_std):
                meas.append(Measurement(tuple(attrs_), model.marginal(attrs_).values * scale, std))
            for a in lm.domain.attributes:
                std_a = min((s for m_, s in zip(lm.marginals, lm.marginal_std) if a in m_), default=1.0)
                one_way[a] = (model.marginal([a]).values * scale, std_a**2)
        sel_counts = {}
        for pair in sel:
            counts, var = self._cross_estimate(enc, pair, dists)
            sel_counts[pair] = np.clip(counts.values, 0, None)
            if any(set(pair) <= set(q) for q in cliques):   # (a pair outside the graph would force a larger tree)
                meas.append(Measurement(pair, counts.values, math.sqrt(var), self._bins_of(pair)))
        if not locals_:
            for a in dom.attributes:
                counts, var = self._cross_estimate(enc, (a,), dists)
                one_way[a] = (np.clip(counts.values, 0, None), var)
        res = estimate(dom, meas, total=n_hat, iters=c.iters, extra_cliques=cliques, max_cells=float("inf"),
                       atol=c.fit_atol(meas), accelerate=c.fit_momentum())
        t2 = time.perf_counter()
        # the chosen tables: two-party pairs and triples inside the cliques, picked greedily by the model's excess error
        # on the cross pairs they cover (error beyond the selection table's own noise) that no earlier pick covered
        var_cl = encoder.variance("cliques")
        limit = min(encoder.config.max_cells, n_hat / (c.z * math.sqrt(var_cl)))
        excess, raw = {}, {}

        def errors(pairs) -> None:
            for pr in pairs:
                tab = sel_counts[pr]
                # E(model − y)² = (model − truth)² + var per cell: Σ(model − y)² − cells·var estimates ‖model − truth‖²,
                # and √(cells·‖·‖²) bounds its L1 (what the TVD counts)
                diff = self._query(res.model, pr) - tab
                sq = float((diff ** 2).sum()) - tab.size * float(sel[pr].variance.values.mean())
                excess[pr] = math.sqrt(max(sq, 0.0) * tab.size)
                raw[pr] = float(np.abs(diff).sum())

        # the candidates below lie inside the cliques, so only pairs inside one clique are scored (a clique's own
        # marginal): a pair across the tree is an elimination along its path, seconds each with cliques of 10^5 cells
        # (wide: 300 selection pairs took most of the run)
        errors([pr for pr in sel_counts if res.model.tree.clique_for(pr) is not None])
        cands: set[tuple[str, ...]] = set()
        order = {a: i for i, a in enumerate(dom.attributes)}
        for q in cliques:
            q = tuple(sorted(q, key=order.get))
            for a, b in itertools.combinations(q, 2):
                if owner[a] == owner[b] or (a, b) not in excess:
                    continue
                cands.add((a, b))
                for x in q:   # a triple: the pair and one more attribute of either of its two parties
                    t = tuple(sorted({a, b, x}, key=order.get))
                    if len(t) == 3 and owner[x] in (owner[a], owner[b]) and self._low_domain.project(t).size() <= limit:
                        cands.add(t)
        if not cands:   # no cross-party edge made the graph: the planned tables go to the selection pairs instead
            errors([pr for pr in sel_counts if pr not in excess])   # (no clique spans two parties: mostly cheap)
            cands = set(excess)
        covered: set[tuple[str, str]] = set()
        chosen: list[tuple[str, ...]] = []
        pairs_of = {t: [pr for pr in itertools.combinations(t, 2) if pr in excess] for t in cands}
        grown = list(edges)

        def fits(t: tuple[str, ...]) -> bool:
            """A table outside the tree grows it: only while every clique stays under max_clique_cells, the cap
            GraphCom keeps (with many-valued domains a few such pairs triangulate into cliques of 10^7+ cells)."""
            if res.model.tree.clique_for(t) is not None:
                return True
            trial = grown + list(itertools.combinations(t, 2))
            return max(dom.project(q).size() for q in min_fill_cliques(dom, trial)) <= c.max_clique_cells

        while cands and len(chosen) < encoder.config.cliques:   # bounded: every pass removes one candidate
            gain = {t: sum(excess[pr] for pr in pairs_of[t] if pr not in covered) for t in cands}
            # (when no excess is left, the raw error ranks: the budget is planned for `cliques` tables)
            best = max(cands, key=lambda t: (gain[t], sum(raw[pr] for pr in pairs_of[t] if pr not in covered),
                                             -self._low_domain.project(t).size(), t))
            cands.discard(best)
            if not fits(best):
                continue
            if res.model.tree.clique_for(best) is None:
                grown += list(itertools.combinations(best, 2))
            chosen.append(best)
            covered |= set(pairs_of[best])
        self._candidate_info = [{"pair": list(pr), "excess_error": e, "covered": pr in covered} for pr, e in excess.items()]
        if chosen:
            queries = []
            for s in chosen:
                parts = {}
                for a in s:
                    parts.setdefault(owner[a], []).append(a)
                (pa, sa), (pb, sb) = sorted(parts.items())
                queries.append((tuple(sa), tuple(sb)))
            got = measure(queries)
            for s in chosen:
                # unbiased counts with a known variance go to the estimator as they are: §6.2's consistency step
                # (clip, renormalise) is for sketch estimates and biases tables with many near-empty cells
                counts, var = self._cross_estimate(got, s, dists)
                meas.append(Measurement(s, counts.values, math.sqrt(var), self._bins_of(s)))
            # (the fallback's selection pairs lie outside the graph: then the tree grows to hold them, fitted afresh)
            inside = all(res.model.tree.clique_for(s) is not None for s in chosen)
            res = estimate(dom, meas, total=n_hat, iters=c.iters, warm_start=res.model if inside else None,
                           extra_cliques=cliques, max_cells=float("inf"), atol=c.fit_atol(meas),
                           accelerate=c.fit_momentum())
        self._model, self._n_hat, self._measurements = res.model, n_hat, meas
        self._chosen, self._cliques = chosen, cliques
        self._kappa, self._fallback = None, []   # (the sketch path's interaction scale and fallback pairs: none here)
        self._timings.update({"GraphCom (server)": t1 - t0, "InitMRF (server)": t2 - t1,
                             "cliques measured + OptMRF": time.perf_counter() - t2})
