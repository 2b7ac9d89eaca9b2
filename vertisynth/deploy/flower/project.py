"""The Flower app project (`vertisynth flower app DIR`): a pyproject.toml whose components are vertisynth's
ServerApp and ClientApp. It holds no code: `flwr run` builds it into a FAB, the SuperLink and SuperNodes
install the FAB by copying its files, and the components import the vertisynth each machine has installed.
So nothing is downloaded at run time when the SuperLink runs with --disable-runtime-dependency-installation
(the SuperNode never installs dependencies unless started with --allow-runtime-dependency-installation)."""
from __future__ import annotations

from pathlib import Path

from vertisynth import __version__

PYPROJECT = """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "vertisynth-run"
version = "{version}"
description = "vertisynth: differentially private synthetic data over vertically split data, on Flower"
license = "Apache-2.0"
dependencies = []   # vertisynth[flower] is preinstalled on every machine: nothing is installed at run time

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "vertisynth"

[tool.flwr.app.components]
serverapp = "vertisynth.deploy.flower.serverapp:app"
clientapp = "vertisynth.deploy.flower.clientapp:app"

[tool.flwr.app.config]
config = ""      # the shared job TOML, on the SuperLink's machine
out = ""         # a fresh output folder there
timeout = {timeout}   # seconds a step, and a party's answer, may take
data-dir = ""    # the NLTCS/Adult folder, only for named benchmark datasets
server-key = ""  # the server's signing key (party init --party server): signs its run key (and he queries)
work = ""        # scratch for the server role's worker (default: OUT.work beside OUT)
"""


def write_app(folder: Path, timeout: float = 600.0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "pyproject.toml"
    path.write_text(PYPROJECT.format(version=__version__, timeout=float(timeout)))
    return path
