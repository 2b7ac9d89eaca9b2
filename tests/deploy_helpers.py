"""Shared helpers of the cross-machine tests: identities, a roster in the config, roles as real processes.

Each role runs in an OS process of its own, forked from a warm interpreter (forked_cli.py); a test that uses the
`cold_start` fixture starts every one as `python -m vertisynth.cli` instead (one such flow per deployment kind), and
one that uses `in_process` runs `cli` and `parallel`'s roles in threads of the test's process (`in_threads`: flows
whose deployment kind another test already runs as processes)."""
import subprocess
import sys

import forked_cli

COLD = False   # True (the cold_start fixture): real `python -m vertisynth.cli` subprocesses
THREADS = False   # True (the in_process fixture): `cli` and `parallel` run each role in a thread here (in_threads)

SECRET = "9f1c2b7a4e6d8c0b5a3f1e2d7c9b8a60"   # an explicit test secret (128 bits), not the config seed


def popen(args, cwd=None, env=None):
    """Start `vertisynth ARGS` in a process of its own (Popen-like: communicate, returncode, kill); under THREADS in
    a thread of this process (`InThread`)."""
    if THREADS:
        assert env is None, "a role in a thread runs in this process's environment"
        return InThread(args, cwd)
    if COLD:
        return subprocess.Popen([sys.executable, "-m", "vertisynth.cli", *args], cwd=cwd, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return forked_cli.Forked(args, cwd=cwd, env=env)


def cli(*args, cwd=None, ok=True, timeout=180, env=None):
    if THREADS:
        import os

        assert env is None, "a role in a thread runs in this process's environment"
        code, out, err = in_threads([args], cwd or os.getcwd(), timeout)[0]
        res = subprocess.CompletedProcess(list(args), code, out, err)
    elif COLD:
        res = subprocess.run([sys.executable, "-m", "vertisynth.cli", *args], capture_output=True, text=True,
                             cwd=cwd, timeout=timeout, env=env)
    else:
        res = forked_cli.run(args, cwd=cwd, env=env, timeout=timeout)
    if ok:
        assert res.returncode == 0, res.stderr
    return res


def parallel(argvs, cwd, timeout=180):
    if THREADS:
        return in_threads(argvs, cwd, timeout)
    procs = [popen(a, cwd) for a in argvs]
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=timeout))
        except subprocess.TimeoutExpired:
            p.kill()
            outs.append(p.communicate())
    return [(p.returncode, o, e) for p, (o, e) in zip(procs, outs)]


class InThread:
    """`popen`'s form under THREADS: the role runs through `in_threads` in a thread started here, while the test
    goes on (files a message the role waits for...); `communicate` waits for it. A thread cannot be killed: `kill`
    leaves the role to its own `--timeout` (give it one), and a test that must stop a waiting role early forks it."""

    def __init__(self, args, cwd=None, timeout=180):
        import os
        import threading

        self.args, self.returncode, self._result = list(args), None, []
        self._thread = threading.Thread(target=lambda: self._result.append(
            in_threads([self.args], cwd or os.getcwd(), timeout)[0]), daemon=True)
        self._thread.start()

    def poll(self):
        if not self._thread.is_alive() and self._result:
            self.returncode = self._result[0][0]
        return self.returncode

    def communicate(self, timeout=None):
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise subprocess.TimeoutExpired(self.args, timeout)
        self.returncode, out, err = self._result[0] if self._result else (1, "", "the role's thread failed")
        return out, err

    def kill(self):
        pass


class _PerThread:
    """sys.stdout / sys.stderr while `in_threads` runs: what a role's thread writes goes to that role's buffer, the
    rest to the stream it replaced."""

    encoding, errors = "utf-8", "strict"

    def __init__(self, fallback):
        self.fallback, self.buffers = fallback, {}

    def _target(self):
        import threading

        return self.buffers.get(threading.get_ident(), self.fallback)

    def write(self, text):
        return self._target().write(text)

    def flush(self):
        self._target().flush()

    def isatty(self):
        return False

    def writable(self):
        return True



def move_one_cell_of_every_answer(monkeypatch, by=50.0):
    """Every cross-party answer of a vertical oracle with `by` added to its first cell (in this process), so a test can
    show a twin's release reads its answers. One cell, not all: a uniform shift can vanish where an answer is made
    consistent with known margins (privmrf's)."""
    import attrs
    import numpy as np

    from vertisynth.vertical import oracle

    answer = oracle.VerticalOracle._answer

    def moved(self, *args):
        out = []
        for m in answer(self, *args):
            values = np.array(m.values, float)
            values.flat[0] += by
            out.append(attrs.evolve(m, values=values))
        return out
    monkeypatch.setattr(oracle.VerticalOracle, "_answer", moved)

_IN_THREADS = False


def _serialised(parse, lock):
    """`ast.parse` behind one lock: CPython 3.11's AST constructor keeps its recursion depth per interpreter, not per
    thread, so two threads parsing at once can fail with `SystemError: AST constructor recursion depth mismatch`
    (cpython gh-106905; seen here once, a collab role's thread dying in test_one_writer). Roles in threads parse
    when a traceback is formatted (3.11's error carets) or a lazily imported module is rewritten by pytest."""
    def locked(*args, **kwargs):
        with lock:
            return parse(*args, **kwargs)
    locked.__wrapped__ = parse
    return locked


def in_threads(argvs, cwd, timeout=180):
    """`parallel`'s roles in this process, a thread each: the same click commands and code path, meeting only
    through the exchange, without a process each (for the flows whose deployment kind another test already runs as
    processes; issue 33: "one end-to-end subprocess flow per deployment kind, the rest in process"). Relative paths
    resolve against `cwd`, as in `parallel`; each role's stdout and stderr are its own. (exit status, stdout,
    stderr) per role, as `parallel` returns. A test may lower the Paillier key floor (paillier.MIN_KEY_BITS) here;
    a forked role keeps it too (forked_cli._key_floor), a cold one does not."""
    import ast
    import io
    import os
    import threading
    import time
    import traceback

    import click

    from vertisynth.cli.main import main

    global _IN_THREADS
    # one group of roles at a time: this swaps the process's cwd and streams (an InThread role and a second group
    # overlapping would restore each other's)
    assert not _IN_THREADS, "in_threads: another group of roles is still running in this process"
    results = [None] * len(argvs)
    out, err = _PerThread(sys.stdout), _PerThread(sys.stderr)

    def role(i, argv):
        me = threading.get_ident()
        out.buffers[me], err.buffers[me] = io.StringIO(), io.StringIO()
        try:
            main.main(args=list(argv), prog_name=forked_cli.PROG, standalone_mode=False)
            code = 0
        except SystemExit as exc:   # the commands' `fail`: its line is on this role's stderr
            code = exc.code if isinstance(exc.code, int) else 1
        except click.ClickException as exc:
            exc.show(err.buffers[me])
            code = exc.exit_code
        except BaseException:   # noqa: BLE001 - reported as the role's failure
            err.buffers[me].write(traceback.format_exc())
            code = 1
        results[i] = (code, out.buffers[me].getvalue(), err.buffers[me].getvalue())

    old = os.getcwd(), sys.stdout, sys.stderr, ast.parse
    _IN_THREADS = True
    try:
        os.chdir(cwd)
        sys.stdout, sys.stderr = out, err
        ast.parse = _serialised(old[3], threading.RLock())
        threads = [threading.Thread(target=role, args=(i, a), daemon=True) for i, a in enumerate(argvs)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + timeout   # one wall bound for all the roles together
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
    finally:
        os.chdir(old[0])
        sys.stdout, sys.stderr, ast.parse = old[1], old[2], old[3]
        _IN_THREADS = False
    return [r if r is not None else (1, "", f"still running after {timeout} s") for r in results]


SERVER_KEY = ["--key", "private_server/server_signing.pem"]   # the server's signing key (with_roster makes it)


def with_roster(tmp_path, config_text, names, private=lambda n: f"private_{n}"):
    """`party init` for each name and for the server (it signs the run key the parties seal to), then the config
    with a [roster] pinning their public keys."""
    lines = []
    for n in [*names, *([] if "server" in names else ["server"])]:
        res = cli("party", "init", "--party", n, "--out", private(n), cwd=tmp_path)
        lines.append(res.stdout.strip().splitlines()[-1])
    return config_text + "\n[roster.keys]\n" + "\n".join(lines) + "\n"


def hello_all(tmp_path, names, config="job.toml", exchange="shared", secret=None, timeout=30, ok=True,
              private=lambda n: f"private_{n}"):
    extra = ["--test-secret", secret] if secret else []
    res = parallel([["party", "hello", config, "--party", n, "--exchange", exchange, "--out", private(n),
                     "--timeout", str(timeout), *extra] for n in names], tmp_path)
    if ok:
        assert all(r[0] == 0 for r in res), res
    return res


def publish_key(tmp_path, config="job.toml", exchange="shared", out="out", ok=True):
    """`vertisynth server --publish-key-only`: the run key the parties seal to, before steps run one by one."""
    return cli("server", config, "--exchange", exchange, "--out", out, *SERVER_KEY, "--publish-key-only",
               "--timeout", "30", cwd=tmp_path, ok=ok)


def keys_all(tmp_path, names, config="job.toml", exchange="shared", timeout=30, ok=True):
    res = parallel([["party", "keys", config, "--party", n, "--exchange", exchange, "--out", f"private_{n}",
                     "--timeout", str(timeout)] for n in names], tmp_path)
    if ok:
        assert all(r[0] == 0 for r in res), res
    return res


def relay_reads(data: bytes, depth: int = 0) -> bytes:
    """Every byte a relay can read out of `data`: the bytes themselves and, where they are a message (a compressed
    npz), every member's name and content, recursively (an answer nests the measure's messages)."""
    import io
    import zipfile

    import numpy as np
    try:
        z = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        return data
    out = [data]
    for member in z.namelist():
        raw = z.read(member)
        out += [member.encode(), raw]
        try:
            arr = np.load(io.BytesIO(raw), allow_pickle=False)
        except ValueError:
            continue
        if arr.dtype == np.uint8 and depth < 4:
            out.append(relay_reads(arr.tobytes(), depth + 1))
    return b"".join(out)


def collab_census_job(folder, n, iters=30, preprocessing=None, simulation=True, extra=""):
    """A [collab] job on census (2 custodians from `n` rows split at random, 2 servers, a publisher): the custodians'
    CSVs written into `folder` and the config text without its [roster] (each test pins the keys it makes)."""
    import numpy as np

    from vertisynth.collab.horizontal import simulate_custodians
    from vertisynth.plugins.datasets.census import CensusConfig, load

    csvs = {}
    parts = simulate_custodians(load(CensusConfig(n=n)).frame, 2, "random", np.random.default_rng(1))
    for part, name in zip(parts.values(), "AB"):
        csvs[name] = folder / f"{name}.csv"
        part.to_csv(csvs[name], index=False)
    noise = 'noise = "simulation"   # the servers run with --seed: the release equals the one-process simulation\n'
    text = f"""seed = 3
{noise if simulation else ""}budget = {{ epsilon = 5.0, delta = 1e-5 }}
[dataset]
name = "census"
params = {{ n = {n} }}
[synthesizer]
use = "private_pgm"
params = {{ measurements = "workload", iters = {iters}, workload = [["age", "income"], ["sex", "income"]] }}
[[evaluators]]
use = "workload_error"
[collab]
files = {{ A = "{csvs['A']}", B = "{csvs['B']}" }}
servers = 2
numeric = {{ age = [17, 90] }}
bins = 4
{f'preprocessing = "{preprocessing}"' + chr(10) if preprocessing else ""}{extra}"""
    return text, csvs
