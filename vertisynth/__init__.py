"""vertisynth: differentially private synthetic data across parties that hold different columns."""
__version__ = "0.1.0"

from .core.hookspecs import hookimpl  # noqa: E402  (plugins import this)


def synthesize(*args, **kwargs):  # lazy: importing vertisynth stays cheap for plugin modules
    from .api import synthesize as _synthesize

    return _synthesize(*args, **kwargs)


synthesize.__doc__ = "Pandas in, pandas out; see vertisynth.api.synthesize."

__all__ = ["__version__", "hookimpl", "synthesize"]
