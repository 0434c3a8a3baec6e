"""A cluster state as a list of sections of labelled items (kvsm.render.items): what the
text, the diff and the HTML viewer all print.

The view reads the state's fields by name and never trusts them to be consistent: a
state that violates an invariant (a missing parent, a page held twice, a page holding
the wrong content) is exactly what a person needs to see, so nothing here may fail on
one. Content identities (64-bit hashes) are printed as the prefix of page symbols they
stand for, where `Names` knows it.
"""

from __future__ import annotations

from typing import Any

from ..state import GONE, ROOT_ID, ClusterState, Node, Round
from .items import SECTIONS, Field, Item, Section, View
from .names import Names, clip, host_range, names_of, node_label, page, page_list, ranges, symbols

__all__ = ["SECTIONS", "Field", "Item", "Names", "Section", "View", "build"]


def _node_item(s: ClusterState, n: Node, parent: str | None, memo: dict) -> Item:
    pend = s.pending.get(n.id)
    obj = s.objects.get(n.host if n.host is not None else (pend.obj if pend is not None else None))
    hit = memo.get(("node", id(n)))
    if hit is not None and hit[0] is n and hit[1] is pend and hit[2] is obj and hit[3] == parent:
        return hit[4]
    item = _node_item_of(s, n, parent)
    memo[("node", id(n))] = (n, pend, obj, parent, item)
    return item


def _node_item_of(s: ClusterState, n: Node, parent: str | None) -> Item:
    R = s.config.R
    pend = s.pending.get(n.id)
    l2 = "-"
    if n.host is not None:
        obj = s.objects.get(n.host)
        where = "" if n.host == n.id else f"obj {node_label(n.host)} "
        l2 = f"{where}missing" if obj is None else where + host_range(obj.base, obj.length) + ("" if obj.committed else " uncommitted")
    elif pend is not None:
        obj = s.objects.get(pend.obj)
        rng = "missing" if obj is None else host_range(obj.base, obj.length)
        l2 = f"{rng} writing" + ("" if pend.locked else ", unlocked")
    if n.id == ROOT_ID:
        key = "root"
    else:
        key = symbols(n.key) if n.key else "[]"
    return Item(
        f"node {n.id}",
        node_label(n.id),
        (
            Field("key", key, kind="bare"),
            Field("parent", node_label(n.parent), kind="hidden"),
            Field("L1", page_list(n.dev, R), "-"),
            Field("L2", l2, "-"),
            Field("durable", "yes" if n.durable else "", "", "flag"),
            Field("pinned", str(n.pin), "0"),
            Field("lock", str(n.lock), "0"),
            Field("hits", str(n.hits), "0"),
            Field("touched", str(n.touched), "0"),
            Field("namespace", str(n.ns), "0"),
        ),
        parent,
        (n.key[0] if n.key else -1, n.id),
    )


def _tree(s: ClusterState, memo: dict) -> Section:
    # the section reads only these values: a step that changed none of them (most steps
    # of a run) has the previous state's section
    key = (s.nodes, s.pending, s.objects, s.config)
    hit = memo.get("tree")
    if hit is not None and all(a is b for a, b in zip(hit[0], key)):
        return hit[1]
    sec = _tree_of(s, memo)
    memo["tree"] = (key, sec)
    return sec


def _tree_of(s: ClusterState, memo: dict) -> Section:
    nodes = s.nodes
    kids: dict[int, list[Node]] = {}
    for n in nodes.values():
        if n.id != ROOT_ID:
            kids.setdefault(n.parent, []).append(n)
    for lst in kids.values():
        lst.sort(key=lambda c: (c.key[0] if c.key else -1, c.id))
    items: list[Item] = []
    seen: set[int] = set()

    def visit(n: Node, parent: str | None) -> None:
        # iterative: a sim's tree can be deeper than Python's recursion limit
        stack = [(n, parent)]
        while stack:
            cur, par = stack.pop()
            if cur.id in seen:
                continue
            seen.add(cur.id)
            items.append(_node_item(s, cur, par, memo))
            for c in reversed(kids.get(cur.id, [])):
                stack.append((c, f"node {cur.id}"))

    root = nodes.get(ROOT_ID)
    if root is not None:
        visit(root, None)
    # husks (unbacked_evict = "reference"), each with its orphans below it
    for nid in sorted(nodes.keys()):
        n = nodes[nid]
        if n.parent == GONE and nid not in seen:
            at = len(items)
            visit(n, None)
            it = items[at]
            items[at] = Item(it.key, it.label, it.fields + (Field("husk", "left the tree: no match reaches it or the orphans below"),), None)
    # nodes whose parent chain does not reach the root (only in a broken state)
    for nid in sorted(nodes.keys()):
        if nid not in seen:
            n = nodes[nid]
            at = len(items)
            visit(n, None)
            it = items[at]
            items[at] = Item(it.key, it.label, it.fields + (Field("unreachable from the root, parent", node_label(n.parent)),), None)
    return Section("tree", "tree", tuple(items))


def _lanes(s: ClusterState, memo: dict) -> Section:
    cfg = s.config
    items = []
    for lane, free in enumerate(s.dev_free):
        hit = memo.get(("lane", lane))
        if hit is not None and hit[0] is free:
            items.append(hit[1])
            continue
        free_pages = sorted(free)
        item = Item(
            f"lane {lane}",
            f"r{lane}",  # the rank's lane (`l0` would read as a tier)
            (Field("used", f"{cfg.L1 - len(free_pages)}/{cfg.L1}"), Field("free", ranges(free_pages, cfg.R, "p"), "-")),
            order=(lane,),
        )
        memo[("lane", lane)] = (free, item)
        items.append(item)
    return Section("lanes", "lanes", tuple(items))


def _host(s: ClusterState) -> Section:
    L2 = s.config.L2
    runs = sorted(s.l2_free[0]) if s.l2_free else []
    free = sum(n for _, n in runs)
    text = clip([host_range(b, n) for b, n in runs]) or "-"
    fields = [Field("used", f"{L2 - free}/{L2}"), Field("free", text, "-")]
    # payload regions are allocated in lockstep: one that differs is worth seeing
    for i, r in enumerate(s.l2_free[1:], start=1):
        if sorted(r) != runs:
            other = clip([host_range(b, n) for b, n in sorted(r)]) or "-"
            fields.append(Field(f"free in {s.config.payloads[i]}", other, "-"))
    return Section("host", "host", (Item("host", "", tuple(fields)),))


def _writes(s: ClusterState, memo: dict) -> Section:
    key = (s.writes, s.write_done, s.acked, s.commit_round, s.objects, s.config)  # what it reads
    hit = memo.get("writes")
    if hit is not None and all(a is b for a, b in zip(hit[0], key)):
        return hit[1]
    sec = _writes_of(s)
    memo["writes"] = (key, sec)
    return sec


def _writes_of(s: ClusterState) -> Section:
    R = s.config.R
    # the open round of the commit collective: who has entered its call, who returned early
    entered = " ".join(f"r{r}" for r, c in enumerate(s.commit_round) if c == Round.IN) or "-"
    early = " ".join(f"r{r}" for r, c in enumerate(s.commit_round) if c == Round.SKIPPED) or "-"
    # under ack_append = "reference" (or "lockstep") a rank's ack is appended before its copy ends
    acks = tuple(Field(f"r{r} acked", str(a)) for r, a in enumerate(s.acked)) if s.config.ack_append != "fixed" else ()
    items = [Item("writes", "", tuple(Field(f"r{r} done", str(d)) for r, d in enumerate(s.write_done)) + acks
                  + (Field("in the commit call", entered, "-"), Field("returned early", early, "-")))]
    for i, nid in enumerate(s.writes):
        obj = s.objects.get(nid)
        by = [f"r{r}" for r in range(R) if s.write_done[r] > i]
        items.append(
            Item(
                f"write {nid}",
                node_label(nid),
                (
                    Field("L2", "missing" if obj is None else host_range(obj.base, obj.length), kind="bare"),
                    Field("done by", " ".join(by) if by else "-", "-"),
                ),
                order=(i,),
            )
        )
    return Section("writes", "writes", tuple(items))


def _loads(s: ClusterState) -> Section:
    """Load-backs in flight, oldest first: each copy `pN(lK)←hM` (host page M into device
    page N, copied by rank K) and each rank's progress."""
    R = s.config.R
    items = []
    for i, op in enumerate(s.loads):
        fields = [Field("copies", clip([f"{page(p, R)}←h{h}" for p, h in op.pages]) or "-", kind="bare")]
        for r in range(R):
            fields.append(Field(f"r{r}", "done" if s.load_done[r] > i else "-"))
        key = f"load {op.node} {op.pages[0][0] if op.pages else ''}"
        items.append(Item(key, node_label(op.node), tuple(fields), order=(i,)))
    return Section("loads", "loads", tuple(items))


def _disks(s: ClusterState, names: Names) -> Section:
    cfg = s.config
    held: dict[int, list[tuple[str, str]]] = {r: [] for r in range(cfg.R)}
    for (r, h), c in s.l3.items():
        text = names.show(h)
        if c != h:
            text += f"(holds {names.show(c)})"
        held.setdefault(r, []).append((text, f"{h:016x}"))
    items = [Item("disks", "", (Field("faults", str(s.disk_faults), "0"),))]
    for r in range(cfg.R):
        pages = [t for t, _ in sorted(held[r], key=lambda x: (len(x[0]), x))]
        ok = s.disk_ok[r] if r < len(s.disk_ok) else True
        items.append(
            Item(
                f"disk {r}",
                f"r{r}",
                (
                    Field("state", "up" if ok else "down", kind="bare"),
                    Field("used", f"{len(held[r])}/{cfg.L3}"),
                    Field("holds", clip(pages) or "-", "-"),
                ),
                order=(r,),
            )
        )
    return Section("disks", "disks", tuple(items))


def _spill_queue(s: ClusterState) -> Section:
    q = clip([node_label(n) for n in s.spill_queue]) or "-"
    return Section("spill-queue", "spill queue", (Item("spill queue", "", (Field("queue", q, kind="bare"),)),))


def _progress(gathered: bool, wrote: bool | None, verb: str) -> str:
    """A rank's progress on an op: `-`, `gathered`, then `written`/`read` or `failed`."""
    if wrote is not None:
        return verb if wrote else "failed"
    return "gathered" if gathered else "-"


def _spills(s: ClusterState, names: Names) -> Section:
    R = s.config.R
    items = []
    for i, op in enumerate(s.spills):
        fields = [
            Field("pages", names.show(op.hashes[-1]) if op.hashes else "[]", kind="bare"),
            Field("pinned", "yes" if op.pinned else "", "", "flag"),
        ]
        for r in range(R):
            done = s.spill_done[r]
            fields.append(Field(f"r{r}", _progress(s.spill_gathered[r] > i, done[i] if len(done) > i else None, "written")))
        label = node_label(op.node) + ("" if op.obj == op.node else f" obj {node_label(op.obj)}")
        items.append(Item(f"spill {op.obj}", label, tuple(fields), order=(i,)))
    return Section("spills", "spills", tuple(items))


def _candidates(s: ClusterState) -> Section:
    items = [
        Item(f"candidate {rid}", f"r{rid}", (Field("below", node_label(c.anchor)), Field("pages", symbols(c.tokens), kind="bare")), order=(rid,))
        for rid, c in sorted(s.reload_candidates.items())
    ]
    return Section("reload-candidates", "reload candidates", tuple(items))


def _reloads(s: ClusterState, names: Names) -> Section:
    R = s.config.R
    items = []
    for i, op in enumerate(s.reloads):
        obj = s.objects.get(op.obj)
        fields = [
            Field("below", node_label(op.anchor)),
            Field("into", "missing" if obj is None else host_range(obj.base, obj.length)),
            Field("waiters", " ".join(f"r{w}" for w in op.waiters) or "-"),
            Field("ttl", str(op.ttl)),
        ]
        for r in range(R):
            done = s.reload_done[r]
            fields.append(Field(f"r{r}", _progress(False, done[i] if len(done) > i else None, "read")))
        items.append(Item(f"reload {op.obj}", names.show(op.key), tuple(fields), order=(i,)))
    return Section("reloads", "reloads", tuple(items))


def _prepared(s: ClusterState, rid: int) -> str:
    """A request's prepared write-through backup: the node id taken for it, or that its
    reserve did not fit; "" when it has none."""
    if rid not in s.prepared:
        return ""
    nid = s.prepared[rid]
    return "prepared backup did not fit" if nid is None else f"prepared backup {node_label(nid)}"


def _hit(q: Any) -> str:
    """A request's carried host hit (carry_host_hit): its node, pages and pin."""
    if not q.hit:
        return "-"
    return f"{node_label(q.hit)} {q.hit_pages}p{' pinned' if q.hit_pin else ' unpinned'}"


def _requests(s: ClusterState, memo: dict) -> Section:
    held = {w for op in s.reloads for w in op.waiters}
    items = []
    for rid, q in sorted(s.requests.items()):
        # a request's item reads the request, whether a reload holds it and its prepared backup
        prep = s.prepared[rid] if rid in s.prepared else _NONE
        hit = memo.get(("request", rid))
        if hit is not None and hit[0] is q and hit[1] == (rid in held) and hit[2] == prep:
            items.append(hit[3])
            continue
        item = _request_item(s, rid, q, held)
        memo[("request", rid)] = (q, rid in held, prep, item)
        items.append(item)
    return Section("requests", "requests", tuple(items))


_NONE = object()  # no prepared backup (a prepared one may be None: it did not fit)


def _request_item(s: ClusterState, rid: int, q: Any, held: set[int]) -> Item:
    R = s.config.R
    return Item(
        f"request {rid}",
        f"r{rid}",
        (
            Field("phase", q.phase, kind="bare"),
            Field("tokens", symbols(q.tokens), kind="bare"),
            Field("out", str(q.out_pages), "0"),
            Field("at", node_label(q.node), node_label(ROOT_ID)),
            Field("holds", page_list(q.pages, R), "-"),
            Field("looked up in L3", "yes" if q.reload_tried else "", "", "flag"),
            Field("held by a reload", "yes" if rid in held else "", "", "flag"),
            Field("prepared backup", _prepared(s, rid), "", "bare"),
            Field("host hit", _hit(q), "-"),
            Field("namespace", str(q.ns), "0"),
        ),
        order=(rid,),
    )


def _content(s: ClusterState, names: Names) -> Section:
    """Pages whose ghost content is not what the node holding them says: the evidence of
    a Content violation (pages of a backup still being written are not checked)."""
    items: list[Item] = []
    memo = names.memo
    # pages a load-back still copies on their owner rank hold nothing yet, rightly
    copying = frozenset(p for k, op in enumerate(s.loads) for p, _ in op.pages if k >= s.load_done[p % s.config.R]) \
        if s.loads else frozenset()
    # the section reads only these values (and which pages the names know)
    key = (s.nodes, s.objects, s.dev_content, s.host_content, s.config)
    hit = memo.get("content")
    if hit is not None and all(a is b for a, b in zip(hit[0], key)) and hit[1] == copying and hit[2] == len(names.names):
        return hit[3]
    for nid in sorted(s.nodes.keys()):
        n = s.nodes[nid]
        obj = s.objects.get(n.host) if n.host is not None else None
        hit = memo.get(("content", nid))
        known = len(names.names)  # a page named since is printed by its name
        if hit is not None and hit[0] is n and hit[1] is s.dev_content and hit[2] is s.host_content and hit[3] is obj \
                and hit[4] == known and hit[5] == copying:
            items += hit[6]
            continue
        mine = _content_of(s, n, obj, names, copying)
        memo[("content", nid)] = (n, s.dev_content, s.host_content, obj, known, copying, mine)
        items += mine
    sec = Section("content", "content (pages that do not hold what their node says)", tuple(items))
    memo["content"] = (key, copying, len(names.names), sec)
    return sec


def _content_ok(s: ClusterState, n: Node, obj: Any, copying: frozenset) -> bool:
    """Whether every page of `n` holds what `n` says (what `_content_of` lists nothing
    for), decided at C speed for the usual case: no page of it in flight, a hash for every
    page. False means "look page by page"."""
    hashes = n.hashes
    if len(n.dev) > len(hashes) or (copying and not copying.isdisjoint(n.dev)):
        return False
    if list(map(s.dev_content.get, n.dev)) != list(hashes[: len(n.dev)]):
        return False
    if obj is None or not obj.committed:
        return True
    if obj.length > len(hashes):
        return False
    want = list(hashes[: obj.length])
    get, L2 = s.host_content.get, s.config.L2
    return all(list(map(get, range(r * L2 + obj.base, r * L2 + obj.base + obj.length))) == want for r in range(len(s.config.payloads)))


def _content_of(s: ClusterState, n: Node, obj: Any, names: Names, copying: frozenset = frozenset()) -> list[Item]:
    if _content_ok(s, n, obj, copying):
        return []
    items = []
    nid = n.id
    L2 = s.config.L2
    for i, p in enumerate(n.dev):
        want = n.hashes[i] if i < len(n.hashes) and p not in copying else None
        got = s.dev_content.get(p)
        if got != want:
            expected = "nothing yet, its load is in flight" if p in copying else names.show(want)
            items.append(
                Item(f"content p{p}", f"L1 p{p}", (Field("holds", names.show(got) if got is not None else "nothing"),
                                                   Field("expected", f"{expected} (#{nid} page {i})")))
            )
    if obj is None or not obj.committed:
        return items
    for region, payload in enumerate(s.config.payloads):
        for i in range(obj.length):
            h = obj.base + i
            want = n.hashes[i] if i < len(n.hashes) else None
            got = s.host_content.get(region * L2 + h)
            if got != want:
                where = f"L2 h{h}" if len(s.config.payloads) == 1 else f"L2 {payload} h{h}"
                items.append(
                    Item(f"content {payload} h{h}", where, (Field("holds", names.show(got) if got is not None else "nothing"),
                                                           Field("expected", f"{names.show(want)} (#{nid} page {i})")))
                )
    return items


def build(s: ClusterState, names: Names | None = None) -> View:
    """The view of a state. `names` (content identity -> prefix) is completed from the
    state; pass the names of a whole log to name pages whose request is gone."""
    nm = names_of(s, names)
    scalars = Item(
        "clock",
        "",
        (Field("clock", str(s.clock)), Field("next node", node_label(s.next_id)), Field("next request", f"r{s.next_rid}")),
    )
    sections = [Section("clock", "", (scalars,)), _tree(s, nm.memo), _lanes(s, nm.memo), _host(s), _writes(s, nm.memo)]
    if s.loads:
        sections.append(_loads(s))
    if s.config.L3:
        sections += [_disks(s, nm), _spill_queue(s), _spills(s, nm), _candidates(s), _reloads(s, nm)]
    sections.append(_requests(s, nm.memo))
    c = _content(s, nm)
    if c.items:
        sections.append(c)
    return tuple(sections)
