"""Honest cross-machine flows from the README, as separate processes: 3 parties, PSI and PSU with
integer-looking labels (align -> keys -> synth -> server), and deployment = simulation under a test secret."""
import json

import numpy as np
import pandas as pd
import pytest
from deploy_helpers import SECRET, SERVER_KEY, cli, hello_all, keys_all, parallel, publish_key, with_roster

from vertisynth.deploy.simulate import simulate
from vertisynth.run.config import load_config

THREE = """
seed = 3
budget = { epsilon = 8.0, delta = 1e-5 }
[dataset]
name = "csv"
[dataset.params]
path = "full.csv"
[dataset.params.schema]
a = { kind = "categorical", categories = ["1", "2", "3"] }
b = { kind = "categorical", categories = ["1", "2"] }
c = { kind = "categorical", categories = ["1", "2", "3"] }
[[parties]]
name = "hospital"
attributes = ["a"]
[[parties]]
name = "insurer"
attributes = ["b"]
[[parties]]
name = "bank"
attributes = ["c"]
[synthesizer]
use = "vertimrf"
params = { encoder_params = { t = 64 }, local_params = { iters = 10, refine_iters = 5 }, iters = 10, rounds = 1 }
[[evaluators]]
use = "tvd"
params = { ways = [2] }
"""
THREE_PARTIES = ["hospital", "insurer", "bank"]
COLS = {"hospital": "a", "insurer": "b", "bank": "c"}


def _people(n=600, seed=4):
    rng = np.random.default_rng(seed)
    a = rng.integers(1, 4, n)
    return pd.DataFrame({"a": a, "b": rng.integers(1, 3, n), "c": np.where(rng.random(n) < 0.8, a, rng.integers(1, 4, n))})


def test_three_parties_equal_the_simulation_under_a_test_secret(tmp_path, in_process):
    # the roles in threads (issue 33): the folder kind's flow across processes is test_deploy.py's (cold); this one
    # checks three parties' one group key and the table against the simulation
    full = _people()
    full.to_csv(tmp_path / "full.csv", index=False)
    for p, col in COLS.items():
        full[[col]].to_csv(tmp_path / f"{p}.csv", index=False)
    config = THREE.replace('"full.csv"', f'"{tmp_path / "full.csv"}"')   # only the simulation reads it
    (tmp_path / "job.toml").write_text(with_roster(tmp_path, config, THREE_PARTIES))
    hello_all(tmp_path, THREE_PARTIES, secret=SECRET)
    keys_all(tmp_path, THREE_PARTIES)
    groups = {json.loads((tmp_path / f"private_{p}" / f"{p}_keys.json").read_text())["group_key"] for p in THREE_PARTIES}
    assert len(groups) == 1
    publish_key(tmp_path)
    for p in THREE_PARTIES:
        cli("party", "synth", "job.toml", "--party", p, "--csv", f"{p}.csv", "--exchange", "shared",
            "--out", f"private_{p}", cwd=tmp_path)
    cli("server", "job.toml", "--exchange", "shared", "--out", "out", *SERVER_KEY, cwd=tmp_path)
    deployed = pd.read_csv(tmp_path / "out" / "synthetic.csv")
    simulated = simulate(load_config(tmp_path / "job.toml"), SECRET).synthetic
    simulated.to_csv(tmp_path / "sim.csv", index=False)
    pd.testing.assert_frame_equal(deployed, pd.read_csv(tmp_path / "sim.csv"))
    ledger = json.loads((tmp_path / "out" / "ledger.json").read_text())
    assert set(ledger["per_party_epsilon"]) == set(THREE_PARTIES) and ledger["planned_but_unspent"] == []


@pytest.mark.parametrize("protocol", ["psi", "psu"])
def test_keyed_parties_with_integer_labels_align_keys_synth(tmp_path, protocol, in_process):
    # the roles in threads of this process (issue 33): `party align` with each protocol runs as processes in
    # tests/deploy/test_psi_deploy.py, three parties as processes in the test above; what this one adds is integer
    # identifiers and labels through align -> keys -> synth
    people = _people(500)
    rng = np.random.default_rng(9)
    held = {p: np.sort(rng.permutation(500)[:430]) for p in THREE_PARTIES}
    for p, col in COLS.items():   # integer identifiers and integer-looking labels, each party in its own order
        rows = rng.permutation(held[p])
        pd.DataFrame({"id": rows, col: people[col].to_numpy()[rows]}).to_csv(tmp_path / f"{p}.csv", index=False)
    text = THREE.replace('path = "full.csv"', 'path = "not-on-any-machine.csv"')
    text += f'[alignment]\nuse = "{protocol}"\nparams = {{ workers = 1 }}\n'
    (tmp_path / "job.toml").write_text(with_roster(tmp_path, text, THREE_PARTIES))
    hello_all(tmp_path, THREE_PARTIES)
    res = parallel([["party", "align", "job.toml", "--party", p, "--csv", f"{p}.csv", "--exchange", "shared",
                     "--out", f"private_{p}", "--timeout", "60"] for p in THREE_PARTIES], tmp_path)
    assert all(r[0] == 0 for r in res), res
    common = set(held["hospital"]) & set(held["insurer"]) & set(held["bank"])
    union = set(held["hospital"]) | set(held["insurer"]) | set(held["bank"])
    tables = {p: pd.read_csv(tmp_path / f"private_{p}" / f"{p}_aligned.csv", dtype=str) for p in THREE_PARTIES}
    assert {len(t) for t in tables.values()} == {len(common) if protocol == "psi" else len(union)}
    assert set(tables["hospital"].a) <= {"1", "2", "3"}
    keys_all(tmp_path, THREE_PARTIES)   # the documented order: align -> keys -> synth
    publish_key(tmp_path)
    for p in THREE_PARTIES:
        cli("party", "synth", "job.toml", "--party", p, "--csv", f"private_{p}/{p}_aligned.csv", "--exchange",
            "shared", "--out", f"private_{p}", cwd=tmp_path)
    cli("server", "job.toml", "--exchange", "shared", "--out", "out", *SERVER_KEY, cwd=tmp_path)
    syn = pd.read_csv(tmp_path / "out" / "synthetic.csv")
    assert list(syn.columns) == ["a", "b", "c"] and len(syn) > 0
    spent = json.loads((tmp_path / "out" / "ledger.json").read_text())["per_stage_epsilon"]
    assert ("alignment" in spent) == (protocol == "psu")   # the PSU fill's DP spends, reported by the parties
