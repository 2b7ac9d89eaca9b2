"""Every page under docs/ is in mkdocs.yml's nav: CI's `mkdocs build --strict` refuses a page outside it, late in
the run (after the tests and the audits); this finds it in the default run, in milliseconds."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_docs_page_is_in_the_nav():
    nav = set(re.findall(r":\s*([\w./-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), flags=re.MULTILINE))
    nav |= set(re.findall(r"^\s*-\s*([\w./-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), flags=re.MULTILINE))
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    missing = sorted(pages - nav)
    assert not missing, f"docs pages not in mkdocs.yml's nav (add them): {missing}"
