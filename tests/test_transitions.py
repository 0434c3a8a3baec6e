"""Guard and effect of every transition, on hand-built scenarios. Scenarios that read as
stories are cases of the corpus instead (traces/*.txt, checked by tests/test_corpus.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvsm import content
from kvsm.invariants import violations
from kvsm.state import DECODING, GONE, MATCHED, QUEUED, ROOT_ID, Rejected, Round
from kvsm.transitions import apply, enabled

from .helpers import T, backup, commit_round, fresh, load_back, node_by_key, run, serve


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


def test_a_page_content_is_the_first_8_bytes_of_blake2b_of_prev_slash_symbol_and_chain_agrees():
    # the identities are in every digest, log and GPU page: they never change
    import hashlib

    def slow(prev: int, sym: int) -> int:
        return int.from_bytes(hashlib.blake2b(b"%d/%d" % (prev, sym), digest_size=8).digest(), "big")

    assert content.page_content(0, 1) == slow(0, 1) == 18443869377103087564
    assert content.chain(0, (1, 2, 3)) == (18443869377103087564, 3407982452401088837, 6426013810298172974)
    prev, want = 2**64 - 1, []
    for sym in (0, 5, 2**40, 7):
        prev = slow(prev, sym)
        want.append(prev)
    assert content.chain(2**64 - 1, (0, 5, 2**40, 7)) == tuple(want)
    assert content.chain(3, ()) == ()


def test_a_full_prompt_hit_leaves_its_last_page_to_be_recomputed():
    s = serve(fresh(), 0, [1, 2, 3])
    whole = node_by_key(s, (1, 2, 3))
    s = run(s, T("Arrive", rid=1, tokens=[1, 2, 3], out_pages=0), T("Match", rid=1))
    # the match covers the prompt but its last page, and splits the node there
    upper, last = node_by_key(s, (1, 2)), node_by_key(s, (3,))
    assert last == whole and s.requests[1].node == upper and s.nodes[last].lock == 0
    s = run(s, T("Insert", rid=1))
    # the forward pass recomputed page 3; the insert finds it cached and counts a hit
    assert s.requests[1].node == last and s.nodes[last].hits == 2 and s.nodes[upper].hits == 2


def test_match_touches_nodes_root_to_leaf_with_increasing_clock():
    s = serve(fresh(), 0, [1])
    s = serve(s, 1, [1, 2])
    s = serve(s, 2, [1, 2, 3])
    a, b, c = (node_by_key(s, k) for k in [(1,), (2,), (3,)])
    s = run(s, T("Arrive", rid=3, tokens=[1, 2, 3, 4], out_pages=0), T("Match", rid=3))
    assert s.nodes[a].touched < s.nodes[b].touched < s.nodes[c].touched == s.clock


def test_match_stops_above_a_node_whose_backup_is_pending():
    s = serve(fresh(), 0, [1, 2, 3])
    nid = node_by_key(s, (1, 2, 3))
    s = run(s, T("Reserve", node=nid, fits=True))
    s = run(s, T("Arrive", rid=1, tokens=[1, 2, 9], out_pages=0), T("Match", rid=1))
    assert s.nodes[nid].key == (1, 2, 3)  # not split
    assert s.requests[1].node == ROOT_ID




def test_insert_counts_a_hit_on_nodes_already_on_l1():
    s = serve(fresh(), 0, [1, 2])
    s = serve(s, 1, [1, 2])  # its match split (1, 2) after one page; both parts hit
    assert s.nodes[node_by_key(s, (1,))].hits == 2 and s.nodes[node_by_key(s, (2,))].hits == 2




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
    s = run(s, T("Reserve", node=nid, fits=True), T("Arrive", rid=1, tokens=[1, 9], out_pages=0))
    rejects(s, T("Split", node=nid, at=1), "no live request")
    assert not [t for t in enabled(s) if t.name == "Split"]


# ---- Reserve / WriteDone / Commit / Rollback -----------------------------------------------------------------


def test_reserve_takes_the_lowest_free_run_and_locks_the_node():
    s = serve(fresh(), 0, [1, 2])
    nid = node_by_key(s, (1, 2))
    s = run(s, T("Reserve", node=nid, fits=True))
    assert s.objects[nid].base == 0 and not s.objects[nid].committed
    assert s.pending[nid].locked and s.writes == (nid,) and s.nodes[nid].lock == 1


def test_reserve_respects_the_write_through_threshold():
    s = serve(fresh(write_threshold=2), 0, [1, 2])
    nid = node_by_key(s, (1, 2))
    rejects(s, T("Reserve", node=nid, fits=True), "not eligible")
    s = serve(s, 1, [1, 2])
    run(s, T("Reserve", node=nid, fits=True))






def test_reserve_that_cannot_fit_changes_nothing_without_host_leaves():
    s = serve(fresh(L2=2), 0, [1, 2, 3])
    nid = node_by_key(s, (1, 2, 3))
    before = s.digest()
    rejects(s, T("Reserve", node=nid, fits=True), "no free run of 3 host pages")
    rejects(s, T("Reserve", node=nid, fits=False), "no host leaf to evict")
    # recomputed from the whole state (not the memo): nothing was written in place
    assert s.untracked().digest() == before and violations(s) == []
    assert not [t for t in enabled(s) if t.name == "Reserve"]


def test_reserve_that_cannot_fit_keeps_the_evictions_it_made():
    s = fresh(L2=3)
    s, a = _host_only(s, 0, [1])
    s = serve(s, 1, [2, 3], finish=False)  # decoding: (2, 3) stays on L1
    b = node_by_key(s, (2, 3))
    s = backup(s, b)  # host pages 1-2, a node on L1: not a host leaf
    s = serve(s, 2, [4, 5])
    c = node_by_key(s, (4, 5))
    assert [t for t in enabled(s) if t.name == "Reserve"] == [T("Reserve", node=c, fits=False)]
    rejects(s, T("Reserve", node=c, fits=True), "fits is false")
    s = run(s, T("Reserve", node=c, fits=False))
    # the reference's evict-to-fit released host leaf (1) before it gave up, and that stays
    assert a not in s.nodes and a not in s.objects and c not in s.pending
    assert list(s.l2_free[0]) == [(0, 1)]
    assert [e.kind for e in s.effects] == ["poison_host"]


def test_write_done_copies_only_the_ranks_own_pages():
    s = serve(fresh(R=2), 0, [1, 2, 3])
    nid = node_by_key(s, (1, 2, 3))
    s = run(s, T("Reserve", node=nid, fits=True), T("WriteDone", rank=1))
    obj = s.objects[nid]
    written = {p for p in range(obj.base, obj.base + obj.length) if p in s.host_content}
    assert written == {obj.base + 1}  # page index 1 sits in lane 1
    assert s.write_done == (0, 1)
    rejects(s, T("WriteDone", rank=1), "finished all 1")


def test_a_commit_round_with_an_unfinished_rank_commits_nothing():
    s = serve(fresh(R=2), 0, [1])
    a = node_by_key(s, (1,))
    s = run(s, T("Reserve", node=a, fits=True), T("WriteDone", rank=0))
    before = s.digest()
    s = commit_round(s)  # the MIN is 0: the collective returns and changes nothing
    assert s.digest() == before and a in s.pending


def test_commit_calls_pair_up_and_block_replicated_steps():
    s = serve(fresh(R=2), 0, [1])
    a = node_by_key(s, (1,))
    s = run(s, T("Reserve", node=a, fits=True), T("CommitCall", rank=1))
    assert s.commit_round == (Round.IDLE, Round.IN)
    rejects(s, T("CommitCall", rank=1), "already reached the commit call")
    # rank 1 waits in the collective: no replicated step until the round completes, and its
    # count of finished writes is the one it entered with
    rejects(s, T("Rollback", node=a), "replicated steps wait for the round")
    rejects(s, T("Arrive", rid=1, tokens=[2], out_pages=0), "replicated steps wait for the round")
    rejects(s, T("WriteDone", rank=1), "waits in the commit collective")
    rejects(s, T("Commit"), "every rank has entered")
    s = run(s, T("WriteDone", rank=0), T("CommitCall", rank=0), T("Commit"))
    assert s.commit_round == (Round.IDLE, Round.IDLE) and a in s.pending and s.write_done == (1, 0)


def test_commit_call_needs_a_backup_in_flight():
    s = serve(fresh(R=2), 0, [1])
    rejects(s, T("CommitCall", rank=0), "no backup is in flight")


def test_reference_commit_call_returns_early_on_an_empty_ack_queue():
    """Under commit_call = "reference" a rank whose own ack queue is empty returns before
    the collective; a rank whose queue holds an ack enters it: the calls no longer pair."""
    s = serve(fresh(R=2, commit_call="reference"), 0, [1])
    a = node_by_key(s, (1,))
    s = run(s, T("Reserve", node=a, fits=True), T("WriteDone", rank=0), T("CommitCall", rank=0))
    s = apply(s, T("CommitCall", rank=1))
    assert s.commit_round == (Round.IN, Round.SKIPPED)
    assert violations(s) == ["12 Collectives: ranks [0] entered the commit collective and ranks [1] returned early from the same call"]
    rejects(s, T("Commit"), "every rank has entered")


def test_reference_commit_calls_that_all_return_early_issue_no_collective():
    s = serve(fresh(R=2, commit_call="reference"), 0, [1])
    a = node_by_key(s, (1,))
    s = run(s, T("Reserve", node=a, fits=True), T("CommitCall", rank=0))
    assert s.commit_round == (Round.SKIPPED, Round.IDLE)
    s = run(s, T("CommitCall", rank=1))
    assert s.commit_round == (Round.IDLE, Round.IDLE)




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


def test_unbacked_evict_reference_orphans_the_l2_only_children_under_a_husk_until_host_eviction():
    s = serve(fresh(unbacked_evict="reference"), 0, [1])
    s = serve(s, 1, [1, 2])
    parent, child = node_by_key(s, (1,)), node_by_key(s, (2,))
    s = run(backup(s, child), T("EvictDevice", node=child))
    assert s.dev_index.first()[2] == parent  # the reference's `evict` takes it
    s = run(s, T("EvictDevice", node=parent))  # every invariant holds (run checks them)
    husk, orphan = s.nodes[parent], s.nodes[child]
    # the parent left the tree: a husk with its whole prefix, on no tier, under no node
    assert parent not in s.nodes[0].children.values()
    assert husk.parent == GONE and husk.key == (1,) and husk.dev == () and husk.host is None
    # the child keeps its object and its place under the husk; no match reaches it
    assert orphan.parent == parent and s.objects[child].committed and s.objects[child].owner == child
    assert orphan.hashes == content.prefix_content((1, 2))[1:]
    s = run(s, T("Arrive", rid=2, tokens=[1, 2], out_pages=0), T("Match", rid=2))
    assert s.requests[2].node == 0  # a miss: the content is on L2, unreachable
    # a host victim like any other: its eviction frees its pages, and the husk goes with it
    assert s.host_index.first()[2] == child
    s = run(s, T("EvictHost", node=child))
    assert child not in s.nodes and parent not in s.nodes and child not in s.objects


def test_a_husk_is_refused_where_the_contract_has_no_orphans():
    s = serve(fresh(unbacked_evict="reference"), 0, [1])
    s = serve(s, 1, [1, 2])
    child = node_by_key(s, (2,))
    s = run(backup(s, child), T("EvictDevice", node=child), T("EvictDevice", node=node_by_key(s, (1,))))
    fixed = replace(s, config=replace(s.config, unbacked_evict="fixed"))
    assert [v for v in violations(fixed) if v.startswith("1 ")] == [
        f"1 Tree: node {s.nodes[child].parent} has parent GONE (a husk) but unbacked_evict is not \"reference\"",
        f"1 Tree: node {child} does not reach the root",
    ]


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




def test_load_back_is_asynchronous_each_rank_copies_its_own_lane():
    s, nid = _host_only(fresh(R=2), 0, [1, 2, 3])
    s = run(s, T("Arrive", rid=1, tokens=[1, 2, 3, 4], out_pages=0), T("Match", rid=1), T("LoadBack", rid=1))
    n = s.nodes[nid]
    expect = content.prefix_content((1, 2, 3))
    # issued: the pages are the node's and locked (the load's lock and the request's), empty
    assert n.dev and n.lock == 2 and s.load_done == (0, 0)
    assert not any(p in s.dev_content for p in n.dev) and not s.effects
    rejects(s, T("Insert", rid=1), "load-back is still in flight")
    s = run(s, T("LoadDone", rank=1))
    assert [e.page for e in s.effects] == [n.dev[1]] and s.dev_content[n.dev[1]] == expect[1]
    assert n.dev[0] not in s.dev_content and s.load_done == (0, 1) and s.nodes[nid].lock == 2
    rejects(s, T("LoadDone", rank=1), "finished all 1 loads")
    s = run(s, T("LoadDone", rank=0))
    assert [s.dev_content[p] for p in n.dev] == list(expect)
    assert s.loads == () and s.load_done == (0, 0) and s.nodes[nid].lock == 1
    s = run(s, T("Insert", rid=1))


def test_an_aborted_request_leaves_its_load_back_locked_until_every_copy_lands():
    s, nid = _host_only(fresh(R=2), 0, [1, 2])
    s = run(s, T("Arrive", rid=1, tokens=[1, 2, 9], out_pages=0), T("Match", rid=1), T("LoadBack", rid=1),
            T("LoadDone", rank=0), T("Abort", rid=1))
    assert s.nodes[nid].lock == 1 and all(k[2] != nid for k in s.dev_index)
    rejects(s, T("EvictDevice", node=nid), "no node can be evicted from L1")
    s = run(s, T("LoadDone", rank=1))
    assert s.nodes[nid].lock == 0 and s.dev_index.first()[2] == nid
    s = run(s, T("EvictDevice", node=nid))


def test_a_page_written_while_its_load_is_in_flight_breaks_content():
    """What the load's lock prevents (the ground of the injected defect load_uaf): a page
    that a load still targets is written by someone else (freed and reused by an insert's
    forward pass), and the Content invariant says so."""
    from kvsm.tx import Tx

    s, nid = _host_only(fresh(R=1, L1=2), 0, [1, 2])
    s = run(s, T("Arrive", rid=1, tokens=[1, 2, 9], out_pages=0), T("Match", rid=1), T("LoadBack", rid=1), T("Abort", rid=1))
    tx = Tx(s)
    tx.fill_dev(s.nodes[nid].dev[0], 12345)
    bad = violations(tx.commit())
    assert bad == [f"7 Content: device page {s.nodes[nid].dev[0]} of node {nid} (page 0) holds content while rank 0's load-back copy into it is in flight"]


def test_load_back_respects_the_threshold_in_tokens():
    s, nid = _host_only(fresh(P=16, load_back_threshold=64), 0, [1, 2, 3])
    s = run(s, T("Arrive", rid=1, tokens=[1, 2, 3, 4], out_pages=0), T("Match", rid=1))
    rejects(s, T("LoadBack", rid=1), "48 tokens is below the load-back threshold 64")




def test_load_back_rejects_without_a_host_hit():
    s = serve(fresh(), 0, [1, 2])
    s = run(s, T("Arrive", rid=1, tokens=[1, 2], out_pages=0), T("Match", rid=1))
    rejects(s, T("LoadBack", rid=1), "no host hit")
