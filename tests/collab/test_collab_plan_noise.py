"""Issue 31, "one plan builder": the [collab] run plans its ledger's noise by the run layer's rule (make_plan): a
one-process run on someone's records (the custodians' own CSVs) draws secure noise unless the config says
`noise = "simulation"`; the built-in data keeps simulation noise. Before, a collab run on the custodians' CSVs drew
noise from the config seed."""
import numpy as np

from vertisynth.collab.horizontal import simulate_custodians
from vertisynth.plugins.datasets.census import CensusConfig, load
from vertisynth.run.config import parse_config
from vertisynth.run.pipeline import make_plan


def _cfg(collab, **extra):
    return parse_config({"seed": 5, "budget": {"epsilon": 2.0, "delta": 1e-5},
                         "dataset": {"name": "census", "params": {"n": 300}},
                         "synthesizer": {"use": "private_pgm", "params": {"measurements": "workload", "iters": 5,
                                                                          "workload": [["age", "income"]]}},
                         "collab": collab, **extra})


def test_a_collab_run_on_the_custodians_csvs_draws_secure_noise_as_a_vertical_run_on_user_data(tmp_path):
    files = {}
    for name, part in simulate_custodians(load(CensusConfig(n=300)).frame, 2, "random",
                                          np.random.default_rng(1)).items():
        files[name] = str(tmp_path / f"{name}.csv")
        part.to_csv(files[name], index=False)
    assert make_plan(_cfg({"files": files})).ledger.noise == "secure"
    assert make_plan(_cfg({"files": files}, noise="simulation")).ledger.noise == "simulation"
    assert make_plan(_cfg({"custodians": 2})).ledger.noise == "simulation"   # the built-in census, split in memory
