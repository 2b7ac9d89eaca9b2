"""Grid expansion: a base config plus `[study] grid = {"dotted.key" = [values]}` and `repeats`.

Each cell is the base config with one value per grid key set at its dotted path, and a seed drawn from
SeedSequence([base seed, repeat]): repeats get distinct seeds, and every method shares the seed of the same
repeat (common random numbers make the per-repeat comparison paired). A cell is identified by the SHA-256 of
its resolved config, which is also its cache key.

Whole tables are grid values too (`synthesizer = [{use = "vertimrf", params = {encoder = "grr"}}, ...]`), and
the virtual key `parties.count = [2, 4, 8]` splits the dataset's attributes, in schema order, into that many
contiguous parties of near-equal size (the VertiMRF paper's Figure 6 experiment).

Any plugin parameter is a grid key too: `"synthesizer.params.iters" = [300, 1000]`, `"dataset.params.n"`,
`"evaluators.0.params.ways"` (a number indexes a list). Each such key is checked against the plugin's own
settings class while the grid expands, so an unknown parameter or a bad value stops the study before any cell
runs, in one line naming the key and the cell.
"""
from __future__ import annotations

import copy
import hashlib
import itertools
import json
from typing import Any

import attrs
import numpy as np

from vertisynth.core.noise import path_seed
from vertisynth.core.registry import default_registry
from vertisynth.core.structuring import structure
from vertisynth.run.config import DatasetConfig, RunConfig, parse_config, section_classes
from vertisynth.core.errors import ConfigError, VertisynthError

# Keys under these may be created by the grid (free-form params); everything else must already be a field.
_FREE_FORM = ("params",)


@attrs.frozen
class Cell:
    index: int
    repeat: int
    seed: int
    point: dict[str, Any]      # grid key -> value for this cell
    config: dict[str, Any]     # resolved config (no [study] table)
    key: str                   # sha256 of the resolved config: the cache key


def config_hash(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


PARTY_COUNT = "parties.count"


def _check_key(base: dict[str, Any], key: str) -> None:
    if key == PARTY_COUNT:
        return
    parts = key.split(".")
    if not key or any(not p for p in parts):
        raise ConfigError(f"study.grid: {key!r} is not a dotted config key such as 'budget.epsilon'")
    fields = ({f.name for f in attrs.fields(RunConfig)} | set(section_classes())) - {"study", "sections"}
    if parts[0] not in fields:
        raise ConfigError(f"study.grid: unknown key {key!r}: {parts[0]!r} is not a config section "
                          f"(choices: {', '.join(sorted(fields))})")


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    """Set `value` at the dotted path `key`; a number indexes a list (`evaluators.0.params.ways`)."""
    parts = key.split(".")
    node: Any = data
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise ConfigError(f"study.grid: {key!r}: {'.'.join(parts[:i]) or part!r} is a list of "
                                  f"{len(node)}; index it with a number below {len(node)}, got {part!r}")
            if last:
                node[int(part)] = copy.deepcopy(value)
                return
            node = node[int(part)]
            continue
        if not isinstance(node, dict):
            raise ConfigError(f"study.grid: {key!r}: {'.'.join(parts[:i])!r} is not a table")
        if last:
            node[part] = copy.deepcopy(value)
            return
        if node.get(part) is None:
            node[part] = {}
        node = node[part]


# grid key prefix -> (registry kind, the field naming the plugin) for `<prefix>.params.<name>` keys
_PARAM_OWNERS = {"synthesizer": ("synthesizer", "use"), "alignment": ("aligner", "use"),
                 "dataset": ("dataset", "name"), "evaluators": ("evaluator", "use")}


def _params_target(key: str) -> tuple[str, int | None] | None:
    """('synthesizer', None) for 'synthesizer.params.x', ('evaluators', 0) for 'evaluators.0.params.x'."""
    parts = key.split(".")
    if parts[0] == "evaluators":
        if len(parts) > 3 and parts[1].isdigit() and parts[2] == "params":
            return "evaluators", int(parts[1])
        return None
    if parts[0] in _PARAM_OWNERS and len(parts) > 2 and parts[1] == "params":
        return parts[0], None
    return None


def check_params(config: RunConfig, keys: list[str], where: str) -> None:
    """Structure the params a grid key writes into with the plugin's settings class: an unknown parameter or a
    bad value is a one-line ConfigError naming the key and the cell (not a failure deep inside a worker)."""
    registry = default_registry()
    for key in keys:
        target = _params_target(key)
        if target is None:
            continue
        section, index = target
        kind, field = _PARAM_OWNERS[section]
        entry = getattr(config, section) if index is None else config.evaluators[index]
        name = getattr(entry, field)
        try:
            cls = registry.get(kind, name).load_config_cls()
        except VertisynthError:
            continue   # an unknown plugin: the study's plugin check names the choices
        params = entry.params
        if cls is None:
            raise ConfigError(f"study.grid: {key!r} ({where}): {kind} {name!r} takes no params")
        try:
            structure(params, cls, f"{key.rsplit('.params.', 1)[0]}.params of {name!r}")
        except ConfigError as exc:
            msg = str(exc).replace("\n", "; ")
            raise ConfigError(f"study.grid: {key!r} ({where}): {msg}") from None


def repeat_seed(base_seed: int, repeat: int) -> int:
    return path_seed(int(base_seed), int(repeat))


def dataset_attributes(dataset: dict[str, Any], data_dir: str | None) -> tuple[str, ...]:
    """The dataset's attribute names in schema order, from its source (no records are read)."""
    ds = structure(dataset or {}, DatasetConfig, "dataset")
    spec = default_registry().get("dataset", ds.name)
    cls = spec.load_config_cls()
    source = spec.load_factory()(structure(ds.params, cls, "dataset.params") if cls else None, data_dir)
    return tuple(source.schema.preview_domain().attributes)


def dataset_label(dataset: dict[str, Any]) -> str:
    """The dataset's name in results, with its zoo preset (`zoo:wide`): presets of one generator are different
    datasets and must not be averaged together."""
    name = dataset.get("name", "census")
    preset = (dataset.get("params") or {}).get("preset")
    return f"{name}:{preset}" if preset else name


def split_parties(names: tuple[str, ...], count: Any) -> list[dict[str, Any]]:
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= len(names):
        raise ConfigError(f"study.grid: parties.count must be an integer in [1, {len(names)}] "
                          f"(the number of attributes), got {count!r}")
    chunks = np.array_split(np.arange(len(names)), count)
    return [{"name": f"party{i + 1}", "attributes": [names[j] for j in c]} for i, c in enumerate(chunks)]


def expand_grid(data: dict[str, Any], data_dir: str | None = None) -> list[Cell]:
    """Expand a study file's dict into cells; every resolved config is validated by parse_config."""
    data = copy.deepcopy(dict(data))
    study = data.pop("study", None)
    if not study:
        raise ConfigError("study: the file has no [study] table with a grid")
    grid = study.get("grid") or {}
    repeats = study.get("repeats", 1)
    if not isinstance(grid, dict) or not grid:
        raise ConfigError("study.grid: the grid is empty; give at least one key, e.g. "
                          "grid = { \"budget.epsilon\" = [0.5, 1.0] }")
    if not isinstance(repeats, int) or repeats < 1:
        raise ConfigError(f"study.repeats must be a positive integer, got {repeats!r}")
    for key, values in grid.items():
        _check_key(data, key)
        if not isinstance(values, list) or not values:
            raise ConfigError(f"study.grid: {key!r} needs a non-empty list of values, got {values!r}")
    base_seed = data.get("seed", 0)
    keys = list(grid)
    cells = []
    for combo in itertools.product(*(grid[k] for k in keys)):
        for r in range(repeats):
            resolved = copy.deepcopy(data)
            for k, v in zip(keys, combo):
                if k != PARTY_COUNT:
                    set_dotted(resolved, k, v)
            if PARTY_COUNT in grid:
                names = dataset_attributes(resolved.get("dataset", {}), data_dir)
                resolved["parties"] = split_parties(names, combo[keys.index(PARTY_COUNT)])
            resolved["seed"] = repeat_seed(base_seed, r)
            where = "study cell " + ", ".join(f"{k}={v!r}" for k, v in zip(keys, combo))
            parsed = parse_config(resolved, where=where)   # unknown keys / bad values -> ConfigError naming the cell
            check_params(parsed, keys, where)
            cells.append(Cell(len(cells), r, resolved["seed"], dict(zip(keys, combo)), resolved,
                              config_hash(resolved)))
    return cells


def apply_quick(data: dict[str, Any]) -> dict[str, Any]:
    """`[study.quick]`: a smaller variant for CI: `grid` entries replace the full grid's, `repeats` replaces
    repeats, and `set = {"dotted.key" = value}` overrides base keys (e.g. a smaller dataset)."""
    data = copy.deepcopy(dict(data))
    study = data.get("study") or {}
    quick = study.pop("quick", None)
    if quick is None:
        raise ConfigError("study: --quick was asked for but the file has no [study.quick] table")
    unknown = set(quick) - {"grid", "repeats", "set"}
    if unknown:
        raise ConfigError(f"study.quick: unknown keys {sorted(unknown)} (allowed: grid, repeats, set)")
    study["grid"] = {**study.get("grid", {}), **quick.get("grid", {})}
    if "repeats" in quick:
        study["repeats"] = quick["repeats"]
    for k, v in quick.get("set", {}).items():
        _check_key(data, k)
        set_dotted(data, k, v)
    data["study"] = study
    return data
