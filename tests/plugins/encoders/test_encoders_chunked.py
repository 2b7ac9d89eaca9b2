"""Chunked encoding from CSV (global record ids) and on a Dask LocalCluster equals one-shot encoding."""
from __future__ import annotations

import attrs
import numpy as np
import pytest

from encoder_helpers import planned, toy_data
from vertisynth.core.errors import DataError
from vertisynth.core.privacy import PrivacyLedger
from vertisynth.plugins.encoders.chunked import csv_chunks, csv_row_count, encode_csv
from vertisynth.plugins.encoders.dpfm import DPFMConfig, DPFMEncoder
from vertisynth.plugins.encoders.grr import GRREncoder

PARTY = "bob"


def setup(encoder, tmp_path, n=700):
    data, part = toy_data(n, seed=2)
    ledger = planned(encoder, data, part, 1.0)
    view = part.views(data)[PARTY]
    path = tmp_path / "bob.csv"
    view.to_frame().to_csv(path, index=False)
    return data, part, view, path, ledger


def fresh_ledger(ledger: PrivacyLedger) -> PrivacyLedger:
    out = PrivacyLedger(ledger.budget)
    out.plan(ledger.planned)
    return out


def same_message(a, b) -> None:
    fields = a.sketches if hasattr(a, "sketches") else a.columns
    other = b.sketches if hasattr(b, "sketches") else b.columns
    assert set(fields) == set(other)
    for k in fields:
        assert fields[k].dtype == other[k].dtype and np.array_equal(fields[k], other[k])
    assert getattr(a, "n_hat", None) == getattr(b, "n_hat", None)


@pytest.mark.parametrize("make", [lambda: DPFMEncoder(DPFMConfig(t=150, rep_block=40, calibration="paper", postprocess="clip")), GRREncoder], ids=["dpfm", "grr"])
def test_csv_chunks_equal_one_shot(make, tmp_path):
    enc = make()
    data, part, view, path, ledger = setup(enc, tmp_path)
    if isinstance(enc, DPFMEncoder):
        enc.agree_keys(np.random.default_rng(9))
    one = enc.encode(PARTY, view, fresh_ledger(ledger), np.random.default_rng(4))
    led = fresh_ledger(ledger)
    chunked = encode_csv(enc, PARTY, path, view.domain, led, np.random.default_rng(4), chunk_rows=97)
    same_message(one, chunked)
    assert led.spent and all(c.party == PARTY for c in led.spent)


def test_csv_row_count_and_bad_files(tmp_path):
    enc = GRREncoder()
    data, part, view, path, ledger = setup(enc, tmp_path, n=250)
    assert csv_row_count(path) == 250
    assert sum(rows.n for _, rows in csv_chunks(path, view.domain, 64)) == 250
    with pytest.raises(DataError, match="does not exist"):
        list(csv_chunks(tmp_path / "nope.csv", view.domain, 10))
    (tmp_path / "other.csv").write_text("x,y\n1,2\n")
    with pytest.raises(DataError, match="lacks the party's columns"):
        list(csv_chunks(tmp_path / "other.csv", view.domain, 10))


@pytest.mark.parametrize("make", [lambda: DPFMEncoder(DPFMConfig(t=120, calibration="paper", postprocess="clip")), GRREncoder], ids=["dpfm", "grr"])
def test_dask_local_cluster_equals_one_shot(make, tmp_path):
    distributed = pytest.importorskip("distributed")
    enc = make()
    data, part, view, path, ledger = setup(enc, tmp_path, n=500)
    if isinstance(enc, DPFMEncoder):
        enc.agree_keys(np.random.default_rng(9))
    one = enc.encode(PARTY, view, fresh_ledger(ledger), np.random.default_rng(4))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        via_address = encode_csv(enc, PARTY, path, view.domain, fresh_ledger(ledger), np.random.default_rng(4),
                                 chunk_rows=120, scheduler=cluster.scheduler_address)
        # the same through the config: a scheduler address configured on the encoder
        configured = type(enc)(attrs.evolve(enc.config, dask_scheduler=cluster.scheduler_address, chunk_rows=90))
        configured.__dict__.update({k: v for k, v in enc.__dict__.items() if k != "config"})
        via_config = encode_csv(configured, PARTY, path, view.domain, fresh_ledger(ledger), np.random.default_rng(4))
    same_message(one, via_address)
    same_message(one, via_config)


@pytest.mark.slow
def test_dask_worker_processes_equal_one_shot(tmp_path):
    """Same with real worker processes (the map function and its key are pickled to the workers)."""
    distributed = pytest.importorskip("distributed")
    enc = DPFMEncoder(DPFMConfig(t=100, calibration="paper", postprocess="clip"))
    data, part, view, path, ledger = setup(enc, tmp_path, n=400)
    enc.agree_keys(np.random.default_rng(9))
    one = enc.encode(PARTY, view, fresh_ledger(ledger), np.random.default_rng(4))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        got = encode_csv(enc, PARTY, path, view.domain, fresh_ledger(ledger), np.random.default_rng(4),
                         chunk_rows=90, scheduler=cluster.scheduler_address)
    same_message(one, got)


from hypothesis import given, settings
from hypothesis import strategies as st


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(1, 299), max_size=6, unique=True))
def test_any_chunking_gives_the_same_sketch_maxima(cuts):
    """Property: the raw maxima of any split of the rows, merged by max, equal those of the whole."""
    from vertisynth.plugins.encoders.dpfm import sketch_maxima

    data, part = toy_data(300, seed=8)
    view = part.views(data)["alice"]
    key = b"\x07" * 32
    whole = sketch_maxima(key, view, np.arange(300), 40, 1.0, 16)
    bounds = [0, *sorted(cuts), 300]
    merged = None
    for s, e in zip(bounds[:-1], bounds[1:]):
        part_max = sketch_maxima(key, view.take(np.arange(s, e)), np.arange(s, e), 40, 1.0, 16)
        merged = part_max if merged is None else {a: np.maximum(merged[a], part_max[a]) for a in part_max}
    assert all(np.array_equal(whole[a], merged[a]) for a in whole)
