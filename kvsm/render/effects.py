"""What a step asked the world to do (its effects, kvsm.effects) as lines a person reads
under the step: one line per batch of consecutive effects of the same kind, in the
order the transition emitted them, written in the view's words (device page
`p5(r1)`, host page `h3`, content `[1,2]`).

    fill p0(r0)←[1] p1(r1)←[1,2]        the forward pass writes that KV into those pages
    load p2(r0)←h0 p3(r1)←h1            a load-back copies host pages into device pages
    store h0←p0(r0)                      a backup copies device pages into host pages
    poison p0(r0) p1(r1)                 freed device pages are overwritten
    poison h0..1                         freed host pages are overwritten
    gather r0 [1]←h0                     a rank copies its pages of a spill into its staging
    disk write r0 [1] [1,2]              a rank writes its staged pages to its disk (+ failed)
    disk read r0 h0←[1]                  a rank reads pages from its disk into the slab (+ failed)

A copy done by another rank than the page's owner (only under an injected defect)
says so: `h0←p1(r1) by r0`.
"""

from __future__ import annotations

from typing import Iterable

from ..effects import Effect, Fill, Load, PoisonDev, PoisonHost, ReloadRead, SpillGather, SpillWrite, Store
from .names import Names, clip, host_range, page

# kinds whose consecutive effects are written on one line
_BATCHED = (Fill.kind, Load.kind, Store.kind, PoisonDev.kind, PoisonHost.kind)


def _by(rank: int, p: int, R: int) -> str:
    """Who copies device page p, where it is not the page's owner (a defect)."""
    return "" if rank == p % R else f" by r{rank}"


def _batch_line(kind: str, batch: list[Effect], names: Names, R: int) -> str:
    if kind == Fill.kind:
        return "fill " + clip([f"{page(e.page, R)}←{names.show(e.content)}" for e in batch])
    if kind == Load.kind:
        return "load " + clip([f"{page(e.page, R)}←h{e.host_page}" for e in batch])
    if kind == Store.kind:
        return "store " + clip([f"h{e.host_page}←{page(e.page, R)}{_by(e.rank, e.page, R)}" for e in batch])
    if kind == PoisonDev.kind:
        return "poison " + clip([page(e.page, R) for e in batch])
    return "poison " + clip([host_range(e.base, e.length) for e in batch])


def _line(e: Effect, names: Names) -> str:
    if isinstance(e, SpillGather):
        return f"gather r{e.rank} " + (clip([f"{names.show(p.hash)}←h{p.host}" for p in e.pages]) or "nothing")
    if isinstance(e, SpillWrite):
        return f"disk write r{e.rank} " + (clip([names.show(h) for h in e.hashes]) or "nothing") + ("" if e.ok else " failed")
    if isinstance(e, ReloadRead):
        pages = clip([f"h{p.host}←{names.show(p.hash)}" for p in e.pages]) or "nothing"
        return f"disk read r{e.rank} {pages}" + ("" if e.ok else " failed")
    return f"{e.kind} {e!r}"  # a kind this renderer does not know yet: shown raw, never hidden


def effect_lines(effects: Iterable[Effect], names: Names, R: int) -> list[str]:
    """The lines of a step's effects (none: no line)."""
    out: list[str] = []
    batch: list[Effect] = []
    for e in effects:
        if batch and (e.kind != batch[0].kind):
            out.append(_batch_line(batch[0].kind, batch, names, R))
            batch = []
        if e.kind in _BATCHED:
            batch.append(e)
        else:
            out.append(_line(e, names))
    if batch:
        out.append(_batch_line(batch[0].kind, batch, names, R))
    return out
