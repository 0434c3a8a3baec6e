"""How much slower the simulator's single-tier reference mode is than a mutable radix cache
and than a bare block LRU.

All three run over the whole bundled Mooncake synthetic trace in this one process, at
the same capacity, after the trace is parsed (parsing is not timed for any):

- sim: `kvsm sim --tiers l1 --ranks 1 --eviction lru --l1-pages CAP`
  (the serial schedule through the model: Arrive, Match, Insert, Finish per request,
  no log unless --log), timed around the simulator's loop;
- radix: `RadixCache` below, a mutable radix tree over the hash ids with a dict of
  children per node, LRU stamps and lock counts, evicting leaves least recently
  stamped first (the issue 26 baseline: what an engine's own radix cache costs);
- lru: an `OrderedDict` of hash ids, LRU order, CAP entries; a request's hit is its
  longest prefix of hash ids present but for its last id (a match never covers a
  prompt's last page), then every id is touched or inserted;
- floor: `PersistentRadixCache`, the radix cache's algorithm over immutable states
  (three steps a request, each a new state: an `immutables.Map` of nodes and kvsm's
  persistent B+ tree as the victim order). What keeping every state as a value costs by
  itself, with none of the model's requests, pages, contents or indexes: it puts the
  model's ratio in two parts, `ratio_floor_radix_cpu` (immutability) times
  `ratio_sim_floor_cpu` (the model's own state and steps).

Each is run --repeat times, in turns, and the fastest run counts; wall and CPU time
are both printed (CPU time is steadier when the machine is shared). `ratio_radix` is
sim / radix, `ratio` sim / lru. Each computes the block hit rate, printed beside the
times, a check that the comparison is like for like: the radix cache stamps, splits
and evicts as the model does, so its hit rate is the simulator's exactly (every
request's hit, tests/test_sim_reference.py); the block LRU's differs by under 0.2%
(equal at 1,953 and 97,656 pages; the model also stamps the unmatched part of the
node a match ends inside, as the reference does, which a block LRU does not). With
--full, also time the default 4-rank L1/L2 run of the whole trace (`kvsm sim --tiers
l1,l2 --ranks 4`, default config, timed schedule) at each `--replicas` level against
the same run of the code at the pinned commit BASELINE (1956e94, before the levels
existed: what `every` does today), each in a process of its own (`full_runs`), and
with --full-l3 one with the disk tier (`--tiers l1,l2,l3 --ranks 4`, several minutes).

    python benchmarks/sim.py [--json] [--capacity 19531] [--repeat 3] [--log] [--full [--full-requests N] [--full-repeat N (3)]] [--full-l3]
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import OrderedDict
from pathlib import Path

import immutables

from kvsm.log import Header, LogWriter
from kvsm.sim import SimOptions, load_workload, simulate
from kvsm.sim.options import prepare
from kvsm.sim.scheduler import Simulation
from kvsm.sortedset import PSortedSet


def _clocks() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def block_lru(traces: list[tuple[int, ...]], capacity: int) -> tuple[float, float, float]:
    w0, c0 = _clocks()
    cache: OrderedDict[int, bool] = OrderedDict()
    hit = total = 0
    for ids in traces:
        k = 0
        for x in ids[:-1]:
            if x not in cache:
                break
            k += 1
        hit += k
        total += len(ids)
        for x in ids:
            if x in cache:
                cache.move_to_end(x)
            else:
                cache[x] = True
                if len(cache) > capacity:
                    cache.popitem(last=False)
    w1, c1 = _clocks()
    return w1 - w0, c1 - c0, hit / total


class _RNode:
    """A node of the radix tree: the ids of its edge, its children by first id."""

    __slots__ = ("key", "parent", "children", "stamp", "lock", "nid")

    def __init__(self, key: list, parent: "_RNode | None", stamp: int, nid: int) -> None:
        self.key = key
        self.parent = parent
        self.children: dict[int, _RNode] = {}
        self.stamp = stamp
        self.lock = 0
        self.nid = nid


class RadixCache:
    """A mutable radix cache over hash ids (one id = one page), in the manner of SGLang's
    RadixCache with a page size of one, written for this benchmark: `match` walks the
    prompt's ids but its last, stamping each node it passes and splitting the node it
    ends inside, and locks the matched path; `insert` walks the whole prompt, splits
    where it diverges, evicts unlocked leaves least recently stamped first (a parent
    left childless joins them) until the new ids fit in `capacity` pages, stamps the
    path and adds the new ids as one leaf; `release` unlocks. The evictable leaves are
    a heap whose stale entries are dropped when popped."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.root = _RNode([], None, 0, 0)
        self.root.lock = 1  # never evicted
        self.used = 0
        self.clock = 0
        self.next_id = 1
        self.heap: list[tuple[int, int, _RNode]] = []

    def _stamp(self, n: _RNode) -> None:
        self.clock += 1
        n.stamp = self.clock
        if not n.children:
            heapq.heappush(self.heap, (n.stamp, n.nid, n))

    def _split(self, child: _RNode, at: int) -> _RNode:
        """A new upper node takes the first `at` ids (and the node's stamp)."""
        upper = _RNode(child.key[:at], child.parent, child.stamp, self.next_id)
        self.next_id += 1
        upper.lock = child.lock
        child.parent.children[child.key[0]] = upper
        child.key = child.key[at:]
        child.parent = upper
        upper.children[child.key[0]] = child
        return upper

    def _walk(self, ids, stop: int) -> tuple[list[_RNode], int, "tuple[_RNode, int] | None"]:
        """The nodes `ids[:stop]` covers whole, how many ids they cover, and the node it
        ends inside with the ids in common."""
        node, i, path = self.root, 0, []
        while i < stop:
            child = node.children.get(ids[i])
            if child is None:
                break
            key = child.key
            n, limit = 1, min(len(key), stop - i)
            while n < limit and key[n] == ids[i + n]:
                n += 1
            if n < len(key):
                return path, i, (child, n)
            path.append(child)
            i += n
            node = child
        return path, i, None

    def match(self, ids) -> tuple[_RNode, int]:
        """The deepest node of the longest cached prefix of `ids` but its last id, locked,
        and the prefix's length."""
        path, i, cut = self._walk(ids, len(ids) - 1)
        for n in path:
            self._stamp(n)
        node = path[-1] if path else self.root
        if cut is not None:
            self._stamp(cut[0])
            node = self._split(*cut)
            self._stamp(node)
            i += cut[1]
        self._lock(node, 1)
        return node, i

    def _lock(self, node: _RNode, delta: int) -> None:
        while node is not self.root:
            node.lock += delta
            if not node.lock and not node.children:
                heapq.heappush(self.heap, (node.stamp, node.nid, node))
            node = node.parent

    def _evict(self, need: int, keep: set) -> None:
        heap = self.heap
        while self.capacity - self.used < need:
            stamp, _, n = heapq.heappop(heap)
            if n.stamp != stamp or n.children or n.lock or n.parent is None or id(n) in keep:
                continue  # stale, locked or on the inserting path
            parent = n.parent
            del parent.children[n.key[0]]
            n.parent = None
            self.used -= len(n.key)
            if parent is not self.root and not parent.children and not parent.lock and id(parent) not in keep:
                heapq.heappush(heap, (parent.stamp, parent.nid, parent))

    def insert(self, ids, matched: _RNode) -> bool:
        """Cache `ids` (the request holds `matched`, from its match), evicting as needed;
        whether they fit (when they cannot, nothing is evicted or split)."""
        path, i, cut = self._walk(ids, len(ids))
        covered = i + (cut[1] if cut else 0)
        need = len(ids) - covered
        if need > self.capacity - covered:
            return False  # everything but the path evicted would not make room
        if cut is not None:
            path.append(self._split(*cut))
        if need:
            self._evict(need, {id(n) for n in path})
        for n in path:
            self._stamp(n)
        if need:
            parent = path[-1] if path else self.root
            self.clock += 1
            leaf = _RNode(list(ids[covered:]), parent, self.clock, self.next_id)
            self.next_id += 1
            parent.children[ids[covered]] = leaf
            heapq.heappush(self.heap, (leaf.stamp, leaf.nid, leaf))
            self.used += need
        return True

    def release(self, node: _RNode) -> None:
        self._lock(node, -1)


def radix_cache(traces: list[tuple[int, ...]], capacity: int) -> tuple[float, float, float]:
    w0, c0 = _clocks()
    cache = RadixCache(capacity)
    hit = total = 0
    for ids in traces:
        node, k = cache.match(ids)
        hit += k
        total += len(ids)
        cache.insert(ids, node)
        cache.release(node)
    w1, c1 = _clocks()
    return w1 - w0, c1 - c0, hit / total


class _PNode:
    """A node of `PersistentRadixCache`: never changed once made (`with_` makes another)."""

    __slots__ = ("key", "parent", "children", "stamp", "lock", "nid")

    def __init__(self, key: tuple, parent: int, children: immutables.Map, stamp: int, lock: int, nid: int) -> None:
        self.key, self.parent, self.children, self.stamp, self.lock, self.nid = key, parent, children, stamp, lock, nid

    def with_(self, **kw) -> "_PNode":
        n = _PNode(self.key, self.parent, self.children, self.stamp, self.lock, self.nid)
        for k, v in kw.items():
            setattr(n, k, v)
        return n

    def victim_key(self) -> "tuple[int, int] | None":
        """Its place in the eviction order: an unlocked leaf other than the root."""
        return (self.stamp, self.nid) if not self.lock and not self.children and self.nid else None


class _PState:
    """One immutable state of `PersistentRadixCache`."""

    __slots__ = ("nodes", "victims", "used", "clock", "next_id")

    def __init__(self, nodes: immutables.Map, victims: PSortedSet, used: int, clock: int, next_id: int) -> None:
        self.nodes, self.victims, self.used, self.clock, self.next_id = nodes, victims, used, clock, next_id


class _PStep:
    """The changes one step makes to a `_PState`, as a new state at `finish`: the node
    map's mutation (the old state's map is not touched) and the victim order's new
    versions (each update copies a path of the B+ tree)."""

    def __init__(self, st: _PState) -> None:
        self.nodes = st.nodes.mutate()
        self.victims, self.used, self.clock, self.next_id = st.victims, st.used, st.clock, st.next_id

    def put(self, old: "_PNode | None", new: "_PNode | None") -> None:
        if new is None:
            del self.nodes[old.nid]
        else:
            self.nodes[new.nid] = new
        ko = old.victim_key() if old is not None else None
        kn = new.victim_key() if new is not None else None
        if ko != kn:
            if ko is not None:
                self.victims = self.victims.remove(ko)
            if kn is not None:
                self.victims = self.victims.add(kn)

    def finish(self) -> _PState:
        return _PState(self.nodes.finish(), self.victims, self.used, self.clock, self.next_id)

    def stamp(self, nid: int) -> None:
        n = self.nodes[nid]
        self.clock += 1
        self.put(n, n.with_(stamp=self.clock))

    def split(self, nid: int, at: int) -> int:
        """A new upper node takes the first `at` ids of node `nid` (and its stamp)."""
        child = self.nodes[nid]
        up = self.next_id
        self.next_id += 1
        self.put(None, _PNode(child.key[:at], child.parent, immutables.Map({child.key[at]: nid}), child.stamp, child.lock, up))
        parent = self.nodes[child.parent]
        self.put(parent, parent.with_(children=parent.children.set(child.key[0], up)))
        self.put(child, child.with_(key=child.key[at:], parent=up))
        return up

    def walk(self, ids, stop: int) -> "tuple[list[int], int, tuple[int, int] | None]":
        """`RadixCache._walk` over node ids (written out again: one walk shared by both
        would add a call per node to both timed loops)."""
        nodes, nid, i, path = self.nodes, 0, 0, []
        while i < stop:
            c = nodes[nid].children.get(ids[i])
            if c is None:
                break
            key = nodes[c].key
            n, limit = 1, min(len(key), stop - i)
            while n < limit and key[n] == ids[i + n]:
                n += 1
            if n < len(key):
                return path, i, (c, n)
            path.append(c)
            i += n
            nid = c
        return path, i, None

    def lock(self, nid: int, delta: int) -> None:
        while nid:
            n = self.nodes[nid]
            self.put(n, n.with_(lock=n.lock + delta))
            nid = n.parent


class PersistentRadixCache:
    """`RadixCache`'s algorithm over immutable states: the match, the insert and the
    release of a request are three steps, each making a new state from the last (an
    `immutables.Map` of immutable nodes, the victim order a persistent B+ tree of
    `(stamp, id)`, kvsm's own `PSortedSet`) and leaving it unchanged. It has no requests,
    locks by lane, page numbers, contents, tiers or checks: a floor under what any model
    of the cache that keeps every state as a value costs in Python, beside the mutable
    cache that issue 26's target is measured against."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        root = _PNode((), -1, immutables.Map(), 0, 1, 0)
        self.state = _PState(immutables.Map({0: root}), PSortedSet(), 0, 0, 1)

    def match(self, ids) -> tuple[int, int]:
        s = _PStep(self.state)
        path, i, cut = s.walk(ids, len(ids) - 1)
        for nid in path:
            s.stamp(nid)
        node = path[-1] if path else 0
        if cut is not None:
            s.stamp(cut[0])
            node = s.split(*cut)
            s.stamp(node)
            i += cut[1]
        s.lock(node, 1)
        self.state = s.finish()
        return node, i

    def insert(self, ids) -> bool:
        s = _PStep(self.state)
        path, i, cut = s.walk(ids, len(ids))
        covered = i + (cut[1] if cut else 0)
        need = len(ids) - covered
        if need > self.capacity - covered:
            return False
        if cut is not None:
            path.append(s.split(*cut))
        if need:
            keep = set(path)
            while self.capacity - s.used < need:
                victim = next(k for k in s.victims if k[1] not in keep)
                n = s.nodes[victim[1]]
                s.put(n, None)
                parent = s.nodes[n.parent]
                s.put(parent, parent.with_(children=parent.children.delete(n.key[0])))
                s.used -= len(n.key)
        for nid in path:
            s.stamp(nid)
        if need:
            parent = path[-1] if path else 0
            s.clock += 1
            leaf = _PNode(tuple(ids[covered:]), parent, immutables.Map(), s.clock, 0, s.next_id)
            s.next_id += 1
            p = s.nodes[parent]
            s.put(p, p.with_(children=p.children.set(ids[covered], leaf.nid)))
            s.put(None, leaf)
            s.used += need
        self.state = s.finish()
        return True

    def release(self, node: int) -> None:
        s = _PStep(self.state)
        s.lock(node, -1)
        self.state = s.finish()


def persistent_radix(traces: list[tuple[int, ...]], capacity: int) -> tuple[float, float, float]:
    w0, c0 = _clocks()
    cache = PersistentRadixCache(capacity)
    hit = total = 0
    for ids in traces:
        node, k = cache.match(ids)
        hit += k
        total += len(ids)
        cache.insert(ids)
        cache.release(node)
    w1, c1 = _clocks()
    return w1 - w0, c1 - c0, hit / total


def reference_sim(capacity: int, log: bool) -> tuple[float, float, float]:
    """The simulator's loop alone, as `simulate` runs it (workload parsed beforehand)."""
    opts = SimOptions(workload="synthetic", tiers="l1", ranks=1, eviction="lru", l1_pages=capacity)
    sim = Simulation(prepare(opts), opts.timing, opts.seed)
    with tempfile.TemporaryDirectory() as d:
        if log:
            header = Header(config=sim.cfg, seed=opts.seed, source="sim", initial_digest=sim.cluster.state.digest(), extra={})
            with LogWriter(Path(d) / "ref.jsonl", header) as w:
                sim.writer = w
                w0, c0 = _clocks()
                sim.run()
                w1, c1 = _clocks()
        else:
            w0, c0 = _clocks()
            sim.run()
            w1, c1 = _clocks()
    m = sim.metrics
    return w1 - w0, c1 - c0, (m.pages_hit_l1 + m.pages_hit_l2) / m.pages_total


# The full run's baseline: the code before `--replicas` (every replica runs every step)
BASELINE = "1956e94"
LEVELS = ("every", "agreement", "off")
ROOT = Path(__file__).resolve().parent.parent
# what a full run's process runs: the default 4-rank L1/L2 run of the first N requests of
# the bundled trace (all with N = 0), timed around `simulate` (trace parsed, no log)
_CHILD = """
import json, sys, time
from kvsm.sim import SimOptions, simulate
n, level = int(sys.argv[1]), sys.argv[2]
extra = {} if level == "baseline" else {"replicas": level}
opts = SimOptions(workload="synthetic", tiers="l1,l2", ranks=4, requests=n or None, **extra)
w0, c0 = time.perf_counter(), time.process_time()
s = simulate(opts).summary
w1, c1 = time.perf_counter(), time.process_time()
print(json.dumps({"s": w1 - w0, "cpu_s": c1 - c0, "requests": s["requests"], "transitions": s["transitions"],
                  "final_digest": s["final_digest"], "hit_rate": s["hit_rate_blocks"]}))
"""


def _child(path: Path, requests: int, level: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(path))
    p = subprocess.run([sys.executable, "-c", _CHILD, str(requests), level], env=env, capture_output=True, text=True, cwd=path)
    if p.returncode != 0:
        raise SystemExit(f"the full run ({level}, kvsm at {path}) failed: {p.stderr.strip().splitlines()[-1:]}")
    return json.loads(p.stdout)


def full_runs(requests: int, baseline: str = BASELINE, repeat: int = 1) -> dict:
    """The default 4-rank L1/L2 run of the bundled trace (its first `requests`; 0: all) at
    each `--replicas` level, and the same run of the code at commit `baseline` (exported
    with `git archive` into a temporary directory), each in a process of its own, in turn,
    `repeat` rounds of them (the fastest wall and the fastest CPU time of each count, as
    for the single-tier runs: a load that changes during a round moves one round's
    ratios). Returns, per run, wall and CPU seconds and requests per second, and per level
    the ratios baseline / level. Every run must end at the baseline's final digest (the
    log is the same at every level)."""
    out: dict = {"full_requests": requests or "all", "full_baseline_commit": baseline, "full_rounds": repeat}
    with tempfile.TemporaryDirectory() as d:
        old = Path(d)
        try:
            tar = subprocess.run(["git", "-C", str(ROOT), "archive", baseline, "kvsm"], capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", str(old)], input=tar, check=True)
        except (subprocess.CalledProcessError, OSError) as e:
            raise SystemExit(f"the full run's baseline: cannot export kvsm at commit {baseline} from {ROOT} ({e})") from None
        runs: dict[str, dict] = {}
        for _ in range(repeat):
            for name in ("baseline", *LEVELS):
                r = _child(old if name == "baseline" else ROOT, requests, name)
                best = runs.setdefault(name, r)
                best["s"], best["cpu_s"] = min(best["s"], r["s"]), min(best["cpu_s"], r["cpu_s"])
                if r["final_digest"] != best["final_digest"]:
                    raise SystemExit(f"the full run at {name} ends elsewhere from one round to the next: {r} != {best}")
    base = runs["baseline"]
    for name, r in runs.items():
        if r["final_digest"] != base["final_digest"] or r["transitions"] != base["transitions"]:
            raise SystemExit(f"the full run at {name} ends elsewhere than the baseline: {r} != {base}")
        out[f"full_{name}_s"] = round(r["s"], 2)
        out[f"full_{name}_cpu_s"] = round(r["cpu_s"], 2)
        out[f"full_{name}_requests_per_s"] = round(r["requests"] / r["s"], 1)
        if name != "baseline":
            out[f"full_{name}_speedup"] = round(base["s"] / r["s"], 2)
            out[f"full_{name}_speedup_cpu"] = round(base["cpu_s"] / r["cpu_s"], 2)
    out["full_run_requests"] = base["requests"]
    out["full_run_transitions"] = base["transitions"]
    out["full_run_hit_rate"] = base["hit_rate"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--capacity", type=int, default=19531, help="pages (512-token blocks); 19531 = 10M tokens")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--log", action="store_true", help="the simulator also writes its transition log")
    ap.add_argument("--full", action="store_true", help="also time a full --tiers l1,l2 --ranks 4 run of the trace at each --replicas level against the baseline commit")
    ap.add_argument("--full-requests", type=int, default=0, help="with --full: the first N requests only (default: all)")
    ap.add_argument("--full-repeat", type=int, default=3, help="with --full: rounds of the runs, in turns; the fastest counts (default 3: one round's ratios move by a fifth with the machine's load)")
    ap.add_argument("--full-l3", action="store_true", help="also time a full --tiers l1,l2,l3 --ranks 4 run of the trace")
    a = ap.parse_args()
    for name in ("repeat", "full_repeat"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(a, name)}")
    traces = [r.hash_ids for r in load_workload("synthetic").requests]
    sim_runs, radix_runs, lru_runs, floor_runs = [], [], [], []
    for _ in range(a.repeat):
        sim_runs.append(reference_sim(a.capacity, a.log))
        radix_runs.append(radix_cache(traces, a.capacity))
        lru_runs.append(block_lru(traces, a.capacity))
        floor_runs.append(persistent_radix(traces, a.capacity))
    sim_s, radix_s, lru_s, floor_s = (min(r[0] for r in runs) for runs in (sim_runs, radix_runs, lru_runs, floor_runs))
    sim_cpu, radix_cpu, lru_cpu, floor_cpu = (min(r[1] for r in runs) for runs in (sim_runs, radix_runs, lru_runs, floor_runs))
    out = {
        "sim_s": round(sim_s, 4),
        "radix_s": round(radix_s, 4),
        "lru_s": round(lru_s, 4),
        "ratio_radix": round(sim_s / radix_s, 1),
        "ratio": round(sim_s / lru_s, 1),
        # CPU time of this process: steadier than wall time on a shared machine
        "sim_cpu_s": round(sim_cpu, 4),
        "radix_cpu_s": round(radix_cpu, 4),
        "lru_cpu_s": round(lru_cpu, 4),
        "ratio_radix_cpu": round(sim_cpu / radix_cpu, 1),
        "ratio_cpu": round(sim_cpu / lru_cpu, 1),
        # the persistent radix cache: what keeping every state as a value costs by itself
        "floor_cpu_s": round(floor_cpu, 4),
        "ratio_floor_radix_cpu": round(floor_cpu / radix_cpu, 1),
        "ratio_sim_floor_cpu": round(sim_cpu / floor_cpu, 1),
        "capacity_pages": a.capacity,
        "hit_rate_sim": round(sim_runs[0][2], 6),
        "hit_rate_radix": round(radix_runs[0][2], 6),
        "hit_rate_lru": round(lru_runs[0][2], 6),
        "hit_rate_floor": round(floor_runs[0][2], 6),
        "requests": len(traces),
        "log": a.log,
    }
    if a.full:
        out.update(full_runs(a.full_requests, repeat=a.full_repeat))
    if a.full_l3:
        t0 = time.perf_counter()
        c0 = time.process_time()
        s = simulate(SimOptions(workload="synthetic", tiers="l1,l2,l3", ranks=4)).summary
        out["full_l3_run_s"] = round(time.perf_counter() - t0, 2)
        out["full_l3_run_cpu_s"] = round(time.process_time() - c0, 2)
        out["full_l3_run_transitions"] = s["transitions"]
        out["full_l3_run_hit_rate"] = s["hit_rate_blocks"]
        out["full_l3_run_hits_per_tier"] = {t: s[f"pages_hit_{t}"] for t in ("l1", "l2", "l3")}
    if a.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:>22}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
