"""`vertisynth validate`'s HE cost per party against a run, on a config file (docs/he.md "Scheme OU: measured").

    PYTHONPATH=. nice -n 5 python benchmarks/he_estimate.py docs/lab/he_adult_ou.toml --sample 4000

The config's dataset is subsampled (`sample`, `sample_seed` 1); the estimate is made from the plan before any row is
read (VertiMRF: `cost_estimate(n)`, a vertical twin: `twin_cost_estimate`), exactly as `validate` makes it, then
the plan runs in this process and each party's protocol CPU (`HEEncoder.costs`: E's encryption pool included) is
set against it. VertiMRF also prints the estimate on the clique tables the run chose (the per-operation prices
alone, without the stand-in's guess of the tables)."""
from __future__ import annotations

import argparse
import time
import tomllib

from vertisynth.core.capabilities import CostEstimate
from vertisynth.plugins.encoders.he import encoder as he_encoder, paillier, protocol
from vertisynth.run.config import parse_config
from vertisynth.run.pipeline import execute, make_plan, twin_cost_estimate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("--sample", type=int, required=True)
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args()
    with open(args.config, "rb") as f:
        raw = tomllib.load(f)
    raw["dataset"]["params"] = {**raw["dataset"].get("params", {}), "sample": args.sample, "sample_seed": 1}
    raw["evaluators"] = []
    plan = make_plan(parse_config(raw), data_dir=args.data_dir)
    syn = plan.synthesizer.instance
    n = args.sample
    twin = not isinstance(syn, CostEstimate)
    estimate = (lambda: twin_cost_estimate(plan, n)[0]) if twin else (lambda: syn.cost_estimate(n))
    before = estimate()
    # the same prices with every row ciphertext at four set bits (the pricing before the layout's set bits were
    # counted): the modelling change alone, at this process's timings
    timed = he_encoder._op_costs
    he_encoder._op_costs = lambda *a, **k: {**(o := timed(*a, **k)), "enc": o["enc"] + 4 * o.get("enc_bit", 0.0),
                                            "enc_bit": 0.0}
    try:
        four = estimate()
    finally:
        he_encoder._op_costs = timed
    op = timed(2048, "ou")   # the docs/lab configs: 2048-bit OU keys
    keys, make = [], paillier.keypair

    def timed_keypair(*a, **k):   # the run's key pairs (a random prime search each): their CPU, to set apart
        t0 = time.process_time()
        out = make(*a, **k)
        keys.append(time.process_time() - t0)
        return out

    paillier.keypair = timed_keypair
    c0 = protocol.cpu_now()
    execute(plan)
    paillier.keypair = make
    cpu = protocol.cpu_now() - c0
    enc = plan.measure.instance if twin else syn._encoder
    ran = {p: sum(c.cpu.get(p, 0.0) for c in enc.costs.values()) for p in before if p != "server"}
    made = {p: sum(c.ciphertexts.get(p, 0) for c in enc.costs.values()) for p in ran}
    after = None
    if not twin:
        from benchmarks.he import _split
        after = enc.cost_estimate(n, clique_queries=_split(enc, syn._chosen))
    print(f"{args.config} n={n:,}: {cpu:.1f} CPU s for the whole run; OU prices (ms): "
          + ", ".join(f"{k} {v * 1e3:.4g}" for k, v in op.items()) + "; the run's key pairs (CPU s): "
          + ", ".join(f"{t:.2f}" for t in keys))
    for p in ran:
        line = (f"  {p}: run {made[p]:,} ciphertexts, protocol CPU {ran[p]:.1f} s; estimate before the run "
                f"{before[p]['ciphertexts']:,.0f}, {before[p]['cpu_s']:.1f} s ({before[p]['cpu_s'] / max(ran[p], 1e-9):.2f}x)")
        line += f"; at four set bits per ciphertext {four[p]['cpu_s']:.1f} s ({four[p]['cpu_s'] / max(ran[p], 1e-9):.2f}x)"
        if after is not None:
            line += f"; on the run's tables {after[p]['cpu_s']:.1f} s ({after[p]['cpu_s'] / max(ran[p], 1e-9):.2f}x)"
        print(line, flush=True)


if __name__ == "__main__":
    main()
