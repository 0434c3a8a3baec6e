"""What a run measured: counters read off the transitions the log's state applies (and
their physical effects), per-request hits, and a time series for the plots."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..state import ClusterState
from ..transitions import Transition

# transitions whose freed device pages are evictions (Finish and Abort free a request's own)
_DEV_EVICTING = frozenset(("Insert", "LoadBack", "EvictDevice"))
# transitions whose freed host pages are evictions (Rollback frees an abandoned backup)
_HOST_EVICTING = frozenset(("Reserve", "EvictHost"))


@dataclass
class Sample:
    t_ms: int
    requests: int
    hit_rate: float  # cumulative block hit rate
    window_hit_rate: float  # since the previous sample
    l1_used: float  # fraction of all device pages in use (cached or held by requests)
    l2_used: float  # fraction of the host pool in use
    pending: int  # backups submitted, not yet committed


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
    pages_uncached: int = 0
    tokens_total: int = 0
    tokens_hit: int = 0
    loadbacks: int = 0
    loadbacks_refused: int = 0
    moved_l1_to_l2: int = 0
    moved_l2_to_l1: int = 0
    evicted_l1: int = 0
    evicted_l2: int = 0
    backups_reserved: int = 0
    backups_committed: int = 0
    backups_rolled_back: int = 0
    write_back_waits: int = 0
    faults: Counter = field(default_factory=Counter)
    by_name: Counter = field(default_factory=Counter)
    samples: list[Sample] = field(default_factory=list)
    request_hits: list[tuple[int, int, int]] = field(default_factory=list)  # (file index, L1 pages, L2 pages)
    _window: tuple[int, int] = (0, 0)

    def on_transition(self, t: Transition, before: ClusterState, after: ClusterState) -> None:
        name = t.name
        self.by_name[name] += 1
        if name in _DEV_EVICTING:
            self.evicted_l1 += sum(1 for e in after.effects if e[0] == "poison_dev")
        elif name in _HOST_EVICTING:
            self.evicted_l2 += sum(e[2] for e in after.effects if e[0] == "poison_host")
        if name == "WriteDone":
            self.moved_l1_to_l2 += sum(1 for e in after.effects if e[0] == "store")
        elif name == "LoadBack":
            self.moved_l2_to_l1 += sum(1 for e in after.effects if e[0] == "load")
            self.loadbacks += 1
        elif name == "Commit":
            self.backups_committed += len(before.writes) - len(after.writes)
        elif name == "Rollback":
            self.backups_rolled_back += 1
        if name == "Reserve":
            self.backups_reserved += 1

    def admitted(self, index: int, pages: int, input_length: int, hit_l1: int, hit_l2: int) -> None:
        self.request_hits.append((index, hit_l1, hit_l2))
        self.requests += 1
        self.pages_total += pages
        self.pages_hit_l1 += hit_l1
        self.pages_hit_l2 += hit_l2
        self.tokens_total += input_length
        self.tokens_hit += min((hit_l1 + hit_l2) * self.block_tokens, input_length)

    def sample(self, t_ms: int, s: ClusterState) -> None:
        cfg = s.config
        hits = self.pages_hit_l1 + self.pages_hit_l2
        h0, p0 = self._window
        dp = self.pages_total - p0
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
                len(s.writes),
            )
        )
        self._window = (hits, self.pages_total)

    def summary(self) -> dict[str, Any]:
        hits = self.pages_hit_l1 + self.pages_hit_l2
        return {
            "requests": self.requests,
            "requests_finished": self.requests_finished,
            "requests_aborted": self.requests_aborted,
            "requests_uncached": self.requests_uncached,
            "pages_total": self.pages_total,
            "pages_hit_l1": self.pages_hit_l1,
            "pages_hit_l2": self.pages_hit_l2,
            "pages_recomputed": self.pages_total - hits,
            "pages_uncached": self.pages_uncached,
            "hit_rate_blocks": round(hits / self.pages_total, 6) if self.pages_total else 0.0,
            "tokens_total": self.tokens_total,
            "tokens_hit": self.tokens_hit,
            "hit_rate_tokens": round(self.tokens_hit / self.tokens_total, 6) if self.tokens_total else 0.0,
            "pages_moved": {"l1_to_l2": self.moved_l1_to_l2, "l2_to_l1": self.moved_l2_to_l1},
            "evictions": {"l1": self.evicted_l1, "l2": self.evicted_l2},
            "loadbacks": self.loadbacks,
            "loadbacks_refused": self.loadbacks_refused,
            "backups_reserved": self.backups_reserved,
            "backups_committed": self.backups_committed,
            "backups_rolled_back": self.backups_rolled_back,
            "write_back_waits": self.write_back_waits,
            "faults": dict(sorted(self.faults.items())),
            "transitions_by_name": dict(sorted(self.by_name.items())),
        }
