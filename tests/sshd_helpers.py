"""A throwaway OpenSSH server on 127.0.0.1 for the sftp:// exchange tests (deploy and collab): its own host key and
one user key, SFTP only, killed at teardown. Fixtures `sshd` and `sftp_env`, made global by tests/conftest.py."""
import getpass
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

SSHD = Path("/usr/sbin/sshd")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    if not SSHD.exists():
        pytest.skip("no /usr/sbin/sshd (install Debian's openssh-server to run the sftp:// exchange tests)")
    pytest.importorskip("paramiko")
    pytest.importorskip("fsspec")
    d = tmp_path_factory.mktemp("sshd")
    for key in ("host_key", "user_key"):
        subprocess.run(["ssh-keygen", "-q", "-N", "", "-t", "ed25519", "-f", str(d / key)], check=True, timeout=30)
    shutil.copy(d / "user_key.pub", d / "authorized_keys")
    port = _free_port()
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'host_key'}\nAuthorizedKeysFile {d / 'authorized_keys'}\n"
        f"PasswordAuthentication no\nKbdInteractiveAuthentication no\nStrictModes no\nUsePAM no\n"
        f"PermitRootLogin prohibit-password\nSubsystem sftp internal-sftp\nPidFile {d / 'sshd.pid'}\n")
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(exist_ok=True)   # sshd's privilege-separation directory
    proc = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(d / "sshd_config")], stdout=subprocess.DEVNULL,
                            stderr=open(d / "sshd.log", "w"))
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"sshd did not start: {(d / 'sshd.log').read_text()[-2000:]}")
            time.sleep(0.1)
    host_pub = (d / "host_key.pub").read_text().split()
    (d / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
    env = {"FSSPEC_SFTP_KEY_FILENAME": str(d / "user_key"), "VERTISYNTH_KNOWN_HOSTS": str(d / "known_hosts")}
    try:
        yield {"url": f"sftp://{getpass.getuser()}@127.0.0.1:{port}", "env": env, "dir": d}
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture
def sftp_env(sshd, monkeypatch):
    """The user key and known_hosts, for this process (fsspec's config) and for the role processes (env)."""
    import fsspec.config

    for k, v in sshd["env"].items():
        monkeypatch.setenv(k, v)
    monkeypatch.setitem(fsspec.config.conf, "sftp", {"key_filename": sshd["env"]["FSSPEC_SFTP_KEY_FILENAME"]})
    return sshd
