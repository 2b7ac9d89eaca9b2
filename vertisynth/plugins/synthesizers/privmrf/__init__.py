"""PrivMRF (Cai, Lei, Wei, Xiao, VLDB 2021), summarised in seed 003 §2.3.

What other synthesizers may use (VertiMRF runs PrivMRF as each party's local model):
"""
from .synthesizer import LocalModel, PrivMRFConfig, PrivMRFSynthesizer

__all__ = ["LocalModel", "PrivMRFConfig", "PrivMRFSynthesizer"]
