"""docs/plugins.md's skeletons are real: executed here, registered, planned, run and scored in a pipeline."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from vertisynth.core.registry import Registry
from vertisynth.run.config import parse_config
from vertisynth.run.pipeline import make_plan, run

DOC = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"


def _runnable_blocks() -> list[str]:
    return re.findall(r"<!-- runnable -->\n```python\n(.*?)```", DOC.read_text(), re.S)


@pytest.fixture(scope="module")
def doc_registry():
    blocks = _runnable_blocks()
    assert len(blocks) == 4, "docs/plugins.md should hold the synthesizer, evaluator, dataset and registration"
    ns: dict = {}
    for code in blocks:
        exec(compile(code, str(DOC), "exec"), ns)
    reg = Registry.load(strict=True)
    reg.add_plugin(ns["MyPlugin"](), "docs-example")
    assert not reg.broken
    return reg


def test_the_documented_plugin_runs_end_to_end(doc_registry):
    cfg = parse_config({"seed": 3, "budget": {"epsilon": 2.0, "delta": 1e-5}, "dataset": {"name": "coins"},
                        "synthesizer": {"use": "noisy_marginals"}, "evaluators": [{"use": "max_oneway_gap"}]})
    plan = make_plan(cfg, registry=doc_registry)
    assert {c.mechanism for c in plan.ledger.planned} == {"gaussian_count", "gaussian_1way:a", "gaussian_1way:b"}
    res = run(cfg, registry=doc_registry)
    assert res.ledger.unspent() == [] and res.ledger.spent_epsilon() <= 2.0 + 1e-9
    assert set(res.synthetic.columns) == {"a", "b"}
    assert 0 <= res.metrics["max_oneway_gap"]["max_gap"] < 0.1   # 1-way frequencies survive at ε = 2


def test_the_documented_config_class_refuses_bad_values(doc_registry):
    cfg = parse_config({"budget": {"epsilon": 1.0, "delta": 1e-5}, "dataset": {"name": "coins"},
                        "synthesizer": {"use": "noisy_marginals", "params": {"count_fraction": 2.0}}})
    with pytest.raises(Exception, match="count_fraction must be in"):
        make_plan(cfg, registry=doc_registry)
