"""The README's Python example, pasted as is, runs and keeps a cross-party dependence."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def _cramers_v(a: pd.Series, b: pd.Series) -> float:
    t = pd.crosstab(a, b).to_numpy(float)
    n = t.sum()
    e = np.outer(t.sum(1), t.sum(0)) / n
    return float(np.sqrt(((t - e) ** 2 / e).sum() / n / (min(t.shape) - 1)))


def test_readme_python_example_keeps_a_cross_party_dependence(capsys):
    blocks = re.findall(r"<!-- runnable -->\n```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) == 1, "README.md should hold one runnable Python example"
    ns: dict = {}
    exec(compile(blocks[0], str(README), "exec"), ns)
    assert "health_insurance" in capsys.readouterr().out          # it printed the two crosstabs
    people, result = ns["people"], ns["result"]
    assert set(result.synthetic.columns) == set(people.columns)
    assert result.ledger.spent_epsilon() <= 1.0 + 1e-9
    age = ns["age_group"]
    real = _cramers_v(age(people), people["health_insurance"])    # about 0.29; independent columns give ~0.02
    synth = _cramers_v(age(result.synthetic), result.synthetic["health_insurance"])
    assert result.report["synthesizer"]["model"]["cross_party_marginals"], "VertiMRF measured no cross-party marginal"
    assert real > 0.2
    assert synth > 0.6 * real, (synth, real)
