"""loopback.Deployment(poll=...): the SuperNode's idle sleeps capped (Flower hard-codes 3 s), nothing else changed;
Deployment(warm=True): each app process Flower launches forks from a process that imported it once."""
import importlib.util
import os
import sys
import time

import pytest

# find_spec, not importorskip: flwr (≈ 0.2 CPU s) is imported by the tests that use it, so an xdist worker that
# runs none of them does not pay for it at collection
if importlib.util.find_spec("flwr") is None:
    pytest.skip("could not import 'flwr': pip install 'vertisynth[flower]'", allow_module_level=True)
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
    assert started[0.5][:6] == [sys.executable, "-m", "vertisynth.deploy.flower.loopback", "supernode", "0.5", "cold"]
    flags = [[a for a in started[k] if a.startswith("--")] for k in (None, 0.5)]
    assert flags[0] == flags[1] and "--superlink" in flags[1]   # the same arguments (ports are each their own)
    assert started[0.5, "env"] == "0.5"


def test_a_warm_deployment_wraps_flowers_commands_and_keeps_their_arguments(tmp_path, monkeypatch):
    started = {}
    for warm in (False, True):
        dep = loopback.Deployment(tmp_path / str(warm), poll=0.5, warm=warm)
        monkeypatch.setattr(dep, "_start", lambda name, cmd, warm=warm: started.setdefault((warm, name), cmd))
        monkeypatch.setattr(dep, "wait_for", lambda *a, **k: None)
        dep.superlink({"ca.crt": tmp_path / "ca.crt", "superlink.crt": tmp_path / "s.crt", "superlink.key": tmp_path / "s.key"})
        dep.supernode("hospital", tmp_path / "key.pem", {"party": "hospital"})
    shim = [sys.executable, "-m", "vertisynth.deploy.flower.loopback"]
    assert started[False, "superlink"][0].endswith("flower-superlink")
    assert started[True, "superlink"][:4] == [*shim, "superlink"]
    flags = [[a for a in started[w, "superlink"] if a.startswith("--")] for w in (False, True)]
    assert flags[0] == flags[1] and "--enable-supernode-auth" in flags[1]   # Flower's own arguments (ports differ)
    assert started[True, "node_hospital"][:6] == [*shim, "supernode", "0.5", "warm"]
    # the SuperExec command Flower builds, rewritten to the warm one for its app, its arguments unchanged
    flower = ["flower-superexec", "--insecure", "--runtime-api-address", "127.0.0.1:9094", "--parent-pid", "7"]
    assert loopback._warm_superexec(flower, "flwr-clientapp") == [*shim, "superexec", "flwr-clientapp", *flower[1:]]
    with pytest.raises(RuntimeError, match="update loopback.py"):   # a Flower that starts it otherwise: said, loudly
        loopback._warm_superexec(["flwr-superexec-v2", "--insecure"], "flwr-clientapp")


PROBE = """import json, os, sys
IMPORTED_IN = os.getpid()   # the process that imported this module

def main():
    out = os.environ["PROBE_OUT"] + "." + str(os.getpid())
    with open(out, "w") as fh:
        json.dump({"argv": sys.argv, "pid": os.getpid(), "imported_in": IMPORTED_IN}, fh)
"""
DRIVER = """import json, sys
from vertisynth.deploy.flower.loopback import WarmLauncher
launch = WarmLauncher("probe-app", "probe", "main", ["probe"])
procs = [launch.Popen(["probe-app", "--token", t]) for t in ("a", "b")]
for p in procs:
    p.join(60)
other = launch.Popen([sys.executable, "-c", "pass"])   # any other command: a plain subprocess
print(json.dumps([p.exitcode for p in procs] + [other.wait(60), type(other).__name__]))
"""


def test_the_warm_launcher_forks_one_process_per_launch_from_a_process_that_imported_the_app(tmp_path):
    import json
    import subprocess

    (tmp_path / "probe.py").write_text(PROBE)
    env = {**os.environ, "PROBE_OUT": str(tmp_path / "ran"),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    res = subprocess.run([sys.executable, "-c", DRIVER], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads(res.stdout) == [0, 0, 0, "Popen"]
    ran = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("ran.*"))]
    assert sorted(r["argv"][2] for r in ran) == ["a", "b"]                     # one process per launch, its own argv
    assert all(r["argv"][:2] == ["probe-app", "--token"] for r in ran)
    assert len({r["pid"] for r in ran}) == 2
    # both imported the app before they were forked: in the forkserver (one process, not either of them)
    assert len({r["imported_in"] for r in ran}) == 1 and ran[0]["imported_in"] not in {r["pid"] for r in ran}


# a stand-in for a test process holding a Deployment: starts one process as Deployment._start does (a session of its
# own, PARENT set to this pid), which arms the watchdog as loopback's __main__ does and starts a child of its own,
# then prints both pids and waits to be killed
HOLDER = """import os, subprocess, sys
from vertisynth.deploy.flower import loopback
arm = bool(int(sys.argv[1]))
env = {**os.environ, **({loopback.PARENT: str(os.getpid())} if arm else {})}
node = subprocess.Popen([sys.executable, "-c", '''import os, subprocess, sys, time
from vertisynth.deploy.flower.loopback import PARENT, exit_with_parent
armed = exit_with_parent(every=0.1)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])   # inherits the environment
print(armed, PARENT in os.environ, child.pid, flush=True)
time.sleep(60)'''], env=env, stdout=subprocess.PIPE, text=True, start_new_session=True)
print(node.pid, node.stdout.readline().strip(), flush=True)
import time; time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:   # a zombie no one reaps (no init in a container) is gone too
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_what_a_deployment_started_dies_with_the_process_that_started_it(tmp_path):
    """A test killed from outside (CI's `timeout`) never runs Deployment.close: its SuperLink and SuperNodes, each in
    a session of their own, used to poll each other for ever. Armed, the node's group goes with its parent, and
    the variable does not reach the node's own children (Flower's SuperExec: a watchdog there would compare against
    the wrong parent). Unarmed (the old behaviour), the node outlives the killed holder."""
    import signal
    import subprocess

    for arm in (True, False):
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(int(arm))], stdout=subprocess.PIPE, text=True)
        node, armed, env_left, child = holder.stdout.readline().split()
        node, child = int(node), int(child)
        assert (armed, env_left) == (str(arm), "False")
        holder.kill()
        holder.wait(10)
        deadline = time.monotonic() + (10 if arm else 1)   # armed: the watchdog polls every 0.1 s
        while (_alive(node) or _alive(child) or not arm) and time.monotonic() < deadline:
            time.sleep(0.05)
        try:
            assert _alive(node) is not arm and _alive(child) is not arm
        finally:
            for pid in (node, child):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
