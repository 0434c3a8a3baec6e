"""What one rank must do for one transition: the model's effects cut into batches.

Pure (no torch), so the rules of ownership and ordering are testable on their own.

Ownership (`kvsm.state.lane_of`): device page `p` belongs to rank `p mod R`; that rank
fills it, loads into it and poisons it. A `store` names its rank, which must own the
page. A freed host object `(base, length)` is poisoned page by page, page `base + i`
by rank `i mod R`, so the ranks share the work and no page is written twice.

L3 (ownership again): a page inside an L2 object belongs to rank `i mod R`, `i` its
index in the object. The L3 effects name their rank and list only its pages:
`SpillGather` (copy slab pages into the rank's staging), `SpillWrite` (write the
oldest staged copy to the rank's disk when ok), `ReloadRead` (read pages from the
rank's disk into slab pages when ok). Each is one batch of that rank, even when it lists
no page: staged copies form a FIFO per rank (the model's `spill_staged`), and the
`spill_write` of an op pops the copy its `spill_gather` pushed.

Ordering: a transition may free a page and reuse it (an `Insert` evicts, then fills
the freed pages), so effects are cut into maximal runs of one effect class, executed
in log order, each run as one batch. Within a run every page is distinct (the model never
fills, loads or frees one page twice in a run), which `plan_rank` checks.

Agreement points are decided by the log (never by a rank's own state), so that a rank
that diverged still meets the others at the same collectives.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import content as prefixes
from ..effects import Effect, Fill, Load, PoisonDev, PoisonHost, ReloadRead, SpillGather, SpillWrite, Store
from ..state import lane_of
from ..transitions import REGISTRY

L3_TYPES = (SpillGather, SpillWrite, ReloadRead)


def agreements(name: str, effects: tuple) -> tuple[bool, bool]:
    """(agree before, agree after) the log line of transition `name` whose effects, as
    the model computes them from the log (never from a rank's own state, so that a rank
    that left the log still meets the others), are `effects`.

    After every agreement of the model (`Spec.agreement`: `Commit`, whose slab pages
    other ranks stored become readable; `ReloadAdmit`, whose slab pages other ranks read
    from their disks become readable, since the admitted node may be loaded back by any
    lane; `SpillAck`, which releases pins and decides durability only once every rank's
    gathers and disk writes are done), and after a replicated transition that stores (a
    `LoadBack` whose write-backs commit in the step). Around every transition that frees host pages:
    ranks run ahead of each other between agreements, so a freed host page could be
    poisoned by one rank while a slower one still loads or gathers its old content (the
    barrier before orders every earlier read before the poison), or a poison could land
    after another rank already stored or reloaded new content into the reused page (the
    barrier after orders the poison before every later write).
    """
    frees_host = any(isinstance(e, PoisonHost) for e in effects)
    spec = REGISTRY.get(name)
    # a replicated step that stores commits what it stored in the same step (the write-back
    # of a LoadBack under write_back_evict = "sync"): other ranks may read it from then on
    commits_stores = spec is not None and not spec.per_rank and any(isinstance(e, Store) for e in effects)
    return frees_host, frees_host or commits_stores or (spec is not None and spec.agreement)


class PlanError(ValueError):
    """The model's effects break an assumption of the backend; the message says which."""


@dataclass
class Batch:
    """One batched operation for one rank: a run of effects of the class `op`.

    `dev` are global device page ids (all in this rank's lane), `host` host page ids
    (same index as `dev` for loads and stores), `content` the identity each page must
    hold afterwards (fills, loads, reloads) or holds before (stores, gathers); None
    means poisoned. L3 batches carry the page `hashes` (same index as `host`) and the
    model's `ok` bit of the disk operation.
    """

    op: type[Effect]
    dev: list[int] = field(default_factory=list)
    host: list[int] = field(default_factory=list)
    content: list[int | None] = field(default_factory=list)
    hashes: list[int] = field(default_factory=list)
    ok: bool = True

    def __len__(self) -> int:
        return max(len(self.dev), len(self.host), len(self.hashes))


def plan_rank(state: Any, rank: int) -> list[Batch]:
    """This rank's batches for the transition that produced `state`, in execution order.

    `content` comes from the model's ghost in `state` (after the transition): the
    identity the model claims each page holds, except for a load, where it is what
    the node the page is loaded for claims (`Load.claim`; the ghost then says what
    the host page really held, which a correct model makes the same). A rank that
    owns nothing in a run gets no batch for it.
    """
    R = state.config.R
    out: list[Batch] = []
    run: type[Effect] | None = None
    seen: set[int] = set()
    cur: Batch | None = None
    for eff in state.effects:
        if isinstance(eff, L3_TYPES):
            run, seen, cur = None, set(), None  # one batch per L3 effect: one op each
            b = _l3_batch(state, eff)
            if eff.rank == rank:
                out.append(b)
            continue
        if type(eff) is not run:
            run, seen, cur = type(eff), set(), None
        match eff:
            case PoisonHost(base=base, length=length, index=index):
                mine = [base + i for i in range((rank - index) % R, length, R)]
                if not mine:
                    continue
                cur = _batch(out, cur, PoisonHost)
                for h in mine:
                    if h in seen:
                        raise PlanError(f"host page {h} is freed twice in one transition")
                    seen.add(h)
                cur.host.extend(mine)
                continue
            case Store(rank=by, page=page, host_page=host_page):
                if lane_of(page, R) != by:
                    raise PlanError(f"store by rank {by} names device page {page} of lane {lane_of(page, R)}")
                if by != rank:
                    continue
                key = host_page
                cur = _batch(out, cur, Store)
                cur.dev.append(page)
                cur.host.append(host_page)
                # what the page held when it was stored is what its host page holds after
                # the step (a write-back inside a LoadBack evicts and poisons the page in
                # the same step, so the device ghost after it no longer says)
                cur.content.append(state.host_content.get(host_page))
            case Fill(page=page) | Load(page=page) | PoisonDev(page=page):
                if lane_of(page, R) != rank:
                    continue
                key = page
                cur = _batch(out, cur, type(eff))
                cur.dev.append(page)
                if isinstance(eff, Fill):
                    cur.content.append(eff.content)
                elif isinstance(eff, Load):
                    cur.host.append(eff.host_page)
                    # what the node the page is loaded for claims it holds: the bytes that land
                    # must be that prefix's KV (in a correct model the same as the ghost's)
                    cur.content.append(eff.claim)
            case _:
                raise PlanError(f"unknown effect {eff!r}")
        if key in seen:
            raise PlanError(f"{eff.kind} names page {key} twice in one run of effects")
        seen.add(key)
    return out


def _l3_batch(state: Any, eff: SpillGather | SpillWrite | ReloadRead) -> Batch:
    """The batch of an L3 effect for the rank it names, checked against the model's
    ghost of the state after it (checked for every rank alike, so that a bad effect is
    refused everywhere)."""
    kind, r = eff.kind, eff.rank
    R = state.config.R
    if not (isinstance(r, int) and 0 <= r < R):
        raise PlanError(f"{kind} names rank {r!r}, not one of 0..{R - 1}")
    match eff:
        case SpillGather(pages=pages):
            staged = state.spill_staged[r][-1] if state.spill_staged[r] else None
            hashes = [p.hash for p in pages]
            if staged is None or [h for h, _ in staged] != hashes:
                raise PlanError(f"spill_gather of rank {r} lists hashes {_hex(hashes)} but the model staged {_hex([h for h, _ in staged or ()])}")
            content = [c for _, c in staged]
            if None in content:
                raise PlanError(f"spill_gather of rank {r} copies host page {pages[content.index(None)].host}, which the model says holds nothing")
            b = Batch(op=SpillGather, host=[p.host for p in pages], content=content, hashes=hashes)
        case SpillWrite(hashes=hashes, ok=ok):
            b = Batch(op=SpillWrite, hashes=list(hashes), ok=bool(ok))
        case ReloadRead(pages=pages, ok=ok):
            b = Batch(op=ReloadRead, host=[p.host for p in pages], hashes=[p.hash for p in pages], ok=bool(ok))
            if b.ok:
                _check_reload(state, r, b)
    keys = b.host if b.host else b.hashes
    if len(set(keys)) != len(keys):
        raise PlanError(f"{kind} of rank {r} names a page twice: {eff!r}")
    return b


def _check_reload(state: Any, r: int, b: Batch) -> None:
    """A successful reload of rank `r`: the content the model gives its slab pages is what
    the hashes it reads hold on disk, in every payload region; `b.content` becomes what
    they must hold, the KV the hashes name in the reload's namespace (the same under
    `l3_key = "namespace"`; under "tokens" a disk entry another namespace wrote under the
    key holds other bytes, which the read's check then names: invariant 15)."""
    cfg = state.config
    L2, by_tokens = cfg.L2, cfg.l3_by_tokens
    k = len(state.reload_done[r]) - 1
    ns = state.reloads[k].ns if 0 <= k < len(state.reloads) else 0
    ghost = [state.host_content.get(p) for p in b.host]
    for h, c, p in zip(b.hashes, ghost, b.host):
        if not prefixes.key_holds(by_tokens, h, c):
            raise PlanError(f"reload_read of rank {r} reads hash 0x{h:016x} into host page {p}, but the model says the page then holds {_hex([c])}")
    if any(state.host_content.get(x * L2 + p) != c for x in range(1, len(cfg.payloads)) for p, c in zip(b.host, ghost)):
        raise PlanError(f"reload_read of rank {r}: the model's payload regions disagree on its host pages")
    b.content = list(prefixes.l3_contents(by_tokens, ns, tuple(b.hashes)))


def _hex(xs: list[int | None]) -> str:
    return "[" + ", ".join("none" if x is None else f"0x{x:016x}" for x in xs) + "]"


def _batch(out: list[Batch], cur: Batch | None, op: type[Effect]) -> Batch:
    if cur is None:
        cur = Batch(op=op)
        out.append(cur)
    return cur


__all__ = ["Batch", "PlanError", "agreements", "plan_rank"]
