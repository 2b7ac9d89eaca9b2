"""`zoo`: generated tables with known truth, over a range of shapes, to choose defaults on.

Each preset describes a family of random Bayesian networks (number of attributes, domain sizes,
parents per node, strength of dependence, number of parties); `seed` draws one network from it and
the records from that network, so the exact marginals are known (`truth`) and a synthesizer can be
scored against the population. Dependence is ordinal (a child's values shift with its parents' like
age and claims do, so Pearson correlation sees it) plus a non-monotone part of the same order; the
attributes are split across the parties at random, so most edges cross the split.

Presets (`ZOO_PRESETS`, in the order benchmarks list them):
  small-domains  12 attributes, domains 2-4, 3 parties
  large-domains   8 attributes, domains 20-100, 2 parties
  wide           40 attributes, domains 2-10, 4 parties
  strong         12 attributes, domains 2-20, strong dependences, 2 parties
  weak           12 attributes, domains 2-20, weak dependences, 2 parties
  mixed          15 attributes, domains 2-46, 3 parties (the middle of the range)
  small-split     5 attributes, domains 10-60, 2 parties (2 + 3)
  many-parties   10 attributes, domains 2-40, 5 parties of 1-3 attributes
and one fixed scenario (`SCENARIOS`), the small split users bring first:
  hospital-insurer  hospital {age (70 values), sex} + insurer {claims (40 values), plan (4)};
                    corr(age, claims) = 0.59, plan depends weakly on age (corr 0.24)
"""
from __future__ import annotations

import zlib

import attrs
import numpy as np

from vertisynth.core.encoding import ColumnSchema, TableSchema
from vertisynth.core.errors import ConfigError
from vertisynth.core.loaded import DatasetSource, LoadedData

from .bayesnet import BayesNet


@attrs.frozen
class ZooShape:
    """One preset: attributes, domain sizes (drawn log-uniformly in [lo, hi]), up to `max_parents` parents
    per node, ordinal dependence `strength` (logit slope per unit of the parents' score), non-monotone
    noise `wiggle` (std of per-cell logit noise), `parties` parties; `n` the default record count."""

    attributes: int
    domain: tuple[int, int]
    max_parents: int = 2
    strength: float = 1.5
    wiggle: float = 0.5
    parties: int = 2
    n: int = 20000
    summary: str = ""


ZOO_PRESETS: dict[str, ZooShape] = {
    "small-domains": ZooShape(12, (2, 4), 2, 1.5, 0.5, 3, summary="12 attributes, domains 2-4, 3 parties"),
    "large-domains": ZooShape(8, (20, 100), 2, 1.5, 0.5, 2, summary="8 attributes, domains 20-100, 2 parties"),
    "wide": ZooShape(40, (2, 10), 2, 1.5, 0.5, 4, summary="40 attributes, domains 2-10, 4 parties"),
    "strong": ZooShape(12, (2, 20), 2, 3.0, 0.8, 2, summary="12 attributes, domains 2-20, strong dependences"),
    "weak": ZooShape(12, (2, 20), 2, 0.5, 0.2, 2, summary="12 attributes, domains 2-20, weak dependences"),
    "mixed": ZooShape(15, (2, 46), 2, 1.5, 0.5, 3, summary="15 attributes, domains 2-46, 3 parties"),
    "small-split": ZooShape(5, (10, 60), 2, 2.0, 0.3, 2, summary="5 many-valued attributes, 2 parties (2 + 3)"),
    "many-parties": ZooShape(10, (2, 40), 2, 1.5, 0.5, 5, summary="10 attributes, domains 2-40, 5 parties of 1-3"),
}

SCENARIOS = {"hospital-insurer": "hospital {age, sex} + insurer {claims, plan}; corr(age, claims) = 0.59"}
MAX_PARENT_CELLS = 4000  # a node's parent configurations are capped: its table stays small


class ZooNetwork(BayesNet):
    """A random Bayesian network of one shape: conditional tables, vectorised sampling, exact marginals."""

    def __init__(self, shape: ZooShape, seed: int, salt: int = 0) -> None:
        rng = np.random.default_rng([seed, 0, salt])
        d = shape.attributes
        lo, hi = shape.domain
        self.names = [f"x{i:02d}" for i in range(d)]
        sizes = np.exp(rng.uniform(np.log(lo), np.log(hi + 1), size=d)).astype(int).clip(lo, hi)
        self.sizes = dict(zip(self.names, (int(s) for s in sizes)))
        self.parents: dict[str, tuple[str, ...]] = {}
        self.cpts: dict[str, np.ndarray] = {}
        for i, name in enumerate(self.names):  # the names' order is a topological order
            k = self.sizes[name]
            picks: list[str] = []
            for j in rng.permutation(i)[: rng.integers(0, min(i, shape.max_parents) + 1)]:
                cells = int(np.prod([self.sizes[p] for p in picks + [self.names[j]]]))
                if cells <= MAX_PARENT_CELLS:
                    picks.append(self.names[j])
            if i > 0 and not picks:  # keep the graph connected enough that every preset has dependence
                picks = [self.names[int(rng.integers(0, i))]]
            self.parents[name] = tuple(sorted(picks, key=self.names.index))
            self.cpts[name] = self._table(name, shape, rng)
        self.party_split = self._split(shape, rng)
        self.party_names = [f"party{i + 1}" for i in range(shape.parties)]

    def _table(self, name: str, shape: ZooShape, rng: np.random.Generator) -> np.ndarray:
        """P(child | parents): logits = skewed base + strength · child position · parents' score + wiggle."""
        k = self.sizes[name]
        base = np.log(0.75 * rng.dirichlet(np.ones(k)) + 0.25 / k)
        parents = self.parents[name]
        if not parents:
            p = np.exp(base)
            return p / p.sum()
        grids = np.meshgrid(*[np.linspace(-1, 1, self.sizes[q]) for q in parents], indexing="ij")
        signs = rng.choice([-1.0, 1.0], size=len(parents))
        score = sum(s * g for s, g in zip(signs, grids)) / np.sqrt(len(parents))
        u = np.linspace(-1, 1, k)
        logits = base + shape.strength * score[..., None] * u + shape.wiggle * rng.standard_normal(score.shape + (k,))
        return _softmax(logits)

    def _split(self, shape: ZooShape, rng: np.random.Generator) -> list[list[str]]:
        """Attributes shuffled and cut into `parties` nonempty groups of near-equal size."""
        order = [self.names[i] for i in rng.permutation(len(self.names))]
        groups = np.array_split(np.arange(len(order)), shape.parties)
        return [sorted((order[i] for i in g), key=self.names.index) for g in groups]

    @classmethod
    def hospital_insurer(cls) -> ZooNetwork:
        """The fixed scenario: many-valued age and claims held by different parties, strongly correlated."""
        net = cls.__new__(cls)
        net.names = ["age", "sex", "claims", "plan"]
        net.sizes = {"age": 70, "sex": 2, "claims": 40, "plan": 4}
        net.parents = {"age": (), "sex": (), "claims": ("age", "sex"), "plan": ("age",)}
        age = np.exp(-np.linspace(0, 1.2, 70))   # more young people than old
        u_age, u_claims, u_plan = np.linspace(-1, 1, 70), np.linspace(-1, 1, 40), np.linspace(-1, 1, 4)
        claims = (2.5 * u_age[:, None, None] * u_claims + 0.3 * np.array([-1, 1])[None, :, None] * u_claims
                  - np.linspace(0, 2, 40))       # few large claims; older (and one sex) claim more
        plan = 0.6 * u_age[:, None] * u_plan
        net.cpts = {"age": age / age.sum(), "sex": np.array([0.52, 0.48]),
                    "claims": _softmax(claims), "plan": _softmax(plan)}
        net.party_split = [["age", "sex"], ["claims", "plan"]]
        net.party_names = ["hospital", "insurer"]
        return net

    def correlation(self, a: str, b: str) -> float:
        """Exact Pearson correlation of the codes of `a` and `b` (ordinal: the dependence is built that way)."""
        return correlation_of(self.marginal([a, b]).values)


def _softmax(logits: np.ndarray) -> np.ndarray:
    p = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return p / p.sum(axis=-1, keepdims=True)


def correlation_of(table: np.ndarray) -> float:
    """Pearson correlation of the row and column codes of a 2-way table of counts or probabilities."""
    p = np.asarray(table, float) / max(float(np.sum(table)), 1e-300)
    x, y = np.arange(p.shape[0], dtype=float), np.arange(p.shape[1], dtype=float)
    px, py = p.sum(1), p.sum(0)
    mx, my = px @ x, py @ y
    vx, vy = px @ (x - mx) ** 2, py @ (y - my) ** 2
    if vx <= 0 or vy <= 0:
        return 0.0
    return float(((x - mx)[:, None] * (y - my)[None, :] * p).sum() / np.sqrt(vx * vy))


@attrs.frozen
class ZooConfig:
    """preset: one of ZOO_PRESETS or SCENARIOS; n: records (default: the preset's, 20,000 for a scenario);
    seed: draws the network (of a random preset) and the records."""

    preset: str = "mixed"
    n: int | None = None
    seed: int = 0

    def __attrs_post_init__(self) -> None:
        if self.preset not in ZOO_PRESETS and self.preset not in SCENARIOS:
            raise ConfigError(f"zoo dataset: unknown preset {self.preset!r}; choose one of "
                              f"{', '.join([*ZOO_PRESETS, *SCENARIOS])}")
        if self.n is not None and self.n < 1:
            raise ConfigError(f"zoo dataset: n must be >= 1, got {self.n}")

    @property
    def records(self) -> int:
        return (ZOO_PRESETS[self.preset].n if self.preset in ZOO_PRESETS else 20000) if self.n is None else self.n

    @property
    def summary(self) -> str:
        return ZOO_PRESETS[self.preset].summary if self.preset in ZOO_PRESETS else SCENARIOS[self.preset]

    def network(self) -> ZooNetwork:
        """The preset's network for this seed (the preset's name salts the draw, so presets differ)."""
        if self.preset in SCENARIOS:
            return ZooNetwork.hospital_insurer()
        return ZooNetwork(ZOO_PRESETS[self.preset], self.seed, zlib.crc32(self.preset.encode()))


def schema(net: ZooNetwork) -> TableSchema:
    return TableSchema(tuple(ColumnSchema(a, "categorical", categories=tuple(range(net.sizes[a]))) for a in net.names))


def source(config: ZooConfig, data_dir: str | None = None) -> DatasetSource:
    net = config.network()
    return DatasetSource(schema(net), net.party_split, lambda: load(config, net), net.party_names,
                         f"zoo preset {config.preset!r} (seed {config.seed}), {config.records} records")


def load(config: ZooConfig, net: ZooNetwork | None = None) -> LoadedData:
    import pandas as pd

    net = net or config.network()
    codes = net.sample_codes(config.records, np.random.default_rng([config.seed, 1]))
    return LoadedData(
        frame=pd.DataFrame(codes, columns=net.names),
        schema=schema(net),
        default_parties=net.party_split,
        party_names=net.party_names,
        description=f"zoo preset {config.preset!r}: {config.summary} (Bayesian network, seed {config.seed})",
        truth=net.marginal,
        info={"generator": "zoo", "preset": config.preset, "n": config.records, "seed": config.seed,
              "parents": {a: list(p) for a, p in net.parents.items() if p}},
    )
