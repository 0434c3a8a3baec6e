"""The model knobs that make an R = 1 config describe SGLang 0.5.20's HiRadixCache
(docs/realimpl.md): each transition under both readings, on a state where they differ."""

from __future__ import annotations

import pytest

from kvsm.config import ConfigError, builtin_file, load_config
from kvsm.invariants import violations
from kvsm.state import Rejected
from kvsm.tla.validate import validate
from kvsm.transitions import apply, enabled

from .helpers import T, backup, fresh, node_by_key, run, serve


def _gap(l2_alloc: str):
    """R = 1, a host pool of 3 pages: [1] backed at page 0 and [2] at page 1, then [1]
    evicted from both tiers, so pages 0 and 2 are free but no run of two; then node
    [3, 4] (two pages), eligible for a backup, and no host leaf to evict ([2] is on L1)."""
    s = fresh(R=1, L1=8, L2=3, l2_alloc=l2_alloc)
    s = serve(s, 0, [1])
    a = node_by_key(s, (1,))
    s = backup(s, a)
    s = serve(s, 1, [2])
    s = backup(s, node_by_key(s, (2,)))
    s = run(s, T("EvictDevice", node=a), T("EvictHost", node=a))
    s = serve(s, 2, [3, 4])
    return s, node_by_key(s, (3, 4))


def test_l2_alloc_run_finds_no_run_of_two_in_two_scattered_free_pages():
    s, c = _gap("run")
    assert [(b, n) for b, n in s.l2_free[0]] == [(0, 1), (2, 1)]
    with pytest.raises(Rejected, match="no free run of 2 host pages"):
        apply(s, T("Reserve", node=c, fits=True))
    with pytest.raises(Rejected, match="no host leaf to evict"):
        apply(s, T("Reserve", node=c, fits=False))
    assert not [t for t in enabled(s) if t.name == "Reserve"]


def test_l2_alloc_pages_takes_the_lowest_free_pages_wherever_they_are():
    s, c = _gap("pages")
    assert T("Reserve", node=c, fits=True) in enabled(s)
    s = backup(s, c)
    o = s.objects[c]
    assert (o.base, o.length, o.pages, o.committed) == (0, 2, (0, 2), True)
    assert not s.l2_free[0] and violations(s) == []
    # the copy went to pages 0 and 2: the content invariant reads them through `pages`
    n = s.nodes[c]
    assert [s.host_content[p] for p in o.pages] == list(n.hashes)
    # a load-back reads pages 0 and 2 ([2] and [3, 4] evicted from L1, then a request hits [3, 4])
    s = run(s, T("EvictDevice", node=node_by_key(s, (2,))), T("EvictDevice", node=c))
    s = run(s, T("Arrive", rid=3, tokens=[3, 4, 5], out_pages=0), T("Match", rid=3), T("LoadBack", rid=3))
    assert [h for _, h in s.loads[0].pages] == [0, 2]
    # freeing the object frees both scattered pages, each poisoned
    s = run(s, T("LoadDone", rank=0), T("Insert", rid=3), T("Finish", rid=3))
    assert violations(s) == []


def test_l2_alloc_pages_splits_an_object_along_its_pages():
    s, c = _gap("pages")
    s = backup(s, c)
    s = run(s, T("Arrive", rid=3, tokens=[3, 9], out_pages=0), T("Split", node=c, at=1))
    upper = node_by_key(s, (3,))
    assert s.objects[upper].pages == (0,) and s.objects[c].pages == (2,) and s.objects[c].base == 2
    assert violations(s) == []


def test_l2_alloc_is_refused_with_an_l3_tier_and_unknown_values(tmp_path):
    bad = tmp_path / "c.toml"
    bad.write_text('l2_alloc = "pages"\nL3 = 4\n')
    with pytest.raises(ConfigError, match="l2_alloc = \"pages\" with L3 = 4"):
        load_config(bad)
    bad.write_text('l2_alloc = "heap"\n')
    with pytest.raises(ConfigError, match="field 'l2_alloc' must be one of run, pages"):
        load_config(bad)


def _scattered_reserves(log) -> int:
    """Backups whose object the simulator's run placed on non-consecutive host pages."""
    from kvsm.log import read_log
    from kvsm.state import initial_state

    header, steps = read_log(log)
    s, n = initial_state(header.config).untracked(), 0
    for _, _, t, _ in steps:
        s = apply(s, t)
        if t.name == "Reserve" and t.arg("fits"):
            o = s.objects[t.arg("node")]
            n += o.pages[-1] - o.pages[0] + 1 != o.length
    return n


@pytest.mark.tlc
def test_the_simulator_runs_sglang_upstream_with_page_set_objects_its_log_replays_and_tlc_validates_it(tmp_path):
    from typer.testing import CliRunner

    from kvsm.cli import app
    from kvsm.replay import replay

    cfg = tmp_path / "up.toml"
    # a host pool small enough that it fills up and its free pages scatter
    cfg.write_text(builtin_file("sglang-upstream").read_text().replace("L2 = 512", "L2 = 96"))
    log = tmp_path / "r.jsonl"
    r = CliRunner().invoke(app, ["sim", "-c", str(cfg), "-n", "120", "-o", str(log), "--json"])
    assert r.exit_code == 0, r.output
    res = replay(str(log), check=True)
    assert res.ok and not res.violations
    assert _scattered_reserves(log) > 0
    v = validate(log)
    assert v.ok, v


def _load_back_evictions(log) -> tuple[int, int]:
    """Over the run's load-backs that came short of device pages: how many there were,
    and the device pages they evicted beyond what they lacked."""
    from kvsm.log import read_log
    from kvsm.state import initial_state

    header, steps = read_log(log)
    s, short, beyond = initial_state(header.config).untracked(), 0, 0
    for _, _, t, _ in steps:
        free = sum(len(lane) for lane in s.dev_free)
        after = apply(s, t)
        if t.name == "LoadBack" and len(after.loads[-1].pages) > free:
            short += 1
            beyond += sum(len(lane) for lane in after.dev_free)  # freed, and not loaded into
        s = after
    return short, beyond


@pytest.mark.tlc
def test_sglang_upstream_s_whole_size_load_back_eviction_in_the_simulator_replays_and_tlc_validates_it(tmp_path):
    """A small device pool, so that load-backs come short of pages: under "whole" they
    evict beyond what they lack, and TLC follows both logs."""
    from typer.testing import CliRunner

    from kvsm.cli import app
    from kvsm.replay import replay

    text = builtin_file("sglang-upstream").read_text().replace("L1 = 128", "L1 = 24")
    seen = {}
    for reading in ("whole", "shortfall"):
        cfg = tmp_path / f"{reading}.toml"
        cfg.write_text(text.replace('load_back_evict = "whole"', f'load_back_evict = "{reading}"'))
        log = tmp_path / f"{reading}.jsonl"
        r = CliRunner().invoke(app, ["sim", "-c", str(cfg), "-n", "150", "-o", str(log), "--workload", "synthetic"])
        assert r.exit_code == 0, r.output
        assert replay(str(log), check=True).ok
        v = validate(log)
        assert v.ok, v
        seen[reading] = _load_back_evictions(log)
    # as many short loads, which leave more pages free under "whole"
    assert seen["whole"][1] > seen["shortfall"][1], seen


def _split_tree(write_through_parent: str):
    """[1, 2] split by a request for [1, 3]: [1] under the root, [2] and [3] under it, none backed."""
    s = serve(fresh(R=1, L1=8, L2=8, write_through_parent=write_through_parent), 0, [1, 2])
    nid = node_by_key(s, (1, 2))
    s = run(s, T("Arrive", rid=1, tokens=[1, 3], out_pages=0), T("Split", node=nid, at=1))
    s = run(s, T("Match", rid=1), T("Insert", rid=1), T("Finish", rid=1))
    return s, node_by_key(s, (1,)), nid


def test_write_through_parent_any_backs_up_a_child_of_an_unbacked_node():
    s, top, low = _split_tree("any")
    assert {t.arg("node") for t in enabled(s) if t.name == "Reserve"} == {top, low, node_by_key(s, (3,))}
    s = run(s, T("Reserve", node=low, fits=True))
    assert low in s.pending and s.nodes[top].host is None and top not in s.pending


def test_write_through_parent_backed_waits_for_the_parent_s_submit():
    s, top, low = _split_tree("backed")
    assert {t.arg("node") for t in enabled(s) if t.name == "Reserve"} == {top}
    with pytest.raises(Rejected, match="parent is not backed"):
        apply(s, T("Reserve", node=low, fits=True))
    s = run(s, T("Reserve", node=top, fits=True))  # submitted, not committed: backed upstream
    assert {t.arg("node") for t in enabled(s) if t.name == "Reserve"} == {low, node_by_key(s, (3,))}
    s = run(s, T("Reserve", node=low, fits=True))
    assert low in s.pending and violations(s) == []


def test_write_through_parent_backed_is_refused_with_prepared_backups(tmp_path):
    bad = tmp_path / "c.toml"
    bad.write_text('write_through_parent = "backed"\nprepared_backups = true\n')
    with pytest.raises(ConfigError, match="write_through_parent = \"backed\" with prepared_backups = true"):
        load_config(bad)


def _short_load(load_back_evict: str):
    """R = 1, 4 device pages: [1, 2] only on L2, [5], [6], [7] on L1 (one page free), and
    a request whose match hits [1, 2]: its load-back is one page short."""
    s = serve(fresh(R=1, L1=4, L2=8, load_back_evict=load_back_evict), 0, [1, 2])
    a = node_by_key(s, (1, 2))
    s = run(backup(s, a), T("EvictDevice", node=a))
    for rid, p in ((1, 5), (2, 6), (3, 7)):
        s = serve(s, rid, [p])
    s = run(s, T("Arrive", rid=4, tokens=[1, 2, 9], out_pages=0), T("Match", rid=4))
    assert sum(len(lane) for lane in s.dev_free) == 1
    return run(s, T("LoadBack", rid=4))


def _on_l1(s) -> set[tuple[int, ...]]:
    return {n.key for nid, n in s.nodes.items() if nid and n.dev}


def test_load_back_evict_shortfall_evicts_one_page_for_a_load_one_page_short():
    s = _short_load("shortfall")
    assert _on_l1(s) == {(1, 2), (6,), (7,)} and not s.dev_free[0]


def test_load_back_evict_whole_evicts_the_load_s_size():
    s = _short_load("whole")
    assert _on_l1(s) == {(1, 2), (7,)} and len(s.dev_free[0]) == 1 and violations(s) == []


def test_load_back_evict_whole_loads_when_the_shortfall_is_freed_but_not_the_whole_size():
    """SGLang evicts what it can, then loads if the pages are there: [6] and [7] locked
    leave one victim ([5]), which covers the shortfall but not the load's size."""
    s = serve(fresh(R=1, L1=4, L2=8, load_back_evict="whole"), 0, [1, 2])
    a = node_by_key(s, (1, 2))
    s = run(backup(s, a), T("EvictDevice", node=a))
    s = serve(s, 1, [5])
    s = serve(serve(s, 2, [6], finish=False), 3, [7], finish=False)
    s = run(s, T("Arrive", rid=4, tokens=[1, 2, 9], out_pages=0), T("Match", rid=4), T("LoadBack", rid=4))
    assert _on_l1(s) == {(1, 2), (6,), (7,)} and violations(s) == []
