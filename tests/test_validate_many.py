"""`validate_many` and `kvsm validate LOG LOG ...`: many logs followed by shared TLC
processes, each log's verdict its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvsm.cli import app
from kvsm.tla.validate import validate, validate_many

from .helpers import skew_nth_match

runner = CliRunner()


def _walk(tmp_path: Path, seed: int, config: str = "small", steps: int = 150) -> Path:
    log = tmp_path / f"walk-{config}-{seed}.jsonl"
    res = runner.invoke(app, ["walk", "--config", config, "--steps", str(steps), "--seed", str(seed), "-o", str(log)])
    assert res.exit_code == 0, res.output
    return log


def _names(log: Path) -> list[str]:
    return [json.loads(x).get("name") for x in log.read_text().splitlines()[1:-1]]


@pytest.mark.tlc
def test_logs_of_one_config_share_one_tlc_process_and_each_gets_the_verdict_of_validate(tmp_path):
    logs = [_walk(tmp_path, s) for s in (1, 2, 3)] + [_walk(tmp_path, 4, "default", 60)]
    many = validate_many(logs, workers=1)
    alone = [validate(log) for log in logs]
    assert [(r.log, r.ok, r.steps, r.matched) for r in many] == [(a.log, a.ok, a.steps, a.matched) for a in alone]
    assert all(r.ok for r in many)
    # the three small-config logs in one TLC run; the default one (other constants) in another
    assert many[0].segments[0].tlc is many[1].segments[0].tlc is many[2].segments[0].tlc
    assert many[3].segments[0].tlc is not many[0].segments[0].tlc


@pytest.mark.tlc
def test_a_rejected_log_among_many_is_named_and_the_logs_after_it_are_still_followed(tmp_path, monkeypatch):
    """The second of three logs has a Match that stamps one tick too many: it alone is
    rejected, at that step with `clock`; the third, after it in the same TLC process,
    is followed by another and accepted."""
    logs = [_walk(tmp_path, s) for s in (1, 2, 3)]
    before = _names(logs[0]).count("Match")
    k = next(i + 1 for i, n in enumerate(_names(logs[1])) if n == "Match" and i > 20)
    nth = before + _names(logs[1])[:k].count("Match")
    skew_nth_match(monkeypatch, nth)
    res = validate_many(logs, workers=1)
    assert res[0].ok and res[2].ok, (res[0].to_json(), res[2].to_json())
    assert not res[1].ok and res[1].first_rejected["step"] == k and res[1].first_rejected["line"] == k + 1
    assert res[1].rejection["variables"] == ["clock"] and res[1].matched == k - 1
    assert res[2].segments[0].tlc is not res[1].segments[0].tlc  # a second TLC run followed the rest


@pytest.mark.tlc
def test_validate_of_several_logs_prints_one_json_object_per_log_and_fails_if_one_is_rejected(tmp_path):
    a, b = _walk(tmp_path, 1), _walk(tmp_path, 2)
    rows = [json.loads(x) for x in b.read_text().splitlines()]
    k = next(i for i, r in enumerate(rows) if i > 0 and r.get("name") == "Insert")
    rows[k]["args"]["rid"] = 7  # no such request
    b.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = runner.invoke(app, ["validate", str(a), str(b), "--json"])
    assert res.exit_code == 1, res.output
    out = [json.loads(x) for x in res.stdout.splitlines()]
    assert [o["log"] for o in out] == [str(a), str(b)]
    assert out[0]["ok"] and not out[1]["ok"] and out[1]["first_rejected"]["line"] == k + 1


def test_validate_of_several_logs_names_the_one_that_cannot_be_read_before_any_tlc(tmp_path):
    a = _walk(tmp_path, 1)
    missing = tmp_path / "nope.jsonl"
    res = runner.invoke(app, ["validate", str(a), str(missing)])
    assert res.exit_code == 2 and f"{missing}: cannot open" in res.output


def test_logs_are_shared_among_workers_by_config_and_cost_without_tlc(tmp_path):
    """How `validate_many` deals stretches to TLC processes: logs of one config share
    up to `workers` processes of consecutive logs; logs of another config get their
    own; a forced segment count gives each segment its own process."""
    from kvsm.tla.validate import TraceModules, _runs

    small = [_walk(tmp_path, s, steps=200) for s in (1, 2, 3, 4)]
    default = _walk(tmp_path, 5, "default", 60)
    mods = [TraceModules(str(p), 2, None, None, index=i) for i, p in enumerate(small + [default])]
    # 4 short small-config logs (under 2,000 steps together): one process; the default-config log: another
    assert _runs(mods, 2, None) == [[(0, 0), (1, 0), (2, 0), (3, 0)], [(4, 0)]]
    # with a minimum of 2,000 steps per process out of the way, two processes of consecutive logs
    mods[0].plan = [(0, 5000)]
    mods[0].items = mods[0].items * 40
    runs = _runs(mods, 2, None)
    assert runs[0] == [(0, 0)] and runs[1] == [(1, 0), (2, 0), (3, 0)] and runs[2] == [(4, 0)]
    forced = [TraceModules(str(p), 2, 2, None, index=i) for i, p in enumerate(small[:2])]
    assert _runs(forced, 2, 2) == [[(0, 0)], [(0, 1)], [(1, 0)], [(1, 1)]]
