"""GraphicalModel: log-potentials on a junction tree; exact inference and sampling.

Every clique table keeps its attributes in the domain's order, so a separator's axes appear in the
same relative order in both cliques and messages broadcast by reshaping alone.

Calibration is two-pass sum-product belief propagation (collect to the root, distribute back) on
max-shifted exponentiated log-potentials with normalised messages (stable, and much cheaper than
logsumexp); each calibrated clique belief, normalised, is that clique's exact marginal. A marginal over attributes
spread across cliques is computed by variable elimination on the smallest subtree that covers them:
multiply clique marginals divided by separator marginals along the subtree, summing out attributes as
soon as no remaining clique needs them. Disconnected components (a forest) are independent.
Estimation does not use this class's propagation in its loop (see calibrator.py, the same computation
batched for speed); it builds a GraphicalModel from the fitted potentials at the end.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.errors import ConfigError, EstimationError
from vertisynth.core.factor import Factor

from .graph import JunctionTree

# records drawn at once when sampling: the work arrays of a block stay small (docs/scale.md, fourth session)
SAMPLE_BLOCK_ROWS = 131_072
# numpy's hypergeometric draw needs ngood + nbad below 10**9 ("round" sampling in blocks draws from group counts)
HYPERGEOMETRIC_MAX = 10**9
# a marginal's elimination step over at most this many cells (all axes of both tables) skips einsum's path search
EINSUM_DIRECT_CELLS = 1 << 15
# the cells of the messages and summed tables a model keeps for its marginals (float64: 128 MB); past it they are
# recomputed
MESSAGE_CACHE_CELLS = 1 << 24
# sub-domains of a marginal's answers, per domain (a few domains at a time): id -> (domain, attrs -> sub-domain)
_SUB_DOMAINS: dict[int, tuple[Domain, dict[tuple[str, ...], Domain]]] = {}


def code_dtype(domain) -> np.dtype:
    """The smallest unsigned integer type that holds every code of the domain with a spare top bit, so that
    code + 1 (a bin's upper edge in `ColumnCodec.decode`) cannot wrap around."""
    top = max(domain.shape, default=1)
    return np.dtype(np.uint8 if top <= 2**7 else np.uint16 if top <= 2**15 else np.uint32 if top <= 2**31
                    else np.int64)


def sum_out(a: np.ndarray, drop: tuple[int, ...]) -> np.ndarray:
    """`a` summed over the axes `drop`, the others kept in order. With several axes to drop this transposes the
    kept axes to the front and sums one contiguous block per kept cell: numpy's multi-axis reduce walks many
    small axes slowly (a 16-binary-attribute clique: about 9x slower than this)."""
    if not drop:
        return a
    if len(drop) == 1:
        return a.sum(axis=drop)
    keep = tuple(i for i in range(a.ndim) if i not in drop)
    shape = tuple(a.shape[i] for i in keep)
    flat = np.transpose(a, keep + tuple(drop)).reshape(int(np.prod(shape, dtype=np.int64)), -1)
    return flat.sum(axis=1).reshape(shape)


class _TooManyAxes(Exception):
    """A marginal's contraction would name more axes than einsum can (52): eliminate with Factors instead."""


class GraphicalModel:
    """A distribution p(x) ∝ Π_C exp(θ_C[x_C]) over a junction tree's cliques, scaled to `total` records."""

    def __init__(self, tree: JunctionTree, log_potentials: Sequence[np.ndarray] | None = None, total: float = 1.0,
                 _schedule: dict | None = None):
        self.tree = tree
        self.domain = tree.domain
        # the message schedule depends on the tree only; estimation passes it on between trial models
        self._schedule = _schedule if _schedule is not None else self._make_schedule(tree)
        self.shapes = self._schedule["shapes"]
        if log_potentials is None:
            log_potentials = [np.zeros(s) for s in self.shapes]
        for c, th, s in zip(tree.cliques, log_potentials, self.shapes):
            if th.shape != s:
                raise ConfigError(f"potential of clique {list(c)} has shape {th.shape}, expected {s}")
        self.theta = [np.asarray(t, float) for t in log_potentials]
        self.total = float(total)
        self._order = self._schedule["order"]
        self._beliefs: list[np.ndarray] | None = None
        self._cond_cache: dict[tuple, object] = {}
        self._msg_cells = 0
        self._part_cache: dict[tuple[str, ...], np.ndarray] = {}

    @staticmethod
    def _make_schedule(tree: JunctionTree) -> dict:
        dom = tree.domain
        cl = tree.cliques
        order = tree.order()
        nb = tree.neighbors()
        steps = {}
        for i in range(len(cl)):
            for j in nb[i]:
                sep = tree.separator(i, j)
                drop = tuple(k for k, a in enumerate(cl[i]) if a not in sep)
                shape = tuple(dom.size(a) if a in sep else 1 for a in cl[j])
                steps[(i, j)] = (drop, shape)
        return {"order": order, "neighbors": nb, "steps": steps,
                "shapes": [dom.project(c).shape for c in cl], "domains": [dom.project(c) for c in cl]}

    def with_potentials(self, log_potentials: Sequence[np.ndarray], total: float | None = None) -> GraphicalModel:
        """A model on the same tree (sharing its message schedule) with other potentials."""
        return GraphicalModel(self.tree, log_potentials, self.total if total is None else total, self._schedule)

    # -- helpers ------------------------------------------------------------------------------
    def _drop_axes(self, clique: tuple[str, ...], keep: Iterable[str]) -> tuple[int, ...]:
        keep = set(keep)
        return tuple(i for i, a in enumerate(clique) if a not in keep)

    # -- inference ----------------------------------------------------------------------------
    def set_potentials(self, log_potentials: Sequence[np.ndarray]) -> None:
        self.theta = [np.asarray(t, float) for t in log_potentials]
        self._beliefs = None
        self._cond_cache = {}
        self._msg_cells = 0
        self._part_cache = {}

    def calibrate(self) -> list[np.ndarray]:
        """Log clique marginals (each logsumexps to 0 within its tree component)."""
        with np.errstate(divide="ignore"):
            return [np.log(p) for p in self.clique_probs()]

    def clique_probs(self) -> list[np.ndarray]:
        """Calibrated clique marginals as probabilities, by sum-product belief propagation.

        Potentials enter as exp(θ − max θ) (the log-space shift keeps them in range), and every message
        is rescaled to sum to 1, so nothing overflows and tiny values only underflow below e^-700 of a
        clique's largest cell. One exp per clique and plain sums per message: much cheaper than logsumexp.
        """
        if self._beliefs is not None:
            return self._beliefs
        nb = self._schedule["neighbors"]
        steps = self._schedule["steps"]
        psi = [np.exp(t - t.max()) for t in self.theta]
        msgs: dict[tuple[int, int], np.ndarray] = {}

        def send(i: int, j: int) -> None:
            acc = psi[i]
            for k in nb[i]:
                if k != j:
                    acc = acc * msgs[(k, i)]
            drop, shape = steps[(i, j)]
            m = sum_out(acc, drop)
            msgs[(i, j)] = (m / m.sum()).reshape(shape)

        with np.errstate(invalid="ignore"):   # 0/0 is caught below and redone in log space
            self._pass_messages(send)
            beliefs = []
            for i in range(len(self.theta)):
                b = psi[i]
                for k in nb[i]:
                    b = b * msgs[(k, i)]
                beliefs.append(b / b.sum())
        if not all(np.all(np.isfinite(b)) for b in beliefs):
            # a message or belief underflowed to all zeros (cliques whose potentials favour different cells by
            # more than e^700): 0/0 gave NaN beliefs, which sampled a normal-looking table. Redo in log space.
            beliefs = self._log_space_beliefs()
        self._beliefs = beliefs
        return beliefs

    def _pass_messages(self, send) -> None:
        """One collect pass (leaves to root) and one distribute pass (root to leaves): `send(i, j)` per edge."""
        for node, parent in reversed(self._order):
            if parent is not None:
                send(node, parent)
        for node, parent in self._order:
            if parent is not None:
                send(parent, node)

    def _log_space_beliefs(self) -> list[np.ndarray]:
        """`clique_probs` with log-messages (logsumexp): slower, but no product of potentials underflows."""
        from scipy.special import logsumexp

        nb, steps = self._schedule["neighbors"], self._schedule["steps"]
        lpsi = [t - t.max() for t in self.theta]
        msgs: dict[tuple[int, int], np.ndarray] = {}

        def send(i: int, j: int) -> None:
            acc = lpsi[i]
            for k in nb[i]:
                if k != j:
                    acc = acc + msgs[(k, i)]
            drop, shape = steps[(i, j)]
            m = logsumexp(acc, axis=drop) if drop else acc
            msgs[(i, j)] = (m - logsumexp(m)).reshape(shape)

        self._pass_messages(send)
        beliefs = []
        for i in range(len(self.theta)):
            b = lpsi[i]
            for k in nb[i]:
                b = b + msgs[(k, i)]
            beliefs.append(np.exp(b - logsumexp(b)))
        if not all(np.all(np.isfinite(b)) for b in beliefs):
            raise EstimationError("the model's beliefs are not finite even in log space (its cliques give no cell "
                                  "positive mass together): refused rather than sampled from")
        return beliefs

    def clique_marginals(self) -> list[Factor]:
        """Calibrated clique tables in counts (summing to `total`)."""
        return [Factor(d, v) for d, v in zip(self._schedule["domains"], self.clique_counts())]

    def clique_counts(self) -> list[np.ndarray]:
        """The same tables as plain arrays (axes in each clique's attribute order)."""
        return [self.total * p for p in self.clique_probs()]

    def _components(self) -> list[set[int]]:
        comps: list[set[int]] = []
        for node, parent in self._order:
            if parent is None:
                comps.append({node})
            else:
                comps[-1].add(node)
        return comps

    def marginal(self, attrs_: Sequence[str]) -> Factor:
        """Exact marginal (counts) on any attribute set, in the order given."""
        attrs_ = self.domain.check(attrs_)
        if not attrs_:
            return Factor(self.domain.project([]), np.asarray(self.total))
        i = self.tree.clique_for(attrs_)
        if i is not None:
            c = self.tree.cliques[i]
            drop = self._drop_axes(c, attrs_)
            vals = self.total * sum_out(self.clique_probs()[i], drop)
            kept = tuple(a for a in c if a in attrs_)
            if kept != attrs_:
                vals = np.transpose(vals, [kept.index(a) for a in attrs_])
            return Factor(self._sub_domain(attrs_), vals)
        # each component's share, then their outer product (independent components), as Factor products did
        arr, axes = None, []
        split = self._split(attrs_)
        for comp, inside in split:
            if len(split) == 1:
                part = self._component_marginal(comp, inside)
            else:   # a component's share recurs across queries (a triple over three components: AIM asks each
                # attribute's one-way marginal ~700 times a round), so it is computed once per model
                key = tuple(inside)
                if key not in self._part_cache:
                    self._part_cache[key] = self._component_marginal(comp, inside)
                part = self._part_cache[key]
            arr = part if arr is None else np.multiply.outer(arr, part)
            axes += inside
        arr = np.transpose(arr * self.total, [axes.index(a) for a in attrs_])
        return Factor(self._sub_domain(attrs_), arr)

    def _sub_domain(self, attrs_: tuple[str, ...]) -> Domain:
        """`domain.project(attrs_)`, kept per domain across models (AIM asks the same ~10^4 marginals of every
        round's model, each on a new tree)."""
        entry = _SUB_DOMAINS.get(id(self.domain))
        if entry is None or entry[0] is not self.domain:   # (the domain is held, so its id is not reused)
            if len(_SUB_DOMAINS) >= 8:
                _SUB_DOMAINS.clear()
            entry = _SUB_DOMAINS[id(self.domain)] = (self.domain, {})
        doms = entry[1]
        if attrs_ not in doms:
            doms[attrs_] = self.domain.project(attrs_)
        return doms[attrs_]

    def _lookups(self) -> dict:
        """Per-tree lookups for `marginal` (components, each attribute's component and smallest clique in it,
        breadth-first orders by root), kept in the schedule that every model on this tree shares: AIM asks for
        thousands of marginals per fitted model, and these were rebuilt for each."""
        s = self._schedule
        if "lookups" not in s:
            comps = self._components()
            cl = self.tree.cliques
            comp_of: dict[str, int] = {}
            smallest: dict[str, int] = {}
            for ci, comp in enumerate(comps):
                for a in dict.fromkeys(a for k in comp for a in cl[k]):
                    comp_of[a] = ci
                    smallest[a] = min((k for k in comp if a in cl[k]), key=lambda k: self.domain.project(cl[k]).size())
            s["lookups"] = {"comps": comps, "comp_of": comp_of, "smallest": smallest, "orders": {}}
        return s["lookups"]

    def _tree_order(self, root: int) -> list[tuple[int, int | None]]:
        orders = self._lookups()["orders"]
        if root not in orders:
            orders[root] = self.tree.order(root)
        return orders[root]

    def _split(self, attrs_: Sequence[str]) -> list[tuple[set[int], list[str]]]:
        """The tree components `attrs_` fall in (in component order), each with its attributes (in attrs_ order)."""
        look = self._lookups()
        by: dict[int, list[str]] = {}
        for a in attrs_:
            by.setdefault(look["comp_of"][a], []).append(a)
        return [(look["comps"][ci], by[ci]) for ci in sorted(by)]

    def _component_marginal(self, comp: set[int], attrs_: list[str]) -> np.ndarray:
        """Probability table on attrs_ (all inside one tree component, axes in that order) by elimination on a
        subtree."""
        # the cliques needed: for each attribute its smallest clique, plus the tree paths joining them
        smallest = self._lookups()["smallest"]
        needed = sorted({smallest[a] for a in attrs_})
        cl = self.tree.cliques
        # the top: the needed clique holding the most cells of the query, so the attributes elsewhere come to it
        # in messages (shared across queries, below) and the largest part of the query never travels
        top = max(needed, key=lambda k: math.prod(self.domain.size(a) for a in attrs_ if a in cl[k]))
        away = [a for a in attrs_ if a not in cl[top]]
        parent = dict(self._tree_order(top))
        sub = {top}
        for a in away:
            k = smallest[a]
            while k not in sub:
                sub.add(k)
                k = parent[k]
        # eliminate towards the top: each clique of the subtree below it sends its parent a message over the
        # queried attributes on its side of the edge and the separator (its conditional p_k / p_sep, 0 where a
        # separator has no mass, times its children's messages, every other attribute summed out), and the top's
        # belief takes them in. A message depends on the edge and the queried attributes behind it alone, so it is
        # kept per model: AIM's candidates that share an attribute far off share its message along the path (a
        # top-down pass carried each candidate's other attributes down that whole path)
        par_in_sub = {n: p for n, p in self._tree_order(top) if n in sub}
        kids: dict[int, list[int]] = {k: [] for k in sub}
        for n, p in par_in_sub.items():
            if p is not None:
                kids[p].append(n)
        below: dict[int, set[str]] = {}   # the queried attributes whose smallest clique is on k's side

        def behind(k: int) -> set[str]:
            if k not in below:
                below[k] = {a for a in away if smallest[a] == k}.union(*(behind(j) for j in kids[k]))
            return below[k]

        try:
            axes, arr = self._gather(top, None, set(attrs_), kids, behind)
        except _TooManyAxes:
            return self._eliminate(sub, top, par_in_sub, attrs_)
        return np.transpose(arr, [axes.index(a) for a in attrs_])

    def _gather(self, k: int, parent: int | None, keep: set[str], kids: dict, behind) -> tuple[list[str], np.ndarray]:
        """Clique k's table (its belief at the top, else its conditional on the separator with `parent`) times its
        subtree children's messages, summed onto `keep` (the queried attributes behind k, and the separator);
        below the top each such message is kept per model under (k, parent, queried attributes behind k)."""
        cl = self.tree.cliques
        key = ("msg", k, parent, tuple(sorted(keep)))
        if parent is not None and key in self._cond_cache:
            return self._cond_cache[key]
        seps = [set(self.tree.separator(j, k)) for j in kids[k]]
        # the clique's own table summed first onto what the output and its children's messages need
        axes = [a for a in cl[k] if a in keep or any(a in s for s in seps)]
        arr = self._summed(k, parent, tuple(axes))
        for i, j in enumerate(kids[k]):
            j_axes, msg = self._gather(j, k, behind(j) | seps[i], kids, behind)
            rest = set().union(*seps[i + 1:])
            ids = {a: n for n, a in enumerate(dict.fromkeys(axes + j_axes))}
            if len(ids) > 52:   # numpy's einsum names at most 52 axes
                raise _TooManyAxes
            out = [a for a in ids if a in keep or a in rest]
            # a large contraction goes to BLAS (optimize=True: tensordot); a small one straight to numpy's C loop,
            # where finding the path cost ~10x the sum (zoo wide: ~10^5 small contractions a round)
            dims = dict(zip(axes, arr.shape))
            dims.update(zip(j_axes, msg.shape))
            big = math.prod(dims.values()) > EINSUM_DIRECT_CELLS
            arr = np.einsum(arr, [ids[a] for a in axes], msg, [ids[a] for a in j_axes], [ids[a] for a in out],
                            optimize=big)
            axes = out
        if parent is not None and self._msg_cells + arr.size <= MESSAGE_CACHE_CELLS:
            self._msg_cells += arr.size
            self._cond_cache[key] = (axes, arr)
        return axes, arr

    def _conditional(self, k: int, parent: int) -> np.ndarray:
        """Clique k's belief divided by its separator with `parent` (cached with the beliefs)."""
        cache = self._cond_cache
        if (k, parent) not in cache:
            c = self.tree.cliques[k]
            sep = self.tree.separator(k, parent)
            b = self.clique_probs()[k]
            ps = sum_out(b, self._drop_axes(c, sep)).reshape([b.shape[i] if a in sep else 1 for i, a in enumerate(c)])
            cache[(k, parent)] = np.divide(b, ps, out=np.zeros_like(b), where=ps != 0)
        return cache[(k, parent)]

    def _summed(self, k: int, parent: int | None, keep: tuple[str, ...]) -> np.ndarray:
        """Clique k's belief (parent None) or conditional on its separator with `parent`, summed onto `keep` (in
        the clique's order); kept with the beliefs: AIM's candidates in a round ask the same few sums again and
        again (every triple with an attribute in a clique far off sums that clique the same way)."""
        cache = self._cond_cache
        key = (k, parent, keep)
        if key in cache:
            return cache[key]
        table = self.clique_probs()[k] if parent is None else self._conditional(k, parent)
        drop = self._drop_axes(self.tree.cliques[k], keep)
        out = sum_out(table, drop)
        if drop and self._msg_cells + out.size <= MESSAGE_CACHE_CELLS:   # the kept sums share the messages' budget
            self._msg_cells += out.size
            cache[key] = out
        return out

    def _eliminate(self, sub: set[int], top: int, par_in_sub: dict, attrs_: list[str]) -> np.ndarray:
        """The same table by multiplying Factors along the subtree (any number of attributes)."""
        cl = self.tree.cliques
        beliefs = self.clique_probs()
        visit = [n for n, _ in self.tree.order(top) if n in sub]
        probs = {k: Factor(self.domain.project(cl[k]), beliefs[k]) for k in sub}
        f = probs[visit[0]]
        remaining = visit[1:]
        f = f.project([a for a in f.attributes if a in attrs_ or any(a in cl[k] for k in remaining)])
        for idx, k in enumerate(remaining):
            sep = self.tree.separator(k, par_in_sub[k])
            f = f * probs[k] / probs[k].project(sep)
            later = remaining[idx + 1:]
            f = f.project([a for a in f.attributes if a in attrs_ or any(a in cl[j] for j in later)])
        return f.transpose([a for a in attrs_]).values

    # -- sampling -----------------------------------------------------------------------------
    def sample(self, n: int, rng: np.random.Generator, method: str = "sample",
               block_rows: int = SAMPLE_BLOCK_ROWS) -> Dataset:
        """n records along the tree. method: "sample" (i.i.d. draws) or "round" (PrivMRF's low-variance
        rounding: attribute by attribute, floor of expected counts plus a draw on the remainders, per group of
        records that agree on the separator and the attributes drawn before).

        Records are drawn in blocks of `block_rows` (`sample_blocks`), so the work per row does not grow with
        n and the working memory is one block; the table is held in the smallest unsigned integer type of
        the domain. Up to `block_rows` records this is the one-shot draw (the same table for the same rng);
        beyond, the same distribution (see `sample_blocks`)."""
        n, block_rows = self._check_sampling(n, method, block_rows)
        codes = np.empty((n, len(self.domain)), dtype=code_dtype(self.domain))
        start = 0
        for part in self.sample_blocks(n, rng, method, block_rows):
            codes[start:start + part.n] = part.codes
            start += part.n
        return Dataset(codes, self.domain)

    def sample_blocks(self, n: int, rng: np.random.Generator, method: str = "sample",
                      block_rows: int = SAMPLE_BLOCK_ROWS) -> Iterator[Dataset]:
        """The n records of `sample` as consecutive blocks of at most `block_rows` (memory: one block, plus
        the model's tables for "round"). n <= block_rows: the one-shot draw. Otherwise, "sample": independent
        blocks of i.i.d. records (the same law). "round": the rounded counts of every step are drawn first
        from the tables alone (a step's group sizes are the counts of the attributes drawn before it, known
        from the earlier steps' counts), then each block's records take their values from what is left of
        their group's counts, without replacement (a multivariate hypergeometric draw per block, one
        category at a time) in random order within the block: over the blocks, each group's values are a
        uniformly random arrangement of its counts, as in the one-shot draw (the same law, not the same
        table for a seed)."""
        n, block_rows = self._check_sampling(n, method, block_rows)
        dtype = code_dtype(self.domain)
        if n <= block_rows:
            yield Dataset(self._sample_once(n, rng, method).astype(dtype), self.domain)
            return
        steps = self._sampling_steps(method)
        left = self._round_counts(steps, n, rng) if method == "round" else None
        for start in range(0, n, block_rows):
            b = min(block_rows, n - start)
            if left is None:
                yield Dataset(self._sample_once(b, rng, method, steps).astype(dtype), self.domain)
            else:
                yield Dataset(self._take_block(steps, left, b, rng).astype(dtype), self.domain)

    def _check_sampling(self, n: int, method: str, block_rows: int) -> tuple[int, int]:
        if method not in ("sample", "round"):
            raise ConfigError(f"sampling method must be 'sample' or 'round', got {method!r}")
        n, block_rows = int(n), int(block_rows)
        if n < 0:
            raise ConfigError(f"cannot sample {n} records")
        if block_rows < 1:
            raise ConfigError(f"sampling block_rows must be at least 1, got {block_rows}")
        if not all(np.all(t < np.inf) for t in self.theta):   # NaN or +inf: a fit gone wrong, not a distribution
            raise EstimationError("the model's potentials are NaN or infinite: refused rather than sampled from")
        if method == "round" and n > block_rows and n >= HYPERGEOMETRIC_MAX:
            raise ConfigError(f"'round' sampling in blocks draws at most {HYPERGEOMETRIC_MAX - 1:,} records, "
                              f"got {n:,}: sample in several calls or with method 'sample'")
        return n, block_rows

    def _sampling_steps(self, method: str) -> list[tuple[tuple[str, ...], tuple[str, ...], np.ndarray]]:
        """(given, new, conditional table of new given `given`) per step, in drawing order: the tables do not
        depend on the records, so the blocks share them."""
        col_steps = []
        beliefs = self.clique_probs()
        for node, parent in self._order:
            c = self.tree.cliques[node]
            p = beliefs[node]
            sep = self.tree.separator(node, parent) if parent is not None else ()
            rest = tuple(a for a in c if a not in sep)
            if not rest:
                continue
            # "sample": all of `rest` at once; "round": one attribute at a time conditioned on the separator and
            # the attributes drawn before it (as PrivMRF's reference does), so every prefix marginal is rounded
            steps = [rest] if method == "sample" else [(a,) for a in rest]
            given = sep
            for new in steps:
                keep = given + new
                drop = tuple(i for i, a in enumerate(c) if a not in keep)
                kept = tuple(a for a in c if a in keep)
                marg = np.transpose(sum_out(p, drop), [kept.index(a) for a in keep])
                table = marg.reshape(int(np.prod([self.domain.size(a) for a in given], dtype=int)), -1)
                rows = table.sum(axis=1, keepdims=True)
                cond = np.divide(table, rows, out=np.full(table.shape, 1.0 / table.shape[1]), where=rows > 0)
                col_steps.append((given, new, cond))
                given = keep
        return col_steps

    def _sample_once(self, n: int, rng: np.random.Generator, method: str,
                     steps: list | None = None) -> np.ndarray:
        """n records in one draw (all of them in each step's arrays): the codes, int64."""
        codes = np.full((n, len(self.domain)), -1, dtype=np.int64)
        col = {a: j for j, a in enumerate(self.domain.attributes)}
        for given, new, cond in (self._sampling_steps(method) if steps is None else steps):
            idx = (np.ravel_multi_index(tuple(codes[:, col[a]] for a in given), [self.domain.size(a) for a in given])
                   if given else np.zeros(n, dtype=np.int64))
            draw = self._draw(cond, idx, rng) if method == "sample" else self._round(cond, idx, rng)
            vals = np.unravel_index(draw, [self.domain.size(a) for a in new])
            for a, v in zip(new, vals):
                codes[:, col[a]] = v
        return codes

    def _round_counts(self, steps: list, n: int, rng: np.random.Generator) -> list[np.ndarray]:
        """Every step's rounded counts (groups x categories, int64) for n records, from the tables alone: a
        step's group sizes are the counts over its `given` attributes, a projection of an earlier step's
        counts (the separator lies in an earlier clique, drawn in full before)."""
        done: list[tuple[tuple[str, ...], np.ndarray]] = []   # (attributes, counts over them in that order)
        out = []
        for given, new, cond in steps:
            if not given:
                groups = np.array([n], dtype=np.int64)
            else:
                attrs_, table = next((a, t) for a, t in reversed(done) if set(given) <= set(a))
                drop = tuple(i for i, a in enumerate(attrs_) if a not in given)
                kept = tuple(a for a in attrs_ if a in given)
                groups = np.transpose(sum_out(table, drop), [kept.index(a) for a in given]).reshape(-1)
            counts = self._round_counts_of(cond, groups, rng)
            out.append(counts)
            done.append((given + new, counts.reshape([self.domain.size(a) for a in given + new])))
        return out

    def _take_block(self, steps: list, left: list[np.ndarray], b: int, rng: np.random.Generator) -> np.ndarray:
        """b records whose values come, step by step, from what is `left` of their group's rounded counts
        (updated in place): per group, a multivariate hypergeometric draw of the block's share, then the
        values in random order among the group's records of the block."""
        codes = np.full((b, len(self.domain)), -1, dtype=np.int64)
        col = {a: j for j, a in enumerate(self.domain.attributes)}
        for (given, new, _), rest in zip(steps, left):
            idx = (np.ravel_multi_index(tuple(codes[:, col[a]] for a in given), [self.domain.size(a) for a in given])
                   if given else np.zeros(b, dtype=np.int64))
            want = np.bincount(idx, minlength=rest.shape[0])
            present = np.flatnonzero(want)
            have = rest[present]
            take = np.zeros_like(have)
            need = want[present].copy()
            after = np.cumsum(have[:, ::-1], axis=1)[:, ::-1]   # after[:, c] = have[:, c:].sum(axis=1)
            for c in range(have.shape[1] - 1):
                if not need.any():
                    break
                take[:, c] = rng.hypergeometric(have[:, c], after[:, c + 1], need)
                need -= take[:, c]
            take[:, -1] += need
            rest[present] -= take
            if (rest[present] < 0).any():   # cannot happen: the counts of every group sum to its records
                raise AssertionError("sampling took more records of a group than its counts hold")
            slot = np.empty(rest.shape[0], dtype=np.int64)
            slot[present] = np.arange(len(present))
            draw = self._assign(take, slot[idx], rng)
            vals = np.unravel_index(draw, [self.domain.size(a) for a in new])
            for a, v in zip(new, vals):
                codes[:, col[a]] = v
        return codes

    @staticmethod
    def _draw(cond: np.ndarray, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One i.i.d. category per record from its row's distribution. Equivalent and linear-time: the
        category counts of each row's m records are Multinomial(m, row) (one vectorised draw for all
        rows), and handing those values to the row's records in uniformly random order makes every
        record's value an independent draw (no per-record binary search over the CDFs)."""
        groups = np.bincount(rows, minlength=cond.shape[0])
        p = np.clip(cond, 0.0, None)
        p /= p.sum(axis=1, keepdims=True)  # exact sums: multinomial refuses rows summing above 1
        counts = rng.multinomial(groups, p)
        return GraphicalModel._assign(counts, rows, rng)

    @staticmethod
    def _round(cond: np.ndarray, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Low-variance rounding within each separator group (`_round_counts_of`), then the values are
        shuffled among the group's records."""
        counts = GraphicalModel._round_counts_of(cond, np.bincount(rows, minlength=cond.shape[0]), rng)
        return GraphicalModel._assign(counts, rows, rng)

    @staticmethod
    def _round_counts_of(cond: np.ndarray, groups: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Per group of m records: ⌊m·p⌋ of each category, the remaining records to categories drawn without
        replacement with probability ∝ the fractional parts (Gumbel top-k)."""
        expected = groups[:, None] * cond
        base = np.floor(expected).astype(np.int64)
        left = groups - base.sum(axis=1)
        frac = expected - base
        with np.errstate(divide="ignore"):
            keys = np.log(frac) + rng.gumbel(size=frac.shape)
        ranks = np.argsort(np.argsort(-keys, axis=1), axis=1)
        return base + (ranks < left[:, None])

    @staticmethod
    def _assign(counts: np.ndarray, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Give row r's records the values counted in counts[r] (category c counts[r, c] times), in
        uniformly random order within the row: records ordered by row with random ties (a stable radix
        sort of a small integer key after a random permutation) line up with the values' row blocks."""
        values = np.repeat(np.tile(np.arange(counts.shape[1]), counts.shape[0]), counts.ravel())
        key = rows.astype(np.uint16 if counts.shape[0] <= 2**16 else np.uint32 if counts.shape[0] <= 2**32 else np.int64)
        perm = rng.permutation(rows.shape[0])
        order = perm[np.argsort(key[perm], kind="stable")]
        out = np.empty(rows.shape[0], dtype=np.int64)
        out[order] = values
        return out
