"""Who can read what, for every message a deployed run sends (issue 31): small runs of each kind that exists, over a
folder exchange, every role in this process (a thread each), every key kept: the server's run key (its private
folder) and each party's of each step, alignment and synth (memory only in a real run: caught here as the party
makes it).

For every envelope of the exchange the test tries every role's key on its body: a body in clear is read by everyone
(the relay too); a sealed body must open for the one role it is addressed to and for no other (not the server, not
another party). The rounds and their readers are the table "Who opens each message" in docs/threat-model.md: the
test checks the table against what it found, both ways (a round the table lacks, a round it lists that the run did
not send, a reader that differs: each fails). The relay, unpacking every body it can (messages are compressed npz),
finds no attribute name outside the hellos (the public config).

Runs (one each, shared by the tests): VertiMRF over dpfm, three parties after PSI (hellos, the alignment, the key
agreement with its wrapped group key, the sealed sketches); VertiMRF over he (real Paillier at 512-bit test keys,
the server's clique tables mid-run); a vertical twin (mst) over the he measure; a vertical twin (mst) over dpfm's
release (the parties' key agreement sealed to each other, each party's sketches sealed to the server: a curious party, which holds
the FM key, opens no other party's sketches). Slow: the twin over dpfm among three parties (the leader's wrapped group
key) and over grr.
"""
import json
import re
import shutil
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from deploy_helpers import collab_census_job, relay_reads

from vertisynth.core.courier import HELLO, Hello, read_hello, run_key_of
from vertisynth.core.envelope import open_envelope, seal
from vertisynth.core.errors import MessageError
from vertisynth.core.identity import Identity
from vertisynth.core.sealing import RunKey, Sealed, seal_to
from vertisynth.deploy import align as align_module, party as party_module
from vertisynth.deploy.align import run_party_align
from vertisynth.deploy.party import run_party, run_party_keys
from vertisynth.deploy.server import run_server
from vertisynth.deploy.session import SEAL_INFO, SEALED, RunState, Session, hello, roster_of, seal_aad
from vertisynth.deploy.transport import FolderTransport
from vertisynth.run.config import load_config
from vertisynth.run.pipeline import make_plan

pytest.importorskip("phe", reason="the he runs' real crypto needs `pip install vertisynth[he]` (phe, gmpy2)")
pytest.importorskip("gmpy2", reason="the he runs' real crypto needs `pip install vertisynth[he]` (phe, gmpy2)")

DOC = Path(__file__).resolve().parents[2] / "docs" / "threat-model.md"
# long attribute names: a chance match in ciphertext is out of the question (2^-200 per position)
LOS, WARD, BAND = "registry_length_of_stay_days", "registry_discharge_ward_code", "employer_claimed_amount_band"
SCHEMA = f"""[dataset.params.schema]
{LOS} = {{ kind = "categorical", categories = ["1", "2", "3", "4"] }}
{WARD} = {{ kind = "categorical", categories = ["1", "2", "3"] }}
{BAND} = {{ kind = "categorical", categories = ["1", "2", "3", "4"] }}
"""
TWO = {"registry": [LOS, WARD], "employer": [BAND]}
THREE = {"registry": [LOS], "clinic": [WARD], "employer": [BAND]}
# real Paillier at 512-bit test keys (_all_runs lowers the floor in this process): who opens what does not depend on
# the key's size; the 2048-bit runs across processes are test_he_deploy.py's and test_oracle_deploy.py's aim twin
HE = ('use = "vertimrf"\nparams = { encoder = "he", bins = 1000, iters = 5, rounds = 1, local_params = { iters = 5, '
      'refine_iters = 2 }, encoder_params = { crypto = "real", key_bits = 512, cliques = 1, selection_pairs = 1, '
      'workers = 1, round_timeout = 60.0 } }')
DPFM = ('use = "vertimrf"\nparams = { encoder_params = { t = 200 }, iters = 5, rounds = 1, local_params = { iters = 5, '
        'refine_iters = 2 } }')
TWIN = ('use = "mst"\nparams = { iters = 10, vertical = { measure = "he", trust = "none", params = { crypto = "real", '
        'key_bits = 512, workers = 1, round_timeout = 60.0 } } }')
TWIN_DPFM = ('use = "mst"\nparams = { iters = 10, vertical = { measure = "dpfm", trust = "server", params = { t = 200 } } }')
TWIN_GRR = 'use = "mst"\nparams = { iters = 10, vertical = { measure = "grr", trust = "none" } }'
GRR = ('use = "vertimrf"\nparams = { encoder = "grr", iters = 5, rounds = 1, local_params = { iters = 5, '
       'refine_iters = 2 } }')
RUNS = (("dpfm", THREE, DPFM, "psi"), ("vertimrf-he", TWO, HE, None), ("twin-he", TWO, TWIN, None),
        ("twin-dpfm", TWO, TWIN_DPFM, None))
# heavier (`slow`): the he measure's trust = "server" rounds, VertiMRF's he rounds among three parties, PSU
SLOW_RUNS = (("twin-he-server", TWO, TWIN.replace('trust = "none"', 'trust = "server"'), None),
             ("vertimrf-he-3", THREE, HE, None), ("psu-grr", TWO, GRR, "psu"),
             ("twin-dpfm-3", THREE, TWIN_DPFM, None), ("twin-grr", TWO, TWIN_GRR, None))
N = 120
READERS = {"everyone": "everyone (clear)", "server": "the server", "party": "the addressed party"}


def _table(rng, n=N):
    los = rng.integers(1, 5, n)
    return pd.DataFrame({LOS: los, WARD: rng.integers(1, 4, n), BAND: np.clip(los + rng.integers(-1, 2, n), 1, 4)})


def _roles(tmp, names, body):
    """Signing keys in each role's private folder and the config pinning them."""
    ids = {p: Identity.generate(p) for p in [*names, "server"]}
    for p, ident in ids.items():
        ident.save(tmp / f"private_{p}" / f"{p}_signing.pem")
    (tmp / "job.toml").write_text(body + "\n[roster.keys]\n" + "".join(
        f'{p} = "{ident.public_text()}"\n' for p, ident in ids.items()))
    config = load_config(tmp / "job.toml")
    make_plan(config)   # registers the message kinds in this process
    return config, ids


def _together(fn, names, join=300):
    errors = []

    def role(name):
        try:
            fn(name)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append((name, exc))

    threads = [threading.Thread(target=role, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(join)
    assert not errors and not any(t.is_alive() for t in threads), errors


def _run(tmp, parts, synth, align, keys):
    """One run with `parts` (party -> its attributes), after `align` (psi, psu) if any; the parties' run keys go
    into `keys` as they are made."""
    names = list(parts)
    rng = np.random.default_rng(3)
    full = _table(rng)
    blocks = "".join(f'[[parties]]\nname = "{p}"\nattributes = {json.dumps(a)}\n' for p, a in parts.items())
    if align:   # each party holds its own people under an identifier, in its own order
        ids = {p: np.sort(rng.permutation(N + 20)[:N]) for p in names}
        for p in names:
            frame = _table(rng, len(ids[p]))[parts[p]]
            frame.insert(0, "id", [f"p{i}" for i in ids[p]])
            frame.to_csv(tmp / f"{p}.csv", index=False)
        files = ", ".join(f'{p} = "{tmp}/{p}.csv"' for p in names)
        text = (f'seed = 5\nbudget = {{ epsilon = 4.0, delta = 1e-5 }}\n[dataset]\nname = "party_csv"\n'
                f'[dataset.params]\nfiles = {{ {files} }}\n{SCHEMA}{blocks}[synthesizer]\n{synth}\n'
                f'[alignment]\nuse = "{align}"\nparams = {{ workers = 1 }}\n')
    else:
        for p in names:
            full[parts[p]].to_csv(tmp / f"{p}.csv", index=False)
        text = (f'seed = 5\nbudget = {{ epsilon = 2.0, delta = 1e-5 }}\n[dataset]\nname = "csv"\n'
                f'[dataset.params]\npath = "not-on-any-machine.csv"\n{SCHEMA}{blocks}[synthesizer]\n{synth}\n')
    config, ids = _roles(tmp, names, text)
    ex, server_key = tmp / "shared", tmp / "private_server" / "server_signing.pem"

    def start(p):
        hello(config, ids[p], FolderTransport(ex), names, tmp / f"private_{p}", None, 60, 0.02)
        if align:
            run_party_align(config, p, tmp / f"{p}.csv", "id", ex, tmp / f"private_{p}", timeout=60, poll=0.02)
        if "encoder_params = { t =" in synth:   # dpfm: the key agreement
            run_party_keys(config, p, ex, tmp / f"private_{p}", timeout=60, poll=0.02)
    _together(start, names)
    csv = (lambda p: tmp / f"private_{p}" / f"{p}_aligned.csv") if align else (lambda p: tmp / f"{p}.csv")

    def role(name):
        if name == "server":
            run_server(config, ex, tmp / "out", key=server_key, timeout=120)
        else:
            run_party(config, name, ex, tmp / f"private_{name}", csv=csv(name), timeout=120)
    _together(role, [*names, "server"])
    saved = json.loads((tmp / "private_server" / "server_run_key.json").read_text())
    keys["server"] = [RunKey.from_private_bytes(bytes.fromhex(saved["x25519_private"]))]
    return config


def _all_runs(tmp_path_factory, which):
    """run -> (its folder, config, every role's run keys)."""
    made: dict = {}
    real = party_module.publish_party_key

    def keep(sess):   # the party's own run key of a step (alignment, synth), as only that party holds it
        key = real(sess)
        made.setdefault(sess.me, []).append(key)
        return key
    out = {}
    from vertisynth.plugins.encoders.he import paillier
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(paillier, "MIN_KEY_BITS", 512)
        mp.setattr(party_module, "publish_party_key", keep)
        mp.setattr(align_module, "publish_party_key", keep, raising=False)
        for kind, parts, synth, align in which:
            made.clear()
            tmp = tmp_path_factory.mktemp(kind)
            config = _run(tmp, parts, synth, align, made)
            out[kind] = (tmp, config, {role: list(k) for role, k in made.items()})
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return _all_runs(tmp_path_factory, RUNS)


@pytest.fixture(scope="module")
def slow_runs(tmp_path_factory):
    return _all_runs(tmp_path_factory, SLOW_RUNS)


def readers(path: Path, roster, keys: dict[str, list[RunKey]]):
    """The envelope's header and who opens its body: everyone when it is in clear, else each role one of whose run
    keys opens it (the signature, run and slot checked first, as every reader does)."""
    header, body = open_envelope(path.read_bytes(), roster, None, path.name)
    if not header.kind.startswith(SEALED):
        return header, {"relay", *keys}
    aad = seal_aad(header.run, header.config, header.sender, header.round, path.stem)
    opened = set()
    for role, held in keys.items():
        for key in held:
            try:
                key.open(Sealed.from_bytes(body, path.name), aad, SEAL_INFO, path.name)
            except MessageError:
                continue
            opened.add(role)
    return header, opened


def observed(folder: Path, config, keys) -> dict[str, str]:
    """round (digits dropped) -> who opens its bodies (a READERS key); every sealed body opens for exactly its one
    addressee."""
    roster = roster_of(config)
    seen: dict[str, set[str]] = {}
    for path in sorted((folder / "shared").glob("*.env")):
        header, who = readers(path, roster, keys)
        if "relay" in who:
            got = "everyone"
        else:
            assert len(header.to) == 1 and who == set(header.to), (path.name, header.to, who)
            got = "server" if list(header.to) == ["server"] else "party"
        seen.setdefault(re.sub(r"\d+$", "", header.round), set()).add(got)
    assert all(len(v) == 1 for v in seen.values()), seen   # one round, one kind of reader
    return {r: v.pop() for r, v in seen.items()}


def documented() -> dict[str, dict[str, str]]:
    """The table of docs/threat-model.md: run -> round -> its reader (a READERS key)."""
    text = DOC.read_text()
    block = text[text.index("<!-- who-reads-what -->"):text.index("<!-- /who-reads-what -->")]
    table: dict[str, dict[str, str]] = {}
    by_words = {v: k for k, v in READERS.items()}
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not cells[1].startswith("`"):
            continue
        reader = next((k for words, k in by_words.items() if cells[3].startswith(words)), None)
        assert reader is not None, f"docs/threat-model.md: reader {cells[3]!r} is none of {list(by_words)}"
        for run in cells[0].split(", "):
            table.setdefault(run, {})[cells[1].strip("`")] = reader
    return table


def _readers_as_documented(folder, config, keys, kind):
    got = observed(folder, config, keys)
    want = documented().get(kind, {})
    assert got == want, ("docs/threat-model.md's table differs from the run", {
        r: (got.get(r), want.get(r)) for r in sorted(set(got) | set(want)) if got.get(r) != want.get(r)})
    # only public keys, the public config and dpfm's wrapped group keys travel in clear
    clear = {r for r, who in got.items() if who == "everyone"}
    assert clear <= {"hello", "key", "keys-pub", "keys-wrap"}, clear


def _no_attribute_name_outside_the_hellos(folder, config):
    roster = roster_of(config)
    names = [n.encode() for n in (LOS, WARD, BAND)]
    for path in sorted((folder / "shared").glob("*.env")):
        header, body = open_envelope(path.read_bytes(), roster, None, path.name)
        data = path.read_bytes() + relay_reads(body)
        if header.round == "hello":   # the public config: every party holds the schema anyway
            assert all(n in data for n in names)
            continue
        assert not [n for n in names if n in data], path.name


@pytest.mark.parametrize("kind", [r[0] for r in RUNS])
def test_every_round_is_read_by_whom_the_threat_model_says(runs, kind):
    _readers_as_documented(*runs[kind], kind)


@pytest.mark.parametrize("kind", [r[0] for r in RUNS])
def test_a_curious_relay_reads_no_attribute_name_outside_the_hellos(runs, kind):
    """Before the he rounds of VertiMRF were sealed, the server's `he-queries` named the clique tables it chose and
    the parties' he-key/he-rows/he-sums named their layouts: a relay read them here."""
    _no_attribute_name_outside_the_hellos(*runs[kind][:2])


@pytest.mark.slow
@pytest.mark.parametrize("kind", [r[0] for r in SLOW_RUNS])
def test_the_heavier_runs_are_read_as_documented_and_name_no_attribute(slow_runs, kind):
    _readers_as_documented(*slow_runs[kind], kind)
    _no_attribute_name_outside_the_hellos(*slow_runs[kind][:2])


def test_a_curious_party_of_a_twin_over_dpfm_opens_no_other_party_s_sketches(runs):
    """The twin's release: each party's DP FM sketches are sealed to the server. A party holds the FM key (agreed among
    the parties), with which another party's sketches would give that party's values away; so it must not read them:
    every run key it made opens its own share at most (none, in fact: the share is sealed to the server), and only
    the server's opens each."""
    from vertisynth.core.messages import Message
    from vertisynth.deploy.oracle_rounds import OracleAnswer

    folder, config, keys = runs["twin-dpfm"]
    roster = roster_of(config)
    shares = {}
    for path in sorted((folder / "shared").glob("oracle-answer-*.env")):
        header, body = open_envelope(path.read_bytes(), roster, None, path.name)
        aad = seal_aad(header.run, header.config, header.sender, header.round, path.stem)
        answer = Message.from_bytes(keys["server"][0].open(Sealed.from_bytes(body, path.name), aad, SEAL_INFO,
                                                           path.name), path.name)
        if isinstance(answer, OracleAnswer) and "release" in answer.arrays:
            shares[header.sender] = (body, aad, path.name)
    assert set(shares) == set(TWO)   # one share per party, in one release
    for party in TWO:
        for owner, (body, aad, name) in shares.items():
            for key in keys[party]:
                with pytest.raises(MessageError):
                    key.open(Sealed.from_bytes(body, name), aad, SEAL_INFO, name)


def test_vertimrf_he_refuses_a_query_in_clear_sealed_to_another_resigned_or_edited_in_one_line(runs, tmp_path):
    """The server's clique tables reach a party only sealed to it by the server: one sent in clear, one sealed to the
    other party's key, the server's sealed one re-signed by the other party, and an edited one are each refused in
    one line."""
    folder, config, keys = runs["vertimrf-he"]
    roster = roster_of(config)
    shutil.copytree(folder / "shared", tmp_path / "shared")
    ex = FolderTransport(tmp_path / "shared")
    [honest] = [n for n in ex.names("he-queries__server__to__registry__*")]
    header, sealed_body = open_envelope(ex.read(honest), roster, None, honest)
    state = RunState("registry", header.run, header.config, tuple(TWO))
    registry = Session(None, roster, ex, state, run_key=keys["registry"][0], sealed=True)
    _, plain = registry.open(honest, ("he-queries",))   # the honest one opens, for the registry only
    assert json.loads(plain)["stage"] == "cliques"
    server = Identity.load("server", folder / "private_server" / "server_signing.pem")
    employer = Identity.load("employer", folder / "private_employer" / "employer_signing.pem")

    def post(name, who, kind, body):
        ex.send(name, seal(who, header.run, header.config, ["registry"], "he-queries", kind, body))
        with pytest.raises(MessageError) as err:
            registry.open(name, ("he-queries",))
        line = str(err.value)
        assert "\n" not in line and "refused" in line, line
        return line

    assert "sent in clear" in post("he-queries__server__to__registry__901", server, "he_queries", plain)
    other = seal_to(keys["employer"][0].public, plain, seal_aad(header.run, header.config, "server", "he-queries",
                                                             "he-queries__server__to__registry__902"), SEAL_INFO)
    assert "does not open" in post("he-queries__server__to__registry__902", server, header.kind, other.to_bytes())
    assert "does not open" in post("he-queries__employer__to__registry__903", employer, header.kind, sealed_body)
    data = bytearray(ex.read(honest))
    data[-5] ^= 1
    ex.send("he-queries__server__to__registry__904", bytes(data))
    with pytest.raises(MessageError, match="refused|does not match") as err:
        registry.open("he-queries__server__to__registry__904", ("he-queries",))
    assert "\n" not in str(err.value)


# -- a [collab] run: custodians, compute servers and the publisher over a folder exchange ---------------------------
COLLAB_ROLES = ("A", "B", "server0", "server1", "publisher")
COLLAB_TUNING = """[collab.tuning]
method = "{method}"
folds = 2
grid = {{ iters = [10, 20] }}
{more}"""
# collab: combined binning; heavier (`slow`): collab-paper: local binning and the paper's tuning (fold tables to the
# custodians, votes); collab-sound: a sound tuning method (DP scores to the custodians). The default tests see the
# tuning's messages sealed in tests/collab/test_collab_distributed.py::test_tuning_as_separate_processes_equals_the_simulation
COLLAB_RUNS = (("collab", "combined", ""),)
SLOW_COLLAB_RUNS = (("collab-paper", "local", COLLAB_TUNING.format(
                        method="paper", more='metric = "workload_error.l1_1way"\nthresholds = { A = 1.0, B = 2.0 }')),
                    ("collab-sound", "combined", COLLAB_TUNING.format(method="compose_all", more="")))
COLLAB_TYPES = ("custodian", "server", "publisher")


def _role_type(role: str) -> str:
    return "publisher" if role == "publisher" else "server" if role.startswith("server") else "custodian"


def _collab_run(tmp, preprocessing, tuning, keys):
    """One [collab] run, every role a thread of this process (as `vertisynth collab custodian|server|publish`), on
    secure noise (the cross-machine default); each role's run key goes into `keys` as the role makes it."""
    from vertisynth.collab.distributed import run_custodian, run_publisher, run_server

    text, csvs = collab_census_job(tmp, 300, iters=20, preprocessing=preprocessing, simulation=False, extra=tuning)
    ids = {r: Identity.generate(r) for r in COLLAB_ROLES}
    (tmp / "c.toml").write_text(text + "\n[roster.keys]\n" + "".join(f'{r} = "{i.public_text()}"\n' for r, i in ids.items()))
    ex = tmp / "shared"

    def role(name):
        plan = make_plan(load_config(tmp / "c.toml"))   # each role its own plan and ledger, as in its own process
        if name == "publisher":
            run_publisher(plan, ex, tmp / "out", timeout=120, identity=ids[name])
        elif name.startswith("server"):
            run_server(plan, int(name[len("server"):]), ex, timeout=120, identity=ids[name])
        else:
            run_custodian(plan, name, csvs[name], ex, timeout=120, identity=ids[name])
    _together(role, list(COLLAB_ROLES))
    assert (tmp / "out" / "synthetic.csv").is_file()
    return load_config(tmp / "c.toml")


def _all_collab_runs(tmp_path_factory, which):
    """run -> (its exchange folder, config, every role's run key)."""
    from vertisynth.collab.channel import Channel

    real = Channel.publish_run_key
    out = {}
    for kind, preprocessing, tuning in which:
        keys: dict[str, RunKey] = {}

        def keep(channel, keys=keys):   # the role's run key, as only that role holds it (memory only)
            keys[channel.me] = real(channel)
            return keys[channel.me]
        tmp = tmp_path_factory.mktemp(kind)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(Channel, "publish_run_key", keep)
            config = _collab_run(tmp, preprocessing, tuning, keys)
        assert set(keys) == set(COLLAB_ROLES)
        out[kind] = (tmp / "shared", config, keys)
    return out


@pytest.fixture(scope="module")
def collab_runs(tmp_path_factory):
    return _all_collab_runs(tmp_path_factory, COLLAB_RUNS)


@pytest.fixture(scope="module")
def slow_collab_runs(tmp_path_factory):
    return _all_collab_runs(tmp_path_factory, SLOW_COLLAB_RUNS)


def collab_envelopes(folder: Path, config, keys: dict[str, RunKey]):
    """Every envelope of a collab run: (slot, header, the message or None, the roles whose run key opens its body
    ("everyone" for a body in clear)). A sealed body must open for exactly its one addressee."""
    from vertisynth.core.messages import Message

    roster = roster_of(config)
    for path in sorted(folder.glob("*.env")):
        header, body = open_envelope(path.read_bytes(), roster, None, path.stem)
        if not header.kind.startswith(SEALED):   # the one hello and the one run-key body (core/courier.py)
            yield path.stem, header, (read_hello(path.read_bytes(), roster, path.stem) if header.round == HELLO
                                      else run_key_of(body, header.sender)), {"everyone"}
            continue
        opened = {}
        for role, key in keys.items():
            try:
                opened[role] = key.open(Sealed.from_bytes(body, path.name), seal_aad(
                    header.run, header.config, header.sender, header.round, path.stem), SEAL_INFO, path.name)
            except MessageError:
                continue
        assert len(header.to) == 1 and set(opened) == set(header.to), (path.name, header.to, sorted(opened))
        yield path.stem, header, Message.from_bytes(opened[header.to[0]], path.name), set(opened)


def collab_round(name: str, msg) -> str:
    """The table's round of an envelope: its slot's kind; a measurement round's noisy shares apart."""
    from vertisynth.collab.distributed import is_measure
    from vertisynth.collab.secure_aggregation import NoisyShare

    kind = name.split("__")[0]
    return kind + (":measure" if isinstance(msg, NoisyShare) and is_measure(msg.query) else "")


def collab_observed(folder, config, keys) -> dict[str, frozenset[str]]:
    """round -> who opens its bodies: {"everyone"} (clear) or the kinds of role (custodian, server, publisher)."""
    seen: dict[str, set[str]] = {}
    for name, _, msg, who in collab_envelopes(folder, config, keys):
        seen.setdefault(collab_round(name, msg), set()).update(
            who if who == {"everyone"} else {_role_type(r) for r in who})
    assert not [r for r, v in seen.items() if "everyone" in v and len(v) > 1], seen
    return {r: frozenset(v) for r, v in seen.items()}


def collab_documented() -> dict[str, dict[str, frozenset[str]]]:
    """The collab table of docs/threat-model.md: run -> round -> its readers."""
    text = DOC.read_text()
    block = text[text.index("<!-- who-reads-what-collab -->"):text.index("<!-- /who-reads-what-collab -->")]
    table: dict[str, dict[str, frozenset[str]]] = {}
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not cells[1].startswith("`"):
            continue
        if cells[3].startswith(READERS["everyone"]):
            who = frozenset({"everyone"})
        else:
            who = frozenset(t for t in COLLAB_TYPES if t in cells[3])
            assert cells[3].startswith("the addressed") and who, f"docs/threat-model.md: reader {cells[3]!r}"
        for run in cells[0].split(", "):
            table.setdefault(run, {})[cells[1].strip("`")] = who
    return table


@pytest.mark.parametrize("kind", [r[0] for r in COLLAB_RUNS])
def test_every_collab_round_is_read_by_whom_the_threat_model_says(collab_runs, kind):
    """Before every collab message was sealed to its recipient, the servers' noisy shares (the measured marginals
    included), the tuning's steps, fold tables, DP scores and the custodians' votes travelled in clear: every
    role and a relay read them, and this table check failed on them."""
    _collab_readers_as_documented(collab_runs, kind)


@pytest.mark.slow
@pytest.mark.parametrize("kind", [r[0] for r in SLOW_COLLAB_RUNS])
def test_the_tuned_collab_runs_are_read_as_documented_by_every_curious_role(slow_collab_runs, kind):
    _collab_readers_as_documented(slow_collab_runs, kind)
    _curious_server(*slow_collab_runs[kind])
    _publisher_and_relay(*slow_collab_runs[kind])


def _collab_readers_as_documented(runs, kind):
    got = collab_observed(*runs[kind])
    want = collab_documented().get(kind, {})
    assert got == want, ("docs/threat-model.md's collab table differs from the run", {
        r: (sorted(got.get(r, ())), sorted(want.get(r, ()))) for r in sorted(set(got) | set(want))
        if got.get(r) != want.get(r)})
    assert {r for r, who in got.items() if who == {"everyone"}} <= {"hello", "key"}


def test_a_curious_collab_server_reads_only_uniform_shares(collab_runs):
    """Everything server0 legitimately receives: the hellos and run keys (public), the shares sealed to it, the
    tuning steps. No other server's noisy share (on the code before, every server's noisy share went to every role
    in clear: server0 added its own shares to server1's and read each measured marginal with one server's noise),
    no publisher's message. Its shares are uniform on Z_2^64 whatever the counts: in the run (a KS test against
    uniform), and as the same distribution for two very different count tables (the deployed share_counts)."""
    from scipy import stats

    from vertisynth.collab.secure_aggregation import share_counts

    _curious_server(*collab_runs["collab"])
    ones, spike = np.ones(4000, np.int64), np.r_[np.zeros(3999, np.int64), 10**6]
    for server in (0, 1):   # server 0 holds the mask, server 1 the counts minus it: both uniform
        a, b = (share_counts("A", "q", x, 2, None)[server].share / 2.0**64 for x in (ones, spike))
        assert stats.ks_2samp(a, b).pvalue > 1e-4 and stats.kstest(a, "uniform").pvalue > 1e-4


def _curious_server(folder, config, keys):
    from scipy import stats

    from vertisynth.collab.distributed import TuningStep
    from vertisynth.collab.secure_aggregation import CountShare

    view = [msg for _, _, msg, who in collab_envelopes(folder, config, keys) if "server0" in who or "everyone" in who]
    assert {type(m) for m in view} <= {Hello, bytes, CountShare, TuningStep}, folder   # bytes: a run key
    shares = np.concatenate([m.share.ravel() for m in view if isinstance(m, CountShare)])
    assert shares.size > 100 and stats.kstest(shares / 2.0**64, "uniform").pvalue > 1e-4, folder


def test_the_collab_publisher_and_a_relay_read_only_what_they_are_given(collab_runs):
    """The publisher opens the servers' noisy shares and the votes, never a custodian's share; a relay (any reader
    of the exchange) opens the hellos and run keys only: no share, noisy total, step, table, score or vote."""
    _publisher_and_relay(*collab_runs["collab"], tuned=False)


def _publisher_and_relay(folder, config, keys, tuned=True):
    from vertisynth.collab.distributed import Vote
    from vertisynth.collab.secure_aggregation import NoisyShare

    envelopes = list(collab_envelopes(folder, config, keys))
    assert {type(m) for _, _, m, who in envelopes if who == {"everyone"}} == {Hello, bytes}, folder   # bytes: run keys
    publisher = {type(m) for _, _, m, who in envelopes if "publisher" in who}
    assert NoisyShare in publisher and publisher <= {NoisyShare, Vote} and (Vote in publisher) == tuned, folder
