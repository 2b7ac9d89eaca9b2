"""Study runner: grid expansion, seeds, resume, local vs Dask, outputs and bad input."""
from __future__ import annotations

import copy
import tomllib
from pathlib import Path

import pandas as pd
import pytest

from vertisynth.core.errors import ConfigError, PluginError
from vertisynth.study import expand_grid, run_study
from vertisynth.study.grid import apply_quick

BASE = {
    "seed": 3,
    "budget": {"epsilon": 1.0, "delta": 1e-5},
    "dataset": {"name": "census", "params": {"n": 1500}},
    "synthesizer": {"use": "independent"},
    "evaluators": [{"use": "tvd", "params": {"ways": [2], "marginals": 5}}],
    "study": {"grid": {"budget.epsilon": [0.5, 2.0]}, "repeats": 2},
}


def study(**changes):
    data = copy.deepcopy(BASE)
    data["study"].update(changes)
    return data


def test_grid_expansion_is_the_product_times_repeats():
    cells = expand_grid(study(grid={"budget.epsilon": [0.5, 1.0, 2.0], "dataset.params.n": [100, 200]}, repeats=3))
    assert len(cells) == 3 * 2 * 3
    assert {(c.config["budget"]["epsilon"], c.config["dataset"]["params"]["n"]) for c in cells} == \
        {(e, n) for e in (0.5, 1.0, 2.0) for n in (100, 200)}
    assert len({c.key for c in cells}) == len(cells)
    assert "study" not in cells[0].config


def test_seeds_distinct_across_repeats_shared_across_methods_and_reproducible():
    cells = expand_grid(study(repeats=4))
    by_eps = {}
    for c in cells:
        by_eps.setdefault(c.config["budget"]["epsilon"], []).append(c.seed)
    assert all(len(set(s)) == 4 for s in by_eps.values())
    assert by_eps[0.5] == by_eps[2.0]                      # paired comparison across grid points
    assert [c.seed for c in expand_grid(study(repeats=4))] == [c.seed for c in cells]
    other = copy.deepcopy(BASE)
    other["seed"] = 4
    assert [c.seed for c in expand_grid(other)] != [c.seed for c in expand_grid(BASE)]


@pytest.mark.parametrize("grid, match", [
    ({}, "grid is empty"),
    ({"bogus.key": [1]}, "unknown key 'bogus.key'"),
    ({"budget.epsilon": []}, "non-empty list"),
    ({"budget.epsilonn": [1.0]}, "epsilonn"),
])
def test_bad_grids_raise_config_errors(grid, match):
    with pytest.raises(ConfigError, match=match):
        expand_grid(study(grid=grid))


def test_missing_study_table_and_bad_quick():
    data = copy.deepcopy(BASE)
    del data["study"]
    with pytest.raises(ConfigError, match="no \\[study\\] table"):
        expand_grid(data)
    with pytest.raises(ConfigError, match="no \\[study.quick\\]"):
        apply_quick(BASE)


def test_unknown_synthesizer_lists_choices(tmp_path):
    with pytest.raises(PluginError, match="independent"):
        run_study(study(grid={"synthesizer.use": ["no_such_synth"]}), tmp_path, n_jobs=1, progress=False)


def test_resume_computes_only_missing_cells(tmp_path, monkeypatch):
    import vertisynth.study.runner as runner

    first = run_study(BASE, tmp_path, n_jobs=1, progress=False, only=1)   # "killed" after one cell
    assert first["cell"].nunique() == 1
    calls = []
    real_run_cell = runner.run_cell
    monkeypatch.setattr(runner, "run_cell", lambda c, *a: (calls.append(c.index), real_run_cell(c, *a))[1])
    full = run_study(BASE, tmp_path, n_jobs=1, progress=False)
    assert sorted(calls) == [1, 2, 3]                                     # cell 0 was cached
    assert full["cell"].nunique() == 4
    pd.testing.assert_frame_equal(full[full["cell"] == 0].reset_index(drop=True), first)
    calls.clear()
    again = run_study(BASE, tmp_path, n_jobs=1, progress=False)
    assert calls == []
    pd.testing.assert_frame_equal(again, full)
    for name in ("results.csv", "results.parquet", "summary.md"):
        assert (tmp_path / name).is_file()
    summary = (tmp_path / "summary.md").read_text()
    assert "| independent | 0.5 |" in summary and "figures/census__tvd.tvd_2way.png" in summary
    assert (tmp_path / "figures" / "census__tvd.tvd_2way.png").stat().st_size > 1000
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "results.parquet"), full)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "results.csv"), full, check_dtype=False)


def test_more_budget_scores_better_on_average(tmp_path):
    table = run_study(study(grid={"budget.epsilon": [0.05, 5.0]}, repeats=2), tmp_path, n_jobs=1, progress=False)
    means = table.groupby("epsilon")["value"].mean()
    assert means[5.0] < means[0.05]


def test_dask_path_gives_the_same_table_as_local(tmp_path):
    distributed = pytest.importorskip("dask.distributed")
    local = run_study(BASE, tmp_path / "local", n_jobs=1, progress=False)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        remote = run_study(BASE, tmp_path / "dask", scheduler=cluster.scheduler_address, progress=False)
    pd.testing.assert_frame_equal(local, remote)


def test_dask_path_stops_with_one_line_when_the_cluster_has_no_worker(tmp_path, monkeypatch):
    """A cluster with no worker (all lost, or scaled to zero) can finish no cell: the study used to wait on
    `as_completed` forever. Now, after VERTISYNTH_DASK_WAIT_S seconds without a worker, one DataError names the
    unfinished cells and the resume; a cell that runs longer than that on a live worker still finishes."""
    import time
    from vertisynth.core.errors import DataError
    from vertisynth.study import runner
    distributed = pytest.importorskip("dask.distributed")
    monkeypatch.setenv("VERTISYNTH_DASK_WAIT_S", "1")
    with distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster:
        start = time.monotonic()
        with pytest.raises(DataError, match=r"no worker for 1 s with 4 of 4 cells unfinished.*resumes") as got:
            run_study(BASE, tmp_path / "none", scheduler=cluster.scheduler_address, progress=False)
        assert "\n" not in str(got.value) and time.monotonic() - start < 30
    real = runner.run_cell

    def slow_cell(*args):   # longer than the wait, on a live worker: not an error
        time.sleep(1.5)
        return real(*args)
    monkeypatch.setattr(runner, "run_cell", slow_cell)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster:
        table = run_study(BASE, tmp_path / "slow", scheduler=cluster.scheduler_address, progress=False)
    assert len(list((tmp_path / "slow" / "cells").glob("*.json"))) == 4 and set(table["epsilon"]) == {0.5, 2.0}


def test_party_count_splits_the_attributes_into_contiguous_parties():
    cells = expand_grid(study(grid={"parties.count": [2, 5]}, repeats=1))
    for cell, k in zip(cells, (2, 5)):
        parts = [p["attributes"] for p in cell.config["parties"]]
        assert len(parts) == k and max(map(len, parts)) - min(map(len, parts)) <= 1
        assert sum(parts, []) == sum([p["attributes"] for p in cells[0].config["parties"]], [])
    with pytest.raises(ConfigError, match="parties.count"):
        expand_grid(study(grid={"parties.count": [99]}))


def test_variants_of_one_synthesizer_get_their_own_method_label(tmp_path):
    grid = {"synthesizer": [{"use": "independent", "params": {"mechanism": "gaussian"}},
                            {"use": "independent", "params": {"mechanism": "laplace"}}]}
    from vertisynth.study.runner import method_labels
    cells = expand_grid(study(grid=grid, repeats=1))
    assert method_labels([c.config for c in cells]) == ["independent[mechanism=gaussian]",
                                                       "independent[mechanism=laplace]"]


STUDY_FILES = sorted((Path(__file__).resolve().parents[2] / "studies").glob("*.toml"))


@pytest.mark.parametrize("path", STUDY_FILES, ids=lambda p: p.stem)
def test_study_files_expand_in_full_and_quick(path):
    data = tomllib.loads(path.read_text())
    quick = expand_grid(apply_quick(data))
    assert 1 <= len(quick) <= 12
    if "parties.count" not in data["study"]["grid"]:       # needs the benchmark schema: see the next test
        full = expand_grid(data)
        assert len(full) > len(quick)


@pytest.mark.shared_data
def test_parties_study_splits_nltcs(data_dir):
    data = tomllib.loads((Path(__file__).resolve().parents[2] / "studies" / "parties.toml").read_text())
    cells = expand_grid(data, str(data_dir))
    assert {len(c.config["parties"]) for c in cells} == {2, 4, 8, 16}


def test_paper_fig4_has_the_papers_grid():
    grid = tomllib.loads((Path(__file__).resolve().parents[2] / "studies" / "paper_fig4.toml").read_text())["study"]["grid"]
    assert grid["budget.epsilon"] == [0.2, 0.4, 0.8, 1.6, 3.2]
    assert grid["dataset.name"] == ["nltcs", "adult"]
    assert [s["use"] for s in grid["synthesizer"]] == ["vertimrf", "vertimrf", "privmrf", "independent"]
