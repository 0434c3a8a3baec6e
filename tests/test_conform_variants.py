"""`kvsm conform` beyond the three shipped models: small variants that change one thing
each (the write-back policy, three ranks, thresholds of two, two tokens per page,
output pages) must give TLC and the Python model the same state graph, and each
variant must reach what it exists for. The shipped models are all write-through, two
ranks, one token per page and thresholds of one; a transition that differs from the
spec only under another setting would pass them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kvsm.tla.conform import conform
from kvsm.explore import explore
from kvsm.tla.models import config_of_model
from kvsm.tla.location import spec_dir

pytestmark = pytest.mark.tlc

BASE = dict(R=2, P=1, L1=1, L2=2, Policy='"write_through"', WriteThreshold=1, LoadBackThreshold=1, MaxRequests=3,
            MaxLive=1, L3=0, SpillQueueCap=8, SpillInflight=1, ReloadInflight=1, ReloadTTL=2, MaxDiskFaults=0,
            CommitEntry='"fixed"', AckTiming='"fixed"',
            UnbackedEvict='"fixed"', WriteBackEvict='"locked"', DurableSplit='"fixed"', VictimOrder='"slru"', PreparedBackups='FALSE', Bug='"none"',
            OwnDiskDurable='"fixed"', CarryHostHit='FALSE')
PROMPTS = (((1, 2), 0), ((1, 3), 0), ((4, 5), 0))
INVARIANTS = ("TypeOK", "Tree", "Residency", "Locks", "Pending", "DevicePages", "HostPages", "Content", "Durable",
              "Reload", "Counts", "Collectives", "Agreement", "Running", "MC_NodeIdsCovered")

# name: (constants that differ from BASE, prompts, transitions the variant must reach)
VARIANTS = {
    "write_back": (dict(Policy='"write_back"', MaxRequests=2), PROMPTS, {"Reserve", "CommitCall", "Commit", "Rollback", "LoadBack", "LoadDone", "EvictHost"}),
    # the reference's write-back eviction order: victims written back inside the load-back,
    # evicted after the loop, each re-checked first (too few requests here for the re-check
    # to fail: tests/test_write_back_profile.py has that path)
    "write_back_deferred": (dict(Policy='"write_back"', WriteBackEvict='"deferred"', MaxRequests=2), PROMPTS,
                            {"Reserve", "Commit", "LoadBack", "LoadDone", "EvictHost"}),
    # the reference's evict() under write_back (EvictWriteBack = "sync"): EvictDevice writes
    # an unbacked leaf back in its step (its failed write-back, the assert, is
    # tests/test_evict_write_back.py's; none fails in a graph this small)
    "evict_write_back": (dict(Policy='"write_back"', EvictWriteBack='"sync"', MaxRequests=2), PROMPTS,
                         {"EvictDevice", "EvictHost", "LoadBack", "Reserve"}),
    # its fix (EvictWriteBack = "sync_fixed"): a one-page host pool a pending backup holds,
    # where a victim whose write-back finds no room is skipped
    "evict_write_back_fixed": (dict(Policy='"write_back"', EvictWriteBack='"sync_fixed"', L1=2, L2=1),
                               (((1,), 0), ((2,), 0), ((3,), 0)), {"EvictDevice", "EvictHost", "Reserve", "Commit"}),
    "three_ranks": (dict(R=3, MaxRequests=2), (((1, 2, 3), 0), ((1, 2, 4), 0)), {"Split", "CommitCall", "Commit", "LoadBack", "LoadDone"}),
    # three-page prompts: a match covers all but the last page, and a load-back needs two
    "thresholds_2": (dict(WriteThreshold=2, LoadBackThreshold=2, L1=2), (((1, 2, 3), 0), ((1, 2, 4), 0)),
                     {"Reserve", "Commit", "LoadBack"}),
    "two_tokens_a_page": (dict(P=2, MaxRequests=2), (((1, 2), 1), ((1, 3), 0), ((4, 5), 0)), {"Split", "Commit", "LoadBack"}),
    "output_pages": ({}, (((1, 2), 1), ((1,), 1), ((3,), 0)), {"Finish", "Commit", "LoadBack"}),
    # host objects as page sets (SGLang's host allocator, L2Alloc = "pages"); the scattered
    # placements themselves: a simulator log that TLC validates (tests/test_upstream_knobs.py)
    "l2_pages": (dict(L2Alloc='"pages"', MaxRequests=2), PROMPTS, {"Reserve", "Split", "Commit", "LoadBack", "EvictHost"}),
    # write-through only below a backed parent (WriteThroughParent = "backed"): a split
    # leaves unbacked parents above new leaves
    "write_through_parent": (dict(WriteThroughParent='"backed"', MaxRequests=2), PROMPTS, {"Reserve", "Split", "Commit", "LoadBack"}),
    # a load-back short of pages evicts for its whole size (LoadBackEvict = "whole"); a
    # graph this small has no short load with a spare victim: a simulator log that TLC
    # validates has them (tests/test_upstream_knobs.py)
    "load_back_whole": (dict(LoadBackEvict='"whole"', L1=2, MaxRequests=2), PROMPTS, {"LoadBack", "LoadDone", "EvictDevice"}),
    # backups only inside Insert, where the reference takes them (BackupTrigger = "insert"):
    # no Reserve step; a two-page pool that an insert's backup evicts to fit
    "backup_trigger_insert": (dict(BackupTrigger='"insert"', MaxRequests=2), PROMPTS, {"Split", "Commit", "LoadBack", "EvictHost"}),
    # the same with a threshold of two (a path node's second hit backs it up) and a
    # prepared backup attached at the insert instead of the new node's hit
    "backup_trigger_insert_prepared": (dict(BackupTrigger='"insert"', WriteThreshold=2, PreparedBackups='TRUE', L1=2, MaxRequests=3),
                                       (((1, 2, 3), 0), ((1, 2, 4), 0)), {"Prepare", "Commit", "Split", "Rollback"}),
}
# variants under which Reserve is no step of its own
NO_RESERVE = {"backup_trigger_insert", "backup_trigger_insert_prepared"}


def _write_model(d: Path, name: str, consts: dict, prompts: tuple) -> Path:
    for module in spec_dir().glob("KV*.tla"):  # the spec and the modules it extends or instantiates
        shutil.copy(module, d / module.name)
    ps = ", ".join(f"[pages |-> <<{', '.join(map(str, pages))}>>, out_pages |-> {out}]" for pages, out in prompts)
    (d / f"MC_{name}.tla").write_text(
        f"---- MODULE MC_{name} ----\nEXTENDS KVCache\nMC_Prompts == {{{ps}}}\nMC_NodeIds == 1 .. 8\n"
        "MC_NodeIdsCovered == DOMAIN nodes \\subseteq {Root} \\cup MC_NodeIds\n====\n"
    )
    values = {**BASE, **consts}
    cfg = d / f"MC_{name}.cfg"
    cfg.write_text(
        "CONSTANTS\n" + "".join(f"    {k} = {v}\n" for k, v in values.items())
        + "    Prompts <- MC_Prompts\n    NodeIds <- MC_NodeIds\nSPECIFICATION Spec\nINVARIANTS\n"
        + "".join(f"    {i}\n" for i in INVARIANTS)
    )
    return cfg


@pytest.mark.parametrize("name", list(VARIANTS))
def test_conform_is_equal_on_a_variant_that_changes_one_setting(tmp_path, name):
    consts, prompts, reached = VARIANTS[name]
    cfg = _write_model(tmp_path, name, consts, prompts)
    res = conform(str(cfg))
    assert res.equal, res.to_json()["examples"]
    assert res.tlc_states == res.model_states > 100 and res.tlc_edges == res.model_edges
    edges = explore(config_of_model(cfg.with_suffix(".tla"), cfg), check=True).summary()
    assert edges["violations"] == []
    missing = {t for t in reached if not edges["edges_by_transition"].get(t)}
    assert not missing, f"the {name} variant never takes {sorted(missing)}"
    if name in NO_RESERVE:
        assert not edges["edges_by_transition"].get("Reserve")
