"""SGLang 0.5.20's `HiRadixCache`, run on the CPU and held against the model step by step
(docs/realimpl.md).

`RealCache` builds the real cache (SGLang's device pool and paged allocator, its host
pool, its `HiCacheController`, the transfer path and its all-reduces; the CPU stand-ins
are in `kvsm.realimpl.cpu`) and records what it does by wrapping its methods on the
instance. `run` drives it request by request the way SGLang's scheduler does
(`match_prefix`, `init_load_back` and `loading_check`, `inc_lock_ref`, `evict` when the
allocator is short, `insert`, `dec_lock_ref`, `writing_check`), turns the recorded
events of each call into the model transitions they imply, applies those to the model,
and after the transitions of each real call compares a projection of the real tree with the model's.
A transition the model refuses, or a projection that differs, is a divergence: it names
the step, the real event and the field, and the run stops there (the two sides are no
longer the same cache).

Page symbols become tokens: the `d`-th distinct symbol of the workload (first seen
first) is page `d`, tokens `d*P .. d*P+P-1`, so a shared prefix of pages is a shared
prefix of tokens and a page's symbol is read back from its first token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..config import Config
from ..state import ROOT_ID, ClusterState, Rejected, initial_state
from ..transitions import Transition, apply

T = Transition.make


@dataclass(frozen=True)
class Divergence:
    """Where the real cache and the model part: the log step (the transition index the
    divergence is found at: the refused transition's, or the last one applied), the
    request, the real event, the field, and both sides' values."""

    step: int
    request: int | None
    event: str
    field: str
    real: Any
    model: Any
    events: tuple[str, ...] = ()  # the real events of the request, up to the divergence
    kind: str = "untriaged"  # a kind docs/realimpl.md triages, or "untriaged"

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "request": self.request, "event": self.event, "field": self.field,
                "real": self.real, "model": self.model, "kind": self.kind, "events": list(self.events)}

    def __str__(self) -> str:
        return (f"step {self.step} (request {self.request}), real event {self.event}: "
                f"{self.field} differs: real {self.real!r}, model {self.model!r}")


# ---- the real cache ----------------------------------------------------------------------------


class RealCache:
    """One real `HiRadixCache` with `l1_pages` device pages of `P` tokens (write-through),
    its host pool `l2_ratio` times the device pool, and an event recorder."""

    def __init__(self, P: int, l1_pages: int, l2_ratio: float, load_back_threshold: int) -> None:
        from . import cpu  # noqa: PLC0415  (imports SGLang: only when a real cache is built)

        sg = cpu.load()
        self.sg = sg
        torch = sg.torch
        sg.clock.reset()
        sg.rc.TreeNode.counter = 0
        sg.runtime.hicache_ratio = l2_ratio
        sg.runtime.hicache_write_policy = "write_through"
        self.P = P
        tokens = l1_pages * P
        self.kv = sg.MHATokenToKVPool(size=tokens, page_size=P, dtype=torch.float16, head_num=1, head_dim=4,
                                      layer_num=1, device="cpu", enable_memory_saver=False, enable_alt_stream=False)
        self.alloc = sg.PagedTokenToKVPoolAllocator(size=tokens, page_size=P, dtype=torch.float16, device="cpu",
                                                    kvcache=self.kv, need_sort=False)
        init = sg.CacheInitParams(disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=self.alloc,
                                  page_size=P, tp_cache_group=sg.group, eviction_policy="lru")
        self.cache = sg.hr.HiRadixCache(init, server_args=None)
        self.cache.load_back_threshold = load_back_threshold
        self.host = self.cache.token_to_kv_pool_host
        self.l1_pages = self.alloc.available_size() // P
        self.l2_pages = self.host.available_size() // P
        self.events: list[dict[str, Any]] = []
        self._host_owner: dict[int, Any] | None = None  # during evict_host: host_value's id -> node
        self._host_order: list[tuple[int, ...]] = []
        self._wrap()

    # -- recording -------------------------------------------------------------------------
    def _record(self, name: str, describe: Callable[..., dict[str, Any] | None], before: Callable[..., Any] | None = None) -> None:
        original = getattr(self.cache, name)
        events = self.events

        def wrapped(*a: Any, **k: Any) -> Any:
            pre = before(*a, **k) if before is not None else None
            r = original(*a, **k)
            ev = describe(r, pre, *a, **k)
            if ev is not None:
                events.append({"ev": name, **ev})
            return r

        setattr(self.cache, name, wrapped)

    def _wrap(self) -> None:
        path = self.path
        c = self.cache
        self._record("match_prefix", lambda r, _, p: {"device": len(r.device_indices) // self.P,
                                                      "host": r.host_hit_length // self.P,
                                                      "last": path(r.last_device_node)})
        self._record("_split_node", lambda r, _, key, child, at: {"upper": path(r), "at": at // self.P})
        self._record("insert", lambda r, _, p: {"prefix": r.prefix_len // self.P})
        self._record("write_backup", lambda r, _, node, write_back=False: {"node": path(node), "pages": r // self.P})
        self._record("_finish_write_through_ack", lambda r, pre, ack_id, release_lock: {"node": pre},
                     before=lambda ack_id, release_lock: path(c.ongoing_write_through[ack_id][0]))
        self._record("_evict_backuped", lambda r, pre, node: {"node": pre}, before=lambda node: path(node))
        self._record("_evict_regular", lambda r, pre, node: {"node": pre}, before=lambda node: path(node))
        self._record("evict_host", lambda r, pre, n: {"removed": self._host_removed()}, before=lambda n: self._host_watch())
        controller = c.cache_controller
        free_host = controller.evict_host

        def evict_host_pages(host_value: Any, *a: Any, **k: Any) -> Any:
            node = self._host_owner.get(id(host_value)) if self._host_owner is not None else None
            if node is not None:
                self._host_order.append(path(node))
            return free_host(host_value, *a, **k)

        controller.evict_host = evict_host_pages
        self._record("load_back", lambda r, pre, node, mem_quota=None: {"node": pre, "pages": 0 if r is None else len(r) // self.P},
                     before=lambda node, mem_quota=None: path(node))
        self._record("loading_check", lambda r, pre, finish_count=None: {"done": pre - len(c.cache_controller.ack_load_queue)},
                     before=lambda finish_count=None: len(c.cache_controller.ack_load_queue))
        self._record("writing_check", lambda r, pre, write_back=False, finish_count=None:
                     {"done": pre - len(c.cache_controller.ack_write_queue)},
                     before=lambda write_back=False, finish_count=None: len(c.cache_controller.ack_write_queue))

    def _host_watch(self) -> None:
        """Before `evict_host`: which node holds each host copy, so that the pages it
        frees name their node, in the order it frees them."""
        self._host_owner = {id(n.host_value): n for n in self.nodes() if n.host_value is not None}
        self._host_order = []

    def _host_removed(self) -> list[tuple[int, ...]]:
        """After `evict_host`: the nodes it removed, in its order (each freed its host
        copy and left the tree)."""
        gone = self._host_order
        self._host_owner, self._host_order = None, []
        return gone

    def take(self) -> list[dict[str, Any]]:
        evs = list(self.events)
        self.events.clear()
        return evs

    # -- reading ---------------------------------------------------------------------------
    def path(self, node: Any) -> tuple[int, ...]:
        """A node's key from the root, one dense page index per page."""
        parts = []
        root = self.cache.root_node
        while node is not None and node is not root:
            ids = node.key.token_ids
            parts.append([int(ids[i]) // self.P for i in range(0, len(ids), self.P)])
            node = node.parent
        return tuple(x for part in reversed(parts) for x in part)

    def nodes(self) -> list[Any]:
        out, stack = [], [self.cache.root_node]
        while stack:
            n = stack.pop()
            out.append(n)
            stack.extend(n.children.values())
        return out

    def key(self, pages: list[int]) -> Any:
        from array import array  # noqa: PLC0415

        ids = array("q", (d * self.P + j for d in pages for j in range(self.P)))
        return self.sg.RadixKey(token_ids=ids)

    # -- the scheduler's calls ---------------------------------------------------------------
    def match(self, pages: list[int]) -> Any:
        """The scheduler's lookup: at most the prompt less one token, floored to a page."""
        return self.cache.match_prefix(self.sg.params.MatchPrefixParams(key=self.key(pages[:-1])))

    def load_back(self, m: Any) -> tuple[Any, Any]:
        """The scheduler's load-back of a host hit (`init_load_back`) and its copies
        started (`ready_to_load_host_cache`), then the request's lock on what it matched
        (`inc_lock_ref`). Returns the device indices of the whole match and the node the
        request locks."""
        torch = self.sg.torch
        dev, last = m.device_indices, m.last_device_node
        if m.host_hit_length > 0:
            loaded, last = self.cache.init_load_back(self.sg.params.InitLoadBackParams(
                best_match_node=m.best_match_node, mem_quota=None, host_hit_length=m.host_hit_length))
            dev = torch.cat([dev, loaded])
            self.cache.ready_to_load_host_cache()
        self.cache.inc_lock_ref(last)  # the request holds its prefix from its admission on
        return dev, last

    def insert(self, pages: list[int], dev: Any, last: Any) -> Any:
        """Allocate the rest of the prompt (evicting first when the allocator
        is short), fill it, insert the prompt, free what the tree already held. Returns
        the node whose lock the request holds, the prompt's last node."""
        torch = self.sg.torch
        need = len(pages) * self.P - len(dev)
        if self.alloc.available_size() < need:
            self.cache.evict(self.sg.params.EvictParams(num_tokens=need - self.alloc.available_size()))
        new = self.alloc.alloc(need)
        if new is None:
            self.cache.dec_lock_ref(last)
            return None
        self.kv.k_buffer[0][new] = torch.arange(len(new), dtype=torch.float16)[:, None, None]
        value = torch.cat([dev, new])
        r = self.cache.insert(self.sg.params.InsertParams(key=self.key(pages), value=value))
        if r.prefix_len > len(dev):
            self.alloc.free(new[: r.prefix_len - len(dev)])
        held = self.find(pages)
        self.cache.inc_lock_ref(held)  # the request's lock moves to its prompt's last node
        self.cache.dec_lock_ref(last)
        return held

    def find(self, pages: list[int]) -> Any:
        """The node whose key from the root is `pages`, read without touching the tree."""
        node, i = self.cache.root_node, 0
        while i < len(pages):
            child = None
            for c in node.children.values():
                if int(c.key.token_ids[0]) // self.P == pages[i]:
                    child = c
                    break
            assert child is not None, f"page {i} of the inserted key is not in the tree"
            node, i = child, i + len(child.key) // self.P
        return node

    def finish(self, last: Any) -> None:
        self.cache.dec_lock_ref(last)

    def check_events(self) -> None:
        """The scheduler's event check after a step: finished backups and loads."""
        self.cache.writing_check()
        self.cache.loading_check()

    # -- the projection ----------------------------------------------------------------------
    def projection(self) -> dict[tuple[int, ...], tuple[bool, bool, bool, int]]:
        """Per node (its key from the root): on device, backed (its copy committed), backup
        pending, lock count."""
        out = {}
        for n in self.nodes():
            if n is self.cache.root_node:
                continue
            pending = n.write_through_pending_id is not None
            out[self.path(n)] = (n.value is not None, n.host_value is not None and not pending, pending, n.lock_ref)
        return out

    def next_device_victim(self) -> tuple[int, ...] | None:
        """The leaf the cache's `evict` takes first now (least priority, unlocked)."""
        c = self.cache
        leaves = [n for n in c.evictable_leaves if n.lock_ref == 0]
        if not leaves:
            return None
        return self.path(min(leaves, key=lambda n: (c.eviction_strategy.get_priority(n), n.id)))


# ---- the model's side --------------------------------------------------------------------------


def show(pages: Any) -> str:
    """A key for a message: its pages, or its first and last pages and its length."""
    pages = list(pages)
    if len(pages) <= 4:
        return str(pages)
    return f"[{pages[0]}..{pages[-1]}] ({len(pages)} pages)"


def show_event(ev: dict[str, Any], sym: Callable[[tuple[int, ...]], tuple[int, ...]]) -> str:
    args = []
    for k, v in ev.items():
        if k == "ev":
            continue
        if k in ("node", "last", "upper"):
            v = show(sym(tuple(v)))
        elif k == "removed":
            v = "[" + ", ".join(show(sym(tuple(x))) for x in v) + "]"
        args.append(f"{k}={v}")
    return f"{ev['ev']}({', '.join(args)})"


def model_path(s: ClusterState, nid: int) -> tuple[int, ...]:
    parts = []
    while nid != ROOT_ID:
        n = s.nodes[nid]
        parts.append(n.key)
        nid = n.parent
    return tuple(x for part in reversed(parts) for x in part)


def model_node(s: ClusterState, path: tuple[int, ...]) -> int | None:
    """The model node whose key from the root is `path`, or None."""
    nid, i = ROOT_ID, 0
    while i < len(path):
        child = s.nodes[nid].children.get(path[i])
        if child is None:
            return None
        key = s.nodes[child].key
        if tuple(path[i:i + len(key)]) != key:
            return None
        nid, i = child, i + len(key)
    return nid


def model_projection(s: ClusterState, sym_index: Callable[[int], int]) -> dict[tuple[int, ...], tuple[bool, bool, bool, int]]:
    # A pending backup locks its node alone in the model and its whole path in SGLang
    # (`inc_lock_ref` walks to the root): an ancestor's count there includes one per
    # pending backup below it. Either way the ancestor is no victim (it has a child on
    # the device), so the projection counts the model's locks as SGLang does.
    below: dict[int, int] = {}
    for nid in s.pending:
        for anc in s.path_to_root(nid)[1:]:
            below[anc] = below.get(anc, 0) + 1
    out = {}
    for nid, n in s.nodes.items():
        if nid == ROOT_ID:
            continue
        path = tuple(sym_index(x) for x in model_path(s, nid))
        out[path] = (bool(n.dev), n.host is not None, nid in s.pending, n.lock + below.get(nid, 0))
    return out


def model_next_victim(s: ClusterState, sym_index: Callable[[int], int]) -> tuple[int, ...] | None:
    for key in s.dev_index:
        return tuple(sym_index(x) for x in model_path(s, key[2]))
    return None


# ---- lockstep ----------------------------------------------------------------------------------


class Stop(Exception):
    """The run met a divergence."""


@dataclass
class Result:
    config: Config
    requests: int = 0
    transitions: list[tuple[Transition, ClusterState]] = field(default_factory=list)
    divergences: list[Divergence] = field(default_factory=list)
    events: dict[str, int] = field(default_factory=dict)
    uncached: int = 0


class Lockstep:
    """The model driven by the transitions the real events imply, compared after each real call."""

    def __init__(self, real: RealCache, cfg: Config, symbols: list[int]) -> None:
        self.real = real
        self.state = initial_state(cfg)
        self.symbols = symbols  # dense page index -> page symbol
        self.index = {s: i for i, s in enumerate(symbols)}
        self.result = Result(config=cfg)
        self.rid: int | None = None
        self.seen: list[dict[str, Any]] = []  # the real events of the request being run
        self.reserve_removed: set[tuple[int, ...]] = set()  # host leaves the model's Reserve evicted, this request

    def sym(self, path: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(self.symbols[d] for d in path)

    def node_id(self, path: tuple[int, ...], event: str) -> int:
        nid = model_node(self.state, self.sym(path))
        if nid is None:
            self.diverge(event, "node", show(self.sym(path)), "absent")
        return nid  # type: ignore[return-value]

    def diverge(self, event: str, fieldname: str, real: Any, model: Any, step: int | None = None, kind: str = "untriaged") -> None:
        evs = tuple(show_event(e, self.sym) for e in self.seen)
        at = len(self.result.transitions) if step is None else step
        self.result.divergences.append(Divergence(at, self.rid, event, fieldname, real, model, evs, kind))
        raise Stop

    def step(self, t: Transition, event: str) -> None:
        try:
            nxt = apply(self.state, t)
        except Rejected as e:
            self.diverge(event, "guard", str(t), f"refused: {e}", step=len(self.result.transitions) + 1)
        if t.name == "Reserve":
            for nid in set(self.state.nodes.keys()) - set(nxt.nodes.keys()):
                self.reserve_removed.add(tuple(self.index[x] for x in model_path(self.state, nid)))
        self.state = nxt
        self.result.transitions.append((t, nxt))

    def compare(self, event: str) -> None:
        real = self.real.projection()
        model = model_projection(self.state, self.index.__getitem__)
        if real != model:
            keys = sorted(set(real) | set(model))
            for k in keys:
                if real.get(k) != model.get(k):
                    r, m = real.get(k), model.get(k)
                    names = ("on_device", "backed", "write_pending", "lock")
                    if r is None or m is None:
                        # a host leaf the model's evict-to-fit took (no contiguous run for a
                        # backup) while the real pool placed it in scattered free pages
                        kind = "host-contiguous" if m is None and k in self.reserve_removed else "untriaged"
                        self.diverge(event, f"node {show(self.sym(k))}", "present" if r else "absent", "present" if m else "absent",
                                     kind=kind)
                    i = next(j for j in range(4) if r[j] != m[j])  # type: ignore[index]
                    self.diverge(event, f"{names[i]} of node {show(self.sym(k))}", r[i], m[i])  # type: ignore[index]
        rv, mv = self.real.next_device_victim(), model_next_victim(self.state, self.index.__getitem__)
        if rv != mv:
            self.diverge(event, "next device victim", None if rv is None else show(self.sym(rv)),
                         None if mv is None else show(self.sym(mv)))

    def take(self) -> list[dict[str, Any]]:
        evs = self.real.take()
        self.seen.extend(evs)
        counts = self.result.events
        for e in evs:
            name = e["ev"]
            if name == "write_backup" and not e["pages"]:
                name = "write_backup (skipped)"  # its parent not backed, or no host room
            elif name == "load_back" and not e["pages"]:
                name = "load_back (declined)"
            counts[name] = counts.get(name, 0) + 1
        return evs

    # -- events to transitions -----------------------------------------------------------------
    def evictions(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Apply the device and host evictions among `events`, in their order; return the
        other events."""
        rest = []
        for ev in events:
            if ev["ev"] in ("_evict_backuped", "_evict_regular"):
                self.step(T("EvictDevice", node=self.node_id(ev["node"], ev["ev"])), f"{ev['ev']}({show(self.sym(ev['node']))})")
            elif ev["ev"] == "evict_host":
                for path in ev["removed"]:
                    # host victims leave the tree: their ids are read before each step
                    self.step(T("EvictHost", node=self.node_id(tuple(path), "evict_host")), f"evict_host({show(self.sym(tuple(path)))})")
            else:
                rest.append(ev)
        return rest

    def request(self, rid: int, pages: list[int]) -> None:
        real = self.real
        self.rid = rid
        self.seen = []
        self.reserve_removed = set()
        syms = [self.symbols[d] for d in pages]
        self.step(T("Arrive", rid=rid, tokens=syms, out_pages=0), "arrival")
        m = real.match(pages)
        self.take()
        self.step(T("Match", rid=rid), "match_prefix")
        dev, last = real.load_back(m)
        evs = self.evictions(self.take())
        if any(e["ev"] == "load_back" and e["pages"] for e in evs):
            self.step(T("LoadBack", rid=rid), "load_back")
        self.compare("load_back")
        real.cache.loading_check()
        for ev in self.take():
            if ev["ev"] == "loading_check":
                for _ in range(ev["done"]):
                    self.step(T("LoadDone", rank=0), "loading_check")
        self.compare("loading_check")
        held = real.insert(pages, dev, last)
        if held is None:
            self.result.uncached += 1
            self.evictions(self.take())
            self.step(T("Abort", rid=rid), "insert: no device room")
            self.compare("insert: no device room")
            self.result.requests += 1
            return
        evs = self.take()
        # the evictions of `evict` come before the insert; inside it, host evictions (a
        # backup making room) and backups, in the order they happened
        self.evictions([e for e in evs if e["ev"] in ("_evict_backuped", "_evict_regular")])
        self.step(T("Insert", rid=rid), "insert")
        for ev in evs:
            if ev["ev"] == "evict_host":
                self.evictions([ev])
            elif ev["ev"] == "write_backup" and ev["pages"]:
                self.step(T("Reserve", node=self.node_id(ev["node"], "write_backup"), fits=True), f"write_backup({show(self.sym(ev['node']))})")
        self.compare("insert")
        real.finish(held)
        self.step(T("Finish", rid=rid), "cache_finished_req")
        self.compare("cache_finished_req")
        real.check_events()
        for ev in self.take():
            if ev["ev"] == "writing_check" and ev["done"]:
                for _ in range(ev["done"]):
                    self.step(T("WriteDone", rank=0), "writing_check")
                self.step(T("CommitCall", rank=0), "writing_check")
                self.step(T("Commit"), "writing_check")
            elif ev["ev"] == "loading_check" and ev["done"]:
                for _ in range(ev["done"]):
                    self.step(T("LoadDone", rank=0), "loading_check")
        self.compare("writing_check")
        self.result.requests += 1



# ---- a run -------------------------------------------------------------------------------------


def dense_pages(requests: list[tuple[int, ...]]) -> tuple[list[int], list[list[int]]]:
    """The workload's page symbols in first-seen order, and each request as indices into
    them."""
    symbols: list[int] = []
    index: dict[int, int] = {}
    out = []
    for syms in requests:
        row = []
        for s in syms:
            if s not in index:
                index[s] = len(symbols)
                symbols.append(s)
            row.append(index[s])
        out.append(row)
    return symbols, out


def run(cfg: Config, requests: list[tuple[int, ...]], tamper: Callable[[RealCache], None] | None = None) -> Result:
    """Drive a new real cache with `requests` (page symbols each) in lockstep with the
    model under `cfg` (R = 1; its L1 and L2 size the real pools). Stops at the first
    divergence; the result holds the transitions applied up to it. `tamper(real)` runs
    on the real cache once it is built (tests change it there to see a divergence)."""
    if cfg.R != 1:
        raise ValueError(f"config '{cfg.name}': R = {cfg.R}; SGLang's HiRadixCache is one rank (R = 1)")
    if cfg.L2 < 2:
        raise ValueError(f"config '{cfg.name}': L2 = {cfg.L2}; the real host pool needs at least 2 pages")
    real = RealCache(cfg.P, cfg.L1, (cfg.L2 - 1) / cfg.L1, cfg.load_back_threshold)
    if (real.l1_pages, real.l2_pages) != (cfg.L1, cfg.L2):
        raise ValueError(f"config '{cfg.name}': the real pools have {real.l1_pages} device and {real.l2_pages} host pages, "
                         f"not the config's L1 = {cfg.L1} and L2 = {cfg.L2}")
    if tamper is not None:
        tamper(real)
    symbols, rows = dense_pages(requests)
    ls = Lockstep(real, cfg, symbols)
    try:
        for rid, pages in enumerate(rows):
            ls.request(rid, pages)
    except Stop:
        pass
    return ls.result


def write_log(result: Result, path: Any, extra: dict[str, Any]) -> Any:
    """Write the run's transitions as a kvsm log (atomically; `kvsm.log.LogWriter`)."""
    from ..log import Header, LogWriter  # noqa: PLC0415

    cfg = result.config
    header = Header(config=cfg, seed=None, source="realimpl", initial_digest=initial_state(cfg).digest(),
                    extra={"implementation": IMPLEMENTATION, **extra})
    with LogWriter(path, header) as lw:
        for t, s in result.transitions:
            lw.write(t, s)
    return path


IMPLEMENTATION = "sglang 0.5.20 HiRadixCache (CPU)"
