"""What every invariant's module shares: the names, the message format, the contract
config, and the context of a whole-state check (`Whole`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..config import Config
from ..state import ClusterState

NAMES = {
    1: "Tree",
    2: "Residency",
    3: "Locks",
    4: "Pending",
    5: "DevicePages",
    6: "HostPages",
    7: "Content",
    8: "Durable",
    9: "Reload",
    10: "Counts",
    11: "Ownership",
    12: "Collectives",
    13: "Agreement",
    14: "Running",
    15: "Isolation",
}
INVARIANTS = tuple(f"{i} {NAMES[i]}" for i in sorted(NAMES))
# the invariants of a state (every one but 11, Ownership, which is of a transition)
STATE_INVARIANTS = tuple(k for k in INVARIANTS if not k.startswith("11 "))


def label(i: int, msg: str) -> str:
    """A violation of invariant `i` as every check reports it: "3 Locks: ..."."""
    return f"{i} {NAMES[i]}: {msg}"


def contract(cfg: Config) -> Config:
    """The config without its injected defect: what the contract says of a predicate that
    a defect changes in the model (the derived indexes follow the model's own, which
    invariant 10 checks)."""
    return replace(cfg, bug="none") if cfg.bug != "none" else cfg


def copying(s: ClusterState) -> frozenset[int]:
    """Device pages a load-back still copies on their owner rank (they hold nothing yet:
    they were free, so poisoned, and nothing else writes them until the copy lands)."""
    R = s.config.R
    return frozenset(p for k, op in enumerate(s.loads) for p, _ in op.pages if k >= s.load_done[p % R])


class Report:
    """The violations found, in the order found."""

    __slots__ = ("out",)

    def __init__(self) -> None:
        self.out: list[str] = []

    def bad(self, i: int, msg: str) -> None:
        self.out.append(label(i, msg))

    def has(self, i: int) -> bool:
        """Whether a violation of invariant `i` was found already."""
        head = f"{i} "
        return any(v.startswith(head) for v in self.out)


def prepared_ids(s: ClusterState) -> set[int]:
    """The node ids of the prepared backups not attached yet (each holds a write and an
    uncommitted object keyed by that id)."""
    return {nid for nid in s.prepared.values() if nid is not None}


class Whole(Report):
    """A whole-state check of `s` under way: what the rules read of the state and what
    one rule found that a later one reads (the device pages' holders, `owner`)."""

    __slots__ = ("s", "cfg", "bare", "nodes", "R", "L2", "owner", "_prepared")

    def __init__(self, s: ClusterState) -> None:
        super().__init__()
        self.s = s
        self.cfg = s.config
        self.bare = contract(s.config)
        self.nodes = s.nodes
        self.R, self.L2 = s.config.R, s.config.L2
        self.owner: dict[int, str] = {}  # device page -> who holds it (invariant 5 fills it)
        self._prepared: Any = None

    @property
    def prepared(self) -> set[int]:
        if self._prepared is None:
            self._prepared = prepared_ids(self.s)
        return self._prepared

    @property
    def copying(self) -> frozenset[int]:
        return copying(self.s)

    def chain_of(self, nid: int) -> tuple[int, ...]:
        """The tokens of a node's prefix, root first."""
        syms: list[int] = []
        for a in reversed(self.s.path_to_root(nid)):
            syms.extend(self.nodes[a].key)
        return tuple(syms)
