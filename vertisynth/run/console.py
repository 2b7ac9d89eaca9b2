"""What every CLI command does with an expected error: one red line on stderr, exit status 2."""
from __future__ import annotations

import sys

import click


def fail(exc: Exception) -> None:
    click.secho(f"error: {exc}", fg="red", err=True)
    sys.exit(2)
