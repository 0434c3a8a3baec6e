"""The backup trigger (`backup_trigger`): "any", a free-standing `Reserve` of every
eligible node; "insert", the reference's, whose insert backs up each node it hits and
its new node (`_inc_hit_count`), top down, inside the `Insert` step."""

from __future__ import annotations

import json

import pytest

from kvsm.config import ConfigError, builtin_file, load_config
from kvsm.state import Rejected
from kvsm.transitions import apply, enabled

from .helpers import T, commit_round, fresh, node_by_key, run, serve


def _backups(s) -> tuple:
    """What a backup changes: the nodes' host and lock, the objects, pending, writes and
    the free host pages."""
    return ({k: (n.key, n.host, n.lock) for k, n in s.nodes.items()}, dict(s.objects), dict(s.pending), s.writes, s.l2_free)


def _reserves(s) -> set[int]:
    return {t.arg("node") for t in enabled(s) if t.name == "Reserve"}


def test_any_leaves_the_backup_to_a_reserve_of_its_own():
    s = serve(fresh(R=1, L1=8, L2=8), 0, [1, 2])
    a = node_by_key(s, (1, 2))
    assert s.writes == () and a not in s.pending and _reserves(s) == {a}


def test_insert_backs_up_its_new_node_in_the_step_and_has_no_reserve():
    s = serve(fresh(R=1, L1=8, L2=8, backup_trigger="insert"), 0, [1, 2])
    a = node_by_key(s, (1, 2))
    assert s.writes == (a,) and a in s.pending and s.objects[a].length == 2
    assert s.nodes[a].lock == 1  # its pending backup's lock (the request finished)
    assert _reserves(s) == set()
    with pytest.raises(Rejected, match="no Reserve of its own under backup_trigger = insert"):
        apply(s, T("Reserve", node=a, fits=True))


def _order(trigger: str, parent: str):
    """A two-page host pool. [1, 2, 3] cannot be backed up (three pages): unbacked, hit
    once. [1, 4] splits it: its insert hits the upper part [1] and makes [4]."""
    s = fresh(R=1, L1=8, L2=2, backup_trigger=trigger, write_through_parent=parent)
    s = serve(s, 0, [1, 2, 3])
    assert s.writes == () and not s.objects
    s = run(s, T("Arrive", rid=1, tokens=[1, 4], out_pages=0), T("Match", rid=1), T("Insert", rid=1))
    return s, node_by_key(s, (1,)), node_by_key(s, (4,))


@pytest.mark.parametrize("parent", ["any", "backed"])
def test_insert_backs_up_top_down_the_hit_node_then_the_new_one(parent):
    s, top, new = _order("insert", parent)
    # the upper part first (page 0), then the new leaf (page 1); under "backed" the leaf is
    # allowed because its parent's write was submitted a moment before in the same step
    assert s.writes == (top, new)
    assert (s.objects[top].base, s.objects[new].base) == (0, 1)
    assert node_by_key(s, (2, 3)) not in s.pending


@pytest.mark.parametrize("parent", ["any", "backed"])
def test_insert_reserves_as_the_catch_up_reserves_would_in_the_same_order(parent):
    got, top, new = _order("insert", parent)
    s, top2, new2 = _order("any", parent)
    assert (top2, new2) == (top, new) and s.writes == ()
    s = run(s, T("Reserve", node=top, fits=True), T("Reserve", node=new, fits=True))
    assert _backups(s) == _backups(got)


def test_a_threshold_of_two_backs_up_a_path_node_at_its_second_hit():
    s = serve(fresh(R=1, L1=8, L2=8, write_threshold=2, backup_trigger="insert"), 0, [1, 2])
    a = node_by_key(s, (1, 2))
    assert s.writes == () and s.nodes[a].hits == 1
    s = serve(s, 1, [1, 2, 3])
    b = node_by_key(s, (3,))
    assert s.nodes[a].hits == 2 and s.writes == (a,) and s.nodes[b].hits == 1 and b not in s.pending


def test_a_reservation_that_does_not_fit_keeps_its_host_evictions():
    """[5] backed and committed, then off L1: a host leaf. [1, 2, 3] needs three pages of
    a two-page pool: the insert evicts [5] from L2 and reserves nothing, as a Reserve
    with fits = false does under "any"."""
    out = {}
    for trigger in ("any", "insert"):
        s = serve(fresh(R=1, L1=8, L2=2, backup_trigger=trigger), 0, [5])
        b = node_by_key(s, (5,))
        if trigger == "any":
            s = run(s, T("Reserve", node=b, fits=True))
        s = commit_round(run(s, T("WriteDone", rank=0)))
        s = run(s, T("EvictDevice", node=b))
        assert b in s.nodes and s.nodes[b].host is not None
        s = serve(s, 1, [1, 2, 3])
        if trigger == "any":
            s = run(s, T("Reserve", node=node_by_key(s, (1, 2, 3)), fits=False))
        assert b not in s.nodes and s.writes == () and len(s.l2_free[0]) == 1
        out[trigger] = _backups(s)
    assert out["any"] == out["insert"]


def test_a_prepared_backup_attached_at_insert_takes_the_new_node_s_place():
    s = fresh(R=2, L1=4, L2=8, prepared_backups=True, backup_trigger="insert")
    s = run(s, T("Arrive", rid=0, tokens=[1, 2], out_pages=0), T("Match", rid=0), T("Prepare", rid=0, fits=True))
    prep = s.prepared[0]
    s = run(s, T("Insert", rid=0))
    assert s.writes == (prep,) and prep in s.pending and s.nodes[prep].hits == 0


def test_insert_under_write_back_changes_nothing():
    for trigger in ("any", "insert"):
        s = serve(fresh(R=1, L1=8, L2=8, policy="write_back", backup_trigger=trigger), 0, [1, 2])
        a = node_by_key(s, (1, 2))
        assert s.writes == () and _reserves(s) == {a}


def test_the_knob_s_values_its_default_left_out_of_logs_and_the_reference_profiles(tmp_path):
    from kvsm.config import Config
    from kvsm.tla.location import spec_dir

    assert "backup_trigger" not in Config().to_json()
    assert Config(backup_trigger="insert").to_json()["backup_trigger"] == "insert"
    bad = tmp_path / "c.toml"
    bad.write_text('backup_trigger = "match"\n')
    with pytest.raises(ConfigError, match="field 'backup_trigger' must be one of any, insert"):
        load_config(bad)
    for name in ("reference", "reference-default"):
        assert load_config(builtin_file(name)).backup_trigger == "insert"
    assert 'BackupTrigger = "insert"' in (spec_dir() / "MC_reference.cfg").read_text()


@pytest.mark.tlc
def test_a_simulator_log_under_insert_replays_and_tlc_validates_it(tmp_path):
    """The simulator schedules no Reserve; the Insert lines' backups (and the host
    evictions they make) replay from the state alone, and TLC's Insert takes them too."""
    from typer.testing import CliRunner

    from kvsm.cli import app
    from kvsm.log import read_log
    from kvsm.replay import replay
    from kvsm.state import initial_state
    from kvsm.tla.validate import validate

    log = tmp_path / "r.jsonl"
    r = CliRunner().invoke(app, ["sim", "-c", "reference-default", "-w", "multi-turn", "-s", "2", "-n", "60", "--l1-pages", "16",
                                 "--l2-pages", "32", "--schedule", "random", "--set", "backup_trigger=insert", "--set",
                                 "prepared_backups=false", "--set", "commit_call=fixed", "--set", "own_disk_durable=fixed",
                                 "--set", "durable_split=fixed", "--check", "-o", str(log), "--json"])
    assert r.exit_code == 0, r.output
    header, steps = read_log(log)
    m = json.loads(r.stdout)
    s = initial_state(header.config).untracked()
    taken = evicting = reserved = 0
    for _, _, t, _ in steps:
        assert t.name != "Reserve"
        before = s
        s = apply(s, t)
        if t.name == "Insert":
            new = [n for n in s.writes if n not in before.writes]
            taken += bool(new)
            reserved += len(new)
            evicting += any(k[2] not in s.nodes for k in before.host_index)  # a host leaf it evicted
    assert taken > 0 and evicting > 0, (taken, evicting)
    # the run's measures count them: the backups the Inserts took, the host pages evicted
    assert m["backups_reserved"] == reserved and m["evictions"]["l2"] > 0
    res = replay(str(log), check=True)
    assert res.ok and not res.violations
    v = validate(log)
    assert v.ok, v
