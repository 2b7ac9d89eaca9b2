"""The by-hand round (`collab share | aggregate | reconstruct`) moves plain files: unsigned, not run-bound, shares
unsealed. It is a one-machine aid, refused without --local-only; across machines the signed roles run
(`collab custodian|server|publish`). Files that were replaced, renamed, moved or corrupted are refused."""
import io
import json
import shutil
import struct
import zipfile

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from vertisynth.collab.cli import collab


def _cli(*args):
    return CliRunner().invoke(collab, list(args), catch_exceptions=False)


@pytest.fixture
def round_(tmp_path):
    """Two custodians' shares for two servers, on this machine."""
    (tmp_path / "d.json").write_text(json.dumps({"0": {"type": "discrete", "domain": 3},
                                                 "1": {"type": "discrete", "domain": 2}}))
    rng = np.random.default_rng(0)
    for name in ("a", "b"):
        pd.DataFrame({"0": rng.integers(0, 3, 50), "1": rng.integers(0, 2, 50)}).to_csv(tmp_path / f"{name}.csv",
                                                                                          index=False)
        res = _cli("share", "--local-only", "--custodian", name, "--csv", str(tmp_path / f"{name}.csv"), "--domain",
                   str(tmp_path / "d.json"), "--marginal", "0,1", "--servers", "2", "--out", str(tmp_path / "inbox"))
        assert res.exit_code == 0, res.output
    return tmp_path


def _aggregate(tmp, server, out="outbox"):
    return _cli("aggregate", "--local-only", "--server", str(server), "--rho", "1", "--inbox", str(tmp / "inbox"),
                "--out", str(tmp / out))


def test_refused_without_local_only(round_):
    tmp = round_
    for args in (["share", "--custodian", "a", "--csv", str(tmp / "a.csv"), "--domain", str(tmp / "d.json"),
                  "--marginal", "0", "--out", str(tmp / "x")],
                 ["aggregate", "--server", "0", "--rho", "1", "--inbox", str(tmp / "inbox"), "--out", str(tmp / "y")],
                 ["reconstruct", "--outbox", str(tmp / "inbox"), "--out", str(tmp / "z.npz")]):
        res = _cli(*args)
        assert res.exit_code == 2 and "--local-only" in res.output and "collab custodian|server|publish" in res.output
        assert "unsigned" in res.output, res.output
    assert not (tmp / "x").exists() and not (tmp / "y").exists() and not (tmp / "z.npz").exists()


def test_a_replaced_share_is_refused(round_):
    """b's share replaced by a copy of a's (a custodian counted twice, b dropped): refused by name and content."""
    tmp = round_
    shutil.copy(tmp / "inbox" / "server0" / "a__0-1.npz", tmp / "inbox" / "server0" / "b__0-1.npz")
    res = _aggregate(tmp, 0)
    assert res.exit_code == 2 and "holds 'a''s share of '0,1', not what its name says" in res.output, res.output


def test_a_share_moved_to_another_server_is_refused(round_):
    tmp = round_
    shutil.copy(tmp / "inbox" / "server1" / "b__0-1.npz", tmp / "inbox" / "server0" / "b__0-1.npz")
    res = _aggregate(tmp, 0)
    assert res.exit_code == 2 and "does not match" in res.output, res.output


def _payload_spans(data: bytes) -> list[tuple[int, int]]:
    """Where each member's compressed bytes lie in an .npz (a flip in a zip timestamp would change nothing)."""
    spans = []
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        for info in z.infolist():
            # the local header's own name and extra lengths (numpy writes a zip64 extra there, not in the directory)
            name_len, extra_len = struct.unpack_from("<HH", data, info.header_offset + 26)
            start = info.header_offset + 30 + name_len + extra_len
            spans.append((start, start + info.compress_size))
    return spans


@pytest.mark.parametrize("where", [0.1, 0.3, 0.5, 0.7, 0.9])
def test_a_corrupted_share_is_refused(round_, where):
    """A flipped bit anywhere in any member's compressed payload is one clear error (zlib's own errors included:
    these shares are fresh CSPRNG bytes each run, so the flip lands on different deflate codes each time)."""
    tmp = round_
    path = tmp / "inbox" / "server1" / "a__0-1.npz"
    clean = path.read_bytes()
    for start, end in _payload_spans(clean):
        data = bytearray(clean)
        data[start + int((end - start) * where)] ^= 0x40
        path.write_bytes(bytes(data))
        res = _aggregate(tmp, 1)
        assert res.exit_code == 2 and "is truncated or not a vertisynth message" in res.output, res.output


def test_a_renamed_noisy_share_is_refused_and_the_honest_round_reconstructs(round_):
    tmp = round_
    for s in (0, 1):
        assert _aggregate(tmp, s).exit_code == 0
    ok = _cli("reconstruct", "--local-only", "--outbox", str(tmp / "outbox"), "--out", str(tmp / "r.npz"))
    assert ok.exit_code == 0, ok.output
    (tmp / "outbox" / "server1__0-1.npz").rename(tmp / "outbox" / "server1__0.npz")
    res = _cli("reconstruct", "--local-only", "--outbox", str(tmp / "outbox"), "--out", str(tmp / "r2.npz"))
    assert res.exit_code == 2 and "not what its name says" in res.output, res.output
