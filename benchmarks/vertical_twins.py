"""Vertical twins of aim, mst, private_pgm, dpsyn and privmrf against their central runs, in the same run.

    python benchmarks/vertical_twins.py [--quick] [--datasets zoo:all,nltcs,adult]
        [--methods aim,mst,private_pgm,dpsyn,privmrf,vertimrf,independent] [--epsilons 0.4,1.6] [--seeds 0,1]
        [--trusts none,server] [--crypto simulated] [--marginals 300] [--csv FILE] [--cell-cpu 900]
        [--measure he|dpfm|grr] [--release 0.5]
    python benchmarks/vertical_twins.py --report FILE [--markdown]

For every synthesizer × dataset × ε × seed: the central run (CentralOracle on the joined table) and the vertical
twin under each of `--trusts` (VerticalOracle over the dataset's default party split, cross-party marginals through
the `he` measure: trust "none", two-sided noise, 2σ² per answer; "server", a non-colluding key holder, 1.5σ²
per answer at 1/(2σ²) + τ: three shares) on the same data and ρ, all scored by the project's `tvd` evaluator (3-way, `--marginals`
random marginals, the same marginals for every run of a cell). The central run is made once per cell and shared by
the trusts. Printed: both TVDs, twin / central, the twin's CPU seconds per party (its own steps plus its side of
the protocol) and for the server (selection bookkeeping and estimation: the rest of the fit), and the bytes each
party would send (the ciphertexts real crypto makes for those layouts; with crypto = "simulated" the answers are
the same tables, computed in plaintext, so the quality columns hold for real crypto and the CPU columns do not
include encryption; under trust = "server" simulated crypto counts no bytes: "-").

Two reference methods take the same cells: `vertimrf` (VertiMRF with the `he` encoder, trust none, no binning,
crypto as `--crypto`; its score in the twin column, trust "none") and `independent` (columns sampled from noisy
1-way marginals; trust "-"). Neither has a central run.

`--csv FILE` appends one row per (dataset, ε, seed, method, trust) as soon as the cell is done and skips the rows
already in the file (a central score already there is reused for a missing trust), so a long grid runs in pieces
and nothing is lost if it is cut. Each (dataset, ε, seed, method) cell runs in a child process capped at
`--cell-cpu` CPU seconds; a cell past it is written with an empty score and the note "cpu > N" (rerun with a larger
cap to retry it: rows with a note are retried).

`--measure dpfm|grr`: the twins' cross-party marginals are read off one release (sealed DP FM sketches, trust
"server"; GRR columns, trust "none": the measure's own trust, `--trusts` is not asked for), planned before the
synthesizer at `--release` of its ρ (default the twin's `vertical.release`, 0.5), the rest paying its own
within-party measurements. `vertimrf` then runs with that encoder (`encoder = dpfm|grr`, its defaults). The CSV's
`measure` column tells these rows from he's (a CSV without that column takes he rows only), and `--report` prints,
per synthesizer and release measure, the issue's target for them: better than VertiMRF with the same encoder and
than independent columns, in every cell.

`--report FILE` prints, per synthesizer and trust, the median and worst twin / central ratio against the twins'
targets (none: ≤ 1.10× median, ≤ 1.20× worst; server: ≤ 1.03× median) and with `--markdown` one table per
synthesizer (central, twin under each trust, VertiMRF and independent on the same cells). `--quick`: two zoo presets
and NLTCS. Only NLTCS, Adult (from $VERTISYNTH_DATA) and the generated zoo are used.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ZOO = ["small-domains", "large-domains", "wide", "strong", "weak", "mixed", "small-split", "many-parties"]
QUICK = "zoo:small-domains,zoo:mixed,nltcs"
TWINS = ["aim", "mst", "private_pgm", "dpsyn", "privmrf"]
REFERENCES = ["vertimrf", "independent"]
# the targets, twin / central: (median, worst or None)
TARGETS = {"none": (1.10, 1.20), "server": (1.03, None)}
# mirror-descent steps per fit unless --iters says otherwise (the others: their own defaults)
ITERS = {"aim": 1000, "mst": 1000}
NO_BINS = 10_000   # VertiMRF-HE's "bins" above every domain: the he encoder measures raw values
FIELDS = ["dataset", "epsilon", "seed", "method", "trust", "central", "twin", "ratio", "cpu_central", "cpu_party",
          "cpu_server", "mb_sent", "crypto", "marginals", "note", "measure"]
# measures that release once, and the one trust each offers (docs/vertical.md, "Measures that release once")
RELEASE_TRUST = {"dpfm": "server", "grr": "none"}



def _verdict(ratios, t_med: float, t_worst: float | None) -> str:
    """Median and worst twin / central ratio against the targets, and whether they are met."""
    med, worst = float(np.median(ratios)), float(np.max(ratios))
    ok = med <= t_med and (t_worst is None or worst <= t_worst)
    return (f"median {med:.2f} (target <= {t_med:.2f}), worst {worst:.2f} "
            + (f"(target <= {t_worst:.2f})" if t_worst is not None else "(no target)")
            + f" -> {'met' if ok else 'NOT met'}")

def expand(datasets: str) -> list[str]:
    out: list[str] = []
    for ds in datasets.split(","):
        out += [f"zoo:{p}" for p in ZOO] if ds == "zoo:all" else [ds]
    return out


def run_cell(spec: dict) -> list[dict]:
    """One (dataset, ε, seed, method): the central run (unless `spec["central"]` carries it) and each trust's twin,
    or the reference method's one run. Returns the CSV rows."""
    from vertisynth.core.capabilities import CrossPartyMeasure, ReleasesOnce
    from vertisynth.core.dataset import Dataset
    from vertisynth.core.interfaces import PlanContext
    from vertisynth.core.privacy import Budget, PrivacyLedger
    from vertisynth.core.registry import default_registry
    from vertisynth.pgm.oracle import CentralOracle
    from vertisynth.run.config import parse_config
    from vertisynth.run.pipeline import build_component, cross_party_measure, make_plan, plan_release, run
    from vertisynth.vertical import VerticalOracle, party_streams

    ds, eps, seed, method = spec["dataset"], spec["epsilon"], spec["seed"], spec["method"]
    measure_name = spec.get("measure", "he")
    once = measure_name in RELEASE_TRUST
    reg = default_registry()
    name, _, preset = ds.partition(":")
    dparams = {"preset": preset} if name == "zoo" else {"data_dir": spec["data_dir"]} if spec["data_dir"] else {}

    def config(use: str, params: dict):
        return parse_config({"seed": seed, "budget": {"epsilon": eps, "delta": spec["delta"]},
                             "dataset": {"name": name, "params": dparams},
                             "synthesizer": {"use": use, "params": params}, "evaluators": []})

    cfg = config("independent", {})
    c0 = time.process_time()
    base = run(cfg)
    cpu_ind = time.process_time() - c0
    real = base.real_codes
    tvd = build_component(reg, "evaluator", "tvd", {"ways": [3], "marginals": spec["marginals"]}, "tvd").instance

    def score(syn: Dataset) -> float:
        return tvd.evaluate(real, syn, np.random.default_rng(1000 + seed))["tvd_3way"]

    row0 = {"dataset": ds, "epsilon": eps, "seed": seed, "method": method, "crypto": spec["crypto"],
            "marginals": spec["marginals"], "note": "", "measure": measure_name}
    if method == "independent":
        return [{**row0, "trust": "-", "measure": "-", "twin": round(score(base.synthetic_codes), 6),
                 "cpu_party": f"{cpu_ind:.1f}"}]
    if method == "vertimrf":
        c0 = time.process_time()
        vparams = ({"encoder": measure_name} if once else   # a release-once encoder at its defaults
                   {"encoder": "he", "bins": NO_BINS, "encoder_params": {"crypto": spec["crypto"]}})
        res = run(config("vertimrf", vparams))
        cpu = time.process_time() - c0
        assert np.array_equal(res.real_codes.codes, real.codes)   # the same table as the other methods'
        return [{**row0, "trust": RELEASE_TRUST.get(measure_name, "none"), "twin": round(score(res.synthetic_codes), 6),
                 "cpu_party": f"{cpu:.1f}"}]

    partition = make_plan(cfg).partition
    budget = Budget(eps, spec["delta"])
    iters = spec["iters"] if spec["iters"] is not None else ITERS.get(method)
    rows = []
    central = spec.get("central")
    for mode in (["central"] if central is None else []) + [f"twin:{t}" for t in spec["trusts"]]:
        params = {"iters": iters} if iters is not None else {}
        if method == "aim" and spec.get("aim_fit_tolerance") is not None:
            params["fit_tolerance"] = spec["aim_fit_tolerance"]
        trust = mode.partition(":")[2]
        if trust and once:
            params["vertical"] = {"measure": measure_name, "trust": trust,
                                  **({"release": spec["release"]} if spec.get("release") is not None else {})}
        elif trust:
            params["vertical"] = {"measure": "he", "trust": trust, "params": {"crypto": spec["crypto"]}}
        comp = build_component(reg, "synthesizer", method, params, method)
        syn = comp.instance
        ledger = PrivacyLedger(budget)
        ctx = PlanContext(real.domain, partition, budget)
        if trust:   # the measure the pipeline builds from the vertical table (its trust checked there); a release
            # is planned before the synthesizer (make_plan's order)
            mcomp = cross_party_measure(reg, comp, partition)
            released, ctx = plan_release(mcomp, comp, ctx)
            ledger.plan(released)
        ledger.plan(syn.plan(ctx))
        ledger.check_plan()
        rng = np.random.default_rng(seed)
        c0 = time.process_time()
        if not trust:
            syn.fit_oracle(CentralOracle(real, ledger), rng)
        else:
            measure = mcomp.instance
            assert isinstance(measure, (CrossPartyMeasure, ReleasesOnce)) and measure.trust == trust
            oracle = VerticalOracle(partition.views(real), partition, measure, ledger,
                                    party_streams(rng, partition.names), measure_name)
            syn.fit_oracle(oracle, rng)
        sample = syn.sample(None, rng)
        cpu = time.process_time() - c0
        assert ledger.unspent() == []
        if not trust:
            central = (score(sample), cpu)
            continue
        if once:   # the parties' sketching/randomising is in their CPU; no protocol rounds, no bytes counted
            proto, sent = None, None
        elif trust == "server":   # the server-trust rounds keep their own costs
            proto = measure.server_trust.costs
            sent = ({p: proto.bytes_sent.get(p, 0) / 1e6 for p in partition.names}
                    if spec["crypto"] == "real" else None)
        else:
            proto = measure.costs.get("oracle")
            sent = {p: getattr(measure, "wire_bytes", {}).get(p, 0) / 1e6 for p in partition.names}
        party = {p: oracle.party_cpu[p] + (proto.cpu.get(p, 0.0) if proto else 0.0) for p in partition.names}
        tw = score(sample)
        rows.append({**row0, "trust": trust, "central": round(central[0], 6), "twin": round(tw, 6),
                     "ratio": round(tw / central[0], 4), "cpu_central": round(central[1], 2),
                     "cpu_party": "/".join(f"{v:.1f}" for v in party.values()),
                     "cpu_server": round(cpu - sum(party.values()), 2),
                     "mb_sent": "/".join(f"{v:.0f}" for v in sent.values()) if sent is not None else "-"})
    return rows


def cell_in_child(spec: dict, cpu_limit: float) -> tuple[list[dict] | None, str]:
    """run_cell in a child process capped at `cpu_limit` CPU seconds (RLIMIT_CPU: a loaded machine does not
    shorten it); (rows, "") or (None, why)."""
    import resource
    import signal

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (int(cpu_limit), int(cpu_limit) + 5))

    proc = subprocess.run([sys.executable, __file__, "--cell", json.dumps(spec)], capture_output=True, text=True,
                          preexec_fn=cap)
    if proc.returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        return None, f"cpu > {cpu_limit:.0f}"
    if proc.returncode != 0:
        return None, "failed: " + (proc.stderr.strip().splitlines() or ["?"])[-1][:200]
    return json.loads(proc.stdout.strip().splitlines()[-1]), ""


def read_csv(path: str) -> list[dict]:
    if not path or not Path(path).exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def key(r: dict) -> tuple:
    measure = r.get("measure") or ("-" if r["method"] == "independent" else "he")   # older CSVs: he rows only
    return (r["dataset"], float(r["epsilon"]), int(r["seed"]), r["method"], r["trust"], measure)


def csv_fields(path: str | None, measure: str) -> list[str]:
    """The columns rows are appended with: the file's own (a CSV written before the `measure` column holds he rows
    only), FIELDS for a new file."""
    if not path or not Path(path).exists():
        return FIELDS
    with open(path, newline="") as f:
        head = next(csv.reader(f), [])
    if "measure" not in head and measure != "he":
        raise SystemExit(f"vertical_twins: {path} has no 'measure' column (it holds he rows only); write "
                         f"--measure {measure} rows to another CSV")
    return head or FIELDS


def fmt(x, spec: str) -> str:
    return format(float(x), spec) if x not in (None, "") else "-"


def print_row(r: dict) -> None:
    print(f"{r['dataset']:<19} {float(r['epsilon']):>4g} {int(r['seed']):>4} {r['method']:<11} {r['trust']:<6} "
          f"{fmt(r.get('central'), '.4f'):>8} {fmt(r.get('twin'), '.4f'):>8} {fmt(r.get('ratio'), '.2f'):>6} "
          f"{fmt(r.get('cpu_central'), '.1f'):>8} {str(r.get('cpu_party') if r.get('cpu_party') not in (None, '') else '-'):>16} "
          f"{fmt(r.get('cpu_server'), '.1f'):>7} {str(r.get('mb_sent') or '-'):>14} {r.get('note', '')}", flush=True)


def report_release(by: dict) -> None:
    """Per synthesizer and release measure: twin / central, and the issue's target for these twins (below
    VertiMRF with the same encoder and below independent columns, in every cell)."""
    for measure, trust in RELEASE_TRUST.items():
        for m in TWINS:
            ks = [k for k in by if k[3] == m and k[5] == measure]
            if not ks:
                continue
            r = [float(by[k]["ratio"]) for k in ks]
            v = [float(by[k]["twin"]) / float(by[k[:3] + ("vertimrf", trust, measure)]["twin"]) for k in ks
                 if k[:3] + ("vertimrf", trust, measure) in by]
            i = [float(by[k]["twin"]) / float(by[k[:3] + ("independent", "-", "-")]["twin"]) for k in ks
                 if k[:3] + ("independent", "-", "-") in by]
            ok = bool(v) and bool(i) and max(v) < 1 and max(i) < 1 and len(v) == len(i) == len(ks)
            print(f"{m:<12} {measure} (trust {trust}): twin / central over {len(r):>3} cells: median "
                  f"{np.median(r):.2f}, worst {max(r):.2f}; twin / VertiMRF-{measure} "
                  + (f"median {np.median(v):.2f}, worst {max(v):.2f} ({len(v)} cells)" if v else "-")
                  + "; twin / independent " + (f"median {np.median(i):.2f}, worst {max(i):.2f}" if i else "-")
                  + f" -> {'met' if ok else 'NOT met'} (target: both < 1 in every cell)")


def report(path: str, markdown: bool) -> int:
    rows = [r for p in path.split(",") for r in read_csv(p) if not r["note"]]
    every = {key(r): r for r in rows}
    report_release(every)
    # the he grid: its rows keyed as before (dataset, ε, seed, method, trust)
    by = {k[:5]: r for k, r in every.items() if k[5] in ("he", "-")}
    cells = sorted({k[:3] for k in by}, key=lambda c: (expand_order(c[0]), c[1], c[2]))
    twins = [m for m in TWINS if any(k[3] == m for k in by)]
    for m in twins:
        for trust, (t_med, t_worst) in TARGETS.items():
            r = [float(by[k]["ratio"]) for k in by if k[3] == m and k[4] == trust]
            if not r:
                continue
            print(f"{m:<12} trust {trust:<6}: twin / central over {len(r):>3} cells: " + _verdict(r, t_med, t_worst))
    for ref in REFERENCES:
        n = sum(1 for k in by if k[3] == ref)
        if n:
            print(f"{ref:<12} {n} cells")
    if not markdown:
        return 0
    print("\n| synthesizer | trust | cells | median twin / central | worst | target | met | twin below VertiMRF-HE "
          "| twin below independent |")
    print("|---|---|---|---|---|---|---|---|---|")
    for m in twins:
        for trust, (t_med, t_worst) in TARGETS.items():
            ks = [k for k in by if k[3] == m and k[4] == trust]
            if not ks:
                continue
            r = [float(by[k]["ratio"]) for k in ks]
            med, worst = float(np.median(r)), float(np.max(r))
            ok = med <= t_med and (t_worst is None or worst <= t_worst)
            vs = [(float(by[k]["twin"]), float(by[k[:3] + ("vertimrf", "none")]["twin"])) for k in ks
                  if k[:3] + ("vertimrf", "none") in by]
            vi = [(float(by[k]["twin"]), float(by[k[:3] + ("independent", "-")]["twin"])) for k in ks
                  if k[:3] + ("independent", "-") in by]
            print(f"| {m} | {trust} | {len(r)} | {med:.2f} | {worst:.2f} | ≤ {t_med:.2f}"
                  + (f" median, ≤ {t_worst:.2f} worst" if t_worst else " median") + f" | {'met' if ok else '**not met**'} "
                  f"| {sum(a < b for a, b in vs)} of {len(vs)} | {sum(a < b for a, b in vi)} of {len(vi)} |")
    for m in twins:
        print(f"\n#### {m}\n")
        print("| dataset | ε | seed | central | twin, none | ratio | twin, server | ratio | VertiMRF-HE | independent "
              "| CPU s central / twin (none) |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for c in cells:
            n, s = by.get(c + (m, "none")), by.get(c + (m, "server"))
            if n is None and s is None:
                continue
            v, i = by.get(c + ("vertimrf", "none")), by.get(c + ("independent", "-"))
            cen = (n or s)["central"]
            twin_cpu = "-"
            if n is not None:
                twin_cpu = f"{sum(map(float, n['cpu_party'].split('/'))) + float(n['cpu_server']):.1f}"
            print(f"| {c[0]} | {c[1]:g} | {c[2]} | {float(cen):.4f} | {fmt(n and n['twin'], '.4f')} | "
                  f"{fmt(n and n['ratio'], '.2f')} | {fmt(s and s['twin'], '.4f')} | {fmt(s and s['ratio'], '.2f')} | "
                  f"{fmt(v and v['twin'], '.4f')} | {fmt(i and i['twin'], '.4f')} | "
                  f"{float((n or s)['cpu_central']):.1f} / {twin_cpu} |")
    return 0


def expand_order(ds: str) -> int:
    order = [f"zoo:{p}" for p in ZOO] + ["nltcs", "adult"]
    return order.index(ds) if ds in order else len(order)


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--cell":
        print(json.dumps(run_cell(json.loads(sys.argv[2]))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default="zoo:all,nltcs,adult", help="comma-separated; zoo:all = every preset")
    ap.add_argument("--quick", action="store_true", help=f"datasets {QUICK}")
    ap.add_argument("--methods", default="aim,mst")
    ap.add_argument("--epsilons", default="0.4,1.6")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--delta", type=float, default=1e-9)
    ap.add_argument("--marginals", type=int, default=300)
    ap.add_argument("--crypto", default="simulated", choices=["simulated", "real"])
    ap.add_argument("--trusts", "--trust", default="none", help="comma-separated: none, server")
    ap.add_argument("--iters", type=int, default=None,
                    help="mirror-descent steps per fit (central and twin; default aim, mst 1000, others their own)")
    ap.add_argument("--aim-fit-tolerance", type=float, default=None,
                    help="aim's fit_tolerance (central and twin; default: aim's own); use a CSV of its own")
    ap.add_argument("--data-dir", default=os.environ.get("VERTISYNTH_DATA"))
    ap.add_argument("--csv", default=None, help="append rows here; skip the rows already in it")
    ap.add_argument("--cell-cpu", type=float, default=None,
                    help="CPU seconds per (dataset, ε, seed, method) cell, each in a child process (default: "
                         "in this process, no cap)")
    ap.add_argument("--measure", default="he", choices=["he", *RELEASE_TRUST],
                    help="the twins' cross-party measure (dpfm, grr: one release, at their own trust)")
    ap.add_argument("--release", type=float, default=None, help="dpfm/grr: the release's share of the ρ")
    ap.add_argument("--central-from", default=None,
                    help="reuse the central runs of these cells from this CSV (e.g. a grid before a change to the "
                         "twins only: the central runs do not read the vertical oracle)")
    ap.add_argument("--report", default=None, help="summarise these CSVs (comma-separated) and exit")
    ap.add_argument("--markdown", action="store_true", help="with --report: one table per synthesizer")
    args = ap.parse_args()
    if args.report:
        return report(args.report, args.markdown)
    trusts = args.trusts.split(",")
    for t in trusts:
        if t not in TARGETS:
            ap.error(f"unknown trust {t!r} (one of {', '.join(TARGETS)})")
    once = args.measure in RELEASE_TRUST
    if once:   # a release-once measure offers one trust
        trusts = [RELEASE_TRUST[args.measure]]
    elif args.release is not None:
        ap.error("--release is for --measure dpfm or grr")
    fields = csv_fields(args.csv, args.measure)
    done = {key(r): r for r in read_csv(args.csv) if not r["note"]}
    earlier = {key(r): r for r in read_csv(args.central_from) if not r["note"]} if args.central_from else {}
    if args.csv and not Path(args.csv).exists():
        with open(args.csv, "w", newline="") as f:
            csv.DictWriter(f, FIELDS).writeheader()
    print(f"{'dataset':<19} {'ε':>4} {'seed':>4} {'method':<11} {'trust':<6} {'central':>8} {'twin':>8} "
          f"{'ratio':>6} {'CPU cen':>8} {'CPU s per party':>16} {'server':>7} {'MB per party':>14}")
    ratios: dict[tuple[str, str], list[float]] = {}
    for ds in expand(QUICK if args.quick else args.datasets):
        for eps in map(float, args.epsilons.split(",")):
            for seed in map(int, args.seeds.split(",")):
                for method in args.methods.split(","):
                    want = (["-"] if method == "independent" else
                            [RELEASE_TRUST.get(args.measure, "none")] if method == "vertimrf" else trusts)
                    tag = "-" if method == "independent" else args.measure
                    todo = [t for t in want if (ds, eps, seed, method, t, tag) not in done]
                    for t in want:
                        if t not in todo:
                            print_row(done[(ds, eps, seed, method, t, tag)])
                    if not todo:
                        continue
                    spec = {"dataset": ds, "epsilon": eps, "seed": seed, "method": method, "trusts": todo,
                            "delta": args.delta, "marginals": args.marginals, "crypto": args.crypto,
                            "iters": args.iters, "data_dir": args.data_dir, "central": None,
                            "measure": args.measure, "release": args.release,
                            "aim_fit_tolerance": args.aim_fit_tolerance}
                    # the central run of this cell already in the CSV (any measure's): the twins compare to it
                    prior = [r for k, r in done.items() if k[:4] == (ds, eps, seed, method) and r["central"]]
                    prior += [r for k, r in earlier.items() if k[:4] == (ds, eps, seed, method) and r["central"]]
                    if prior:   # the central run of this cell is already in the CSV: the twins are compared to it
                        spec["central"] = (float(prior[0]["central"]), float(prior[0]["cpu_central"]))
                    if args.cell_cpu:
                        rows, why = cell_in_child(spec, args.cell_cpu)
                    else:
                        rows, why = run_cell(spec), ""
                    if rows is None:
                        rows = [{"dataset": ds, "epsilon": eps, "seed": seed, "method": method, "trust": t,
                                 "crypto": args.crypto, "marginals": args.marginals, "note": why, "measure": tag}
                                for t in todo]
                    for r in rows:
                        print_row(r)
                        if r.get("ratio") not in (None, ""):
                            ratios.setdefault((method, r["trust"]), []).append(float(r["ratio"]))
                    if args.csv:
                        with open(args.csv, "a", newline="") as f:
                            w = csv.DictWriter(f, fields)
                            for r in rows:
                                w.writerow({k: r.get(k, "") for k in fields})
    if args.crypto == "simulated":
        print("\ncrypto = simulated (quality as real crypto; CPU without encryption; trust none: bytes are what real "
              "crypto would send; trust server: bytes not counted)")
    if once:
        print(f"\nmeasure = {args.measure} (trust = {trusts[0]}, one release at vertical.release of each "
              "synthesizer's ρ); the target for these twins: --report")
    for (method, trust), r in ratios.items():
        if once:
            print(f"{method} {args.measure}: twin / central over {len(r)} cells (this run): median "
                  f"{np.median(r):.2f}, worst {np.max(r):.2f}")
            continue
        print(f"{method} trust {trust}: twin / central over {len(r)} cells (this run): " + _verdict(r, *TARGETS[trust]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
