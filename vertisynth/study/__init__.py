"""Comparison studies: a grid of pipeline runs (datasets x synthesizers x epsilon x repeats), run in parallel
locally (joblib) or on a Dask cluster, cached per cell on disk, summarised as tidy tables, Markdown and plots."""
from vertisynth.study.grid import Cell, expand_grid
from vertisynth.study.runner import run_study

__all__ = ["Cell", "expand_grid", "run_study"]
