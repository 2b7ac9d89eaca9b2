"""Helpers that 'install' a throwaway plugin distribution by writing a dist-info folder on sys.path."""
from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path


def install_fake_dist(root: Path, dist: str, modules: dict[str, str], entry_points: dict[str, str],
                      version: str = "1.0") -> None:
    root.mkdir(parents=True, exist_ok=True)
    for mod, src in modules.items():
        (root / f"{mod}.py").write_text(textwrap.dedent(src))
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    eps = "\n".join(f"{k} = {v}" for k, v in entry_points.items())
    (info / "entry_points.txt").write_text(f"[vertisynth]\n{eps}\n")
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    importlib.invalidate_caches()
