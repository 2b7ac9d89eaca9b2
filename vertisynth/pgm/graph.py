"""Cliques → chordal graph → maximal cliques → junction tree.

The interaction graph links every pair of attributes that share a measured clique. It is
triangulated by greedy elimination: repeatedly eliminate the vertex whose elimination adds the fewest
fill-in edges (ties: the smallest resulting clique in cells), which keeps the cliques — and so the
model's size — small. The elimination cliques that are maximal are the junction tree's nodes; the
tree is a maximum-weight spanning tree on separator sizes (|C_i ∩ C_j|), which has the running
intersection property for the cliques of a chordal graph.

Plain dicts of sets and Kruskal's algorithm (no networkx: its import was 0.2 CPU s of every run); the same
elimination order and the same tree as networkx's `maximum_spanning_tree` (edges in (i, j) order, stably sorted by
weight, descending), checked against it in tests/pgm/test_graph.py.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import attrs

from vertisynth.core.domain import Domain
from vertisynth.core.errors import ConfigError

DEFAULT_MAX_CELLS = 10**7


class ModelTooLargeError(ConfigError):
    """The triangulated model would need more cells than allowed."""


def min_fill_cliques(domain: Domain, cliques: Iterable[Sequence[str]]) -> list[tuple[str, ...]]:
    """Maximal cliques of a min-fill triangulation of the graph induced by `cliques` (all attributes included)."""
    work: dict[str, set[str]] = {a: set() for a in domain.attributes}
    for c in cliques:
        c = domain.check(c)
        for i, a in enumerate(c):
            for b in c[i + 1:]:
                if a != b:
                    work[a].add(b)
                    work[b].add(a)
    order = {a: i for i, a in enumerate(domain.attributes)}
    size = {a: float(s) for a, s in zip(domain.attributes, domain.shape)}
    elim_cliques: list[frozenset[str]] = []
    while work:
        best, best_key = None, None
        for v, nbs in work.items():
            nb = list(nbs)
            fill = sum(1 for i, a in enumerate(nb) for b in nb[i + 1:] if b not in work[a])
            # the product of integer sizes in floats, as np.prod(..., dtype=float) gave (exact below 2^53, so in
            # any order) without a numpy call per candidate: PrivMRF triangulates every trial graph
            cells = int(math.prod([size[a] for a in nb] + [size[v]]))
            key = (fill, cells, order[v])   # unique (order), so the choice does not depend on iteration order
            if best_key is None or key < best_key:
                best, best_key = v, key
        nb = list(work.pop(best))
        for a in nb:
            work[a].discard(best)
            work[a].update(b for b in nb if b != a)
        elim_cliques.append(frozenset(nb + [best]))
    maximal = [c for c in elim_cliques if not any(c < o for o in elim_cliques)]
    out, seen = [], set()
    for c in maximal:
        if c not in seen:
            seen.add(c)
            out.append(tuple(a for a in domain.attributes if a in c))
    return out


@attrs.frozen(eq=False)
class JunctionTree:
    domain: Domain
    cliques: tuple[tuple[str, ...], ...]
    edges: tuple[tuple[int, int], ...]  # tree edges between clique indices
    # per-tree lookups built on first use (each attribute's cliques as a bitmask, the cliques' cells)
    _memo: dict = attrs.field(factory=dict, init=False, repr=False)

    @property
    def size(self) -> int:
        """Total cells of all clique tables."""
        return int(sum(self.domain.project(c).size() for c in self.cliques))

    def neighbors(self) -> dict[int, list[int]]:
        nb: dict[int, list[int]] = {i: [] for i in range(len(self.cliques))}
        for i, j in self.edges:
            nb[i].append(j)
            nb[j].append(i)
        return nb

    def order(self, root: int = 0) -> list[tuple[int, int | None]]:
        """(clique, parent) in breadth-first order from `root` over every component (forest)."""
        nb = self.neighbors()
        seen: set[int] = set()
        out: list[tuple[int, int | None]] = []
        for start in [root] + list(range(len(self.cliques))):
            if start in seen:
                continue
            seen.add(start)
            queue = [(start, None)]
            while queue:
                node, parent = queue.pop(0)
                out.append((node, parent))
                for m in nb[node]:
                    if m not in seen:
                        seen.add(m)
                        queue.append((m, node))
        return out

    def separator(self, i: int, j: int) -> tuple[str, ...]:
        return tuple(a for a in self.cliques[i] if a in self.cliques[j])

    def clique_for(self, attrs_: Iterable[str]) -> int | None:
        """Index of the smallest clique containing all of `attrs_` (the first of equal size), or None."""
        if "holders" not in self._memo:   # AIM asks this of every candidate each round: no scan over the cliques
            holders: dict[str, int] = {}
            for i, c in enumerate(self.cliques):
                for a in c:
                    holders[a] = holders.get(a, 0) | (1 << i)
            self._memo["holders"] = holders
            self._memo["cells"] = [self.domain.project(c).size() for c in self.cliques]
        holders, cells = self._memo["holders"], self._memo["cells"]
        mask = (1 << len(self.cliques)) - 1
        for a in attrs_:
            mask &= holders.get(a, 0)
        best = None
        while mask:
            i = (mask & -mask).bit_length() - 1
            mask &= mask - 1
            if best is None or cells[i] < cells[best]:
                best = i
        return best


def build_junction_tree(domain: Domain, cliques: Iterable[Sequence[str]], max_cells: float = DEFAULT_MAX_CELLS) -> JunctionTree:
    """Junction tree of the min-fill triangulation; refuses models above `max_cells` cells in total."""
    maximal = min_fill_cliques(domain, cliques)
    sizes = {c: domain.project(c).size() for c in maximal}
    total = sum(sizes.values())
    if total > max_cells:
        worst = max(maximal, key=lambda c: sizes[c])
        raise ModelTooLargeError(
            f"the graphical model needs {total:,} cells (limit {int(max_cells):,}); its largest clique "
            f"{list(worst)} alone has {sizes[worst]:,}. Measure fewer or smaller marginals, or raise the limit"
        )
    sets = [set(c) for c in maximal]
    weighted = [(len(sets[i] & sets[j]), i, j) for i in range(len(maximal)) for j in range(i + 1, len(maximal))]
    parent = list(range(len(maximal)))   # union-find over the cliques

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    edges = []
    for w, i, j in sorted((e for e in weighted if e[0]), key=lambda e: e[0], reverse=True):   # stable: (i, j) order
        ri, rj = root(i), root(j)
        if ri != rj:
            parent[rj] = ri
            edges.append((i, j))
    return JunctionTree(domain, tuple(maximal), tuple(sorted(edges)))
