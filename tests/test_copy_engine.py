"""The simulator's copy engines when backups are rolled back (kvsm/sim/copy_engine.py):
a write rolled back before its engine takes it up gives its time back, and a run whose
stalls outlast the write timeout still ends.

Found by a campaign (seed 743, `stall:0.2`): every rolled-back write kept its engine
busy for its whole drawn stall and copy though it was never written, so each backup
reserved again began after a backlog that grew faster than the clock, was overdue
before it began, and was rolled back again: 250,000 `Reserve`/`Rollback` pairs, the
run stopped by its budget of 500,000 transitions."""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace

from kvsm.campaign.run import Budget, execute
from kvsm.campaign.spec import RunSpec
from kvsm.sim.copy_engine import CopyEngine, Job
from kvsm.sim.events import Events
from kvsm.sim.options import Timing


def _engine(now_tick: int, jobs: list[Job]) -> CopyEngine:
    """A one-rank engine at tick `now_tick` holding `jobs`, without a cluster behind it
    (rolling back only reads the clock and reschedules)."""
    e = CopyEngine.__new__(CopyEngine)
    e.cluster = SimpleNamespace(tick=now_tick)  # type: ignore[assignment]
    e.timing = Timing()
    e.events = Events()
    e.per_rank_acks = False
    e.R = 1
    e.jobs = [deque(jobs)]
    e.busy_ms = [max(j.end_ms for j in jobs)]
    e.held_ms = [0.0]
    return e


def _fifo() -> list[Job]:
    # A copies 0-100 ms; B stalls 100-3100 then copies to 3200; C copies 3200-3300
    return [
        Job(rank=0, node=1, begin_ms=0, copy_ms=100),
        Job(rank=0, node=2, begin_ms=100, stall_ms=3000, copy_ms=100),
        Job(rank=0, node=3, begin_ms=3200, copy_ms=100),
    ]


def test_a_write_rolled_back_before_it_begins_gives_its_time_back_and_the_next_moves_up():
    a, b, c = _fifo()
    e = _engine(2, [a, b, c])  # tick 2 = 40 ms: A is copying, B not taken up
    b.cancelled = True
    e._move_up(0, e.jobs[0])
    left = list(e.jobs[0])
    assert [j.node for j in left] == [1, 3]
    assert left[0] is a  # the write in progress is untouched
    moved = left[1]
    assert moved is not c and c.cancelled  # C's old events are void, a new job stands for it
    assert (moved.begin_ms, moved.stall_ms, moved.copy_ms) == (100, 0, 100)  # when A ends, its own draws
    assert e.busy_ms[0] == 200
    tick, batch, _ = e.events.pop_tick()  # the moved write ends at 200 ms, tick 10
    assert (tick, [ev.payload for ev in batch]) == (10, [moved]) and not e.events.work


def test_a_write_its_engine_took_up_holds_the_engine_to_its_end():
    a, b, c = _fifo()
    e = _engine(10, [a, b, c])  # 200 ms: B's stall began at 100
    b.cancelled = True
    e._move_up(0, e.jobs[0])
    left = list(e.jobs[0])
    assert [j.node for j in left] == [1, 3] and left[1] is c  # C still begins at 3,200 ms
    assert e.busy_ms[0] == 3300


def test_rolling_back_every_write_not_taken_up_frees_the_engine_at_the_end_of_the_one_in_progress():
    a, b, c = _fifo()
    e = _engine(2, [a, b, c])
    b.cancelled = c.cancelled = True
    e._move_up(0, e.jobs[0])
    assert list(e.jobs[0]) == [a] and e.busy_ms[0] == 100
    a.cancelled = True  # A began: rolling it back does not give its copy's time back
    e._move_up(0, e.jobs[0])
    assert list(e.jobs[0]) == [] and e.busy_ms[0] == 100


def test_a_rolled_back_write_still_in_progress_holds_the_engine_for_the_writes_behind_it():
    a, b, c = _fifo()
    e = _engine(2, [a, b, c])
    a.cancelled = True  # A began at 0 and copies until 100 ms: it left the FIFO, not the engine
    e._move_up(0, e.jobs[0])
    assert list(e.jobs[0]) == [b, c]
    e.cluster.tick = 3  # 60 ms, A still copying
    b.cancelled = True
    e._move_up(0, e.jobs[0])
    (moved,) = e.jobs[0]
    assert moved.node == 3 and moved.begin_ms == 100 and e.busy_ms[0] == 200


def test_a_run_whose_stalls_outlast_the_write_timeout_still_ends():
    spec = RunSpec(seed=743, config="l3", tiers="l1,l2,l3", faults="stall:0.2,abort:0.02", workload="multi-turn",
                   requests=47, ranks=4, l1_pages=19, l2_pages=152, l3_pages=76, eviction="lru", schedule="random",
                   settings=(("write_threshold", 4), ("reload_ttl", 8), ("spill_inflight", 2), ("reload_inflight", 2),
                             ("spill_queue_cap", 2)))
    out = execute(spec, Budget(seconds=120, transitions=20_000, shrink_seconds=0), collect=True, replay_log=False)
    assert out.status == "ok", out.budget or out.failure
    taken = out.coverage["transitions"]
    assert taken["Rollback"] > 0 and taken["WriteDone"] > 0  # backups rolled back, and others written
    assert taken["Reserve"] < 10 * 47
