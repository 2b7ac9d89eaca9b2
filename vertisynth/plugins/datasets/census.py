"""A built-in, census-like population with a known distribution: the offline default dataset.

The table is drawn from a fixed Bayesian network (structure and conditional tables are part of
the product, fixed by an internal seed), so its exact marginals are known and a synthesizer can
be scored against the population itself. 15 attributes, domains 2-40, two parties by default:
a "registry" (demographics) and an "employer" (work and income); the network has edges across
the split (education → occupation, age → capital gain, ...), so cross-party correlation matters.
"""
from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import attrs
import numpy as np

from vertisynth.core.dataset import Dataset
from vertisynth.core.encoding import ColumnSchema, TableSchema, decoded_dtypes
from vertisynth.core.errors import ConfigError
from vertisynth.core.loaded import DatasetSource, LoadedData, keyed_party_tables

from .bayesnet import BayesNet

if TYPE_CHECKING:
    import pandas as pd

_CPT_SEED = 20261122  # fixes the network's tables; part of the dataset's definition

AGE_EDGES = (17, 25, 30, 35, 40, 50, 60, 70, 90)  # last bin closed: ages 70-90
HOURS_EDGES = (1, 20, 35, 40, 41, 50, 60, 99)
GAIN_EDGES = (0, 1, 5000, 15000, 99999)
COUNTRIES = (
    "United-States", "Mexico", "Philippines", "Germany", "Canada", "Puerto-Rico", "El-Salvador", "India",
    "Cuba", "England", "Jamaica", "South-Korea", "China", "Italy", "Dominican-Republic", "Vietnam",
    "Guatemala", "Japan", "Poland", "Columbia", "Taiwan", "Haiti", "Iran", "Portugal", "Nicaragua",
    "Peru", "France", "Greece", "Ecuador", "Ireland", "Hong-Kong", "Cambodia", "Trinidad-Tobago", "Laos",
    "Thailand", "Yugoslavia", "Outlying-US", "Hungary", "Honduras", "Scotland",
)
EDUCATION = ("Preschool", "1st-4th", "5th-6th", "7th-8th", "9th", "10th", "11th", "12th", "HS-grad",
             "Some-college", "Assoc-voc", "Assoc-acdm", "Bachelors", "Masters", "Prof-school", "Doctorate")
OCCUPATIONS = ("Tech-support", "Craft-repair", "Other-service", "Sales", "Exec-managerial", "Prof-specialty",
               "Handlers-cleaners", "Machine-op-inspct", "Adm-clerical", "Farming-fishing", "Transport-moving",
               "Priv-house-serv", "Protective-serv", "Armed-Forces")

# name, kind, categories or edges, parents (topological order)
NODES: tuple[tuple[str, str, tuple, tuple[str, ...]], ...] = (
    ("age", "numeric", AGE_EDGES, ()),
    ("sex", "categorical", ("Female", "Male"), ()),
    ("race", "categorical", ("White", "Black", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other"), ()),
    ("birth_country", "categorical", COUNTRIES, ("race",)),
    ("region", "categorical", ("Northeast", "Midwest", "South", "West"), ("race",)),
    ("education", "categorical", EDUCATION, ("age", "birth_country")),
    ("marital_status", "categorical", ("Never-married", "Married-civ-spouse", "Divorced", "Separated",
                                       "Widowed", "Married-spouse-absent", "Married-AF-spouse"), ("age", "sex")),
    ("relationship", "categorical", ("Husband", "Wife", "Own-child", "Not-in-family", "Other-relative",
                                     "Unmarried"), ("marital_status", "sex")),
    ("household_size", "categorical", (1, 2, 3, 4, 5, 6, 7), ("relationship", "age")),
    ("occupation", "categorical", OCCUPATIONS, ("education", "sex")),
    ("workclass", "categorical", ("Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov", "Local-gov",
                                  "State-gov", "Without-pay", "Never-worked"), ("occupation",)),
    ("hours_per_week", "numeric", HOURS_EDGES, ("occupation", "sex")),
    ("capital_gain", "numeric", GAIN_EDGES, ("education", "age")),
    ("income", "categorical", ("<=50K", ">50K"), ("education", "hours_per_week", "occupation")),
    ("health_insurance", "categorical", ("None", "Employer", "Public"), ("income", "age")),
)
PARTIES = (
    ("registry", ("age", "sex", "race", "birth_country", "region", "education", "marital_status",
                  "relationship", "household_size")),
    ("employer", ("occupation", "workclass", "hours_per_week", "capital_gain", "income", "health_insurance")),
)


def _size(node: tuple) -> int:
    return len(node[2]) - 1 if node[1] == "numeric" else len(node[2])


class CensusNetwork(BayesNet):
    """The fixed Bayesian network: conditional tables P(child | parents), sampling and exact marginals."""

    def __init__(self) -> None:
        rng = np.random.default_rng(_CPT_SEED)
        self.names = [n[0] for n in NODES]
        self.sizes = {n[0]: _size(n) for n in NODES}
        self.parents = {n[0]: n[3] for n in NODES}
        self.cpts: dict[str, np.ndarray] = {}
        for name, _kind, _vals, parents in NODES:
            k = self.sizes[name]
            # a skewed base distribution (floored so no category is vanishingly rare) and, per parent
            # configuration, a row scattered around it: strong but not deterministic dependence
            base = 0.75 * rng.dirichlet(np.ones(k)) + 0.25 / k
            rows = int(np.prod([self.sizes[p] for p in parents], dtype=int)) if parents else 1
            table = rng.dirichlet(1.5 * k * base, size=rows) if parents else base[None, :]
            self.cpts[name] = table.reshape(tuple(self.sizes[p] for p in parents) + (k,))


@attrs.frozen
class CensusConfig:
    """n: number of records to draw; seed: draws of the table (the network itself is fixed).
    id_overlap: if set, simulate ID-keyed parties (each its own table with an `id`), a share id_overlap of
    the people held by every party and the rest by one party only; then align with psi or psu."""

    n: int = 20000
    seed: int = 0
    id_overlap: float | None = None

    def __attrs_post_init__(self) -> None:
        if self.n < 1:
            raise ConfigError(f"census dataset: n must be >= 1, got {self.n}")
        if self.id_overlap is not None and not 0 < self.id_overlap <= 1:
            raise ConfigError(f"census dataset: id_overlap must be in (0, 1], got {self.id_overlap}")


def schema() -> TableSchema:
    cols = []
    for name, kind, vals, _ in NODES:
        if kind == "numeric":
            cols.append(ColumnSchema(name, "numeric", binning="edges", edges=vals, integer=True))
        else:
            cols.append(ColumnSchema(name, "categorical", categories=vals))
    return TableSchema(tuple(cols))


def decode_codes(codes: np.ndarray, rng: np.random.Generator) -> pd.DataFrame:
    """Raw-looking table from codes: labels for categories, integers drawn inside numeric bins."""
    codec = schema().fit_public(len(codes), {n[0]: "object" for n in NODES}, release=False)
    return codec.decode(Dataset(codes, codec.domain), rng)


def source(config: CensusConfig, data_dir: str | None = None) -> DatasetSource:
    return DatasetSource(schema(), [list(p[1]) for p in PARTIES], lambda: load(config),
                         [p[0] for p in PARTIES], f"built-in census-like population, {config.n} records")


def load(config: CensusConfig) -> LoadedData:
    net = CensusNetwork()
    rng = np.random.default_rng(config.seed)
    codes = net.sample_codes(config.n, rng)
    frames = ids = native = None
    if config.id_overlap is not None:
        frames, ids = keyed_party_tables(decode_codes(codes, rng), [p[0] for p in PARTIES], config.id_overlap,
                                         np.random.default_rng([config.seed, 1]))
        frame = None
    else:
        # codes-native: the pipeline codes the table from `codes` (the raw frame encodes back to them, bit for
        # bit); the raw frame, from the same draws, only if asked for (an evaluator of raw values)
        decode_rng = copy.deepcopy(rng)
        frame = lambda: decode_codes(codes, decode_rng)  # noqa: E731
        sch = schema()
        native = dict(codes=Dataset(codes, sch.preview_domain()), dtypes=decoded_dtypes(sch))
    return LoadedData(
        frame=frame,
        schema=schema(),
        default_parties=[list(p[1]) for p in PARTIES],
        party_names=[p[0] for p in PARTIES],
        description="built-in census-like population (fixed Bayesian network)",
        truth=net.marginal,
        info={"generator": "census", "n": config.n, "seed": config.seed, "id_overlap": config.id_overlap},
        party_frames=frames,
        party_ids=ids,
        **(native or {}),
    )
