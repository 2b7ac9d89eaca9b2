"""A Bayesian network over coded attributes: conditional tables P(child | parents), vectorised ancestral sampling and
exact marginals. The built-in generated datasets (census, zoo) are such networks with their own tables."""
from __future__ import annotations

import string
from collections.abc import Sequence
from functools import cached_property

import numpy as np

from vertisynth.core.domain import Domain
from vertisynth.core.factor import Factor


class BayesNet:
    """Subclasses set `names` (a topological order), `sizes`, `parents` and `cpts` (each shaped parents' sizes +
    (own size,))."""

    names: list[str]
    sizes: dict[str, int]
    parents: dict[str, Sequence[str]]
    cpts: dict[str, np.ndarray]

    @cached_property
    def domain(self) -> Domain:
        return Domain(self.names, [self.sizes[n] for n in self.names])

    def sample_codes(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Ancestral sampling, vectorised over records (inverse CDF of each conditional row)."""
        codes = np.empty((n, len(self.names)), dtype=np.int64)
        col = {name: j for j, name in enumerate(self.names)}
        for name in self.names:
            parents = self.parents[name]
            k = self.sizes[name]
            cdf = np.cumsum(self.cpts[name].reshape(-1, k), axis=1)
            if parents:
                row = np.ravel_multi_index(tuple(codes[:, col[p]] for p in parents), [self.sizes[p] for p in parents])
            else:
                row = np.zeros(n, dtype=np.int64)
            u = rng.random(n)
            codes[:, col[name]] = np.minimum((u[:, None] > cdf[row]).sum(axis=1), k - 1)
        return codes

    def marginal(self, attrs_: Sequence[str]) -> Factor:
        """Exact marginal probability table on `attrs_`, by variable elimination over the ancestors."""
        attrs_ = self.domain.check(attrs_)
        needed: set[str] = set()
        stack = list(attrs_)
        while stack:
            a = stack.pop()
            if a not in needed:
                needed.add(a)
                stack.extend(self.parents[a])
        letters = {a: string.ascii_letters[i] for i, a in enumerate(self.names)}
        operands = []
        subs = []
        for a in self.names:
            if a in needed:
                operands.append(self.cpts[a])
                subs.append("".join(letters[p] for p in self.parents[a]) + letters[a])
        expr = ",".join(subs) + "->" + "".join(letters[a] for a in attrs_)
        vals = np.einsum(expr, *operands, optimize="greedy")
        return Factor(self.domain.project(attrs_), vals)

