"""report.html in a real browser: headless Chromium (Debian's `chromium`) opens the file from disk with the
network off, and the test fails on any console message from the page, on an image that did not decode, or when
the rendered page lacks the ledger tables and the figures. Skipped, saying why, where chromium is absent."""
import json
import re
import shutil
import subprocess

import pytest

from vertisynth.run.config import parse_config
from vertisynth.run.pipeline import run
from vertisynth.study.outputs import write_outputs

BROWSER = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
pytestmark = pytest.mark.skipif(BROWSER is None, reason="no chromium on PATH (Debian: apt-get install -y chromium); "
                                                        "the report's browser check did not run")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--enable-logging=stderr", "--v=0",
         "--virtual-time-budget=10000"]
# appended to a copy of the page: after load, each image's decoded width (0: it did not decode)
PROBE = ('<script>window.addEventListener("load", () => { const d = document.createElement("pre"); d.id = "probe";'
         ' d.textContent = JSON.stringify([...document.images].map(i => [i.id || i.className, i.complete,'
         ' i.naturalWidth])); document.body.appendChild(d); });</script>')


def open_in_chromium(page, tmp_path):
    """(the rendered DOM, the console lines the page logged, the probe's image list)."""
    copy = tmp_path / f"probed_{page.name}"
    copy.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    proc = subprocess.run([BROWSER, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", copy.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    probe = re.search(r'<pre id="probe">(.*?)</pre>', proc.stdout, re.S)
    assert probe, "the page did not finish loading (no probe output)"
    return proc.stdout, console, json.loads(probe[1].replace("&quot;", '"'))


def test_the_console_check_catches_a_page_error(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><body><img id="x" src="data:image/png;base64,AAAA">'
                   '<script>console.error("broken page")</script></body></html>')
    _, console, images = open_in_chromium(bad, tmp_path)
    assert any("broken page" in line for line in console)
    assert images == [["x", True, 0]]   # a figure that does not decode shows as width 0


def test_run_report_renders_without_console_errors(tmp_path):
    cfg = {"seed": 2, "budget": {"epsilon": 2.0, "delta": 1e-5}, "dataset": {"name": "census", "params": {"n": 1500}},
           "synthesizer": {"use": "vertimrf"}, "evaluation": {"holdout": 0.2},
           "evaluators": [{"use": "tvd", "params": {"ways": [2], "marginals": 10}}, {"use": "ml_utility"}]}
    out = tmp_path / "run"
    run(parse_config(cfg), out)
    dom, console, images = open_in_chromium(out / "report.html", tmp_path)
    assert console == []
    for table in ("ledger-stages", "ledger-parties", "ledger-charges", "metrics-table"):
        assert f'id="{table}"' in dom
    assert re.search(r'<table id="ledger-stages".*?<td>encoder</td>', dom, re.S)
    drawn = {name for name, complete, width in images if complete and width > 0}
    assert {"fig-graph", "fig-marginals", "fig-heatmap"} <= drawn and len(drawn) == len(images)


def test_study_report_renders_without_console_errors(tmp_path):
    import pandas as pd

    rows = [{"cell": i, "dataset": "census", "method": m, "epsilon": e, "evaluator": "tvd", "metric": "tvd_2way",
             "value": v + 0.01 * r} for i, (r, e, (m, v)) in enumerate(
        (r, e, mv) for r in range(2) for e in (0.4, 1.6) for mv in (("vertimrf", 0.05), ("independent", 0.17)))]
    write_outputs(pd.DataFrame(rows), tmp_path / "study")
    dom, console, images = open_in_chromium(tmp_path / "study" / "report.html", tmp_path)
    assert console == [] and 'id="leaderboard"' in dom and "vertimrf" in dom
    assert images and all(complete and width > 0 for _, complete, width in images)
