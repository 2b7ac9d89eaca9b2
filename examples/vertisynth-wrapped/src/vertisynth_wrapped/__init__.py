"""An example plugin that wraps scikit-learn's CategoricalNB as a DP synthesizer (noise charged to the ledger)."""
