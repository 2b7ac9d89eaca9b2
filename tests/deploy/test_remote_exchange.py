"""`--exchange URL`: the deploy flow through fsspec (file://, an sftp:// drop box served by a real OpenSSH server on
127.0.0.1, and an s3:// bucket served by moto's S3-compatible HTTP server on 127.0.0.1 through s3fs),
write-then-marker, and the envelope checks on what comes back from the store."""
import subprocess

import pandas as pd
import pytest
from deploy_helpers import SECRET, SERVER_KEY, cli, hello_all, keys_all, parallel, publish_key, with_roster

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
params = { n = 400 }
[synthesizer]
use = "vertimrf"
params = { encoder_params = { t = 64 }, local_params = { iters = 5, refine_iters = 2 }, iters = 5, rounds = 1 }
"""   # small: what is under test is the exchange (the table must equal the simulation), not the fit
PARTIES = ["registry", "employer"]


def _run(args, cwd, timeout=180):
    return cli(*args, cwd=cwd, ok=False, timeout=timeout)


def _flow(tmp_path, exchange):
    """hello -> keys -> synth -> server through `exchange`; the table equals the one-process simulation."""
    (tmp_path / "job.toml").write_text(with_roster(tmp_path, CONFIG, PARTIES))
    hello_all(tmp_path, PARTIES, exchange=exchange, secret=SECRET)
    keys_all(tmp_path, PARTIES, exchange=exchange)
    publish_key(tmp_path, exchange=exchange)
    res = parallel([["party", "synth", "job.toml", "--party", p, "--exchange", exchange, "--out", f"private_{p}"]
                    for p in PARTIES], tmp_path)
    assert all(r[0] == 0 for r in res), res
    res = _run(["server", "job.toml", "--exchange", exchange, "--out", "out", *SERVER_KEY], tmp_path)
    assert res.returncode == 0, res.stderr
    simulated = simulate(load_config(tmp_path / "job.toml"), SECRET).synthetic
    simulated.to_csv(tmp_path / "sim.csv", index=False)
    deployed, sim = pd.read_csv(tmp_path / "out" / "synthetic.csv"), pd.read_csv(tmp_path / "sim.csv")
    pd.testing.assert_frame_equal(deployed, sim)


def test_flow_through_a_file_url(tmp_path, in_process):
    # the roles in threads (issue 33): the URL kind's flows across processes are the sftp and s3 ones below, the same
    # `_flow`; what this one checks is the file:// store's layout per sender
    store = tmp_path / "store"
    _flow(tmp_path, store.as_uri())
    # per-party prefixes: each sender's envelopes (and their markers) under its own folder, nothing else
    assert sorted(p.name for p in store.iterdir()) == sorted([*PARTIES, "server"])   # the server: its run key
    for party in [*PARTIES, "server"]:
        files = sorted(p.name for p in (store / party).iterdir())
        assert all(f.split("__")[1] == party for f in files)
        assert {f for f in files if f.endswith(".env")} == {f[:-len(".done")] for f in files if f.endswith(".done")}


def test_flow_through_an_sftp_drop_box_and_a_tampered_envelope_is_refused(tmp_path, sftp_env):
    drop = sftp_env["dir"] / f"drop_{tmp_path.name}"
    url = sftp_env["url"] + str(drop)
    _flow(tmp_path, url)
    assert sorted(p.name for p in drop.iterdir()) == sorted([*PARTIES, "server"])   # written through the SSH server, not by us
    # a relay (or anyone with write access to the box) edits a party's synth message: the server refuses it
    victim = next((drop / "employer").glob("synth__*.env"))
    raw = bytearray(victim.read_bytes())
    raw[-5] ^= 1
    victim.write_bytes(bytes(raw))
    res = _run(["server", "job.toml", "--exchange", url, "--out", "out2", *SERVER_KEY], tmp_path)
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


@pytest.fixture(scope="module")
def s3_env():
    """A real S3 API on loopback: moto's server (HTTP, one thread), a bucket "drop", s3fs pointed at it for this
    process (fsspec's config) and for the roles' processes (FSSPEC_S3_ENDPOINT_URL); throwaway credentials, and
    the instance-metadata lookup off, so nothing leaves 127.0.0.1."""
    pytest.importorskip("s3fs")
    boto3 = pytest.importorskip("boto3")
    moto_server = pytest.importorskip("moto.server")
    import fsspec.config
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        with pytest.MonkeyPatch.context() as mp:
            for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                               "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
                               "FSSPEC_S3_ENDPOINT_URL": endpoint}.items():
                mp.setenv(key, value)
            mp.setitem(fsspec.config.conf, "s3", {"endpoint_url": endpoint})
            client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
            client.create_bucket(Bucket="drop")
            yield {"url": "s3://drop/", "client": client}
    finally:
        server.stop()


def _keys(client, prefix):
    pages = client.get_paginator("list_objects_v2").paginate(Bucket="drop", Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def test_flow_through_an_s3_bucket_and_a_tampered_envelope_is_refused(tmp_path, s3_env):
    prefix = f"run_{tmp_path.name}"
    url = s3_env["url"] + prefix
    _flow(tmp_path, url)
    client = s3_env["client"]
    keys = _keys(client, prefix + "/")
    # per-party prefixes (what a bucket policy grants each party write access to), every envelope with its marker
    assert {k.split("/")[1] for k in keys} == {*PARTIES, "server"}
    assert all(k.split("/")[2].split("__")[1] == k.split("/")[1] for k in keys)
    assert {k for k in keys if k.endswith(".env")} == {k[:-len(".done")] for k in keys if k.endswith(".done")}
    # anyone with write access to the bucket edits a party's synth message: the server refuses it, writes nothing
    victim = next(k for k in keys if k.startswith(f"{prefix}/employer/synth__") and k.endswith(".env"))
    raw = bytearray(client.get_object(Bucket="drop", Key=victim)["Body"].read())
    raw[-5] ^= 1
    client.put_object(Bucket="drop", Key=victim, Body=bytes(raw))
    res = _run(["server", "job.toml", "--exchange", url, "--out", "out2", *SERVER_KEY], tmp_path)
    assert res.returncode == 2 and "edited" in res.stderr and "refused" in res.stderr, res.stderr
    assert not (tmp_path / "out2").exists()


def test_s3_reads_only_marked_envelopes(tmp_path, s3_env):
    prefix = f"box_{tmp_path.name}"

    def poke(name, data):
        s3_env["client"].put_object(Bucket="drop", Key=f"{prefix}/a/{name}", Body=data)
    _marker_rules(transport_for(s3_env["url"] + prefix), poke)


def test_an_unreachable_s3_endpoint_is_one_clear_error(tmp_path, s3_env, monkeypatch):
    import socket

    import fsspec.config
    with socket.socket() as s:      # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": f"http://127.0.0.1:{dead}",
                                                   "config_kwargs": {"retries": {"max_attempts": 1},
                                                                     "connect_timeout": 2}})
    transport = transport_for(s3_env["url"] + "nowhere")
    with pytest.raises(MessageError, match="exchange 's3://drop/nowhere': sending"):
        transport.send("hello__a__to__all__0", b"x")
