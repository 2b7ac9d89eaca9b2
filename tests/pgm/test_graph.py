"""pgm.graph without networkx (issue 33: its import was 0.2 CPU s of every run): the min-fill triangulation and the
junction tree are the ones the networkx version built, clique for clique and edge for edge, so every model (and
every bit-identical result downstream) is unchanged; and importing the estimation imports no networkx."""
import itertools
import os
import subprocess
import sys
from pathlib import Path

import networkx as nx
import numpy as np
from hypothesis import given, settings, strategies as st

from vertisynth.core.domain import Domain
from vertisynth.pgm.graph import build_junction_tree, min_fill_cliques


def nx_min_fill(domain, cliques):   # the networkx implementation this module had before
    g = nx.Graph()
    g.add_nodes_from(domain.attributes)
    for c in cliques:
        g.add_edges_from((a, b) for i, a in enumerate(c) for b in c[i + 1:])
    order = {a: i for i, a in enumerate(domain.attributes)}
    work, elim = g.copy(), []
    while work.number_of_nodes():
        best, best_key = None, None
        for v in work.nodes:
            nb = list(work.neighbors(v))
            fill = sum(1 for i, a in enumerate(nb) for b in nb[i + 1:] if not work.has_edge(a, b))
            key = (fill, int(np.prod([domain.size(a) for a in nb + [v]], dtype=float)), order[v])
            if best_key is None or key < best_key:
                best, best_key = v, key
        nb = list(work.neighbors(best))
        work.add_edges_from((a, b) for i, a in enumerate(nb) for b in nb[i + 1:])
        elim.append(frozenset(nb + [best]))
        work.remove_node(best)
    out = []
    for c in (c for c in elim if not any(c < o for o in elim)):
        t = tuple(a for a in domain.attributes if a in c)
        if t not in out:
            out.append(t)
    return out


def nx_tree_edges(maximal):
    g = nx.Graph()
    g.add_nodes_from(range(len(maximal)))
    for i in range(len(maximal)):
        for j in range(i + 1, len(maximal)):
            w = len(set(maximal[i]) & set(maximal[j]))
            if w:
                g.add_edge(i, j, weight=w)
    return tuple(sorted(tuple(sorted(e)) for e in nx.maximum_spanning_tree(g, weight="weight").edges))


@st.composite
def graphs(draw):
    d = draw(st.integers(1, 12))
    names = [f"x{i}" for i in range(d)]
    dom = Domain(names, draw(st.lists(st.integers(2, 6), min_size=d, max_size=d)))
    cliques = [tuple(draw(st.permutations(names))[: draw(st.integers(1, min(4, d)))]) for _ in range(draw(st.integers(0, 14)))]
    return dom, cliques


@settings(max_examples=150, deadline=None)
@given(graphs())
def test_triangulation_and_tree_equal_the_networkx_ones(case):
    dom, cliques = case
    maximal = min_fill_cliques(dom, cliques)
    assert maximal == nx_min_fill(dom, cliques)
    tree = build_junction_tree(dom, cliques, float("inf"))
    assert tree.cliques == tuple(maximal) and tree.edges == nx_tree_edges(maximal)


def test_estimation_imports_no_networkx():
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")])}
    code = ("import sys, vertisynth.pgm, vertisynth.plugins.synthesizers.vertimrf.synthesizer; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'networkx'))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "[]"


def test_clique_for_is_the_smallest_first_clique_holding_the_attributes():
    # the bitmask lookup against the plain scan it replaced (smallest cells, the first of equal size, None if none)
    rng = np.random.default_rng(3)
    for _ in range(40):
        d = int(rng.integers(3, 12))
        dom = Domain([f"x{i}" for i in range(d)], list(rng.integers(1, 5, d)))
        cl = [list(rng.choice(dom.attributes, int(rng.integers(1, 4)), replace=False)) for _ in range(6)]
        tree = build_junction_tree(dom, cl)

        def scan(q):
            best = None
            for i, c in enumerate(tree.cliques):
                if set(q) <= set(c) and (best is None or dom.project(c).size() < dom.project(tree.cliques[best]).size()):
                    best = i
            return best

        for k in range(4):
            for q in itertools.islice(itertools.combinations(dom.attributes, k), 60):
                assert tree.clique_for(q) == scan(q)
        assert tree.clique_for(["not an attribute"]) is None


def test_min_fill_prices_candidates_without_numpy_calls(monkeypatch):
    """PrivMRF triangulates every trial graph of its structure search (63 triangulations in the default job), and
    each step priced every candidate with an np.prod call; the same float products, without numpy, give the same
    cliques (the elimination keys are exact integers)."""
    dom = Domain([f"a{i}" for i in range(9)], [2, 40, 7, 16, 5, 3, 8, 2, 14])
    cliques = [("a0", "a1"), ("a1", "a3"), ("a3", "a5", "a6"), ("a2", "a8"), ("a8", "a0"), ("a4", "a7"), ("a3", "a8")]
    expected = nx_min_fill(dom, cliques)   # (with np.prod)
    assert any(len(c) > 2 for c in expected)

    def refuse(*a, **k):
        raise AssertionError("np.prod called")

    monkeypatch.setattr(np, "prod", refuse)
    assert min_fill_cliques(dom, cliques) == expected
