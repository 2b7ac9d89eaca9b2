"""The correlation heatmap: panels that do not overlap, and no stale copy left in a reused output folder."""
import numpy as np

from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.plugins.evaluators.correlation import Correlation
from vertisynth.run.config import parse_config
from vertisynth.run.pipeline import run


def test_heatmap_y_labels_stay_out_of_the_neighbouring_panel():
    names = [f"a_rather_long_attribute_name_{i}" for i in range(6)]
    dom = Domain.from_sizes({n: 3 for n in names})
    rng = np.random.default_rng(0)
    data = Dataset(np.asarray(rng.integers(0, 3, (400, 6))), dom)
    ev = Correlation()
    ev.evaluate(data, data, rng)
    fig = ev.heatmap_figure()
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    axes = fig.axes[:3]
    for left, right in zip(axes, axes[1:]):
        left_box = left.get_window_extent(renderer)
        for label in right.get_yticklabels():
            if label.get_visible() and label.get_text():
                assert label.get_window_extent(renderer).x0 >= left_box.x1, label.get_text()


def _cfg(evaluators):
    return parse_config({"seed": 1, "budget": {"epsilon": 1.0, "delta": 1e-5},
                         "dataset": {"name": "census", "params": {"n": 1000}}, "evaluators": evaluators})


def test_reused_output_folder_drops_the_previous_runs_heatmap(tmp_path):
    run(_cfg([{"use": "correlation"}]), output_dir=tmp_path)
    assert (tmp_path / "correlation_heatmap.png").is_file()
    (tmp_path / "mine.txt").write_text("not the run's")
    run(_cfg([{"use": "tvd", "params": {"ways": [2]}}]), output_dir=tmp_path)
    assert not (tmp_path / "correlation_heatmap.png").exists()   # a stale figure would mislead
    assert (tmp_path / "mine.txt").is_file()                     # files the run did not write are kept
    assert (tmp_path / "synthetic.csv").is_file()
