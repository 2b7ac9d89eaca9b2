"""`vertisynth ...` as a separate OS process forked from a warm interpreter, for the cross-process tests.

A fresh `python -m vertisynth.cli` spends 1-2 CPU s importing numpy, pandas and the engine before it does any
work, and more on first use of scipy, Dask or a plugin; a party/server flow starts ten or more of them.
Here each command still runs in a process of its own (its own memory, its own exit status, running at the same
time as the others and meeting them only through the exchange), forked from a forkserver that imported those
modules once per test session (PRELOAD, forked_warm.py): the same click command, the same code path, without
the start-up. Also forked: a flower bridge's step (`start_bridge_step`, the `forked_bridges` fixture) and
`python SCRIPT ...` (`run(..., script=)`). The flows that prove the installed entry point itself (cold starts)
keep real subprocesses, one per deployment kind: tests/deploy/test_deploy.py (folder, the `cold_start`
fixture), test_collab_distributed.py (collab, `cold_start`), test_flower_relay.py's VertiMRF flow (the relay
bridges' real workers), and tests/cli/test_startup.py (import time).
"""
from __future__ import annotations

import atexit
import multiprocessing
import os
import subprocess
import sys
import tempfile
import threading
from multiprocessing import popen_forkserver, process, spawn
from pathlib import Path

# Imported once by the forkserver (not by pytest): every command's heavy imports.
PRELOAD = ["numpy", "pandas", "vertisynth.cli.main", "vertisynth.run.pipeline", "vertisynth.deploy.cli",
           "vertisynth.deploy.party", "vertisynth.deploy.server", "vertisynth.deploy.session",
           "vertisynth.collab.cli", "forked_warm"]   # forked_warm: scipy, sklearn, Dask, rbcl, every plugin
PROG = "python -m vertisynth.cli"   # the name click prints in usage lines for `python -m vertisynth.cli`
_ctx = None


def _context():
    global _ctx
    if _ctx is None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload([__name__, *PRELOAD])
        # Python 3.11's forkserver imports its preload before it takes the caller's sys.path, so without this
        # folder on its PYTHONPATH `forked_warm` (and this module) were silently not preloaded
        from multiprocessing import forkserver

        old = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parent), *([old] if old else [])])
        try:
            forkserver.ensure_running()
        finally:
            if old is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = old
        _ctx = ctx
        atexit.register(_stop)
    return _ctx


def _stop() -> None:
    """Stop and reap the forkserver at exit: no orphan, and its CPU time (the commands') counts to this process's
    children, as a subprocess's would (`/usr/bin/time pytest` measures it)."""
    from multiprocessing import forkserver

    forkserver._forkserver._stop()


def _key_floor() -> int | None:
    """The Paillier key floor in this (the test's) process, where a test may have lowered it (monkeypatch, e.g. to
    512 bits): a forked command keeps it, as a role in a thread (deploy_helpers.in_threads) does. None where the he
    encoder was never imported here (nothing lowered it)."""
    paillier = sys.modules.get("vertisynth.plugins.encoders.he.paillier")
    return None if paillier is None else paillier.MIN_KEY_BITS


def _child(args: list[str], cwd: str, env: dict[str, str], out: str, err: str, append: bool = False,
           script: str | None = None, key_floor: int | None = None) -> None:
    """Runs in the forked process: the caller's directory and environment, stdout/stderr to files, the caller's
    Paillier key floor (`_key_floor`), then the command as `python -m vertisynth.cli` runs it, or `python SCRIPT
    ARGS` (SystemExit carries its status to the exit code)."""
    if key_floor is not None:
        from vertisynth.plugins.encoders.he import paillier

        paillier.MIN_KEY_BITS = key_floor
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    mode = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    for fd, path in ((1, out), (2, err)):
        f = os.open(path, mode, 0o600)
        os.dup2(f, fd)
        os.close(f)
    sys.argv = [script or PROG, *args]
    if "fsspec.config" in sys.modules:   # preloaded (forked_warm): read its FSSPEC_* settings now, as an import would
        from fsspec import config as fsspec_config

        fsspec_config.conf.clear()
        fsspec_config.set_conf_files(os.environ.get("FSSPEC_CONFIG_DIR", fsspec_config.default_conf_dir),
                                     fsspec_config.conf)
        fsspec_config.set_conf_env(fsspec_config.conf, os.environ)
    try:
        if script is not None:
            import runpy

            sys.path.insert(0, os.path.dirname(os.path.abspath(script)))   # as `python SCRIPT` puts it first
            runpy.run_path(script, run_name="__main__")
            return
        from vertisynth.cli.main import main

        main(args, prog_name=PROG)
    finally:
        atexit._run_exitfuncs()   # a fresh interpreter runs these at exit; a multiprocessing child does not


def _worker_child(args: list[str], cwd: str, env: dict[str, str], log: str, rc_file: str,
                  key_floor: int | None = None) -> None:
    """A flower bridge's worker (vertisynth/deploy/flower/worker.py) forked: a session of its own (the bridge's
    abort signals its group), output appended to the step's log, and the exit status written to RC_FILE
    atomically when the command ends."""
    os.setsid()
    rc = 1
    try:
        _child(args, cwd, env, log, log, append=True, key_floor=key_floor)
        rc = 0
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        raise
    finally:
        Path(rc_file).with_suffix(".part").write_text(str(rc))
        os.replace(Path(rc_file).with_suffix(".part"), rc_file)


def start_bridge_step(bridge, step: str) -> None:
    """In place of `Bridge._start` (monkeypatched by the `forked_bridges` fixture): the same command, forked
    from the warm forkserver rather than started as `python -m vertisynth.deploy.flower.worker` + a cold CLI."""
    cmd = bridge.command(step)
    head = [sys.executable, "-m", "vertisynth.cli"]
    assert cmd[:3] == head, cmd
    _context()
    proc = _Process(target=_worker_child, args=(cmd[3:], os.getcwd(), dict(os.environ),
                                                str(bridge._file(step, "log")), str(bridge._file(step, "rc")),
                                                _key_floor()))
    proc.start()
    _started.append(proc)
    bridge._file(step, "pid").write_text(str(proc.pid))


_started: list = []


_launching = threading.Lock()


class _Popen(popen_forkserver.Popen):
    """multiprocessing's forkserver start, without re-running the parent's __main__ in the child (as pytest's
    script, or a `python script.py` caller, would be): the command needs nothing from it."""

    def _launch(self, process_obj):
        def no_main(name, real=spawn.get_preparation_data):
            data = real(name)
            data.pop("init_main_from_path", None)
            data.pop("init_main_from_name", None)
            return data

        with _launching:
            spawn.get_preparation_data, real = no_main, spawn.get_preparation_data
            try:
                super()._launch(process_obj)
            finally:
                spawn.get_preparation_data = real


class _Process(process.BaseProcess):
    _start_method = "forkserver"

    @staticmethod
    def _Popen(process_obj):
        return _Popen(process_obj)


class Forked:
    """The part of subprocess.Popen the tests use (text mode, both streams captured)."""

    def __init__(self, args, cwd=None, env=None, stderr_to_stdout=False, script=None):
        self.args = [str(a) for a in args]
        self._dir = tempfile.mkdtemp(prefix="forked-cli-")
        self._out = os.path.join(self._dir, "out")
        self._err = self._out if stderr_to_stdout else os.path.join(self._dir, "err")   # stderr=subprocess.STDOUT
        _context()
        self._proc = _Process(target=_child, args=(
            self.args, str(Path(cwd or os.getcwd()).resolve()), dict(os.environ if env is None else env),
            self._out, self._err, stderr_to_stdout, None if script is None else str(script), _key_floor()))
        self._proc.start()
        self.pid = self._proc.pid
        self.returncode = None

    def poll(self):
        if self.returncode is None and self._proc.exitcode is not None:
            self.returncode = self._proc.exitcode
        return self.returncode

    def wait(self, timeout=None):
        self._proc.join(timeout)
        if self.poll() is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def kill(self):
        self._proc.kill()

    terminate = kill

    def communicate(self, timeout=None):
        self.wait(timeout)
        paths = list(dict.fromkeys((self._out, self._err)))
        outs = [Path(p).read_text() if os.path.exists(p) else "" for p in paths]
        for p in paths:
            if os.path.exists(p):
                os.unlink(p)
        if os.path.isdir(self._dir):
            os.rmdir(self._dir)
        return outs[0], (outs[1] if len(outs) > 1 else None)


def run(args, cwd=None, env=None, timeout=180, script=None) -> subprocess.CompletedProcess:
    """subprocess.run([sys.executable, "-m", "vertisynth.cli", *args], capture_output=True, text=True, ...), or with
    `script`: subprocess.run([sys.executable, script, *args], ...)."""
    proc = Forked(args, cwd, env, script=script)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
