"""Fit once, sample many: the fitted model is kept, written as a DP release, and sampled again for free."""
import io
import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import vertisynth
from vertisynth.cli import main
from vertisynth.core.errors import ConfigError, DataError, MessageError
from vertisynth.run.config import config_fingerprint, load_config, parse_config
from vertisynth.run.model import FittedModel
from vertisynth.run.pipeline import RNG_STREAMS, run


def _cfg(synth="private_pgm", n=2000, seed=4):
    return parse_config({"seed": seed, "budget": {"epsilon": 2.0, "delta": 1e-5},
                         "dataset": {"name": "census", "params": {"n": n}}, "synthesizer": {"use": synth},
                         "evaluators": [{"use": "tvd", "params": {"ways": [2], "marginals": 5}}]})


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    return run(_cfg(), output_dir=out), out


def test_the_model_file_is_written_and_recorded_as_a_release(fitted):
    result, out = fitted
    assert (out / "model.npz").is_file() and result.model is not None
    ledger = json.loads((out / "ledger.json").read_text())
    assert "model.npz" in ledger["releases"] and "synthetic.csv" in ledger["releases"]
    assert "model.npz" in json.loads((out / ".vertisynth-outputs.json").read_text())
    assert result.model.privacy["spent_epsilon"] == pytest.approx(result.ledger.spent_epsilon())


def test_the_loaded_model_reproduces_the_runs_table_exactly(fitted):
    result, out = fitted
    loaded = vertisynth.load_model(out / "model.npz")
    stream = dict(zip(RNG_STREAMS, (np.random.default_rng(s) for s in np.random.SeedSequence(4).spawn(len(RNG_STREAMS)))))
    codes = loaded.sample_codes(result.synthetic_codes.n, stream["sample"])
    assert codes.to_frame().equals(result.synthetic_codes.to_frame())   # the file round-trips exactly


def test_sampling_more_rows_is_raw_looking_reproducible_and_free(fitted):
    result, out = fitted
    model = vertisynth.load_model(out / "model.npz")
    spent = result.ledger.spent_epsilon()
    a, b = model.sample(5000, seed=7), model.sample(5000, seed=7)
    pd.testing.assert_frame_equal(a, b)
    assert len(a) == 5000 and list(a.columns) == list(result.synthetic.columns)
    assert (a.dtypes == result.synthetic.dtypes).all()
    assert set(a["sex"]) <= set(result.synthetic["sex"]) | {"Female", "Male"}
    assert len(model.sample()) == model.n_records                   # default: the DP record count
    assert len(result.sample(10, seed=1)) == 10
    assert result.ledger.spent_epsilon() == spent and model.privacy["spent_epsilon"] == spent
    with pytest.raises(DataError, match="positive integer"):
        model.sample(0)


def _rewrite(src, dst, change):
    with np.load(src, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    change(arrays)
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    dst.write_bytes(buf.getvalue())


def test_an_altered_or_damaged_model_file_gets_one_line(fitted, tmp_path):
    _, out = fitted
    src = out / "model.npz"

    def bump(arrays):
        key = next(k for k in arrays if k.startswith("d/potentials/"))
        arrays[key] = arrays[key] + 0.5

    _rewrite(src, tmp_path / "altered.npz", bump)
    with pytest.raises(MessageError, match="altered or damaged"):
        vertisynth.load_model(tmp_path / "altered.npz")
    (tmp_path / "cut.npz").write_bytes(src.read_bytes()[:200])
    with pytest.raises(MessageError, match="truncated or not a vertisynth message"):
        vertisynth.load_model(tmp_path / "cut.npz")
    res = CliRunner().invoke(main, ["sample", str(tmp_path / "altered.npz"), "-n", "5", "-o", str(tmp_path / "x.csv")])
    assert res.exit_code == 2 and "altered" in res.output and "Traceback" not in res.output
    with pytest.raises(MessageError, match="does not exist"):
        vertisynth.load_model(tmp_path / "none.npz")


def _recompute_digest(arrays):
    """What anyone can do to a model file: change a potential, then recompute the stored digest."""
    from vertisynth.core.domain import Domain
    from vertisynth.run.model import ModelRelease

    header = json.loads(bytes(arrays["__header__"]).decode())
    f = header["fields"]
    keys = f["potentials"]["keys"]
    pot = arrays["d/potentials/0"].copy()
    pot.flat[0] += 5.0   # one cell made e^5 times likelier
    arrays["d/potentials/0"] = pot
    draft = ModelRelease(party=f["party"]["value"], domain=Domain.from_dict(f["domain"]["value"]),
                         cliques=f["cliques"]["value"], total=f["total"]["value"], sampling=f["sampling"]["value"],
                         synthesizer=f["synthesizer"]["value"], codec=f["codec"]["value"],
                         privacy=f["privacy"]["value"],
                         potentials={k: arrays[f"d/potentials/{i}"] for i, k in enumerate(keys)})
    f["digest"]["value"] = draft.content_digest()
    arrays["__header__"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)


def _relabel_run(arrays):
    """Claim the file was released by another run: change its run id, then recompute the stored digest."""
    from vertisynth.core.domain import Domain
    from vertisynth.run.model import ModelRelease

    header = json.loads(bytes(arrays["__header__"]).decode())
    f = header["fields"]
    f["run"]["value"] = "s" * 64
    draft = ModelRelease(party=f["party"]["value"], domain=Domain.from_dict(f["domain"]["value"]),
                         cliques=f["cliques"]["value"], total=f["total"]["value"], sampling=f["sampling"]["value"],
                         synthesizer=f["synthesizer"]["value"], codec=f["codec"]["value"],
                         privacy=f["privacy"]["value"], run=f["run"]["value"], config=f["config"]["value"],
                         potentials={k: arrays[f"d/potentials/{i}"] for i, k in enumerate(f["potentials"]["keys"])})
    f["digest"]["value"] = draft.content_digest()
    arrays["__header__"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)


def test_a_signed_model_verifies_against_the_roster_and_a_recomputed_digest_does_not(fitted, tmp_path):
    from vertisynth.core.identity import Identity, Roster

    result, _ = fitted
    server, other = Identity.generate("server"), Identity.generate("server")
    roster = Roster.parse({"server": server.public_text()})
    path = result.model.save(tmp_path / "signed.npz", identity=server)
    loaded = FittedModel.load(path, roster)
    pd.testing.assert_frame_equal(loaded.sample(30, seed=2), result.model.sample(30, seed=2))
    # an edited potential with its digest recomputed: loads without a roster (the digest proves no origin) ...
    _rewrite(path, tmp_path / "forged.npz", _recompute_digest)
    forged = FittedModel.load(tmp_path / "forged.npz")
    assert forged.model.theta[0].flat[0] == pytest.approx(loaded.model.theta[0].flat[0] + 5.0)
    # ... and is refused, in one line, where the roster pins the releasing role's key
    with pytest.raises(MessageError, match="signature does not verify under 'server'.s roster key") as err:
        FittedModel.load(tmp_path / "forged.npz", roster)
    assert "\n" not in str(err.value)
    # unsigned (signature stripped, digest recomputed), or signed by a key the roster does not pin: refused
    with pytest.raises(MessageError, match="is not signed, but the roster given pins"):
        FittedModel.load(result.model.save(tmp_path / "plain.npz"), roster)
    with pytest.raises(MessageError, match="does not verify"):
        FittedModel.load(result.model.save(tmp_path / "other.npz", identity=other), roster)
    with pytest.raises(MessageError, match="whom the roster does not pin"):
        FittedModel.load(result.model.save(tmp_path / "x.npz", identity=Identity.generate("mallory")), roster)
    # the CLI and the API verify against a config's [roster]
    cfg = tmp_path / "job.toml"
    cfg.write_text(f'budget = {{ epsilon = 1.0, delta = 1e-5 }}\n[roster.keys]\nserver = "{server.public_text()}"\n')
    # with a config, the signature must also vouch for a run of that config: a file signed outside any run of it
    # (or in a run of another config with the same roster) is refused
    with pytest.raises(MessageError, match="released by a run of another config"):
        vertisynth.load_model(path, cfg)
    m = result.model
    fp = config_fingerprint(load_config(cfg))
    path = FittedModel(m.model, m.codec, m.sampling, m.synthesizer, m.privacy, run="r" * 64, config=fp).save(
        tmp_path / "bound.npz", identity=server)
    assert vertisynth.load_model(path, cfg).run == "r" * 64
    assert vertisynth.load_model(path, cfg).n_records == loaded.n_records
    other_cfg = tmp_path / "other.toml"
    other_cfg.write_text(cfg.read_text().replace("epsilon = 1.0", "epsilon = 8.0"))
    with pytest.raises(MessageError, match="released by a run of another config"):
        vertisynth.load_model(path, other_cfg)
    # the run id is signed: relabelling the file as another run's breaks the signature even with its digest redone
    _rewrite(path, tmp_path / "relabelled.npz", _relabel_run)
    with pytest.raises(MessageError, match="does not verify"):
        vertisynth.load_model(tmp_path / "relabelled.npz", cfg)
    res = CliRunner().invoke(main, ["sample", str(tmp_path / "forged.npz"), "-n", "5", "-o", str(tmp_path / "f.csv"),
                                    "--config", str(cfg)])
    assert res.exit_code == 2 and "does not verify" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "f.csv").exists()
    res = CliRunner().invoke(main, ["sample", str(path), "-n", "5", "-o", str(tmp_path / "s.csv"), "--config", str(cfg)])
    assert res.exit_code == 0, res.output


def test_cli_sample_draws_rows_from_a_model(fitted, tmp_path):
    _, out = fitted
    res = CliRunner().invoke(main, ["sample", str(out / "model.npz"), "-n", "300", "-o", str(tmp_path / "more.csv"),
                                    "--seed", "2"])
    assert res.exit_code == 0, res.output
    assert "spent nothing" in res.output
    assert len(pd.read_csv(tmp_path / "more.csv")) == 300


def test_cli_sample_writes_block_by_block_the_table_the_api_draws(fitted, tmp_path):
    """`vertisynth sample --block-rows` holds one block: its CSV is the API's table at the same block size, and
    at the default block size the API's `sample(n, seed)` (one block here: the whole-table draw and decode)."""
    _, out = fitted
    model = FittedModel.load(out / "model.npz")
    res = CliRunner().invoke(main, ["sample", str(out / "model.npz"), "-n", "1000", "-o", str(tmp_path / "b.csv"),
                                    "--seed", "5", "--block-rows", "64"])
    assert res.exit_code == 0 and "wrote 1000 rows" in res.output, res.output
    blocks = list(model.sample_frames(1000, 5, block_rows=64))
    assert len(blocks) == 16 and max(len(b) for b in blocks) == 64
    buf = io.StringIO()
    pd.concat(blocks, ignore_index=True).to_csv(buf, index=False)
    assert (tmp_path / "b.csv").read_text() == buf.getvalue()
    whole = CliRunner().invoke(main, ["sample", str(out / "model.npz"), "-n", "1000", "-o", str(tmp_path / "w.csv"),
                                      "--seed", "5"])
    assert whole.exit_code == 0, whole.output
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "w.csv"), pd.read_csv(io.StringIO(
        model.sample(1000, seed=5).to_csv(index=False))))
    bad = CliRunner().invoke(main, ["sample", str(tmp_path / "nope.npz"), "-o", str(tmp_path / "x.csv")])
    assert bad.exit_code != 0 and not (tmp_path / "x.csv").exists() and not (tmp_path / "x.csv.partial").exists()
    with pytest.raises(DataError, match="block_rows must be a positive integer"):
        model.sample_frames(10, 1, block_rows=0)


def test_save_and_load_round_trip(fitted, tmp_path):
    result, _ = fitted
    path = result.model.save(tmp_path / "m.npz")
    pd.testing.assert_frame_equal(FittedModel.load(path).sample(50, seed=1), result.model.sample(50, seed=1))
    with pytest.raises(ConfigError, match=".npz"):
        result.model.save(tmp_path / "m.bin")


def test_every_model_based_synthesizer_keeps_a_model_and_dpsyn_says_why_not(tmp_path):
    res = run(_cfg("independent", n=800), output_dir=tmp_path / "ind")
    model = vertisynth.load_model(tmp_path / "ind" / "model.npz")
    assert len(model.model.tree.cliques) == len(model.columns)          # single-attribute cliques
    draws = model.sample_codes(20000, 0)
    for a in ("sex", "income"):   # the noisy 1-way marginals it was fitted with
        freq = np.bincount(draws.column(a), minlength=model.codec.domain.size(a)) / draws.n
        real = np.bincount(res.real_codes.column(a), minlength=model.codec.domain.size(a)) / res.real_codes.n
        assert np.abs(freq - real).sum() / 2 < 0.08
    res = run(_cfg("dpsyn", n=800), output_dir=tmp_path / "dpsyn")
    assert res.model is None and not (tmp_path / "dpsyn" / "model.npz").exists()
    assert "keeps no graphical model" in res.report["privacy"]["releases"]["model.npz"]
    with pytest.raises(DataError, match="dpsyn.*keeps no graphical model"):
        res.sample(10)


def test_fit_returns_the_model_and_refuses_a_model_free_synthesizer():
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"a": rng.integers(0, 3, 400), "b": rng.integers(0, 2, 400)})
    schema = {"a": {"kind": "categorical", "categories": [0, 1, 2]}, "b": {"kind": "categorical", "categories": [0, 1]}}
    model = vertisynth.fit(df, parties={"p": ["a"], "q": ["b"]}, schema=schema, epsilon=1.0,
                           synthesizer="independent")
    assert list(model.sample(20, seed=1).columns) == ["a", "b"]
    with pytest.raises(ConfigError, match="dpsyn"):
        vertisynth.fit(df, parties={"p": ["a"], "q": ["b"]}, schema=schema, epsilon=1.0, synthesizer="dpsyn")
