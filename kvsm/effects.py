"""Effects: what a transition asks the physical world to do (the model's "Ready").

A transition changes the replicated state; the pages themselves (device memory, the
shared host slab, each rank's disk) are moved by whoever executes the log: the GPU
backend copies real bytes, the simulator counts them. Each effect is a frozen value
emitted by a `Tx` method while the transition runs, in execution order, and carried on
the resulting state (`ClusterState.effects`) without being part of its identity.

Every effect names the rank that performs it, or names pages whose rank follows from
ownership (device page `p` belongs to lane `p mod R`; the page at index `i` of an L2
object belongs to rank `i mod R`); `kvsm.invariants.step_violations` checks that no
effect makes a rank touch another rank's pages or disk.

Where the ranks must agree (a MIN or AND over their progress) is not an effect but a
property of the transition (`Spec.agreement`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, fields
from itertools import repeat
from typing import Any, Callable, ClassVar, Iterable, NamedTuple, Union


class HostPage(NamedTuple):
    """A page of the shared host slab (L2) and the page hash (`kvsm.content`) of what an
    L3 effect moves through it: the content gathered out of it or read into it."""

    host: int
    hash: int


@dataclass(frozen=True, slots=True)
class Fill:
    """The forward pass writes the KV of prefix `content` into device page `page`."""

    kind: ClassVar[str] = "fill"
    page: int
    content: int


@dataclass(frozen=True, slots=True)
class Load:
    """The page's owner copies host page `host_page` (every payload region) into device page
    `page`, for a node that claims the page holds the KV of prefix `claim` (its page
    hash): what whoever executes the load checks the copied bytes against."""

    kind: ClassVar[str] = "load"
    host_page: int
    page: int
    claim: int


@dataclass(frozen=True, slots=True)
class Store:
    """Rank `rank` copies device page `page` into host page `host_page` (every payload region)."""

    kind: ClassVar[str] = "store"
    rank: int
    page: int
    host_page: int


@dataclass(frozen=True, slots=True)
class PoisonDev:
    """Device page `page` is freed: its owner overwrites it so that a stale read shows."""

    kind: ClassVar[str] = "poison_dev"
    page: int


@dataclass(frozen=True, slots=True)
class PoisonHost:
    """Host pages `base .. base+length-1` are freed, indices `index ..` of their object
    (not 0 only where `l2_alloc = "pages"` scatters one); page `base + i` is poisoned by
    rank `(index + i) mod R`."""

    kind: ClassVar[str] = "poison_host"
    base: int
    length: int
    index: int = 0


@dataclass(frozen=True, slots=True)
class SpillGather:
    """Rank `rank` copies its pages of a spilled object out of the slab into its staging."""

    kind: ClassVar[str] = "spill_gather"
    rank: int
    base: int  # the object's first host page: page `base + i` is owned by rank `i mod R`
    pages: tuple[HostPage, ...]


@dataclass(frozen=True, slots=True)
class SpillWrite:
    """Rank `rank` writes its oldest staged copy (pages `hashes`) to its disk; `ok` says
    whether the write succeeds (a failed write stores nothing)."""

    kind: ClassVar[str] = "spill_write"
    rank: int
    hashes: tuple[int, ...]
    ok: bool


@dataclass(frozen=True, slots=True)
class ReloadRead:
    """Rank `rank` reads pages from its disk into the slab; `ok` says whether the read
    succeeds (a failed read writes nothing)."""

    kind: ClassVar[str] = "reload_read"
    rank: int
    base: int  # the object's first host page: page `base + i` is owned by rank `i mod R`
    pages: tuple[HostPage, ...]
    ok: bool


Effect = Union[Fill, Load, Store, PoisonDev, PoisonHost, SpillGather, SpillWrite, ReloadRead]


_new = object.__new__
_consume = deque(maxlen=0).extend  # runs an iterator to its end, keeping nothing


def _batch_maker(cls: type) -> Callable[..., list[Any]]:
    """`lambda *columns: list(map(cls, *columns))` for a frozen slotted effect class,
    several times faster: the instances are made and their slots stored by C-level maps
    (each slot's descriptor stores directly, where the frozen dataclass's `__init__`
    stores each field through `object.__setattr__` in a Python frame). The values are
    the same: equal, equally hashed, of the same class."""
    setters = [cls.__dict__[f.name].__set__ for f in fields(cls)]

    def make(*columns: Iterable[Any]) -> list[Any]:
        n = len(columns[0])  # type: ignore[arg-type]
        out = list(map(_new, repeat(cls, n)))
        for put, col in zip(setters, columns):
            _consume(map(put, out, col))
        return out

    make.__name__ = f"{cls.__name__.lower()}_batch"
    return make


# one effect per page, for a run of pages (`kvsm.tx.Tx.fill_devs`, `Tx.free_dev`)
fill_batch = _batch_maker(Fill)  # fill_batch(pages, contents)
poison_dev_batch = _batch_maker(PoisonDev)  # poison_dev_batch(pages)
store_batch = _batch_maker(Store)  # store_batch(ranks, pages, host_pages)
