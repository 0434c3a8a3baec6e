"""`kvsm sim --replicas`: every level writes the same log; `every` and `agreement` catch
a rank that decides otherwise from its own view and a replica that drifts, `off` does
not (the model's record of it is left to invariant 13 under --check); what `agreement`
gives up: a rank whose code decides otherwise from the log's very state."""

from __future__ import annotations

from dataclasses import replace

import pytest
from typer.testing import CliRunner

from kvsm.cli import app
from kvsm.defects import CATALOGUE
from kvsm.sim import SimDivergence, SimInvariantError, SimOptions, procedures, simulate
from kvsm.sim.cluster import Cluster, View
from kvsm.sweep.grid import parse_axes
from kvsm.transitions import Transition, apply

LEVELS = ("every", "agreement", "off")
SMALL = SimOptions(workload="thrash", requests=80, ranks=3, l1_pages=64, l2_pages=160, seed=5)


@pytest.mark.parametrize(
    "opts",
    [
        replace(SMALL, faults="slow:0.2,stall:0.05,abort:0.1,burst:0.05"),
        # the random schedule (writes that finish while the ranks call the collective), the
        # reference's ack queues, and L3 (its collective, disk faults)
        replace(SMALL, requests=50, ranks=2, schedule="random:0.3", settings=(("ack_append", "reference"),)),
        replace(SMALL, requests=40, ranks=2, tiers="l1,l2,l3", faults="slow:0.2,disk:0.01", seed=6),
    ],
    ids=["faults", "random-acks", "l3"],
)
def test_every_level_writes_the_same_log(tmp_path, opts):
    logs = {}
    for level in LEVELS:
        log = tmp_path / f"{level}.jsonl"
        s = simulate(replace(opts, replicas=level), log).summary
        assert s["replicas"] == level
        logs[level] = log.read_bytes()
    assert logs["agreement"] == logs["every"] and logs["off"] == logs["every"]


def _defect(level: str, check: bool = False) -> SimOptions:
    d = CATALOGUE["wallclock_tiebreak"]  # ranks that break victim ties by their own clocks
    return SimOptions(bug=d.name, seed=d.sim_seed, requests=300, replicas=level, check=check, **d.sim)


@pytest.mark.parametrize("level", ["every", "agreement"])
def test_every_and_agreement_catch_ranks_that_decide_otherwise(level):
    with pytest.raises(SimDivergence, match=r"rank \d diverged by .*replicated digest"):
        simulate(_defect(level))


def test_off_does_not_compare_ranks_the_model_records_it_for_invariant_13():
    r = simulate(_defect("off"))
    assert r.final_state.diverged is not None  # the model's own record of ranks that decided otherwise
    with pytest.raises(SimInvariantError, match="13 Agreement"):
        simulate(_defect("off", check=True))


@pytest.mark.parametrize("level", ["every", "agreement"])
def test_a_replica_that_drifts_is_caught_at_the_next_comparison(monkeypatch, level):
    real = Cluster.learn_loads
    drifted = []

    def drift_rank1(self: Cluster) -> None:
        real(self)
        v = self.replicas[1]
        if self.sync_points == 30 and v.state.dev_index:
            # rank 1 alone evicts a device victim, outside any procedure
            v.state = apply(v.state, Transition.make("EvictDevice", node=v.state.dev_index.first()[2]))
            drifted.append(self.sync_points)

    monkeypatch.setattr(Cluster, "learn_loads", drift_rank1)
    with pytest.raises(SimDivergence, match="rank 1 diverged by .*replicated digest"):
        simulate(replace(SMALL, tiers="l1", l2_pages=None, replicas=level))
    assert drifted


def test_agreement_catches_a_replica_that_drifts_while_its_own_finished_writes_wait(monkeypatch):
    # under `agreement` a rank's own WriteDone waits to reach its replica (`Cluster._defer`)
    # and is not applied at all where a collective gives the replica the log's state: a
    # drift in between is still caught there, by the replicated digest
    real = Cluster._defer
    drifted = []

    def drift_rank1(self: Cluster, v: View, t: Transition, before) -> None:
        real(self, v, t, before)
        if v.rank == 1 and self._deferred[1] and not drifted and self.sync_points >= 30 and v.state.dev_index:
            v.state = apply(v.state, Transition.make("EvictDevice", node=v.state.dev_index.first()[2]))
            drifted.append(self.sync_points)

    monkeypatch.setattr(Cluster, "_defer", drift_rank1)
    with pytest.raises(SimDivergence, match=r"rank 1 diverged by the (MIN|commit) collective .*replicated digest"):
        simulate(replace(SMALL, replicas="agreement"))
    assert drifted

def test_agreement_does_not_see_a_rank_whose_code_decides_otherwise_from_the_logs_state(monkeypatch):
    # what `every` catches at once (tests/test_sim_cluster.py) and `agreement` gives up:
    # rank 1's replica equals the log's state, so it takes the log's outcome
    real = procedures.insert

    def rank1_skips_a_backup(v: View, rid: int, backup: bool):
        return real(v, rid, backup and not (v.rank == 1 and rid == 7))

    monkeypatch.setattr(procedures, "insert", rank1_skips_a_backup)
    with pytest.raises(SimDivergence):
        simulate(replace(SMALL, ranks=2, replicas="every"))
    assert simulate(replace(SMALL, ranks=2, replicas="agreement")).summary["requests"] == SMALL.requests


def test_a_bad_level_is_one_error_naming_the_option():
    res = CliRunner().invoke(app, ["sim", "-n", "5", "--replicas", "some"])
    assert res.exit_code == 2 and "--replicas must be one of every | agreement | off, got 'some'" in res.output


def test_a_sweep_defaults_to_agreement_and_names_other_levels():
    (p,) = parse_axes({"requests": "5"}).points()
    assert p.replicas == "agreement" and "--replicas agreement" in p.command()
    every, off = parse_axes({"requests": "5", "replicas": "every,off"}).points()
    assert "--replicas" not in every.command() and "--replicas off" in off.command()
    assert len({p.key, every.key, off.key}) == 3
