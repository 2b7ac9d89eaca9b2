"""Study presets shipped with the package (`vertisynth study --preset NAME`): study files under presets/.

A preset may carry a `[preset]` table, read here and removed before the study runs:
  synthesizers = "builtin"   the grid's `synthesizer` axis: every synthesizer the vertisynth distribution
                             registers (so one added to the package joins the preset without editing it);
  params = { name = {...} }  params for some of them (e.g. vertimrf's encoder);
  data_folder = [names]      datasets read from the data folder (--data-dir / VERTISYNTH_DATA): dropped from the
                             grid, with one warning line, when the folder is not given or lacks them.
"""
from __future__ import annotations

import copy
import os
import tomllib
import warnings
from importlib import resources
from pathlib import Path
from typing import Any

import attrs

from vertisynth.core.errors import ConfigError, VertisynthWarning
from vertisynth.core.registry import default_registry

BUILTIN_DISTRIBUTION = "vertisynth"
DATA_ENV = "VERTISYNTH_DATA"


class SkippedDatasetWarning(VertisynthWarning):
    """A preset's benchmark dataset is left out: the data folder is not given or does not hold it."""


def preset_names() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files(__package__).joinpath("presets").iterdir()
                  if p.name.endswith(".toml"))


def builtin_synthesizers() -> list[str]:
    """The synthesizers registered by the vertisynth distribution itself (not by other installed plugins)."""
    reg = default_registry()
    return [n for n in reg.names("synthesizer") if reg.provider("synthesizer", n) == BUILTIN_DISTRIBUTION]


def load_preset(name: str, data_dir: str | None = None, rows: int | None = None) -> dict[str, Any]:
    """The preset's study dict, ready for run_study. `rows` caps every dataset's record count (tests, smoke
    runs): it sets the dataset's `n` or `sample` parameter, whichever its settings class has."""
    names = preset_names()
    if name not in names:
        raise ConfigError(f"study: unknown preset {name!r}; choose one of: {', '.join(names)}")
    data = tomllib.loads(resources.files(__package__).joinpath("presets", f"{name}.toml").read_text())
    spec = data.pop("preset", {}) or {}
    unknown = set(spec) - {"synthesizers", "params", "data_folder"}
    if unknown:
        raise ConfigError(f"preset {name!r}: unknown [preset] keys {sorted(unknown)}")
    study = data["study"]
    quick = study.get("quick") or {}
    if spec.get("synthesizers") == "builtin":
        params = spec.get("params", {})
        study["grid"]["synthesizer"] = [{"use": s, **({"params": copy.deepcopy(params[s])} if s in params else {})}
                                        for s in builtin_synthesizers()]
    absent = _absent_datasets(spec.get("data_folder", []), data_dir)
    if absent:
        why = sorted(set(absent.values()))
        warnings.warn(f"preset {name!r}: skipping {', '.join(absent)}: {'; '.join(why)}",
                      SkippedDatasetWarning, stacklevel=2)
    for grid in (study["grid"], quick.get("grid", {})):
        if "dataset" in grid:
            grid["dataset"] = [d for d in grid["dataset"] if d.get("name") not in absent]
            if not grid["dataset"]:
                raise ConfigError(f"preset {name!r}: no dataset left after skipping {', '.join(absent)}")
            if rows is not None:
                grid["dataset"] = [_cap_rows(d, rows) for d in grid["dataset"]]
    return data


def _absent_datasets(names: list[str], data_dir: str | None) -> dict[str, str]:
    """name -> why, for the data-folder datasets that cannot be read."""
    raw = data_dir or os.environ.get(DATA_ENV)
    if not raw:
        return {n: f"no data folder (pass --data-dir DIR or set {DATA_ENV})" for n in names}
    root = Path(raw).expanduser()
    return {n: f"the data folder {str(root)!r} has no {n}/ subfolder" for n in names if not (root / n).is_dir()}


def _cap_rows(dataset: dict[str, Any], rows: int) -> dict[str, Any]:
    if not isinstance(rows, int) or isinstance(rows, bool) or rows < 1:
        raise ConfigError(f"study: rows must be a positive integer, got {rows!r}")
    cls = default_registry().get("dataset", dataset.get("name", "census")).load_config_cls()
    fields = attrs.fields_dict(cls) if cls is not None else {}
    key = "n" if "n" in fields else "sample" if "sample" in fields else None
    if key is None:
        raise ConfigError(f"study: dataset {dataset.get('name')!r} has no n or sample setting to cap its rows")
    return {**dataset, "params": {**dataset.get("params", {}), key: rows}}
