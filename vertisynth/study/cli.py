"""`vertisynth study FILE` or `vertisynth study --preset NAME`: run or resume a comparison study."""
from __future__ import annotations

import tomllib
from pathlib import Path

import click

from vertisynth.core.errors import ConfigError, VertisynthError
from vertisynth.run.console import fail as _fail
from vertisynth.run.console import warnings_as_lines


@click.command()
@click.argument("study_file", type=click.Path(dir_okay=False, path_type=Path), required=False)
@click.option("--preset", default=None, metavar="NAME",
              help="Run a study shipped with vertisynth instead of a file: 'benchmark' (every built-in "
                   "synthesizer over NLTCS, Adult and the zoo presets at five ε).")
@click.option("--out", "-o", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Output folder (default: study-output/<file or preset name>); finished cells are cached there.")
@click.option("--quick", is_flag=True, help="Run the file's smaller [study.quick] variant.")
@click.option("--jobs", "-j", type=int, default=None, help="Local joblib workers (default: the file's n_jobs, -1).")
@click.option("--scheduler", default=None, help="tcp://host:port of an existing Dask cluster to run cells on.")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, envvar="VERTISYNTH_DATA",
              help="Folder with the NLTCS/Adult benchmark data (or set VERTISYNTH_DATA).")
@click.option("--rows", type=int, default=None, hidden=True,
              help="Cap every dataset of a preset at this many records (smoke tests).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def study(study_file: Path | None, preset: str | None, out: Path | None, quick: bool, jobs: int | None,
          scheduler: str | None, data_dir: str | None, rows: int | None, quiet: bool) -> None:
    """Run (or resume) a comparison study: one pipeline run per [study] grid cell x repeat."""
    from .presets import load_preset
    from .runner import run_study   # here, not at the top: pandas and the engine load when a study runs

    try:
        with warnings_as_lines():   # e.g. an edited cell, a skipped dataset, named in one line
            if (study_file is None) == (preset is None):
                raise ConfigError("study: give a study file or --preset NAME (one of the two)")
            if preset is not None:
                data = load_preset(preset, data_dir, rows=rows)
                stem = preset
            else:
                if rows is not None:
                    raise ConfigError("study: --rows applies to --preset only; set dataset params in the file")
                if not study_file.is_file():
                    raise ConfigError(f"study file {str(study_file)!r} does not exist")
                try:
                    data = tomllib.loads(study_file.read_text())
                except tomllib.TOMLDecodeError as exc:
                    raise ConfigError(f"study file {str(study_file)!r} is not valid TOML: {exc}") from None
                stem = study_file.stem
            out_dir = out or Path("study-output") / (stem + ("-quick" if quick else ""))
            table = run_study(data, out_dir, quick=quick, n_jobs=jobs, scheduler=scheduler, data_dir=data_dir,
                              progress=not quiet)
    except VertisynthError as exc:
        _fail(exc)
        return
    click.echo(f"{table['cell'].nunique() if len(table) else 0} cells, {len(table)} rows -> "
               f"{out_dir}/results.csv, results.parquet, summary.md, figures/")
