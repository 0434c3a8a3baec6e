"""The record types of a `ClusterState` other than `Node` (`kvsm.state`): L2 objects
(`Obj`), pending backups (`Pending`), requests (`Request`), and the in-flight operations
(`SpillOp`, `Candidate`, `ReloadOp`, `LoadOp`), each a frozen dataclass with slots,
copied with `with_(**changes)` and encoded for the digest by `encode`; and the helpers
on their keys and pages (`page_runs`, `reload_object_key`). `kvsm.state` re-exports
every public name here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def _tup(t: tuple) -> str:
    return ",".join(map(str, t))


class _Record:
    """`with_` for the record types other than `Node` (which has one of its own, written
    out): what `dataclasses.replace` does, built as a draft of the record's slots
    (`_record_with`) and turned into the record's class."""

    __slots__ = ()

    def with_(self, **changes: Any):
        w = _RECORD_WITH.get(type(self))
        if w is None:
            w = _RECORD_WITH[type(self)] = _record_with(type(self))
        return w(self, changes)


_RECORD_WITH: dict[type, Any] = {}


def _record_with(cls: type) -> Any:
    """`with_(record, changes)` for record class `cls` (a frozen dataclass with slots):
    one plain store per slot into a draft with the same slots (so the same layout), then
    the draft becomes a `cls`. An unknown field is refused as `replace` refuses it."""
    fields = cls.__slots__
    draft = type(f"_{cls.__name__}Draft", cls.__bases__, {"__slots__": fields})
    src = (
        "def with_(self, c):\n"
        "    new = _new(_Draft)\n"
        + "".join(f"    new.{f} = c.pop({f!r}, self.{f})\n" for f in fields)
        + "    if c:\n"
        + "        raise TypeError(f'{_cls.__name__} has no field {next(iter(c))!r}')\n"
        + "    new.__class__ = _cls\n    return new\n"
    )
    scope = {"_new": object.__new__, "_Draft": draft, "_cls": cls}
    exec(src, scope)
    return scope["with_"]


@dataclass(frozen=True, slots=True)
class Obj(_Record):
    """An L2 object: `length` host pages per payload region, the same in each. Under
    `l2_alloc = "run"` one contiguous run from `base` (`pages` empty); under `"pages"`
    the pages `pages` in the object's order (any free pages, lowest first), `base` the
    first of them."""

    base: int
    length: int
    committed: bool
    owner: int  # node id of the backup it holds
    pages: tuple[int, ...] = ()

    def page(self, i: int) -> int:
        """The host page of index `i` (0-based) of the object."""
        if self.pages:
            return self.pages[i] if 0 <= i < len(self.pages) else -1
        return self.base + i

    def page_list(self) -> tuple[int, ...] | range:
        """Its host pages in the object's order."""
        return self.pages or range(self.base, self.base + self.length)

    def slice(self, start: int, length: int, owner: int) -> "Obj":
        """Its `length` pages from index `start`, owned by `owner` (a split's part)."""
        if self.pages:
            ps = self.pages[start : start + length]
            return Obj(ps[0], length, self.committed, owner, ps)
        return Obj(self.base + start, length, self.committed, owner)

    def encode(self) -> str:
        # the page list only under l2_alloc = "pages", so that run objects keep their bytes
        pages = f"|P{_tup(self.pages)}" if self.pages else ""
        return f"O{self.base}|{self.length}|{int(self.committed)}|{self.owner}{pages}"


@dataclass(frozen=True, slots=True)
class Pending(_Record):
    obj: int
    locked: bool

    def encode(self) -> str:
        return f"B{self.obj}|{int(self.locked)}"


@dataclass(frozen=True, slots=True)
class Request(_Record):
    id: int
    tokens: tuple[int, ...]  # page symbols of its cacheable prompt
    out_pages: int  # pages it holds while decoding (output tokens and the sub-page tail)
    phase: str
    node: int  # where its lock sits (root = none)
    pages: tuple[int, ...]  # device pages it holds itself (allocated at Insert)
    reload_tried: bool = False  # an L3 reload is looked up once per request
    # under carry_host_hit, the host hit its Match recorded for a later LoadBack: its
    # deepest node (root = none), its pages, and whether the match pinned that node
    hit: int = 0
    hit_pages: int = 0
    hit_pin: bool = False
    ns: int = 0  # its namespace (tenant, adapter): its match never leaves it

    BULKY = "tokens"

    def encode(self) -> str:
        tried = "|R" if self.reload_tried else ""
        # written only while a hit is carried, so that other requests keep their bytes
        hit = f"|H{self.hit}:{self.hit_pages}:{int(self.hit_pin)}" if self.hit else ""
        # and the namespace only when it is not 0
        ns = f"|N{self.ns}" if self.ns else ""
        return f"Q{self.id}|{self.out_pages}|{self.phase}|{self.node}|{_tup(self.pages)}{tried}{hit}{ns}"


@dataclass(frozen=True, slots=True)
class SpillOp(_Record):
    """An in-flight spill of a committed L2 object to every rank's disk. The object stays
    pinned until every rank has gathered its pages (`pinned`)."""

    obj: int
    node: int
    hashes: tuple[int, ...]
    pinned: bool

    def encode(self) -> str:
        return f"S{self.obj}|{self.node}|{_tup(self.hashes)}|{int(self.pinned)}"


@dataclass(frozen=True, slots=True)
class Candidate(_Record):
    """A queued request whose key misses the radix tree below `anchor`, marked for an L3
    reload of `tokens` (whose page hashes, L3 keys, are `hashes`) in namespace `ns`."""

    anchor: int
    tokens: tuple[int, ...]
    hashes: tuple[int, ...]
    ns: int = 0  # the request's namespace (written only when not 0)

    def encode(self) -> str:
        ns = f"|N{self.ns}" if self.ns else ""
        return f"C{self.anchor}|{_tup(self.tokens)}|{_tup(self.hashes)}{ns}"


@dataclass(frozen=True, slots=True)
class ReloadOp(_Record):
    """An in-flight reload from L3 into the reserved, uncommitted L2 object `obj`.
    `key` is the hash of its last page (identical reloads share one op)."""

    key: int
    obj: int
    anchor: int
    tokens: tuple[int, ...]
    hashes: tuple[int, ...]
    waiters: tuple[int, ...]
    ttl: int
    ns: int = 0  # the namespace of the request that made it, its node's (written only when not 0)

    def encode(self) -> str:
        ns = f"|N{self.ns}" if self.ns else ""
        return f"L{self.key}|{self.obj}|{self.anchor}|{_tup(self.tokens)}|{_tup(self.hashes)}|{_tup(self.waiters)}|{self.ttl}{ns}"


@dataclass(frozen=True, slots=True)
class LoadOp(_Record):
    """An in-flight load-back: device page `page` receives host page `host_page` for each
    `(page, host_page)` in `pages`, copied by the page's owner rank (lane). The load locks
    the path from `node` (the deepest loaded node) up to the root until every rank's copy
    is done."""

    node: int
    pages: tuple[tuple[int, int], ...]

    def encode(self) -> str:
        return f"D{self.node}|" + ",".join(f"{p}:{h}" for p, h in self.pages)


def page_runs(pages: Any) -> list[tuple[int, int]]:
    """Pages as maximal runs `(base, length)` of consecutive pages, in their order."""
    out: list[tuple[int, int]] = []
    for p in pages:
        if out and out[-1][0] + out[-1][1] == p:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((p, 1))
    return out


def reload_object_key(key: int) -> int:
    """Reload objects are keyed apart from node ids (which are >= 0)."""
    return -(key + 1)
