"""The tree operations more than one transition family performs: walking a key,
splitting a node, queueing a committed object for spilling, dropping a write."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import immutables

from ..config import Config
from ..content import child_key
from ..state import ROOT_ID, Node, Rejected, lane_of
from ..tx import Tx


@dataclass(frozen=True)
class KeyWalk:
    """Where a key leads: the nodes it covers whole (root to leaf), how many pages they
    cover, and where it diverges inside a node (`cut` = (node id, pages in common))."""

    full: tuple[int, ...]
    covered: int
    cut: tuple[int, int] | None


# The tenant-isolation defects that change where a walk goes (docs/defects.md): under
# each, a node with no child of the walk's namespace for a symbol may lead to a child of
# another namespace (`other_child`), the spec's `ChildWith`.
NS_WALK_BUGS = frozenset({"host_key_no_ns", "lora_salt_collision"})


def ns_key_partner(ns: int) -> int | None:
    """Under `lora_salt_collision`: the namespace whose tree key is namespace `ns`'s. A
    namespace k > 0 stands for a tenant identity, odd k = 2j-1 for LoRA adapter j (no
    salt), even k = 2j for cache salt j (no adapter); the defect's key joins adapter name
    and salt without a delimiter, so both read "j": 2j-1 and 2j collide. Namespace 0
    (neither) has no partner."""
    if not ns:
        return None
    return ns + 1 if ns % 2 else ns - 1


def other_child(nodes: Any, cur: Node, ns: int, sym: int, bug: str) -> int | None:
    """The child of `cur` for page symbol `sym` that a walk of namespace `ns` takes when
    `cur` has none of its own namespace, under a defect of NS_WALK_BUGS (None otherwise):
    under `lora_salt_collision` the child of the partner namespace (`ns_key_partner`);
    under `host_key_no_ns` (the host tier looked up by tokens alone) a host-only child
    (off L1, backed) of any namespace, the least namespace first."""
    if bug == "lora_salt_collision":
        p = ns_key_partner(ns)
        return None if p is None else cur.children.get(child_key(p, sym))
    if bug == "host_key_no_ns":
        best = None
        for cid in cur.children.values():
            c = nodes[cid]
            if c.key[0] == sym and c.ns != ns and not c.dev and c.host is not None and (best is None or c.ns < nodes[best].ns):
                best = cid
        return best
    return None


def child_for(nodes: Any, cur: Node, ns: int, sym: int, bug: str = "none") -> int | None:
    """The child of `cur` a walk of namespace `ns` takes for page symbol `sym`: the one of
    its namespace, or under a defect of NS_WALK_BUGS `other_child`'s (the spec's
    `ChildWith`)."""
    cid = cur.children.get(child_key(ns, sym))
    if cid is None and bug in NS_WALK_BUGS:
        cid = other_child(nodes, cur, ns, sym, bug)
    return cid


def walk_key(nodes: Any, tokens: tuple[int, ...], start: int = ROOT_ID, offset: int = 0, ns: int = 0, bug: str = "none") -> KeyWalk:
    """Where `tokens` (namespace `ns`'s) lead from node `start`, `offset` pages down: a walk
    never leaves its namespace (children of another namespace are keyed apart), but
    under a defect of NS_WALK_BUGS (`other_child`)."""
    full: list[int] = []
    i = offset
    cur = nodes[start]
    cut = None
    while i < len(tokens):
        cid = child_for(nodes, cur, ns, tokens[i], bug)
        if cid is None:
            break
        child = nodes[cid]
        key = child.key
        n = len(key)
        if tokens[i : i + n] != key:  # (the whole node compared at C speed first)
            n = 1
            limit = min(len(key), len(tokens) - i)
            while n < limit and key[n] == tokens[i + n]:
                n += 1
            if n < len(key):
                cut = (cid, n)
                break
        full.append(cid)
        i += n
        cur = child
    return KeyWalk(full=tuple(full), covered=i, cut=cut)


def enqueue_spill(tx: Tx, nid: int) -> None:
    """Queue a just-committed object for spilling to L3 (dropped when the queue is full)."""
    if tx.cfg.L3 and len(tx.spill_queue) < tx.cfg.spill_queue_cap:
        tx.spill_queue = tx.spill_queue + (nid,)


def split_blocked_by_backup(cfg: Config, nid: int, pending: Any) -> bool:
    """Whether a pending backup keeps node `nid` from being split."""
    if cfg.bug == "split_pending":
        # the split does not look for a backup in flight: the node is split under it
        return False
    return nid in pending


def unsplittable(tx: Tx, nid: int) -> bool:
    """A node whose backup is pending: the reference refuses to split it (a node an
    in-flight spill pins is split like any other)."""
    return split_blocked_by_backup(tx.cfg, nid, tx.peek("pending"))


def split_node(tx: Tx, nid: int, at: int) -> int:
    """Split `nid` after `at` pages, as the reference does: a new upper node (fresh id)
    takes the first `at` pages, their device pages, their L2 pages as a new object and
    their hashes, and the lower part's `lock`, `hits` and stamp; it is neither pinned
    nor durable (a new node of the reference starts without either). The lower part
    keeps its id, stamp, object key and pin (an in-flight spill of it still reads the
    host pages it pinned, see `spill_base`). Its durable flag: under
    `durable_split = "fixed"` it stays durable only if `at` is a multiple of R (else its
    pages' owners are not the ranks that wrote them to disk); the reference keeps it.
    A backed node's new upper object is queued for spilling. Returns the upper id."""
    n = tx.node(nid)
    if split_blocked_by_backup(tx.cfg, nid, tx.pending):
        raise Rejected(f"node {nid} has a pending backup and cannot be split")
    if not 0 < at < n.pages:
        raise Rejected(f"node {nid} has {n.pages} pages; cannot split after {at}")
    uid = tx.new_id()
    upper = Node(
        id=uid,
        parent=n.parent,
        key=n.key[:at],
        dev=n.dev[:at],
        host=uid if n.host is not None else None,
        durable=False,
        lock=n.lock,
        pin=0,
        hits=n.hits,
        touched=n.touched,
        children=immutables.Map({child_key(n.ns, n.key[at]): nid}),
        ondev=1 if n.dev else 0,
        hashes=n.hashes[:at],
        ns=n.ns,
    )
    parent = tx.node(n.parent)
    tx.put(parent.with_(children=parent.children.set(child_key(n.ns, n.key[0]), uid)))
    tx.put(upper)
    keep = tx.cfg.durable_split == "reference" or lane_of(at, tx.cfg.R) == 0
    tx.put(n.with_(parent=uid, key=n.key[at:], dev=n.dev[at:], hashes=n.hashes[at:],
                   durable=n.durable and keep))
    if n.host is not None:
        obj = tx.objects[n.host]
        tx.objects.set(uid, obj.slice(0, at, uid))
        tx.objects.set(n.host, obj.slice(at, obj.length - at, obj.owner))
        enqueue_spill(tx, uid)
    return uid


def drop_write(tx: Tx, nid: int, keep_object: bool = False) -> None:
    """Take node id `nid`'s write out of `writes` (a rank that finished it counts one
    less) and free its object: a rollback, of a pending or of a prepared backup. With
    `keep_object` (the injected defect double_free on a prepared backup) the object's
    pages are freed but the object stays registered."""
    j = tx.writes.index(nid)
    tx.writes = tx.writes[:j] + tx.writes[j + 1 :]
    tx.write_done = [d - 1 if d > j else d for d in tx.write_done]
    if tx.cfg.ack_append != "fixed":
        # its ack, where a rank appended it, is scrubbed from that rank's queue
        # (`_remove_undrained_write_acks`)
        tx.acked = [a - 1 if a > j else a for a in tx.acked]
    if keep_object:
        tx.free_pages_of(tx.objects[nid])
    else:
        tx.free_object(nid)
