"""The GPU backend's pure part: how a transition's effects are shared out among ranks,
where the ranks must agree, and the fault-injection syntax. No torch here."""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import replace

import pytest

from kvsm.config import load_config
from kvsm.gpu.hooks import CorruptDisk, CorruptSlab, InjectError, Tamper, parse
from kvsm import effects as fx
from kvsm.gpu.plan import PlanError, agreements, plan_rank
from kvsm.state import lane_of
from kvsm.transitions import REGISTRY
from kvsm.walk import walk

from .helpers import COMMIT, T, fresh, node_by_key, run

FOUR_RANKS = """
R = 4
P = 4
L1 = 4
L2 = 32
payloads = ["kv", "draft"]
policy = "write_through"
write_threshold = 1
load_back_threshold = 4
max_live = 2
[prompt_generator]
seed = 3
systems = 2
system_pages = 4
per_system = 3
min_pages = 1
max_pages = 4
out_pages = 1
[walk_weights]
Rollback = 0.05
Abort = 0.1
Arrive = 0.5
WriteDone = 3
CommitCall = 1
Commit = 2
EvictDevice = 2
LoadBack = 8
LoadDone = 8
"""


# An L3 tier small enough to fill: L1 and L2 force spills and evictions, prompts share
# system prefixes so evicted prefixes come back (reloads), rare disk faults make some
# spill writes and reloads fail.
L3_TWO_RANKS = """
R = 2
P = 4
L1 = 4
L2 = 8
L3 = 16
policy = "write_through"
write_threshold = 1
load_back_threshold = 4
max_live = 2
reload_ttl = 4
[prompt_generator]
seed = 5
systems = 2
system_pages = 3
per_system = 3
min_pages = 1
max_pages = 3
out_pages = 1
[walk_weights]
Arrive = 0.5
Abort = 0.1
Rollback = 0.05
WriteDone = 3
CommitCall = 3
Commit = 2
SpillSubmit = 2
SpillGathered = 3
SpillDone = 3
SpillAck = 2
ReloadMark = 3
ReloadReserve = 3
ReloadDone = 3
ReloadAdmit = 3
EvictDevice = 2
EvictHost = 2
LoadBack = 6
LoadDone = 6
DiskFail = 0.05
DiskRecover = 0.5
"""
L3_FOUR_RANKS = (
    L3_TWO_RANKS.replace("R = 2", "R = 4")
    .replace("L1 = 4", "L1 = 3")
    .replace("L2 = 8", "L2 = 16")
    .replace("system_pages = 3", "system_pages = 4")
    .replace("max_pages = 3", "max_pages = 4")
)
L3_STEPS = 400


def l3_coverage(steps) -> set[str]:
    """What a sequence of (transition, state) exercises of the L3 tier."""
    R = steps[0][1].config.R
    got: set[str] = set()
    reloaded: dict[int, int] = {}  # host page -> the rank that read it from disk, while it holds that
    for t, s in steps:
        for e in s.effects:
            if isinstance(e, fx.SpillWrite) and e.hashes:
                got.add("spill_write_ok" if e.ok else "spill_write_failed")
            elif isinstance(e, fx.ReloadRead) and e.pages:
                got.add("reload_read_ok" if e.ok else "reload_read_failed")
                if e.ok:
                    reloaded.update((p.host, e.rank) for p in e.pages)
            elif isinstance(e, fx.PoisonHost):
                for p in range(e.base, e.base + e.length):
                    reloaded.pop(p, None)
            elif isinstance(e, fx.Load) and e.host_page in reloaded:
                got.add("load_of_a_reloaded_page")
                if reloaded[e.host_page] != lane_of(e.page, R):
                    got.add("load_of_a_page_another_rank_reloaded")
        if t.name == "ReloadAdmit":
            got.add("aborted" if any(isinstance(e, fx.PoisonHost) for e in s.effects) else "admitted")
    return got


# A load of a page another rank reloaded is rare in walks (a page's L3 owner `i mod R`
# is its load-back lane unless the run starts above the reloaded node); the scenario
# `reload_then_misaligned_load_back` below makes one.
L3_NEEDS = {"spill_write_ok", "spill_write_failed", "reload_read_ok", "reload_read_failed", "admitted", "aborted",
            "load_of_a_reloaded_page"}


def first_l3_walk(text: str, where, needs: set[str] = L3_NEEDS) -> tuple[int, list]:
    """(seed, steps) of the lowest seed whose walk of the config `text` exercises `needs`,
    found by search rather than fixed, so that a model change cannot silently leave the
    tests with a walk that exercises nothing."""
    path = where / "l3.toml"
    path.write_text(text)
    cfg = load_config(path)
    for seed in range(200):
        steps = list(walk(cfg, L3_STEPS, seed))
        if needs <= l3_coverage(steps):
            return seed, steps
    raise AssertionError(f"no walk of {L3_STEPS} steps within 200 seeds exercises {sorted(needs)}")


@pytest.fixture(scope="module", params=["two", "four"])
def l3_walk(request, tmp_path_factory):
    text = L3_TWO_RANKS if request.param == "two" else L3_FOUR_RANKS
    return first_l3_walk(text, tmp_path_factory.mktemp("l3"))[1]


@pytest.fixture(scope="module")
def four_rank_walk(tmp_path_factory):
    path = tmp_path_factory.mktemp("cfg") / "four.toml"
    path.write_text(FOUR_RANKS)
    return list(walk(load_config(path), 400, seed=0))


def _page_ops(effects):
    """Each page operation an effect list asks for, as a hashable value."""
    out = Counter()
    for e in effects:
        if isinstance(e, fx.PoisonHost):
            out.update(("poison_host", e.base + i) for i in range(e.length))
        elif isinstance(e, fx.SpillGather):
            out.update(("spill_gather", e.rank, p.host, p.hash) for p in e.pages)
            out[("op", e.kind, e.rank)] += 1
        elif isinstance(e, fx.SpillWrite):
            out.update(("spill_write", e.rank, h, e.ok) for h in e.hashes)
            out[("op", e.kind, e.rank)] += 1
        elif isinstance(e, fx.ReloadRead):
            out.update(("reload_read", e.rank, p.hash, p.host, e.ok) for p in e.pages)
            out[("op", e.kind, e.rank)] += 1
        elif isinstance(e, fx.Fill):
            out[("fill", e.page, e.content)] += 1
        elif isinstance(e, fx.Load):
            out[("load", e.host_page, e.page)] += 1
        elif isinstance(e, fx.Store):
            out[("store", e.rank, e.page, e.host_page)] += 1
        else:
            out[("poison_dev", e.page)] += 1
    return out


def _batch_ops(state, batches, rank):
    out = Counter()
    for b in batches:
        if b.op in (fx.SpillGather, fx.SpillWrite, fx.ReloadRead):
            out[("op", b.op.kind, rank)] += 1  # one batch per op, even one that lists no page
        for j in range(len(b)):
            match b.op:
                case fx.SpillGather:
                    out[("spill_gather", rank, b.host[j], b.hashes[j])] += 1
                case fx.SpillWrite:
                    out[("spill_write", rank, b.hashes[j], b.ok)] += 1
                case fx.ReloadRead:
                    out[("reload_read", rank, b.hashes[j], b.host[j], b.ok)] += 1
                case fx.Fill:
                    out[("fill", b.dev[j], b.content[j])] += 1
                case fx.Load:
                    out[("load", b.host[j], b.dev[j])] += 1
                case fx.Store:
                    out[("store", lane_of(b.dev[j], state.config.R), b.dev[j], b.host[j])] += 1
                case fx.PoisonDev:
                    out[("poison_dev", b.dev[j])] += 1
                case fx.PoisonHost:
                    out[("poison_host", b.host[j])] += 1
    return out


def _every_page_operation_once(steps) -> Counter:
    kinds = Counter()
    for _, state in steps:
        R = state.config.R
        done = Counter()
        for r in range(R):
            batches = plan_rank(state, r)
            for b in batches:
                kinds[b.op] += 1
                assert all(lane_of(p, R) == r for p in b.dev), f"rank {r} got a page of another lane in {b}"
            done += _batch_ops(state, batches, r)
        assert done == _page_ops(state.effects)
    return kinds


def test_every_page_operation_is_done_by_exactly_one_rank(four_rank_walk):
    kinds = _every_page_operation_once(four_rank_walk)
    assert {fx.Fill, fx.Load, fx.Store, fx.PoisonDev, fx.PoisonHost} <= set(kinds), kinds


def test_every_l3_operation_is_done_by_the_rank_it_names(l3_walk):
    kinds = _every_page_operation_once(l3_walk)
    assert {fx.SpillGather, fx.SpillWrite, fx.ReloadRead, fx.Load, fx.Store, fx.PoisonHost} <= set(kinds), kinds


def test_l3_batches_carry_the_models_owned_pages_and_content(l3_walk):
    for _, state in l3_walk:
        R = state.config.R
        for r in range(R):
            for b in plan_rank(state, r):
                if b.op is fx.SpillGather:
                    # the staged copy the model just made: its pages, in object order
                    assert [(h, c) for h, c in zip(b.hashes, b.content)] == list(state.spill_staged[r][-1])
                    assert b.content == b.hashes, "a page's content identity is its L3 hash"
                elif b.op is fx.ReloadRead and b.ok:
                    assert b.content == b.hashes == [state.host_content[p] for p in b.host]
                    assert all((r, h) in state.l3 for h in b.hashes), "a rank reads only what its disk holds"
                elif b.op is fx.ReloadRead:
                    assert b.content == [] and all(p not in state.host_content for p in b.host)


def _slab_accesses(state):
    """(host page, rank, writes) for every slab page a transition's effects touch."""
    R = state.config.R
    for e in state.effects:
        if isinstance(e, fx.Store):
            yield e.host_page, e.rank, True
        elif isinstance(e, fx.Load):
            yield e.host_page, lane_of(e.page, R), False
        elif isinstance(e, fx.PoisonHost):
            for i in range(e.length):
                yield e.base + i, lane_of(i, R), True
        elif isinstance(e, fx.SpillGather):
            for p in e.pages:
                yield p.host, e.rank, False
        elif isinstance(e, fx.ReloadRead) and e.ok:
            for p in e.pages:
                yield p.host, e.rank, True


def unordered_slab_accesses(steps, agree) -> list[str]:
    """Pairs of accesses to one slab page by different ranks, one of them a write, that no
    agreement separates. Ranks run ahead of each other between agreements, so such a
    pair may happen in either order: a page read before it was written, or poisoned
    under a reader. `agree(name, effects)` gives (before, after) as plan.agreements."""
    sync = -1  # the latest agreement: between transition `sync` and `sync + 1`
    last_write: dict[int, tuple[int, int]] = {}
    reads: dict[int, dict[int, int]] = {}
    out = []
    for i, (t, s) in enumerate(steps, start=1):
        before, after = agree(t.name, s.effects)
        if before:
            sync = i - 1
        for p, r, writes in _slab_accesses(s):
            prior = [last_write[p]] if p in last_write else []
            if writes:
                prior += [(j, rr) for rr, j in reads.get(p, {}).items()]
            for j, rr in prior:
                if rr != r and j > sync:
                    out.append(f"host page {p}: rank {rr} at transition {j}, rank {r} at {i} {t}")
            if writes:
                last_write[p] = (i, r)
                reads[p] = {}
            else:
                reads.setdefault(p, {})[r] = i
        if after:
            sync = i
    return out


def test_cross_rank_slab_accesses_are_ordered_by_agreements(four_rank_walk, l3_walk):
    assert unordered_slab_accesses(four_rank_walk, agreements) == []
    assert unordered_slab_accesses(l3_walk, agreements) == []


def reload_then_misaligned_load_back() -> list:
    """Two ranks, one page per symbol. Prefix [1] is backed up and stays on L2 only;
    [2, 3] below it is spilled, dropped from L1 and L2, reloaded from L3 (rank 0 reads
    object page 0, rank 1 page 1) and admitted under [1]. A request for [1, 2, 3, 4]
    (whose match covers [1, 2, 3]: never a prompt's last page) then loads the run
    [1] + [2, 3] back: run page 1 (the page rank 0 read) goes to lane 1
    and run page 2 (rank 1's) to lane 0, so each rank loads from the slab a page the
    other wrote from its disk."""
    s = fresh(L3=16)
    out = []

    def do(*ts):
        nonlocal s
        for t in ts:
            s = run(s, t)
            out.append((t, s))

    do(T("Arrive", rid=0, tokens=[1], out_pages=0), T("Match", rid=0), T("Insert", rid=0), T("Finish", rid=0))
    do(T("Reserve", node=1, fits=True), T("WriteDone", rank=0), T("WriteDone", rank=1), *COMMIT(2))
    do(T("Arrive", rid=1, tokens=[1, 2, 3], out_pages=0), T("Match", rid=1), T("Insert", rid=1), T("Finish", rid=1))
    b = node_by_key(s, (2, 3))
    do(T("Reserve", node=b, fits=True), T("WriteDone", rank=0), T("WriteDone", rank=1), *COMMIT(2))
    for _ in range(2):  # the spill queue holds [1], then [2, 3]
        do(T("SpillSubmit"), T("SpillGathered", rank=0), T("SpillGathered", rank=1))
        do(T("SpillDone", rank=0, ok=True), T("SpillDone", rank=1, ok=True), T("SpillAck"))
    do(T("EvictDevice", node=b), T("EvictHost", node=b), T("EvictDevice", node=1))
    do(T("Arrive", rid=2, tokens=[1, 2, 3, 4], out_pages=0), T("ReloadMark", rid=2), T("ReloadReserve", rid=2))
    do(T("ReloadDone", rank=0, ok=True), T("ReloadDone", rank=1, ok=True), T("ReloadAdmit"))
    do(T("Match", rid=2), T("LoadBack", rid=2), T("LoadDone", rank=0), T("LoadDone", rank=1))
    return out


def test_a_page_one_rank_reloaded_is_loaded_by_another_only_after_the_reload_admit_agreement():
    steps = reload_then_misaligned_load_back()
    assert "load_of_a_page_another_rank_reloaded" in l3_coverage(steps)
    assert unordered_slab_accesses(steps, agreements) == []

    # Without an agreement at ReloadAdmit nothing orders rank 0's disk read into the
    # slab before rank 1's load of that page: rank 1 may run ahead and load garbage.
    def no_admit(name, effects):
        before, after = agreements(name, effects)
        return before, after and not (name == "ReloadAdmit" and not before)

    bad = unordered_slab_accesses(steps, no_admit)
    assert len(bad) == 2 and all("LoadDone" in x for x in bad), bad
    assert any("rank 0 at transition" in x and "rank 1 at" in x for x in bad), bad


def test_loaded_and_stored_pages_carry_the_models_claimed_content(four_rank_walk):
    for _, state in four_rank_walk:
        for r in range(state.config.R):
            for b in plan_rank(state, r):
                if b.op in (fx.Load, fx.Store):
                    assert b.content == [state.dev_content.get(p) for p in b.dev]
                    assert all(c is not None for c in b.content), "the model moved a poisoned page"


def test_runs_of_one_kind_keep_the_order_of_the_effects(four_rank_walk):
    # An Insert that evicts poisons pages, then fills the pages it freed: the batches
    # must come in that order, or the fill would be poisoned.
    reused = 0
    for t, state in four_rank_walk:
        for r in range(state.config.R):
            batches = plan_rank(state, r)
            order = [b.op for b in batches]
            runs = [k for i, k in enumerate(type(e) for e in state.effects) if i == 0 or type(state.effects[i - 1]) is not k]
            assert [k for k in runs if k in order] == order
            poisoned = set()
            for b in batches:
                if b.op is fx.PoisonDev:
                    poisoned |= set(b.dev)
                elif b.op is fx.Fill:
                    reused += len(poisoned & set(b.dev))
    assert reused > 0, "the walk never reused a freed page within a transition; the test shows nothing"


def test_freed_host_object_is_split_among_ranks_without_overlap(four_rank_walk):
    state = four_rank_walk[-1][1]
    fake = replace(state, effects=(fx.PoisonHost(base=10, length=7),))
    parts = [plan_rank(fake, r) for r in range(4)]
    pages = [h for p in parts for b in p for h in b.host]
    assert sorted(pages) == list(range(10, 17))
    assert [b.host for b in parts[1]] == [[11, 15]]


def test_a_store_of_a_page_in_another_lane_is_refused(four_rank_walk):
    state = four_rank_walk[-1][1]
    fake = replace(state, effects=(fx.Store(rank=1, page=2, host_page=0),))
    with pytest.raises(PlanError, match="store by rank 1 names device page 2 of lane 2"):
        plan_rank(fake, 1)


def test_a_page_freed_twice_in_one_run_is_refused(four_rank_walk):
    state = four_rank_walk[-1][1]
    fake = replace(state, effects=(fx.PoisonDev(page=5), fx.PoisonDev(page=5)))
    with pytest.raises(PlanError, match="page 5 twice"):
        plan_rank(fake, 1)


def test_agreements_sit_at_the_models_agreements_and_around_host_frees(four_rank_walk, l3_walk):
    assert {n for n, spec in REGISTRY.items() if spec.agreement} == {"Commit", "SpillAck", "ReloadAdmit"}
    assert agreements("Commit", ()) == (False, True)
    assert agreements("SpillAck", ()) == (False, True)
    assert agreements("ReloadAdmit", ()) == (False, True)  # admitted: the object becomes the node's
    assert agreements("ReloadAdmit", (fx.PoisonHost(base=4, length=2),)) == (True, True)  # aborted: freed
    assert agreements("SpillGathered", (fx.SpillGather(rank=0, base=3, pages=(fx.HostPage(host=3, hash=7),)),)) == (False, False)
    assert agreements("EvictHost", (fx.PoisonHost(base=3, length=2),)) == (True, True)
    # a Reserve that finds room frees nothing and needs no agreement
    assert agreements("Reserve", ()) == (False, False)
    seen = Counter()
    for t, state in four_rank_walk:
        before, after = agreements(t.name, state.effects)
        frees = any(isinstance(e, fx.PoisonHost) for e in state.effects)
        assert before == frees and after == (frees or t.name == "Commit")
        seen[(t.name, before)] += 1
    # the walk frees host pages in each way the model does, and also reserves without
    assert {("EvictHost", True), ("Rollback", True), ("Reserve", False)} <= set(seen), seen
    l3_seen = {(t.name, agreements(t.name, s.effects)) for t, s in l3_walk}
    assert {("SpillAck", (False, True)), ("ReloadAdmit", (False, True)), ("ReloadAdmit", (True, True))} <= l3_seen
    assert not any(a or b for name, (a, b) in l3_seen if name in ("SpillGathered", "SpillDone", "ReloadDone", "SpillSubmit"))


def test_a_spill_gather_that_differs_from_the_models_staged_copy_is_refused(l3_walk):
    t, state = next((t, s) for t, s in l3_walk if s.effects and isinstance(s.effects[0], fx.SpillGather) and s.effects[0].pages)
    gather = state.effects[0]
    r = gather.rank
    fake = replace(state, effects=(replace(gather, pages=tuple(p._replace(hash=p.hash ^ 1) for p in gather.pages)),))
    with pytest.raises(PlanError, match=f"spill_gather of rank {r} lists hashes"):
        plan_rank(fake, (r + 1) % state.config.R)  # refused on every rank alike
    with pytest.raises(PlanError, match="names rank 9"):
        plan_rank(replace(state, effects=(fx.SpillWrite(rank=9, hashes=(), ok=True),)), 0)


def test_injection_syntax():
    h = parse("corrupt_slab:12:1; tamper:30:0;corrupt_slab:4:2:9; corrupt_disk:7:1:0xfedcba9876543210;corrupt_disk:8:0")
    assert h.corrupt == (CorruptSlab(12, 1), CorruptSlab(4, 2, 9))
    assert h.tamper == (Tamper(30, 0),)
    assert h.corrupt_disk == (CorruptDisk(7, 1, 0xFEDCBA9876543210), CorruptDisk(8, 0))
    assert h.corrupt_at(4, 2) == CorruptSlab(4, 2, 9) and h.corrupt_at(4, 1) is None
    assert h.corrupt_disk_at(8, 0) == CorruptDisk(8, 0) and h.corrupt_disk_at(7, 0) is None
    assert not parse("")
    with pytest.raises(InjectError, match="'tamper:x:1': arguments must be integers"):
        parse("tamper:x:1")
    with pytest.raises(InjectError, match="expected corrupt_slab"):
        parse("flip:1:2")


def test_plan_and_hooks_do_not_import_torch():
    assert "kvsm.gpu.plan" in sys.modules
    import subprocess

    code = "import sys, kvsm.gpu.plan, kvsm.gpu.hooks, kvsm.cli; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_page_set_objects_are_freed_by_the_owners_of_their_object_indices(tmp_path):
    """Under l2_alloc = "pages" a freed object is several runs of host pages; page `base + i`
    of a run that starts at object index `index` is poisoned by rank `(index + i) mod R`,
    and every page once."""
    path = tmp_path / "pages.toml"
    # a host pool small enough that its free pages scatter
    path.write_text(FOUR_RANKS.replace("L2 = 32", "l2_alloc = \"pages\"\nL2 = 12"))
    steps = list(walk(load_config(path), 800, seed=2))
    _every_page_operation_once(steps)
    scattered = 0
    for _, state in steps:
        R = state.config.R
        for e in state.effects:
            if isinstance(e, fx.PoisonHost):
                scattered += e.index > 0
                for r in range(R):
                    mine = {h for b in plan_rank(state, r) if b.op is fx.PoisonHost for h in b.host}
                    want = {e.base + i for i in range(e.length) if (e.index + i) % R == r}
                    assert want <= mine, (e, r, mine)
    assert scattered > 0
