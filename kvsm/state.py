"""`ClusterState`: one immutable value holding the whole cluster, and its value types.

Replicated part (identical on every rank): `nodes`, `next_id`, `clock`, `next_rid`,
`dev_free`, `l2_free`, `objects`, `pending`, `writes`, `requests`, `loads`, `prepared`
(the prepared write-through backups not attached yet), and for L3
`spill_queue`, `spills`, `reload_candidates`, `reloads`. Local part (per rank, what
only that rank knows): `write_done`, `acked`, `commit_round`, `load_done`, `spill_gathered`,
`spill_done`, `reload_done`, `disk_ok`, `l3` (each rank's disk) and `disk_faults`. Ghost part (checking only, never
an input to a decision): `dev_content`, `host_content`, the content held in `l3` and
`spill_staged`: the identity of the prefix whose KV each page holds (absent =
poisoned/free), and `diverged`: where the ranks first decided a replicated step
differently (only an injected defect that lets a rank decide from its own view can set
it; `kvsm.transitions.apply`), and `halted`: the step at which the reference would stop
at a `raise` or an `assert` (invariant 14).

Derived part, kept so that a transition costs time proportional to what it changes
(invariant 10 recomputes each from scratch): `dev_index` and `host_index` (the device
and host victim orders), `backup_index` (nodes a `Reserve` may take; which nodes these
indexes hold, in which order, is `kvsm.victims`), `l3_used`, each node's `children`,
`ondev` (children on L1) and `hashes`, and the digest sums (`kvsm.digest_sums`, which
also says which scalars a digest covers).

Maps are `immutables.Map` (HAMT). Transitions never mutate a state; they open a
transaction on it (`kvsm.tx.Tx`), which produces a new state. Every record type is a
frozen dataclass copied with `with_(**changes)`: `Node` here, the others in
`kvsm.records` (re-exported here).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import IntEnum
from typing import Any

import immutables

from . import content
from .config import Config
from .digest_sums import COMPONENTS, recompute_sums, replicated_digest, state_digest
from .effects import Effect
from .writes import Writes
from .sortedset import PSortedSet, RunSet
# the record types live in `kvsm.records`; imported from here too
from .records import Candidate, LoadOp, Obj, Pending, ReloadOp, Request, SpillOp, page_runs, reload_object_key  # noqa: F401

ROOT_ID = 0
NO_PARENT = -1
# The parent of a husk: what stays of an unbacked node that a device eviction took from
# above L2-only children under `unbacked_evict = "reference"` (docs/model.md, "Orphans")
GONE = -2

QUEUED, MATCHED, DECODING = "queued", "matched", "decoding"
PHASES = (QUEUED, MATCHED, DECODING)



class Round(IntEnum):
    """Where a rank stands in the current round of the commit collective
    (`commit_round[r]`): not at its call yet, entered (waiting in the MIN), or returned
    early without entering. An int in every encoding (a log, a digest, a TLA+ value: the
    spec's 0, 1, 2), and in its repr, so that a message listing a round reads as numbers."""

    IDLE = 0
    IN = 1
    SKIPPED = 2

    __repr__ = int.__repr__


def lane_of(page: int, R: int) -> int:
    """The rank that owns a page: device page `p` lives in lane `p mod R`, and the page at
    index `i` of a request's key, of an L2 object or of a load-back run belongs to rank
    `i mod R` (context parallelism shards a sequence round-robin by page)."""
    return page % R


@dataclass(frozen=True, slots=True)
class Node:
    id: int
    parent: int
    key: tuple[int, ...]  # one symbol per page (P tokens); never empty except at the root
    dev: tuple[int, ...]  # device page ids, one per page, or () when not on L1
    host: int | None  # key of its committed L2 object, or None
    durable: bool
    lock: int
    pin: int
    hits: int
    touched: int
    # derived
    children: immutables.Map  # first symbol -> child id
    ondev: int  # children on L1
    hashes: tuple[int, ...]  # content identity of each page (prefix-chained, in its namespace)
    # its namespace (a tenant, an adapter: docs/model.md, "Namespaces"); the root's is 0
    ns: int = 0

    # `dev` is digested as an entry of its own ("bulky"), re-hashed only when it changes
    BULKY = "dev"

    def encode(self) -> str:
        # The key is written as its length and the identity of its last page: with the
        # parent fixed, that identifies the key (the identity chains the whole prefix)
        # without re-encoding a long tuple at every touch.
        host = "~" if self.host is None else str(self.host)
        ns = f"|n{self.ns}" if self.ns else ""  # (only when not 0: namespace 0 keeps its bytes)
        return (
            f"N{self.id}|{self.parent}|{len(self.key)}:{self.last_content}|{host}|"
            f"{int(self.durable)}|{self.lock}|{self.pin}|{self.hits}|{self.touched}{ns}"
        )

    def with_(self, **c: Any) -> "Node":
        """A copy with some fields changed (what `dataclasses.replace` does, several times
        faster: built as a `_NodeDraft`, whose slots take plain stores, and turned into a
        `Node`; tests check it covers every field and refuses an unknown one)."""
        new = _new(_NodeDraft)
        new.id = self.id
        new.parent = self.parent
        new.key = self.key
        new.dev = self.dev
        new.host = self.host
        new.durable = self.durable
        new.lock = self.lock
        new.pin = self.pin
        new.hits = self.hits
        new.touched = self.touched
        new.children = self.children
        new.ondev = self.ondev
        new.hashes = self.hashes
        new.ns = self.ns
        for k, v in c.items():
            setattr(new, k, v)
        new.__class__ = Node
        return new  # type: ignore[return-value]

    @property
    def on_l1(self) -> bool:
        return bool(self.dev) or self.id == ROOT_ID

    @property
    def committed(self) -> bool:
        return self.host is not None

    @property
    def pages(self) -> int:
        return len(self.key)

    @property
    def child_key(self) -> int:
        """Its key in its parent's children map (`kvsm.content.child_key`)."""
        return self.key[0] if not self.ns else content.child_key(self.ns, self.key[0])

    @property
    def last_content(self) -> int:
        return self.hashes[-1] if self.hashes else content.ROOT


_NODE_FIELDS = Node.__slots__
_new = object.__new__


class _NodeDraft:
    """A `Node` being built: the same slots in the same order (so the same memory layout),
    without the frozen dataclass's refusal to store into them. `Node.with_` fills one and
    assigns it the class `Node`; no draft outlives the function that makes it."""

    __slots__ = _NODE_FIELDS


class Rejected(Exception):
    """A transition's guard is false; the state is unchanged. The message says why."""


@dataclass(frozen=True, slots=True)
class ClusterState:
    config: Config
    nodes: immutables.Map
    next_id: int
    clock: int
    next_rid: int
    dev_free: tuple[PSortedSet, ...]  # per lane
    l2_free: tuple[RunSet, ...]  # per payload: free runs (base, length)
    objects: immutables.Map
    pending: immutables.Map
    writes: tuple[int, ...]
    requests: immutables.Map
    # rid -> node id taken in advance for its prepared backup (object key = that id),
    # until Insert attaches it or it is rolled back; empty unless config.prepared_backups
    prepared: immutables.Map
    write_done: tuple[int, ...]
    dev_content: immutables.Map
    host_content: immutables.Map  # key: payload_index * L2 + page
    # L3 (all empty when config.L3 == 0)
    spill_queue: tuple[int, ...]  # committed objects (= node ids) waiting to be spilled
    spills: tuple[SpillOp, ...]  # in flight, submit order
    reload_candidates: immutables.Map  # rid -> Candidate
    reloads: tuple[ReloadOp, ...]  # in flight, submit order
    spill_gathered: tuple[int, ...]  # local: ops at the head of `spills` rank r gathered
    spill_done: tuple[tuple[bool, ...], ...]  # local: ok bit of each op rank r wrote, from the head
    reload_done: tuple[tuple[bool, ...], ...]  # local: ok bit of each op rank r read, from the head
    disk_ok: tuple[bool, ...]  # local
    disk_faults: int  # DiskFail transitions so far (bounded by config.max_disk_faults)
    l3: immutables.Map  # local: (rank, page hash) -> content held on that rank's disk
    l3_used: tuple[int, ...]  # derived: entries of `l3` per rank
    spill_staged: tuple[tuple[tuple[tuple[int, int | None], ...], ...], ...]  # ghost: per rank, gathered copies not yet written
    loads: tuple[LoadOp, ...]  # in-flight load-backs, issue order
    load_done: tuple[int, ...]  # local: loads at the head of `loads` rank r has copied
    commit_round: tuple[int, ...]  # local: where rank r stands in the open commit round (`Round`)
    # local: writes at the head of `writes` whose final ack rank r has appended to its ack
    # queue (`ack_append = "reference"`; always 0 under "fixed", where the ack enters with
    # the copy's end and `write_done` counts both)
    acked: tuple[int, ...]
    dev_index: PSortedSet
    host_index: PSortedSet
    backup_index: PSortedSet
    # per COMPONENTS; None when not tracked (see `untracked`): then `digest` sums the state
    sums: tuple[int, ...] | None
    # ghost: the first replicated step that some rank decided otherwise than rank 0 (the
    # rank the cluster's state follows): (transition name, those ranks); None = they agree
    diverged: tuple[str, tuple[int, ...]] | None = None
    # ghost: the step at which the reference stops (a `raise` or an `assert` it reaches
    # there: the scheduler process dies), or None; set only by a knob at the reference's
    # value that models such a path (invariant 14)
    halted: str | None = None
    # What the transition that produced this state asks the physical world to do
    # (`kvsm.effects`); not part of the state's identity, equality or digest.
    effects: tuple[Effect, ...] = field(default=(), compare=False)
    # What the transaction(s) that produced this state wrote (`kvsm.writes`), set by
    # `Tx.commit`; None for a state made otherwise (`replace` does not copy it) until a
    # commit on it gives it a record of its own. Not part of the state's identity,
    # equality or digest.
    written: Writes | None = field(default=None, init=False, compare=False, repr=False)
    _digest: str | None = field(default=None, compare=False, repr=False)

    # ---- reading -------------------------------------------------------------------
    def node(self, nid: int) -> Node:
        return self.nodes[nid]

    def root(self) -> Node:
        return self.nodes[ROOT_ID]

    def digest(self) -> str:
        """The digest of the whole state (`kvsm.digest_sums.state_digest`)."""
        # a memo of a pure function of this immutable value (it cannot drift)
        d = self._digest
        if d is None:
            d = state_digest(self, self.current_sums())
            object.__setattr__(self, "_digest", d)
        return d

    def replicated_digest(self) -> str:
        """The digest of the replicated part alone: equal on ranks that agree."""
        return replicated_digest(self, self.current_sums())

    def current_sums(self) -> tuple[int, ...]:
        """The digest sums: maintained per transition, or (untracked) summed over the whole
        state now, in time proportional to its size."""
        return self.sums if self.sums is not None else recompute_sums(self)

    def untracked(self) -> "ClusterState":
        """This state, and every state a transition derives from it, without digest sums:
        a transition then skips hashing what it changed. For a run that reads no digest
        until the end (one rank, no log); `digest` still gives the same value."""
        return replace(self, sums=None, _digest=None)

    def round_open(self) -> bool:
        """Whether some rank has reached the commit collective of the current round and
        the round has not completed: replicated steps wait until it does."""
        return any(self.commit_round)

    def loading_pages(self) -> frozenset[int]:
        """Device pages that an in-flight load-back still targets on some rank."""
        return frozenset(p for op in self.loads for p, _ in op.pages)

    def path_to_root(self, nid: int) -> list[int]:
        """Ids from `nid` up to (excluding) the root; for an orphan, up to (including) its
        husk, whose key is its whole prefix."""
        out = []
        while nid != ROOT_ID and nid != GONE:
            out.append(nid)
            nid = self.nodes[nid].parent
        return out


# ---- construction ---------------------------------------------------------------------------

_STATE_FIELDS = tuple(f for f in ClusterState.__slots__ if f not in ("written", "_digest"))


class _StateDraft:
    """A `ClusterState` being built (like `_NodeDraft` for `Node`): its slots, in order."""

    __slots__ = ClusterState.__slots__


def _state_maker() -> Any:
    # one plain slot store per field, written out (a loop over the slot descriptors'
    # setters costs several times more, and `ClusterState(...)` more again)
    src = (
        f"def make_state({', '.join(_STATE_FIELDS)}):\n"
        "    new = _new(_StateDraft)\n"
        + "".join(f"    new.{f} = {f}\n" for f in _STATE_FIELDS)
        + "    new.written = None\n    new._digest = None\n    new.__class__ = ClusterState\n    return new\n"
    )
    scope = {"_new": _new, "_StateDraft": _StateDraft, "ClusterState": ClusterState}
    exec(src, scope)
    return scope["make_state"]


make_state = _state_maker()
make_state.__doc__ = """`ClusterState(...)` of every field but `written` and `_digest`, positionally in field
order, several times faster than the dataclass's own constructor."""


def _draft_maker() -> Any:
    src = (
        "def draft_of(s):\n"
        "    new = _new(_StateDraft)\n"
        + "".join(f"    new.{f} = s.{f}\n" for f in _STATE_FIELDS)
        + "    new.written = None\n    new._digest = None\n    return new\n"
    )
    scope = {"_new": _new, "_StateDraft": _StateDraft}
    exec(src, scope)
    return scope["draft_of"]


draft_of = _draft_maker()
draft_of.__doc__ = """A draft of a new state with every field of `s` but `written` and `_digest` (None):
its fields take plain stores until the caller gives it the class `ClusterState`
(`new.__class__ = ClusterState`), which it must do before the draft leaves it
(`Tx.commit`, which replaces the fields a transition changed)."""


def initial_state(cfg: Config) -> ClusterState:
    root = Node(
        id=ROOT_ID,
        parent=NO_PARENT,
        key=(),
        dev=(),
        host=None,
        durable=False,
        lock=0,
        pin=0,
        hits=0,
        touched=0,
        children=immutables.Map(),
        ondev=0,
        hashes=(),
    )
    nodes = immutables.Map({ROOT_ID: root})
    dev_free = tuple(PSortedSet(range(lane, cfg.device_pages, cfg.R)) for lane in range(cfg.R))
    l2_free = tuple(RunSet([(0, cfg.L2)]) for _ in cfg.payloads)
    s = ClusterState(
        config=cfg,
        nodes=nodes,
        next_id=1,
        clock=0,
        next_rid=0,
        dev_free=dev_free,
        l2_free=l2_free,
        objects=immutables.Map(),
        pending=immutables.Map(),
        writes=(),
        requests=immutables.Map(),
        prepared=immutables.Map(),
        write_done=(0,) * cfg.R,
        dev_content=immutables.Map(),
        host_content=immutables.Map(),
        spill_queue=(),
        spills=(),
        reload_candidates=immutables.Map(),
        reloads=(),
        spill_gathered=(0,) * cfg.R,
        spill_done=((),) * cfg.R,
        reload_done=((),) * cfg.R,
        disk_ok=(True,) * cfg.R,
        disk_faults=0,
        l3=immutables.Map(),
        l3_used=(0,) * cfg.R,
        spill_staged=((),) * cfg.R,
        loads=(),
        load_done=(0,) * cfg.R,
        commit_round=(Round.IDLE,) * cfg.R,
        acked=(0,) * cfg.R,
        dev_index=PSortedSet(),
        host_index=PSortedSet(),
        backup_index=PSortedSet(),
        sums=(0,) * len(COMPONENTS),
    )
    return replace(s, sums=recompute_sums(s))


