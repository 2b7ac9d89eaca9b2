"""What the twin diagnostics share (twin_selection_ablation.py, twin_probe_diagnostics.py): a grid cell's joined
table and party split, and a twin planned on a vertical oracle (crypto simulated) as the pipeline builds one.
Only NLTCS, Adult (from $VERTISYNTH_DATA) and the generated zoo are used."""
from __future__ import annotations

import numpy as np


def cell_table(dataset: str, epsilon: float, delta: float, seed: int, data_dir: str | None):
    """(the joined table as codes, its party split) of `dataset` ("zoo:PRESET", "nltcs", "adult") at this seed."""
    from vertisynth.run.config import parse_config
    from vertisynth.run.pipeline import make_plan, run
    name, _, preset = dataset.partition(":")
    dparams = {"preset": preset} if name == "zoo" else {"data_dir": data_dir} if data_dir else {}
    cfg = parse_config({"seed": seed, "budget": {"epsilon": epsilon, "delta": delta},
                        "dataset": {"name": name, "params": dparams},
                        "synthesizer": {"use": "independent", "params": {}}, "evaluators": []})
    return run(cfg).real_codes, make_plan(cfg).partition


def planned_twin(reg, method: str, params: dict, trust: str | None, real, partition, budget, seed: int):
    """(synthesizer, its planned charges, the ledger, the oracle, the fit stream): the vertical twin under `trust`
    (he, crypto simulated), or the central run on the joined table when `trust` is None."""
    from vertisynth.core.interfaces import PlanContext
    from vertisynth.core.privacy import PrivacyLedger
    from vertisynth.pgm.oracle import CentralOracle
    from vertisynth.run.pipeline import build_component, cross_party_measure
    from vertisynth.vertical import VerticalOracle, party_streams
    params = dict(params)
    if trust:
        params["vertical"] = {"measure": "he", "trust": trust, "params": {"crypto": "simulated"}}
    comp = build_component(reg, "synthesizer", method, params, method)
    syn = comp.instance
    ledger = PrivacyLedger(budget)
    charges = syn.plan(PlanContext(real.domain, partition, budget))
    ledger.plan(charges)
    rng = np.random.default_rng(seed)
    if not trust:
        return syn, charges, ledger, CentralOracle(real, ledger), rng
    oracle = VerticalOracle(partition.views(real), partition, cross_party_measure(reg, comp, partition).instance,
                            ledger, party_streams(rng, partition.names), "he")
    return syn, charges, ledger, oracle, rng
