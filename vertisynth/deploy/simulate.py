"""The one-process simulation of a reproducible cross-machine run: what `party hello --test-secret S` then
keys, synth and server produce, computed by the ordinary pipeline (`run.pipeline.execute`) with the parties'
randomness and the key agreement's binding taken from S. Tests use it to show deployment equals simulation.
The parties are independent organisations, so they step at once, a forked process each (the synthesizer's
`party_processes`; the messages are those of a sequential run, bit for bit)."""
from __future__ import annotations

import attrs

from vertisynth.core.capabilities import PartyServerSplit, ReleasesAtParties
from vertisynth.core.errors import ConfigError
from vertisynth.core.identity import parse_test_secret
from vertisynth.run.config import RunConfig
from vertisynth.run.pipeline import RunResult, execute, make_plan

from .session import config_fingerprint, key_context, run_id, test_noise_seed, test_nonce


def simulate(config: RunConfig, test_secret: str, data_dir: str | None = None,
             party_processes: int | None = None) -> RunResult:
    """`party_processes`: parties stepping at once (default: all of them; 1 = one after another)."""
    secret = parse_test_secret(test_secret, config.seed)
    plan = make_plan(config, data_dir=data_dir, reproducible=True)   # the deployed test run's simulation noise
    fp = config_fingerprint(config)
    run = run_id(fp, {p: test_nonce(secret, p) for p in plan.partition.names})
    synth = plan.synthesizer.instance
    if plan.measure is not None:   # a vertical twin: its parties draw from the test secret's streams
        if isinstance(plan.measure.instance, ReleasesAtParties):   # a key the parties agree is bound to the run
            plan.measure.instance.set_key_context(key_context(run, fp))
        return execute(plan, party_seed=test_noise_seed(secret))
    if not isinstance(synth, PartyServerSplit):
        raise ConfigError(f"synthesizer {plan.synthesizer.spec.name!r} has no party/server split; use 'vertimrf' "
                          "or a twin with params.vertical")
    synth.set_key_context(key_context(run, fp))
    if attrs.has(type(synth.config)) and "party_processes" in attrs.fields_dict(type(synth.config)):
        synth.config = attrs.evolve(synth.config, party_processes=party_processes or len(plan.partition))
    return execute(plan, party_seed=test_noise_seed(secret))
