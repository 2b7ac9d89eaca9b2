"""Evaluator properties (hypothesis) for tvd, workload_error and correlation, plus their bad inputs."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from vertisynth.run.config import parse_config
from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.errors import ConfigError, DataError
from vertisynth.run.pipeline import make_plan, run
from vertisynth.plugins.evaluators.correlation import Correlation, pair_association
from vertisynth.plugins.evaluators.tvd import TVDConfig, TVDEvaluator, distinct_subsets
from vertisynth.plugins.evaluators.workload import WorkloadConfig, WorkloadError

DOMAIN = Domain(("a", "b", "c", "d"), (2, 3, 4, 2))


def tables(n_min=1, n_max=60):
    return st.lists(st.tuples(*(st.integers(0, s - 1) for s in DOMAIN.shape)), min_size=n_min, max_size=n_max) \
        .map(lambda rows: Dataset(np.array(rows, dtype=np.int64).reshape(-1, len(DOMAIN.shape)), DOMAIN))


def tvd(x, y, ways=(2,)):
    return TVDEvaluator(TVDConfig(ways=list(ways), marginals=10)).evaluate(x, y, np.random.default_rng(0))


@settings(max_examples=40, deadline=None)
@given(tables(), tables(), tables())
def test_tvd_is_a_bounded_symmetric_metric(x, y, z):
    for k in (1, 2, 3):
        xy, yx = tvd(x, y, [k])[f"tvd_{k}way"], tvd(y, x, [k])[f"tvd_{k}way"]
        assert tvd(x, x, [k])[f"tvd_{k}way"] == 0.0
        assert 0.0 <= xy <= 1.0 and xy == pytest.approx(yx)
        # triangle inequality holds marginal by marginal, hence for the average over the same subsets
        assert xy <= tvd(x, z, [k])[f"tvd_{k}way"] + tvd(z, y, [k])[f"tvd_{k}way"] + 1e-12


@settings(max_examples=30, deadline=None)
@given(tables(n_min=5), st.integers(0, 2**32 - 1))
def test_a_table_closer_to_the_truth_scores_better(truth, seed):
    rng = np.random.default_rng(seed)
    noise = Dataset(np.column_stack([rng.integers(0, s, 200) for s in DOMAIN.shape]), DOMAIN)
    near = Dataset(np.vstack([truth.codes] * 10 + [noise.codes[:20]]), DOMAIN)     # mostly truth
    far = Dataset(np.vstack([truth.codes] * 10 + [noise.codes]), DOMAIN)            # more noise on top
    assert tvd(truth, near)["tvd_2way"] <= tvd(truth, far)["tvd_2way"] + 1e-12
    wl = WorkloadError(WorkloadConfig(ways=[1, 2]))
    a, b = (wl.evaluate(truth, t, np.random.default_rng(0))["l1_mean"] for t in (near, far))
    assert a <= b + 1e-12


@settings(max_examples=30, deadline=None)
@given(tables(), tables())
def test_workload_error_is_twice_tvd_on_the_same_marginals(x, y):
    wl = WorkloadError(WorkloadConfig(ways=[2])).evaluate(x, y, np.random.default_rng(0))
    assert wl["l1_2way"] == pytest.approx(2 * tvd(x, y, [2])["tvd_2way"])
    assert 0 <= wl["l1_2way"] <= wl["l1_max"] <= 2 + 1e-12   # disjoint tables: 2 up to the sum's rounding


@settings(max_examples=30, deadline=None)
@given(tables(), tables())
def test_correlation_scores_are_bounded_symmetric_and_zero_on_itself(x, y):
    c = Correlation()
    xy, yx = c.evaluate(x, y, np.random.default_rng(0)), c.evaluate(y, x, np.random.default_rng(0))
    assert all(v == 0 for v in c.evaluate(x, x, np.random.default_rng(0)).values())
    for k in xy:
        assert 0 <= xy[k] <= 1 and xy[k] == pytest.approx(yx[k])


def test_cramers_v_known_values():
    assert pair_association(np.array([[50, 0], [0, 50]])) == pytest.approx((1.0, 1.0))
    assert pair_association(np.array([[25, 25], [25, 25]])) == pytest.approx((0.0, 0.0))
    assert pair_association(np.array([[10, 20]])) == (0.0, 0.0)           # a constant attribute


def test_distinct_subsets_never_repeat():
    rng = np.random.default_rng(1)
    for d, k, count in [(15, 3, 300), (30, 5, 300), (6, 2, 100)]:
        subsets = distinct_subsets(d, k, count, rng)
        assert len(set(subsets)) == len(subsets) == min(count, __import__("math").comb(d, k))


def test_pipeline_writes_the_heatmap_and_scores_new_evaluators(tmp_path):
    cfg = parse_config({"seed": 1, "budget": {"epsilon": 1.0, "delta": 1e-5},
                        "dataset": {"name": "census", "params": {"n": 2000}},
                        "evaluation": {"holdout": 0.2},
                        "evaluators": [{"use": "workload_error"}, {"use": "correlation"}]})
    result = run(cfg, output_dir=tmp_path)
    assert (tmp_path / "correlation_heatmap.png").stat().st_size > 1000
    assert 0 < result.metrics["workload_error"]["l1_1way"] < 0.5
    assert 0 < result.metrics["correlation"]["cramers_v_mean_abs_diff"] < 1
    assert result.report["evaluation"]["scored_against"]["workload_error"] == "holdout"


def test_bad_evaluator_inputs_raise_clear_errors():
    base = {"seed": 1, "budget": {"epsilon": 1.0, "delta": 1e-5}, "dataset": {"name": "census", "params": {"n": 500}},
            "evaluation": {"holdout": 0.2}}
    with pytest.raises(ConfigError, match="workload attributes \\['nope'\\]"):
        make_plan(parse_config({**base, "evaluators": [{"use": "workload_error", "params": {"workload": [["nope"]]}}]}))
    with pytest.raises(ConfigError, match="ways"):
        WorkloadConfig(ways=[0])
    with pytest.raises(ConfigError, match="label attribute 'salary'"):
        make_plan(parse_config({**base, "evaluators": [{"use": "svm_misclassification",
                                                        "params": {"label": "salary"}}]}))
    other = Domain(DOMAIN.attributes, (3, 3, 4, 2))
    x = Dataset(np.zeros((3, 4), dtype=np.int64), DOMAIN)
    for ev in (WorkloadError(), Correlation()):
        with pytest.raises(DataError, match="different domains"):
            ev.evaluate(x, Dataset(x.codes, other), np.random.default_rng(0))
        with pytest.raises(DataError, match="empty"):
            ev.evaluate(x, Dataset(np.zeros((0, 4), dtype=np.int64), DOMAIN), np.random.default_rng(0))


def test_tvd_on_counts_only_tables_reads_each_once_per_way_and_equals_the_rows():
    """A streamed run's tables (core/chunks.ChunkedCounts) get all of a way's marginals in one pass."""
    from vertisynth.core.chunks import ChunkedCounts, view_chunks
    rng = np.random.default_rng(3)
    dom = Domain(("a", "b", "c", "d"), (3, 4, 2, 5))
    x, y = (Dataset(np.column_stack([rng.integers(0, k, 500) for k in dom.shape]), dom) for _ in range(2))
    cx, cy = ChunkedCounts(view_chunks(x, 64), dom), ChunkedCounts(view_chunks(y, 77), dom)
    ev = TVDEvaluator(TVDConfig(ways=[2, 3], marginals=5))
    assert ev.evaluate(cx, cy, np.random.default_rng(1)) == ev.evaluate(x, y, np.random.default_rng(1))
    assert cx.passes == 2 and cy.passes == 2   # one per way (the row count comes with the first)


def test_default_tvd_scores_the_sizes_a_small_table_has_and_explicit_ways_must_fit(tmp_path):
    """A first job with three columns and the default evaluator runs (it failed on ways 4 and 5 nobody asked for)."""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"x": rng.integers(0, 3, 300), "y": rng.integers(0, 2, 300), "z": rng.integers(0, 4, 300)})
    frame.to_csv(tmp_path / "t.csv", index=False)
    schema = {c: {"kind": "categorical", "categories": list(range(k))} for c, k in (("x", 3), ("y", 2), ("z", 4))}
    cfg = {"seed": 1, "budget": {"epsilon": 1.0, "delta": 1e-5},
           "dataset": {"name": "csv", "params": {"path": str(tmp_path / "t.csv"), "schema": schema}},
           "parties": [{"attributes": ["x", "y"]}, {"attributes": ["z"]}], "synthesizer": {"use": "independent"}}
    res = run(parse_config(cfg))
    assert set(res.metrics["tvd"]) == {"tvd_2way", "tvd_3way"}
    x = Dataset(np.zeros((3, 4), dtype=np.int64), DOMAIN)
    assert set(TVDEvaluator().evaluate(x, x, np.random.default_rng(0))) == {"tvd_2way", "tvd_3way", "tvd_4way"}
    with pytest.raises(ConfigError, match=r"tvd: ways \[4\] exceed the number of attributes \(3\)"):
        make_plan(parse_config({**cfg, "evaluators": [{"use": "tvd", "params": {"ways": [2, 4]}}]}))
