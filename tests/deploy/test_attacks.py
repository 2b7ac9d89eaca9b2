"""The attack suite: every cross-machine message is authenticated and bound to its run; each attack below is
refused with one clear line (exit 2), by the roles' commands exchanging files on this machine (in threads of the test
process: the folder flow as separate processes is test_deploy's)."""
import shutil
import time

import numpy as np
import pandas as pd
import pytest
from deploy_helpers import SECRET, SERVER_KEY, cli, hello_all, keys_all, parallel, publish_key, with_roster

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
params = { encoder_params = { t = 64 }, local_params = { iters = 10, refine_iters = 5 }, iters = 10, rounds = 1 }
[[evaluators]]
use = "tvd"
params = { ways = [2] }
"""
PARTIES = ["hospital", "insurer"]


def refused(res, *needles):
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr, res.stderr
    # one error line (a progress bar may have drawn frames before it, on the same stream)
    errors = [ln for ln in res.stderr.replace("\r", "\n").splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, res.stderr
    line = errors[0]
    for n in needles:
        assert n in line, line
    return line


def _csvs(tmp_path, n_h=300, n_i=300):
    rng = np.random.default_rng(1)   # integer-looking labels: "1", "2", "3"
    pd.DataFrame({"a": rng.integers(1, 4, n_h), "b": rng.integers(1, 3, n_h)}).to_csv(tmp_path / "hospital.csv", index=False)
    pd.DataFrame({"c": rng.integers(1, 4, n_i)}).to_csv(tmp_path / "insurer.csv", index=False)


def _synth(tmp_path, p, exchange="shared", ok=True):
    return cli("party", "synth", "job.toml", "--party", p, "--csv", f"{p}.csv", "--exchange", exchange,
               "--out", f"private_{p}", cwd=tmp_path, ok=ok)


@pytest.fixture(scope="module", autouse=True)
def _roles_in_threads():
    """Every role in a thread of this process (deploy_helpers.in_threads: the same commands over the same exchange
    folder): what these tests check is each command's refusal of a tampered, replayed or mismatched message, which
    the command's code does whether its process is its own; the folder deployment kind keeps its flow as separate
    processes (tests/deploy/test_deploy.py, cold) and its forked flows (test_deploy, test_one_front, test_flows)."""
    import deploy_helpers

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(deploy_helpers, "THREADS", True)
        yield


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """One honest run up to the parties' release."""
    tmp = tmp_path_factory.mktemp("released")
    (tmp / "job.toml").write_text(with_roster(tmp, SMALL, PARTIES))
    _csvs(tmp)
    hello_all(tmp, PARTIES)
    keys_all(tmp, PARTIES)
    publish_key(tmp)
    for p in PARTIES:
        _synth(tmp, p)
    return tmp


def test_honest_release_is_accepted(released, tmp_path):
    shutil.copytree(released, tmp_path / "run", dirs_exist_ok=True)
    cli("server", "job.toml", "--exchange", "shared", "--out", "out", *SERVER_KEY, cwd=tmp_path / "run")
    report = (tmp_path / "run" / "out" / "ledger.json").read_text()
    assert '"hospital"' in report and "not for production" not in report


def test_edited_message_is_refused(released, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(released, run)
    victim = sorted((run / "shared").glob("synth__insurer__*.env"))[0]
    data = victim.read_bytes()
    from vertisynth.core.envelope import MAGIC
    msg_start = len(MAGIC) + 4 + int.from_bytes(data[len(MAGIC):len(MAGIC) + 4], "big") + 64   # the (sealed) body
    body = bytearray(data[msg_start:])
    body[-20:] = bytes(b ^ 0xFF for b in body[-20:])   # the sealed message's ciphertext, changed
    edited = bytes(body)
    victim.write_bytes(data[:msg_start] + edited)
    res = cli("server", "job.toml", "--exchange", "shared", "--out", "out", *SERVER_KEY, cwd=run, ok=False)
    refused(res, "'insurer'", "does not match its signed hash")


def test_second_release_is_refused(released, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(released, run)
    refused(_synth(run, "hospital", ok=False), "'hospital' already released", "second")


def test_server_whose_budget_differs_from_the_parties_refuses(released, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(released, run)
    (run / "server.toml").write_text((run / "job.toml").read_text().replace("epsilon = 8.0", "epsilon = 4.0"))
    res = cli("server", "server.toml", "--exchange", "shared", "--out", "out", *SERVER_KEY, cwd=run, ok=False)
    refused(res, "'hospital' ran a different config", "budget.epsilon = 8.0 there, 4.0 here")


def test_mixed_key_agreements_and_stale_public_keys_are_refused(released, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(released, run)
    # a second run in a fresh folder: the parties' run state moves on to it
    hello_all(run, PARTIES, exchange="shared2")
    # the party uses the group key of the first run's agreement
    refused(_synth(run, "hospital", exchange="shared2", ok=False), "comes from another key agreement", "stale keys")
    # a stale public key of the earlier run dropped into the new run's folder is refused by the reader
    shutil.copy(run / "shared" / "keys-pub__insurer__to__all__0.env", run / "shared2")
    res = cli("party", "keys", "job.toml", "--party", "hospital", "--exchange", "shared2", "--out",
              "private_hospital", "--timeout", "20", cwd=run, ok=False)
    refused(res, "from 'insurer'", "is not this run's", "another run")


def test_reused_exchange_folder_is_refused(released, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(released, run)
    res = cli("party", "hello", "job.toml", "--party", "hospital", "--exchange", "shared", "--out",
              "private_hospital", "--timeout", "5", cwd=run, ok=False)
    refused(res, "reused exchange folder")


def test_replayed_alignment_round_is_refused(tmp_path):
    text = SMALL + '[alignment]\nuse = "psi"\nparams = { workers = 1 }\n'
    (tmp_path / "job.toml").write_text(with_roster(tmp_path, text, PARTIES))
    for p, ids in (("hospital", range(0, 40)), ("insurer", range(20, 60))):   # integer-looking identifiers
        pd.DataFrame({"id": list(ids), "x": 1}).to_csv(tmp_path / f"{p}_ids.csv", index=False)

    def align(exchange):
        return parallel([["party", "align", "job.toml", "--party", p, "--csv", f"{p}_ids.csv", "--exchange", exchange,
                          "--out", f"private_{p}", "--timeout", "20", "--no-table"] for p in PARTIES], tmp_path)
    hello_all(tmp_path, PARTIES, exchange="run1")
    assert all(r[0] == 0 for r in align("run1"))
    hello_all(tmp_path, PARTIES, exchange="run2")
    for f in (tmp_path / "run1").glob("align-r01__insurer__*"):    # the earlier run's round 1, replayed
        shutil.copy(f, tmp_path / "run2")
    t0 = time.monotonic()
    res = align("run2")
    assert time.monotonic() - t0 < 30
    hospital = res[0]
    assert hospital[0] == 2 and "from 'insurer'" in hospital[2] and "is not this run's" in hospital[2], hospital


def test_wrong_roster_key_and_unknown_sender_are_refused(tmp_path):
    (tmp_path / "job.toml").write_text(with_roster(tmp_path, SMALL, PARTIES))
    cli("party", "init", "--party", "hospital", "--out", "elsewhere", cwd=tmp_path)
    res = cli("party", "hello", "job.toml", "--party", "hospital", "--key", "elsewhere/hospital_signing.pem",
              "--exchange", "shared", "--out", "private_hospital", "--timeout", "5", cwd=tmp_path, ok=False)
    refused(res, "not the one the roster pins")
    # a hello signed by someone the roster does not name
    from vertisynth.core.envelope import ALL, seal
    from vertisynth.core.identity import Identity
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "hello__mallory__to__all__0.env").write_bytes(
        seal(Identity.generate("mallory"), "", "x", [ALL], "hello", "hello", b"{}"))
    res = hello_all(tmp_path, PARTIES, timeout=10, ok=False)
    assert all(r[0] == 2 for r in res)
    assert any("'mallory' is not in the roster" in r[2] for r in res), res


def test_private_keys_never_go_into_the_exchange_folder(tmp_path):
    (tmp_path / "shared").mkdir()
    refused(cli("party", "init", "--party", "hospital", "--out", "shared", "--exchange", "shared", cwd=tmp_path,
                ok=False), "a private key never goes there")
    (tmp_path / "job.toml").write_text(with_roster(tmp_path, SMALL, PARTIES))
    res = cli("party", "hello", "job.toml", "--party", "hospital", "--exchange", "shared", "--out", "shared/me",
              "--timeout", "5", cwd=tmp_path, ok=False)
    refused(res, "inside (or holds) the exchange folder")


@pytest.mark.parametrize("secret", ["0" * 30 + "05", "5", "ef2d127de37b942baad06145e54b0c619a1f22327b2ebbcfbec78f5564afe39d"])
def test_secret_equal_to_or_made_from_the_config_seed_is_refused(tmp_path, secret):
    (tmp_path / "job.toml").write_text(with_roster(tmp_path, SMALL, PARTIES))
    res = cli("party", "hello", "job.toml", "--party", "hospital", "--exchange", "shared", "--out", "private_hospital",
              "--test-secret", secret, "--timeout", "5", cwd=tmp_path, ok=False)
    refused(res, "--test-secret")


def test_mismatched_alignment_settings_fail_fast(tmp_path):
    text = SMALL + '[alignment]\nuse = "psu"\nparams = { workers = 1 }\n'
    (tmp_path / "job.toml").write_text(with_roster(tmp_path, text, PARTIES))
    other = (tmp_path / "job.toml").read_text().replace("workers = 1 }", 'workers = 1, normalize = ["strip"] }')
    (tmp_path / "other.toml").write_text(other)
    t0 = time.monotonic()
    res = parallel([["party", "hello", cfg, "--party", p, "--exchange", "shared", "--out", f"private_{p}",
                     "--timeout", "600"] for p, cfg in (("hospital", "job.toml"), ("insurer", "other.toml"))], tmp_path)
    assert time.monotonic() - t0 < 60          # no 600 s wait
    assert all(r[0] == 2 for r in res), res
    assert "its config differs from this one: alignment.params.normalize" in res[0][2]


def test_party_tables_of_different_lengths_are_refused(tmp_path):
    (tmp_path / "job.toml").write_text(with_roster(tmp_path, SMALL, PARTIES))
    _csvs(tmp_path, 300, 280)
    hello_all(tmp_path, PARTIES)
    keys_all(tmp_path, PARTIES)
    publish_key(tmp_path)
    for p in PARTIES:
        _synth(tmp_path, p)
    res = cli("server", "job.toml", "--exchange", "shared", "--out", "out", *SERVER_KEY, cwd=tmp_path, ok=False)
    refused(res, "party tables of different lengths")


def test_test_secret_runs_are_labelled(tmp_path):
    (tmp_path / "job.toml").write_text(with_roster(tmp_path, SMALL, PARTIES))
    res = hello_all(tmp_path, PARTIES, secret=SECRET)
    assert all("not for production" in r[1] for r in res)
