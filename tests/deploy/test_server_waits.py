"""Issue 30, items 12 and 16 and a traceback: a hello's clock skew is named both ways; `vertisynth server` started
beside the parties waits for them within its timeout (every encoder); a server that sends parties different
clique tables (encoder "he") is named at once, not after the round timeout."""
import json
import threading
import time

import pytest
from deploy_helpers import SERVER_KEY, cli, hello_all, keys_all, parallel, popen, with_roster

from vertisynth.core.envelope import ALL, canonical, seal
from vertisynth.core.errors import MessageError
from vertisynth.core.identity import Identity
from vertisynth.deploy.session import hello
from vertisynth.deploy.transport import FolderTransport
from vertisynth.run.config import load_config

SMALL = """
seed = 5
budget = { epsilon = 8.0, delta = 1e-5 }
[dataset]
name = "csv"
[dataset.params]
path = "not-on-any-machine.csv"
[dataset.params.schema]
a = { kind = "categorical", categories = ["1", "2", "3"] }
b = { kind = "categorical", categories = ["1", "2"] }
c = { kind = "categorical", categories = ["1", "2", "3"] }
[[parties]]
name = "hospital"
attributes = ["a", "b"]
[[parties]]
name = "insurer"
attributes = ["c"]
[synthesizer]
use = "vertimrf"
params = { ENCODER, local_params = { iters = 5, refine_iters = 2 }, iters = 5, rounds = 1 }
"""
PARTIES = ["hospital", "insurer"]


def _csvs(tmp_path, n=160):
    import numpy as np
    import pandas as pd
    rng = np.random.default_rng(1)
    pd.DataFrame({"a": rng.integers(1, 4, n), "b": rng.integers(1, 3, n)}).to_csv(tmp_path / "hospital.csv", index=False)
    pd.DataFrame({"c": rng.integers(1, 4, n)}).to_csv(tmp_path / "insurer.csv", index=False)


@pytest.mark.parametrize("offset, words", [(7200.0, "behind ours"), (-900.0, "ahead of ours")])
def test_a_hello_from_a_skewed_clock_is_refused_naming_the_skew(tmp_path, offset, words):
    ids = {p: Identity.generate(p) for p in PARTIES}
    for p in PARTIES:
        ids[p].save(tmp_path / p / f"{p}_signing.pem")
    text = SMALL.replace("ENCODER", 'encoder = "grr"') + "[roster.keys]\n" + "".join(
        f'{p} = "{ids[p].public_text()}"\n' for p in PARTIES)
    (tmp_path / "job.toml").write_text(text)
    config = load_config(tmp_path / "job.toml")
    from vertisynth.deploy.session import config_fingerprint, flat, public_config
    # the insurer's hello, dated by a clock `offset` s behind (positive) or ahead (negative) of ours
    body = canonical({"nonce": "00" * 16, "created": time.time() - offset,
                      "settings": flat(public_config(config)), "test": False})
    FolderTransport(tmp_path / "shared").send("hello__insurer__to__all__0", seal(
        ids["insurer"], "", config_fingerprint(config), [ALL], "hello", "hello", body))
    with pytest.raises(MessageError) as err:
        hello(config, ids["hospital"], FolderTransport(tmp_path / "shared"), PARTIES, tmp_path / "hospital", None, 5)
    line = str(err.value)
    assert words in line and "clock" in line and f"{abs(offset):.0f} s" in line, line


@pytest.mark.parametrize("encoder", ['encoder = "grr"', "encoder_params = { t = 64 }"])
def test_a_server_started_beside_the_parties_waits_for_them(tmp_path, encoder):
    (tmp_path / "job.toml").write_text(with_roster(tmp_path, SMALL.replace("ENCODER", encoder), PARTIES))
    _csvs(tmp_path)
    server = popen(["server", "job.toml", "--exchange", "shared", "--out", "out", *SERVER_KEY, "--timeout", "150",
                    "-q"], tmp_path)
    try:
        time.sleep(5)   # the server gave up at once ("no envelopes", then "no messages from parties")
        assert server.poll() is None, server.communicate()
        hello_all(tmp_path, PARTIES)
        if "t = 64" in encoder:
            keys_all(tmp_path, PARTIES)
        res = parallel([["party", "synth", "job.toml", "--party", p, "--csv", f"{p}.csv", "--exchange", "shared",
                         "--out", f"private_{p}", "--timeout", "60", "-q"] for p in PARTIES], tmp_path)
        assert all(r[0] == 0 for r in res), res
        out, err = server.communicate(timeout=150)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert server.returncode == 0, err
    assert (tmp_path / "out" / "synthetic.csv").is_file()


def test_a_server_that_sends_parties_different_clique_tables_is_named_at_once(tmp_path, monkeypatch, in_process):
    pytest.importorskip("phe")
    pytest.importorskip("gmpy2")
    from vertisynth.deploy.party import run_party
    from vertisynth.deploy.session import RunState, Session, config_fingerprint, read_hellos, roster_of
    from vertisynth.plugins.encoders.he import paillier

    # every role runs in this process (`in_process`: the hellos, the run key): 512-bit test keys (the tables' check
    # comes before any decryption and does not depend on the key's size; the 2048-bit run across processes is
    # tests/deploy/test_he_deploy.py's)
    monkeypatch.setattr(paillier, "MIN_KEY_BITS", 512)
    he = ('encoder = "he", bins = 1000, encoder_params = { crypto = "real", key_bits = 512, cliques = 1, '
          'selection_pairs = 1, workers = 1, round_timeout = 40.0 }')
    (tmp_path / "job.toml").write_text(with_roster(tmp_path, SMALL.replace("ENCODER", he), PARTIES))
    _csvs(tmp_path, 60)
    hello_all(tmp_path, PARTIES)
    cli("server", "job.toml", "--exchange", "shared", "--out", "out", *SERVER_KEY, "--publish-key-only", cwd=tmp_path)
    config = load_config(tmp_path / "job.toml")
    errors, t0 = {}, time.monotonic()

    def party(p):
        try:
            run_party(config, p, tmp_path / "shared", tmp_path / f"private_{p}", csv=tmp_path / f"{p}.csv", timeout=30)
        except Exception as exc:   # noqa: BLE001 - what each party said
            errors[p] = exc

    threads = [threading.Thread(target=party, args=(p,)) for p in PARTIES]
    for t in threads:
        t.start()
    # a malicious server: after the selection stage, other tables to each party
    ex = FolderTransport(tmp_path / "shared")
    deadline = time.monotonic() + 120
    while len(ex.names("he-done-selection__*")) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    run = read_hellos(config, ex, PARTIES, "server")
    me = Identity.load("server", tmp_path / "private_server" / "server_signing.pem")
    sess = Session(me, roster_of(config), ex, RunState("server", run, config_fingerprint(config), tuple(PARTIES)),
                   sealed=True)   # sealed to each party's run key, as the honest server's queries
    for p, query in (("hospital", [[["a"], ["c"]]]), ("insurer", [[["b"], ["c"]]])):
        sess.send("he-queries", [p], "he_queries", canonical({"stage": "cliques", "queries": query}), tag=p)
    for t in threads:
        t.join(120)
    assert time.monotonic() - t0 < 120 and set(errors) == set(PARTIES), errors
    for p, exc in errors.items():
        assert isinstance(exc, MessageError) and "different tables to different parties" in str(exc), exc
