"""A completion the random schedule holds back keeps the run going until it is taken,
even when it joined a held queue of a disk recovery (which alone is not work)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvsm.sim import SimOptions, simulate
from kvsm.sim.stops import SimInvariantError
from kvsm.sim import shuffle

# campaign seed 27 of reference-write-back-default (crash:SimStuck@Finish): rank 2's disk
# recovery is held back (LONG_DELAY), the next spill's gather and write for rank 2 join it
SEED_27 = SimOptions(
    workload="system-prompts",
    config="reference-write-back-default",
    seed=27,
    tiers="l1,l2,l3",
    requests=5,
    l2_pages=304,
    l3_pages=152,
    eviction="slru",
    faults="slow:0.1,abort:0.05,burst:0.1,disk:0.002",
    schedule="random",
    check=True,
    settings=(("reload_ttl", 2), ("spill_inflight", 1), ("spill_queue_cap", 2)),
)
# without the profile's own-disk shortcut (finding 2), which the run meets once it goes on
FIXED = replace(SEED_27, settings=SEED_27.settings + (("own_disk_durable", "fixed"),))


def test_work_that_joins_a_held_disk_recovery_is_done_before_the_run_ends(monkeypatch):
    joined = []
    order = shuffle.RandomSchedule._order

    def spy(self, tick, batch, work):
        held = {k: [e.payload.what for e in q] for k, q in self.held.items() if k[0] == shuffle.DISK}
        out = order(self, tick, batch, work)
        for k, q in self.held.items():
            if held.get(k, [None])[0] == "recover" and len(q) > len(held[k]) and any(e.work for e in q):
                joined.append(k)
        return out

    monkeypatch.setattr(shuffle.RandomSchedule, "_order", spy)
    r = simulate(FIXED)  # raised SimStuck: "1 spills, ... 1 queued spills"
    assert joined, "the run no longer reaches the case: a spill's disk jobs joining a held recovery"
    st = r.final_state
    assert st.spills == st.reloads == st.spill_queue == () and not st.writes and not st.loads
    s = r.summary
    assert s["spills_submitted"] == s["spills_durable"] + s["spills_failed"] + s["spills_stale"]
    assert s["transitions_by_name"]["DiskRecover"] == s["faults_injected"]["disk"]  # rank 2's came back too


def test_seed_27_of_the_profile_goes_on_to_finding_2_instead_of_ending_stuck():
    with pytest.raises(SimInvariantError) as e:
        simulate(SEED_27)
    assert "13 Agreement: SpillSubmit" in str(e.value)
