"""Study outputs a newcomer reads: one repeat says n=1 (not '± 0.0000'), figure ticks are the grid's ε values."""
import matplotlib.figure
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
    seen = []
    real = matplotlib.figure.Figure.savefig
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig",
                        lambda fig, *a, **k: (seen.append([t.get_text() for t in fig.axes[0].get_xticklabels()]),
                                              real(fig, *a, **k))[1])
    write_outputs(_table(1), tmp_path)
    assert seen == [["0.4", "1.6", "3.2"]]
