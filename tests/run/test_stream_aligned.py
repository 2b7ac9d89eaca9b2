"""`stream = true` with ID-keyed party files (party_csv) aligned by PSI or PSU: each party reads its identifier
column in chunks for the protocol, keeps the alignment as a row map and reads its codes in the aligned order
from the spill of its first pass; the same synthetic table, ledger and scores as the in-memory run (issue 21)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from vertisynth.core.errors import ConfigError, DataError
from vertisynth.run.config import parse_config
from vertisynth.run.pipeline import run

from seeded_runs import run_once

SCHEMA = {"a": {"kind": "categorical", "categories": ["x", "y", "z"]},
          "b": {"kind": "numeric", "bounds": [0.0, 9.0], "bins": 9, "binning": "equal_width"},
          "c": {"kind": "categorical", "categories": ["0", "1"]},
          "d": {"kind": "categorical", "categories": ["p", "q", "None", "s"]}}   # a label pandas reads as missing


def _table(n=300, seed=2):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 3, n)
    b = np.clip(3 * a + rng.normal(0, 1.5, n), 0, 9)
    c = (rng.random(n) < 0.3 + 0.2 * a).astype(int)
    d = np.where(rng.random(n) < 0.7, a + c, rng.integers(0, 4, n))
    return pd.DataFrame({"a": np.array(["x", "y", "z"])[a], "b": b.round(2), "c": c,
                         "d": np.array(["p", "q", "None", "s"])[d]}), rng


def _files(tmp_path, n=300, seed=2, overlap=0.7, tag=""):
    """Two party CSVs with an `id` column: a share `overlap` of the people in both, the rest in one; each
    file in its own random order."""
    table, rng = _table(n, seed)
    table.insert(0, "id", [f"p{i:06d}" for i in range(n)])
    both = rng.random(n) < overlap
    only = rng.integers(0, 2, n)
    paths = {}
    for j, (name, cols) in enumerate([("A", ["id", "a", "b"]), ("B", ["id", "c", "d"])]):
        rows = np.flatnonzero(both | (only == j))
        paths[name] = tmp_path / f"{name}{tag}.csv"
        table[cols].iloc[rows[rng.permutation(len(rows))]].to_csv(paths[name], index=False)
    return paths


def _config(paths, stream, protocol="psi", fill="marginal", chunk_rows=64, processes=1, **extra):
    params = {"workers": 1} if protocol == "psi" else {"workers": 1, "fill": fill}
    return parse_config({"seed": 4, "noise": "simulation", "budget": {"epsilon": 3.0, "delta": 1e-5}, "stream": stream,
                         "dataset": {"name": "party_csv", "params": {"files": {p: str(f) for p, f in paths.items()},
                                                                     "schema": SCHEMA}},
                         "parties": [{"name": "A", "attributes": ["a", "b"]}, {"name": "B", "attributes": ["c", "d"]}],
                         "alignment": {"use": protocol, "params": params},
                         "synthesizer": {"use": "vertimrf", "params": {
                             "encoder_params": {"t": 64, "chunk_rows": chunk_rows},
                             "local_params": {"iters": 10, "refine_iters": 3}, "iters": 15, "rounds": 1,
                             "party_processes": processes}},
                         "evaluators": [{"use": "tvd", "params": {"ways": [2], "marginals": 4}}], **extra})


def _same(streamed, whole):
    pd.testing.assert_frame_equal(streamed.synthetic, whole.synthetic)
    assert streamed.ledger.spent == whole.ledger.spent and streamed.ledger.spent
    assert streamed.metrics == whole.metrics
    s_info, w_info = streamed.report["alignment"]["info"], whole.report["alignment"]["info"]
    assert s_info == w_info
    assert streamed.report["dataset"]["records"] == whole.report["dataset"]["records"]
    assert "read in chunks of" in streamed.report["dataset"]["description"]


@pytest.mark.parametrize("protocol,fill,chunk_rows,processes", [
    ("psi", None, 1, 1), ("psi", None, 64, 2), ("psi", None, 1000, 1),
    ("psu", "marginal", 1, 1), ("psu", "marginal", 64, 2), ("psu", "marginal", 1000, 1),
    ("psu", "sample", 1, 1), ("psu", "sample", 64, 1), ("psu", "sample", 1000, 2)])
def test_a_streamed_aligned_run_equals_the_in_memory_run(tmp_path, protocol, fill, chunk_rows, processes):
    # 150 people (were 300; issue 33): each party's file still spans 1-row chunks, two chunks of 64 and one of 1000.
    # One in-memory run per protocol and fill, at the default chunk (the same files: _files is seeded), against
    # which each chunking and process count is streamed (an in-memory run does not depend on chunk_rows; the nine
    # cases ran nine)
    paths = _files(tmp_path, n=150)
    whole = run_once([__name__, 150, protocol, fill], lambda: _config(paths, False, protocol, fill))
    streamed = run(_config(paths, True, protocol, fill, chunk_rows, processes))
    _same(streamed, whole)
    info = streamed.report["alignment"]["info"]
    if protocol == "psu":   # the fill ran: the scores are against the people both parties hold
        assert 0 < info["rows_held_by_every_party"] < info["union"]
        assert streamed.report["dataset"]["records"] == info["rows_held_by_every_party"]
    else:
        assert streamed.report["dataset"]["records"] == info["intersection"] > 0


def test_a_label_spelled_like_a_missing_value_is_read_as_a_value_both_ways(tmp_path):
    # the streamed reader keeps the schema's labels ("None" here) as values; the in-memory readers now do too
    # (party_csv and csv; before, the in-memory run refused the column as holding missing values)
    paths = _files(tmp_path)
    assert ",None\n" in paths["B"].read_text()
    _same(run(_config(paths, True)), run(_config(paths, False)))
    _table()[0].to_csv(tmp_path / "t.csv", index=False)
    one = {"dataset": {"name": "csv", "params": {"path": str(tmp_path / "t.csv"), "schema": SCHEMA}},
           "alignment": {"use": "positional"}, "parties": [{"attributes": ["a", "b"]}, {"attributes": ["c", "d"]}]}
    streamed, whole = run(_config(paths, True, **one)), run(_config(paths, False, **one))
    pd.testing.assert_frame_equal(streamed.synthetic, whole.synthetic)
    assert streamed.metrics == whole.metrics and streamed.ledger.spent == whole.ledger.spent


def test_duplicates_dropped_as_in_memory(tmp_path):
    paths = _files(tmp_path)
    lines = paths["B"].read_text().splitlines()
    lines.insert(40, lines[7].replace(",", " ,", 1))   # the same person again, an id with a trailing space
    paths["B"].write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match="party 'B' lists 1 duplicate identifier"):
        run(_config(paths, True, "psu"))
    kw = {"alignment": {"use": "psu", "params": {"workers": 1, "duplicates": "first", "fill": "sample"}}}
    whole = run(_config(paths, False, "psu", **kw))
    streamed = run(_config(paths, True, "psu", chunk_rows=16, **kw))
    _same(streamed, whole)
    assert streamed.report["alignment"]["info"]["duplicates_dropped"] == {"A": 0, "B": 1}


def test_bad_input_is_one_line_naming_it(tmp_path):
    paths = _files(tmp_path)
    lines = paths["A"].read_text().splitlines()
    lines[150] = lines[150].replace(",x,", ",w,").replace(",y,", ",w,").replace(",z,", ",w,")   # no category
    paths["A"].write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"A\.csv' line 151: .*'w'"):
        run(_config(paths, True))
    paths = _files(tmp_path, tag="2")
    lines = paths["B"].read_text().splitlines()
    lines[120] = "," + lines[120].split(",", 1)[1]   # no identifier
    paths["B"].write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"B2\.csv' line 121: identifier 'id' is missing"):
        run(_config(paths, True))


def test_stream_refusals_with_keyed_files(tmp_path):
    paths = _files(tmp_path)
    with pytest.raises(ConfigError, match="stream = true: a holdout needs the rows"):
        run(_config(paths, True, evaluation={"holdout": 0.2}))
    with pytest.raises(ConfigError, match="stream = true: ID-keyed party files need alignment psi or psu"):
        run(_config(paths, True, alignment={"use": "positional"}))
    with pytest.raises(ConfigError, match="fill 'uniform' cannot be drawn in chunks"):
        run(_config(paths, True, "psu", "uniform"))


def test_chunk_fill_equals_fill_view_whatever_the_blocks():
    from vertisynth.core.dataset import Dataset
    from vertisynth.core.domain import Domain
    from vertisynth.core.privacy import Budget, PrivacyLedger
    from vertisynth.plugins.alignment.fill import ChunkFill, ColumnFill, fill_view, plan_charges

    rng = np.random.default_rng(0)
    dom = Domain(["a", "b", "c"], [3, 5, 2])
    n, n_u = 200, 330
    view = Dataset(np.column_stack([rng.integers(0, s, n) for s in dom.shape]), dom)
    pos = rng.permutation(n_u)[:n]
    records = rng.permutation(1000)[:n]   # the party's records as its spill numbers them
    spill = np.zeros((1000, 3), np.int64)
    spill[records] = view.codes
    for strategy, cols in [("marginal", {}), ("sample", {}), ("marginal", {"b": ColumnFill("majority")}),
                           ("sample", {"c": ColumnFill("constant", "1")}), ("marginal", {"a": ColumnFill("constant", "2")})]:
        dp = [a for a in dom.attributes if (a in cols and cols[a].strategy == "majority")
              or (a not in cols and strategy == "marginal")]

        def ledger():
            charges = plan_charges(0.1, {"A": dp}) if dp else []
            led = PrivacyLedger(Budget(1.0, 1e-5))
            led.plan(charges)
            return led, (charges[0] if charges else None)
        l1, c1 = ledger()
        whole = fill_view(view, pos, n_u, strategy, cols, dp, c1, l1, "A", np.random.default_rng(7), 2)
        inv = np.full(n_u, -1)
        inv[pos] = records
        for chunk in (1, 7, 64, 1000):
            l2, c2 = ledger()
            counts = np.concatenate([view.counts([a]).values.ravel() for a in dp]) if dp else None
            fill = ChunkFill(dom, n, pos, n_u, strategy, cols, dp, c2, l2, "A", np.random.default_rng(7), counts, 2,
                             records)
            out = []
            for _ in range(2):   # a second pass from the top gives the same codes
                for s in range(0, n_u, chunk):
                    e = min(s + chunk, n_u)
                    codes = np.zeros((e - s, 3), np.int64)
                    held = inv[s:e] >= 0
                    codes[held] = spill[inv[s:e][held]]
                    fill.fill(s, e, codes, lambda r: spill[r])
                    out.append(codes)
            got = np.concatenate(out)
            assert np.array_equal(got[:n_u], whole.codes) and np.array_equal(got[n_u:], whole.codes), \
                (strategy, cols, chunk)
            assert l1.spent == l2.spent


def _traced_peaks(tmp_path, n, chunk_rows, protocol, monkeypatch):
    """Traced peak bytes of the alignment step and of the rest of a streamed run (encode, fit, sample, score)."""
    import tracemalloc

    from vertisynth.run import pipeline

    peaks = {}
    align = pipeline.align_party_files

    def traced_align(*a, **k):
        peaks["before"] = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        try:
            return align(*a, **k)
        finally:
            peaks["align"] = tracemalloc.get_traced_memory()[1]
            tracemalloc.reset_peak()
    paths = _files(tmp_path, n, tag=str(n))
    cfg = _config(paths, True, protocol, chunk_rows=chunk_rows, sample_size=200)   # the output's size fixed
    with monkeypatch.context() as patch:
        patch.setattr(pipeline, "align_party_files", traced_align)
        tracemalloc.start()
        try:
            result = run(cfg)
            rest = max(peaks["before"], tracemalloc.get_traced_memory()[1])
            return rest, peaks["align"], sum(result.report["alignment"]["info"]["set_sizes"].values())
        finally:
            tracemalloc.stop()


@pytest.mark.parametrize("protocol", ["psi", "psu"])
def test_traced_memory_at_40_chunks(tmp_path, protocol, monkeypatch):
    # Outside the alignment (coding, the party steps, the server, sampling, scoring) the run holds a chunk, not
    # the table: 40 chunks within 1.5x of 2. The alignment holds the protocol's state per identifier (the
    # simulation runs every party: identifiers as text, 32-byte group elements in each round's messages), not
    # the table: linear in the identifiers (set sizes summed over the parties): ~230 B each for psi and ~310 B
    # for psu here (0.51 -> 1.98 MB and 0.35 -> 2.38 MB from 338 to 6,813 identifiers), checked under 640 B.
    chunk = 100
    _traced_peaks(tmp_path, 150, chunk, protocol, monkeypatch)   # warm-up: lazy imports and caches are not the table
    small, align_small, ids_small = _traced_peaks(tmp_path, 2 * chunk, chunk, protocol, monkeypatch)
    large, align_large, ids_large = _traced_peaks(tmp_path, 40 * chunk, chunk, protocol, monkeypatch)
    assert ids_large > 15 * ids_small
    assert large < 1.5 * small + (1 << 18), (small, large)
    assert align_large - align_small < 640 * (ids_large - ids_small), (align_small, align_large)


def test_replayed_streams_record_the_first_pass_and_replay_it():
    from vertisynth.core.dataset import Dataset
    from vertisynth.core.domain import Domain
    from vertisynth.run.stream_align import replayed

    dom = Domain(["a", "b"], [3, 300])   # uint16 on disk for b
    data = np.column_stack([np.arange(50) % 3, np.arange(50) * 5 % 300])
    calls = []

    def source():
        calls.append(1)
        for s in range(0, 50, 7):
            yield np.arange(s, min(s + 7, 50)) * 2, Dataset(data[s:s + 7], dom)
    stream = replayed(source, dom)
    first = stream()
    next(first)
    assert len([c for _, c in stream()]) == 8   # a pass inside the first pass reads the source, unrecorded
    list(first)
    again, more = list(stream()), list(stream())
    assert len(calls) == 2   # the replays read the file, not the source
    assert np.array_equal(np.concatenate([c.codes for _, c in again]), data)
    assert np.array_equal(np.concatenate([i for i, _ in again]), np.arange(50) * 2)
    assert all(np.array_equal(x[1].codes, y[1].codes) for x, y in zip(again, more))
    folder = stream._spill.folder
    stream.close()
    import os
    assert not os.path.exists(folder)
