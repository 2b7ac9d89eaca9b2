"""Feature maps for structured outputs: sequences of answers (codes, some carrying a value), of any length.

The auditor's built-in and learned events read a numeric (n, f) array. A mechanism that answers a
stream of queries (Sparse Vector: ⊥, ⊥, ⊤ then stop; or ⊥, ⊥, 3.2 when ⊤ carries the noisy value)
releases variable-length, mixed outputs; `sequence_features(width)` turns them into numbers:

    audit(mech, pairs, epsilon, features=sequence_features(width=10))

where each output is a sequence of items, each either a code (an int or bool) or a (code, value)
pair. The features are the padded codes and values per position (code −1 past the end) and, per
output, for each code of interest its count and first position, the length, and with values their
sum, first and last: the joint patterns that expose Sparse Vector bugs ("many ⊥, then a ⊤ whose value
sits just above the threshold") are then one or two splits of the learned classifier away.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from vertisynth.core.errors import DataError

PAD = -1


def pad_answers(outputs: Sequence[Sequence[Any]], width: int) -> tuple[np.ndarray, np.ndarray]:
    """(codes, values) arrays of shape (n, width) from variable-length answer sequences: code −1 and
    value 0 past an output's end, value 0 for items without one. Longer outputs are an error."""
    n = len(outputs)
    codes = np.full((n, width), PAD, dtype=np.int64)
    values = np.zeros((n, width))
    for i, out in enumerate(outputs):  # a loop over outputs: only for looped (real code path) samplers
        if len(out) > width:
            raise DataError(f"sequence_features: an output has {len(out)} answers, more than width={width}")
        for j, item in enumerate(out):
            if isinstance(item, (tuple, list)):
                codes[i, j], values[i, j] = int(item[0]), float(item[1])
            else:
                codes[i, j] = int(item)
    return codes, values


def answer_features(codes: np.ndarray, values: np.ndarray | None = None,
                    codes_of_interest: Sequence[int] = (0, 1)) -> np.ndarray:
    """Per-position codes (and values) plus, per output, each code's count and first position (width
    when absent), the answered length, and with values their sum, first and last non-pad value."""
    codes = np.asarray(codes)
    n, width = codes.shape
    # written column by column into one float array (no per-column arrays, stack and copy: the audits map
    # 10⁵-10⁶ outputs per call)
    out = np.empty((n, width + 2 * len(codes_of_interest) + 1 + (0 if values is None else width + 3)))
    out[:, :width] = codes
    j = width
    for c in codes_of_interest:
        hit = codes == c
        out[:, j] = np.count_nonzero(hit, axis=1)
        out[:, j + 1] = np.where(out[:, j] > 0, hit.argmax(1), width)
        j += 2
    answered = codes != PAD
    out[:, j] = np.count_nonzero(answered, axis=1)
    if values is not None:
        values = np.asarray(values, float)
        has = answered & (values != 0)
        some, rows = has.any(1), np.arange(n)
        out[:, j + 1:j + 1 + width] = values
        out[:, j + 1 + width] = values.sum(1)
        out[:, j + 2 + width] = np.where(some, values[rows, has.argmax(1)], 0.0)
        out[:, j + 3 + width] = np.where(some, values[rows, width - 1 - has[:, ::-1].argmax(1)], 0.0)
    return out


def sequence_features(width: int, codes_of_interest: Sequence[int] = (0, 1)) -> Callable[[Any], np.ndarray]:
    """A `features=` map for outputs that are answer sequences of length <= width (see module doc)."""
    def features(outputs: Any) -> np.ndarray:
        return answer_features(*pad_answers(outputs, width), codes_of_interest)

    features.__name__ = f"sequence_features(width={width})"
    return features
