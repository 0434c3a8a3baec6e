"""Replaying a run with steps removed, references re-resolved (`kvsm.resolve`), which both
shrinkers use: with nothing removed it is the run itself; with any steps removed, what it
takes is a run the model accepts step by step."""

from __future__ import annotations

from functools import lru_cache

import pytest
from hypothesis import given, settings, strategies as st
from typer.testing import CliRunner

from kvsm.cli import app
from kvsm.log import read_log
from kvsm.resolve import references, replay_kept
from kvsm.state import Rejected, initial_state
from kvsm.transitions import apply

RUNS = {
    # a walk of small: reserves, rollbacks, splits, evictions by the victim order
    "walk-small": ["sim", "--workload", "config-prompts", "--config", "small", "--seed", "15", "--requests", "40", "--schedule", "walk",
                   "--set", "carry_host_hit=true"],
    # the disk tier with disk faults: spills, reloads, disk steps' ok
    "walk-l3": ["sim", "--workload", "config-prompts", "--config", "l3", "--seed", "8", "--tiers", "l1,l2,l3", "--requests", "60",
                "--faults", "abort:0.05,disk:0.05", "--schedule", "walk"],
    # the random schedule with prepared backups (Prepare's fits)
    "random-prepared": ["sim", "--config", "small", "--seed", "3", "--requests", "12", "--l1-pages", "8", "--l2-pages", "24",
                        "--schedule", "random", "--set", "prepared_backups=true"],
}


@lru_cache(maxsize=None)
def _run(name: str, tmp: str) -> tuple:
    log = f"{tmp}/{name}.jsonl"
    res = CliRunner().invoke(app, RUNS[name] + ["-o", log])
    assert res.exit_code == 0, res.output
    header, stream = read_log(log)
    return header.config, tuple(t for _, _, t, _ in stream)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("resolve"))
    return {name: _run(name, tmp) for name in RUNS}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_with_nothing_removed_the_replay_is_the_run_itself(runs, name):
    cfg, steps = runs[name]
    assert len(steps) > 30
    refs = references(cfg, steps)
    s0 = initial_state(cfg)
    got = list(replay_kept(s0, steps, refs, range(len(steps))))
    assert [t for _, t, _ in got] == list(steps)
    assert [i for i, _, _ in got] == list(range(len(steps)))
    s = s0
    for t, (_, _, after) in zip(steps, got):
        s = apply(s, t)
        assert after.digest() == s.digest()


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_what_a_replay_with_steps_removed_takes_the_model_accepts_step_by_step(runs, data):
    name = data.draw(st.sampled_from(sorted(RUNS)))
    cfg, steps = runs[name]
    keep = sorted(data.draw(st.sets(st.integers(0, len(steps) - 1), min_size=1)))
    s0 = initial_state(cfg)
    got = list(replay_kept(s0, steps, references(cfg, steps), keep))
    assert [i for i, _, _ in got] == sorted({i for i, _, _ in got}) and {i for i, _, _ in got} <= set(keep)
    s = s0
    for k, (i, t, after) in enumerate(got):
        if isinstance(after, Rejected):  # only the last kept step is reported refused
            assert i == keep[-1] and k == len(got) - 1
            with pytest.raises(Rejected):
                apply(s, t)
            break
        s = apply(s, t)
        assert after.digest() == s.digest()
