"""Issue 31 (robust7): `vertisynth party synth --csv` closes its coded_chunks spill (the party's coded rows) when
the command ends, returned or raised, as the one-process run does (tests/run/test_run_spills_closed.py). Before,
run_party never closed it: the files stayed on disk while anything held the stream (a traceback, a long-lived
process that runs several steps), and a forked command exits without running finalizers. The party step runs in
this process with the cycle collector off, so nothing rests on a collection."""
from __future__ import annotations


import pytest
from deploy_helpers import hello_all, publish_key, with_roster
from test_server_waits import PARTIES, SMALL, _csvs
from spill_helpers import spills_left

import vertisynth.deploy.party as party_mod
from vertisynth.deploy.party import run_party
from vertisynth.run.config import load_config


def test_party_synth_csv_leaves_no_spill_when_it_returns_or_fails(tmp_path, spill_dir, monkeypatch, in_process):
    (tmp_path / "job.toml").write_text(with_roster(tmp_path, SMALL.replace("ENCODER", 'encoder = "grr"'), PARTIES))
    _csvs(tmp_path)
    hello_all(tmp_path, PARTIES)
    publish_key(tmp_path)
    config = load_config(tmp_path / "job.toml")
    from vertisynth.run import spill as spill_mod
    made, inner = [], spill_mod.new_spill_folder

    def seen(prefix):   # the spill folders the step makes (to show there were some)
        folder = inner(prefix)
        made.append(folder.name)
        return folder
    monkeypatch.setattr("vertisynth.run.stream.new_spill_folder", seen)

    names = run_party(config, "hospital", tmp_path / "shared", tmp_path / "private_hospital",
                      csv=tmp_path / "hospital.csv", timeout=30)
    assert names and made and spills_left(spill_dir) == [], (made, spills_left(spill_dir))   # the step's result is held

    def boom(sess):   # the step fails after its passes over the file (the spill exists) and before it sends
        raise RuntimeError("no run key")
    monkeypatch.setattr(party_mod, "fetch_run_key", boom)
    made.clear()
    with pytest.raises(RuntimeError, match="no run key") as failed:
        run_party(config, "insurer", tmp_path / "shared", tmp_path / "private_insurer", csv=tmp_path / "insurer.csv",
                  timeout=30)
    assert made and spills_left(spill_dir) == [], (made, spills_left(spill_dir))   # the traceback holds the step's frames
    del failed
