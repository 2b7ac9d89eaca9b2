"""What every cross-machine role builds first: the run's plan from the shared config, and its random streams."""
from __future__ import annotations

import numpy as np

from vertisynth.core.capabilities import AnswersInRounds, PartyServerSplit, ReleasesAtParties
from vertisynth.core.errors import ConfigError
from vertisynth.core.noise import named_streams
from vertisynth.run.config import RunConfig
from vertisynth.run.pipeline import RNG_STREAMS, make_plan


def streams(seed: int) -> dict[str, np.random.Generator]:
    return named_streams(seed, RNG_STREAMS)


def oracle_run(plan) -> bool:
    """Whether the run is a synthesizer fitted on the vertical oracle (its `vertical` table named a measure):
    the server runs the synthesizer and the parties answer its queries (deploy/oracle_rounds.py)."""
    return plan.measure is not None


def vertical_plan(config: RunConfig, data_dir: str | None, aligned_csv: bool = False):
    plan = make_plan(config, data_dir=data_dir)
    synth = plan.synthesizer.instance
    if not isinstance(synth, PartyServerSplit) and not oracle_run(plan):
        raise ConfigError(f"synthesizer {plan.synthesizer.spec.name!r} has no party/server split and no vertical "
                          "table; use 'vertimrf', or a twin with params.vertical (e.g. 'aim')")
    if oracle_run(plan):
        if config.evaluation.holdout > 0:
            raise ConfigError("a vertical twin across machines trains on every aligned row; set [evaluation] holdout = 0")
        if not isinstance(plan.measure.instance, (AnswersInRounds, ReleasesAtParties)):
            raise ConfigError(f"synthesizer.params.vertical: measure {plan.measure.spec.name!r} has no rounds across "
                              "machines (AnswersInRounds, ReleasesAtParties); it runs in one process only "
                              "(`vertisynth run`)")
        if isinstance(plan.measure.instance, AnswersInRounds):
            plan.measure.instance.check_across_machines()
    # psi/psu: the parties aligned their rows beforehand with `vertisynth party align` (its --table output)
    if config.alignment.use not in ("positional", "psi", "psu"):
        raise ConfigError(f"party/server runs support alignment 'positional', 'psi' or 'psu', not {config.alignment.use!r}")
    if config.alignment.use != "positional" and not aligned_csv:
        raise ConfigError(f"alignment {config.alignment.use!r}: run `vertisynth party align` first and pass its "
                          "<party>_aligned.csv to `party synth --csv`")
    if any(c.kind == "numeric" and c.binning == "quantile" for c in plan.source.schema.columns):
        raise ConfigError("party/server runs need public bin edges (binning 'edges' or 'equal_width'), not DP quantiles")
    return plan, synth
