"""What `vertisynth plugins` shows a user: each component's summary, with no internal issue numbers."""
import re

from vertisynth.core.registry import default_registry


def test_no_summary_names_an_internal_issue():
    reg = default_registry()
    texts = [(kind, name, reg.get(kind, name).summary) for kind in ("encoder", "aligner", "synthesizer", "evaluator",
                                                                      "dataset") for name in reg.names(kind)]
    assert len(texts) > 10
    assert [t for t in texts if re.search(r"\bissues? ?#?\d+", t[2], re.I)] == []
