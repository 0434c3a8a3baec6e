"""The transition log: walk -> replay reproduces every digest; bad input is rejected with
the line number and the reason; the JSON Schema agrees with the reader."""

from __future__ import annotations

import re

import json
from importlib import resources

import jsonschema
import pytest

from kvsm.config import load_config
from kvsm.log import Header, LogError, LogWriter, read_log
from kvsm.output import OutputError
from kvsm.replay import replay
from kvsm.state import initial_state
from kvsm.walk import walk


def write_walk(path, config="small", steps=150, seed=3):
    cfg = load_config(config)
    s0 = initial_state(cfg)
    digests = []
    with LogWriter(path, Header(config=cfg, seed=seed, source="walk", initial_digest=s0.digest(), extra={})) as w:
        for t, s in walk(cfg, steps, seed, s0):
            w.write(t, s)
            digests.append(s.digest())
    return digests


@pytest.fixture
def log(tmp_path):
    p = tmp_path / "walk.jsonl"
    write_walk(p, "default", 200, 5)
    return p


def test_walk_then_replay_reproduces_every_digest(tmp_path):
    p = tmp_path / "w.jsonl"
    digests = write_walk(p, "default", 300, 11)
    _, stream = read_log(p)
    assert [d for _, _, _, d in stream] == digests
    res = replay(p, check=True)
    assert res.ok and res.transitions == 300 and res.final_digest == digests[-1]


def test_same_seed_gives_the_same_bytes(tmp_path):
    write_walk(tmp_path / "a.jsonl", "default", 200, 9)
    write_walk(tmp_path / "b.jsonl", "default", 200, 9)
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    write_walk(tmp_path / "c.jsonl", "default", 200, 10)
    assert (tmp_path / "a.jsonl").read_bytes() != (tmp_path / "c.jsonl").read_bytes()


def edit(path, lineno, fn):
    lines = path.read_text().splitlines(keepends=True)
    lines[lineno - 1] = fn(lines[lineno - 1])
    path.write_text("".join(lines))


def mismatch(path):
    res = replay(path)
    assert not res.ok
    return res.first_mismatch


def test_truncated_line_is_rejected_with_its_number(log):
    text = log.read_text()
    log.write_text(text[: len(text) - 20])  # cut inside the last line
    n = len(text.splitlines())
    m = mismatch(log)
    assert m["line"] == n and "not terminated" in m["reason"]


def test_malformed_json_is_rejected(log):
    edit(log, 5, lambda s: s[:30] + "\n")
    m = mismatch(log)
    assert m == {"line": 5, "reason": m["reason"]} and "not valid JSON" in m["reason"]


def test_wrong_type_is_rejected(log):
    lines = log.read_text().splitlines()
    n = next(i for i, x in enumerate(lines[1:], start=2) if "rid" in json.loads(x)["args"])

    def bad(line):
        d = json.loads(line)
        d["args"]["rid"] = "seven"
        return json.dumps(d) + "\n"

    edit(log, n, bad)
    m = mismatch(log)
    assert m["line"] == n and m["reason"].endswith("argument 'rid' must be an integer, got 'seven'")


def test_unknown_transition_is_rejected(log):
    edit(log, 4, lambda s: s.replace(json.loads(s)["name"], "Evcit", 1))
    m = mismatch(log)
    assert m == {"line": 4, "reason": "unknown transition 'Evcit'"}


def test_tampered_digest_is_rejected(log):
    edit(log, 6, lambda s: s.replace(json.loads(s)["digest"], "0" * 32))
    m = mismatch(log)
    assert m["line"] == 6 and "digest mismatch" in m["reason"] and "0" * 32 in m["reason"]


def test_rejected_guard_is_reported(log):
    def other(line):
        d = json.loads(line)
        d["name"], d["args"] = "Finish", {"rid": 999}
        d.pop("rank", None)
        return json.dumps(d) + "\n"

    edit(log, 7, other)
    m = mismatch(log)
    assert m["line"] == 7 and "rejected: request 999 does not exist" in m["reason"]


def test_bad_header_is_rejected(tmp_path, log):
    edit(log, 1, lambda s: s.replace('"R":4', '"R":0'))
    m = mismatch(log)
    assert m["line"] == 1 and "field 'R' must be >= 1" in m["reason"]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert mismatch(empty) == {"line": 1, "reason": "empty file: no header"}


def test_replay_stops_at_the_first_mismatch_and_keeps_the_good_prefix(log):
    edit(log, 10, lambda s: s.replace(json.loads(s)["digest"], "f" * 32))
    res = replay(log)
    assert res.transitions == 8 and res.first_mismatch["line"] == 10


def test_failed_write_leaves_no_file_and_keeps_the_old_one(tmp_path):
    p = tmp_path / "keep.jsonl"
    p.write_text("precious\n")
    cfg = load_config("small")
    with pytest.raises(RuntimeError):
        with LogWriter(p, Header(config=cfg, seed=0, source="walk", initial_digest=initial_state(cfg).digest(), extra={})) as w:
            for t, s in walk(cfg, 5, 0):
                w.write(t, s)
            raise RuntimeError("crash mid-write")
    assert p.read_text() == "precious\n"
    assert [x.name for x in tmp_path.iterdir()] == ["keep.jsonl"]


def test_schema_accepts_every_line_the_writer_produces_and_rejects_bad_ones(log, tmp_path):
    schema = json.loads(resources.files("kvsm.schema").joinpath("log.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    l3_log = tmp_path / "l3.jsonl"
    cfg_path = tmp_path / "l3.toml"
    cfg_path.write_text("R = 2\nL1 = 2\nL2 = 4\nL3 = 6\nmax_live = 2\nprompts = [{pages = [1, 2]}, {pages = [1, 3]}]\n")
    write_walk(l3_log, str(cfg_path), 1500, 4)
    lines = [json.loads(x) for x in log.read_text().splitlines()] + [json.loads(x) for x in l3_log.read_text().splitlines()]
    names = {d.get("name") for d in lines}
    assert {"SpillDone", "ReloadAdmit", "DiskFail", "WriteDone", "Commit"} <= names
    for d in lines:
        errors = list(validator.iter_errors(d))
        assert not errors, (d, errors[0].message)
    bad = dict(lines[1], name="Evcit")
    assert list(validator.iter_errors(bad))
    bad = dict(lines[1], digest="xyz")
    assert list(validator.iter_errors(bad))
    commit_with_rank = {"i": 1, "name": "Commit", "rank": 0, "args": {}, "digest": "0" * 32}
    assert list(validator.iter_errors(commit_with_rank))


def test_a_log_that_is_not_utf8_is_rejected_with_its_line(log, tmp_path):
    data = log.read_bytes().splitlines(keepends=True)
    data[6] = data[6][:20] + b"\xff" + data[6][21:]
    log.write_bytes(b"".join(data))
    m = mismatch(log)
    assert m["line"] == 7 and "not UTF-8" in m["reason"]
    head = tmp_path / "head.jsonl"
    head.write_bytes(b"\xff\n")
    m = mismatch(head)
    assert m["line"] == 1 and "not UTF-8" in m["reason"]


def test_a_missing_log_is_named_without_a_line_number(tmp_path):
    m = mismatch(tmp_path / "nope.jsonl")
    assert m["line"] == 0 and "cannot open" in m["reason"]
    with pytest.raises(Exception) as e:
        read_log(tmp_path / "nope.jsonl")
    assert str(e.value).startswith(f"{tmp_path / 'nope.jsonl'}: cannot open")


def test_a_log_path_that_cannot_be_written_is_an_error_before_anything_runs(tmp_path):
    cfg = load_config("small")
    header = Header(config=cfg, seed=0, source="walk", initial_digest=initial_state(cfg).digest(), extra={})
    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_text("a file\n")
    for target, why in ((tmp_path / "d", "is a directory"), (tmp_path / "f" / "x.jsonl", "not a directory")):
        with pytest.raises(OutputError) as e:
            with LogWriter(target, header):
                raise AssertionError("the block must not run")
        assert str(target) in str(e.value) and why in str(e.value).lower()
    assert sorted(x.name for x in tmp_path.iterdir()) == ["d", "f"] and list((tmp_path / "d").iterdir()) == []


def test_a_rename_that_fails_at_the_end_leaves_no_temporary_file(tmp_path):
    cfg = load_config("small")
    target = tmp_path / "late.jsonl"
    with pytest.raises(OutputError) as e:
        with LogWriter(target, Header(config=cfg, seed=0, source="walk", initial_digest=initial_state(cfg).digest(), extra={})) as w:
            for t, s in walk(cfg, 5, 0):
                w.write(t, s)
            target.mkdir()  # the path became a directory while the run wrote
    assert "late.jsonl" in str(e.value)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["late.jsonl"] and list(target.iterdir()) == []


# ---- the end line (format 2) ---------------------------------------------------------------


def test_the_writer_ends_every_log_with_its_count_and_final_digest(tmp_path):
    p = tmp_path / "w.jsonl"
    digests = write_walk(p, "small", 40, 2)
    end = json.loads(p.read_text().splitlines()[-1])
    assert end == {"end": True, "transitions": len(digests), "final_digest": digests[-1]} and len(digests) > 10
    assert json.loads(p.read_text().splitlines()[0])["kvsm_log"] == 2
    empty = tmp_path / "empty.jsonl"
    cfg = load_config("small")
    s0 = initial_state(cfg)
    with LogWriter(empty, Header(config=cfg, seed=0, source="walk", initial_digest=s0.digest(), extra={})):
        pass
    assert json.loads(empty.read_text().splitlines()[-1]) == {"end": True, "transitions": 0, "final_digest": s0.digest()}
    assert replay(empty).ok


def test_a_log_cut_at_any_line_boundary_is_detected(log):
    lines = log.read_text().splitlines(keepends=True)
    for keep in (1, 2, 100, len(lines) - 1):
        log.write_text("".join(lines[:keep]))
        res = replay(log)
        assert not res.ok and res.malformed, keep
        assert res.first_mismatch == {
            "line": keep + 1,
            "reason": f"the log ends after transition {keep - 1} without its end line: it was cut short (a log of format 2 ends with {{\"end\": true, ...}})",
        }
        _, stream = read_log(log)
        with pytest.raises(LogError, match="without its end line"):
            list(stream)


def test_an_end_line_that_disagrees_or_is_followed_by_more_is_an_error(log):
    lines = log.read_text().splitlines(keepends=True)
    end = json.loads(lines[-1])
    cases = [
        (lines[:-2] + lines[-1:], "end line says 200 transitions, the log has 199: lines are missing"),
        (lines[:-1] + [json.dumps(dict(end, final_digest="0" * 32)) + "\n"], "end line's final digest 0000"),
        (lines + ['{"i": 201}\n'], "a line after the end line"),
        (lines[:-1] + [json.dumps(dict(end, extra=1)) + "\n"], "end line has unknown field 'extra'"),
    ]
    for rows, reason in cases:
        log.write_text("".join(rows))
        res = replay(log)
        assert not res.ok and res.malformed and reason in res.first_mismatch["reason"], (reason, res.first_mismatch)


def test_a_format_1_log_is_still_replayed_with_a_warning_and_a_newer_one_is_refused(log, tmp_path):
    from typer.testing import CliRunner

    from kvsm.cli import app

    lines = log.read_text().splitlines(keepends=True)
    old = tmp_path / "old.jsonl"
    old.write_text(lines[0].replace('{"kvsm_log":2,', '{"kvsm_log":1,', 1) + "".join(lines[1:-1]))
    res = replay(old)
    assert res.ok and res.format == 1 and res.transitions == 200
    r = CliRunner().invoke(app, ["replay", str(old)])
    assert r.exit_code == 0, r.output
    assert r.stderr.startswith(f"warning: {old}: a log of format 1 (this kvsm writes format 2): it is read, but it has no end line")
    assert "regenerate it with the command that wrote it (source 'walk', seed 5) to get format 2" in r.stderr
    new = tmp_path / "new.jsonl"
    new.write_text(lines[0].replace('{"kvsm_log":2,', '{"kvsm_log":3,', 1) + "".join(lines[1:]))
    assert mismatch(new) == {"line": 1, "reason": "log format 3 is newer than this kvsm reads (formats 1 to 2): upgrade kvsm"}


def test_validate_detects_a_cut_log_before_it_runs_tlc(log):
    from typer.testing import CliRunner

    from kvsm.cli import app

    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(lines[:-1]))
    r = CliRunner().invoke(app, ["validate", str(log)])
    assert r.exit_code == 2
    assert r.stderr.strip() == f"error: {log}:{len(lines)}: the log ends after transition 200 without its end line: it was cut short (a log of format 2 ends with {{\"end\": true, ...}})"


def test_a_request_asking_more_output_pages_than_the_device_has_replays(tmp_path):
    # found by a campaign: the simulator logs such an Arrive (the request never fits and is
    # aborted); a reader that refused it would refuse a log the model produced
    from kvsm.replay import replay
    from kvsm.sim.options import SimOptions
    from kvsm.sim.runner import simulate

    log = tmp_path / "sim.jsonl"
    simulate(SimOptions(workload="multi-turn", config="l3", seed=54, tiers="l1,l2", requests=8, ranks=1, l1_pages=1), log)
    asks = [int(m) for m in re.findall(r'"out_pages":(\d+)', log.read_text())]
    assert max(asks) > 1, "the run no longer asks for more output pages than its one device page"
    res = replay(log, check=True)
    assert res.first_mismatch is None and res.violations == []
