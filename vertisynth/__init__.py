"""vertisynth: differentially private synthetic data across parties that hold different columns."""
__version__ = "0.1.0"

from .core.hookspecs import hookimpl  # noqa: E402  (plugins import this)

_LAZY = {"synthesize": ".api"}   # lazy: importing vertisynth stays cheap for plugin modules


def __getattr__(name: str):
    """`vertisynth.synthesize` is `vertisynth.api.synthesize` itself (its signature and docstring), imported on
    first use."""
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'vertisynth' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["__version__", "hookimpl", "synthesize"]
