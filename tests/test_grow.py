"""`kvsm.grow`: a tree grown to a planned size through the model's own transitions,
then walked; the log it makes is one `kvsm replay` verifies."""

from __future__ import annotations

import gc
import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest

from kvsm.config import Config
from kvsm.grow import grow, plan_growth
from kvsm.log import Header, LogWriter
from kvsm.replay import replay
from kvsm.state import ROOT_ID, initial_state

WEIGHTS = {"Arrive": 1.0, "Match": 1.0, "Insert": 1.0, "Finish": 1.0, "Split": 0.3, "Reserve": 0.3, "WriteDone": 2.0,
           "Commit": 0.5, "EvictDevice": 0.15, "EvictHost": 0.05, "LoadBack": 0.3}


def _log(path, nodes: int, walk_steps: int):
    base = replace(Config(), name="grown", R=4, P=16, max_live=8, walk_weights=tuple(sorted(WEIGHTS.items())))
    g = plan_growth(nodes, base, prompts=32)
    s0 = initial_state(g.config)
    grown = None
    with LogWriter(path, Header(config=g.config, seed=1, source="walk", initial_digest=s0.digest(), extra={})) as w:
        for k, (t, s) in enumerate(grow(g, walk_steps, state=s0), 1):
            w.write(t, s)
            if k == 4 * g.requests:
                grown = s
    return g, grown, w.count


@pytest.fixture(scope="module")
def grown_log(tmp_path_factory):
    path = tmp_path_factory.mktemp("grow") / "g.jsonl"
    return path, *_log(path, 300, 200)


def test_grown_log_replays_and_the_tree_has_the_planned_size(grown_log, tmp_path):
    path, g, grown, count = grown_log
    assert count == 4 * g.requests + 200
    # the plan's size, every node on L1 (nothing was evicted while it grew), no depth
    # beyond the plan's bound
    assert len(grown.nodes) == g.nodes >= 300 and not grown.requests
    assert all(n.dev for nid, n in grown.nodes.items() if nid != ROOT_ID)
    assert max(len(grown.path_to_root(nid)) for nid in grown.nodes.keys()) <= g.depth + 1
    # some requests split a node: fewer requests than new nodes
    assert g.requests < g.nodes - 1
    res = replay(path)
    assert res.ok and res.transitions == count, res.to_json()
    # the same plan gives the same log, byte for byte
    _log(tmp_path / "again.jsonl", 300, 200)
    assert path.read_bytes() == (tmp_path / "again.jsonl").read_bytes()


def test_replay_runs_without_the_collector_and_restores_it(grown_log):
    """The replay's states hold no reference cycle: a replay with the collector off
    leaves nothing for it; during the replay the collector is off, afterwards as it was
    (on, or off when it was off)."""
    path = grown_log[0]
    seen = []
    gc.disable()
    try:
        gc.collect()
        res = replay(path)
        assert res.ok and gc.collect() == 0
        assert not gc.isenabled()  # a replay leaves the collector off when it was off
    finally:
        gc.enable()
    res = replay(path, on_step=lambda n: seen.append(gc.isenabled()) if n == 100 else None)
    assert res.ok and seen == [False] and gc.isenabled()

def test_on_state_gives_each_verified_state_and_the_benchmark_window_passes(grown_log):
    """`replay(on_state=...)` hands over every transition with the state it leads to
    (the logged digests), and benchmarks/replay.py's measurement applies its window again
    from the state before it, every digest equal to the log's."""
    path, g, grown, count = grown_log
    seen = []
    res = replay(path, on_state=lambda n, t, s: seen.append((n, t.name, s.digest())))
    assert res.ok and [n for n, _, _ in seen] == list(range(1, count + 1))
    assert seen[4 * g.requests - 1][2] == grown.digest() and seen[-1][2] == res.final_digest
    spec = importlib.util.spec_from_file_location("replay_benchmark", Path(__file__).resolve().parent.parent / "benchmarks" / "replay.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    row = bench.replay_once(path, count, 100, warm=2)
    assert row["us"] > 0 and row["warm_us"] > 0 and gc.isenabled()
