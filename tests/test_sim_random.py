"""`kvsm sim --schedule random`: seeded, replayable, the timed schedule's order at bias
0, and orders the timed schedule never takes at a bias; `--set` sets config fields."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from typer.testing import CliRunner

from kvsm.cli import app
from kvsm.replay import replay
from kvsm.sim import SimError, SimOptions, simulate
from kvsm.sim.options import parse_schedule, parse_setting, prepare

runner = CliRunner()
ARGS = ["--workload", "synthetic", "--requests", "30", "--l1-pages", "30", "--l2-pages", "400"]


def _log(tmp_path, name, *extra):
    p = tmp_path / f"{name}.jsonl"
    r = runner.invoke(app, ["sim", *ARGS, "-o", str(p), "--json", *extra])
    assert r.exit_code == 0, r.output
    return p, json.loads(r.stdout), [json.loads(x) for x in p.read_text().splitlines()]


def test_random_at_bias_0_takes_the_timed_order_and_is_seeded_and_replayable(tmp_path):
    _, timed, tl = _log(tmp_path, "timed", "--seed", "2", "--faults", "slow:0.1,abort:0.05")
    _, zero, zl = _log(tmp_path, "zero", "--seed", "2", "--faults", "slow:0.1,abort:0.05", "--schedule", "random:0")
    assert tl[1:] == zl[1:] and zero["schedule"] == "random" and zero["bias"] == 0
    assert zl[0]["extra"]["bias"] == 0 and "bias" not in tl[0]["extra"]
    a, sa, la = _log(tmp_path, "a", "--seed", "4", "--schedule", "random")
    _, sb, lb = _log(tmp_path, "b", "--seed", "4", "--schedule", "random")
    assert la == lb and sa["bias"] in (0.05, 0.15, 0.3, 0.5)
    res = replay(a)
    assert res.first_mismatch is None and res.final_digest == sa["final_digest"]


def _pairs(opts: SimOptions) -> tuple[Counter, Counter]:
    names: list[str] = []
    simulate(opts, None, None, lambda t, s: names.append(t.name))
    return Counter(names), Counter(zip(names, names[1:]))


def test_random_takes_orders_the_timed_schedule_does_not():
    base = dict(workload="system-prompts", config="default", requests=30, l1_pages=30, l2_pages=400, check=True)
    timed_n, timed_p = _pairs(SimOptions(**base, seed=1))
    n, p = Counter(), Counter()
    for seed in range(3, 11):  # each run takes some of the free steps' kinds (drawn)
        a, b = _pairs(SimOptions(**base, seed=seed, schedule="random:0.3"))
        n += a
        p += b
        if n["EvictDevice"] and n["EvictHost"] and n["Split"] and p[("CommitCall", "WriteDone")]:
            break
    # a commit round whose ranks stand at different points: a rank finishes a write after
    # another entered the collective
    assert p[("CommitCall", "WriteDone")] and not timed_p[("CommitCall", "WriteDone")]
    # steps the spec allows at any time, which the timed schedule only takes inside others
    assert n["EvictDevice"] and n["EvictHost"] and n["Split"]
    assert not timed_n["EvictDevice"] and not timed_n["EvictHost"] and not timed_n["Split"]
    # an arrival that waits before it matches
    assert any(a == "Arrive" and b != "Match" for a, b in p) and all(b == "Match" for a, b in timed_p if a == "Arrive")


def test_schedule_and_set_options_are_checked():
    assert parse_schedule("random:0.25") == ("random", 0.25) and parse_schedule("timed") == ("timed", None)
    for bad in ("random:2", "random:x", "timed:0.1", "chaos"):
        with pytest.raises(SimError, match="--schedule"):
            parse_schedule(bad)
    assert parse_setting("prepared_backups=true") == ("prepared_backups", True)
    assert parse_setting("write_threshold=2") == ("write_threshold", 2)
    with pytest.raises(SimError, match="'L1' is not a config field --set can change"):
        parse_setting("L1=3")
    with pytest.raises(SimError, match="expected KEY=VALUE"):
        parse_setting("prepared_backups")
    prep = prepare(SimOptions(workload="synthetic", requests=2, settings=(("prepared_backups", True), ("commit_call", "atomic"))))
    assert prep.cfg.prepared_backups and prep.cfg.commit_call == "atomic"
    with pytest.raises(SimError, match="commit_call"):
        prepare(SimOptions(workload="synthetic", requests=2, settings=(("commit_call", "sometimes"),)))
    r = runner.invoke(app, ["sim", *ARGS, "--set", "nonsense=1"])
    assert r.exit_code == 2 and "'nonsense' is not a config field" in r.output and "Traceback" not in r.output
