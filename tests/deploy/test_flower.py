"""The Flower runtime on loopback, as separate OS processes: a SuperLink with TLS and SuperNode authentication
(certificates and keys made here), one SuperNode per party reading only its own table, the vertisynth Flower app
submitted with `flwr run`. The published table equals the one-process simulation under the test secret."""
import json

import numpy as np
import pandas as pd
import pytest
from deploy_helpers import SECRET, with_roster

from vertisynth.deploy.simulate import simulate
from vertisynth.run.config import load_config

pytest.importorskip("flwr")
from flower_helpers import Deployment  # noqa: E402

from vertisynth.deploy.flower.pki import node_key, trial_tls  # noqa: E402
from vertisynth.deploy.flower.project import write_app  # noqa: E402

pytestmark = pytest.mark.slow   # about a minute a run (Flower's SuperNode polls every 3 s); CI: .ci/run's step

CONFIG = """
seed = 3
budget = {{ epsilon = 8.0, delta = 1e-5 }}
[dataset]
name = "csv"
[dataset.params]
path = "{full}"
[dataset.params.schema]
a = {{ kind = "categorical", categories = ["1", "2", "3"] }}
b = {{ kind = "categorical", categories = ["1", "2"] }}
c = {{ kind = "categorical", categories = ["1", "2", "3"] }}
{parties}
[synthesizer]
use = "vertimrf"
params = {{ encoder_params = {{ t = 64 }}, local_params = {{ iters = 10, refine_iters = 5 }}, iters = 10, rounds = 1 }}
[[evaluators]]
use = "tvd"
params = {{ ways = [2] }}
"""
SPLITS = {2: {"hospital": ["a"], "insurer": ["b", "c"]},
          3: {"hospital": ["a"], "insurer": ["b"], "bank": ["c"]}}


def _people(n=600, seed=4):
    rng = np.random.default_rng(seed)
    a = rng.integers(1, 4, n)
    return pd.DataFrame({"a": a, "b": rng.integers(1, 3, n), "c": np.where(rng.random(n) < 0.8, a, rng.integers(1, 4, n))})


def _setup(tmp_path, split, extra=""):
    full = _people()
    full.to_csv(tmp_path / "full.csv", index=False)
    parties = "".join(f'[[parties]]\nname = "{p}"\nattributes = {json.dumps(cols)}\n' for p, cols in split.items())
    text = CONFIG.format(full=tmp_path / "full.csv", parties=parties) + extra
    (tmp_path / "job.toml").write_text(with_roster(tmp_path, text, list(split)))
    return full


def _deployment(tmp_path, parties, csvs, **node_extra):
    dep = Deployment(tmp_path)
    dep.superlink(trial_tls(tmp_path / "tls", ["127.0.0.1"]))
    for p in parties:
        private, public = node_key(tmp_path / f"private_{p}", p)
        dep.register(public)
        dep.supernode(p, private, {"party": p, "config": tmp_path / "job.toml", "out": tmp_path / f"private_{p}",
                                   "work": tmp_path / f"work_{p}", "csv": csvs[p], "timeout": 120, **node_extra})
    for p in parties:
        dep.wait_for(f"node_{p}", "SuperNode ID")
    write_app(tmp_path / "app")
    return dep


@pytest.mark.parametrize("n_parties", [2, 3])
def test_flower_run_equals_the_simulation(tmp_path, n_parties):
    split = SPLITS[n_parties]
    full = _setup(tmp_path, split)
    csvs = {}
    for p, cols in split.items():     # each party's own table only
        full[cols].to_csv(tmp_path / f"{p}.csv", index=False)
        csvs[p] = tmp_path / f"{p}.csv"
    dep = _deployment(tmp_path, list(split), csvs, **{"test-secret": SECRET})
    try:
        res = dep.run(tmp_path / "app", {"config": str(tmp_path / "job.toml"), "out": str(tmp_path / "out"),
                                         "timeout": 120})
    finally:
        dep.close()
    assert (tmp_path / "out" / "synthetic.csv").is_file(), res.stdout[-4000:] + res.stderr[-2000:]
    simulated = simulate(load_config(tmp_path / "job.toml"), SECRET).synthetic
    simulated.to_csv(tmp_path / "sim.csv", index=False)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "out" / "synthetic.csv"), pd.read_csv(tmp_path / "sim.csv"))
    net = json.loads((tmp_path / "out" / "network.json").read_text())
    assert set(net["parties"]) == set(split) and all(v["bytes_from_party"] > 0 for v in net["parties"].values())
    # what crossed the wire is kept for audit: only envelopes, each party's under its own name
    sent = sorted(p.name for p in (tmp_path / "out" / "exchange").iterdir())
    assert sent and all(n.endswith(".env") and n.split("__")[1] in split for n in sent)
