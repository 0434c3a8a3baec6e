"""The L3 tier: spill, reload, TTL and disk faults."""

from __future__ import annotations

import pytest

from kvsm import content
from kvsm.invariants import violations
from kvsm.state import Rejected
from kvsm.transitions import apply, enabled
from kvsm.transitions.reload import claimable

from .helpers import T, backup, commit_round, fresh, load_back, node_by_key, run, serve


def l3(**kw):
    kw.setdefault("L3", 16)
    return fresh(**kw)


def spill_all(s, ok=True):
    """Submit the next queued spill and let every rank gather and write it, then ack."""
    s = run(s, T("SpillSubmit"))
    for r in range(s.config.R):
        s = run(s, T("SpillGathered", rank=r))
    for r in range(s.config.R):
        s = run(s, T("SpillDone", rank=r, ok=s.disk_ok[r]))
    return run(s, T("SpillAck"))


def durable_prefix(s, key):
    """Serve `key`, back it up, spill it; returns (state, node id)."""
    s = serve(s, 0 if not s.requests else max(s.requests) + 1, key)
    nid = node_by_key(s, tuple(key))
    s = backup(s, nid)
    assert s.spill_queue == (nid,)
    s = spill_all(s)
    return s, nid


def drop_everywhere(s, nid):
    return run(s, T("EvictDevice", node=nid), T("EvictHost", node=nid))


def test_commit_queues_the_object_and_a_spill_makes_it_durable():
    s, nid = durable_prefix(l3(), [1, 2, 3])
    n = s.nodes[nid]
    assert n.durable and n.pin == 0 and s.spills == ()
    for i, h in enumerate(n.hashes):
        assert s.l3[(i % 2, h)] == h  # page i lives on its owner rank i mod R
        assert ((i + 1) % 2, h) not in s.l3


def test_the_object_is_pinned_until_every_rank_gathered():
    s = serve(l3(), 0, [1, 2])
    nid = node_by_key(s, (1, 2))
    s = run(backup(s, nid), T("SpillSubmit"), T("EvictDevice", node=nid))
    assert s.nodes[nid].pin == 1 and all(k[2] != nid for k in s.host_index)
    s = run(s, T("SpillGathered", rank=0), T("SpillGathered", rank=1), T("SpillAck"))
    assert s.nodes[nid].pin == 0 and s.host_index.first()[2] == nid
    s = run(s, T("EvictHost", node=nid))  # the disk writes go on from the staged copies
    s = run(s, T("SpillDone", rank=0, ok=True), T("SpillDone", rank=1, ok=True), T("SpillAck"))
    assert s.spills == () and nid not in s.nodes
    assert len(s.l3) == 2


def test_spill_then_reload_round_trip():
    s, nid = durable_prefix(l3(), [1, 2, 3])
    s = drop_everywhere(s, nid)
    rid = s.next_rid
    s = run(s, T("Arrive", rid=rid, tokens=[1, 2, 3, 9], out_pages=0))
    s = run(s, T("ReloadMark", rid=rid), T("ReloadReserve", rid=rid))
    assert s.reloads[0].waiters == (rid,) and len(s.reloads[0].hashes) == 3
    with pytest.raises(Rejected, match="waits for an L3 reload"):
        apply(s, T("Match", rid=rid))
    s = run(s, T("ReloadDone", rank=0, ok=True), T("ReloadDone", rank=1, ok=True), T("ReloadAdmit"))
    new = node_by_key(s, (1, 2, 3))
    n = s.nodes[new]
    assert n.durable and not n.dev and n.host == new and s.objects[new].committed
    s = load_back(run(s, T("Match", rid=rid)), rid)
    assert [s.dev_content[p] for p in s.nodes[new].dev] == list(content.prefix_content((1, 2, 3)))


def test_identical_reloads_piggyback_on_one_op():
    s, nid = durable_prefix(l3(), [1, 2])
    s = drop_everywhere(s, nid)
    a, b = s.next_rid, s.next_rid + 1
    s = run(s, T("Arrive", rid=a, tokens=[1, 2, 7], out_pages=0), T("Arrive", rid=b, tokens=[1, 2, 8], out_pages=0))
    s = run(s, T("ReloadMark", rid=a), T("ReloadMark", rid=b), T("ReloadReserve", rid=a), T("ReloadReserve", rid=b))
    assert len(s.reloads) == 1 and s.reloads[0].waiters == (a, b)


def test_owner_misalignment_after_a_split_lowers_the_claim_instead_of_claiming_absent_pages():
    s, nid = durable_prefix(l3(R=2), [1, 2, 3, 4])
    # a request diverging after page 1 splits the node at an odd offset
    s = run(s, T("Arrive", rid=s.next_rid, tokens=[1, 9, 9], out_pages=0), T("Match", rid=s.next_rid))
    upper = node_by_key(s, (1,))
    # the upper part is a new node, not durable (as in the reference); the lower part's
    # owners moved, so under durable_split = "fixed" it is not durable either
    assert not s.nodes[upper].durable and not s.nodes[nid].durable
    s = run(s, T("Insert", rid=s.next_rid - 1), T("Finish", rid=s.next_rid - 1))
    # drop the lower part [2, 3, 4] from both tiers; its pages are still on the disks
    s = drop_everywhere(s, nid)
    rid = s.next_rid
    s = run(s, T("Arrive", rid=rid, tokens=[1, 2, 3, 4], out_pages=0), T("ReloadMark", rid=rid))
    cand = s.reload_candidates[rid]
    assert cand.anchor == upper and cand.tokens == (2, 3, 4)
    assert all(any((r, h) in s.l3 for r in range(2)) for h in cand.hashes)  # every page is on some disk
    assert claimable(s, cand.hashes) == 0  # but not on the rank that owns it in the reload
    s = run(s, T("ReloadReserve", rid=rid))
    assert s.reloads == () and rid not in s.reload_candidates  # dropped: recompute


def test_an_aligned_split_keeps_both_parts_claimable():
    s, nid = durable_prefix(l3(R=2), [1, 2, 3, 4])
    s = run(s, T("Arrive", rid=s.next_rid, tokens=[1, 2, 9, 9], out_pages=0), T("Match", rid=s.next_rid))
    assert s.nodes[nid].durable and not s.nodes[node_by_key(s, (1, 2))].durable
    s = run(s, T("Insert", rid=s.next_rid - 1), T("Finish", rid=s.next_rid - 1))
    s = drop_everywhere(s, nid)
    rid = s.next_rid
    s = run(s, T("Arrive", rid=rid, tokens=[1, 2, 3, 4], out_pages=0), T("ReloadMark", rid=rid))
    assert claimable(s, s.reload_candidates[rid].hashes) == 2


def test_a_disk_failure_on_one_rank_marks_nothing_durable_from_that_op():
    s = serve(l3(), 0, [1, 2, 3])
    nid = node_by_key(s, (1, 2, 3))
    s = run(backup(s, nid), T("SpillSubmit"), T("SpillGathered", rank=0), T("SpillGathered", rank=1), T("DiskFail", rank=1))
    with pytest.raises(Rejected, match="not ok: its disk has failed"):
        apply(s, T("SpillDone", rank=1, ok=True))
    s = run(s, T("SpillDone", rank=0, ok=True), T("SpillDone", rank=1, ok=False), T("SpillAck"))
    assert not s.nodes[nid].durable and s.spills == ()
    assert {r for r, _ in s.l3.keys()} == {0}


def test_a_failing_disk_releases_held_requests_after_the_ttl():
    s, nid = durable_prefix(l3(reload_ttl=3), [1, 2])
    s = drop_everywhere(s, nid)
    rid = s.next_rid
    s = run(s, T("Arrive", rid=rid, tokens=[1, 2, 5], out_pages=0), T("ReloadMark", rid=rid), T("ReloadReserve", rid=rid))
    s = run(s, T("DiskFail", rank=1), T("ReloadDone", rank=0, ok=True))
    assert not [t for t in enabled(s) if t.name == "Match"]  # still held
    for _ in range(3):
        s = run(s, T("ReloadExpire"))
    assert s.reloads[0].waiters == () and s.reloads[0].ttl == 0
    assert T("ReloadExpire") not in enabled(s)
    obj = s.reloads[0].obj
    assert obj in s.objects  # the reservation stays until the op acks
    s = run(s, T("Match", rid=rid))  # released: it recomputes
    s = run(s, T("ReloadDone", rank=1, ok=False), T("ReloadAdmit"))
    assert obj not in s.objects and s.reloads == ()
    assert all(n.key != (1, 2) for n in s.nodes.values())


def test_a_reload_racing_an_insert_under_the_same_anchor_is_aborted():
    s, nid = durable_prefix(l3(), [1, 2])
    s = drop_everywhere(s, nid)
    a, b = s.next_rid, s.next_rid + 1
    s = run(s, T("Arrive", rid=a, tokens=[1, 2], out_pages=0), T("ReloadMark", rid=a), T("ReloadReserve", rid=a))
    obj = s.reloads[0].obj
    # another request recomputes the same prefix meanwhile
    s = serve(s, b, [1, 2, 6])
    s = run(s, T("ReloadDone", rank=0, ok=True), T("ReloadDone", rank=1, ok=True), T("ReloadAdmit"))
    assert obj not in s.objects and s.reloads == ()
    assert sum(1 for n in s.nodes.values() if n.key[:1] == (1,)) == 1  # no second node was attached
    run(s, T("Match", rid=a))


def test_reload_below_the_load_back_floor_is_dropped():
    s, nid = durable_prefix(l3(P=16, load_back_threshold=48), [1, 2])
    s = drop_everywhere(s, nid)
    rid = s.next_rid
    s = run(s, T("Arrive", rid=rid, tokens=[1, 2], out_pages=0), T("ReloadMark", rid=rid), T("ReloadReserve", rid=rid))
    assert s.reloads == ()  # 2 pages < floor of 3


def test_spill_queue_is_capped_and_stale_entries_are_dropped():
    s = l3(spill_queue_cap=1)
    s = serve(s, 0, [1])
    s = serve(s, 1, [2])
    a, b = node_by_key(s, (1,)), node_by_key(s, (2,))
    s = run(s, T("Reserve", node=a, fits=True), T("Reserve", node=b, fits=True))
    for r in range(2):
        s = run(s, T("WriteDone", rank=r), T("WriteDone", rank=r))
    s = commit_round(s)
    assert s.spill_queue == (a,)  # b was dropped: the queue was full
    s = run(s, T("EvictDevice", node=a), T("EvictHost", node=a), T("SpillSubmit"))
    assert s.spill_queue == () and s.spills == ()  # a was gone: dropped, nothing submitted


def test_a_full_disk_fails_the_write():
    s = serve(l3(L3=1), 0, [1, 2])
    nid = node_by_key(s, (1, 2))
    s = run(backup(s, nid), T("SpillSubmit"), T("SpillGathered", rank=0), T("SpillGathered", rank=1))
    s = run(s, T("SpillDone", rank=0, ok=True), T("SpillDone", rank=1, ok=True))
    s = serve(s, 1, [3, 4])
    other = node_by_key(s, (3, 4))
    s = run(backup(s, other), T("SpillAck"), T("SpillSubmit"), T("SpillGathered", rank=0), T("SpillGathered", rank=1))
    with pytest.raises(Rejected, match="its disk is full"):
        apply(s, T("SpillDone", rank=0, ok=True))


def test_load_back_keeps_the_request_s_reload_mark():
    # LoadBack moves the request's lock and changes nothing else about the request: a
    # request that was looked up in L3 stays looked up (the spec agrees; before, the model
    # rebuilt the request without the mark, which `kvsm conform --config l3` showed)
    s, nid = durable_prefix(l3(), [1, 2, 3])
    s = drop_everywhere(s, nid)
    rid = s.next_rid
    s = run(s, T("Arrive", rid=rid, tokens=[1, 2, 3, 9], out_pages=0))
    s = run(s, T("ReloadMark", rid=rid), T("ReloadReserve", rid=rid))
    s = run(s, T("ReloadDone", rank=0, ok=True), T("ReloadDone", rank=1, ok=True), T("ReloadAdmit"))
    s = run(s, T("Match", rid=rid))
    before = s.requests[rid]
    s = run(s, T("LoadBack", rid=rid))
    after = s.requests[rid]
    assert after.reload_tried and after.node != before.node
    assert (after.id, after.tokens, after.out_pages, after.phase, after.pages) == (
        before.id, before.tokens, before.out_pages, before.phase, before.pages)


def test_a_pinned_node_is_split_and_its_spill_reads_the_pages_it_pinned():
    s = serve(l3(), 0, [1, 2, 3])
    nid = node_by_key(s, (1, 2, 3))
    s = run(backup(s, nid), T("SpillSubmit"), T("SpillGathered", rank=0))
    assert s.nodes[nid].pin == 1
    # the reference splits a node an in-flight spill pins (only a pending backup blocks)
    s = run(s, T("Arrive", rid=1, tokens=[1, 9, 9], out_pages=0), T("Match", rid=1))
    upper = node_by_key(s, (1,))
    assert s.nodes[upper].pin == 0 and s.nodes[nid].pin == 1 and s.nodes[nid].key == (2, 3)
    assert s.spill_queue == (upper,)  # the new upper object is queued for its own spill
    # rank 1 gathers after the split: still the three pages the op pinned, from the start
    s = run(s, T("SpillGathered", rank=1))
    assert [e.pages for e in s.effects] == [((s.objects[upper].base + 1, s.spills[0].hashes[1]),)]
    s = run(s, T("SpillDone", rank=0, ok=True), T("SpillDone", rank=1, ok=True), T("SpillAck"))
    # offset 1 is not a multiple of R = 2: the lower part's pages are not on their owners
    assert not s.nodes[nid].durable and s.nodes[nid].pin == 0


def test_durable_split_reference_keeps_a_misaligned_lower_part_durable():
    s, nid = durable_prefix(l3(R=2, durable_split="reference"), [1, 2, 3])
    s = run(s, T("Arrive", rid=1, tokens=[1, 9, 9], out_pages=0), T("Match", rid=1), check=False)
    assert s.nodes[nid].durable and s.nodes[nid].key == (2, 3)
    assert any(v.startswith("8 Durable") for v in violations(s)), violations(s)


def test_durable_split_reference_marks_a_misaligned_lower_part_at_the_ack():
    s = serve(l3(R=2, durable_split="reference"), 0, [1, 2, 3])
    nid = node_by_key(s, (1, 2, 3))
    s = run(backup(s, nid), T("SpillSubmit"), T("SpillGathered", rank=0), T("SpillGathered", rank=1))
    s = run(s, T("Arrive", rid=1, tokens=[1, 9, 9], out_pages=0), T("Match", rid=1))
    s = run(s, T("SpillDone", rank=0, ok=True), T("SpillDone", rank=1, ok=True), T("SpillAck"), check=False)
    assert s.nodes[nid].durable
    assert any(v.startswith("8 Durable") for v in violations(s)), violations(s)


def _spill_with_rank_1_failing(s, key):
    """Serve `key`, back it up and spill it while rank 1's disk fails: only rank 0's
    pages reach a disk, and the node is not durable."""
    s = serve(s, 0 if not s.requests else max(s.requests) + 1, key)
    nid = node_by_key(s, tuple(key))
    s = run(backup(s, nid), T("SpillSubmit"), T("SpillGathered", rank=0), T("SpillGathered", rank=1), T("DiskFail", rank=1))
    s = run(s, T("SpillDone", rank=0, ok=True), T("SpillDone", rank=1, ok=False), T("SpillAck"))
    assert not s.nodes[nid].durable
    return s, nid


@pytest.mark.parametrize("knob", ["fixed", "reference"])
def test_own_disk_durable_after_a_disk_fault_diverges_only_under_the_reference(knob):
    s, nid = _spill_with_rank_1_failing(l3(R=2, max_disk_faults=1, own_disk_durable=knob), [1, 2])
    s = drop_everywhere(s, nid)
    s = serve(s, 1, [1, 2])  # the same pages again: a new node, backed up and queued again
    nid = node_by_key(s, (1, 2))
    s = run(backup(s, nid), T("SpillSubmit"), check=False)
    if knob == "fixed":
        assert s.diverged is None and s.spills[0].node == nid and violations(s) == []
    else:
        # rank 0's disk holds page 0, its only page: it marks the node durable; rank 1's
        # lacks page 1: it pins and submits it. The state follows rank 0.
        assert s.diverged == ("SpillSubmit", (1,)) and s.spills == () and s.nodes[nid].durable
        assert [v.split(":")[0] for v in violations(s)] == ["8 Durable", "13 Agreement"]


def test_own_disk_durable_marks_without_a_spill_what_every_rank_holds():
    s, nid = durable_prefix(l3(R=2, own_disk_durable="reference"), [1, 2])
    s = drop_everywhere(s, nid)
    s = serve(s, 1, [1, 2])
    nid = node_by_key(s, (1, 2))
    s = run(backup(s, nid), T("SpillSubmit"))  # run() checks every invariant after it
    assert s.nodes[nid].durable and s.nodes[nid].pin == 0 and s.spills == () and s.spill_queue == ()


def test_a_reload_that_cannot_fit_keeps_the_evictions_it_made():
    s, nid = durable_prefix(l3(L2=3), [1, 2])
    s = drop_everywhere(s, nid)
    s = serve(s, 1, [6])
    six = node_by_key(s, (6,))
    s = run(backup(s, six), T("EvictDevice", node=six))  # (6): an L2-only leaf on host page 0
    s = serve(s, 2, [5], finish=False)
    s = backup(s, node_by_key(s, (5,)))  # (5) holds host page 1, on L1: not a host leaf
    rid = s.next_rid
    s = run(s, T("Arrive", rid=rid, tokens=[1, 2, 7], out_pages=0), T("ReloadMark", rid=rid))
    s = run(s, T("ReloadReserve", rid=rid))
    # two pages do not fit even without (6): no reload, the mark is dropped, (6) is gone
    assert s.reloads == () and rid not in s.reload_candidates and six not in s.nodes
