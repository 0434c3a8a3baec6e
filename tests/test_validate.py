"""`kvsm validate`: TLC accepts a log that is a behaviour of the spec and names the first
step that is not."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvsm.cli import app
from kvsm.config import Config, load_config
from kvsm.log import Header, LogWriter
from kvsm.state import initial_state
from kvsm.transitions import REGISTRY, Transition, apply, names_for
from kvsm.tla.validate import SPEC_PARAMS, validate

from .helpers import skew_nth_match

runner = CliRunner()
DATA = Path(__file__).resolve().parent / "data"


def _walk(tmp_path: Path, config: str = "small", steps: int = 200, seed: int = 0, needs: frozenset = frozenset({"Insert", "Commit"}), tries: int = 500) -> Path:
    """The walk of the first seed from `seed` on that takes every transition of `needs`
    (by default: inserts and commits) and runs at least 15 steps (small's bounded walks
    can end early), found by search rather than luck."""
    for s in range(seed, seed + tries):
        log = tmp_path / f"walk-{config}-{s}.jsonl"
        res = runner.invoke(app, ["walk", "--config", config, "--steps", str(steps), "--seed", str(s), "-o", str(log)])
        assert res.exit_code == 0, res.output
        names = {r.get("name") for r in _lines(log)}
        if len(_lines(log)) > 15 and needs <= names:
            return log
    raise AssertionError(f"no walk of {config} from seed {seed} takes {sorted(needs)}")


# a walk of the l3 config that spills and reloads (and admits the reload)
L3_NEEDS = frozenset({"Commit", "SpillSubmit", "SpillGathered", "SpillDone", "SpillAck", "ReloadMark", "ReloadReserve", "ReloadDone", "ReloadAdmit"})


def _lines(log: Path) -> list[dict]:
    return [json.loads(x) for x in log.read_text().splitlines()]


def _write(log: Path, rows: list[dict]) -> None:
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_every_transition_has_the_spec_parameters_of_its_log_arguments():
    # the spec has every transition of the model, the L3 ones included
    # (the two ack readings take two transitions: AckAppend per rank, AckAppendAll at once)
    every = Config(L3=1, prepared_backups=True, stale_prune="reference", ack_append="reference")
    assert set(SPEC_PARAMS) == set(REGISTRY) == set(names_for(every)) | set(names_for(replace(every, ack_append="lockstep")))
    for name in REGISTRY:
        spec = REGISTRY[name]
        want = set(spec.args) | ({"rank"} if spec.per_rank else set())
        assert set(SPEC_PARAMS[name]) == want, name


@pytest.mark.tlc
def test_validate_accepts_a_walk(tmp_path):
    log = _walk(tmp_path)
    res = runner.invoke(app, ["validate", str(log), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["ok"] and out["matched"] == out["steps"] == len(_lines(log)) - 2  # the header and the end line
    assert out["first_rejected"] is None


@pytest.mark.tlc
def test_validate_accepts_a_walk_of_the_default_config(tmp_path):
    log = _walk(tmp_path, "default", steps=60, seed=3)
    res = validate(log)
    assert res.ok and res.matched == 60


@pytest.mark.tlc
def test_validate_rejects_a_tampered_step_and_names_its_line(tmp_path):
    log = _walk(tmp_path)
    rows = _lines(log)
    k = next(i for i, r in enumerate(rows) if i > 0 and r["name"] == "Insert")
    rows[k]["args"]["rid"] = 7  # no such request
    _write(log, rows)
    res = runner.invoke(app, ["validate", str(log), "--json"])
    assert res.exit_code == 1
    out = json.loads(res.stdout)
    assert not out["ok"]
    assert out["first_rejected"]["line"] == k + 1 and out["first_rejected"]["name"] == "Insert"
    assert out["matched"] == k - 1
    assert out["model_rejected"]["line"] == k + 1  # the model rejects it too
    # the story of the steps before it, the rejected step and why, on stderr
    story = res.stderr
    assert f"step {k - 1}  {rows[k - 1]['name']}" in story and f"step {k}  Insert rid=7" in story
    assert f"stopped at line {k + 1}: rejected: request 7 does not exist" in story
    assert f"kvsm show {log} --all" in story


def _story_steps(story: str) -> list[str]:
    """The transition names of the steps a story tells (`step N  Name args`)."""
    return [ln.split()[2] for ln in story.splitlines() if ln.startswith("step ") and ln.split()[1].isdigit()]


@pytest.mark.tlc
def test_validate_reports_a_digest_the_model_does_not_reproduce(tmp_path):
    log = _walk(tmp_path)
    rows = _lines(log)
    rows[3]["digest"] = "0" * 32
    _write(log, rows)
    res = runner.invoke(app, ["validate", str(log)])
    assert res.exit_code == 1
    assert f"{log}:4: digest {'0' * 32} is not the model's" in " ".join(res.stderr.split())
    # the story goes up to the step whose digest differs, and says so
    assert _story_steps(res.stderr) == [r["name"] for r in rows[1:4]]
    assert f"stopped at line 4: digest mismatch: the log has {'0' * 32}" in res.stderr
    assert f"kvsm show {log} --all" in res.stderr
    out = validate(log)
    assert not out.ok and out.first_rejected is None
    assert out.digest_mismatch["line"] == 4


@pytest.mark.tlc
def test_validate_accepts_a_walk_of_the_l3_config_that_spills_and_reloads(tmp_path):
    log = _walk(tmp_path, "l3", needs=L3_NEEDS, tries=1000)
    res = runner.invoke(app, ["validate", str(log), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["ok"] and out["matched"] == out["steps"] == len(_lines(log)) - 2  # the header and the end line


@pytest.mark.tlc
@pytest.mark.parametrize("name", ["SpillDone", "ReloadDone"])
def test_validate_rejects_a_tampered_l3_step_and_names_its_line(tmp_path, name):
    log = _walk(tmp_path, "l3", needs=L3_NEEDS, tries=1000)
    rows = _lines(log)
    k = next(i for i, r in enumerate(rows) if i > 0 and r["name"] == name)
    rows[k]["args"]["ok"] = not rows[k]["args"]["ok"]  # the write (read) did the opposite
    _write(log, rows)
    res = validate(log)
    assert not res.ok
    assert res.first_rejected["line"] == k + 1 and res.first_rejected["name"] == name
    assert res.matched == k - 1
    assert res.model_rejected["line"] == k + 1  # the model rejects it too


def _l3_features(log: Path) -> set[str]:
    """What a log of an L3 config does that the l3 model (one request alive, one op in
    flight) never does, found by replaying it with the model."""
    from kvsm.log import read_log

    header, stream = read_log(str(log))
    s = initial_state(header.config)
    out = set()
    for _, _, t, _ in stream:
        prev, s = s, apply(s, t)
        if any(len(op.waiters) >= 2 for op in s.reloads):
            out.add("a reload joined by a second request")
        if len(s.spills) >= 2:
            out.add("two spills in flight")
        if len(s.reloads) >= 2:
            out.add("two reloads in flight")
        if t.name == "SpillAck" and len(prev.spills) - len(s.spills) >= 2:
            out.add("one SpillAck of two ops")
        if t.name == "SpillDone" and not t.arg("ok"):
            out.add("a failed spill write")
        if t.name == "ReloadAdmit" and len(s.nodes) > len(prev.nodes):
            out.add("an admitted reload")
    return out


@pytest.mark.tlc
def test_a_steps_delta_from_the_keys_it_wrote_is_the_delta_from_every_key(tmp_path):
    """validate writes a step's delta from the keys its transaction wrote (`kvsm.writes`);
    from the same states without that record it compares every key of every map. Both
    write the same text for every step of walks of the default config and of an L3
    config that spills and reloads, and the record is there for nearly every step."""
    from kvsm.log import read_log
    from kvsm.tla.compact import Tokens
    from kvsm.tla.delta import DeltaEncoder

    logs = [_walk(tmp_path, "default", steps=400), _walk(tmp_path, "l3", needs=L3_NEEDS, tries=1000)]
    for log in logs:
        header, stream = read_log(str(log))
        items = list(stream)
        tok = Tokens()
        for _, _, t, _ in items:
            if t.name == "Arrive":
                tok.add(tuple(t.arg("tokens")))
        enc = DeltaEncoder(header.config, tok)
        s, recorded, changed = initial_state(header.config), 0, 0
        for _, _, t, _ in items:
            n = apply(s, t)
            d = enc.delta(s, n)
            recorded += enc._written is not None
            bare = replace(n)  # the same state, without the record of what was written
            assert bare.written is None
            assert enc.delta(s, bare) == d, f"{log.name}: {t}"
            changed += bool(d)
            s = n
        assert recorded >= len(items) - 1 and changed > len(items) // 2, (log.name, recorded, changed, len(items))


def test_validate_accepts_walks_where_the_l3_tier_is_busy(tmp_path):
    """Walks of tests/data/l3_busy.toml (three live requests, two spills and two reloads
    in flight) are behaviours of the spec, step by step; together they join reloads, ack
    two spills at once and keep two reloads in flight, which the l3 model cannot."""
    want = {
        "a reload joined by a second request", "two spills in flight", "two reloads in flight",
        "one SpillAck of two ops", "a failed spill write", "an admitted reload",
    }
    seen: set[str] = set()
    for seed in range(40):
        log = tmp_path / f"busy-{seed}.jsonl"
        res = runner.invoke(app, ["walk", "--config", str(DATA / "l3_busy.toml"), "--steps", "300", "--seed", str(seed), "-o", str(log)])
        assert res.exit_code == 0, res.output
        new = _l3_features(log) - seen
        if not new:
            continue
        out = validate(log)
        assert out.ok and out.matched == 300, (seed, out.to_json())
        seen |= new
        if seen >= want:
            return
    raise AssertionError(f"no walk of l3_busy from seeds 0..39 shows {sorted(want - seen)}")


def _log_of(path: Path, steps: list[Transition]) -> Path:
    cfg = load_config("small")
    s = initial_state(cfg)
    with LogWriter(path, Header(config=cfg, seed=None, source="hand", initial_digest=s.digest(), extra={})) as w:
        for t in steps:
            s = apply(s, t)
            w.write(t, s)
    return path


@pytest.mark.tlc
def test_validate_names_the_step_whose_model_state_the_spec_does_not_reach(tmp_path, monkeypatch):
    """A model Rollback that forgets to un-count the finished write: the model accepts
    every step of its own log, the spec reaches another state at the Rollback."""
    right = REGISTRY["Rollback"]
    monkeypatch.setitem(REGISTRY, "Rollback", replace(right, apply=lambda s, t: replace(right.apply(s, t), write_done=s.write_done)))
    steps = [
        Transition.make("Arrive", rid=0, tokens=[1, 2], out_pages=0),
        Transition.make("Match", rid=0),
        Transition.make("Insert", rid=0),
        Transition.make("Reserve", node=1, fits=True),
        Transition.make("WriteDone", rank=0),
        Transition.make("Rollback", node=1),
    ]
    log = _log_of(tmp_path / "hand.jsonl", steps)
    res = runner.invoke(app, ["validate", str(log), "--json"])
    assert res.exit_code == 1, res.output
    out = json.loads(res.stdout)
    assert not out["ok"] and out["model_rejected"] is None and out["digest_mismatch"] is None
    assert out["first_rejected"] == {"line": 7, "step": 6, "transition": "Rollback(node=1)", "name": "Rollback"}
    assert out["matched"] == 5
    # the story ends with the step the spec rejects, told as the model took it
    assert _story_steps(res.stderr) == [t.name for t in steps]
    assert "state after step 6" in res.stderr and f"kvsm show {log} --all" in res.stderr


@pytest.mark.tlc
def test_the_spec_plans_a_load_back_through_unlock_contributions_as_the_model_does(tmp_path, monkeypatch):
    """Lane 0 is full (a locked node and the parent of two lane-1 leaves) when a host-only
    node is loaded back into it: no leaf contributes to lane 0 directly, so the planner
    evicts the leaves for what their parent would free, then the parent. The ci model
    never needs this; here TLC must reach the model's state after that LoadBack."""
    import kvsm.planner as planner
    from kvsm.config import Config

    cfg = Config(name="unlock", R=2, P=1, L1=2, L2=4)
    T = Transition.make
    steps = [
        # node 1 = [4]: backed, then evicted to L2
        T("Arrive", rid=0, tokens=[4], out_pages=0), T("Match", rid=0), T("Insert", rid=0),
        T("Reserve", node=1, fits=True), T("WriteDone", rank=0), T("WriteDone", rank=1),
        T("CommitCall", rank=0), T("CommitCall", rank=1), T("Commit"),
        T("Finish", rid=0), T("EvictDevice", node=1),
        # [1] (lane 0) with leaves [2] and [3] (lane 1)
        T("Arrive", rid=1, tokens=[1, 2], out_pages=0), T("Match", rid=1), T("Insert", rid=1), T("Finish", rid=1),
        T("Arrive", rid=2, tokens=[1, 3], out_pages=0), T("Match", rid=2), T("Insert", rid=2), T("Finish", rid=2),
        # [5] takes the last lane-0 page and stays locked
        T("Arrive", rid=3, tokens=[5], out_pages=0), T("Match", rid=3), T("Insert", rid=3),
        T("Arrive", rid=4, tokens=[4, 9], out_pages=0), T("Match", rid=4), T("LoadBack", rid=4),
        T("LoadDone", rank=1), T("LoadDone", rank=0),
    ]
    unlocks = []
    real_unlock = planner._unlock
    monkeypatch.setattr(planner, "_unlock", lambda *a: unlocks.append(real_unlock(*a)) or unlocks[-1])
    s = initial_state(cfg)
    log = tmp_path / "unlock.jsonl"
    with LogWriter(log, Header(config=cfg, seed=None, source="hand", initial_digest=s.digest(), extra={})) as w:
        for t in steps:
            if t.name == "LoadBack":
                before = s
            s = apply(s, t)
            w.write(t, s)
    assert any(u > 0 for u in unlocks)
    assert set(before.nodes) - set(s.nodes) == {2, 3, 4}  # both leaves, then their parent
    res = validate(log)
    assert res.ok, res.to_json()


# ---- long logs: segments checked apart -------------------------------------------------------------


@pytest.fixture(scope="module")
def long_log(tmp_path_factory) -> Path:
    """A long walk of tests/data/l3_busy.toml (three live requests, spills and reloads in
    flight), cut into three segments below; its pools are small, so that TLC's work is
    the segments' and not the spec's actions on large pools."""
    log = tmp_path_factory.mktemp("long") / "busy-long.jsonl"
    res = runner.invoke(app, ["walk", "--config", str(DATA / "l3_busy.toml"), "--steps", "900", "--seed", "5", "-o", str(log)])
    assert res.exit_code == 0, res.output
    return log


@pytest.mark.tlc
def test_validate_follows_a_long_log_in_segments_that_cover_it(long_log):
    """A long log is cut into segments that TLC follows apart (two at once), each from
    the model's state before its first step; together they take every step."""
    res = validate(long_log, workers=2, segments=3)
    assert res.ok and res.matched == res.steps == 900, res.to_json()
    segs = res.to_json()["segments"]
    assert [s["segment"] for s in segs] == [0, 1, 2]
    assert segs[0]["first_step"] == 1 and sum(s["steps"] for s in segs) == 900
    assert all(a["first_step"] + a["steps"] == b["first_step"] for a, b in zip(segs, segs[1:]))
    assert all(s["cpu_seconds"] and s["cpu_seconds"] > 0 and s["peak_rss_mb"] for s in segs)


@pytest.mark.tlc
def test_a_wrong_step_deep_in_a_long_log_is_named_with_its_variable_and_segment(long_log, monkeypatch):
    """A model Match that stamps one tick too many, at one step in the last third of a
    long log: TLC names that step, its segment, and `clock` as the variable whose value
    after it is not the model's; every earlier step (in the earlier segments too) was
    taken."""
    log = long_log
    names = [r.get("name") for r in _lines(log)[1:]]
    k = next(i + 1 for i, n in enumerate(names) if i >= 700 and n == "Match")  # 1-based step
    nth = names[:k].count("Match")
    skew_nth_match(monkeypatch, nth)
    res = validate(log, workers=2, segments=3)
    assert not res.ok and res.model_rejected is None
    assert res.first_rejected == {"line": k + 1, "step": k, "transition": str(Transition.make("Match", **_lines(log)[k]["args"])), "name": "Match"}
    assert res.matched == k - 1
    assert res.rejection["variables"] == ["clock"] and res.rejection["segment"] == 2
    last = res.segments[2]
    assert last.first_step <= k < last.first_step + last.steps
