"""The streaming party phase: chunked = one-shot bit for bit, Dask = local, bounded memory, bad lines named."""
import hashlib
import tracemalloc

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from vertisynth.core.dataset import Dataset, VerticalPartition
from vertisynth.core.domain import Domain
from vertisynth.core.encoding import ColumnSchema, TableSchema
from vertisynth.core.errors import DataError
from vertisynth.core.interfaces import PlanContext
from vertisynth.core.privacy import Budget, PrivacyLedger
from vertisynth.plugins.synthesizers.vertimrf.streaming import ChunkedCounts, view_chunks
from vertisynth.plugins.synthesizers.vertimrf.synthesizer import VertiMRFConfig, VertiMRFSynthesizer
from vertisynth.run.stream import coded_chunks

DOM = Domain(["a", "b", "c", "d"], [3, 9, 2, 5])   # b (9 values) is binned into 4 bins: chunks split bins
MINE = DOM.project(["a", "b"])                      # the first party's columns


def _data(n, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 3, n)
    b = (3 * a + rng.integers(0, 4, n)) % 9
    return Dataset(np.column_stack([a, b, rng.integers(0, 2, n), rng.integers(0, 5, n)]), DOM)


def _party(encoder="dpfm", chunk_rows=100_000, use_local=True):
    part = VerticalPartition.from_lists([["a", "b"], ["c", "d"]])
    params = {"t": 32} if encoder == "dpfm" else {}
    syn = VertiMRFSynthesizer(VertiMRFConfig(
        encoder=encoder, bins=4, recovery="hisrec", use_local=use_local, encoder_params={**params, "chunk_rows": chunk_rows},
        local_params={"iters": 10, "refine_iters": 3}))
    budget = Budget(4.0, 1e-5)
    ledger = PrivacyLedger(budget)
    ledger.plan(syn.plan(PlanContext(DOM, part, budget)))
    key_rng, rngs = syn.party_rngs(np.random.default_rng(1))
    syn.agree_keys(key_rng)
    return syn, ledger, rngs[part.names[0]], part.names[0]


def _digest(messages):
    return hashlib.sha256(b"".join(m.to_bytes() for m in messages)).hexdigest()


def _one_shot(data, encoder):
    syn, ledger, rng, p = _party(encoder, chunk_rows=10**9)
    return _digest(syn.party_step(p, data.project(MINE.attributes), ledger, rng)), [c.to_dict() for c in ledger.spent]


DATA = _data(120)
ONE_SHOT = {e: _one_shot(DATA, e) for e in ("dpfm", "grr")}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chunk=st.sampled_from([1, 2, 7, 33, 119, 120, 500]), encoder=st.sampled_from(["dpfm", "grr"]))
def test_chunked_party_phase_equals_one_shot_bit_for_bit(chunk, encoder):
    syn, ledger, rng, p = _party(encoder, chunk_rows=chunk)
    out = syn.party_step_chunks(p, MINE, view_chunks(DATA.project(MINE.attributes), chunk), ledger, rng)
    assert (_digest(out), [c.to_dict() for c in ledger.spent]) == ONE_SHOT[encoder]


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 60), chunk=st.integers(1, 70), attrs=st.sampled_from([(), ("b",), ("a", "b"), ("d", "b", "c")]))
def test_counts_summed_over_chunks_equal_the_whole_tables(n, chunk, attrs):
    data = _data(n, seed=n)
    table = ChunkedCounts(view_chunks(data, chunk), DOM)
    assert table.n == n
    got, want = table.counts(attrs), data.counts(attrs)
    assert got.domain == want.domain and np.array_equal(got.values, want.values)


SCHEMA = TableSchema((ColumnSchema("a", "categorical", categories=("x", "y", "z")),
                      ColumnSchema("b", "numeric", bounds=(0.0, 9.0), bins=9, binning="equal_width"),
                      ColumnSchema("c", "categorical", categories=("0", "1"))))


def _frame(n, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"a": rng.choice(["x", "y", "z"], n), "b": rng.integers(0, 9, n) + 0.5,
                         "c": rng.integers(0, 2, n)})


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chunk=st.sampled_from([1, 3, 64, 1000]))
def test_csv_and_parquet_chunks_equal_the_whole_table(tmp_path, chunk):
    frame = _frame(200)
    codec = SCHEMA.fit(frame, None, np.random.default_rng(0))
    whole = codec.encode(frame)
    frame.to_csv(tmp_path / "t.csv", index=False)
    frame.to_parquet(tmp_path / "t.parquet", index=False)
    for name in ("t.csv", "t.parquet"):
        chunks = coded_chunks(tmp_path / name, codec, chunk)
        parts = list(chunks())
        again = list(chunks())   # later passes replay the spilled codes
        assert all(np.array_equal(a.codes, b.codes) and np.array_equal(i, j) for (i, a), (j, b) in zip(parts, again))
        assert len(again) == len(parts)
        assert max(r.n for _, r in parts) <= chunk
        assert np.array_equal(np.concatenate([i for i, _ in parts]), np.arange(200))
        assert np.array_equal(np.concatenate([r.codes for _, r in parts]), whole.codes), name


def test_counting_passes_over_the_spill_read_only_their_columns(tmp_path):
    """After the first pass, a marginal is counted from its columns of the spill, in their stored type (no
    chunk of every column widened to int64): the same counts as the whole table."""
    frame = _frame(300)
    codec = SCHEMA.fit(frame, None, np.random.default_rng(0))
    whole = codec.encode(frame)
    frame.to_csv(tmp_path / "t.csv", index=False)
    chunks = coded_chunks(tmp_path / "t.csv", codec, 64)
    table = ChunkedCounts(chunks, codec.domain)
    table.prefetch_pairs()   # the first pass reads and spills the file
    replays = []
    spill = chunks._spilled
    replay = spill.replay
    spill.replay = lambda: replays.append(1) or replay()
    for attrs in [("a",), ("a", "b", "c"), ("c", "a"), ("b", "c")]:
        got, want = table.counts(attrs), whole.counts(attrs)
        assert got.domain == want.domain and np.array_equal(got.values, want.values)
    assert table.passes > 1 and not replays   # passes after the first, none replaying whole chunks
    chunks.close()


@pytest.mark.parametrize("bad, needle", [("w,1.5,0", "line 152"), ("x,1.5,0,9", "line 152")])
def test_a_bad_value_mid_file_names_its_line(tmp_path, bad, needle):
    frame = _frame(300)
    codec = SCHEMA.fit(frame, None, np.random.default_rng(0))
    lines = frame.to_csv(index=False).splitlines()
    lines[151] = bad                      # line 152 of the file (the header is line 1)
    (tmp_path / "t.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=needle):
        list(coded_chunks(tmp_path / "t.csv", codec, 64)())


def test_a_dask_cluster_run_equals_the_local_one():
    distributed = pytest.importorskip("distributed")
    data = _data(3000)
    syn, ledger, rng, p = _party("dpfm", chunk_rows=500)
    local = _digest(syn.party_step_chunks(p, MINE, view_chunks(data.project(MINE.attributes), 500), ledger, rng))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cl, \
            distributed.Client(cl) as client:
        syn, ledger, rng, p = _party("dpfm", chunk_rows=500)
        with distributed.get_task_stream(client) as tasks:
            remote = _digest(syn.party_step_chunks(p, MINE, view_chunks(data.project(MINE.attributes), 500), ledger,
                                                   rng, scheduler=client))
    assert remote == local
    ran = {t["key"].split("-")[0] for t in tasks.data}
    # the encoding ran on the workers; the local fit's counting passes stay here (cheaper than shipping chunks)
    assert ran and "_count_chunk" not in ran, ran


def test_counting_passes_on_a_dask_cluster_equal_the_whole_table():
    distributed = pytest.importorskip("distributed")
    data = _data(257)
    sets = [(), ("a",), ("b", "d"), ("a", "c", "d")]
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cl, \
            distributed.Client(cl) as client:
        for chunk in (1, 7, 256, 1000):
            table = ChunkedCounts(view_chunks(data, chunk), DOM, client, window=3)
            table.prefetch(sets)
            assert table.n == 257 and table.passes == 1
            for s in sets[1:]:
                assert np.array_equal(table.counts(s).values, data.counts(s).values)


def _peak_bytes(tmp_path, n, chunk):
    """Peak traced memory of one party's streamed phase (local fit, value distributions, DPFM) on an n-row CSV."""
    rng = np.random.default_rng(3)
    frame = pd.DataFrame({"a": rng.choice(["x", "y", "z"], n), "b": rng.uniform(0, 9, n), "c": rng.integers(0, 2, n)})
    frame.to_csv(tmp_path / f"{n}.csv", index=False)
    del frame
    full = SCHEMA.fit(pd.DataFrame({"a": [], "b": [], "c": []}), None, np.random.default_rng(0)).domain
    part = VerticalPartition.from_lists([["a", "b"], ["c"]])
    codec = TableSchema(SCHEMA.columns[:2]).fit(pd.DataFrame({"a": [], "b": []}), None, np.random.default_rng(0))
    syn = VertiMRFSynthesizer(VertiMRFConfig(encoder="dpfm", bins=4, recovery="hisrec", use_local=True,
                                             encoder_params={"t": 32, "chunk_rows": chunk, "block_mb": 1},
                                             local_params={"iters": 10, "refine_iters": 3}))
    budget = Budget(4.0, 1e-5)
    ledger = PrivacyLedger(budget)
    ledger.plan(syn.plan(PlanContext(full, part, budget)))
    key_rng, rngs = syn.party_rngs(np.random.default_rng(1))
    syn.agree_keys(key_rng)
    tracemalloc.start()
    out = syn.party_step_chunks(part.names[0], codec.domain, coded_chunks(tmp_path / f"{n}.csv", codec, chunk),
                                ledger, rngs[part.names[0]])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(out) == 3
    return peak


def test_a_table_larger_than_the_chunk_setting_is_processed_within_it(tmp_path):
    chunk = 5_000
    small, large = _peak_bytes(tmp_path, 2 * chunk, chunk), _peak_bytes(tmp_path, 40 * chunk, chunk)
    # 20x the rows, the same memory: the whole coded table (n x 2 int64) alone would exceed the peak
    assert large < 1.3 * small + (1 << 20), (small, large)
    assert large < 40 * chunk * 2 * 8, large


def test_validate_estimates_memory_and_refuses_a_plan_over_the_limit(tmp_path):
    from click.testing import CliRunner

    from vertisynth.cli.main import main
    (tmp_path / "v.toml").write_text('seed = 5\n[budget]\nepsilon = 2.0\ndelta = 1e-5\n[dataset]\nname = "census"\n'
                                     'params = {n = 3000}\n[synthesizer]\nuse = "vertimrf"\n'
                                     'params = {encoder_params = {chunk_rows = 10000, block_mb = 4}}\n')
    ok = CliRunner().invoke(main, ["validate", str(tmp_path / "v.toml"), "--memory", "8GB"])
    assert ok.exit_code == 0 and "Estimated peak memory" in ok.output and "largest clique" in ok.output, ok.output
    bad = CliRunner().invoke(main, ["validate", str(tmp_path / "v.toml"), "--memory", "100MB"])
    assert bad.exit_code == 2 and "does not fit --memory 100MB" in bad.output and "party 'registry'" in bad.output
    assert len(bad.output.strip().splitlines()) == 1


def test_party_synth_on_parquet_and_a_dask_scheduler_equals_the_simulation(tmp_path):
    """`party synth --csv X.parquet --scheduler tcp://...`: the same release as the one-process simulation."""
    distributed = pytest.importorskip("distributed")
    pytest.importorskip("pyarrow.parquet")
    import json

    from deploy_helpers import SECRET, SERVER_KEY, cli, hello_all, keys_all, publish_key, with_roster
    from test_flows import COLS, THREE, THREE_PARTIES, _people

    from vertisynth.deploy.simulate import simulate
    from vertisynth.run.config import load_config
    full = _people()
    full.to_csv(tmp_path / "full.csv", index=False)
    for p, col in COLS.items():
        if p == "hospital":
            full[[col]].to_parquet(tmp_path / f"{p}.parquet", index=False)
        else:
            full[[col]].to_csv(tmp_path / f"{p}.csv", index=False)
    config = THREE.replace('"full.csv"', f'"{tmp_path / "full.csv"}"').replace("t = 64 }", "t = 64, chunk_rows = 97 }")
    (tmp_path / "job.toml").write_text(with_roster(tmp_path, config, THREE_PARTIES))
    hello_all(tmp_path, THREE_PARTIES, secret=SECRET)
    keys_all(tmp_path, THREE_PARTIES)
    publish_key(tmp_path)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp",
                                  host="127.0.0.1", dashboard_address=None) as cluster, \
            distributed.Client(cluster) as watch, distributed.get_task_stream(watch) as tasks:
        for p in THREE_PARTIES:
            table = f"{p}.parquet" if p == "hospital" else f"{p}.csv"
            extra = ["--scheduler", cluster.scheduler_address] if p != "bank" else []
            cli("party", "synth", "job.toml", "--party", p, "--csv", table, *extra, "--exchange", "shared",
                "--out", f"private_{p}", cwd=tmp_path)
    # the workers read the parties' spilled rows themselves (paths and row ranges): no chunk was sent
    assert {t["key"].split("-")[0] for t in tasks.data} == {"map_slice"}, tasks.data
    cli("server", "job.toml", "--exchange", "shared", "--out", "out", *SERVER_KEY, cwd=tmp_path)
    deployed = pd.read_csv(tmp_path / "out" / "synthetic.csv")
    simulate(load_config(tmp_path / "job.toml"), SECRET).synthetic.to_csv(tmp_path / "sim.csv", index=False)
    pd.testing.assert_frame_equal(deployed, pd.read_csv(tmp_path / "sim.csv"))
    assert json.loads((tmp_path / "out" / "ledger.json").read_text())["planned_but_unspent"] == []


def test_missing_cells_read_as_pandas_reads_them(tmp_path):
    schema = TableSchema((ColumnSchema("a", "categorical", categories=("x", "y"), missing="category"),
                          ColumnSchema("b", "numeric", bounds=(0.0, 9.0), bins=3, missing="category")))
    (tmp_path / "m.csv").write_text("a,b\nx,1\n,2\nNA,\ny,None\nnull,8\n")
    codec = schema.fit(pd.DataFrame({"a": [], "b": []}), None, np.random.default_rng(0))
    want = codec.encode(pd.read_csv(tmp_path / "m.csv", dtype=str)).codes
    got = np.concatenate([r.codes for _, r in coded_chunks(tmp_path / "m.csv", codec, 2)()])
    assert np.array_equal(got, want)


def test_a_category_spelled_like_a_missing_value_stays_a_category(tmp_path):
    schema = TableSchema((ColumnSchema("ins", "categorical", categories=("None", "public")),))
    (tmp_path / "i.csv").write_text("ins\nNone\npublic\nNone\n")
    codec = schema.fit(pd.DataFrame({"ins": []}), None, np.random.default_rng(0))
    got = np.concatenate([r.codes for _, r in coded_chunks(tmp_path / "i.csv", codec, 2)()])
    assert got.ravel().tolist() == [0, 1, 0]
