"""Calibrator: the belief propagation inside estimation, batched by tree depth on flat arrays.

Estimation only ever changes a clique's log-potential by sums of measurement-shaped tables, so the
model is kept as θ_C = base_C + Σ_{m assigned to C} φ_m (φ_m on the measurement's attributes, broadcast
onto C), and one call maps the flat vector of all φ_m to the model's marginals on every measurement.

Why a separate code path from GraphicalModel.clique_probs: on small models the per-clique numpy calls
(a few microseconds each) are the whole cost, so here all cliques at the same depth of the tree are
handled together: clique tables live in one flat array, messages in another, and a message pass over
a level is a gather plus one `np.bincount` (sum onto separators) regardless of how many cliques the
level holds. The root of each tree component is its centre, so there are as few levels as possible.
Downward messages use the Hugin form (belief summed onto the separator, divided by the upward message),
so no clique recomputes the product of all-but-one incoming messages.

Large cliques (at least BIG_MIN_CELLS cells) are handled one by one as ndarrays instead: a flat
gather/bincount costs several times more per cell than numpy's axis reductions. Their measurement
factors are first merged into a few small group tables, so exp is taken on those and the clique table
is just their broadcast product; their separators and measurements are summed out in stages (first an
axis that several targets lack, the cheapest per target served), and an axis followed by a short inner
block is summed by a matrix-vector product (BLAS), which numpy's own reduction is several times slower
than there. The message buffers are reused between calls: one Calibrator serves one thread.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from vertisynth.core.errors import EstimationError

from .graph import JunctionTree
from .model import GraphicalModel

# cliques from this size on are processed on their own (numpy axis reductions beat gather+bincount)
BIG_MIN_CELLS = 4096
# below this size a table is summed onto its targets directly (staging would only add numpy calls)
STAGE_MIN_CELLS = 4096


def _proj_index(shape: Sequence[int], keep: Sequence[bool]) -> np.ndarray:
    """For each cell of a table of `shape` (C order), the flat index of its cell in the sub-table on the
    axes marked in `keep` (kept axes in their original order)."""
    sub = [s for s, k in zip(shape, keep) if k]
    n = int(np.prod(sub, dtype=np.int64))
    bshape = [s if k else 1 for s, k in zip(shape, keep)]
    return np.broadcast_to(np.arange(n, dtype=np.int64).reshape(bshape), tuple(shape)).ravel()


def _sum_block(t: np.ndarray, i: int, j: int) -> np.ndarray:
    """t summed over its contiguous axes i..j-1, viewed as (A, k, B). numpy's own reduction is slow when
    the kept inner block B is short (a few cells per inner loop), so those cases go through BLAS."""
    return _run_block(t, _block_program(t.shape, i, j))


@lru_cache(maxsize=4096)
def _block_program(s: tuple[int, ...], i: int, j: int) -> tuple:
    """The sizes _sum_block needs for a table of shape s, computed once per (shape, axes): the calibrator
    sums the same shapes thousands of times, and np.prod on a tuple costs microseconds each time."""
    a, k, b = math.prod(s[:i]), math.prod(s[i:j]), math.prod(s[j:])
    ones = np.ones(k)
    ones.setflags(write=False)
    return a, k, b, ones, s[:i] + s[j:]


def _run_block(t: np.ndarray, prog: tuple) -> np.ndarray:
    a, k, b, ones, out = prog
    if b == 1:
        r = t.reshape(a, k) @ ones
    elif a == 1:
        r = t.reshape(k, b).sum(axis=0)
    else:
        r = np.matmul(ones, t.reshape(a, k, b))
    return r.reshape(out)


@lru_cache(maxsize=4096)
def _sum_program(shape: tuple[int, ...], drop: tuple[int, ...]) -> tuple:
    """_sum_out's block programs for a table of `shape`: one contiguous block of axes at a time."""
    blocks: list[list[int]] = []
    for a in drop:
        if blocks and blocks[-1][1] == a:
            blocks[-1][1] = a + 1
        else:
            blocks.append([a, a + 1])
    progs, removed = [], 0
    for i, j in blocks:
        prog = _block_program(shape, i - removed, j - removed)
        progs.append(prog)
        shape = prog[4]
        removed += j - i
    return tuple(progs)


def _sum_out(t: np.ndarray, drop: tuple[int, ...]) -> np.ndarray:
    """t summed over the axes `drop` (ascending), one contiguous block of axes at a time, leading first."""
    for prog in _sum_program(t.shape, drop):
        t = _run_block(t, prog)
    return t


def _sum_cost(shape: tuple[int, ...], axis: int) -> float:
    """Relative cost of summing one axis out of a table (see _sum_block): a pass over the table, plus
    a penalty when the kept inner block (or, for the last axis, the summed block) is short."""
    size = float(np.prod(shape))
    inner = float(np.prod(shape[axis + 1:])) if axis + 1 < len(shape) else float(shape[axis])
    return size * (1.0 + 32.0 / inner) if axis > 0 else size


class _Level:
    __slots__ = ("a", "b", "child_cols", "sep_map", "up0", "up1", "msg_starts", "msg_lens", "down_idx",
                 "pc_cell", "pc_sep", "big")


class Calibrator:
    """Measurement marginals of θ_C = base_C + Σ_m φ_m, for a fixed tree and measurement assignment.

    scopes[k] are measurement k's attributes in the order of its clique `assign[k]` (domain order);
    base[i], if given, is a fixed log-potential on clique i (a warm start)."""

    def __init__(self, tree: JunctionTree, scopes: Sequence[tuple[str, ...]], assign: Sequence[int],
                 base: Sequence[np.ndarray] | None = None, big_min_cells: int | None = None):
        self.tree = tree
        dom = tree.domain
        cl = tree.cliques
        nc = len(cl)
        self.shapes = [dom.project(c).shape for c in cl]
        sizes = [int(np.prod(s, dtype=np.int64)) for s in self.shapes]
        self.scopes = [tuple(s) for s in scopes]
        self._base_tables = base   # for `_exact` (kept as given: the per-clique log-potentials)
        self.assign = list(assign)
        self.meas_shapes = [dom.project(s).shape for s in self.scopes]
        msz = [int(np.prod(s, dtype=np.int64)) for s in self.meas_shapes]
        self.meas_off = np.concatenate([[0], np.cumsum(msz)]).astype(np.int64)
        self.M = int(self.meas_off[-1])
        by_clique: list[list[int]] = [[] for _ in range(nc)]
        for k, ci in enumerate(self.assign):
            if self.scopes[k] != tuple(a for a in cl[ci] if a in self.scopes[k]) or not set(self.scopes[k]) <= set(cl[ci]):
                raise ValueError(f"measurement on {self.scopes[k]} is not inside clique {cl[ci]} in its order")
            by_clique[ci].append(k)
        self.by_clique = by_clique
        has_base = [base is not None and bool(np.any(base[i])) for i in range(nc)]

        # -- tree layout: each component rooted at its centre, nodes grouped by depth -----------------
        nb = tree.neighbors()
        parent: dict[int, int | None] = {}
        depth: dict[int, int] = {}
        bfs: list[int] = []
        seen: set[int] = set()
        for start in range(nc):
            if start in seen:
                continue
            comp = self._component(start, nb)
            seen |= comp
            root = min(sorted(comp), key=lambda r: self._height(r, nb))
            parent[root], depth[root] = None, 0
            queue = [root]
            while queue:
                node = queue.pop(0)
                bfs.append(node)
                for m in nb[node]:
                    if m not in parent:
                        parent[m], depth[m] = node, depth[node] + 1
                        queue.append(m)
        self.parent = parent
        children = {i: [m for m in nb[i] if parent.get(m) == i] for i in range(nc)}
        self.children = children
        H = max(depth.values()) if depth else 0
        self.H = H
        rank = {node: r for r, node in enumerate(bfs)}
        by_depth = [sorted((i for i in range(nc) if depth[i] == L), key=rank.get) for L in range(H + 1)]

        def sep(i: int, j: int) -> tuple[str, ...]:
            return tuple(a for a in cl[i] if a in cl[j])

        # messages: one table per non-root node (its separator with its parent), laid out by depth;
        # the upward and downward message on an edge share the slot layout
        up_off: dict[int, int] = {}
        sep_shape: dict[int, tuple[int, ...]] = {}
        pos = 0
        for L in range(1, H + 1):
            for i in by_depth[L]:
                up_off[i] = pos
                sep_shape[i] = dom.project(sep(i, parent[i])).shape
                pos += int(np.prod(sep_shape[i], dtype=np.int64))
        self.n_msg = pos
        self.up_off, self.sep_shape = up_off, sep_shape
        pad = pos  # index of the constant 1 appended to the message arrays

        # -- large cliques: processed one by one ------------------------------------------------------
        big_min_cells = BIG_MIN_CELLS if big_min_cells is None else big_min_cells
        self.big = {i for i in range(nc) if sizes[i] >= big_min_cells}
        self._plans = {i: self._big_plan(i, sep, base[i] if has_base[i] else None) for i in sorted(self.big)}

        # -- flat layout of the materialised cliques, by depth ---------------------------------------
        mat_order = [i for L in range(H + 1) for i in by_depth[L] if i not in self.big]
        self.mat_order = mat_order
        off: dict[int, int] = {}
        pos = 0
        for i in mat_order:
            off[i] = pos
            pos += sizes[i]
        self.N = pos
        self.off = off
        self.starts = np.array([off[i] for i in mat_order], dtype=np.int64)
        self.sizes = np.array([sizes[i] for i in mat_order], dtype=np.int64)

        def proj(i: int, attrs_: tuple[str, ...]) -> np.ndarray:
            return _proj_index(self.shapes[i], [a in attrs_ for a in cl[i]])

        levels = []
        for L in range(H + 1):
            lv = _Level()
            mats = [i for i in by_depth[L] if i not in self.big]
            lv.big = [i for i in by_depth[L] if i in self.big]
            lv.a = off[mats[0]] if mats else 0
            lv.b = off[mats[-1]] + sizes[mats[-1]] if mats else 0
            # children's upward messages that multiply into each cell, one column per child slot
            maxc = max((len(children[i]) for i in mats), default=0)
            cols = []
            for s in range(maxc):
                col = [up_off[children[i][s]] + proj(i, sep(children[i][s], i)) if s < len(children[i])
                       else np.full(sizes[i], pad, dtype=np.int64) for i in mats]
                cols.append(np.concatenate(col))
            lv.child_cols = cols
            if L > 0:
                lv.up0 = up_off[by_depth[L][0]]
                last = by_depth[L][-1]
                lv.up1 = up_off[last] + int(np.prod(sep_shape[last], dtype=np.int64))
                lv.sep_map = (np.concatenate([up_off[i] - lv.up0 + proj(i, sep(i, parent[i])) for i in mats])
                              if mats else np.zeros(0, dtype=np.int64))
                lv.msg_starts = np.array([up_off[i] - lv.up0 for i in by_depth[L]], dtype=np.int64)
                lv.msg_lens = np.array([int(np.prod(sep_shape[i], dtype=np.int64)) for i in by_depth[L]],
                                       dtype=np.int64)
                lv.down_idx = (np.concatenate([up_off[i] + proj(i, sep(i, parent[i])) for i in mats])
                               if mats else None)
            else:
                lv.up0 = lv.up1 = 0
                lv.down_idx = None  # roots: no message from above
            # (parent cell, child separator cell) pairs: a parent's belief summed onto its children
            pc_cell, pc_sep = [], []
            for i in mats:
                for k in children[i]:
                    pc_cell.append(off[i] - lv.a + np.arange(sizes[i], dtype=np.int64))
                    pc_sep.append(up_off[k] + proj(i, sep(k, i)))
            lv.pc_cell = np.concatenate(pc_cell) if pc_cell else None
            lv.pc_sep = np.concatenate(pc_sep) if pc_sep else None
            levels.append(lv)
        for L in range(H):  # the pairs' separator indices are relative to the next level's segment
            if levels[L].pc_sep is not None:
                levels[L].pc_sep = levels[L].pc_sep - levels[L + 1].up0
        self.levels = levels

        # -- measurements on materialised cliques: clique cell → measurement cell, and back ----------
        cell_idx, meas_idx = [], []
        for k, ci in enumerate(self.assign):
            if ci in self.big:
                continue
            cell_idx.append(off[ci] + np.arange(sizes[ci], dtype=np.int64))
            meas_idx.append(self.meas_off[k] + proj(ci, self.scopes[k]))
        self.cell_idx = np.concatenate(cell_idx) if cell_idx else np.zeros(0, dtype=np.int64)
        self.meas_idx = np.concatenate(meas_idx) if meas_idx else np.zeros(0, dtype=np.int64)
        # θ_flat = base_flat + A φ and μ_m = Aᵀ · beliefs, A the clique cell × measurement cell incidence: two
        # weighted bincounts over its entries: the sums of a CSR product in the same
        # order, without scipy.sparse (its import, ≈ 0.25 CPU s, and its Python overhead per product)
        # per measurement cell: the position of its clique among the materialised ones (its normaliser),
        # or one past the end (a constant 1) for measurements on large cliques, normalised on their own
        meas_pos = np.full(self.M, len(mat_order), dtype=np.int64)
        pos_of = {i: r for r, i in enumerate(mat_order)}
        for k, ci in enumerate(self.assign):
            if ci not in self.big:
                meas_pos[self.meas_off[k]:self.meas_off[k + 1]] = pos_of[ci]
        self.meas_pos = meas_pos
        self.base = None if base is None or not any(has_base[i] for i in mat_order) else np.zeros(self.N)
        if self.base is not None:
            for i in mat_order:
                self.base[off[i]:off[i] + sizes[i]] = np.asarray(base[i], float).ravel()
        self._up = np.ones(self.n_msg + 1)
        self._down = np.ones(self.n_msg + 1)
        self._zbuf = np.ones(len(mat_order) + 1)   # the normalisers, then a constant 1 (measurements on big cliques)
        self._meas_bounds = [(int(self.meas_off[k]), int(self.meas_off[k + 1])) for k in range(len(self.scopes))]

    # -- construction helpers ----------------------------------------------------------------------
    @staticmethod
    def _component(start: int, nb: dict[int, list[int]]) -> set[int]:
        comp, stack = {start}, [start]
        while stack:
            for m in nb[stack.pop()]:
                if m not in comp:
                    comp.add(m)
                    stack.append(m)
        return comp

    @staticmethod
    def _height(root: int, nb: dict[int, list[int]]) -> int:
        dist, frontier, h = {root: 0}, [root], 0
        while frontier:
            nxt = []
            for u in frontier:
                for m in nb[u]:
                    if m not in dist:
                        dist[m] = dist[u] + 1
                        nxt.append(m)
            if nxt:
                h += 1
            frontier = nxt
        return h

    def _big_plan(self, i: int, sep, base_i: np.ndarray | None) -> dict:
        """How clique i is handled on its own: its measurement factors merged into a few small groups
        (exp is taken on the groups, never on the clique table), the children's and parent's messages
        as broadcastable tables, and a staged reduction plan for its separators and measurements."""
        cl = self.tree.cliques
        c = cl[i]
        shape = self.shapes[i]
        size = int(np.prod(shape, dtype=np.int64))
        limit = max(size // 16, 1)

        def cells(axes: frozenset) -> int:
            return int(np.prod([shape[j] for j in axes], dtype=np.int64))

        scope_axes = {k: frozenset(c.index(a) for a in self.scopes[k]) for k in self.by_clique[i]}
        groups: list[list] = []  # [axes, members]
        for k in sorted(self.by_clique[i], key=lambda k: -cells(scope_axes[k])):
            fits = [g for g in groups if cells(g[0] | scope_axes[k]) <= max(limit, cells(g[0]))]
            if fits:
                g = min(fits, key=lambda g: cells(g[0] | scope_axes[k]))
                g[0] = g[0] | scope_axes[k]
                g[1].append(k)
            else:
                groups.append([scope_axes[k], [k]])
        plan_groups = []
        for axes, members in groups:
            gshape = tuple(shape[j] for j in sorted(axes))
            parts = []
            for k in members:
                mshape = tuple(shape[j] if j in scope_axes[k] else 1 for j in sorted(axes))
                parts.append((int(self.meas_off[k]), int(self.meas_off[k + 1]), mshape))
            plan_groups.append((gshape, tuple(shape[j] if j in axes else 1 for j in range(len(c))), parts))

        def bshape(attrs_: tuple[str, ...]) -> tuple[int, ...]:
            return tuple(shape[j] if a in attrs_ else 1 for j, a in enumerate(c))

        def drop(attrs_: tuple[str, ...]) -> tuple[int, ...]:
            return tuple(j for j, a in enumerate(c) if a not in attrs_)

        par = self.parent[i]
        kids = [(k, self.up_off[k], int(np.prod(self.sep_shape[k], dtype=np.int64)), bshape(sep(k, i)))
                for k in self.children[i]]
        up = ((self.up_off[i], drop(sep(i, par)), bshape(sep(i, par))) if par is not None else None)
        # targets of the distribute phase: each child's separator, each measurement
        targets = [("down", k, frozenset(j for j, a in enumerate(c) if a in sep(k, i))) for k in self.children[i]]
        targets += [("meas", k, scope_axes[k]) for k in self.by_clique[i]]
        steps: list[tuple] = []  # (source table, axes to sum, then its block programs: see below)
        outputs: list[tuple[str, int, int]] = []
        self._plan_reductions(tuple(range(len(c))), shape, 0, targets, steps, outputs)
        base_exp = None
        if base_i is not None:
            b = np.asarray(base_i, float)
            base_exp = np.exp(b - b.max())  # fixed, so exponentiated once
        # the block programs of every staged sum, fixed by the shapes: no per-call lookup in _big_distribute
        tshapes = [tuple(shape)]
        for n_, (src, drop_, _) in enumerate(steps):
            progs = _sum_program(tshapes[src], drop_)
            tshapes.append(progs[-1][4] if progs else tshapes[src])
            steps[n_] = (src, drop_, progs)
        if up is not None:
            up = up + (_sum_program(tuple(shape), up[1]),)
        fshapes = [gb for _, gb, _ in plan_groups] + ([shape] if base_exp is not None else []) + [kb for *_, kb in kids]
        return {"shape": shape, "groups": plan_groups, "kids": kids, "up": up, "steps": steps,
                "outputs": outputs, "base": base_exp, "merge": self._merge_plan(fshapes, size)}

    @staticmethod
    def _merge_plan(fshapes: list[tuple[int, ...]], size: int) -> list[tuple[int, int]]:
        """Which factors of a large clique to multiply together before the clique-sized product: pairs
        (i, j), factor i *= factor j, while some pair's broadcast product is at most half the clique
        (smallest first). Each merge saves one broadcast pass over the clique table (0.5-0.9 ns a cell)
        for a pass over a table half its size or less."""
        shapes: dict[int, tuple[int, ...]] = dict(enumerate(fshapes))
        merges: list[tuple[int, int]] = []
        while len(shapes) > 2:
            best = None
            for i in shapes:
                for j in shapes:
                    if i < j:
                        cells = math.prod(max(a, b) for a, b in zip(shapes[i], shapes[j]))
                        if cells * 2 <= size and (best is None or cells < best[0]):
                            best = (cells, i, j)
            if best is None:
                break
            _, i, j = best
            shapes[i] = tuple(max(a, b) for a, b in zip(shapes[i], shapes[j]))
            del shapes[j]
            merges.append((i, j))
        return merges

    @staticmethod
    def _plan_reductions(axes: tuple[int, ...], shape: tuple[int, ...], src: int, targets: list,
                         steps: list, outputs: list) -> None:
        """Sum a table onto many targets sharing work: first sum out an axis that several targets lack
        (the cheapest per target served) and serve those targets from the smaller table, recursively."""
        tshape = tuple(shape[a] for a in axes)
        size = int(np.prod(tshape, dtype=np.int64))
        while targets:
            counts = {a: sum(1 for t in targets if a not in t[2]) for a in axes}
            useful = [a for a in axes if counts[a] >= 2]
            if not useful or size <= STAGE_MIN_CELLS:
                for kind, k, keep in targets:
                    steps.append((src, tuple(j for j, a in enumerate(axes) if a not in keep), ()))
                    outputs.append((kind, k, len(steps)))
                return
            best = min(useful, key=lambda a: _sum_cost(tshape, axes.index(a)) / counts[a])
            inner = [t for t in targets if best not in t[2]]
            targets = [t for t in targets if best in t[2]]
            steps.append((src, (axes.index(best),), ()))
            Calibrator._plan_reductions(tuple(a for a in axes if a != best), shape, len(steps), inner, steps,
                                        outputs)

    # -- evaluation --------------------------------------------------------------------------------
    def marginals(self, phi: np.ndarray, total: float) -> np.ndarray:
        """The model's marginal (counts summing to `total`) on every measurement, flat and concatenated."""
        mu = self._propagate(phi, total, robust=False)
        if mu is None:  # a message under- or overflowed with level-wide scaling: redo, every message scaled
            mu = self._propagate(phi, total, robust=True)
            if not np.all(np.isfinite(mu)):   # a clique's every cell underflowed even so (a warm start whose
                mu = self._exact(phi, total)  # potentials favour some cells by > e^700): the model's log-space pass
        return mu

    def _exact(self, phi: np.ndarray, total: float) -> np.ndarray:
        """`marginals` through a GraphicalModel of the same potentials, whose beliefs fall back to log space
        where products underflow (pgm/model.py): slower, for the rare tables the scaled passes cannot hold."""
        try:
            counts = GraphicalModel(self.tree, self.potentials(phi, self._base_tables), total).clique_counts()
        except EstimationError:   # not finite even in log space: NaN, which estimation rejects (or refuses)
            return np.full(self.M, np.nan)
        cl = self.tree.cliques
        mu = np.empty(self.M)
        for k, ci in enumerate(self.assign):   # a scope is its clique's attributes in the clique's order
            drop = tuple(j for j, a in enumerate(cl[ci]) if a not in self.scopes[k])
            mu[self.meas_off[k]:self.meas_off[k + 1]] = counts[ci].sum(axis=drop).ravel()
        return mu

    def _propagate(self, phi: np.ndarray, total: float, robust: bool) -> np.ndarray | None:
        """One collect and one distribute pass. Messages are rescaled per level by their maximum (two
        numpy calls a level), or with robust=True each message to sum 1; returns None when the fast
        scaling let a normaliser leave [1e-250, 1e250], so the caller can redo it robustly."""
        up, down = self._up, self._down
        if self.N:
            theta = np.bincount(self.cell_idx, phi[self.meas_idx], minlength=self.N).astype(float, copy=False)
            if self.base is not None:
                theta += self.base
            mx = np.maximum.reduceat(theta, self.starts)
            theta -= np.repeat(mx, self.sizes)  # max-shifted per clique: no overflow
            psi = np.exp(theta, out=theta)
        else:
            psi = np.zeros(0)
        acc_all = np.empty(self.N)
        big_acc = {}
        # collect: deepest level first
        for L in range(self.H, -1, -1):
            lv = self.levels[L]
            acc = acc_all[lv.a:lv.b]
            if lv.child_cols:
                np.multiply(psi[lv.a:lv.b], up[lv.child_cols[0]], out=acc)
                for col in lv.child_cols[1:]:
                    acc *= up[col]
            else:
                acc[:] = psi[lv.a:lv.b]
            if L > 0:
                seg = up[lv.up0:lv.up1]
                seg[:] = np.bincount(lv.sep_map, acc, minlength=seg.size) if lv.sep_map.size else 0.0
            for i in lv.big:
                big_acc[i] = self._big_collect(i, phi, up)
            if L > 0:
                self._rescale(seg, lv, robust)
        # distribute: beliefs level by level, Hugin messages (belief on the separator / upward message)
        beliefs = acc_all  # multiplied in place by the message from above
        big_out: list[tuple[int, np.ndarray]] = []
        for L in range(self.H + 1):
            lv = self.levels[L]
            b = beliefs[lv.a:lv.b]
            if lv.down_idx is not None:
                b *= down[lv.down_idx]
            if L < self.H:
                nxt = self.levels[L + 1]
                seg = down[nxt.up0:nxt.up1]
                seg[:] = np.bincount(lv.pc_sep, b[lv.pc_cell], minlength=seg.size) if lv.pc_sep is not None else 0.0
            for i in lv.big:
                self._big_distribute(i, big_acc.pop(i), down, big_out)
            if L < self.H:
                useg = up[nxt.up0:nxt.up1]
                if robust:
                    np.divide(seg, useg, out=seg, where=useg > 0)
                else:
                    seg /= useg  # a zero here gives NaN, caught below
                self._rescale(seg, nxt, robust)
        if self.N:
            z = np.add.reduceat(beliefs, self.starts)
            if not robust and not (1e-250 < z.min() and z.max() < 1e250):
                return None
            mu = np.bincount(self.meas_idx, beliefs[self.cell_idx], minlength=self.M).astype(float, copy=False)
            zb = self._zbuf   # np.append(z, 1.0) without its allocation and Python wrapper
            zb[:-1] = z
            mu /= zb[self.meas_pos]
        else:
            mu = np.zeros(self.M)
        bounds = self._meas_bounds
        for k, t in big_out:
            s = t.sum()
            if not robust and not 1e-250 < s < 1e250:
                return None
            lo, hi = bounds[k]
            # s = 0: every cell underflowed (robust pass): NaN, so `marginals` takes the exact pass
            mu[lo:hi] = t / s if s > 0 else np.nan
        mu *= total
        return mu

    @staticmethod
    def _rescale(seg: np.ndarray, lv: _Level, robust: bool) -> None:
        """Keep a level's messages in range: scale them jointly to max 1, or each to sum 1."""
        if robust:
            s = np.add.reduceat(seg, lv.msg_starts)
            np.maximum(s, 1e-300, out=s)
            seg /= np.repeat(s, lv.msg_lens)
        else:
            m = seg.max()
            if m > 0:
                seg *= 1.0 / m

    def _big_collect(self, i: int, phi: np.ndarray, up: np.ndarray) -> np.ndarray:
        """Clique i's table times its children's messages (kept for the distribute phase); its upward
        message (unnormalised) goes to `up`."""
        plan = self._plans[i]
        factors = []
        for gshape, gb, parts in plan["groups"]:
            if len(parts) == 1 and parts[0][2] == gshape:   # exp(φ − max φ): 0 + φ would differ only in a zero's
                g = phi[parts[0][0]:parts[0][1]].reshape(gshape)   # sign, which exp maps to the same 1
            else:
                g = np.zeros(gshape)
                for lo, hi, mshape in parts:
                    g += phi[lo:hi].reshape(mshape)
            factors.append(np.exp(g - g.max()).reshape(gb))
        if plan["base"] is not None:
            factors.append(plan["base"])
        for k, lo, n, kb in plan["kids"]:
            factors.append(up[lo:lo + n].reshape(kb))
        if plan["merge"]:
            for i, j in plan["merge"]:
                factors[i] = factors[i] * factors[j]
                factors[j] = None
            factors = [f for f in factors if f is not None]
        acc = np.empty(plan["shape"])
        if not factors:
            acc.fill(1.0)
        elif len(factors) == 1:
            np.copyto(acc, factors[0])
        else:
            np.multiply(factors[0], factors[1], out=acc)
            for f in factors[2:]:
                acc *= f
        if plan["up"] is not None:
            lo, _, _, progs = plan["up"]
            m = acc
            for prog in progs:
                m = _run_block(m, prog)
            up[lo:lo + m.size] = m.ravel()
        return acc

    def _big_distribute(self, i: int, acc: np.ndarray, down: np.ndarray, out: list) -> None:
        """Clique i's belief (in place on `acc`), its children's downward messages before the Hugin
        division, and its measurements' marginals (unnormalised) appended to `out`."""
        plan = self._plans[i]
        if plan["up"] is not None:
            lo, _, pb, _ = plan["up"]
            acc *= down[lo:lo + math.prod(pb)].reshape(pb)
        tabs = [acc]
        for src, _, progs in plan["steps"]:
            t = tabs[src]
            for prog in progs:
                t = _run_block(t, prog)
            tabs.append(t)
        for kind, k, idx in plan["outputs"]:
            t = tabs[idx].ravel()
            if kind == "down":
                down[self.up_off[k]:self.up_off[k] + t.size] = t
            else:
                out.append((k, t))

    def potentials(self, phi: np.ndarray, base: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        """Clique log-potentials θ_C = base_C + Σ_m φ_m (materialised, for a GraphicalModel)."""
        cl = self.tree.cliques
        out = [np.array(base[i], float, copy=True) if base is not None else np.zeros(self.shapes[i])
               for i in range(len(cl))]
        for k, ci in enumerate(self.assign):
            f = phi[self.meas_off[k]:self.meas_off[k + 1]].reshape(self.meas_shapes[k])
            bshape = [self.shapes[ci][j] if a in self.scopes[k] else 1 for j, a in enumerate(cl[ci])]
            out[ci] += f.reshape(bshape)
        return out
