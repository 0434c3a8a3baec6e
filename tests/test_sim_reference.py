"""The single-tier reference mode (`--tiers l1 --ranks 1 --eviction lru`):
the rule docs/sim.md states, checked by hand on a small trace and against an
independent implementation of that rule on random traces."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from kvsm.sim import SimOptions, load_workload, simulate


def _trace(tmp_path: Path, prompts: list[list[int]]) -> Path:
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps({"timestamp": i, "input_length": 512 * len(h), "output_length": 7, "hash_ids": h}) + "\n" for i, h in enumerate(prompts)))
    return p


def _reference(path: Path, capacity: int):
    return simulate(SimOptions(workload=str(path), tiers="l1", ranks=1, eviction="lru", l1_pages=capacity))


def test_hand_computed_hits_on_a_four_page_cache(tmp_path):
    prompts = [
        [1, 2, 3],  # miss; cached as one node
        [1, 2, 4],  # hits 2: splits [1,2,3] into [1,2] + [3]; adds [4]; cache full
        [5],  # miss; evicts [3], the least recently touched leaf
        [1, 2, 3],  # hits 2; evicts [4] (touched before [5])
        [5, 6],  # hits 1; [5] is locked, so [3] goes
        [1, 2, 4],  # hits 2; [1,2] is locked and [5] has a child: the leaf [6] goes
        [7, 8, 9, 10, 11],  # 5 pages never fit in 4: not cached, and nothing is evicted
        [5],  # hits 0: a match never covers a prompt's last page; [5] is still cached
    ]
    r = _reference(_trace(tmp_path, prompts), 4)
    assert [h for _, h, _, _ in r.request_hits] == [0, 2, 0, 2, 1, 2, 0, 0]
    s = r.summary
    assert (s["pages_total"], s["pages_hit_l1"], s["pages_hit_l2"]) == (21, 7, 0)
    assert s["hit_rate_blocks"] == round(7 / 21, 6)
    assert s["requests_uncached"] == 1 and s["pages_uncached"] == 5
    assert s["evictions"] == {"l1": 4, "l2": 0}
    # Arrive, Match, Insert, Finish each; the request that did not fit: Arrive, Match, Abort
    assert s["schedule"] == "serial" and s["transitions"] == 7 * 4 + 3
    cached = sorted(n.key for nid, n in r.final_state.nodes.items() if nid)
    assert cached == [(1, 2), (4,), (5,)]


class _Node:
    def __init__(self, nid: int, key: list[int], parent: "_Node | None", touched: int) -> None:
        self.id, self.key, self.parent, self.touched = nid, key, parent, touched
        self.children: dict[int, _Node] = {}


def oracle(prompts: list[list[int]], capacity: int) -> tuple[list[int], set[tuple[int, ...]]]:
    """docs/sim.md's single-tier rule, written from the text alone."""
    root = _Node(0, [], None, 0)
    clock, next_id, free = 0, 1, capacity
    hits = []
    for tokens in prompts:

        def tick(n: _Node) -> None:
            nonlocal clock
            clock += 1
            n.touched = clock

        def split(child: _Node, n: int) -> _Node:
            # the upper part is a new node with the next id and the old node's stamp
            nonlocal next_id
            upper = _Node(next_id, child.key[:n], child.parent, child.touched)
            next_id += 1
            child.parent.children[child.key[0]] = upper
            child.key, child.parent = child.key[n:], upper
            upper.children[child.key[0]] = child
            return upper

        # match: the request's ids but the last; whole nodes stamped root down, then the
        # node the walk ends inside, then its new upper part
        key = tokens[:-1]
        node, i, path = root, 0, []
        while i < len(key) and key[i] in node.children:
            child = node.children[key[i]]
            n = 0
            while n < len(child.key) and i + n < len(key) and child.key[n] == key[i + n]:
                n += 1
            if n < len(child.key):
                for p in path:
                    tick(p)
                tick(child)
                child = split(child, n)
                tick(child)
                path.append(child)
                i += n
                node = child
                break
            path.append(child)
            i += n
            node = child
        else:
            for p in path:
                tick(p)
        hits.append(i)
        # insert: the last page may be cached already, whole or as the first page of a
        # longer node (split after it)
        ins = list(path)
        if i == len(tokens) - 1 and tokens[-1] in node.children:
            child = node.children[tokens[-1]]
            if len(child.key) > 1:
                child = split(child, 1)
            ins.append(child)
            i += 1
        need = len(tokens) - i
        locked = set(map(id, path))

        def nodes(n: _Node):
            for c in n.children.values():
                yield c
                yield from nodes(c)

        evictable = sum(len(n.key) for n in nodes(root) if id(n) not in locked)
        if need and free + evictable >= need:
            while free < need:
                leaves = [n for n in nodes(root) if not n.children and id(n) not in locked]
                victim = min(leaves, key=lambda n: (n.touched, n.id))
                del victim.parent.children[victim.key[0]]
                free += len(victim.key)
        if not need or free >= need:
            for p in ins:
                tick(p)
        if need and free >= need:
            clock += 1
            new = _Node(next_id, tokens[i:], node, clock)
            next_id += 1
            node.children[tokens[i]] = new
            free -= need
    cached = set()

    def walk(n: _Node) -> None:
        for c in n.children.values():
            cached.add(tuple(c.key))
            walk(c)

    walk(root)
    return hits, cached


prompts_strategy = st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=6), min_size=1, max_size=25)


@given(prompts_strategy, st.integers(1, 12))
def test_the_model_serves_the_documented_rule(tmp_path_factory, raw, capacity):
    # turn arbitrary symbol lists into prefix hash ids, as a Mooncake trace numbers blocks
    ids: dict[tuple[int, ...], int] = {}
    prompts = [[ids.setdefault(tuple(p[: k + 1]), len(ids)) for k in range(len(p))] for p in raw]
    r = _reference(_trace(tmp_path_factory.mktemp("t"), prompts), capacity)
    want_hits, want_cached = oracle(prompts, capacity)
    assert [h for _, h, _, _ in r.request_hits] == want_hits
    assert {n.key for nid, n in r.final_state.nodes.items() if nid} == want_cached


def test_unbounded_capacity_gives_the_files_own_hit_rate():
    # with room for everything, a page hits exactly when its prefix hash was seen before,
    # but for the prompt's last page, which is always recomputed
    seen: set[int] = set()
    hit = total = 0
    for req in load_workload("synthetic").requests:
        k = 0
        while k < len(req.hash_ids) - 1 and req.hash_ids[k] in seen:
            k += 1
        hit, total = hit + k, total + len(req.hash_ids)
        seen.update(req.hash_ids)
    r = simulate(SimOptions(workload="synthetic", tiers="l1", ranks=1, eviction="lru", l1_pages=0))
    s = r.summary
    assert (s["pages_total"], s["pages_hit_l1"]) == (total, hit)
    assert round(s["hit_rate_blocks"], 4) == 0.6379
    assert s["evictions"]["l1"] == 0 and s["requests_uncached"] == 0


def _benchmark():
    """benchmarks/sim.py as a module (it is a script, not a package)."""
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "sim.py"
    spec = importlib.util.spec_from_file_location("kvsm_benchmark_sim", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_benchmarks_radix_cache_gives_every_request_the_simulators_hit():
    # benchmarks/sim.py times the simulator against its own mutable radix cache: the two
    # must serve the trace alike (every request's hit), or the ratio compares unlike work
    bench = _benchmark()
    capacity, n = 300, 400
    traces = [r.hash_ids for r in load_workload("synthetic", n).requests]
    cache = bench.RadixCache(capacity)
    hits = []
    for ids in traces:
        node, k = cache.match(ids)
        hits.append(k)
        cache.insert(ids, node)
        cache.release(node)
        assert cache.used <= capacity
    r = simulate(SimOptions(workload="synthetic", requests=n, tiers="l1", ranks=1, eviction="lru", l1_pages=capacity))
    assert r.summary["evictions"]["l1"] > 0  # the capacity is small enough to evict
    assert [h for _, h, _, _ in r.request_hits] == hits


def _fields(state):
    return {nid: (n.key, n.parent, dict(n.children.items()), n.stamp, n.lock) for nid, n in state.nodes.items()}


def test_the_benchmarks_persistent_floor_serves_as_its_radix_cache_and_keeps_old_states():
    # the floor (PersistentRadixCache) is the radix cache's algorithm over immutable
    # states: every request's hit the same, and a state once made never changes
    bench = _benchmark()
    capacity, n = 300, 400
    traces = [r.hash_ids for r in load_workload("synthetic", n).requests]
    mutable, floor = bench.RadixCache(capacity), bench.PersistentRadixCache(capacity)
    kept = []
    for ids in traces:
        node, k = mutable.match(ids)
        mutable.insert(ids, node)
        mutable.release(node)
        before = floor.state
        snapshot = (_fields(before), list(before.victims), before.used, before.clock)
        fnode, fk = floor.match(ids)
        assert fk == k
        floor.insert(ids)
        floor.release(fnode)
        assert floor.state.used == mutable.used <= capacity
        kept.append((before, snapshot))
    for before, (nodes, victims, used, clock) in kept[::37]:
        assert _fields(before) == nodes and list(before.victims) == victims
        assert (before.used, before.clock) == (used, clock)
