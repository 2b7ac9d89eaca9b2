"""loopback.Deployment(poll=...): the SuperNode's idle sleeps capped (Flower hard-codes 3 s), nothing else changed."""
import os
import sys
import time

import pytest

pytest.importorskip("flwr")
from vertisynth.deploy.flower import loopback  # noqa: E402


def test_the_supernode_shim_caps_only_its_modules_sleeps(monkeypatch, tmp_path):
    import flwr.supernode.cli as cli
    import flwr.supernode.start_client_internal as node

    seen = {}

    def fake_supernode():   # stands in for Flower's entry point: sleeps as its poll loop does, reads its argv
        t0 = time.monotonic()
        node.time.sleep(3)
        seen["slept"], seen["argv"], seen["clock"] = time.monotonic() - t0, list(sys.argv), node.time.monotonic()
        return 0

    monkeypatch.setattr(cli, "flower_supernode", fake_supernode)
    monkeypatch.setattr(node, "time", time)   # restored after the shim replaced it
    monkeypatch.setattr(sys, "argv", ["loopback.py", "--superlink", "127.0.0.1:1"])
    with pytest.raises(SystemExit) as done:
        loopback._supernode_polling_every(0.05)
    assert done.value.code == 0
    assert seen["slept"] < 1.0 and seen["clock"] > 0   # capped; the module's other `time` calls still work
    assert seen["argv"] == ["flower-supernode", "--superlink", "127.0.0.1:1"]


def test_a_deployment_with_a_poll_starts_the_shim_and_tells_the_superexec(tmp_path, monkeypatch):
    started = {}
    for poll in (None, 0.5):
        dep = loopback.Deployment(tmp_path / str(poll), poll=poll)
        dep.ca = tmp_path / "ca.crt"
        monkeypatch.setattr(dep, "_start", lambda name, cmd, poll=poll: started.setdefault(poll, cmd))
        dep.supernode("hospital", tmp_path / "key.pem", {"party": "hospital"})
        started[poll, "env"] = dep.env.get("FLWR_SUPEREXEC_TASK_POLL_INTERVAL")
    assert started[None][0].endswith("flower-supernode")   # Flower's own command and polls by default
    assert started[None, "env"] == os.environ.get("FLWR_SUPEREXEC_TASK_POLL_INTERVAL")
    assert started[0.5][:5] == [sys.executable, "-m", "vertisynth.deploy.flower.loopback", "supernode", "0.5"]
    flags = [[a for a in started[k] if a.startswith("--")] for k in (None, 0.5)]
    assert flags[0] == flags[1] and "--superlink" in flags[1]   # the same arguments (ports are each their own)
    assert started[0.5, "env"] == "0.5"
