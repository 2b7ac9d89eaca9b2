"""Imported once by forked_cli's forkserver (never by a test): what the forked commands would otherwise import
each on their own, so that every `vertisynth ...` forked from it starts warm.

A command's first use of secure noise imports opendp (and through it scikit-learn and scipy.stats), the
alignment plugins import rbcl, the encoders and the report scipy, Dask and matplotlib; the plugin registry
reads the entry points and imports each component's module when it is first built. Measured on
tests/deploy/test_flows.py's PSU flow: these imports were about 80% of each forked `party align`.
"""
import contextlib
import importlib

HEAVY = ["scipy.stats", "scipy.optimize", "sklearn", "opendp.prelude", "rbcl", "dask", "distributed",
         "matplotlib", "matplotlib.pyplot", "pyarrow", "cryptography",
         # `--exchange URL`: fsspec, and its sftp:// (paramiko) and s3:// (s3fs, aiobotocore) stores, ≈ 1 CPU s a
         # forked role otherwise (tests/deploy/test_remote_exchange.py, tests/collab/test_collab_remote_exchange.py)
         "fsspec", "fsspec.implementations.sftp", "s3fs"]

for name in HEAVY:
    with contextlib.suppress(Exception):   # an optional package that is not installed: the command imports it
        importlib.import_module(name)

with contextlib.suppress(Exception):
    from vertisynth.core.registry import default_registry

    for kind_specs in default_registry()._specs.values():   # every installed component's module and config
        for entries in kind_specs.values():
            for spec, _ in entries:
                with contextlib.suppress(Exception):
                    spec.load_factory()
                    spec.load_config_cls()
