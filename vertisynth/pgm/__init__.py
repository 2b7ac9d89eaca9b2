"""The graphical-model engine shared by Private-PGM, PrivMRF and VertiMRF.

    graph.py       cliques → chordal graph (min-fill) → maximal cliques → junction tree; model size
    model.py       GraphicalModel: log-potentials on the tree, calibration by belief propagation in
                   log space, marginals of any attribute set, sampling
    calibrator.py  the belief propagation inside estimation: flat arrays batched by tree depth, large
                   cliques on their own; maps measurement-shaped log-potentials to measurement marginals
    estimation.py  Private-PGM: fit the potentials to noisy marginal measurements by mirror descent
"""
from .estimation import EstimationResult, Measurement, estimate
from .graph import JunctionTree, build_junction_tree
from .model import GraphicalModel

__all__ = ["EstimationResult", "GraphicalModel", "JunctionTree", "Measurement", "build_junction_tree", "estimate"]
