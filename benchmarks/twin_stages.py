"""The protocol stages a vertical twin asks and what each party's side of them cost, on one zoo table.

    python benchmarks/twin_stages.py --method private_pgm [--preset small-domains] [--rows 2000]
        [--crypto real|simulated] [--trust none|server] [--epsilon 1.0] [--seed 0]

Runs the plan in one process (`execute`), counting every stage of the cross-party measure (`PartyLink.cross`: the
number of tables in each), and prints one JSON line: the stages, the 3-way TVD, and per party the rows it encrypted
(`enc`: n per pass over its rows), the operations it performed (`ops`, the names `HEEncoder`'s estimates use),
ciphertexts, MB sent and CPU seconds of its protocol steps (trust none: `HEEncoder.costs["oracle"]`; trust server:
`server_trust.costs`). Under crypto = "simulated" no operation is performed and none is counted. Run it on two trees
(e.g. main and a branch) to compare them (docs/vertical.md, "private_pgm and dpsyn ask their pairs in one stage")."""
import argparse
import json
import time

from vertisynth.run.config import parse_config
from vertisynth.run.pipeline import execute, make_plan
from vertisynth.vertical.link import InProcessLink

PARAMS = {"private_pgm": {"iters": 200}, "dpsyn": {"rounds": 10}, "mst": {"iters": 200}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--method", choices=sorted(PARAMS), default="private_pgm")
    ap.add_argument("--preset", default="small-domains", help="a zoo preset")
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--crypto", choices=["real", "simulated"], default="real")
    ap.add_argument("--trust", choices=["none", "server"], default="none")
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    stages: list[int] = []
    cross = InProcessLink.cross

    def counted(self, queries, sigma, spends):
        stages.append(len(queries))
        return cross(self, queries, sigma, spends)
    InProcessLink.cross = counted
    vertical = {"measure": "he", "trust": a.trust, "params": {"crypto": a.crypto, "workers": 1}}
    plan = make_plan(parse_config({
        "seed": a.seed, "budget": {"epsilon": a.epsilon, "delta": 1e-9},
        "dataset": {"name": "zoo", "params": {"preset": a.preset, "n": a.rows}},
        "synthesizer": {"use": a.method, "params": {**PARAMS[a.method], "vertical": vertical}},
        "evaluators": [{"use": "tvd", "params": {"ways": [3], "marginals": 60}}]}))
    t = time.process_time()
    res = execute(plan)
    enc = plan.measure.instance
    c = enc.costs.get("oracle") if a.trust == "none" else enc.server_trust.costs
    print(json.dumps({"method": a.method, "preset": a.preset, "rows": a.rows, "trust": a.trust, "crypto": a.crypto,
                      "stages": stages, "tvd3": res.metrics["tvd"]["tvd_3way"],
                      "cpu_s": round(time.process_time() - t, 1),
                      "ciphertexts": dict(c.ciphertexts) if c else {},
                      "mb_sent": {p: round(b / 1e6, 2) for p, b in c.bytes_sent.items()} if c else {},
                      "party_cpu_s": {p: round(v, 1) for p, v in c.cpu.items()} if c else {},
                      "ops": c.ops if c else {}}))


if __name__ == "__main__":
    main()
