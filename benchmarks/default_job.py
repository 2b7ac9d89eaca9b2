"""The default job (`vertisynth run`, no arguments): CPU seconds, wall seconds and quality, against the built-in
defaults ("today") measured in the same run, over several seeds.

Each run is its own `python -m vertisynth run` process (imports included, as a user pays them); CPU seconds are
user + sys of that process, so a machine shared with other work still gives comparable numbers. Candidate
settings are the default config with dotted overrides (TOML values), e.g.
  PYTHONPATH=$PWD python benchmarks/default_job.py --seeds 0 1 2 \\
      --set synthesizer.params.encoder_params.t=16000 --set synthesizer.params.iters=1000
against the code of another commit (e.g. main before a change: --base COMMIT, the anchor runs on its export), or
with an old setting as the anchor (--anchor-set KEY=VALUE), and on another dataset (the same overrides, the same
metrics; NLTCS/Adult need --data-dir or VERTISYNTH_DATA):
  PYTHONPATH=$PWD python benchmarks/default_job.py --dataset adult --set ...
It prints per setting the medians over seeds of CPU s, wall s, the fit and evaluate phases (CPU time of the run
is not split by phase: those two are wall seconds from report.json), TVD (2/3/4-way) and ML utility, and the
candidate's ratios to today's: speed and quality side by side.

Both sides run on a copy of their code compiled to bytecode first (`compileall`), as an installed package is: with
PYTHONDONTWRITEBYTECODE set (as on the shared development machine) a run from the source tree recompiled
vertisynth's own ≈ 170 modules every time, ≈ 0.3-0.4 CPU s that no installed user pays.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from vertisynth.run.config import DEFAULT_CONFIG_TOML  # noqa: E402

METRICS = ["tvd.tvd_2way", "tvd.tvd_3way", "tvd.tvd_4way", "ml_utility.lr_accuracy_synthetic",
           "ml_utility.lr_f1_synthetic", "ml_utility.dt_accuracy_synthetic", "ml_utility.dt_f1_synthetic"]
LABELS = {"adult": "income", "nltcs": None, "census": "income"}


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {v!r} as TOML")


def to_toml(cfg: dict[str, Any]) -> str:
    """The config as TOML: top-level values, tables (nested tables inline), arrays of tables."""
    lines = [f"{k} = {_toml_value(v)}" for k, v in cfg.items() if not isinstance(v, (dict, list))
             or (isinstance(v, list) and not all(isinstance(x, dict) for x in v))]
    lines += [f"{k} = {_toml_value(v)}" for k, v in cfg.items() if isinstance(v, dict) and k == "budget"]
    for k, v in cfg.items():
        if isinstance(v, dict) and k != "budget":
            lines += ["", f"[{k}]"] + [f"{kk} = {_toml_value(vv)}" for kk, vv in v.items()]
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            for item in v:
                lines += ["", f"[[{k}]]"] + [f"{kk} = {_toml_value(vv)}" for kk, vv in item.items()]
    return "\n".join(lines) + "\n"


def with_overrides(cfg: dict[str, Any], sets: list[str], dataset: str | None) -> dict[str, Any]:
    cfg = json.loads(json.dumps(cfg))
    if dataset is not None and dataset != "census":
        cfg["dataset"] = {"name": dataset}
        label = LABELS.get(dataset)
        cfg["evaluators"] = [e for e in cfg["evaluators"] if e["use"] != "ml_utility" or label]
        for e in cfg["evaluators"]:
            if e["use"] == "ml_utility":
                e["params"]["label"] = label
    for s in sets:
        key, _, text = s.partition("=")
        value = tomllib.loads(f"v = {text}")["v"]
        node = cfg
        *path, last = key.split(".")
        for p in path:
            node = node.setdefault(p, {})
        node[last] = value
    return cfg


def run_once(cfg: dict[str, Any], seed: int, work: Path, data_dir: str | None, tree: Path = REPO) -> dict[str, float]:
    path = work / "job.toml"
    path.write_text(to_toml(cfg))
    out = work / "out"
    env = {**os.environ, "PYTHONPATH": str(tree)}
    if data_dir:
        env["VERTISYNTH_DATA"] = data_dir
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "vertisynth", "run", str(path), "-q", "-o", str(out),
                          "--seed", str(seed)], capture_output=True, text=True, env=env, timeout=3600,
                         cwd=work)   # not the repository: `python -m` puts the working folder first on sys.path
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode != 0:
        raise SystemExit(f"run failed ({res.returncode}):\n{res.stderr[-2000:]}")
    report = json.loads((out / "report.json").read_text())
    row = {"cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), "wall_s": wall,
           "fit_s": report["timings_seconds"]["fit"], "evaluate_s": report["timings_seconds"]["evaluate"]}
    for m in METRICS:
        ev, name = m.split(".")
        if name in report["metrics"].get(ev, {}):
            row[m] = report["metrics"][ev][name]
    return row


def compiled_copy(src: Path, dst: Path) -> Path:
    """`src`'s vertisynth package at `dst` (copied unless the same folder), compiled to bytecode."""
    if src != dst:
        shutil.copytree(src / "vertisynth", dst / "vertisynth", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(dst / "vertisynth")], check=True,
                   stdout=subprocess.DEVNULL)
    return dst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="config seeds (medians over them)")
    ap.add_argument("--set", dest="sets", action="append", default=[],
                    help="candidate override KEY.PATH=TOML_VALUE (repeatable); none: today's settings twice")
    ap.add_argument("--anchor-set", dest="anchor_sets", action="append", default=[],
                    help="override for the anchor instead (e.g. an old setting the defaults have left: "
                         "synthesizer.params.fit_atol=0.0 runs VertiMRF's fits to `iters` as before)")
    ap.add_argument("--base", default=None,
                    help="run the anchor on this commit's code (exported with git archive; e.g. main before a change)")
    ap.add_argument("--dataset", default=None, help="census (the default job's), nltcs or adult")
    ap.add_argument("--data-dir", default=os.environ.get("VERTISYNTH_DATA"),
                    help="folder with the NLTCS/Adult data (or set VERTISYNTH_DATA)")
    args = ap.parse_args()
    base = with_overrides(tomllib.loads(DEFAULT_CONFIG_TOML), [], args.dataset)
    settings = {"today": with_overrides(base, args.anchor_sets, None), "candidate": with_overrides(base, args.sets, None)}
    rows: dict[str, list[dict[str, float]]] = {k: [] for k in settings}
    with tempfile.TemporaryDirectory() as tmp:
        here = compiled_copy(REPO, Path(tmp) / "here")
        trees = {"today": here, "candidate": here}
        if args.base:
            old = Path(tmp) / "base"
            old.mkdir()
            archive = subprocess.run(["git", "-C", str(REPO), "archive", args.base], capture_output=True, check=True)
            subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
            trees["today"] = compiled_copy(old, old)
        for seed in args.seeds:   # interleaved, so that a burst of load hits both alike
            for name, cfg in settings.items():
                rows[name].append(run_once(cfg, seed, Path(tmp), args.data_dir, trees[name]))
    keys = [k for k in rows["today"][0] if all(k in r for rs in rows.values() for r in rs)]
    med = {name: {k: statistics.median(r[k] for r in rs) for k in keys} for name, rs in rows.items()}
    print(f"default job on {args.dataset or 'census'}; seeds {args.seeds}; anchor ('today'): "
          f"{args.anchor_sets or 'the defaults'}{' of commit ' + args.base if args.base else ''}; "
          f"candidate: {args.sets or 'the defaults'}")
    print(f"  {'median':34s} {'today':>9s} {'candidate':>10s} {'ratio':>7s}")
    for k in keys:
        a, b = med["today"][k], med["candidate"][k]
        print(f"  {k:34s} {a:9.4f} {b:10.4f} {b / a if a else float('nan'):7.3f}")
    for name, rs in rows.items():
        print(f"  {name} per seed: " + "; ".join(
            f"cpu {r['cpu_s']:.2f} s tvd3 {r.get('tvd.tvd_3way', float('nan')):.4f}"
            + (f" lr/dt acc {r['ml_utility.lr_accuracy_synthetic']:.4f}/{r['ml_utility.dt_accuracy_synthetic']:.4f}"
               if "ml_utility.dt_accuracy_synthetic" in r else "") for r in rs))


if __name__ == "__main__":
    main()
