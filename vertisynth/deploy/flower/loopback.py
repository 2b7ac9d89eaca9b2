"""A Flower deployment on 127.0.0.1, for the tests and benchmarks/network.py: a SuperLink with TLS and SuperNode
authentication, one SuperNode per party, each a separate OS process group, Flower's own commands exactly as the
README runs them on three machines. Every wait is bounded; `close` kills the process groups started here (and
the party workers their bridges started), by their ids."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from vertisynth.core.errors import MessageError

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Deployment:
    """`poll`: the SuperNodes' idle poll of the SuperLink and their SuperExec's task poll, in seconds. None keeps
    Flower's (3 s and 1 s: a node that found no message sleeps 3 s, so each step of a run waits 1.5 s on average
    per node for nothing); the tests set 0.5: the same messages, less waiting between them, and more pulls (each a
    TLS request the SuperNode signs and the SuperLink checks: at 0.2 s the Flower step took 1.8x the CPU)."""

    def __init__(self, root: Path, poll: float | None = None):
        self.root = root
        self.poll = poll
        self.home = root / "flwr_home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.procs: dict[str, subprocess.Popen] = {}
        self.env = {**os.environ, "FLWR_HOME": str(self.home), "FLWR_TELEMETRY_ENABLED": "0",
                    "FLWR_DISABLE_UPDATE_CHECK": "1", "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
        if poll is not None:
            self.env["FLWR_SUPEREXEC_TASK_POLL_INTERVAL"] = str(poll)   # Flower reads it (0.01-60 s)

    def _start(self, name: str, cmd: list[str]) -> subprocess.Popen:
        log = open(self.root / f"{name}.log", "w")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=self.root,
                                start_new_session=True)
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        return (self.root / f"{name}.log").read_text(errors="replace")

    def wait_for(self, name: str, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log(name):
            if self.procs[name].poll() is not None or time.monotonic() > deadline:
                raise MessageError(f"{name} did not log {text!r} within {timeout:.0f} s: {self.log(name)[-3000:]}")
            time.sleep(0.2)

    def superlink(self, tls: dict[str, Path]) -> None:
        self.ca = tls["ca.crt"]
        self._start("superlink", [str(BIN / "flower-superlink"), "--ssl-ca-certfile", str(tls["ca.crt"]),
                                  "--ssl-certfile", str(tls["superlink.crt"]), "--ssl-keyfile", str(tls["superlink.key"]),
                                  "--enable-supernode-auth", "--disable-runtime-dependency-installation",
                                  "--host", "127.0.0.1", "--port", str(self.port)])
        (self.home / "config.toml").write_text(
            f'[superlink]\ndefault = "local"\n[superlink.local]\naddress = "127.0.0.1:{self.port}"\n'
            f'root-certificates = "{tls["ca.crt"]}"\n')
        self.wait_for("superlink", "Application startup complete")

    def flwr(self, *args, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run([str(BIN / "flwr"), *args], capture_output=True, text=True, env=self.env,
                              cwd=self.root, timeout=timeout)

    def register(self, public_key: Path) -> None:
        res = self.flwr("supernode", "register", str(public_key), "local")
        if res.returncode != 0 or "registered successfully" not in res.stdout:
            raise MessageError(f"flwr supernode register {public_key}: {res.stdout[-2000:]} {res.stderr[-2000:]}")

    def supernode(self, name: str, private_key: Path, node_config: dict, ca: Path | None = None) -> subprocess.Popen:
        cfg = " ".join(f'{k}="{v}"' for k, v in node_config.items())
        binary = [str(BIN / "flower-supernode")] if self.poll is None else [
            sys.executable, "-m", "vertisynth.deploy.flower.loopback", "supernode", str(self.poll)]
        return self._start(f"node_{name}", [
            *binary, "--superlink", f"127.0.0.1:{self.port}",
            "--root-certificates", str(ca or self.ca), "--auth-supernode-private-key", str(private_key),
            "--node-config", cfg, "--port", str(free_port()), "--max-wait-time", "60"])

    @staticmethod
    def _run_config(run_config: dict) -> str:
        return " ".join(f'{k}="{v}"' if isinstance(v, str) else f"{k}={v}" for k, v in run_config.items())

    def run(self, app: Path, run_config: dict, timeout: float = 400) -> subprocess.CompletedProcess:
        return self.flwr("run", str(app), "local", "--run-config", self._run_config(run_config), "--stream",
                         timeout=timeout)

    def start_run(self, app: Path, run_config: dict) -> subprocess.Popen:
        """`flwr run` in the background (its log stream to `flwr_run.log`)."""
        return self._start("flwr_run", [str(BIN / "flwr"), "run", str(app), "local", "--run-config",
                                        self._run_config(run_config), "--stream"])

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name)
        try:
            os.killpg(proc.pid, signal.SIGKILL)   # the group this test started: the node and its SuperExec
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)

    def close(self) -> None:
        for name in list(self.procs):
            self.stop(name)
        for pid_file in self.root.rglob("*.pid"):   # party workers the bridge started (their own sessions)
            try:
                os.killpg(int(pid_file.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError, PermissionError):
                pass


def _supernode_polling_every(poll: float) -> None:
    """`flower-supernode` with its idle sleeps (3 s after a pull that found nothing, 0.5 s waiting for a reply)
    capped at `poll`: Flower hard-codes them in this one module, so its `time` is wrapped, nothing else."""
    import flwr.supernode.start_client_internal as node
    from flwr.supernode.cli import flower_supernode

    if node.time is not time:
        raise RuntimeError("flwr.supernode.start_client_internal no longer sleeps through `time`: update loopback.py")

    class _Time:
        def __getattr__(self, name: str):
            return getattr(time, name)

        @staticmethod
        def sleep(seconds: float) -> None:
            time.sleep(min(seconds, poll))

    node.time = _Time()
    sys.argv[0] = "flower-supernode"
    sys.exit(flower_supernode())


if __name__ == "__main__" and sys.argv[1:2] == ["supernode"]:
    # python -m vertisynth.deploy.flower.loopback supernode POLL <flower-supernode arguments>
    _poll = float(sys.argv[2])
    del sys.argv[1:3]
    _supernode_polling_every(_poll)
