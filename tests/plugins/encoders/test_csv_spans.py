"""Reading a CSV in spans at byte offsets (the Dask path of chunked.py) equals reading it whole."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.errors import DataError
from vertisynth.plugins.encoders.chunked import csv_row_count, csv_spans, read_csv_span

DOM = Domain(("a", "b"), (3, 5))


def write(path, n, seed, newline="\n", trailing=True):
    rng = np.random.default_rng(seed)
    rows = [f"{x},{rng.integers(0, 9)},{y}" for x, y in zip(rng.integers(0, 3, n), rng.integers(0, 5, n))]
    path.write_bytes((newline.join(["a,z,b"] + rows) + (newline if trailing else "")).encode())
    return Dataset(np.array([[int(r.split(",")[0]), int(r.split(",")[2])] for r in rows]).reshape(n, 2), DOM)


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 60), chunk=st.integers(1, 70), seed=st.integers(0, 99), crlf=st.booleans(),
       trailing=st.booleans())
def test_spans_cover_the_file_in_order(tmp_path_factory, n, chunk, seed, crlf, trailing):
    path = tmp_path_factory.mktemp("csv") / "t.csv"
    whole = write(path, n, seed, "\r\n" if crlf else "\n", trailing)
    spans = csv_spans(path, chunk)
    assert [sp[0] for sp in spans] == list(range(0, n, chunk)) and sum(sp[2] for sp in spans) == n
    assert csv_row_count(path) == n
    got = [read_csv_span(str(path), DOM, start, rows, off) for start, off, rows in spans]
    assert np.array_equal(np.concatenate([ids for ids, _ in got]), np.arange(n))
    assert np.array_equal(np.concatenate([d.codes for _, d in got]), whole.codes)
    # without an offset the row is found by one scan
    start = spans[-1][0]
    assert np.array_equal(read_csv_span(str(path), DOM, start, spans[-1][2])[1].codes, got[-1][1].codes)


def test_empty_and_short_span(tmp_path):
    (tmp_path / "h.csv").write_text("a,b\n")
    assert csv_spans(tmp_path / "h.csv", 5) == []
    write(tmp_path / "t.csv", 10, 0)
    with pytest.raises(DataError, match="expected 4 rows"):
        read_csv_span(str(tmp_path / "t.csv"), DOM, 8, 4, csv_spans(tmp_path / "t.csv", 8)[1][1])
    assert pd.read_csv(tmp_path / "t.csv").shape == (10, 3)
