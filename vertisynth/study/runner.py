"""Run the cells of a study: each cell is one `pipeline.run`, cached on disk as `cells/<hash>.json`.

Each cache file carries `digest`: the SHA-256 of the record's canonical JSON and the cell's resolved config
(not a MAC: it catches a cell edited by hand or copied from another config, not someone who recomputes it).
A cell whose digest does not match is recomputed, with one warning naming it, so an edited number never
reaches the results or the figures.

Cells run in parallel with joblib (local processes) or, given a scheduler address, on an existing Dask
distributed cluster. A cell writes its cache file atomically when it finishes, so a killed study restarted
with the same file recomputes only the cells without one.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from vertisynth.run.config import parse_config
from vertisynth.run.console import PlainProgress, is_terminal
from vertisynth.run.pipeline import make_plan, run
from vertisynth.core.cluster import DASK_WAIT_ENV, dask_client, dask_wait_s
from vertisynth.core.errors import ConfigError, DataError, PluginError, VertisynthWarning
from vertisynth.core.processes import process_alive
from vertisynth.study.grid import Cell, apply_quick, dataset_label, expand_grid
from vertisynth.study.outputs import write_outputs

_WATCHED: set[int] = set()


def _watch_runner(runner_pid: int) -> None:
    """In a local worker: exit as soon as the study process that started it is gone (killed, Ctrl-C), so no
    worker goes on computing and writing cells for a study nobody runs. One daemon thread per worker."""
    if runner_pid == os.getpid() or runner_pid in _WATCHED:
        return
    _WATCHED.add(runner_pid)
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent and process_alive(runner_pid):
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="vertisynth-study-watchdog", daemon=True).start()


def run_cell(cell: Cell, cache_dir: str, data_dir: str | None, runner_pid: int | None = None) -> str:
    """Run one cell and write its metric rows to the cache; returns the cell key. Runs in a worker.

    runner_pid: the local study process; the worker stops when it is gone (None on a Dask cluster)."""
    if runner_pid is not None:
        _watch_runner(runner_pid)
    start = time.perf_counter()
    result = run(parse_config(cell.config, where=f"study cell {cell.index}"), data_dir=data_dir)
    rows = [{"evaluator": ev, "metric": m, "value": float(v)}
            for ev, metrics in result.metrics.items() for m, v in metrics.items()
            if isinstance(v, (int, float))]
    record = {"key": cell.key, "seed": cell.seed, "repeat": cell.repeat, "point": cell.point,
              "dataset": dataset_label(cell.config.get("dataset") or {}),
              "method": cell.config.get("synthesizer", {}).get("use", "independent"),
              "params": cell.config.get("synthesizer", {}).get("params", {}),
              "epsilon": cell.config["budget"]["epsilon"], "rows": rows,
              "seconds": time.perf_counter() - start}
    record["digest"] = cell_digest(json.loads(json.dumps(record, default=str)), cell.config)
    if runner_pid is not None and not process_alive(runner_pid):
        os._exit(1)   # the study was killed while this cell ran: write nothing
    fd, tmp = tempfile.mkstemp(dir=cache_dir, suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(record, fh, default=str)
    os.replace(tmp, Path(cache_dir) / f"{cell.key}.json")   # atomic: a killed cell leaves no cache file
    return cell.key


def _check_plugins(cells: list[Cell], data_dir: str | None) -> None:
    """Resolve every distinct cell's plugins before running anything (unknown names list the choices)."""
    seen = set()
    for cell in cells:
        cfg = {k: v for k, v in cell.config.items() if k != "seed"}
        key = json.dumps(cfg, sort_keys=True, default=str)
        if key in seen:
            continue
        seen.add(key)
        try:
            make_plan(parse_config(cell.config), data_dir=data_dir)
        except (PluginError, ConfigError) as exc:   # e.g. a nested setting of a plugin: name the cell
            raise type(exc)(f"study cell {cell.point}: {exc}") from None


def run_study(data: dict[str, Any], out_dir: str | Path, *, quick: bool = False, n_jobs: int | None = None,
              scheduler: str | None = None, data_dir: str | None = None, progress: bool = True,
              only: int | None = None) -> pd.DataFrame:
    """Run (or resume) a study; returns the tidy results table and writes outputs under `out_dir`.

    `only` stops after that many newly computed cells (used to simulate an interrupted run in tests)."""
    if quick:
        data = apply_quick(data)
    study = parse_config(data, where="study file").section("study")
    cells = expand_grid(data, data_dir)
    _check_plugins(cells, data_dir)
    out = Path(out_dir)
    cache = out / "cells"
    cache.mkdir(parents=True, exist_ok=True)
    # one run per distinct resolved config: two grid points that resolve alike share a cache file, and running
    # both at once would compute it twice (in parallel, neither finds the other's file)
    todo = list({c.key: c for c in cells if read_cell(cache, c) is None}.values())
    if only is not None:
        todo = todo[:only]
    scheduler = scheduler or study.scheduler
    n_jobs = n_jobs if n_jobs is not None else study.n_jobs
    if progress and not is_terminal(sys.stderr):   # a log, not a terminal: plain lines, not bar frames
        bar = PlainProgress("study cells", len(cells), len(cells) - len(todo), line_per_update=True)
    else:
        bar = tqdm(total=len(cells), initial=len(cells) - len(todo), desc="study cells", unit="cell",
                   disable=not progress, bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}]")
    if todo and scheduler:
        _run_dask(todo, str(cache), data_dir, scheduler, bar)
    elif todo:
        from joblib import Parallel, delayed
        jobs = Parallel(n_jobs=n_jobs, return_as="generator_unordered")(
            delayed(run_cell)(c, str(cache), data_dir, os.getpid()) for c in todo)
        for _ in jobs:
            bar.update(1)
    bar.close()
    table = collect(cells, cache)
    write_outputs(table, out)
    return table


def _run_dask(todo: list[Cell], cache: str, data_dir: str | None, scheduler: str, bar: Any) -> None:
    try:
        from dask.distributed import wait
    except ImportError:
        raise ConfigError("study: a scheduler was given but dask.distributed is not installed "
                          "(pip install 'vertisynth[dask]')") from None
    client = dask_client(scheduler)   # an unreachable scheduler: one line, not a traceback from distributed
    with client:
        futures = [client.submit(run_cell, c, cache, data_dir, pure=False) for c in todo]
        # a cell may run for as long as its synthesizer needs, so the wait is not on a cell but on the cluster: with
        # no worker left for dask_wait_s() seconds (lost, killed, scaled to zero) no cell can finish, and the study
        # stops with one line instead of waiting forever; the finished cells are cached, a rerun resumes
        pending, lone_since, bound = set(futures), None, dask_wait_s()
        while pending:
            try:
                done, pending = wait(pending, timeout=min(5.0, bound), return_when="FIRST_COMPLETED")
            except TimeoutError:   # distributed's TimeoutError is the builtin: nothing finished in this poll
                done = set()
            for fut in done:
                fut.result()   # a cell's own error comes back as that error
                bar.update(1)
            if pending and not client.scheduler_info().get("workers"):
                lone_since = lone_since if lone_since is not None else time.monotonic()
                if time.monotonic() - lone_since >= bound:
                    client.cancel(list(pending))
                    raise DataError(f"study: the Dask cluster at {scheduler!r} has had no worker for "
                                    f"{bound:g} s with {len(pending)} of {len(todo)} cells unfinished; the "
                                    f"finished cells are cached, so rerunning the study resumes ({DASK_WAIT_ENV} "
                                    "sets the wait)")
            else:
                lone_since = None


class EditedCellWarning(VertisynthWarning):
    """A cached study cell does not match its digest (edited by hand, or from another config): recomputed."""


def cell_digest(record: dict[str, Any], config: dict[str, Any]) -> str:
    """SHA-256 over the record (without its digest) and the cell's resolved config, both as canonical JSON."""
    body = {k: v for k, v in record.items() if k != "digest"}
    canon = json.dumps({"record": body, "config": config}, sort_keys=True, separators=(",", ":"), default=str,
                       ensure_ascii=True)
    return hashlib.sha256(canon.encode()).hexdigest()


def read_cell(cache: Path, cell: Cell) -> dict[str, Any] | None:
    """A finished cell's record, or None when it has none. A cache file that does not parse, lacks what
    a record holds (cut short, from another version) or does not match its digest is removed, so that the
    cell is computed again (the last with one warning naming the cell)."""
    path = cache / f"{cell.key}.json"
    if not path.is_file():
        return None
    try:
        rec = json.loads(path.read_text())
        if isinstance(rec, dict) and rec.get("key") == cell.key and isinstance(rec.get("rows"), list) \
                and all({"evaluator", "metric", "value"} <= set(r) for r in rec["rows"]) \
                and {"dataset", "epsilon"} <= set(rec):
            # a round trip through JSON, as written: the digest is over what the file says
            if rec.get("digest") == cell_digest(json.loads(json.dumps(rec, default=str)), cell.config):
                return rec
            warnings.warn(f"study cell {cell.index} ({path.name}) does not match its digest (edited, or written "
                          "by another version): recomputing it", EditedCellWarning, stacklevel=2)
    except (json.JSONDecodeError, UnicodeDecodeError, TypeError):
        pass
    path.unlink(missing_ok=True)
    return None


def collect(cells: list[Cell], cache: Path) -> pd.DataFrame:
    """Tidy table, one row per cell x metric, in cell order (finished cells only)."""
    rows = []
    records = {c.index: rec for c in cells if (rec := read_cell(cache, c)) is not None}
    labels = method_labels([c.config for c in cells])
    for cell in cells:
        rec = records.get(cell.index)
        if rec is None:
            continue
        for r in rec["rows"]:
            rows.append({"cell": cell.index, "key": cell.key, "dataset": rec["dataset"],
                         "method": labels[cell.index],
                         "epsilon": float(rec["epsilon"]), "repeat": cell.repeat, "seed": cell.seed,
                         **{f"grid:{k}": json.dumps(v) if isinstance(v, (list, dict)) else v
                            for k, v in cell.point.items()},
                         "evaluator": r["evaluator"], "metric": r["metric"], "value": r["value"]})
    return pd.DataFrame(rows)


def method_labels(configs: list[dict[str, Any]]) -> list[str]:
    """`use`, plus the synthesizer params that vary between cells of the same `use` (e.g. vertimrf[encoder=grr]),
    so variants of one synthesizer get their own line in the summary and figures."""
    synths = [c.get("synthesizer", {}) for c in configs]
    varying: dict[str, set[str]] = {}
    for s in synths:
        for other in synths:
            if s.get("use") == other.get("use"):
                p, q = s.get("params", {}), other.get("params", {})
                varying.setdefault(s.get("use"), set()).update(k for k in set(p) | set(q) if p.get(k) != q.get(k))
    # [collab] settings that vary between cells (e.g. local vs combined binning) name a method too
    collabs = [{k: v for k, v in (c.get("collab") or {}).items() if k != "tuning"} for c in configs]
    collab_keys = sorted({k for c in collabs for k in c if any(o.get(k) != c.get(k) for o in collabs)})
    labels = []
    for s, col in zip(synths, collabs):
        keys = sorted(varying.get(s.get("use"), ()))
        params = s.get("params", {})
        extra = ",".join([f"{k}={json.dumps(params[k]) if isinstance(params.get(k), (dict, list)) else params.get(k)}"
                          for k in keys if k in params]
                         + [f"collab.{k}={json.dumps(col[k]) if isinstance(col.get(k), (dict, list)) else col.get(k)}"
                            for k in collab_keys if k in col])
        labels.append(f"{s.get('use', 'independent')}[{extra}]" if extra else s.get("use", "independent"))
    return labels
