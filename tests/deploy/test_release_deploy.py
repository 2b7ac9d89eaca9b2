"""Vertical twins over a measure that releases once (`dpfm`, `grr`) across machines: the server runs the synthesizer,
and at its first cross-party question asks every party for its share of the release (deploy/oracle_rounds.py,
`RemoteLink.release`). Each party pays the plan's charges of its share on its own ledger, agrees the FM key with the
other parties (dpfm; sealed to each other party, never to the server), sketches or randomises its own columns with its
own stream and seals the share to the server, who checks each share against the plan before it answers anything from
them. Under a test secret the table and the ledger equal `simulate` bit for bit."""
import json

import pandas as pd
import pytest
from deploy_helpers import SECRET, SERVER_KEY, hello_all, parallel, with_roster

from vertisynth.deploy.simulate import simulate
from vertisynth.run.config import load_config

CONFIG = """
seed = 11
budget = { epsilon = 2.0, delta = 1e-5 }
[dataset]
name = "zoo"
params = { preset = "small-split", n = 160 }
[synthesizer]
use = "SYNTH"
params = { PARAMS vertical = VERTICAL }
"""
DPFM = '{ measure = "dpfm", trust = "server", params = { t = 200 } }'
GRR = '{ measure = "grr", trust = "none" }'
PARTIES = ["party1", "party2"]


def _setup(tmp_path, synth, params, vertical, exchange="shared"):
    text = CONFIG.replace("SYNTH", synth).replace("PARAMS", params).replace("VERTICAL", vertical)
    (tmp_path / "job.toml").write_text(with_roster(tmp_path, text, [*PARTIES, "server"]))
    hello_all(tmp_path, PARTIES, exchange=exchange, secret=SECRET)


def _party(p, exchange="shared"):
    return ["party", "job.toml", "--party", p, "--exchange", exchange, "--out", f"private_{p}", "--timeout", "60", "-q"]


def _server(exchange="shared"):
    return ["server", "job.toml", "--exchange", exchange, "--out", "out", *SERVER_KEY, "--timeout", "60", "-q"]


def _deployed_equals_simulated(tmp_path):
    res = parallel([_party(p) for p in PARTIES] + [_server()], tmp_path, timeout=300)
    assert all(r[0] == 0 for r in res), res
    sim = simulate(load_config(tmp_path / "job.toml"), SECRET)
    sim.synthetic.to_csv(tmp_path / "sim.csv", index=False)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "out" / "synthetic.csv"), pd.read_csv(tmp_path / "sim.csv"))
    ledger = json.loads((tmp_path / "out" / "ledger.json").read_text())
    want = json.loads(json.dumps(sim.ledger.to_dict()))
    assert {k: ledger[k] for k in want} == want   # every charge, ε, the cross-party answers: bit for bit
    assert not ledger["planned_but_unspent"]
    return ledger


@pytest.mark.parametrize("synth, params", [("mst", "iters = 40,")], ids=["mst"])
def test_a_dpfm_twin_across_processes_equals_the_one_process_run(tmp_path, synth, params):
    ledger = _deployed_equals_simulated(_setup(tmp_path, synth, params, DPFM) or tmp_path)
    assert ledger["cross_party"]["through"] == ["dpfm (trust = server)"]
