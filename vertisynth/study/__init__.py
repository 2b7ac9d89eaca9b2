"""Comparison studies: a grid of pipeline runs (datasets x synthesizers x epsilon x repeats), run in parallel
locally (joblib) or on a Dask cluster, cached per cell on disk, summarised as tidy tables, Markdown and plots."""

_LAZY = {"Cell": ".grid", "expand_grid": ".grid", "run_study": ".runner"}   # lazy: the registry imports
# vertisynth.study.plugin for every command, `vertisynth --help` included, and .runner imports pandas and the engine


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'vertisynth.study' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["Cell", "expand_grid", "run_study"]
