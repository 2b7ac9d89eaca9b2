"""Example third-party vertisynth plugin."""
__version__ = "0.1.0"
