"""`psi` and `psu`: align ID-keyed party tables with private set intersection / union (see protocol.py).

In a pipeline run all parties live in one process and the protocol is simulated round by round with
the same messages a real deployment exchanges (`vertisynth party align` runs one party for real).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import attrs
import numpy as np

from vertisynth.core.cluster import dask_session
from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.errors import ConfigError, DataError, MessageError
from vertisynth.core.interfaces import Aligner, Alignment, PlanContext
from vertisynth.core.privacy import Charge, PrivacyLedger

from . import fill as fill_mod
from .group import normalise_ids
from .protocol import BlindedSet, PartyResult, make_parties, simulate


@attrs.frozen
class PSIConfig:
    """normalize: identifier clean-up steps (strip, nfkc, casefold). duplicates: 'error' or 'first' (keep the
    first row of a repeated identifier). workers: processes for the group operations. keys: 'seeded' (the
    simulation draws keys from the run's seed: reproducible; a deployed `party align` draws them so only under an
    explicit test secret, which then seeds the simulation's alignment too) or 'os' (fresh OS randomness, as
    deployments do).
    dask_scheduler: a Dask scheduler address ("tcp://host:8786"); the hashing and blinding of the identifiers
    are then mapped over that cluster in chunks instead of `workers` local processes (the same elements)."""

    normalize: list[str] = attrs.field(factory=lambda: ["strip", "nfkc"])
    duplicates: str = "error"
    workers: int = 2
    keys: str = "seeded"
    dask_scheduler: str | None = None


@attrs.frozen
class PSUConfig:
    """As `psi`, plus the synthetic fill: `fill` = marginal (default; DP 1-way marginals, `fill_budget` of
    the budget's ρ), sample (the seed's fea-sampling: copies real records, each at most `max_copies` times,
    and every later stage is charged group privacy for 1 + max_copies rows), or uniform (comparison only).
    `fill_columns` overrides a column: {strategy = "constant", value = "..."} or {strategy = "majority"}."""

    normalize: list[str] = attrs.field(factory=lambda: ["strip", "nfkc"])
    duplicates: str = "error"
    workers: int = 2
    keys: str = "seeded"
    dask_scheduler: str | None = None
    fill: str = "marginal"
    fill_columns: dict[str, fill_mod.ColumnFill] = attrs.field(factory=dict)
    fill_budget: float = 0.05
    max_copies: int = 1


def _check(config: Any) -> None:
    if config.duplicates not in ("error", "first"):
        raise ConfigError(f"alignment duplicates must be 'error' or 'first', got {config.duplicates!r}")
    if config.keys not in ("seeded", "os"):
        raise ConfigError(f"alignment keys must be 'seeded' or 'os', got {config.keys!r}")


def dedupe_ids(party: str, raw: Sequence[Any], config: Any) -> tuple[list[str], np.ndarray | None]:
    """One party's normalised identifiers and, when duplicates were dropped ('first'), the rows kept."""
    norm = normalise_ids(raw, config.normalize)
    keys = np.asarray(norm, dtype=object)
    _, first = np.unique(keys, return_index=True)
    if len(first) == len(norm):
        return norm, None
    if config.duplicates == "error":
        seen = np.ones(len(norm), bool)
        seen[first] = False
        examples = sorted(set(keys[seen]))[:3]
        raise DataError(f"party {party!r} lists {len(norm) - len(first)} duplicate identifier(s) after "
                        f"normalisation (e.g. {examples}); clean them or set alignment duplicates = 'first'")
    first = np.sort(first)
    return [norm[i] for i in first], first


def prepare_ids(views: Mapping[str, Dataset], ids: Mapping[str, Sequence[Any]] | None, config: Any
                 ) -> tuple[dict[str, list[str]], dict[str, Dataset], dict[str, int]]:
    """Normalised identifiers per party (row positions when the data carry none) and duplicate handling."""
    _check(config)
    out_ids, out_views, dropped = {}, {}, {}
    for p, view in views.items():
        raw = list(range(view.n)) if ids is None else list(ids[p])
        if len(raw) != view.n:
            raise DataError(f"party {p!r} has {view.n} rows but {len(raw)} identifiers")
        norm, kept = dedupe_ids(p, raw, config)
        if kept is not None:
            view = view.take(kept)
        dropped[p] = len(raw) - len(norm)
        out_ids[p], out_views[p] = norm, view
    return out_ids, out_views, dropped


@attrs.frozen(eq=False)
class RowMaps:
    """An alignment as row maps, for a run that never holds the aligned tables (`stream = true`): per party,
    `rows[p][i]` is the party's record (its row in its file) at aligned position i, -1 where the party does
    not hold that position and `fills[p]` fills it (PSU); `info` as `align` reports it."""

    rows: dict[str, np.ndarray]
    info: dict[str, Any]
    fills: dict[str, fill_mod.ChunkFill] = attrs.field(factory=dict)

    def real_everywhere(self) -> np.ndarray:
        """Aligned positions every party holds for real."""
        return np.logical_and.reduce([r >= 0 for r in self.rows.values()])


def _prepare_streamed(ids: Mapping[str, Sequence[Any]], config: Any
                      ) -> tuple[dict[str, list[str]], dict[str, np.ndarray], dict[str, int]]:
    """`prepare_ids` for parties known by their identifiers alone: each party's kept rows as an int64 array."""
    _check(config)
    norm, kept, dropped = {}, {}, {}
    for p, raw in ids.items():
        norm[p], k = dedupe_ids(p, raw, config)
        kept[p] = np.arange(len(raw), dtype=np.int64) if k is None else k.astype(np.int64)
        dropped[p] = len(raw) - len(norm[p])
    return norm, kept, dropped


def _run(protocol: str, ids: dict[str, list[str]], config: Any, rng: np.random.Generator) -> dict[str, PartyResult]:
    keys = rng if config.keys == "seeded" else None
    if config.dask_scheduler is None:
        return simulate(make_parties(protocol, ids, keys, config.workers))
    with dask_session(config.dask_scheduler) as client:
        return simulate(make_parties(protocol, ids, keys, client))


class RoundsAcrossMachines:
    """PSI/PSU with each party on its own machine (AlignsAcrossMachines): `vertisynth party align` moves the
    rounds' BlindedSet messages in signed envelopes."""

    protocol: ClassVar[str]

    def party_ids(self, party: str, raw: Sequence[Any]) -> tuple[list[str], np.ndarray]:
        """This party's identifiers normalised and deduplicated as `align` does them, and the row of each."""
        rows = Dataset(np.arange(len(raw), dtype=np.int64)[:, None], Domain(["row"], [max(len(raw), 1)]))
        ids, kept, _ = prepare_ids({party: rows}, {party: raw}, self.config or PSIConfig())
        return ids[party], kept[party].codes[:, 0]

    def round_party(self, party: str, ring: Sequence[str], ids: Sequence[str], rng: np.random.Generator | None,
                    workers: Any) -> Any:
        """This party's protocol state (the other parties' ids are not known here: empty), with the simulation's
        randomness split (`make_parties` spawns one child per party in ring order)."""
        own = {p: (list(ids) if p == party else []) for p in ring}
        return make_parties(self.protocol, own, rng, workers)[party]

    def read_round_message(self, body: bytes, where: str, sender: str, to: str, rnd: int) -> BlindedSet:
        msg = BlindedSet.from_bytes(body, where)
        if msg.party != sender or msg.to != to or msg.round != rnd:
            raise MessageError(f"{where}: from {sender!r}: its content (from {msg.party!r} to {msg.to!r}, "
                               f"round {msg.round}) does not match its envelope; refused")
        return msg


class PSIAligner(RoundsAcrossMachines, Aligner):
    protocol = "psi"

    def align(self, views: Mapping[str, Dataset], ledger: PrivacyLedger, rng: np.random.Generator,
              ids: Mapping[str, Sequence[Any]] | None = None) -> Alignment:
        cfg = self.config or PSIConfig()
        norm, views, dropped = prepare_ids(views, ids, cfg)
        results = _run("psi", norm, cfg, rng)
        aligned = {p: views[p].take(results[p].rows) for p in views}
        return Alignment(aligned, self._info(norm, results, dropped, ids is not None))

    def align_rows(self, ids: Mapping[str, Sequence[Any]], ledger: PrivacyLedger, rng: np.random.Generator,
                   domains: Mapping[str, Any] | None = None, marginals: Any = None) -> RowMaps:
        """`align` for parties that read only their identifiers (`stream = true`): the row maps, not the
        tables (the same protocol run, randomness and info as `align`)."""
        cfg = self.config or PSIConfig()
        norm, kept, dropped = _prepare_streamed(ids, cfg)
        results = _run("psi", norm, cfg, rng)
        return RowMaps({p: kept[p][results[p].rows] for p in norm}, self._info(norm, results, dropped, True))

    @staticmethod
    def _info(norm: Mapping[str, list[str]], results: Mapping[str, PartyResult], dropped: dict[str, int],
              from_data: bool) -> dict[str, Any]:
        n = next(iter(results.values())).n_common
        return {"protocol": "psi", "records": n, "set_sizes": {p: len(v) for p, v in norm.items()},
                "intersection": n, "duplicates_dropped": dropped,
                "identifiers_from": "data" if from_data else "row positions",
                "revealed": "set sizes and the intersection (each party learns which of its rows are in it)"
                            + ("; the first party also sees partial-intersection sizes" if len(norm) > 2 else "")}


class PSUAligner(RoundsAcrossMachines, Aligner):
    protocol = "psu"

    def __init__(self, config: PSUConfig | None = None) -> None:
        super().__init__(config or PSUConfig())
        fill_mod.check_fill(self.config.fill, self.config.fill_columns)
        if not 0 < self.config.fill_budget < 1:
            raise ConfigError(f"alignment fill_budget is a fraction of the budget in (0, 1), got {self.config.fill_budget}")
        if self.config.max_copies < 1:
            raise ConfigError(f"alignment max_copies must be >= 1, got {self.config.max_copies}")
        self._dp_attrs: dict[str, list[str]] = {}
        self._charges: dict[str, Charge] = {}   # the planned fill charge per party, spent as planned

    def group_size(self) -> int:
        return 1 + self.config.max_copies if self.config.fill == "sample" else 1

    def plan(self, ctx: PlanContext) -> list[Charge]:
        unknown = [c for c in self.config.fill_columns if c not in ctx.domain.attributes]
        if unknown:
            raise ConfigError(f"alignment fill_columns name unknown attribute(s) {unknown}")
        self._dp_attrs = fill_mod.dp_attributes(self.config.fill, self.config.fill_columns, ctx.partition)
        if not self._dp_attrs:
            return []
        charges = fill_mod.plan_charges(self.config.fill_budget * ctx.rho, self._dp_attrs)
        self._charges = {c.party: c for c in charges}
        return charges

    def fill_party(self, party: str, view: Dataset, result: PartyResult, ledger: PrivacyLedger,
                   rng: np.random.Generator) -> Dataset:
        """One party's table over U: its rows at their positions, the rest filled (needs `plan` first when
        the fill releases DP marginals). A party runs this alone, in one process or on its own machine."""
        cfg = self.config
        self._check_sample(party, view.n, result)
        attrs_p = self._dp_attrs.get(party, [])
        charge = self._charges.get(party)
        if attrs_p and charge is None:
            raise ConfigError(f"party {party!r}: the DP fill needs the aligner's plan() first")
        return fill_mod.fill_view(view, result.rows, result.n_common, cfg.fill, cfg.fill_columns, attrs_p, charge,
                                  ledger, party, rng, cfg.max_copies)

    def align(self, views: Mapping[str, Dataset], ledger: PrivacyLedger, rng: np.random.Generator,
              ids: Mapping[str, Sequence[Any]] | None = None) -> Alignment:
        cfg = self.config
        norm, views, dropped = prepare_ids(views, ids, cfg)
        proto_rng, fill_rng = rng.spawn(2)
        results = _run("psu", norm, cfg, proto_rng)
        aligned, filled = {}, {}
        for (p, view), r in zip(views.items(), fill_rng.spawn(len(views))):
            aligned[p] = self.fill_party(p, view, results[p], ledger, r)
            filled[p] = ~results[p].held_mask()
        return Alignment(aligned, self._info(norm, results, filled, dropped, ids is not None), filled)

    def align_rows(self, ids: Mapping[str, Sequence[Any]], ledger: PrivacyLedger, rng: np.random.Generator,
                   domains: Mapping[str, Any] | None = None, marginals: Any = None) -> RowMaps:
        """`align` for parties that read only their identifiers (`stream = true`): the row maps and each
        party's `ChunkFill` (the same protocol run, fill, charges and info as `align`, drawn block by block).
        `domains`: each party's coded domain; `marginals(party, attributes, records)`: the exact 1-way
        counts of those attributes over the party's records (file rows `records`), concatenated, for the
        DP fill."""
        cfg = self.config
        norm, kept, dropped = _prepare_streamed(ids, cfg)
        proto_rng, fill_rng = rng.spawn(2)
        results = _run("psu", norm, cfg, proto_rng)
        rows, fills, filled = {}, {}, {}
        for p, r in zip(norm, fill_rng.spawn(len(norm))):
            n, result = len(norm[p]), results[p]
            self._check_sample(p, n, result)
            attrs_p = self._dp_attrs.get(p, [])
            charge = self._charges.get(p)
            if attrs_p and charge is None:
                raise ConfigError(f"party {p!r}: the DP fill needs the aligner's plan() first")
            counts = marginals(p, attrs_p, kept[p]) if attrs_p else None
            fills[p] = fill_mod.ChunkFill(domains[p], n, result.rows, result.n_common, cfg.fill,
                                          cfg.fill_columns, attrs_p, charge, ledger, p, r, counts, cfg.max_copies,
                                          kept[p])
            rows[p] = np.full(result.n_common, -1, dtype=np.int64)
            rows[p][result.rows] = kept[p]
            filled[p] = ~fills[p].held
        return RowMaps(rows, self._info(norm, results, filled, dropped, True), fills)

    def _check_sample(self, party: str, n: int, result: PartyResult) -> None:
        need = result.n_common - len(result.rows)
        if self.config.fill == "sample" and need > self.config.max_copies * n:
            raise DataError(f"party {party!r} must fill {need} rows but holds {n} records: 'sample' fill with "
                            f"max_copies = {self.config.max_copies} can fill at most {self.config.max_copies * n}; "
                            "raise max_copies (more group privacy) or use fill = 'marginal'")

    def _info(self, norm: Mapping[str, list[str]], results: Mapping[str, PartyResult],
              filled: Mapping[str, np.ndarray], dropped: dict[str, int], from_data: bool) -> dict[str, Any]:
        cfg = self.config
        n_u = next(iter(results.values())).n_common
        rates = {p: float(m.mean()) if n_u else 0.0 for p, m in filled.items()}
        overlap = int(np.sum(np.all(np.stack([~m for m in filled.values()]), axis=0))) if n_u else 0
        return {"protocol": "psu", "records": n_u, "set_sizes": {p: len(v) for p, v in norm.items()},
                "union": n_u, "fill": cfg.fill, "fill_rates": rates, "duplicates_dropped": dropped,
                "identifiers_from": "data" if from_data else "row positions",
                "rows_held_by_every_party": overlap,
                "group_size": self.group_size(),
                "revealed": "set sizes and the union size (for two parties the intersection size follows); no "
                            "party learns which of its identifiers the others hold"
                            + ("; the first party also sees partial-intersection sizes" if len(norm) > 2 else ""),
                "note": f"filled rows dilute cross-party correlations (non-overlap {1 - overlap / n_u:.1%} of rows)"
                        if n_u else ""}
