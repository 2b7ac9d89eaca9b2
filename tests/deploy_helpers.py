"""Shared helpers of the cross-machine tests: identities, a roster in the config, roles as real processes.

Each role runs in an OS process of its own, forked from a warm interpreter (forked_cli.py); a test that uses the
`cold_start` fixture starts every one as `python -m vertisynth.cli` instead (one such flow per deployment kind)."""
import subprocess
import sys

import forked_cli

COLD = False   # True (the cold_start fixture): real `python -m vertisynth.cli` subprocesses

SECRET = "9f1c2b7a4e6d8c0b5a3f1e2d7c9b8a60"   # an explicit test secret (128 bits), not the config seed


def popen(args, cwd=None, env=None):
    """Start `vertisynth ARGS` in a process of its own (Popen-like: communicate, returncode, kill)."""
    if COLD:
        return subprocess.Popen([sys.executable, "-m", "vertisynth.cli", *args], cwd=cwd, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return forked_cli.Forked(args, cwd=cwd, env=env)


def cli(*args, cwd=None, ok=True, timeout=180, env=None):
    if COLD:
        res = subprocess.run([sys.executable, "-m", "vertisynth.cli", *args], capture_output=True, text=True,
                             cwd=cwd, timeout=timeout, env=env)
    else:
        res = forked_cli.run(args, cwd=cwd, env=env, timeout=timeout)
    if ok:
        assert res.returncode == 0, res.stderr
    return res


def parallel(argvs, cwd, timeout=180):
    procs = [popen(a, cwd) for a in argvs]
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=timeout))
        except subprocess.TimeoutExpired:
            p.kill()
            outs.append(p.communicate())
    return [(p.returncode, o, e) for p, (o, e) in zip(procs, outs)]


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
