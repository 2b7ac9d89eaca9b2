"""Encoder "he" across processes: parties and the server as separate OS processes exchanging signed envelopes, with
real 2048-bit Paillier; under a test secret the result equals the one-process run with crypto = "simulated"."""
import json
import time

import pandas as pd
import pytest
from deploy_helpers import SECRET, hello_all, parallel, popen, publish_key, with_roster

from vertisynth.deploy.simulate import simulate
from vertisynth.run.config import load_config

pytest.importorskip("phe", reason="the he encoder's real crypto needs `pip install vertisynth[he]` (phe, gmpy2)")
pytest.importorskip("gmpy2", reason="the he encoder's real crypto needs `pip install vertisynth[he]` (phe, gmpy2)")

CONFIG = """
seed = 11
budget = { epsilon = 2.0, delta = 1e-5 }
[dataset]
name = "census"
params = { n = 160 }
[synthesizer]
use = "vertimrf"
params = { encoder = "he", bins = 1000, iters = 40, local_params = { iters = 30, refine_iters = 10 }, encoder_params = { crypto = "CRYPTO", cliques = 2, selection_pairs = 4, workers = 1, round_timeout = 120.0 } }
"""
THREE = '\n[[parties]]\nname = "a"\nattributes = ["age", "sex", "race", "birth_country", "region"]\n' \
        '[[parties]]\nname = "b"\nattributes = ["education", "marital_status", "relationship", "household_size", "occupation"]\n' \
        '[[parties]]\nname = "c"\nattributes = ["workclass", "hours_per_week", "capital_gain", "income", "health_insurance"]\n'


def _setup(tmp_path, parties, extra="", key_bits=None):
    config = CONFIG if key_bits is None else CONFIG.replace("workers = 1,", f"workers = 1, key_bits = {key_bits},")
    text = with_roster(tmp_path, config.replace("CRYPTO", "real") + extra, [*parties, "server"])
    (tmp_path / "job.toml").write_text(text)
    (tmp_path / "sim.toml").write_text(text.replace('crypto = "real"', 'crypto = "simulated"'))
    hello_all(tmp_path, parties, secret=SECRET)


def _run_all(tmp_path, parties, timeout=240):
    argv = [["party", "job.toml", "--party", p, "--exchange", "shared", "--out", f"private_{p}", "-q"] for p in parties]
    argv.append(["server", "job.toml", "--exchange", "shared", "--out", "out", "--key",
                 "private_server/server_signing.pem", "-q"])
    return parallel(argv, tmp_path, timeout=timeout)


def _equals_simulation(tmp_path):
    deployed = pd.read_csv(tmp_path / "out" / "synthetic.csv")
    sim = simulate(load_config(tmp_path / "sim.toml"), SECRET)
    simulated = sim.synthetic
    simulated.to_csv(tmp_path / "sim.csv", index=False)
    pd.testing.assert_frame_equal(deployed, pd.read_csv(tmp_path / "sim.csv"))
    # the ledger lists the cross-party tables the server received, as the one-process run lists its own
    ledger = json.loads((tmp_path / "out" / "ledger.json").read_text())
    assert ledger["cross_party"] == sim.ledger.to_dict()["cross_party"], ledger.get("cross_party")
    stages = {e["stage"] for e in ledger["cross_party"]["answers"]}
    assert ledger["cross_party"]["through"] == ["he (trust = none)"] and stages == {"selection", "cliques"}, stages


def test_two_parties_and_server_as_processes_equal_the_simulation(tmp_path):
    parties = ["registry", "employer"]
    _setup(tmp_path, parties)
    res = _run_all(tmp_path, parties)
    assert all(r[0] == 0 for r in res), res
    _equals_simulation(tmp_path)
    names = sorted(p.name for p in (tmp_path / "shared").iterdir())
    assert all(n.endswith(".env") for n in names)   # only signed envelopes crossed
    for round_ in ("he-key-selection", "he-rows-selection", "he-sums-selection", "he-queries", "he-sums-cliques"):
        assert any(n.startswith(round_ + "__") for n in names), round_
    ledger = json.loads((tmp_path / "out" / "ledger.json").read_text())
    mechanisms = [c["mechanism"] for c in ledger["charges"]]
    assert mechanisms.count("he_selection") == 1 and mechanisms.count("he_cliques") == 1
    assert not ledger["planned_but_unspent"] and "not for production" in json.dumps(ledger)


def test_tampered_ciphertexts_are_refused(tmp_path, monkeypatch):
    """A byte of the encrypted rows flipped on the exchange: the summing party refuses them (the envelope's hash)."""
    import os
    import signal

    from vertisynth.plugins.encoders.he import paillier

    # 512-bit test keys (the floor lowered here, which the forked roles keep): the refusal is the envelope's hash,
    # whatever the key; the 2048-bit flow is the test above
    monkeypatch.setattr(paillier, "MIN_KEY_BITS", 512)
    parties = ["registry", "employer"]
    _setup(tmp_path, parties, key_bits=512)
    publish_key(tmp_path)   # the run key the parties seal their published tables to (no server runs here)
    argv = [["party", "job.toml", "--party", p, "--exchange", "shared", "--out", f"private_{p}", "-q"] for p in parties]
    from vertisynth.run.pipeline import make_plan
    encoder = make_plan(load_config(tmp_path / "job.toml")).synthesizer.instance._encoder
    enc = encoder.pairs(encoder.selection_queries(), 160, "selection")[0][1]   # who encrypts (public)
    summ = [p for p in parties if p != enc][0]
    shared = tmp_path / "shared"

    def wait_for(pattern):
        deadline = time.monotonic() + 120
        while not (found := list(shared.glob(pattern))) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert found, pattern
        return found
    # the rows are sealed to the summing party's run key: it starts first and publishes it, then holds still (stopped)
    # while the encrypting party sends its rows, which are corrupted before the summing party reads them
    summing = popen(argv[parties.index(summ)], tmp_path)
    wait_for(f"key__{summ}__to__all__party.env")
    os.kill(summing.pid, signal.SIGSTOP)
    encrypting = popen(argv[parties.index(enc)], tmp_path)
    try:
        [rows] = wait_for(f"he-rows-selection__{enc}__*")
        data = bytearray(rows.read_bytes())
        data[-100] ^= 1
        rows.write_bytes(bytes(data))
    finally:
        os.kill(summing.pid, signal.SIGCONT)
    out, err = summing.communicate(timeout=120)
    encrypting.kill()
    encrypting.communicate()
    assert summing.returncode != 0 and "refused" in err and "he-rows-selection" in err, err


@pytest.mark.slow
def test_three_parties_as_processes_equal_the_simulation(tmp_path):
    parties = ["a", "b", "c"]
    _setup(tmp_path, parties, THREE)
    res = _run_all(tmp_path, parties, timeout=420)
    assert all(r[0] == 0 for r in res), res
    _equals_simulation(tmp_path)


def test_rows_under_a_foreign_key_are_refused(monkeypatch):
    """Rows signed by their sender but encrypted under another modulus than the key it announced: refused."""
    import numpy as np

    from vertisynth.core.dataset import Dataset
    from vertisynth.core.domain import Domain
    from vertisynth.core.errors import MessageError
    from vertisynth.plugins.encoders.he import paillier, protocol
    from vertisynth.plugins.encoders.he.rounds import check_rows, modulus_fingerprint

    monkeypatch.setattr(paillier, "MIN_KEY_BITS", 512)
    announced, foreign = (paillier.phe.generate_paillier_keypair(n_length=512)[0] for _ in range(2))
    view = Dataset(np.array([[0], [1], [1]]), Domain(["x"], [2]))
    rows = protocol.encrypt_rows("e", "s", view, [(("x",), ("y",))], foreign, 13, workers=1)
    key = {"modulus": format(announced.n, "x"), "fingerprint": modulus_fingerprint(format(announced.n, "x"))}
    with pytest.raises(MessageError, match="not the one 'e' signed for this run"):
        check_rows("s", rows, "e", key)
    with pytest.raises(MessageError, match="not 'mallory''s encrypted rows"):
        check_rows("s", rows, "mallory", key)
    check_rows("s", rows, "e", {**key, "modulus": rows.modulus,
                                "fingerprint": modulus_fingerprint(rows.modulus)})   # its own key: fine


def test_party_refuses_more_clique_tables_than_planned():
    from vertisynth.core.capabilities import JointRounds
    from vertisynth.core.dataset import VerticalPartition
    from vertisynth.core.domain import Domain
    from vertisynth.core.errors import MessageError
    from vertisynth.core.interfaces import PlanContext
    from vertisynth.core.privacy import Budget
    from vertisynth.deploy.he_rounds import _parse_queries
    from vertisynth.plugins.encoders.he.encoder import HEConfig, HEEncoder

    enc = HEEncoder(HEConfig(crypto="simulated", cliques=2))
    dom = Domain(["a", "b", "c"], [2, 3, 2])
    enc.plan(PlanContext(dom, VerticalPartition.from_lists([["a"], ["b", "c"]]), Budget(1.0, 1e-5)))
    assert isinstance(enc, JointRounds)   # what the driver checks it by
    body = lambda qs: json.dumps({"stage": "cliques", "queries": qs}).encode()  # noqa: E731
    assert _parse_queries(body([[["a"], ["b"]], [["a"], ["c"]]]), enc) == [(("a",), ("b",)), (("a",), ("c",))]
    with pytest.raises(MessageError, match="3 tables, the plan has 2"):
        _parse_queries(body([[["a"], ["b"]], [["a"], ["c"]], [["a"], ["b", "c"]]]), enc)
    with pytest.raises(MessageError, match="unknown attributes"):
        _parse_queries(body([[["a"], ["zz"]]]), enc)
    with pytest.raises(MessageError, match="malformed"):
        _parse_queries(b"{", enc)
