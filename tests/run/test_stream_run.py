"""`stream = true`: the one-process run reads each party's columns of the file in chunks through the party step
`party synth --csv` runs; the same synthetic table, ledger and scores as the in-memory run (issue 21)."""
from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from vertisynth.core.errors import ConfigError, DataError
from vertisynth.run.config import parse_config
from vertisynth.run.pipeline import run

SCHEMA = {"a": {"kind": "categorical", "categories": ["x", "y", "z"]},
          "b": {"kind": "numeric", "bounds": [0.0, 9.0], "bins": 9, "binning": "equal_width"},
          "c": {"kind": "categorical", "categories": ["0", "1"]},
          "d": {"kind": "categorical", "categories": ["p", "q", "r", "s"]}}


def _table(path, n=900, seed=2):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 3, n)
    b = np.clip(3 * a + rng.normal(0, 1.5, n), 0, 9)
    c = (rng.random(n) < 0.3 + 0.2 * a).astype(int)
    d = np.where(rng.random(n) < 0.7, a + c, rng.integers(0, 4, n))
    frame = pd.DataFrame({"a": np.array(["x", "y", "z"])[a], "b": b.round(2), "c": c, "d": np.array(list("pqrs"))[d]})
    frame.to_csv(path, index=False) if str(path).endswith(".csv") else frame.to_parquet(path, index=False)


def _config(path, stream, chunk_rows=64, processes=1, **extra):
    return parse_config({"seed": 4, "noise": "simulation", "budget": {"epsilon": 3.0, "delta": 1e-5}, "stream": stream,
                         "dataset": {"name": "csv", "params": {"path": str(path), "schema": SCHEMA}},
                         "parties": [{"attributes": ["a", "b"]}, {"attributes": ["c", "d"]}],
                         "synthesizer": {"use": "vertimrf", "params": {
                             "encoder_params": {"t": 64, "chunk_rows": chunk_rows},
                             "local_params": {"iters": 20, "refine_iters": 5}, "iters": 30, "rounds": 1,
                             "party_processes": processes}},
                         "evaluators": [{"use": "tvd", "params": {"ways": [2, 3], "marginals": 6}}], **extra})


@pytest.mark.parametrize("suffix,chunk_rows,processes", [(".csv", 64, 1), (".csv", 1000, 2), (".parquet", 100, 2)])
def test_a_streamed_run_equals_the_in_memory_run(tmp_path, suffix, chunk_rows, processes):
    pytest.importorskip("pyarrow")
    path = tmp_path / f"t{suffix}"
    _table(path)
    _table(tmp_path / "t.csv")   # the in-memory reader takes CSV: the same table
    whole = run(_config(tmp_path / "t.csv", False, chunk_rows))
    streamed = run(_config(path, True, chunk_rows, processes))   # the parties at once: the same result
    pd.testing.assert_frame_equal(streamed.synthetic, whole.synthetic)
    assert streamed.ledger.spent == whole.ledger.spent and streamed.ledger.spent
    assert streamed.metrics == whole.metrics
    assert streamed.report["dataset"]["records"] == 900
    assert "read in chunks of" in streamed.report["dataset"]["description"]


def test_stream_refuses_what_needs_the_whole_table(tmp_path):
    path = tmp_path / "t.csv"
    _table(path)
    with pytest.raises(ConfigError, match="stream = true: a holdout needs the rows"):
        run(_config(path, True, evaluation={"holdout": 0.2}))
    bad = _config(path, True)
    bad = parse_config({**bad.to_dict(), "synthesizer": {"use": "privmrf"}})
    with pytest.raises(ConfigError, match="stream = true: synthesizer 'privmrf' has no chunked party step"):
        run(bad)
    with pytest.raises(ConfigError, match="stream = true: the dataset is not one file with a public schema"):
        run(parse_config({"budget": {"epsilon": 1.0, "delta": 1e-5}, "stream": True,
                          "synthesizer": {"use": "vertimrf"}}))


def test_an_evaluator_that_reads_rows_is_refused_before_a_row_is_read(tmp_path):
    """A streamed run holds only the real table's counts: an evaluator without the EvaluatesCounts capability is
    refused by the plan's preflight (what `validate` runs), in one line, not after the fit by a probe."""
    from vertisynth.run.pipeline import make_plan, preflight

    path = tmp_path / "t.csv"
    _table(path)
    cfg = _config(path, True, evaluators=[{"use": "tvd"}, {"use": "membership_attack"}])
    with pytest.raises(ConfigError, match="stream = true: evaluator 'membership_attack' reads the real rows") as err:
        preflight(make_plan(cfg))
    assert "\n" not in str(err.value)


def test_counts_only_evaluators_score_a_streamed_run_as_the_in_memory_one(tmp_path):
    path = tmp_path / "t.csv"
    _table(path)
    evals = [{"use": "workload_error", "params": {"ways": [2], "marginals": 4}}, {"use": "correlation"}]
    whole = run(_config(path, False, evaluators=evals))
    streamed = run(_config(path, True, evaluators=evals))
    assert streamed.metrics == whole.metrics and set(streamed.metrics) == {"workload_error", "correlation"}


def test_a_bad_value_mid_file_names_its_line(tmp_path):
    path = tmp_path / "t.csv"
    _table(path)
    lines = path.read_text().splitlines()
    lines[500] = lines[500].replace(lines[500].split(",")[0], "w", 1)   # "w" is no category of a
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match="line 501"):
        run(_config(path, True))


def _traced_peak(tmp_path, n, chunk_rows, stream=True):
    import tracemalloc

    path = tmp_path / f"{n}.csv"
    if not path.exists():
        _table(path, n)
    cfg = _config(path, stream, chunk_rows, sample_size=500)   # the output's size fixed: only the input grows
    tracemalloc.start()
    try:
        result = run(cfg)
        return tracemalloc.get_traced_memory()[1], result.report["dataset"]["records"]
    finally:
        tracemalloc.stop()


def test_a_table_larger_than_the_chunk_setting_is_run_within_it(tmp_path):
    chunk = 1000
    _traced_peak(tmp_path, 300, chunk)   # warm-up: the first run's lazy imports and caches are not the table
    small, n_small = _traced_peak(tmp_path, 2 * chunk, chunk)
    large, n_large = _traced_peak(tmp_path, 40 * chunk, chunk)
    whole, _ = _traced_peak(tmp_path, 40 * chunk, chunk, stream=False)
    assert (n_small, n_large) == (2 * chunk, 40 * chunk)
    assert large < 1.2 * small + (1 << 18), (small, large)   # 20x the rows, the same peak
    assert large < 0.5 * whole, (large, whole)                # the in-memory run holds the table (~4x here)


def test_the_api_reads_a_file_in_chunks_and_equals_the_dataframe_run(tmp_path):
    from vertisynth.api import synthesize

    path = tmp_path / "t.csv"
    _table(path)
    kw = dict(epsilon=3.0, parties={"p1": ["a", "b"], "p2": ["c", "d"]}, schema=SCHEMA, seed=1, noise="simulation",
              params={"encoder_params": {"t": 64, "chunk_rows": 128}, "local_params": {"iters": 20, "refine_iters": 5},
                      "iters": 30, "rounds": 1})
    streamed = synthesize(str(path), output_dir=tmp_path / "out", **kw)
    whole = synthesize(pd.read_csv(path), **kw)
    pd.testing.assert_frame_equal(streamed.synthetic, whole.synthetic)
    assert (tmp_path / "out" / "synthetic.csv").is_file() and (tmp_path / "out" / "ledger.json").is_file()
    assert streamed.metrics == whole.metrics and streamed.ledger.spent == whole.ledger.spent
    assert "read in chunks of 128 rows" in streamed.report["dataset"]["description"]
    with pytest.raises(DataError, match="needs `parties` and a public `schema`"):
        synthesize(path, epsilon=1.0, parties={"p1": ["a", "b"], "p2": ["c", "d"]})


@pytest.mark.parametrize("chunk_rows", [1, 7, 64, 333])
def test_csv_chunks_hold_exactly_chunk_rows_whatever_the_readers_batches(tmp_path, chunk_rows, monkeypatch):
    # the reader's batches (forced small and ragged here) must not leave short chunks between full ones
    from vertisynth.run import stream
    path = tmp_path / "t.csv"
    _table(path, n=900)
    monkeypatch.setattr(stream, "_block_size", lambda p, rows: 1 << 12)
    got = list(stream.frames(path, ["a"], chunk_rows))
    sizes = [len(f) for _, f in got]
    assert sizes == [chunk_rows] * (900 // chunk_rows) + ([900 % chunk_rows] if 900 % chunk_rows else [])
    assert [s for s, _ in got] == list(range(0, 900, chunk_rows))
    assert pd.concat([f for _, f in got])["a"].tolist() == pd.read_csv(path, dtype=str)["a"].tolist()


@pytest.mark.parametrize("block_rows", [97, 1000])
def test_a_streamed_run_of_several_blocks_writes_the_in_memory_runs_table(tmp_path, block_rows):
    # 1000 rows in blocks of 97: sampled, decoded and appended block by block; the in-memory run decodes in
    # the same blocks, so both CSVs are the same bytes (and one block, 1000, keeps the frame as before)
    # a second numeric column "e": decoding draws for two columns, so the blocks change the decode stream's order
    path = tmp_path / "t.csv"
    _table(path)
    frame = pd.read_csv(path)
    frame["e"] = (frame["b"] / 9 + np.random.default_rng(0).random(len(frame))).round(3) / 2
    frame.to_csv(path, index=False)
    schema = {**SCHEMA, "e": {"kind": "numeric", "bounds": [0.0, 1.0], "bins": 4, "binning": "equal_width"}}

    def config(stream, **extra):
        base = _config(path, stream, **extra).to_dict()
        return parse_config({**base, "dataset": {"name": "csv", "params": {"path": str(path), "schema": schema}},
                             "parties": [{"attributes": ["a", "b"]}, {"attributes": ["c", "d", "e"]}]})
    extra = dict(sample_size=1000, sample_block_rows=block_rows)
    whole = run(config(False, **extra), output_dir=tmp_path / "whole")
    streamed = run(config(True, **extra), output_dir=tmp_path / "streamed")
    got = (tmp_path / "streamed" / "synthetic.csv").read_bytes()
    assert got == (tmp_path / "whole" / "synthetic.csv").read_bytes()
    assert len(got.splitlines()) == 1001 and got.splitlines()[0] == b"a,b,c,d,e" and not list((tmp_path / "streamed").glob("*.partial"))
    assert streamed.metrics == whole.metrics and streamed.ledger.spent == whole.ledger.spent
    assert streamed.synthetic_path == tmp_path / "streamed" / "synthetic.csv" == streamed.output_dir / "synthetic.csv"
    table = streamed.report["synthetic_table"]
    assert table["rows"] == 1000 and table["blocks"] == -(-1000 // block_rows) and not table["temporary_folder"]
    assert streamed.synthetic_codes.n == whole.synthetic_codes.n == 1000
    if block_rows < 1000:
        assert not table["held_in_memory"]
        with pytest.raises(DataError, match="wrote its 1000 synthetic rows block by block to .*synthetic.csv"):
            streamed.synthetic
        assert len(whole.synthetic) == 1000
    else:
        pd.testing.assert_frame_equal(streamed.synthetic, whole.synthetic)
    # the blocks are the draw: another block size is another (equally distributed) table
    if block_rows == 97:
        other = run(config(False, sample_size=1000, sample_block_rows=100))
        assert not other.synthetic.equals(whole.synthetic)


def test_without_an_output_folder_a_table_of_several_blocks_goes_to_a_temporary_file(tmp_path):
    from vertisynth.core.errors import VertisynthWarning

    path = tmp_path / "t.csv"
    _table(path)
    one = run(_config(path, True, sample_size=300, sample_block_rows=300))   # one block: the frame, no file
    assert len(one.synthetic) == 300 and one.synthetic_path is None and one.output_dir is None
    with pytest.warns(VertisynthWarning, match="temporary folder you remove"):
        many = run(_config(path, True, sample_size=300, sample_block_rows=100))
    try:
        assert many.report["synthetic_table"]["temporary_folder"] and many.output_dir is None
        back = pd.read_csv(many.synthetic_path)
        assert len(back) == 300 and list(back.columns) == ["a", "b", "c", "d"]
        assert str(many.synthetic_path) in str(pytest.raises(DataError, lambda: many.synthetic).value)
    finally:
        import shutil
        shutil.rmtree(many.synthetic_path.parent)


def test_sample_block_rows_is_checked_like_every_key(tmp_path):
    path = tmp_path / "t.csv"
    with pytest.raises(ConfigError, match=r"config.sample_block_rows: must be >= 1, got 0"):
        _config(path, True, sample_block_rows=0)
    with pytest.raises(ConfigError, match="unknown key 'sample_blocks_rows'.*sample_block_rows"):
        _config(path, True, sample_blocks_rows=10)
    assert "sample_block_rows" not in _config(path, True).to_dict()   # unset: the config reads as before
    assert _config(path, True, sample_block_rows=10).to_dict()["sample_block_rows"] == 10


@pytest.fixture(scope="module")
def fitted_model(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fit")
    _table(tmp / "t.csv")
    return run(_config(tmp / "t.csv", True)).model


def test_the_streamed_output_holds_one_block_whatever_the_rows(tmp_path, fitted_model):
    import tracemalloc

    from vertisynth.run.stream_out import write_in_blocks
    m, block = fitted_model, 1000

    def peak(n, whole=False):
        rng = np.random.default_rng(1)
        tracemalloc.start()
        try:
            if whole:   # the path before: the whole table sampled, decoded and written at once
                codes = m.model.sample(n, rng, m.sampling).project(m.codec.domain.attributes)
                m.codec.decode(codes, rng).to_csv(tmp_path / "whole.csv", index=False)
            else:
                blocks = (b.project(m.codec.domain.attributes) for b in m.model.sample_blocks(n, rng, m.sampling, block))
                written = write_in_blocks(blocks, m.codec, rng, tmp_path / "out", block)
                assert written.codes.n == n and written.blocks == n // block
                written.close()
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    peak(2 * block)   # warm-up: lazy imports and caches
    small, large, whole = peak(2 * block), peak(40 * block), peak(40 * block, whole=True)
    assert large < 1.3 * small, (small, large)   # 20x the rows, the same peak
    assert whole > 3 * large, (whole, large)     # the whole-table path holds it all (~11x here)


def test_decoding_in_blocks_is_the_whole_decode_up_to_one_block_and_a_failed_write_leaves_nothing(tmp_path,
                                                                                                 fitted_model,
                                                                                                 monkeypatch):
    from vertisynth.run.stream_out import decode_table, write_in_blocks
    m = fitted_model
    codes = m.sample_codes(500, 3)
    pd.testing.assert_frame_equal(decode_table(m.codec, codes, np.random.default_rng(5), 500),
                                  m.codec.decode(codes, np.random.default_rng(5)))

    def failing():   # the second block opens the file; the third fails
        yield codes
        yield codes
        raise DataError("the sampler broke")
    with pytest.raises(DataError, match="the sampler broke"):
        write_in_blocks(failing(), m.codec, np.random.default_rng(0), tmp_path / "out", 500)
    assert (tmp_path / "out").is_dir() and not list((tmp_path / "out").iterdir())   # no synthetic.csv, no .partial
    import tempfile
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    with pytest.raises(DataError, match="the sampler broke"):   # no output folder: its temporary one goes too
        write_in_blocks(failing(), m.codec, np.random.default_rng(0), None, 500)
    left = list((tmp_path / "tmp").iterdir())   # nor the spilled codes (the empty per-user spill root stays)
    assert [p.name for p in left] in ([], [f"vertisynth-spill-{os.getuid()}"]) and not any(
        list(p.iterdir()) for p in left)
