"""report.html: one self-contained page beside report.json (inline CSS and figures, nothing fetched), with the
warnings first, the ledger by stage and party, the model graph, the figures and TVDs beside their reference
points; and the TVD reference points themselves (independent columns, holdout floor)."""
import json
import re

import numpy as np
import pytest

from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.plugins.evaluators.tvd import TVDConfig, TVDEvaluator, marginal_tvd
from vertisynth.run.config import parse_config
from vertisynth.run.pipeline import run

CONFIG = {
    "seed": 5,
    "budget": {"epsilon": 2.0, "delta": 1e-5},
    "dataset": {"name": "census", "params": {"n": 2000}},
    "synthesizer": {"use": "vertimrf"},
    "evaluation": {"holdout": 0.25},
    "evaluators": [{"use": "tvd", "params": {"ways": [2, 3], "marginals": 15}}, {"use": "correlation"},
                   {"use": "ml_utility"}],
}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("html_run")
    run(parse_config(json.loads(json.dumps(CONFIG))), out)
    return out


def self_contained(html: str) -> None:
    """Nothing the page would fetch: every src is a data: URI, no stylesheet or script link, no URL at all."""
    assert not re.search(r"https?://", html), "the page names a URL"
    assert not re.search(r"<link\b|<script\b|@import|url\(", html, re.I)
    srcs = re.findall(r'src="([^"]*)"', html)
    assert srcs and all(s.startswith(("data:image/png;base64,", "data:image/svg+xml;base64,")) for s in srcs)


def test_run_writes_a_self_contained_report_html(run_dir):
    html = (run_dir / "report.html").read_text()
    report = json.loads((run_dir / "report.json").read_text())
    self_contained(html)
    assert "report.html" in json.loads((run_dir / ".vertisynth-outputs.json").read_text())
    # warnings before the numbers: the simulation noise of this config
    assert html.index('id="warnings"') < html.index('id="privacy"') and "simulation" in html[:html.index('id="privacy"')]
    # the ledger by stage and by party, with the budget and the composition note (stages add to more than the total)
    for table in ("ledger-stages", "ledger-parties", "ledger-charges", "metrics-table", "ml-table", "timings-table"):
        assert f'id="{table}"' in html
    for party, eps in report["privacy"]["per_party_epsilon"].items():
        assert re.search(rf"<td>{party}</td><td class=\"n\">{eps:.4g}</td>", html)
    assert "add up to" in html and "composes every charge" in html
    # the figures: worst marginals, heatmaps, model graph with its cross-party edges counted
    for fig in ("fig-marginals", "fig-heatmap", "fig-graph"):
        assert f'id="{fig}"' in html
    cross = len(report["synthesizer"]["model"]["cross_party_marginals"])
    assert re.search(rf"(\d+) cross-party edges", html) and int(re.search(r"(\d+) cross-party edges", html)[1]) >= cross
    # each TVD beside its reference points, in the HTML and in summary.md
    refs = report["metric_references"]["tvd"]
    assert set(refs) == {"tvd_2way", "tvd_3way"} and all({"independent", "holdout_floor"} == set(v) for v in refs.values())
    assert f"{refs['tvd_3way']['independent']:.4g}" in html and f"{refs['tvd_3way']['holdout_floor']:.4g}" in html
    summary = (run_dir / "summary.md").read_text()
    assert f"independent columns {refs['tvd_3way']['independent']:.4f}" in summary
    assert "add up to" in summary


def _table(codes, sizes):
    return Dataset(np.asarray(codes), Domain.from_sizes(sizes))


def test_tvd_reference_points_are_the_independent_product_and_the_holdout_floor():
    rng = np.random.default_rng(0)
    sizes = {"a": 3, "b": 2, "c": 4}
    # a, b independent by construction (every combination equally often); c a copy of a
    a, b = np.repeat(np.arange(3), 2 * 50), np.tile(np.arange(2), 3 * 50)
    train = _table(np.c_[a, b, a], sizes)
    hold = _table(np.c_[rng.integers(0, 3, 400), rng.integers(0, 2, 400), rng.integers(0, 4, 400)], sizes)
    ev = TVDEvaluator(TVDConfig(ways=[2], marginals=10))
    ev.evaluate(train, train, rng)
    refs = ev.reference_points(train, None)["tvd_2way"]
    # (a, b): independent, so 0; (a, c) and (b, c): c = a, so the product is off by a known amount
    p_ac = train.counts(("a", "c")).values / train.n
    indep_ac = 0.5 * np.abs(p_ac - np.outer(p_ac.sum(1), p_ac.sum(0))).sum()
    assert refs["independent"] == pytest.approx((0.0 + indep_ac + 0.0) / 3)   # (b, c): b ⟂ a = c
    assert "holdout_floor" not in refs
    floor = ev.reference_points(train, hold)["tvd_2way"]["holdout_floor"]
    pairs = [("a", "b"), ("a", "c"), ("b", "c")]
    assert floor == pytest.approx(np.mean([marginal_tvd(train, hold, s) for s in pairs]))


def test_report_figures_are_svg_drawn_without_matplotlib(tmp_path):
    """The run report's three figures are inline SVG documents with a size (so a browser gives the <img> a width),
    and writing the report does not import matplotlib (its import and PNG rendering were about half the
    default job's CPU seconds, docs/speed.md): checked in a fresh interpreter."""
    import base64
    import os
    import subprocess
    import sys
    import xml.etree.ElementTree as ET
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    cfg = {**CONFIG, "dataset": {"name": "census", "params": {"n": 600}}, "evaluators": [{"use": "tvd", "params": {"ways": [2], "marginals": 5}}]}
    code = ("import json, sys; from vertisynth.run.config import parse_config; from vertisynth.run.pipeline import run; "
            f"run(parse_config(json.loads({json.dumps(json.dumps(cfg))})), sys.argv[1]); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'sklearn', 'ssl') "
            "or m == 'urllib.request'))")   # nor scikit-learn (ml_utility's models), nor ssl (saxutils' escape)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip().splitlines()[-1] == "[]"
    html = (tmp_path / "report.html").read_text()
    self_contained(html)
    srcs = dict(re.findall(r'<img id="([^"]+)"[^>]*src="data:image/svg\+xml;base64,([^"]*)"', html))
    assert set(srcs) == {"fig-graph", "fig-marginals", "fig-heatmap"}
    for name, b64 in srcs.items():
        root = ET.fromstring(base64.b64decode(b64))
        assert root.tag.endswith("svg") and float(root.get("width")) > 100 and float(root.get("height")) > 100, name
        assert len(root) > 10, name   # bars, cells, nodes: more than a frame


def test_report_template_is_compiled_once_across_runs(tmp_path, monkeypatch):
    """report.html's template goes through jinja2's bytecode cache: a later run (a new environment, as in a new
    process) loads it compiled instead of compiling it again (≈ 0.03 CPU s a run)."""
    import jinja2

    from vertisynth.run import html

    real_cache = html._bytecode_cache
    monkeypatch.setattr(html, "_bytecode_cache", lambda: real_cache(str(tmp_path)))
    compiled = []
    real = jinja2.Environment.compile
    monkeypatch.setattr(jinja2.Environment, "compile", lambda self, *a, **k: compiled.append(1) or real(self, *a, **k))
    first = html._env().get_template("run.html.j2")
    assert len(compiled) == 1 and list(tmp_path.iterdir())
    second = html._env().get_template("run.html.j2")
    assert len(compiled) == 1   # from the cache
    assert first.render is not second.render and first.name == second.name

    # a cache folder that cannot be written (here: gone) costs the compile, not the report
    gone = real_cache(str(tmp_path / "gone"))
    monkeypatch.setattr(html, "_bytecode_cache", lambda: gone)
    assert html._env().get_template("run.html.j2").name == "run.html.j2" and len(compiled) == 2
