"""`--exchange URL`: the deploy flow through fsspec (file://, and an sftp:// drop box served by a real OpenSSH
server on 127.0.0.1), write-then-marker, and the envelope checks on what comes back from the store."""
import subprocess

import pandas as pd
import pytest
from deploy_helpers import SECRET, cli, hello_all, keys_all, parallel, with_roster

from vertisynth.core.errors import MessageError
from vertisynth.deploy.simulate import simulate
from vertisynth.deploy.transport import FolderTransport, FsspecTransport, transport_for
from vertisynth.run.config import load_config

pytest.importorskip("fsspec")

CONFIG = """
seed = 11
budget = { epsilon = 2.0, delta = 1e-5 }
[dataset]
name = "census"
params = { n = 2000 }
[synthesizer]
use = "vertimrf"
params = { encoder_params = { t = 200 }, local_params = { iters = 30, refine_iters = 10 }, iters = 40, rounds = 1 }
"""
PARTIES = ["registry", "employer"]


def _run(args, cwd, timeout=180):
    return cli(*args, cwd=cwd, ok=False, timeout=timeout)


def _flow(tmp_path, exchange):
    """hello -> keys -> synth -> server through `exchange`; the table equals the one-process simulation."""
    (tmp_path / "job.toml").write_text(with_roster(tmp_path, CONFIG, PARTIES))
    hello_all(tmp_path, PARTIES, exchange=exchange, secret=SECRET)
    keys_all(tmp_path, PARTIES, exchange=exchange)
    res = parallel([["party", "synth", "job.toml", "--party", p, "--exchange", exchange, "--out", f"private_{p}"]
                    for p in PARTIES], tmp_path)
    assert all(r[0] == 0 for r in res), res
    res = _run(["server", "job.toml", "--exchange", exchange, "--out", "out"], tmp_path)
    assert res.returncode == 0, res.stderr
    simulated = simulate(load_config(tmp_path / "job.toml"), SECRET).synthetic
    simulated.to_csv(tmp_path / "sim.csv", index=False)
    deployed, sim = pd.read_csv(tmp_path / "out" / "synthetic.csv"), pd.read_csv(tmp_path / "sim.csv")
    pd.testing.assert_frame_equal(deployed, sim)


def test_flow_through_a_file_url(tmp_path):
    store = tmp_path / "store"
    _flow(tmp_path, store.as_uri())
    # per-party prefixes: each sender's envelopes (and their markers) under its own folder, nothing else
    assert sorted(p.name for p in store.iterdir()) == sorted(PARTIES)
    for party in PARTIES:
        files = sorted(p.name for p in (store / party).iterdir())
        assert all(f.split("__")[1] == party for f in files)
        assert {f for f in files if f.endswith(".env")} == {f[:-len(".done")] for f in files if f.endswith(".done")}


def test_flow_through_an_sftp_drop_box_and_a_tampered_envelope_is_refused(tmp_path, sftp_env):
    drop = sftp_env["dir"] / f"drop_{tmp_path.name}"
    url = sftp_env["url"] + str(drop)
    _flow(tmp_path, url)
    assert sorted(p.name for p in drop.iterdir()) == sorted(PARTIES)   # written through the SSH server, not by us
    # a relay (or anyone with write access to the box) edits a party's synth message: the server refuses it
    victim = next((drop / "employer").glob("synth__*.env"))
    raw = bytearray(victim.read_bytes())
    raw[-5] ^= 1
    victim.write_bytes(bytes(raw))
    res = _run(["server", "job.toml", "--exchange", url, "--out", "out2"], tmp_path)
    assert res.returncode == 2 and "edited" in res.stderr and "refused" in res.stderr, res.stderr
    assert not (tmp_path / "out2").exists()


def _marker_rules(transport, poke):
    """An envelope without its marker is not listed; once sent it is; a second send of a name is refused."""
    poke("hello__a__to__all__0.env", b"half-written")
    assert transport.names("*") == []
    transport.send("hello__b__to__all__0", b"whole")
    assert transport.names("hello__*") == ["hello__b__to__all__0"]
    assert transport.read("hello__b__to__all__0") == b"whole"
    with pytest.raises(MessageError, match="already holds"):
        transport.send("hello__b__to__all__0", b"again")
    with pytest.raises(MessageError, match="already holds"):     # the unmarked one is not overwritten either
        transport.send("hello__a__to__all__0", b"again")


def test_file_url_reads_only_marked_envelopes(tmp_path):
    transport = transport_for((tmp_path / "x").as_uri())
    assert isinstance(transport, FsspecTransport) and isinstance(transport_for(tmp_path / "y"), FolderTransport)

    def poke(name, data):
        (tmp_path / "x" / "a").mkdir(parents=True, exist_ok=True)
        (tmp_path / "x" / "a" / name).write_bytes(data)
    _marker_rules(transport, poke)


def test_sftp_reads_only_marked_envelopes_and_checks_the_host_key(tmp_path, sftp_env, monkeypatch):
    drop = sftp_env["dir"] / f"box_{tmp_path.name}"
    url = sftp_env["url"] + str(drop)

    def poke(name, data):
        (drop / "a").mkdir(parents=True, exist_ok=True)
        (drop / "a" / name).write_bytes(data)
    _marker_rules(transport_for(url), poke)
    # a hello dropped without its marker is not read: the other party waits, then a clear error
    (tmp_path / "job.toml").write_text(with_roster(tmp_path, CONFIG, PARTIES))
    (drop / "run" / "employer").mkdir(parents=True)
    (drop / "run" / "employer" / "hello__employer__to__all__0.env").write_bytes(b"unmarked")
    res = hello_all(tmp_path, PARTIES[:1], exchange=sftp_env["url"] + str(drop / "run"), timeout=2, ok=False)
    assert res[0][0] == 2 and "waited 2 s for every party's hello" in res[0][2], res
    # an SFTP server whose host key is not pinned in known_hosts is refused before any file moves
    (tmp_path / "known_hosts").write_text("")
    monkeypatch.setenv("VERTISYNTH_KNOWN_HOSTS", str(tmp_path / "known_hosts"))
    with pytest.raises(MessageError, match="host key is not in"):
        transport_for(sftp_env["url"] + str(tmp_path / "other"))
    assert not (tmp_path / "other").exists()
    # a key the box does not know: one clear error, not a paramiko traceback
    import fsspec.config
    subprocess.run(["ssh-keygen", "-q", "-N", "", "-t", "ed25519", "-f", str(tmp_path / "stranger")], check=True,
                   timeout=30)
    monkeypatch.setitem(fsspec.config.conf, "sftp", {"key_filename": str(tmp_path / "stranger"),
                                                     "look_for_keys": False, "allow_agent": False})
    with pytest.raises(MessageError, match="cannot connect"):
        transport_for(sftp_env["url"] + str(tmp_path / "other"))
