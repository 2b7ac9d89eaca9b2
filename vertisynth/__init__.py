"""vertisynth: differentially private synthetic data across parties that hold different columns."""
__version__ = "0.1.0"

from .core.hookspecs import hookimpl  # noqa: E402  (plugins import this)

__all__ = ["__version__", "hookimpl"]
