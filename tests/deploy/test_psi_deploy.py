"""PSI (and PSU) alignment across processes under an explicit test secret: `party align` on each party's own
ID-keyed CSV, then VertiMRF through files; the published table equals the one-process simulation exactly."""
import json

import numpy as np
import pandas as pd
import pytest
from deploy_helpers import SECRET, SERVER_KEY, cli, hello_all, keys_all, parallel, publish_key, with_roster

from vertisynth.deploy.simulate import simulate
from vertisynth.run.config import load_config

CONFIG = """
seed = 5
budget = {{ epsilon = 8.0, delta = 1e-5 }}
[dataset]
name = "party_csv"
[dataset.params]
files = {{ hospital = "{tmp}/hospital.csv", insurer = "{tmp}/insurer.csv" }}
[dataset.params.schema]
a = {{ kind = "categorical", categories = ["x", "y", "z"] }}
b = {{ kind = "categorical", categories = ["x", "y"] }}
c = {{ kind = "categorical", categories = ["x", "y", "z"] }}
d = {{ kind = "categorical", categories = ["x", "y"] }}
[[parties]]
name = "hospital"
attributes = ["a", "b"]
[[parties]]
name = "insurer"
attributes = ["c", "d"]
[synthesizer]
use = "vertimrf"
params = {{ encoder_params = {{ t = 500 }}, local_params = {{ iters = 20, refine_iters = 5 }}, iters = 20, rounds = 1 }}
[[evaluators]]
use = "tvd"
params = {{ ways = [2] }}
[alignment]
use = "{protocol}"
params = {{ workers = 1 }}
"""
PARTIES = ["hospital", "insurer"]


def _own_csvs(tmp_path, n=300):
    # 300 people: the checks are exact (the same rows, order and table as the simulation) at any n; 900 tripled
    # the protocols' group operations in every party process and in the simulation (issue 33)
    rng = np.random.default_rng(8)
    a = rng.integers(0, 3, n)
    c = np.where(rng.random(n) < 0.85, a, rng.integers(0, 3, n))
    labels = np.array(["x", "y", "z"])
    k = {"hospital": 260, "insurer": 267}
    held = {p: rng.permutation(n)[:k[p]] for p in PARTIES}   # each in its own order
    pd.DataFrame({"id": [f"p{i}" for i in held["hospital"]], "a": labels[a[held["hospital"]]],
                  "b": labels[rng.integers(0, 2, k["hospital"])]}).to_csv(tmp_path / "hospital.csv", index=False)
    pd.DataFrame({"id": [f"p{i}" for i in held["insurer"]], "c": labels[c[held["insurer"]]],
                  "d": labels[rng.integers(0, 2, k["insurer"])]}).to_csv(tmp_path / "insurer.csv", index=False)
    return held


def _cli(tmp_path, *args):
    return cli(*args, cwd=tmp_path, timeout=300)


def _align_all(tmp_path):
    res = parallel([["party", "align", "job.toml", "--party", p, "--csv", f"{p}.csv", "--exchange", "shared",
                     "--out", f"private_{p}", "--timeout", "60"] for p in PARTIES], tmp_path)
    assert all(code == 0 for code, _, _ in res), res
    assert all("not for production" in out for _, out, _ in res), res   # the keys came from the test secret


def _deploy(tmp_path, protocol, secret=SECRET):
    (tmp_path / "job.toml").write_text(with_roster(tmp_path, CONFIG.format(tmp=tmp_path, protocol=protocol), PARTIES))
    hello_all(tmp_path, PARTIES, secret=secret)
    _align_all(tmp_path)
    keys_all(tmp_path, PARTIES)
    publish_key(tmp_path)
    for p in PARTIES:
        _cli(tmp_path, "party", "synth", "job.toml", "--party", p, "--csv", f"private_{p}/{p}_aligned.csv",
             "--keys", f"private_{p}/{p}_keys.json", "--exchange", "shared", "--out", f"private_{p}")
    _cli(tmp_path, "server", "job.toml", "--exchange", "shared", "--out", "out", *SERVER_KEY)
    return pd.read_csv(tmp_path / "out" / "synthetic.csv")


@pytest.mark.parametrize("protocol", ["psi", "psu"])
def test_align_then_vertimrf_across_processes_equals_the_simulation(tmp_path, protocol):
    held = _own_csvs(tmp_path)
    deployed = _deploy(tmp_path, protocol)
    result = simulate(load_config(tmp_path / "job.toml"), SECRET)
    result.synthetic.to_csv(tmp_path / "sim.csv", index=False)
    pd.testing.assert_frame_equal(deployed, pd.read_csv(tmp_path / "sim.csv"))
    # the alignment itself is the simulation's: the same people on the same rows, in the same common order
    # (the synthetic table alone is nearly invariant to a common reordering of the rows)
    common = len(set(held["hospital"]) & set(held["insurer"]))
    expect = common if protocol == "psi" else len(set(held["hospital"]) | set(held["insurer"]))
    assert result.report["alignment"]["info"]["records"] == expect
    tables = {p: pd.read_csv(tmp_path / f"private_{p}" / f"{p}_aligned.csv") for p in PARTIES}
    assert all(len(t) == expect for t in tables.values())
    for p in PARTIES:   # real rows and identifiers: private like the keys (issue 30 item 9; were 0644)
        for name in (f"{p}_aligned.csv", f"{p}_alignment.csv"):
            assert (tmp_path / f"private_{p}" / name).stat().st_mode & 0o077 == 0, name
    positions = {p: pd.read_csv(tmp_path / f"private_{p}" / f"{p}_alignment.csv").set_index("id").position
                 for p in PARTIES}
    both = positions["hospital"].index.intersection(positions["insurer"].index)
    assert len(both) == common and (positions["hospital"][both] == positions["insurer"][both]).all()
    real_rows = np.sort(positions["hospital"][both].to_numpy())   # held by both: the simulation's real rows
    joined = pd.concat([tables[p].iloc[real_rows].reset_index(drop=True) for p in PARTIES], axis=1)
    codes = np.stack([joined[c].map({"x": 0, "y": 1, "z": 2}).to_numpy() for c in "abcd"], axis=1)
    assert np.array_equal(codes, result.real_codes.codes)
    assert json.loads((tmp_path / "out" / "report.json").read_text()).get("test_secret")   # labelled a test run


def test_only_an_explicit_test_secret_seeds_the_alignment():
    from vertisynth.deploy.align import _test_streams

    ring = ["hospital", "insurer", "bank"]
    secret = bytes.fromhex(SECRET)
    for protocol in ("psi", "psu"):
        plain = [_test_streams(protocol, ring, "insurer", None, "seeded") for _ in range(2)]
        assert all(r.protocol is None for r in plain)   # keys and shuffles: the protocol's OS CSPRNG path
        assert plain[0].fill.bytes(16) != plain[1].fill.bytes(16)   # fill: fresh OS entropy each run
        assert _test_streams(protocol, ring, "insurer", secret, "os").protocol is None   # keys = 'os' stays OS
        seeded = [_test_streams(protocol, ring, "insurer", secret, "seeded") for _ in range(2)]
        assert seeded[0].protocol.bytes(16) == seeded[1].protocol.bytes(16)
    # PSU: each party its own fill stream, as the simulation spawns them
    fills = {p: _test_streams("psu", ring, p, secret, "seeded").fill.bytes(16) for p in ring}
    assert len(set(fills.values())) == 3
