"""Cliques → chordal graph → maximal cliques → junction tree.

The interaction graph links every pair of attributes that share a measured clique. It is
triangulated by greedy elimination: repeatedly eliminate the vertex whose elimination adds the fewest
fill-in edges (ties: the smallest resulting clique in cells), which keeps the cliques — and so the
model's size — small. The elimination cliques that are maximal are the junction tree's nodes; the
tree is a maximum-weight spanning tree on separator sizes (|C_i ∩ C_j|), which has the running
intersection property for the cliques of a chordal graph.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs
import networkx as nx
import numpy as np

from vertisynth.core.domain import Domain
from vertisynth.core.errors import ConfigError

DEFAULT_MAX_CELLS = 10**7


class ModelTooLargeError(ConfigError):
    """The triangulated model would need more cells than allowed."""


def min_fill_cliques(domain: Domain, cliques: Iterable[Sequence[str]]) -> list[tuple[str, ...]]:
    """Maximal cliques of a min-fill triangulation of the graph induced by `cliques` (all attributes included)."""
    g = nx.Graph()
    g.add_nodes_from(domain.attributes)
    for c in cliques:
        c = domain.check(c)
        g.add_edges_from((a, b) for i, a in enumerate(c) for b in c[i + 1:])
    order = {a: i for i, a in enumerate(domain.attributes)}
    work = g.copy()
    elim_cliques: list[frozenset[str]] = []
    while work.number_of_nodes():
        best, best_key = None, None
        for v in work.nodes:
            nb = list(work.neighbors(v))
            fill = sum(1 for i, a in enumerate(nb) for b in nb[i + 1:] if not work.has_edge(a, b))
            cells = int(np.prod([domain.size(a) for a in nb + [v]], dtype=float))
            key = (fill, cells, order[v])
            if best_key is None or key < best_key:
                best, best_key = v, key
        nb = list(work.neighbors(best))
        work.add_edges_from((a, b) for i, a in enumerate(nb) for b in nb[i + 1:])
        elim_cliques.append(frozenset(nb + [best]))
        work.remove_node(best)
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
        """Index of the smallest clique containing all of `attrs_`, or None."""
        s = set(attrs_)
        best = None
        for i, c in enumerate(self.cliques):
            if s <= set(c) and (best is None or self.domain.project(c).size() < self.domain.project(self.cliques[best]).size()):
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
    g = nx.Graph()
    g.add_nodes_from(range(len(maximal)))
    for i in range(len(maximal)):
        for j in range(i + 1, len(maximal)):
            w = len(set(maximal[i]) & set(maximal[j]))
            if w:
                g.add_edge(i, j, weight=w)
    tree = nx.maximum_spanning_tree(g, weight="weight")
    return JunctionTree(domain, tuple(maximal), tuple(sorted(tuple(sorted(e)) for e in tree.edges)))
