"""The collab roles over `--exchange URL` (core/transport.py): the separate-process protocol through `file://` and
through an sftp:// drop box served by a real OpenSSH server on 127.0.0.1 publishes exactly what the one-process
simulation (and so the folder run, test_collab_distributed.py) publishes; a tampered or moved envelope in the
store is refused."""
import pytest
from deploy_helpers import cli as run_cli
from test_collab_distributed import _channel, _key, _setup, _spawn

from vertisynth.collab.channel import Where
from vertisynth.collab.distributed import noisy_slot, wait_for_custodians
from vertisynth.collab.secure_aggregation import NoisyShare
from vertisynth.core.courier import parse_slot
from vertisynth.core.errors import MessageError
from vertisynth.core.sealing import RunKey
from vertisynth.core.transport import FsspecTransport, transport_for
from vertisynth.run.config import load_config
from vertisynth.run.pipeline import make_plan, run

pytest.importorskip("fsspec")
WRITERS = {"A", "B", "server0", "server1", "publisher"}   # without [collab.tuning] the publisher writes its run key only


def _publish_equals_the_simulation(tmp_path, url):
    cfg, csvs = _setup(tmp_path)
    sim = run(load_config(cfg), tmp_path / "sim")
    outs = _spawn(cfg, csvs, url, tmp_path / "dist")
    assert "published" in outs[-1]
    assert (tmp_path / "dist" / "synthetic.csv").read_bytes() == (tmp_path / "sim" / "synthetic.csv").read_bytes()
    assert sim.report["collab"]["published"]
    return cfg


def _tampered_envelope_is_refused(tmp_path, cfg, url, store):
    """Flip one byte of a server's noisy share in the store: the publisher's channel refuses it (before any
    decryption); a second `collab publish` on the run is refused in one line (what was sealed to the first one's run
    key does not open with another)."""
    victim = sorted((store / "server0").glob("collab_noisy__server0__to__publisher__*.env"))[0]
    raw = bytearray(victim.read_bytes())
    raw[-5] ^= 1
    victim.write_bytes(bytes(raw))
    publisher = _channel(cfg, "publisher", url)
    wait_for_custodians(make_plan(load_config(cfg)), publisher)
    with pytest.raises(MessageError, match="the body does not match its signed hash"):
        publisher.checked_open(victim.name[:-len(".env")], ("collab_noisy",))
    res = run_cli("collab", "publish", str(cfg), "--exchange", url, "--out", str(tmp_path / "again"), "--timeout", "20",
                  *_key(cfg, "publisher"), ok=False, timeout=120)
    assert res.returncode == 2 and "already published its run key" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "again" / "synthetic.csv").exists()


def test_collab_roles_through_a_file_url(tmp_path):
    store = tmp_path / "store"
    cfg = _publish_equals_the_simulation(tmp_path, store.as_uri())
    # per-sender prefixes: every role's envelopes (and their markers) under its own folder, nothing else
    assert {p.name for p in store.iterdir()} == WRITERS
    for role in WRITERS:
        files = {p.name for p in (store / role).iterdir()}
        assert files and all(parse_slot(f.split(".env")[0]).sender == role for f in files)
        assert {f for f in files if f.endswith(".env")} == {f[:-len(".done")] for f in files if f.endswith(".done")}
    # a server's noisy share copied to another slot (under that server's own prefix, so a store's access rules
    # would not stop it): the publisher's channel refuses it, naming the slot it was signed for
    exchange = transport_for(store.as_uri())
    publisher = _channel(cfg, "publisher", store.as_uri())
    wait_for_custodians(make_plan(load_config(cfg)), publisher)   # this run's id, from the hellos in the store
    everyone = exchange.names("collab_noisy__*")   # lists every prefix; a literal sender lists its own only
    assert exchange.names("collab_noisy__server0__*") == [n for n in everyone if n.split("__")[1] == "server0"]
    honest = exchange.names("collab_noisy__server0__to__publisher__*")[0]
    with pytest.raises(MessageError, match="only 'publisher' opens it"):   # sealed: the run key died with the process
        publisher.receive(NoisyShare, Where("collab_noisy", "server0", parse_slot(honest).tag), "server 0's noisy share")
    moved = noisy_slot(0, "some other query")
    exchange.send(f"collab_noisy__server0__to__publisher__{moved.tag}", exchange.read(honest))
    publisher.run_key = RunKey()   # whatever key: the body is bound to the slot it was sealed for
    with pytest.raises(MessageError, match="does not open"):
        publisher.receive(NoisyShare, moved, "server 0's noisy share")
    with pytest.raises(MessageError, match="already holds"):   # the store never overwrites a name
        exchange.send(honest, b"replacement")
    _tampered_envelope_is_refused(tmp_path, cfg, store.as_uri(), store)


def test_collab_roles_through_an_sftp_drop_box(tmp_path, sftp_env):
    drop = sftp_env["dir"] / f"drop_{tmp_path.name}"
    url = sftp_env["url"] + str(drop)
    cfg = _publish_equals_the_simulation(tmp_path, url)
    assert isinstance(transport_for(url), FsspecTransport)
    assert {p.name for p in drop.iterdir()} == WRITERS   # written through the SSH server by the role processes
    _tampered_envelope_is_refused(tmp_path, cfg, url, drop)


def test_a_bad_exchange_url_or_a_key_inside_a_file_url_is_one_clear_line(tmp_path):
    cfg, _ = _setup(tmp_path)
    res = run_cli("collab", "server", str(cfg), "--index", "0", "--exchange", "nosuchscheme://box/run1", "--timeout", "5",
                  *_key(cfg, "server0"), ok=False, timeout=120)
    assert res.returncode == 2 and "--exchange 'nosuchscheme://box/run1'" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    res = run_cli("collab", "publish", str(cfg), "--exchange", tmp_path.as_uri(), "--out", str(tmp_path / "o"),
                  *_key(cfg, "publisher"), ok=False, timeout=120)
    assert res.returncode == 2 and "lies in the exchange folder" in res.stderr, res.stderr
