"""Guard and effect of every transition, on hand-built scenarios. Scenarios that read as
stories are cases of the corpus instead (traces/*.txt, checked by tests/test_corpus.py)."""

from __future__ import annotations

import pytest

from kvsm import content
from kvsm.invariants import violations
from kvsm.state import DECODING, MATCHED, QUEUED, ROOT_ID, Rejected
from kvsm.transitions import apply, enabled

from .helpers import T, backup, fresh, node_by_key, run, serve


def rejects(s, t, fragment: str) -> None:
    with pytest.raises(Rejected) as e:
        apply(s, t)
    assert fragment in str(e.value), str(e.value)


# ---- Arrive -------------------------------------------------------------------------------------


def test_arrive_queues_a_request_with_the_next_id():
    s = run(fresh(), T("Arrive", rid=0, tokens=[1, 2], out_pages=1))
    req = s.requests[0]
    assert (req.phase, req.tokens, req.out_pages, req.node) == (QUEUED, (1, 2), 1, ROOT_ID)
    assert s.next_rid == 1


def test_arrive_rejects_an_id_out_of_order_and_too_many_live():
    s = fresh(max_live=1)
    rejects(s, T("Arrive", rid=3, tokens=[1], out_pages=0), "next request id is 0")
    s = run(s, T("Arrive", rid=0, tokens=[1], out_pages=0))
    rejects(s, T("Arrive", rid=1, tokens=[1], out_pages=0), "1 requests are already alive")


def test_arrive_respects_max_requests():
    s = run(fresh(max_requests=1), T("Arrive", rid=0, tokens=[1], out_pages=0), T("Abort", rid=0))
    rejects(s, T("Arrive", rid=1, tokens=[1], out_pages=0), "all 1 requests")


# ---- Insert and Match -----------------------------------------------------------------------------------


def test_insert_allocates_page_k_in_lane_k_mod_R_and_takes_out_pages():
    s = serve(fresh(R=2, L1=4), 0, [1, 2, 3], out_pages=1, finish=False)
    n = s.nodes[node_by_key(s, (1, 2, 3))]
    assert [p % 2 for p in n.dev] == [0, 1, 0]
    assert n.dev == (0, 1, 2)  # lowest free page of each lane
    assert s.requests[0].pages == (3,)  # position 3 -> lane 1
    assert s.requests[0].phase == DECODING and s.requests[0].node == n.id
    assert n.lock == 1 and n.hits == 1
    assert [s.dev_content[p] for p in n.dev] == list(content.prefix_content((1, 2, 3)))




def test_match_touches_nodes_root_to_leaf_with_increasing_clock():
    s = serve(fresh(), 0, [1])
    s = serve(s, 1, [1, 2])
    s = serve(s, 2, [1, 2, 3])
    a, b, c = (node_by_key(s, k) for k in [(1,), (2,), (3,)])
    s = run(s, T("Arrive", rid=3, tokens=[1, 2, 3], out_pages=0), T("Match", rid=3))
    assert s.nodes[a].touched < s.nodes[b].touched < s.nodes[c].touched == s.clock


def test_match_stops_above_a_node_whose_backup_is_pending():
    s = serve(fresh(), 0, [1, 2, 3])
    nid = node_by_key(s, (1, 2, 3))
    s = run(s, T("Reserve", node=nid))
    s = run(s, T("Arrive", rid=1, tokens=[1, 2, 9], out_pages=0), T("Match", rid=1))
    assert s.nodes[nid].key == (1, 2, 3)  # not split
    assert s.requests[1].node == ROOT_ID




def test_insert_counts_a_hit_on_nodes_already_on_l1():
    s = serve(fresh(), 0, [1, 2])
    s = serve(s, 1, [1, 2])
    assert s.nodes[node_by_key(s, (1, 2))].hits == 2




def test_insert_never_evicts_a_locked_node_and_rejects_without_change():
    s = fresh(R=1, L1=2)
    s = serve(s, 0, [1, 2], finish=False)  # still decoding: locked
    s = run(s, T("Arrive", rid=1, tokens=[7], out_pages=0), T("Match", rid=1))
    before = s.digest()
    rejects(s, T("Insert", rid=1), "device lanes short")
    # recomputed from the whole state (not the memo): nothing was written in place
    assert s.untracked().digest() == before and violations(s) == []


def test_insert_rejects_a_request_not_matched():
    s = run(fresh(), T("Arrive", rid=0, tokens=[1], out_pages=0))
    rejects(s, T("Insert", rid=0), "is queued, not matched")
    rejects(s, T("Insert", rid=5), "does not exist")


# ---- Finish / Abort ---------------------------------------------------------------------------------------


def test_finish_releases_lock_and_pages():
    s = serve(fresh(), 0, [1, 2], out_pages=2, finish=False)
    pages = s.requests[0].pages
    s = run(s, T("Finish", rid=0))
    assert 0 not in s.requests
    assert s.nodes[node_by_key(s, (1, 2))].lock == 0
    assert all(p in s.dev_free[p % 2] for p in pages)
    assert all(p not in s.dev_content for p in pages)


@pytest.mark.parametrize("phase_steps", [0, 1, 2])
def test_abort_releases_whatever_the_request_holds(phase_steps):
    s = serve(fresh(), 0, [1, 2])
    s = run(s, T("Arrive", rid=1, tokens=[1, 2, 3], out_pages=1))
    steps = [T("Match", rid=1), T("Insert", rid=1)][:phase_steps]
    s = run(s, *steps, T("Abort", rid=1))
    assert 1 not in s.requests
    assert all(n.lock == 0 for n in s.nodes.values())
    assert sum(len(f) for f in s.dev_free) + sum(len(n.dev) for n in s.nodes.values()) == 8


def test_finish_rejects_a_request_that_is_not_decoding():
    s = run(fresh(), T("Arrive", rid=0, tokens=[1], out_pages=0), T("Match", rid=0))
    rejects(s, T("Finish", rid=0), "is matched, not decoding")


# ---- Split ------------------------------------------------------------------------------------------------


def test_split_is_enabled_only_where_a_request_needs_it():
    s = serve(fresh(), 0, [1, 2, 3])
    nid = node_by_key(s, (1, 2, 3))
    rejects(s, T("Split", node=nid, at=1), "no live request")
    s = run(s, T("Arrive", rid=1, tokens=[1, 9], out_pages=0))
    assert T("Split", node=nid, at=1) in enabled(s)
    rejects(s, T("Split", node=nid, at=2), "no live request")




def test_split_never_splits_a_pending_backup():
    s = serve(fresh(), 0, [1, 2, 3])
    nid = node_by_key(s, (1, 2, 3))
    s = run(s, T("Reserve", node=nid), T("Arrive", rid=1, tokens=[1, 9], out_pages=0))
    rejects(s, T("Split", node=nid, at=1), "no live request")
    assert not [t for t in enabled(s) if t.name == "Split"]


# ---- Reserve / WriteDone / Commit / Rollback -----------------------------------------------------------------


def test_reserve_takes_the_lowest_free_run_and_locks_the_node():
    s = serve(fresh(), 0, [1, 2])
    nid = node_by_key(s, (1, 2))
    s = run(s, T("Reserve", node=nid))
    assert s.objects[nid].base == 0 and not s.objects[nid].committed
    assert s.pending[nid].locked and s.writes == (nid,) and s.nodes[nid].lock == 1


def test_reserve_respects_the_write_through_threshold():
    s = serve(fresh(write_threshold=2), 0, [1, 2])
    nid = node_by_key(s, (1, 2))
    rejects(s, T("Reserve", node=nid), "not eligible")
    s = serve(s, 1, [1, 2])
    run(s, T("Reserve", node=nid))






def test_reserve_rejects_when_even_evicting_every_host_leaf_is_not_enough():
    s = serve(fresh(L2=2), 0, [1, 2, 3])
    nid = node_by_key(s, (1, 2, 3))
    before = s.digest()
    rejects(s, T("Reserve", node=nid), "no free run of 3 host pages")
    # recomputed from the whole state (not the memo): the evictions tried were not kept
    assert s.untracked().digest() == before and violations(s) == []


def test_write_done_copies_only_the_ranks_own_pages():
    s = serve(fresh(R=2), 0, [1, 2, 3])
    nid = node_by_key(s, (1, 2, 3))
    s = run(s, T("Reserve", node=nid), T("WriteDone", rank=1))
    obj = s.objects[nid]
    written = {p for p in range(obj.base, obj.base + obj.length) if p in s.host_content}
    assert written == {obj.base + 1}  # page index 1 sits in lane 1
    assert s.write_done == (0, 1)
    rejects(s, T("WriteDone", rank=1), "finished all 1")






# ---- EvictDevice / EvictHost ---------------------------------------------------------------------------------


def test_evict_device_takes_only_the_first_victim():
    s = serve(fresh(), 0, [1])
    s = serve(s, 1, [2])
    a, b = node_by_key(s, (1,)), node_by_key(s, (2,))
    rejects(s, T("EvictDevice", node=b), f"picks node {a}")
    s = run(s, T("EvictDevice", node=a))
    assert a not in s.nodes  # unbacked: deleted


def test_protected_nodes_go_after_unprotected_ones():
    s = serve(fresh(), 0, [1])
    s = serve(s, 1, [1])  # hits 2: protected
    s = serve(s, 2, [2])
    assert s.dev_index.first()[2] == node_by_key(s, (2,))


def test_evict_device_keeps_a_backed_node_on_l2():
    s = serve(fresh(), 0, [1, 2])
    nid = node_by_key(s, (1, 2))
    s = run(backup(s, nid), T("EvictDevice", node=nid))
    n = s.nodes[nid]
    assert n.dev == () and n.host == nid
    assert s.host_index.first()[2] == nid


def test_unbacked_node_with_host_children_is_not_evicted_from_l1():
    s = serve(fresh(), 0, [1])
    s = serve(s, 1, [1, 2])
    parent, child = node_by_key(s, (1,)), node_by_key(s, (2,))
    s = run(backup(s, child), T("EvictDevice", node=child))
    assert all(k[2] != parent for k in s.dev_index)


def test_evict_host_frees_the_object_and_removes_the_node():
    s = serve(fresh(), 0, [1, 2])
    nid = node_by_key(s, (1, 2))
    s = run(backup(s, nid), T("EvictDevice", node=nid), T("EvictHost", node=nid))
    assert nid not in s.nodes and nid not in s.objects
    assert list(s.l2_free[0]) == [(0, 8)]
    rejects(s, T("EvictHost", node=nid), "no node can be evicted from L2")


# ---- LoadBack ----------------------------------------------------------------------------------------------------


def _host_only(s, rid, key):
    s = serve(s, rid, key)
    nid = node_by_key(s, tuple(key))
    return run(backup(s, nid), T("EvictDevice", node=nid)), nid




def test_load_back_respects_the_threshold_in_tokens():
    s, nid = _host_only(fresh(P=16, load_back_threshold=64), 0, [1, 2, 3])
    s = run(s, T("Arrive", rid=1, tokens=[1, 2, 3], out_pages=0), T("Match", rid=1))
    rejects(s, T("LoadBack", rid=1), "48 tokens is below the load-back threshold 64")




def test_load_back_rejects_without_a_host_hit():
    s = serve(fresh(), 0, [1, 2])
    s = run(s, T("Arrive", rid=1, tokens=[1, 2], out_pages=0), T("Match", rid=1))
    rejects(s, T("LoadBack", rid=1), "no host hit")
