"""Imported once by forked_cli's forkserver (never by a test): what the forked commands would otherwise import
each on their own, so that every `vertisynth ...` forked from it starts warm.

The alignment plugins import rbcl, the encoders scipy and Dask, the remote exchanges fsspec; the plugin registry
reads the entry points and imports each component's module when it is first built. Measured on
tests/deploy/test_flows.py's PSU flow: these imports were about 80% of each forked `party align`.
"""
import contextlib
import importlib

# Not opendp nor matplotlib: none of the default run's ≈ 400 forked commands imports them (their configs use
# simulated noise and write no figure), and they cost each forkserver ≈ 0.6-1 CPU s (issue 33, docs/lab/
# ci-speed-2026-11-30.md "Eleventh pass"); a command that needs them imports them itself.
HEAVY = ["scipy.stats", "scipy.optimize", "sklearn", "rbcl", "dask", "distributed", "pyarrow", "cryptography",
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
