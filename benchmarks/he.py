"""VertiMRF-HE (encoder "he": cross-party counts exact under Paillier, two-sided noise) against VertiMRF-FM and
centralised PrivMRF, and the cost of the real crypto.

    PYTHONPATH=. python benchmarks/he.py [--data-dir DIR] [--only quality|cost] [--runs 1]
        [--eps 0.2,0.4,0.8,1.6,3.2] [--zoo small-domains,mixed,...] [--cost-rows 1000,4000]

1. Quality: 3-way TVD (`--marginals` random triples against the training table), same seeds for the three methods;
   NLTCS (ε 0.4, 1.6), Adult (`--eps`), and the zoo presets at ε 1.6 when the `zoo` dataset is installed. The anchor
   of every ratio column is centralised PrivMRF in the same run. VertiMRF-HE runs with crypto = "simulated" here:
   the same noisy counts as real crypto (a test proves it under a fixed noise seed), at no crypto CPU. HE runs
   without binning (bins above every domain): its error does not grow with the cells the way the sketches' does.
   Targets: HE within 1.15x of PrivMRF on Adult at every ε >= 0.4 and on the zoo median; worst zoo preset <= 1.4x.
2. Cost: VertiMRF-HE with crypto = "real" (2048-bit Paillier; short-exponent randomness via sf-heu when installed,
   else phe's full-length randomness: `--randomness`) on random
   subsamples of Adult (`--cost-rows`), ε 1.6: CPU seconds (this process and its encryption pool) and bytes sent per
   party and per stage, per row; which party encrypted. Then a projection from the measured per-ciphertext costs
   and the exact layouts to 45k, 1M and 10M rows (10M on a 64-worker cluster: CPU / 64). Targets: encrypting
   party <= 5 ms CPU per row at the Adult default, constant per row from 45k to 1M rows.
3. Scale (`--only scale --scale-rows 45222,200000,1000000`, not part of the default run): the encrypting party's
   real-crypto stage measured, not projected, at Adult-shaped n (Adult resampled with replacement): `scale`.
4. Speed (`--only speed --speed-rows 45222 [--speed-eps 1.6]`; not part of the default run): the
   whole VertiMRF-HE run on Adult (all rows, or a subsample) with real crypto, twice in one process: the anchor
   with shared layouts off (every block group on ciphertexts of its own, as before) and the default. Per run: CPU
   seconds of the whole run (this process and its encryption pool), each party's protocol CPU (`Costs`), the
   ciphertexts each party encrypted per row, 3-way TVD, and the `vertisynth validate` estimate per party (on the
   run's clique tables and on the stand-in) against the measured CPU. Target: <= 90 CPU s on all of Adult.
   Quality options: `--two-way` (2-way TVD beside the 3-way), `--methods HE` (skip FM), `--he-params JSON`.
6. Schemes (`--only schemes [--scheme-bits 2048,3072]`; not part of the default run): the per-operation CPU of each
   scheme the encoder offers (`encoder._op_costs`, the run's own functions: a row encryption with its randomness,
   a homomorphic addition, a decryption, one of S's full-randomness noise encryptions, a key pair), Paillier (short
   exponents, the default) and OU (`scheme = "ou"`) at each key size, as ratios against 2048-bit Paillier measured in
   the same run; and per plaintext bit (OU carries 617 bits per ciphertext at 2048 against Paillier's 2047), the
   cost that decides a run. docs/he.md "Scheme OU: measured".
5. Estimate (`--only estimate --estimate-rows 8000 --estimate-data adult,nltcs,zoo:strong`; not part of the default
   run): per dataset, `vertisynth validate`'s estimate before any row is read (`cost_estimate(n)`: the stand-in
   clique tables, per-operation costs timed here) against a real-crypto run of the same plan on n rows (a random
   subsample; zoo: n records), per party: protocol CPU (`Costs`) and the ratio. Target: within 25%.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np

from vertisynth.core.registry import default_registry
from vertisynth.run.config import parse_config
from vertisynth.run.pipeline import execute, make_plan

NO_BINS = 10_000   # "bins" above every domain: HE measures raw values


def methods(crypto: str = "simulated") -> dict[str, tuple[str, dict]]:
    return {"PrivMRF (central)": ("privmrf", {}),
            "VertiMRF-HE": ("vertimrf", {"encoder": "he", "bins": NO_BINS,
                                         "encoder_params": {"crypto": crypto, "randomness": RANDOMNESS,
                                                            **HE_PARAMS}}),
            "VertiMRF-FM": ("vertimrf", {})}


RANDOMNESS = "auto"   # --randomness
WAYS = [3]            # --two-way: [2, 3] (2-way TVD printed beside the 3-way)
METHODS = None        # --methods: a subset of methods() by name (None: all three)
TWO_WAY: dict = {}
HE_PARAMS: dict = {}  # --he-params: JSON merged into the he encoder's params (experiments)
ZOO = None   # the zoo dataset module when it is given as a file (--zoo-module)


def run_one(dataset: dict, eps: float, synth: str, params: dict, seed: int, marginals: int):
    key = (str(dataset), eps, synth, str(params), seed)
    source = None
    if dataset["name"] == "zoo" and ZOO is not None:   # the zoo from a file: pass its source to the pipeline
        source = ZOO.source(ZOO.ZooConfig(**dataset["params"]))
        dataset = {"name": "census"}
    cfg = parse_config({"seed": seed, "budget": {"epsilon": eps, "delta": 1e-5}, "dataset": dataset,
                        "synthesizer": {"use": synth, "params": params},
                        "evaluators": [{"use": "tvd", "params": {"ways": WAYS, "marginals": marginals}}]})
    plan = make_plan(cfg, source=source)
    c0 = time.process_time()
    res = execute(plan)
    if 2 in WAYS:
        TWO_WAY[key] = res.metrics["tvd"]["tvd_2way"]
    return res.metrics["tvd"]["tvd_3way"], time.process_time() - c0, plan.synthesizer.instance


def quality(label: str, dataset: dict, eps_list, runs: int, marginals: int) -> list[float]:
    """Prints one line per ε; returns HE/PrivMRF ratios."""
    ratios = []
    for eps in eps_list:
        tvd = {}
        cpu = {}
        two = {}
        for name, (synth, params) in methods().items():
            if METHODS is not None and name not in METHODS and name != "PrivMRF (central)":
                continue
            out = [run_one(dataset, eps, synth, params, seed, marginals) for seed in range(runs)]
            tvd[name] = statistics.mean(o[0] for o in out)
            cpu[name] = statistics.mean(o[1] for o in out)
            if 2 in WAYS:
                two[name] = statistics.mean(TWO_WAY[(str(dataset), eps, synth, str(params), s)] for s in range(runs))
        anchor = tvd["PrivMRF (central)"]
        r_he = tvd["VertiMRF-HE"] / anchor
        ratios.append(r_he)
        fm = (f"FM {tvd['VertiMRF-FM']:.4f} ({tvd['VertiMRF-FM'] / anchor:.2f}x)" if "VertiMRF-FM" in tvd else "FM -")
        line = (f"{label:<22} ε={eps:<4} PrivMRF {anchor:.4f}  HE {tvd['VertiMRF-HE']:.4f} ({r_he:.2f}x)  {fm}"
                f"   CPU s: " + " / ".join(f"{cpu[k]:.0f}" for k in tvd))
        if two:
            line += "   2-way: " + "  ".join(f"{k.split()[0]} {v:.4f} ({v / two['PrivMRF (central)']:.2f}x)"
                                            for k, v in two.items())
        print(line, flush=True)
    return ratios


def _oriented_runs(enc, queries, n: int, stage: str):
    """[(encrypting party, summing party, oriented queries)] for `queries`, as the encoder would run them."""
    return [(e, s, qs) for _, e, s, qs in enc.pairs(queries, n, stage)]


def _per_row(enc, queries, n: int, stage: str) -> dict[str, int]:
    """Ciphertexts per row each party encrypts in `stage`, as the encoder makes them: a run on the selection rows it
    sums again makes none (`reused`), a party encrypting for several peers encrypts once (`fanout`)."""
    runs = enc.pairs(queries, n, stage)
    fan, out = enc.fanout(runs, n, stage), {}
    for _, e, s_, qs in runs:
        if enc.reused(e, s_, qs, n, stage) is not None:
            continue
        k = fan[e][1].plaintexts if e in fan else enc.run_counts(e, s_, qs, n, stage)["per_row"]
        out[e] = k if e in fan else out.get(e, 0) + k
    return out


def _split(enc, tuples):
    out = []
    for s in tuples:
        parts = {}
        for a in s:
            parts.setdefault(enc._owner[a], []).append(a)
        (_, sa), (_, sb) = sorted(parts.items())
        out.append((tuple(sa), tuple(sb)))
    return out


def cost(data_dir: str, rows_list, eps: float = 1.6) -> None:
    """The queries of a full Adult run (simulated), then the real protocol on row subsamples for those queries."""
    from vertisynth.core.dataset import VerticalPartition
    from vertisynth.plugins.encoders.he import paillier, protocol
    from vertisynth.plugins.encoders.he.encoder import _op_costs
    from vertisynth.plugins.encoders.he.noise import SystemSource

    synth, params = methods("simulated")["VertiMRF-HE"]
    ds = {"name": "adult", "params": {"data_dir": data_dir}}
    _, _, syn = run_one(ds, eps, synth, params, 0, 50)
    enc = syn._encoder
    stages = {"selection": enc.selection_queries(), "cliques": _split(enc, syn._chosen)}
    print(f"\nAdult, ε={eps}: the protocol's queries: {len(stages['selection'])} selection pairs, clique tables "
          f"{[list(q[0] + q[1]) for q in stages['cliques']]}")
    from vertisynth.plugins.datasets.files import BenchmarkConfig, adult

    keys = {}
    for rows in rows_list:
        loaded = adult(BenchmarkConfig(data_dir=data_dir, sample=rows, sample_seed=1)).load()
        table = loaded.schema.fit(loaded.frame, None, np.random.default_rng(0)).encode(loaded.frame)  # public schema
        part = VerticalPartition.from_lists([list(p.attributes) for p in syn._partition], list(syn._partition.names))
        views = part.views(table)
        print(f"\nreal crypto ({enc.config.key_bits}-bit Paillier, {enc.randomness} randomness), {rows} Adult rows:")
        tot: dict[str, float] = {}
        for stage, queries in stages.items():
            costs = protocol.Costs()
            runs = _oriented_runs(enc, queries, rows, stage)
            for e, s_, qs in runs:
                if e not in keys:
                    keys[e] = paillier.keypair(enc.config.key_bits, enc.randomness)
                protocol.run_real(e, s_, views[e], views[s_], qs, enc.sigma[stage], SystemSource(), SystemSource(),
                                  keys[e], stage, costs, workers=0)
            for party in sorted(costs.cpu):
                role = "+".join(r for r, who in (("encrypts", {e for e, _, _ in runs}), ("sums", {s_ for _, s_, _ in runs}))
                                if party in who)
                tot[party] = tot.get(party, 0.0) + costs.cpu[party]
                print(f"  {stage:<10} {party:<8} ({role:<13}) CPU {costs.cpu[party]:8.1f} s = "
                      f"{1e3 * costs.cpu[party] / rows:7.2f} ms/row  sent {costs.bytes_sent[party] / 1e6:8.2f} MB = "
                      f"{costs.bytes_sent[party] / rows:7.0f} B/row  ciphertexts {costs.ciphertexts[party]:>9}")
        for party, cpu in tot.items():
            print(f"  total {party}: {1e3 * cpu / rows:.2f} ms CPU per row")
    # projection: the exact layouts at larger n (slots widen with log n) times the measured cost per encryption
    op = _op_costs(enc.config.key_bits, enc.randomness)
    t_enc, t_mul, t_dec = op["enc"], op["mul"], op["dec"]
    print(f"\nper operation here: encrypt {1e3 * t_enc:.2f} ms, homomorphic add {1e6 * t_mul:.1f} µs, "
          f"decrypt {1e3 * t_dec:.2f} ms (2048-bit, {enc.randomness} randomness)")
    for n in (45_222, 1_000_000, 10_000_000):
        per_party: dict[str, int] = {}
        for stage, queries in stages.items():
            for e, k in _per_row(enc, queries, n, stage).items():
                per_party[e] = per_party.get(e, 0) + k
        for party, k in sorted(per_party.items()):
            cpu_row = k * t_enc
            by = k * 2 * enc.config.key_bits // 8
            extra = f"; on 64 workers {n * cpu_row / 64 / 60:.1f} min wall" if n == 10_000_000 else ""
            print(f"  n={n:>10,} {party} encrypts {k} ciphertexts/row -> {1e3 * cpu_row:.1f} ms CPU/row, "
                  f"{n * cpu_row / 3600:.2f} CPU h, sends {by} B/row = {n * by / 1e9:.2f} GB{extra}")


def adult_queries(data_dir: str, eps: float = 1.6, cache: str | None = None):
    """(encoder, {stage: queries}) of a full Adult run (simulated); the queries cached in `cache` (JSON) if given."""
    import json

    synth, params = methods("simulated")["VertiMRF-HE"]
    ds = {"name": "adult", "params": {"data_dir": data_dir}}
    if cache and Path(cache).exists():
        stored = json.loads(Path(cache).read_text())
        # a cheap run (ε, seed fixed) only to get the encoder's plan; the queries come from the cache
        _, _, syn = run_one({**ds, "params": {**ds["params"], "sample": 2000, "sample_seed": 1}}, eps, synth, params, 0, 5)
        stages = {k: [(tuple(a), tuple(b)) for a, b in v] for k, v in stored.items()}
        return syn, stages
    _, _, syn = run_one(ds, eps, synth, params, 0, 50)
    enc = syn._encoder
    stages = {"selection": enc.selection_queries(), "cliques": _split(enc, syn._chosen)}
    if cache:
        Path(cache).write_text(json.dumps({k: [[list(a), list(b)] for a, b in v] for k, v in stages.items()}))
    return syn, stages


def scale(data_dir: str, rows_list, sum_side: bool = True, cache: str | None = None, eps: float = 1.6) -> None:
    """The encrypting party's real-crypto CPU per row at Adult-shaped n (Adult resampled with replacement): at each n
    the party with the most ciphertexts per row (over both stages, the layouts and table split the run would use at
    that n) encrypts its rows through `protocol.encrypt_rows` (the production path: chunk_rows chunks, the local
    pool); then, if `sum_side`, its summing peer's `sum_and_noise` on those rows. CPU = this process + the pool."""
    import psutil

    from vertisynth.core.dataset import VerticalPartition
    from vertisynth.core.progress import reporting
    from vertisynth.plugins.datasets.files import BenchmarkConfig, adult
    from vertisynth.plugins.encoders.he import paillier, protocol
    from vertisynth.plugins.encoders.he.noise import SystemSource, support_bound

    syn, stages = adult_queries(data_dir, eps, cache)
    enc = syn._encoder
    c = enc.config
    loaded = adult(BenchmarkConfig(data_dir=data_dir)).load()
    table = loaded.schema.fit(loaded.frame, None, np.random.default_rng(0)).encode(loaded.frame)
    part = VerticalPartition.from_lists([list(p.attributes) for p in syn._partition], list(syn._partition.names))
    me = psutil.Process()

    def cpu_live() -> float:   # this process, its finished children and its live pool workers
        live = 0.0
        for ch in me.children(recursive=True):
            try:
                t = ch.cpu_times()
                live += t.user + t.system
            except psutil.Error:
                pass
        return protocol.cpu_now() + live

    base = None
    for n in rows_list:
        idx = np.random.default_rng(n).integers(0, table.n, n)
        views = part.views(table.take(idx))
        per_party: dict[str, list] = {}
        for stage, queries in stages.items():
            t = support_bound(enc.sigma[stage])
            for _, e, s_, qs in enc.pairs(queries, n, stage):
                if enc.reused(e, s_, qs, n, stage) is not None:   # sums the selection rows again: no encryption
                    continue
                k = enc.run_counts(e, s_, qs, n, stage)["per_row"]
                per_party.setdefault(e, []).append((stage, s_, qs, k))
        party = max(per_party, key=lambda p: sum(r[3] for r in per_party[p]))
        k_tot = sum(r[3] for r in per_party[party])
        keys = paillier.keypair(c.key_bits, enc.randomness)
        print(f"\nn={n:,}: {party} encrypts {k_tot} ciphertexts/row "
              f"({', '.join(f'{st} {k} to {s_}' for st, s_, _, k in per_party[party])}); "
              f"{c.key_bits}-bit, {enc.randomness} randomness, chunk_rows {c.chunk_rows}, workers {c.workers or os.cpu_count()}",
              flush=True)
        last = [time.monotonic()]

        def report(label, done, total):
            if label == "encrypt rows" and total and time.monotonic() - last[0] > 120:
                last[0] = time.monotonic()
                print(f"    {label}: {done:,}/{total:,} ciphertexts, {cpu_live() - c0:.0f} CPU s so far "
                      f"({1e3 * (cpu_live() - c0) / max(done, 1):.3f} ms/ciphertext)", flush=True)

        enc_cpu = sum_cpu = 0.0
        cts = 0
        for stage, s_, qs, k in per_party[party]:
            t = support_bound(enc.sigma[stage])
            c0 = cpu_live()
            with reporting(report):
                m1 = protocol.encrypt_rows(party, s_, views[party], qs, keys[0], t, c.workers, c.chunk_rows, c.slot_bits,
                                           separate=enc.separate(party, s_, n, stage))
            d = cpu_live() - c0
            enc_cpu += d
            cts += int(np.prod(m1.ciphertexts.shape[:2]))
            print(f"  {stage:<10} encrypt {m1.ciphertexts.shape[1]}/row: {d:8.1f} CPU s = {1e3 * d / n:.3f} ms/row, "
                  f"{m1.ciphertexts.nbytes / 1e6:.0f} MB", flush=True)
            if sum_side:
                c0 = cpu_live()
                m2 = protocol.sum_and_noise(s_, m1, views[s_], qs, enc.sigma[stage], SystemSource(), c.workers,
                                            enc.cells, c.slot_bits, separate=enc.separate(party, s_, n, stage))
                d = cpu_live() - c0
                sum_cpu += d
                print(f"  {stage:<10} {s_} sums + noise: {d:8.1f} CPU s = {1e3 * d / n:.3f} ms/row "
                      f"({sum(a.nbytes for a in m2.sums.values()) / 1e6:.2f} MB back)", flush=True)
                del m2
            del m1
        row = 1e3 * enc_cpu / n
        base = base or row
        print(f"  => n={n:,} encrypting party {party}: {row:.3f} ms CPU/row ({1e3 * enc_cpu / cts:.3f} ms/ciphertext, "
              f"{cts / n:.0f} ciphertexts/row), ratio to the first n {row / base:.3f}"
              + (f"; summing side {1e3 * sum_cpu / n:.3f} ms CPU/row" if sum_side else ""), flush=True)


def speed(data_dir: str, rows: int, eps: float = 1.6, marginals: int = 300) -> None:
    """VertiMRF-HE on Adult with real crypto, the anchor (no shared layouts) and the default, one process."""
    from vertisynth.plugins.encoders.he import packing, protocol

    synth, params = methods("real")["VertiMRF-HE"]
    sample = {"sample": rows, "sample_seed": 1} if rows < 45_222 else {}
    ds = {"name": "adult", "params": {"data_dir": data_dir, **sample}}
    n = min(rows, 45_222)
    default_bits = packing.MASK_BITS
    out = {}
    for label, mask_bits in (("anchor: unshared layouts", 10**6), ("default: shared layouts", default_bits)):
        packing.MASK_BITS = mask_bits   # a shared slot wider than any modulus is never chosen: the old layouts
        try:
            c0 = protocol.cpu_now()
            tvd, _, syn = run_one(ds, eps, synth, params, 0, marginals)
            cpu = protocol.cpu_now() - c0
            enc = syn._encoder
            est_run = enc.cost_estimate(n, clique_queries=_split(enc, syn._chosen))
            est_pre = enc.cost_estimate(n)
        finally:
            packing.MASK_BITS = default_bits
        ran = {p: sum(c.cpu.get(p, 0.0) for c in enc.costs.values()) for p in enc.parties()}
        made = {p: sum(c.ciphertexts.get(p, 0) for c in enc.costs.values()) for p in enc.parties()}
        out[label] = (cpu, tvd)
        print(f"\n{label}: Adult {n:,} rows, ε {eps}: {cpu:.1f} CPU s for the whole run, 3-way TVD {tvd:.4f}")
        for p in enc.parties():
            print(f"  {p}: protocol CPU {ran[p]:7.1f} s, ciphertexts made {made[p] / n:.2f} per row (sums returned "
                  f"included); validate's estimate on the run's tables {est_run[p]['cpu_s']:7.1f} s "
                  f"({est_run[p]['cpu_s'] / max(ran[p], 1e-9):.2f}x), before the run (stand-in tables) "
                  f"{est_pre[p]['cpu_s']:7.1f} s ({est_pre[p]['cpu_s'] / max(ran[p], 1e-9):.2f}x)")
    (c_a, t_a), (c_d, t_d) = out.values()
    print(f"\nshared layouts: {c_d:.1f} CPU s against {c_a:.1f} ({c_d / c_a:.2f}x; target <= 90 CPU s on all of "
          f"Adult), TVD {t_d:.4f} against {t_a:.4f}")


def estimate(data_dir: str, rows: int, datasets: list[str], eps: float = 1.6) -> None:
    """validate's estimate before the run against the run, per party and dataset (real crypto, workers 2)."""
    from vertisynth.plugins.encoders.he import protocol

    synth, params = methods("real")["VertiMRF-HE"]
    params = {**params, "encoder_params": {**params["encoder_params"], "workers": 2}}
    for name in datasets:
        if name.startswith("zoo:"):
            ds = {"name": "zoo", "params": {"preset": name[4:], "n": rows}}
        else:
            ds = {"name": name, "params": {"data_dir": data_dir, "sample": rows, "sample_seed": 1}}
        cfg = parse_config({"seed": 0, "budget": {"epsilon": eps, "delta": 1e-5}, "dataset": ds,
                            "synthesizer": {"use": synth, "params": params},
                            "evaluators": [{"use": "tvd", "params": {"ways": [3], "marginals": 50}}]})
        plan = make_plan(cfg)
        syn = plan.synthesizer.instance
        before = syn.cost_estimate(rows)   # validate: the plan only, no row read (per-operation costs timed here)
        c0 = protocol.cpu_now()
        execute(plan)
        cpu = protocol.cpu_now() - c0
        enc = syn._encoder
        ran = {p: sum(c.cpu.get(p, 0.0) for c in enc.costs.values()) for p in enc.parties()}
        after = enc.cost_estimate(rows, clique_queries=_split(enc, syn._chosen))
        print(f"{name:<18} n={rows:,} ε {eps}: run {cpu:.1f} CPU s in all; " + "; ".join(
            f"{p} protocol {ran[p]:.1f} s, estimate before {before[p]['cpu_s']:.1f} s "
            f"({before[p]['cpu_s'] / max(ran[p], 1e-9):.2f}x), on the run's tables {after[p]['cpu_s']:.1f} s "
            f"({after[p]['cpu_s'] / max(ran[p], 1e-9):.2f}x)" for p in enc.parties()), flush=True)


def schemes(bits_list: list[int], repeat: int = 3) -> None:
    """Per-operation CPU per scheme and key size against 2048-bit Paillier in this run (median of `repeat` timings,
    each from a fresh key: `_op_costs` times once per key and process)."""
    from vertisynth.plugins.encoders.he import encoder as he_encoder, paillier

    cases = [("paillier", 2048)] + [(sch, b) for b in bits_list for sch in ("paillier", "ou")
                                    if (sch, b) != ("paillier", 2048)]
    rows = {}
    for sch, bits in cases:
        kind = paillier.resolve("auto", sch)
        got = []
        for _ in range(repeat):
            he_encoder._OP_COSTS.pop((bits, kind), None)
            got.append(he_encoder._op_costs(bits, kind))
        rows[(sch, bits)] = {k: statistics.median(g[k] for g in got) for k in got[0]}
        rows[(sch, bits)]["plain_bits"] = paillier.plan_bits(bits, sch) - 1
        # a row ciphertext of four set bits, as this table has always priced it (OU's enc is an empty plaintext's)
        rows[(sch, bits)]["enc"] += 4 * rows[(sch, bits)].get("enc_bit", 0.0)
    base = rows[("paillier", 2048)]
    print(f"per-operation CPU (ms), ratio against 2048-bit Paillier ({paillier.resolve('auto')} randomness) "
          f"in this run; load {os.getloadavg()[0]:.1f}")
    print(f"{'scheme':>9} {'bits':>5} {'enc':>8} {'x':>6} {'enc/bit':>8} {'x':>6} {'add':>7} {'x':>6} "
          f"{'dec':>7} {'x':>6} {'noise':>7} {'x':>6} {'key':>8}")
    for (sch, bits), r in rows.items():
        per_bit, base_bit = r["enc"] / r["plain_bits"], base["enc"] / base["plain_bits"]
        print(f"{sch:>9} {bits:>5} {1e3 * r['enc']:8.3f} {r['enc'] / base['enc']:6.3f} {1e6 * per_bit:8.3f} "
              f"{per_bit / base_bit:6.3f} {1e3 * r['mul']:7.4f} {r['mul'] / base['mul']:6.3f} {1e3 * r['dec']:7.3f} "
              f"{r['dec'] / base['dec']:6.3f} {1e3 * r['noise']:7.2f} {r['noise'] / base['noise']:6.3f} "
              f"{1e3 * r['key']:8.0f}")
    print("enc: one row ciphertext (with its randomness and serialisation); enc/bit: per plaintext bit (µs); "
          "add: one homomorphic addition; noise: one of S's full-randomness encryptions")


def main() -> int:
    global ZOO, RANDOMNESS, METHODS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=os.environ.get("VERTISYNTH_DATA",
                                                         str(Path(__file__).resolve().parents[2] / "shared" / "data")))
    ap.add_argument("--only", choices=["quality", "nltcs", "adult", "zoo", "cost", "scale", "speed", "estimate",
                                       "schemes"],
                    default=None,
                    help="quality = nltcs + adult + zoo")
    ap.add_argument("--runs", type=int, default=1, help="seeds per cell (CPU is scarce: default 1)")
    ap.add_argument("--marginals", type=int, default=300)
    ap.add_argument("--eps", default="0.2,0.4,0.8,1.6,3.2", help="Adult's ε grid")
    ap.add_argument("--zoo", default="all", help="zoo presets at ε 1.6 ('all' or a comma list)")
    ap.add_argument("--zoo-module", default=None,
                    help="the zoo dataset's module file when the `zoo` dataset is not installed in this checkout "
                         "(e.g. from `git show zoo:vertisynth/plugins/datasets/zoo.py > /tmp/zoo_ds.py`)")
    ap.add_argument("--cost-rows", default="1000,4000", help="Adult subsample sizes for the real-crypto cost")
    ap.add_argument("--randomness", default="auto", choices=["auto", "short", "full"],
                    help="the encrypting party's Paillier randomness (short: sf-heu's DJN short exponents)")
    ap.add_argument("--scale-rows", default="45222,200000,1000000",
                    help="Adult-shaped n (resampled with replacement) for --only scale")
    ap.add_argument("--no-sum", action="store_true", help="--only scale: skip the summing side")
    ap.add_argument("--queries-cache", default=None, help="--only scale: JSON file caching the Adult run's queries")
    ap.add_argument("--speed-rows", type=int, default=45_222, help="--only speed: Adult rows (45222: all)")
    ap.add_argument("--speed-eps", type=float, default=1.6, help="--only speed: ε")
    ap.add_argument("--estimate-rows", type=int, default=8000, help="--only estimate: rows per dataset")
    ap.add_argument("--estimate-data", default="adult,nltcs,zoo:strong,zoo:small-domains",
                    help="--only estimate: datasets (adult, nltcs, zoo:<preset>)")
    ap.add_argument("--two-way", action="store_true", help="also the 2-way TVD (quality)")
    ap.add_argument("--methods", default=None, help="quality: comma list of HE, FM (PrivMRF always runs)")
    ap.add_argument("--he-params", default=None, help='JSON merged into the he encoder params, e.g. {"cliques": 24}')
    ap.add_argument("--scheme-bits", default="2048,3072", help="--only schemes: key sizes")
    args = ap.parse_args()
    RANDOMNESS = args.randomness
    if args.he_params:
        import json

        HE_PARAMS.update(json.loads(args.he_params))
    if args.two_way:
        WAYS[:] = [2, 3]
    if args.methods:
        METHODS = {"HE": "VertiMRF-HE", "FM": "VertiMRF-FM"}
        METHODS = [METHODS[m] for m in args.methods.split(",")]
    dd = args.data_dir
    want = lambda part: args.only == part or (args.only is None and part not in ("scale", "speed", "estimate",  # noqa: E731
                                                                                "schemes")) or (
        args.only == "quality" and part not in ("cost", "scale", "speed", "estimate", "schemes"))
    if want("nltcs"):
        quality("NLTCS", {"name": "nltcs", "params": {"data_dir": dd}}, [0.4, 1.6], args.runs, args.marginals)
    if want("adult"):
        eps = [float(e) for e in args.eps.split(",")]
        adult = quality("Adult", {"name": "adult", "params": {"data_dir": dd}}, eps, args.runs, args.marginals)
        hi = [r for e, r in zip(eps, adult) if e >= 0.4]
        if hi:
            print(f"Adult HE/PrivMRF at ε >= 0.4: max {max(hi):.2f}x (target <= 1.15x)")
    if want("zoo"):
        if args.zoo_module:
            import importlib.util

            spec = importlib.util.spec_from_file_location("zoo_dataset", args.zoo_module)
            ZOO = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(ZOO)
        elif "zoo" in default_registry().names("dataset"):
            from vertisynth.plugins.datasets import zoo as ZOO
        if ZOO is None:
            print("zoo: the `zoo` dataset is not installed in this checkout (give --zoo-module); skipped")
        else:
            presets = list(ZOO.ZOO_PRESETS) if args.zoo == "all" else args.zoo.split(",")
            zr = [quality(f"zoo {p}", {"name": "zoo", "params": {"preset": p}}, [1.6], args.runs, args.marginals)[0]
                  for p in presets]
            print(f"zoo HE/PrivMRF: median {np.median(zr):.2f}x (target <= 1.15x), worst {max(zr):.2f}x (target <= 1.4x)")
    if want("cost"):
        cost(dd, [int(r) for r in args.cost_rows.split(",")])
    if want("speed"):
        speed(dd, args.speed_rows, args.speed_eps, args.marginals)
    if want("estimate"):
        estimate(dd, args.estimate_rows, args.estimate_data.split(","))
    if want("schemes"):
        schemes([int(b) for b in args.scheme_bits.split(",")])
    if want("scale"):
        scale(dd, [int(r) for r in args.scale_rows.split(",")], not args.no_sum, args.queries_cache)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
