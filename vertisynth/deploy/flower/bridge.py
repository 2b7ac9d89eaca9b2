"""A party's side of the Flower runtime, without Flower: the ordinary party steps (`vertisynth party hello|align|
keys|synth`) run unchanged as a worker process on the party's own machine, against a private relay folder
(`relay://<work>/exchange`), and this bridge moves envelopes between that folder and the Flower messages.

A Flower ClientApp lives for one message, a party step for several rounds, so each call of `Bridge.step`:
writes the envelopes that came in, starts the step's worker if it is not running yet, and returns as soon as the
worker is done, failed, or waits for envelopes the bridge does not hold yet (the relay folder records that
precisely: transport.RelayFolderTransport), with every envelope the party wrote since the last call. The
protocols, their envelope checks and the party's keys and outputs stay exactly those of the folder run.

A SuperNode's `role` (--node-config) says which worker it runs: a vertical `party` (the steps above), or a [collab]
run's `custodian` or `collab-server` (one step, `collab`: the whole `vertisynth collab custodian|server` role).
The roles on the ServerApp's own machine (the he server, the collab publisher) use the same machinery:
ServerBridge, PublisherBridge.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import attrs

from vertisynth.core.courier import parse_slot, pattern
from vertisynth.core.errors import ConfigError, MessageError
from vertisynth.run.config import load_config

from ..transport import RelayFolderTransport, read_generation

STEPS = ("hello", "align", "keys", "synth", "collab")
ROLES = ("party", "custodian", "collab-server")   # a vertical party, or a [collab] run's custodian / compute server
DONE, FAILED, WAITING, BUSY = "done", "failed", "waiting", "busy"


def server_index(name: str) -> str | None:
    """A [collab] compute server's index from its role name `server<INDEX>` (server0, server1, ...), else None."""
    index = name.removeprefix("server")
    return index if name.startswith("server") and index.isdigit() else None


@attrs.frozen
class NodeSettings:
    """What an organisation's SuperNode is started with (`--node-config`): who it is and where its files are.
    Nothing here leaves the machine but the party's name."""

    party: str
    config: Path              # the shared job config (public; the same file at every organisation)
    out: Path                 # the party's private folder: signing key (`party init`), run state, keys, outputs
    work: Path                # scratch for the relay folder, worker logs and status (private too)
    csv: Path | None = None   # the party's own table (with --id-column when the config aligns with PSI/PSU)
    id_column: str = "id"
    test_secret: str | None = None   # reproducible test runs only (labelled so in every output)
    timeout: float = 600.0
    role: str = "party"
    key: Path | None = None          # collab roles: the roster signing key (default: OUT/<party>_signing.pem)
    seed: int | None = None          # collab roles, tests only: `collab custodian|server --seed`

    @classmethod
    def from_node_config(cls, node: dict) -> NodeSettings:
        missing = [k for k in ("party", "config", "out", "work") if not str(node.get(k, "")).strip()]
        if missing:
            raise ConfigError(f"the SuperNode's --node-config lacks {missing} (e.g. --node-config 'party=\"hospital\" "
                              "config=\"job.toml\" out=\"private\" work=\"flower-work\" csv=\"hospital.csv\"')")
        def text(key: str) -> str | None:
            value = str(node.get(key, "")).strip()
            return value or None
        try:
            timeout = float(node.get("timeout", 600.0))
        except (TypeError, ValueError):
            raise ConfigError(f"--node-config timeout={node.get('timeout')!r}: give seconds, e.g. timeout=600") from None
        csv, key, seed = text("csv"), text("key"), text("seed")
        role = text("role") or "party"
        if role not in ROLES:
            raise ConfigError(f"--node-config role={role!r}: one of {list(ROLES)}")
        if seed is not None and not seed.lstrip("-").isdigit():
            raise ConfigError(f"--node-config seed={seed!r}: an integer (tests only)")
        return cls(party=str(node["party"]), config=Path(str(node["config"])), out=Path(str(node["out"])),
                   work=Path(str(node["work"])), csv=Path(csv) if csv else None, id_column=text("id-column") or "id",
                   test_secret=text("test-secret"), timeout=timeout, role=role, key=Path(key) if key else None,
                   seed=int(seed) if seed is not None else None)


@attrs.frozen
class Reply:
    party: str
    status: str                  # done | failed | waiting | busy
    envelopes: dict[str, bytes]  # what the party wrote since the last call
    error: str = ""


class Bridge:
    def __init__(self, settings: NodeSettings) -> None:
        self.s = settings
        self.spool = settings.work / "exchange"
        self.spool.mkdir(parents=True, exist_ok=True)

    # -- what the worker runs -----------------------------------------------------------------------------------
    def command(self, step: str) -> list[str]:
        s = self.s
        if (step == "collab") != (s.role != "party"):
            raise ConfigError(f"{s.party!r} is a {s.role} (its --node-config role): it takes no step {step!r}")
        if step == "collab":
            return self._collab_command()
        base = [sys.executable, "-m", "vertisynth.cli", "party", step, str(s.config), "--party", s.party,
                "--exchange", f"relay://{self.spool.resolve()}", "--out", str(s.out)]
        if step == "hello":
            return base + ["--timeout", str(s.timeout)] + (["--test-secret", s.test_secret] if s.test_secret else [])
        if step == "align":
            if s.csv is None:
                raise ConfigError(f"party {s.party!r}: the config aligns rows (PSI/PSU): set csv=... in --node-config")
            return base + ["--csv", str(s.csv), "--id-column", s.id_column, "--timeout", str(s.timeout), "--quiet"]
        if step == "keys":
            return base + ["--timeout", str(s.timeout), "--quiet"]
        if step == "synth":
            aligned = load_config(s.config).alignment.use in ("psi", "psu")
            csv = s.out / f"{s.party}_aligned.csv" if aligned else s.csv
            return base + (["--csv", str(csv)] if csv is not None else []) + ["--timeout", str(s.timeout), "--quiet"]
        raise ConfigError(f"unknown step {step!r}; the steps are {list(STEPS)}")

    def _collab_command(self) -> list[str]:
        """`vertisynth collab custodian|server` (collab/cli.py): the whole role, every round, in one worker."""
        s = self.s
        key = s.key or s.out / f"{s.party}_signing.pem"
        common = ["--exchange", f"relay://{self.spool.resolve()}", "--timeout", str(s.timeout), "--key", str(key),
                  "--quiet", *(["--seed", str(s.seed)] if s.seed is not None else [])]
        head = [sys.executable, "-m", "vertisynth.cli", "collab"]
        if s.role == "custodian":
            if s.csv is None:
                raise ConfigError(f"custodian {s.party!r}: set csv=... (its own rows) in --node-config")
            return [*head, "custodian", str(s.config), "--name", s.party, "--csv", str(s.csv), *common]
        index = server_index(s.party)
        if index is None:
            raise ConfigError(f"a collab-server's party is server<INDEX> (server0, server1, ...), not {s.party!r}")
        return [*head, "server", str(s.config), "--index", index, *common]

    def _file(self, step: str, what: str) -> Path:
        return self.s.work / f"{step}.{what}"

    def _start(self, step: str) -> None:
        cmd = self.command(step)
        log = open(self._file(step, "log"), "ab")
        # a session of its own: the worker outlives this ClientApp process (it ends by itself: --timeout)
        proc = subprocess.Popen([sys.executable, "-m", "vertisynth.deploy.flower.worker", str(self._file(step, "rc")),
                                 *cmd], stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
        self._file(step, "pid").write_text(str(proc.pid))

    # -- one Flower message ---------------------------------------------------------------------------------------
    def step(self, step: str, inbound: dict[str, bytes], wait: float) -> Reply:
        if step not in STEPS:
            raise ConfigError(f"unknown step {step!r}; the steps are {list(STEPS)}")
        for name, data in inbound.items():
            if parse_slot(name).sender == self.s.party:
                raise MessageError(f"the relay sent back an envelope under this party's own name ({name}); refused")
            if not (self.spool / (name + RelayFolderTransport.SUFFIX)).exists():
                RelayFolderTransport(self.spool).send(name, data)
        generation = read_generation(self.spool) + 1
        tmp = self.spool / ".generation.part"
        tmp.write_text(str(generation))
        os.replace(tmp, self.spool / RelayFolderTransport.GENERATION)
        if not self._file(step, "pid").exists():
            self._start(step)
        deadline = time.monotonic() + wait
        while True:
            status, error = self._status(step, generation)
            if status != BUSY or time.monotonic() > deadline:
                return Reply(self.s.party, status, self._outbound(), error)
            time.sleep(0.05)

    def _status(self, step: str, generation: int) -> tuple[str, str]:
        rc_file = self._file(step, "rc")
        if rc_file.exists():
            rc = int(rc_file.read_text() or 1)
            if rc == 0:
                return DONE, ""
            lines = [ln for ln in self._file(step, "log").read_text(errors="replace").splitlines() if ln.strip()]
            return FAILED, (lines[-1] if lines else f"exit status {rc}")[-2000:]
        try:
            waiting = json.loads((self.spool / RelayFolderTransport.WAITING).read_text())
        except (FileNotFoundError, ValueError):
            return BUSY, ""
        return (WAITING, waiting.get("what", "")) if waiting.get("generation") == generation else (BUSY, "")

    def _outbound(self) -> dict[str, bytes]:
        """The party's own envelopes not reported yet (each is reported once)."""
        sent_file = self.s.work / "reported.json"
        sent = set(json.loads(sent_file.read_text())) if sent_file.exists() else set()
        relay = RelayFolderTransport(self.spool)
        new = {n: relay.read(n) for n in relay.names(pattern(sender=self.s.party)) if n not in sent}
        if new:
            tmp = sent_file.with_suffix(".part")
            tmp.write_text(json.dumps(sorted(sent | set(new))))
            os.replace(tmp, sent_file)
        return new

    def abort(self, reason: str) -> None:
        """The server gave up on the run: stop this party's worker (the one this bridge started, by its id)."""
        stopped = []
        for step in STEPS:
            pid_file, rc_file = self._file(step, "pid"), self._file(step, "rc")
            if pid_file.exists() and not rc_file.exists():
                try:
                    os.killpg(int(pid_file.read_text()), signal.SIGTERM)
                    stopped.append(step)
                except (ProcessLookupError, PermissionError, ValueError):
                    pass
        with open(self.s.work / "abort.log", "a") as fh:
            fh.write(f"error: aborted by the server: {reason}" + (f" (stopped: {stopped})" if stopped else "") + "\n")


class ServerBridge(Bridge):
    """The server role as a participant of the synth step (it publishes the run key the parties seal to; encoder
    "he": it also signs the clique queries mid-run),
    on the ServerApp's own machine: the ordinary `vertisynth server --key` on its own relay folder, started and
    polled exactly like a party's worker. It writes the table, model, report and ledger into `out` itself."""

    party = "server"
    steps = frozenset({"synth"})

    def __init__(self, config: Path, out: Path, work: Path, key: Path, data_dir: str | None = None,
                 wait: float = 1.0) -> None:
        if not key.is_file():
            raise ConfigError(f"the server signs its run key (and with encoder 'he' its clique queries); its key {str(key)!r} does not "
                              "exist (make it with `vertisynth party init --party server`, pin it in the roster, "
                              "and pass --run-config 'server-key=\"PATH\"')")
        super().__init__(NodeSettings(party=self.party, config=config, out=out, work=work))
        self.key, self.data_dir, self.wait = key, data_dir, wait

    def command(self, step: str) -> list[str]:
        if step not in self.steps:
            raise ConfigError(f"the server role takes part only in the steps {sorted(self.steps)}, not {step!r}")
        s = self.s
        return [sys.executable, "-m", "vertisynth.cli", "server", str(s.config), "--exchange",
                f"relay://{self.spool.resolve()}", "--out", str(s.out), "--key", str(self.key), "--quiet",
                *(["--data-dir", self.data_dir] if self.data_dir else [])]

    def __call__(self, step: str, inbound: dict[str, bytes]) -> Reply:
        return self.step(step, inbound, self.wait)


class PublisherBridge(Bridge):
    """A [collab] run's publisher on the ServerApp's machine: the ordinary `vertisynth collab publish` as a worker on
    its own relay folder, a participant of the relay's one `collab` step. It sees only the servers' noisy shares
    and writes the release into `out` itself."""

    party = "publisher"
    steps = frozenset({"collab"})

    def __init__(self, config: Path, out: Path, work: Path, key: Path, timeout: float, data_dir: str | None = None,
                 wait: float = 1.0) -> None:
        if not key.is_file():
            raise ConfigError(f"[collab]: the publisher signs what it posts; its key {str(key)!r} does not exist "
                              "(`vertisynth party init --party publisher`, pinned in the roster; --run-config "
                              "'server-key=\"PATH\"')")
        super().__init__(NodeSettings(party=self.party, config=config, out=out, work=work, timeout=timeout))
        self.key, self.data_dir, self.wait = key, data_dir, wait

    def command(self, step: str) -> list[str]:
        if step not in self.steps:
            raise ConfigError(f"the publisher takes part only in the step 'collab', not {step!r}")
        s = self.s
        return [sys.executable, "-m", "vertisynth.cli", "collab", "publish", str(s.config), "--exchange",
                f"relay://{self.spool.resolve()}", "--out", str(s.out), "--timeout", str(s.timeout),
                "--key", str(self.key), "--quiet", *(["--data-dir", self.data_dir] if self.data_dir else [])]

    def __call__(self, step: str, inbound: dict[str, bytes]) -> Reply:
        return self.step(step, inbound, self.wait)
