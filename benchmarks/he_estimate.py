"""`vertisynth validate`'s HE cost per party against a run, on a config file (docs/he.md "The cost model: operations
times prices").

    PYTHONPATH=. VERTISYNTH_DATA=../shared/data nice -n 5 python benchmarks/he_estimate.py \
        docs/lab/vertical_privmrf_adult_he_ou.toml --rows 4000 [--scheme paillier|ou] [--trust none|server]

Adult/NLTCS are subsampled (`sample`, `sample_seed` 1), a zoo table is drawn at `n` = --rows. The estimate is made
from the plan before any row is read (VertiMRF: `cost_estimate(n)`, a vertical twin: `twin_cost_estimate`), exactly
as `validate` makes it, then the plan runs in this process and each party's protocol CPU (`HEEncoder.costs`: E's
encryption pool included) and operations (`Costs.ops`) are set against it. Per party it prints: the run's CPU and
the estimate's (ratio); the CPU without the key pair on both sides (a key pair is a prime search of random length);
the run's operations priced at the estimate's prices (what the count model alone would say, so run CPU / priced run
is the prices' error) and the operations that differ in count. The load average is printed before and after."""
from __future__ import annotations

import argparse
import os
import tomllib

import numpy as np

from vertisynth.core.capabilities import CostEstimate
from vertisynth.plugins.encoders.he import encoder as he_encoder, paillier, protocol
from vertisynth.run.config import parse_config
from vertisynth.run.pipeline import execute, make_plan, twin_cost_estimate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("--rows", "--sample", type=int, required=True)
    ap.add_argument("--scheme", choices=["paillier", "ou"], default=None)
    ap.add_argument("--trust", choices=["none", "server"], default=None)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--repeat", type=int, default=1, help="runs of the same plan (fresh keys, fresh secure noise): "
                    "each printed, then each party's median run CPU against the one estimate")
    ap.add_argument("--answers", action="store_true", help="record a twin's answers and print each one that made a "
                    "party encrypt a pass of its rows (its tables, the party, the ciphertexts: the count model on "
                    "what the run asked)")
    args = ap.parse_args()
    with open(args.config, "rb") as f:
        raw = tomllib.load(f)
    ds = raw["dataset"]
    extra = {"n": args.rows} if ds["name"] == "zoo" else {"sample": args.rows, "sample_seed": 1}
    ds["params"] = {**ds.get("params", {}), **extra}
    raw["evaluators"] = []
    syn_params = raw["synthesizer"].setdefault("params", {})
    he = syn_params.setdefault("encoder_params", {}) if "vertical" not in syn_params else \
        syn_params["vertical"].setdefault("params", {})
    if args.scheme:
        he["scheme"] = args.scheme
    if args.trust:
        syn_params["vertical"]["trust"] = args.trust
    plan = make_plan(parse_config(raw), data_dir=args.data_dir)
    syn = plan.synthesizer.instance
    n = args.rows
    twin = not isinstance(syn, CostEstimate)
    c0 = protocol.cpu_now()
    before = twin_cost_estimate(plan, n)[0] if twin else syn.cost_estimate(n)
    print(f"{args.config} rows={n:,}: the estimate took {protocol.cpu_now() - c0:.1f} CPU s (prices timed in it)",
          flush=True)
    medians: dict[str, list[float]] = {}
    for r in range(args.repeat):
        if r:
            plan = make_plan(parse_config(raw), data_dir=args.data_dir)   # a fresh run: new keys, noise, stores
        for p, ran in one_run(args, plan, twin, n, before).items():
            medians.setdefault(p, []).append(ran)
    if args.repeat > 1:
        for p, runs in medians.items():
            est = before.get(p, {"cpu_s": 0.0})["cpu_s"]
            med = float(np.median(runs))
            print(f"  {p}: median of {len(runs)} runs {med:.2f} s (runs {', '.join(f'{x:.2f}' for x in runs)}), "
                  f"estimate {est:.2f} s ({est / max(med, 1e-9):.2f}x)", flush=True)


def one_run(args, plan, twin: bool, n: int, before: dict) -> dict[str, float]:
    """Run `plan` once in this process and print each party's run against the estimate `before`."""
    load0 = os.getloadavg()[0]
    keys, make = [], paillier.keypair

    def timed_keypair(*a, **k):   # the run's key pairs (a prime search of random length each): their CPU, set apart
        t0 = protocol.cpu_now()
        out = make(*a, **k)
        keys.append(protocol.cpu_now() - t0)
        return out

    paillier.keypair = timed_keypair
    asked, answer = [], he_encoder.HEEncoder.answer

    def recorded(self, views, queries, sigma, *a, **k):   # the run's answers, as `answers_cost` takes them
        asked.append({"domains": {p: v.domain for p, v in views.items()}, "queries": list(queries), "sigma": sigma})
        return answer(self, views, queries, sigma, *a, **k)

    if args.answers and twin:
        he_encoder.HEEncoder.answer = recorded
    c0 = protocol.cpu_now()
    try:
        execute(plan)
    finally:
        paillier.keypair = make
        he_encoder.HEEncoder.answer = answer
    cpu = protocol.cpu_now() - c0
    enc = plan.measure.instance if twin else plan.synthesizer.instance._encoder
    costs = list(enc.server_trust.costs for _ in [0]) if enc.config.trust == "server" else list(enc.costs.values())
    c = enc.config
    price = he_encoder._op_costs(c.key_bits, enc.randomness)   # the prices the estimate used (timed once here)
    parties = sorted({p for k in costs for p in k.cpu})
    keyed = ["server"] if c.trust == "server" else list(enc._keys)   # in the order their keys were made
    key_cpu = dict(zip(keyed, keys))
    out = {}
    print(f"{args.config} rows={n:,} run's key pairs (CPU s) {', '.join(f'{k:.2f}' for k in keys)}; scheme={c.scheme} trust={c.trust} workers={c.workers}: whole run {cpu:.1f} CPU "
          f"s; load {load0:.1f} -> {os.getloadavg()[0]:.1f}; prices (ms): "
          + ", ".join(f"{k} {v * 1e3:.4g}" for k, v in price.items()), flush=True)
    for p in parties:
        ran = sum(k.cpu.get(p, 0.0) for k in costs)
        ops: dict[str, int] = {}
        for k in costs:
            for o, v in k.ops.get(p, {}).items():
                ops[o] = ops.get(o, 0) + v
        est = before.get(p, {"cpu_s": 0.0, "ops": {}, "ciphertexts": 0})
        want = est.get("ops", {})
        draw = sum(he_encoder._DRAW_COSTS.values()) / max(len(he_encoder._DRAW_COSTS), 1)   # per σ: their mean
        priced = sum(v * (draw if o == "draw" else price.get(o, 0.0)) for o, v in ops.items())
        key_est = want.get("key", 0) * price["key"]
        line = (f"  {p}: run {ran:.2f} s, estimate {est['cpu_s']:.2f} s ({est['cpu_s'] / max(ran, 1e-9):.2f}x); "
                f"ciphertexts run {sum(k.ciphertexts.get(p, 0) for k in costs):,} est {est['ciphertexts']:,.0f}; "
                f"run's ops at the estimate's prices {priced:.2f} s (run / that {ran / max(priced, 1e-9):.2f}x; "
                f"without the key {(ran - key_cpu.get(p, 0.0)) / max(priced - ops.get('key', 0) * price['key'], 1e-9):.2f}x); "
                f"key pair run {key_cpu.get(p, 0.0):.2f} s est {key_est:.2f} s; without it: run "
                f"{ran - key_cpu.get(p, 0.0):.2f} s est {est['cpu_s'] - key_est:.2f} s "
                f"({(est['cpu_s'] - key_est) / max(ran - key_cpu.get(p, 0.0), 1e-9):.2f}x)")
        if est.get("unasked"):   # the estimate without the pass of its rows that the adaptive picks may not ask
            un = est["unasked"]["cpu_s"]
            line += f"; estimate without its rows' pass {un:.2f} s ({un / max(ran, 1e-9):.2f}x)"
        if est.get("blocks"):   # one more pass of its smallest block its whole rows lack per adaptive answer
            hi = est["blocks"]["cpu_s"]
            line += (f"; with a kept-block pass per adaptive answer {hi:.2f} s ({hi / max(ran, 1e-9):.2f}x), "
                     f"{est['blocks']['ciphertexts']:,.0f} ciphertexts: the run "
                     f"{'inside' if 0.95 * est.get('unasked', est)['ciphertexts'] <= sum(k.ciphertexts.get(p, 0) for k in costs) <= est['blocks']['ciphertexts'] else 'outside'} (ciphertexts, from 0.95x the lower figure)")
        if est.get("key_band"):
            kb = est["key_band"]
            line += (f"; within 25% for a key draw in {kb['low_s']:.2f}-{kb['high_s']:.2f} s "
                     f"({100 * kb['runs']:.0f}% of the measured draws): this run's "
                     f"{'inside' if kb['low_s'] <= key_cpu.get(p, 0.0) <= kb['high_s'] else 'outside'}")
        if est.get("as_encrypter"):   # trust = "server": the party as E, and as S, of every adaptive answer
            hi, lo = est["as_encrypter"]["cpu_s"], est["as_summer"]["cpu_s"]
            line += (f"; as E of every adaptive answer {hi:.2f} s ({hi / max(ran, 1e-9):.2f}x), as S {lo:.2f} s "
                     f"({lo / max(ran, 1e-9):.2f}x): the run {'inside' if lo <= ran <= hi else 'outside'}")
        diff = {o: (ops.get(o, 0), want.get(o, 0)) for o in sorted(set(ops) | set(want)) if ops.get(o, 0) != want.get(o, 0)}
        line += "; ops run/est that differ: " + (", ".join(f"{o} {a:,}/{b:,}" for o, (a, b) in diff.items()) or "none")
        print(line, flush=True)
        out[p] = ran
    if asked:   # which answers made a party encrypt a pass of its rows (the count model, simulated: no prices)
        import attrs
        count = he_encoder.HEEncoder(attrs.evolve(c, crypto="simulated"))
        parties_dom = {p.name: plan.source.schema.preview_domain().project(p.attributes) for p in plan.partition}
        prev: dict[str, float] = {}
        for i in range(len(asked)):
            now = {p: v["ciphertexts"] for p, v in count.answers_cost(asked[: i + 1], n, parties_dom).items()}
            for p, v in now.items():
                if v - prev.get(p, 0.0) >= n / 2:
                    q = asked[i]["queries"]
                    print(f"  answer {i}: {p} encrypts {v - prev.get(p, 0.0):,.0f} ciphertexts for "
                          f"{q if len(q) <= 2 else f'{len(q)} tables'} (domains "
                          f"{ {x: dict(zip(d.attributes, d.shape)) for x, d in asked[i]['domains'].items()} if len(q) <= 2 else '-'})",
                          flush=True)
            prev = now
    return out


if __name__ == "__main__":
    main()
