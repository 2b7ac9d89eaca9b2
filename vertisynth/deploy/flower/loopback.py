"""A Flower deployment on 127.0.0.1, for the tests and benchmarks/network.py: a SuperLink with TLS and SuperNode
authentication, one SuperNode per party, each a separate OS process group, Flower's own commands exactly as the
README runs them on three machines. Every wait is bounded; `close` kills the process groups started here (and
the party workers their bridges started), by their ids.

`warm=True` (the tests): Flower still starts one ClientApp process per message and one ServerApp process per run,
each talking to its SuperNode / SuperLink over the Runtime API with its own token, but forks it from a process
that imported flwr and vertisynth once (a forkserver in the SuperExec) instead of starting a cold interpreter:
about 2 CPU s a message less (docs/lab/ci-speed-2026-11-28-flower.md)."""
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
MODULE = "vertisynth.deploy.flower.loopback"   # this file as `python -m` runs it (its __name__ is "__main__" there)
PARENT = "VERTISYNTH_LOOPBACK_PARENT"   # the pid of the process whose Deployment started this one (exit_with_parent)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def slowdown(cpu: float = 0.3) -> float:
    """Seconds of wall one second of CPU takes a process here now (>= 1; about load / cores on a busy machine):
    `cpu` s of this thread's CPU in a busy loop, timed. The tests scale their wall-clock bounds by it, so the load
    of a shared machine, not a fixed guess, sets how long they wait."""
    t0, c0 = time.monotonic(), time.thread_time()
    while time.thread_time() - c0 < cpu:
        pass
    return max(1.0, (time.monotonic() - t0) / cpu)


class Deployment:
    """`poll`: the SuperNodes' idle poll of the SuperLink and their SuperExec's task poll, in seconds. None keeps
    Flower's (3 s and 1 s: a node that found no message sleeps 3 s, so each step of a run waits 1.5 s on average
    per node for nothing); the tests set 0.5: the same messages, less waiting between them, and more pulls (each a
    TLS request the SuperNode signs and the SuperLink checks: at 0.2 s the Flower step took 1.8x the CPU).
    Its waits for Flower's processes to start scale with the machine's `slowdown()`, measured when it starts."""

    def __init__(self, root: Path, poll: float | None = None, warm: bool = False):
        self.root = root
        self.poll = poll
        self.warm = warm
        self.slowdown = slowdown()
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
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**self.env, PARENT: str(os.getpid())},
                                cwd=self.root, start_new_session=True)
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        return (self.root / f"{name}.log").read_text(errors="replace")

    def wait_for(self, name: str, text: str, timeout: float = 60) -> None:
        timeout *= self.slowdown   # seconds on a quiet machine
        deadline = time.monotonic() + timeout
        while text not in self.log(name):
            if self.procs[name].poll() is not None or time.monotonic() > deadline:
                raise MessageError(f"{name} did not log {text!r} within {timeout:.0f} s: {self.log(name)[-3000:]}")
            time.sleep(0.2)

    def superlink(self, tls: dict[str, Path]) -> None:
        self.ca = tls["ca.crt"]
        binary = [sys.executable, "-m", MODULE, "superlink"] if self.warm else [str(BIN / "flower-superlink")]
        self._start("superlink", [*binary, "--ssl-ca-certfile", str(tls["ca.crt"]),
                                  "--ssl-certfile", str(tls["superlink.crt"]), "--ssl-keyfile", str(tls["superlink.key"]),
                                  "--enable-supernode-auth", "--disable-runtime-dependency-installation",
                                  "--host", "127.0.0.1", "--port", str(self.port)])
        (self.home / "config.toml").write_text(
            f'[superlink]\ndefault = "local"\n[superlink.local]\naddress = "127.0.0.1:{self.port}"\n'
            f'root-certificates = "{tls["ca.crt"]}"\n')
        self.wait_for("superlink", "Application startup complete")

    def flwr(self, *args, timeout: float = 60) -> subprocess.CompletedProcess:
        try:
            return subprocess.run([str(BIN / "flwr"), *args], capture_output=True, text=True, env=self.env,
                                  cwd=self.root, timeout=timeout)
        except subprocess.TimeoutExpired as exc:   # say what was waited for, and what it had said so far
            said = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
            raise MessageError(f"`flwr {' '.join(map(str, args[:2]))}` did not finish within {timeout:.0f} s: "
                               f"{said[-3000:]}") from None

    def register(self, *public_keys: Path, timeout: float = 60) -> None:
        """`flwr supernode register KEY local` for each key, all at once (each a cold `flwr` process)."""
        timeout *= self.slowdown   # seconds on a quiet machine
        procs = {key: subprocess.Popen([str(BIN / "flwr"), "supernode", "register", str(key), "local"],
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self.env,
                                       cwd=self.root) for key in public_keys}
        deadline = time.monotonic() + timeout
        try:
            for key, proc in procs.items():
                try:
                    said, _ = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    raise MessageError(f"`flwr supernode register {key}` did not finish within {timeout:.0f} s") from None
                if proc.returncode != 0 or "registered successfully" not in said:
                    raise MessageError(f"flwr supernode register {key}: {said[-2000:]}")
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(timeout=10)

    def supernode(self, name: str, private_key: Path, node_config: dict, ca: Path | None = None) -> subprocess.Popen:
        cfg = " ".join(f'{k}="{v}"' for k, v in node_config.items())
        binary = [str(BIN / "flower-supernode")] if self.poll is None and not self.warm else [
            sys.executable, "-m", MODULE, "supernode", str(self.poll or 0), "warm" if self.warm else "cold"]
        return self._start(f"node_{name}", [
            *binary, "--superlink", f"127.0.0.1:{self.port}",
            "--root-certificates", str(ca or self.ca), "--auth-supernode-private-key", str(private_key),
            "--node-config", cfg, "--port", str(free_port()), "--max-wait-time", "60"])

    @staticmethod
    def _run_config(run_config: dict) -> str:
        return " ".join(f'{k}="{v}"' if isinstance(v, str) else f"{k}={v}" for k, v in run_config.items())

    def run(self, app: Path, run_config: dict, timeout: float = 400) -> subprocess.CompletedProcess:
        """`flwr run APP --stream`: returns when the run has ended; a MessageError after `timeout` s of a quiet
        machine (times the slowdown measured now: the run's processes share the machine with whatever else runs)."""
        slow = slowdown()
        try:
            return self.flwr("run", str(app), "local", "--run-config", self._run_config(run_config), "--stream",
                             timeout=timeout * slow)
        except MessageError as exc:
            raise MessageError(f"{exc} ({timeout:.0f} s x slowdown {slow:.1f} measured at its start); the SuperLink: "
                               f"{self.log('superlink')[-2000:]}") from None

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


def exit_with_parent(every: float = 1.0) -> bool:
    """In a process a Deployment started (PARENT names its pid; a session of its own, so a signal to the test's
    group never reaches it): kill this process group once that parent is gone. A test process killed from outside
    (CI's `timeout`, a SIGKILL) never runs `close`, and the SuperLink and SuperNodes it left would poll each other
    for ever. The variable is taken out of the environment, so the processes this one starts (the SuperExec, the
    apps) do not arm a watchdog of their own against the wrong parent. True when armed."""
    parent = os.environ.pop(PARENT, "")
    if not parent.isdigit() or os.getppid() != int(parent):
        return False

    def watch() -> None:
        while os.getppid() == int(parent):   # reparented (to init or a subreaper) once the parent has exited
            time.sleep(every)
        os.killpg(os.getpgrp(), signal.SIGKILL)

    import threading
    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()
    return True


def _supernode_polling_every(poll: float, warm: bool = False) -> None:
    """`flower-supernode` with its idle sleeps (3 s after a pull that found nothing, 0.5 s waiting for a reply)
    capped at `poll` (0: Flower's own), its SuperExec warm (`warm`, see _superexec): Flower hard-codes both in this
    one module, so its `time` and `subprocess` are wrapped, nothing else."""
    import flwr.supernode.start_client_internal as node
    from flwr.supernode.cli import flower_supernode

    if node.time is not time or node.subprocess is not subprocess:
        raise RuntimeError("flwr.supernode.start_client_internal no longer sleeps through `time` or starts its "
                           "SuperExec through `subprocess`: update loopback.py")

    class _Time:
        def __getattr__(self, name: str):
            return getattr(time, name)

        @staticmethod
        def sleep(seconds: float) -> None:
            time.sleep(min(seconds, poll))

    if poll:
        node.time = _Time()
    if warm:
        node.subprocess = _StartsWarmSuperExec("flwr-clientapp")
    sys.argv[0] = "flower-supernode"
    sys.exit(flower_supernode())


# the app processes a SuperExec launches: Flower's entry point, and the vertisynth component it loads
APPS = {"flwr-clientapp": ("flwr.supernode.cli", "flwr_clientapp", "vertisynth.deploy.flower.clientapp"),
        "flwr-serverapp": ("flwr.superlink.cli", "flwr_serverapp", "vertisynth.deploy.flower.serverapp")}


def _warm_superexec(command: list[str], app: str) -> list[str]:
    """Flower's `flower-superexec ARGS` command as this module's warm SuperExec for `app`, ARGS unchanged."""
    if not command or command[0] != "flower-superexec":
        raise RuntimeError(f"Flower no longer starts its SuperExec as `flower-superexec ...` ({command[:1]}): "
                           "update loopback.py")
    return [sys.executable, "-m", MODULE, "superexec", app, *command[1:]]


class _StartsWarmSuperExec:
    """The `subprocess` of the Flower module that starts the SuperExec: its `flower-superexec ...` becomes this
    module's warm SuperExec for `app` (_warm_superexec); everything else is subprocess's own."""

    def __init__(self, app: str) -> None:
        self.app = app

    def __getattr__(self, name: str):
        return getattr(subprocess, name)

    def Popen(self, command, *args, **kwargs):   # noqa: N802 - subprocess's name
        return subprocess.Popen(_warm_superexec(command, self.app), *args, **kwargs)


def _superlink_warm() -> None:
    """`flower-superlink` whose SuperExec (it launches a ServerApp process per run) is warm (_superexec)."""
    import importlib

    link = importlib.import_module("flwr.superlink.cli.flower_superlink")   # the package's name is its function
    if link.subprocess is not subprocess:
        raise RuntimeError("flwr.superlink.cli.flower_superlink no longer starts its SuperExec through "
                           "`subprocess`: update loopback.py")
    link.subprocess = _StartsWarmSuperExec("flwr-serverapp")
    sys.argv[0] = "flower-superlink"
    sys.exit(link.flower_superlink())


def _run_app(module: str, entry: str, argv: list[str]) -> None:
    """In a process forked from the forkserver: the app's entry point (Flower's own), with Flower's arguments."""
    import importlib

    sys.argv = argv
    getattr(importlib.import_module(module), entry)()


class WarmLauncher:
    """The `subprocess` a SuperExec's SubprocessExecutor launches through: `Popen([app, ...])` becomes a process
    forked from this launcher's forkserver, which imported `preload` once (entry point `module:entry` runs with
    the same argv); any other command, or one with options, is left to subprocess.Popen."""

    def __init__(self, app: str, module: str, entry: str, preload: list[str]) -> None:
        import multiprocessing
        from multiprocessing import forkserver

        self.app, self.module, self.entry = app, module, entry
        self.ctx = multiprocessing.get_context("forkserver")
        self.ctx.set_forkserver_preload(preload)
        forkserver.ensure_running()   # now, so the first message does not wait for the imports

    def __getattr__(self, name: str):
        return getattr(subprocess, name)

    def Popen(self, args, *rest, **kwargs):   # noqa: N802 - subprocess's name
        if not args or args[0] != self.app or rest or kwargs:
            return subprocess.Popen(args, *rest, **kwargs)
        proc = self.ctx.Process(target=_run_app, args=(self.module, self.entry, list(args)), name=self.app)
        proc.start()
        return proc


def _superexec(app: str) -> None:
    """`flower-superexec` that launches each `app` process (the same command, arguments and token Flower gives it)
    as a fork of a forkserver that imported Flower's entry point and vertisynth's component once, not as a cold
    interpreter (about 2 CPU s each, minutes of wall at load 10). Every message still gets a process of its own."""
    import flwr.supercore.superexec.executor.subprocess_executor as executor
    from flwr.supercore.cli import flower_superexec

    if executor.subprocess is not subprocess:
        raise RuntimeError("Flower's SubprocessExecutor no longer launches through `subprocess`: update loopback.py")
    module, entry, component = APPS[app]
    executor.subprocess = WarmLauncher(app, module, entry, [module, component])
    sys.argv[0] = "flower-superexec"
    sys.exit(flower_superexec())


if __name__ == "__main__":
    # python -m vertisynth.deploy.flower.loopback supernode POLL warm|cold <flower-supernode arguments>
    #                                           superlink <flower-superlink arguments>
    #                                           superexec flwr-clientapp|flwr-serverapp <flower-superexec arguments>
    _what = sys.argv[1:2]
    exit_with_parent()
    if _what == ["supernode"]:
        _poll, _warm = float(sys.argv[2]), sys.argv[3] == "warm"
        del sys.argv[1:4]
        _supernode_polling_every(_poll, _warm)
    elif _what == ["superlink"]:
        del sys.argv[1:2]
        _superlink_warm()
    elif _what == ["superexec"] and sys.argv[2:3] and sys.argv[2] in APPS:
        _app = sys.argv[2]
        del sys.argv[1:3]
        _superexec(_app)
    else:
        sys.exit(f"usage: python -m {MODULE} supernode POLL warm|cold ... | superlink ... | "
                 f"superexec {'|'.join(APPS)} ...")
