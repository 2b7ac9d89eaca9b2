"""Study outputs a newcomer reads: one repeat says n=1 (not '± 0.0000'), figure ticks are the grid's ε values."""
import pytest
import pandas as pd

from vertisynth.study.outputs import mean_std, write_outputs


def _table(repeats):
    rows = []
    for r in range(repeats):
        for eps in (0.4, 1.6, 3.2):
            for method, v in (("vertimrf", 0.05), ("independent", 0.17)):
                rows.append({"cell": len(rows), "dataset": "census", "method": method, "epsilon": eps,
                             "evaluator": "tvd", "metric": "tvd_2way", "value": v + 0.01 * r})
    return pd.DataFrame(rows)


def test_one_repeat_is_n1_not_plus_minus_zero(tmp_path):
    write_outputs(_table(1), tmp_path)
    summary = (tmp_path / "summary.md").read_text()
    assert "| vertimrf | 0.4 | 0.0500 (n=1) | 1 |" in summary
    assert "± 0.0000" not in summary
    write_outputs(_table(2), tmp_path / "two")
    assert "| vertimrf | 0.4 | 0.0550 ± 0.0071 | 2 |" in (tmp_path / "two" / "summary.md").read_text()
    assert mean_std(0.1, float("nan"), 1) == "0.1000 (n=1)"


def test_figure_ticks_are_the_grid_epsilons(tmp_path, monkeypatch):
    import matplotlib.figure   # here, not at collection: ~0.4 CPU s in every xdist worker, one runs this test

    seen = []
    real = matplotlib.figure.Figure.savefig
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig",
                        lambda fig, *a, **k: (seen.append([t.get_text() for t in fig.axes[0].get_xticklabels()]),
                                              real(fig, *a, **k))[1])
    write_outputs(_table(1), tmp_path)
    assert seen == [["0.4", "1.6", "3.2"]]


def test_grid_points_beyond_method_and_epsilon_get_their_own_rows(tmp_path):
    t = _table(1)
    t["grid:parties.count"] = [2, 2, 3, 3, 4, 4]        # not repeats: three different grid points
    write_outputs(t, tmp_path)
    summary = (tmp_path / "summary.md").read_text()
    assert "| vertimrf [parties.count=2] | 0.4 | 0.0500 (n=1) | 1 |" in summary
    assert "| independent [parties.count=4] | 3.2 |" in summary


@pytest.mark.slow
def test_paper_fig4_quick_shows_the_methods_apart(tmp_path):
    """The quick preset is what a newcomer runs first: it must show centralised < vertical < independent
    (at n = 3,000 with a holdout it showed `independent` best). About 35 CPU-s."""
    import tomllib
    from pathlib import Path

    from vertisynth.study import run_study

    data = tomllib.loads((Path(__file__).resolve().parents[2] / "studies" / "paper_fig4.toml").read_text())
    table = run_study(data, tmp_path, quick=True, n_jobs=1, progress=False)
    tvd3 = table[table.metric == "tvd_3way"].groupby(["method", "epsilon"])["value"].mean().unstack()
    for eps in tvd3.columns:
        col = tvd3[eps]
        assert col["privmrf"] < col["vertimrf[encoder=dpfm]"] < col["independent"], tvd3
        assert col["vertimrf[encoder=grr]"] < col["independent"], tvd3


def test_study_report_html_has_the_leaderboard_with_intervals_and_the_figures(tmp_path):
    import re

    from scipy import stats

    write_outputs(_table(3), tmp_path)
    html = (tmp_path / "report.html").read_text()
    assert not re.search(r"https?://|<script|<link", html)
    assert 'id="leaderboard"' in html and "census: tvd.tvd_2way (lower is better)" in html
    # three repeats 0.05, 0.06, 0.07: mean 0.06, 95% t half-width t(0.975, 2) · 0.01 / √3; the best (lowest) is bold
    half = stats.t.ppf(0.975, 2) * 0.01 / 3 ** 0.5
    assert re.search(rf'<td class="n best">0.06 ± {half:.2g} <span class="note">n=3</span></td>', html)
    assert html.count('class="fig-eps"') == 1 and 'src="data:image/png;base64,' in html
