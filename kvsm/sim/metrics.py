"""What a run measured: counters read off the transitions the log's state applies (and
their physical effects), per-request hits, and a time series for the plots."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..effects import Load, PoisonDev, PoisonHost, ReloadRead, SpillWrite, Store
from ..state import ClusterState
from ..transitions import Transition

# transitions whose freed device pages are evictions (Finish and Abort free a request's own)
_DEV_EVICTING = frozenset(("Insert", "LoadBack", "EvictDevice"))
# transitions whose freed host pages are evictions (Rollback frees an abandoned backup, and
# ReloadAdmit an abandoned reload)
_HOST_EVICTING = frozenset(("Reserve", "EvictHost", "ReloadReserve"))


def depth(s: ClusterState, nid: int) -> int:
    """Pages from the root down to node `nid`."""
    nodes = s.nodes
    d = 0
    while nid:
        n = nodes[nid]
        d += len(n.key)
        nid = n.parent
    return d


# transitions a run only counts (`on_transition` reads nothing else of them)
_COUNTED_ONLY = frozenset(("Arrive", "Match", "Finish"))
_L3_NAMES = frozenset(("SpillSubmit", "SpillDone", "SpillAck", "ReloadReserve", "ReloadDone", "ReloadAdmit", "ReloadExpire"))


@dataclass
class Sample:
    t_ms: int
    requests: int
    hit_rate: float  # cumulative block hit rate
    window_hit_rate: float  # since the previous sample
    l1_used: float  # fraction of all device pages in use (cached or held by requests)
    l2_used: float  # fraction of the host pool in use
    l3_used: float  # fraction of all ranks' disk pages in use (0 without L3)
    pending: int  # backups submitted, not yet committed
    hits: int = 0  # hit pages so far (all tiers): with `pages`, any window's hit rate
    pages: int = 0  # prompt pages so far
    l1_lanes: tuple[float, ...] = ()  # per rank: fraction of its device lane in use
    l3_ranks: tuple[float, ...] = ()  # per rank: fraction of its disk in use (empty without L3)


@dataclass
class Metrics:
    block_tokens: int
    requests: int = 0
    requests_finished: int = 0
    requests_aborted: int = 0  # by an abort fault
    requests_uncached: int = 0  # their pages did not fit: aborted after the forward pass
    pages_total: int = 0
    pages_hit_l1: int = 0
    pages_hit_l2: int = 0
    pages_hit_l3: int = 0  # hit pages a request got from the reload it waited for
    pages_uncached: int = 0
    tokens_total: int = 0
    tokens_hit: int = 0
    loadbacks: int = 0
    loadbacks_refused: int = 0
    moved_l1_to_l2: int = 0
    moved_l2_to_l1: int = 0
    moved_l2_to_l3: int = 0  # pages written to a disk by an ok SpillDone
    moved_l3_to_l2: int = 0  # pages read into the host pool by an ok ReloadDone
    evicted_l1: int = 0
    evicted_l2: int = 0
    backups_reserved: int = 0
    reserves_failed: int = 0  # Reserve with fits = false: evicted host leaves, reserved nothing (not counted inside Insert)
    backups_prepared: int = 0  # Prepare with fits = true (prepared_backups)
    prepares_failed: int = 0  # Prepare with fits = false
    prepared_attached: int = 0  # prepared backups an Insert attached (then pending like a Reserve's)
    prepared_rolled_back: int = 0  # prepared backups an Insert or Abort rolled back
    backups_committed: int = 0
    backups_rolled_back: int = 0
    write_back_waits: int = 0
    spills_submitted: int = 0
    spills_durable: int = 0  # acked ok by every rank: the node is now durable
    spills_failed: int = 0  # some rank's write was not ok
    spills_stale: int = 0  # acked ok, but the node was gone or split off its owners meanwhile
    reloads_reserved: int = 0  # new reload ops (a request joining one in flight is not counted)
    reloads_admitted: int = 0  # a node was inserted from the reload
    reloads_aborted: int = 0  # the reservation was freed: a failed read, a stale attach, or no waiter left
    reloads_expired: int = 0  # waiters released by the reload ttl
    requests_held: int = 0  # requests a reload held
    tick: int = 0  # the scheduler's current tick, set by the loop (reload waits are in ticks)
    faults: Counter = field(default_factory=Counter)
    by_name: Counter = field(default_factory=Counter)
    samples: list[Sample] = field(default_factory=list)
    # per admitted request: (file index, L1 pages, L2 pages, L3 pages)
    request_hits: list[tuple[int, int, int, int]] = field(default_factory=list)
    reload_waits: list[int] = field(default_factory=list)  # ticks each released waiter was held
    _held_since: dict[int, int] = field(default_factory=dict)  # rid -> tick its hold began
    _reloaded: dict[int, tuple[int, int]] = field(default_factory=dict)  # rid -> page range its reload brought
    _window: tuple[int, int] = (0, 0)

    def on_transition(self, t: Transition, before: ClusterState, after: ClusterState) -> None:
        name = t.name
        self.by_name[name] += 1
        if name in _COUNTED_ONLY:
            return
        if name in _DEV_EVICTING:
            # (effect classes have no subclasses: counted by exact type, at C speed)
            self.evicted_l1 += list(map(type, after.effects)).count(PoisonDev)
            if name == "EvictDevice" and before.config.evict_write_back != "locked":
                # its write-back (evict_write_back): the copy and the host evictions to fit
                self.moved_l1_to_l2 += list(map(type, after.effects)).count(Store)
                self.evicted_l2 += sum(e.length for e in after.effects if isinstance(e, PoisonHost))
            if name == "Insert" and after.config.backup_trigger == "insert":
                self._insert_backups(t.arg("rid"), before, after)
        elif name in _HOST_EVICTING:
            self.evicted_l2 += sum(e.length for e in after.effects if isinstance(e, PoisonHost))
        if name == "WriteDone":
            self.moved_l1_to_l2 += list(map(type, after.effects)).count(Store)
        elif name == "LoadBack":
            self.loadbacks += 1
        elif name == "LoadDone":
            self.moved_l2_to_l1 += list(map(type, after.effects)).count(Load)
        elif name == "Commit":
            self.backups_committed += len(before.writes) - len(after.writes)
        elif name == "Rollback":
            self.backups_rolled_back += 1
        if name == "Reserve":
            if t.arg("fits"):
                self.backups_reserved += 1
            else:
                self.reserves_failed += 1
        elif name == "Prepare":
            if t.arg("fits"):
                self.backups_prepared += 1
            else:
                self.prepares_failed += 1
        elif name in ("Insert", "Abort") and before.prepared and before.prepared.get(t.arg("rid")) is not None:
            if before.prepared[t.arg("rid")] in after.pending:
                self.prepared_attached += 1
            else:
                self.prepared_rolled_back += 1
        elif name in _L3_NAMES:
            self._on_l3(t, before, after)
        elif name == "Abort":
            # an aborted request's hold ends without a release
            self._held_since.pop(t.arg("rid"), None)
            self._reloaded.pop(t.arg("rid"), None)

    def _insert_backups(self, rid: int, before: ClusterState, after: ClusterState) -> None:
        """The backups an Insert took itself (`backup_trigger = "insert"`) and the host
        leaves they evicted (its freed host pages but a rolled-back prepared backup's)."""
        old = set(before.writes)
        self.backups_reserved += sum(1 for n in after.writes if n not in old)
        freed = sum(e.length for e in after.effects if isinstance(e, PoisonHost))
        prep = before.prepared.get(rid)
        if prep is not None and prep not in after.pending:
            freed -= before.objects[prep].length
        self.evicted_l2 += freed

    def _on_l3(self, t: Transition, before: ClusterState, after: ClusterState) -> None:
        name = t.name
        if name == "SpillSubmit":
            self.spills_submitted += len(after.spills) - len(before.spills)
        elif name == "SpillDone":
            self.moved_l2_to_l3 += sum(len(e.hashes) for e in after.effects if isinstance(e, SpillWrite) and e.ok)
        elif name == "SpillAck":
            R = before.config.R
            for j in range(min(len(x) for x in before.spill_done)):
                op = before.spills[j]
                n = after.nodes.get(op.node)
                if not all(before.spill_done[r][j] for r in range(R)):
                    self.spills_failed += 1
                elif n is not None and n.durable:
                    self.spills_durable += 1
                else:
                    self.spills_stale += 1
        elif name == "ReloadReserve":
            rid = t.arg("rid")
            self.reloads_reserved += len(after.reloads) - len(before.reloads)
            if any(rid in op.waiters for op in after.reloads):
                self.requests_held += 1
                self._held_since[rid] = self.tick
        elif name == "ReloadDone":
            self.moved_l3_to_l2 += sum(len(e.pages) for e in after.effects if isinstance(e, ReloadRead) and e.ok)
        elif name == "ReloadAdmit":
            op = before.reloads[0]
            if after.next_id > before.next_id:  # the reloaded node was inserted
                self.reloads_admitted += 1
                start = depth(before, op.anchor)
                for rid in op.waiters:
                    self._reloaded[rid] = (start, start + len(op.tokens))
            else:
                self.reloads_aborted += 1
            self._release(op.waiters)
        elif name == "ReloadExpire":
            for b, a in zip(before.reloads, after.reloads):
                if b.waiters and not a.waiters:
                    self.reloads_expired += len(b.waiters)
                    self._release(b.waiters)

    def _release(self, rids: tuple[int, ...]) -> None:
        for rid in rids:
            self.reload_waits.append(self.tick - self._held_since.pop(rid))

    def admitted(self, rid: int, index: int, pages: int, input_length: int, hit_l1: int, hit_l2: int) -> None:
        """Request `rid` matched `hit_l1` pages on L1 and loaded the next `hit_l2` back from
        L2. If it waited for a reload that was admitted, its hit pages inside the reloaded
        range are L3 hits instead (without L3 they would have been recomputed)."""
        hit_l3 = 0
        span = self._reloaded.pop(rid, None)
        if span is not None:
            start, end = span
            from_l1 = max(0, min(end, hit_l1) - start)
            from_l2 = max(0, min(end, hit_l1 + hit_l2) - max(start, hit_l1))
            hit_l1, hit_l2, hit_l3 = hit_l1 - from_l1, hit_l2 - from_l2, from_l1 + from_l2
        self.request_hits.append((index, hit_l1, hit_l2, hit_l3))
        self.requests += 1
        self.pages_total += pages
        self.pages_hit_l1 += hit_l1
        self.pages_hit_l2 += hit_l2
        self.pages_hit_l3 += hit_l3
        self.tokens_total += input_length
        self.tokens_hit += min((hit_l1 + hit_l2 + hit_l3) * self.block_tokens, input_length)

    @property
    def hits(self) -> int:
        return self.pages_hit_l1 + self.pages_hit_l2 + self.pages_hit_l3

    def sample(self, t_ms: int, s: ClusterState) -> None:
        cfg = s.config
        hits = self.hits
        h0, p0 = self._window
        dp = self.pages_total - p0
        lanes = tuple(1 - len(lane) / cfg.L1 for lane in s.dev_free)
        l1_free = sum(len(lane) for lane in s.dev_free)
        l2_free = sum(n for _, n in s.l2_free[0])
        self.samples.append(
            Sample(
                t_ms,
                self.requests,
                hits / self.pages_total if self.pages_total else 0.0,
                (hits - h0) / dp if dp else 0.0,
                1 - l1_free / cfg.device_pages,
                1 - l2_free / cfg.L2,
                len(s.l3) / (cfg.R * cfg.L3) if cfg.L3 else 0.0,
                len(s.writes),
                hits,
                self.pages_total,
                lanes,
                tuple(n / cfg.L3 for n in s.l3_used) if cfg.L3 else (),
            )
        )
        self._window = (hits, self.pages_total)

    def summary(self) -> dict[str, Any]:
        hits = self.hits
        waits = self.reload_waits
        return {
            "requests": self.requests,
            "requests_finished": self.requests_finished,
            "requests_aborted": self.requests_aborted,
            "requests_uncached": self.requests_uncached,
            "pages_total": self.pages_total,
            "pages_hit_l1": self.pages_hit_l1,
            "pages_hit_l2": self.pages_hit_l2,
            "pages_hit_l3": self.pages_hit_l3,
            "pages_recomputed": self.pages_total - hits,
            "pages_uncached": self.pages_uncached,
            "hit_rate_blocks": round(hits / self.pages_total, 6) if self.pages_total else 0.0,
            "tokens_total": self.tokens_total,
            "tokens_hit": self.tokens_hit,
            "hit_rate_tokens": round(self.tokens_hit / self.tokens_total, 6) if self.tokens_total else 0.0,
            "pages_moved": {
                "l1_to_l2": self.moved_l1_to_l2,
                "l2_to_l1": self.moved_l2_to_l1,
                "l2_to_l3": self.moved_l2_to_l3,
                "l3_to_l2": self.moved_l3_to_l2,
            },
            "evictions": {"l1": self.evicted_l1, "l2": self.evicted_l2},
            "loadbacks": self.loadbacks,
            "loadbacks_refused": self.loadbacks_refused,
            "backups_reserved": self.backups_reserved,
            "reserves_failed": self.reserves_failed,
            "backups_prepared": self.backups_prepared,
            "prepares_failed": self.prepares_failed,
            "prepared_attached": self.prepared_attached,
            "prepared_rolled_back": self.prepared_rolled_back,
            "backups_committed": self.backups_committed,
            "backups_rolled_back": self.backups_rolled_back,
            "write_back_waits": self.write_back_waits,
            "spills_submitted": self.spills_submitted,
            "spills_durable": self.spills_durable,
            "spills_failed": self.spills_failed,
            "spills_stale": self.spills_stale,
            "reloads_reserved": self.reloads_reserved,
            "reloads_admitted": self.reloads_admitted,
            "reloads_aborted": self.reloads_aborted,
            "reloads_expired": self.reloads_expired,
            "requests_held": self.requests_held,
            "reload_wait_ticks": {
                "mean": round(sum(waits) / len(waits), 3) if waits else 0.0,
                "max": max(waits, default=0),
            },
            "faults": dict(sorted(self.faults.items())),
            "transitions_by_name": dict(sorted(self.by_name.items())),
        }
