"""Prepared write-through backups (`config.prepared_backups`), the reference's
production write-through path: `Prepare(rid, fits)` before the forward pass, attached
or rolled back at `Insert`, rolled back at `Abort`; an unattached one holds the commit
frontier."""

from __future__ import annotations

import pytest

from kvsm.config import Prompt
from kvsm.explore import explore
from kvsm.state import Rejected
from kvsm.transitions import apply, enabled

from .helpers import T, backup, config, fresh, node_by_key, run, serve


def prep(**kw):
    return fresh(prepared_backups=True, **kw)


def arrive_match(s, rid, tokens):
    return run(s, T("Arrive", rid=rid, tokens=tokens, out_pages=0), T("Match", rid=rid))


def test_prepare_takes_a_node_id_and_an_object_before_the_forward_pass():
    s = arrive_match(prep(), 0, [1, 2, 3])
    assert [t for t in enabled(s) if t.name == "Prepare"] == [T("Prepare", rid=0, fits=True)]
    s = run(s, T("Prepare", rid=0, fits=True))
    assert s.prepared[0] == 1 and s.next_id == 2 and 1 not in s.nodes
    assert s.objects[1].length == 3 and not s.objects[1].committed and s.writes == (1,)
    # its pages do not exist yet: no rank can finish its write, nothing can be rolled back
    assert not [t for t in enabled(s) if t.name in ("WriteDone", "Rollback", "Prepare")]
    s = run(s, T("Insert", rid=0))
    n = s.nodes[1]
    # attached: the new node has the id taken in advance, its backup is pending and
    # locks it; the reference counts no hit on it
    assert n.key == (1, 2, 3) and 1 in s.pending and n.lock == 2 and n.hits == 0
    assert not s.prepared and s.next_id == 2
    s = run(s, T("WriteDone", rank=0), T("WriteDone", rank=1), T("CommitCall", rank=0), T("CommitCall", rank=1), T("Commit"))
    assert s.nodes[1].host == 1 and s.objects[1].committed


def test_an_unattached_prepared_backup_holds_the_commit_frontier():
    s = serve(prep(), 0, [5])  # no prepare: the catch-up path backs (5) up
    s = arrive_match(s, 1, [1, 2])
    s = run(s, T("Prepare", rid=1, fits=True), T("Reserve", node=1, fits=True))
    assert s.writes == (2, 1)
    with pytest.raises(Rejected, match="prepared backup, not attached yet"):
        apply(s, T("WriteDone", rank=0))
    s = run(s, T("Insert", rid=1), T("WriteDone", rank=0), T("WriteDone", rank=0), T("WriteDone", rank=1))
    assert min(s.write_done) == 1  # rank 1 is one behind: (5) waits behind the prepared one
    s = run(s, T("WriteDone", rank=1), T("CommitCall", rank=0), T("CommitCall", rank=1), T("Commit"))
    assert s.writes == () and s.nodes[1].host == 1 and s.nodes[2].host == 2


def test_insert_rolls_back_a_prepared_backup_whose_length_no_longer_agrees():
    s = arrive_match(prep(), 0, [1, 2, 3])
    s = run(s, T("Prepare", rid=0, fits=True))
    # another request caches [1, 2] meanwhile: request 0's new node will be [3] alone
    s = serve(s, 1, [1, 2])
    obj = s.objects[1]
    s = run(s, T("Insert", rid=0))
    assert not s.prepared and 1 not in s.objects and 1 not in s.writes and 1 not in s.nodes
    new = node_by_key(s, (3,))
    assert new != 1 and new not in s.pending and s.nodes[new].hits == 1
    assert any(e.kind == "poison_host" and (e.base, e.length) == (obj.base, obj.length) for e in s.effects)


def test_abort_rolls_back_a_prepared_backup():
    s = arrive_match(prep(), 0, [1, 2])
    s = run(s, T("Prepare", rid=0, fits=True), T("Abort", rid=0))
    assert not s.prepared and not s.objects and s.writes == () and s.next_id == 2


def test_a_prepare_that_cannot_fit_keeps_its_evictions_and_spends_its_id():
    s = fresh(prepared_backups=True, L2=2)
    s = serve(s, 0, [7])
    s = run(backup(s, 1), T("EvictDevice", node=1))  # (7): a host leaf on h0
    s = serve(s, 1, [8], finish=False)
    s = backup(s, 2)  # (8): h1, on L1
    s = arrive_match(s, 2, [1, 2])
    s = run(s, T("Prepare", rid=2, fits=False))
    assert s.prepared[2] is None and 1 not in s.nodes and s.next_id == 4
    assert not [t for t in enabled(s) if t.name == "Prepare"]  # once per request
    s = run(s, T("Insert", rid=2))
    assert not s.prepared and s.nodes[node_by_key(s, (1, 2))].hits == 1


def test_prepared_backups_need_their_config_and_write_through():
    s = arrive_match(fresh(), 0, [1, 2])
    with pytest.raises(Rejected, match="prepared_backups"):
        apply(s, T("Prepare", rid=0, fits=True))
    s = arrive_match(fresh(prepared_backups=True, policy="write_back"), 0, [1, 2])
    with pytest.raises(Rejected, match="write_through"):
        apply(s, T("Prepare", rid=0, fits=True))


def test_every_state_of_a_small_prepared_model_keeps_the_invariants():
    cfg = config(prepared_backups=True, R=2, L1=1, L2=2, max_requests=2, max_live=1,
                 prompts=[(1, 2), (1, 3)])
    g = explore(cfg)
    s = g.summary()
    assert s["violations"] == []
    by = s["edges_by_transition"]
    assert by["Prepare"] and by["Insert"] and by["Commit"]


def test_the_simulator_prepares_attaches_and_rolls_back_with_every_invariant_checked(tmp_path):
    from pathlib import Path

    from kvsm.sim import SimOptions, simulate

    cfg = tmp_path / "prep.toml"
    cfg.write_text("prepared_backups = true\n" + (Path(__file__).parent / "data" / "sim_l3.toml").read_text())
    for tiers in ("l1,l2", "l1,l2,l3"):
        s = simulate(SimOptions(workload="multi-turn", config=str(cfg), tiers=tiers, ranks=2, l1_pages=64, l2_pages=160,
                                requests=150, seed=1, faults="slow:0.1,stall:0.01,abort:0.05", check=True)).summary
        assert s["backups_prepared"] and s["prepared_attached"] and s["prepared_rolled_back"]
        assert s["backups_prepared"] == s["prepared_attached"] + s["prepared_rolled_back"]
        # every backup that became pending was committed or rolled back by the end
        assert s["backups_reserved"] + s["prepared_attached"] == s["backups_committed"] + s["backups_rolled_back"]


@pytest.mark.tlc
def test_conform_is_equal_on_the_prepared_model():
    from pathlib import Path

    from kvsm.tla.conform import conform

    cfg = Path(__file__).resolve().parent.parent / "spec" / "MC_prepared.cfg"
    res = conform(str(cfg))
    assert res.equal, res.to_json()["examples"]
    # kvsm explore of its config: 40,960 states, 103,418 distinct labelled edges
    assert (res.tlc_states, res.tlc_edges) == (40960, 103418) == (res.model_states, res.model_edges)
