"""The default job's codes-native path (issue 33, docs/speed.md, fifth pass): census hands the pipeline its codes,
the synthetic table is decoded to numpy columns and written by the csv module. Each shortcut must give what the
DataFrame path gives, bit for bit: the codec, the codes, the decoded frame and the CSV's bytes."""
from __future__ import annotations

import io
import os

import numpy as np
import pandas as pd
import pytest

from vertisynth.core.dataset import Dataset
from vertisynth.core.encoding import TableSchema, decoded_dtypes
from vertisynth.core.errors import ConfigError, DataError
from vertisynth.core.outfiles import write_columns_csv
from vertisynth.plugins.datasets import census
from vertisynth.run.stream_out import decode_table, decoded_table


@pytest.mark.parametrize("seed", [0, 3])
def test_census_codes_and_codec_are_those_of_its_frame(seed):
    loaded = census.load(census.CensusConfig(n=3000, seed=seed))
    assert loaded.codes is not None and loaded.dtypes is not None
    via_frame = loaded.schema.fit(loaded.frame, None, np.random.default_rng(0))
    public = loaded.schema.fit_public(loaded.codes.n, loaded.dtypes)
    for a, b in zip(via_frame.columns, public.columns):
        assert (a.schema, a.labels, a.dtype) == (b.schema, b.labels, b.dtype)
        assert (a.edges is None and b.edges is None) or np.array_equal(a.edges, b.edges)
    assert np.array_equal(via_frame.encode(loaded.frame).codes, loaded.codes.codes)
    assert loaded.codes.codes.dtype == np.int64 and loaded.codes.codes.flags.c_contiguous


def test_census_frame_is_the_frame_it_decoded_before():
    cfg = census.CensusConfig(n=2000, seed=5)
    rng = np.random.default_rng(cfg.seed)
    codes = census.CensusNetwork().sample_codes(cfg.n, rng)
    pd.testing.assert_frame_equal(census.load(cfg).frame, census.decode_codes(codes, rng))


def test_decoded_dtypes_are_the_decoded_frames_dtypes():
    schema = TableSchema.from_config({
        "s": {"kind": "categorical", "categories": ["a", "b,c", 'q"uote']},
        "i": {"kind": "categorical", "categories": [1, 2, 30]},
        "f": {"kind": "categorical", "categories": [0.5, 1.5]},
        "n": {"kind": "numeric", "bounds": [0, 100], "bins": 5, "integer": True}})
    for sch in (schema, census.schema()):
        codec = sch.fit_public(10, {c.name: "object" for c in sch.columns})
        codes = np.stack([np.arange(50) % k for k in codec.domain.shape], axis=1)
        frame = codec.decode(Dataset(codes, codec.domain), np.random.default_rng(1))
        assert decoded_dtypes(sch) == {c: str(frame[c].dtype) for c in frame.columns}


def test_columns_that_need_pandas_are_refused_by_the_shortcuts():
    missing = TableSchema.from_config({"s": {"kind": "categorical", "categories": ["a"], "missing": "category"}})
    mixed = TableSchema.from_config({"s": {"kind": "categorical", "categories": ["a", 1]}})
    quantile = TableSchema.from_config({"x": {"kind": "numeric", "bounds": [0, 1], "bins": 2, "binning": "quantile",
                                              "quantile_epsilon": 0.1}})
    for sch in (missing, mixed):
        with pytest.raises(ConfigError):
            decoded_dtypes(sch)
        codec = sch.fit_public(5, {"s": "object"})
        assert codec.decode_arrays(Dataset(np.zeros((3, 1), np.int64), codec.domain), np.random.default_rng(0)) is None
    assert not quantile.coding_is_public
    with pytest.raises(ConfigError):
        quantile.fit_public(5, {"x": "float64"})


def _mixed_codec():
    schema = TableSchema.from_config({
        "s": {"kind": "categorical", "categories": ["x", "", "a b", "c,d", 'e"f', "g\nh", "ünï"]},
        "i": {"kind": "categorical", "categories": [-3, 7, 2**40]},
        "age": {"kind": "numeric", "edges": [17, 25, 90], "binning": "edges", "integer": True},
        "w": {"kind": "numeric", "bounds": [-1000, 10**9], "bins": 4, "integer": True}})
    return schema.fit_public(10, {"s": "str", "i": "int64", "age": "int64", "w": "int64"})


@pytest.mark.parametrize("rows,block_rows", [(1000, 5000), (1000, 300)])
def test_decoded_table_is_the_decoded_frame_and_its_csv_is_pandas_csv(tmp_path, rows, block_rows):
    codec = _mixed_codec()
    codes = np.stack([np.random.default_rng(k).integers(0, n, rows) for k, n in enumerate(codec.domain.shape)], 1)
    table = Dataset(codes, codec.domain)
    old = pd.concat([codec.decode(Dataset(codes[i:i + block_rows], codec.domain), r)
                     for r in [np.random.default_rng(9)] for i in range(0, rows, block_rows)], ignore_index=True)
    dec = decoded_table(codec, table, np.random.default_rng(9), block_rows)
    assert dec.arrays is not None
    pd.testing.assert_frame_equal(dec.frame, old)
    pd.testing.assert_frame_equal(decode_table(codec, table, np.random.default_rng(9), block_rows), old)
    buf = io.StringIO(newline="")
    old.to_csv(buf, index=False)
    assert dec.write_csv(tmp_path / "t.csv").read_bytes() == buf.getvalue().encode("utf-8")


def test_write_columns_csv_matches_pandas_on_a_single_column_of_empty_strings(tmp_path):
    cols = {"only": np.array(["", "a", ""], dtype=object)}
    buf = io.StringIO(newline="")
    pd.DataFrame(cols).to_csv(buf, index=False)
    assert write_columns_csv(tmp_path / "e.csv", cols).read_bytes() == buf.getvalue().encode("utf-8")
    assert buf.getvalue().endswith(os.linesep)
    with pytest.raises(DataError):
        write_columns_csv(tmp_path / "f.csv", {"x": np.array([0.5])})
