"""What one rank must do for one transition: the model's effects cut into batches.

Pure (no torch), so the rules of ownership and ordering are testable on their own.

Ownership (MODEL.md section 4): device page `p` belongs to rank `p mod R`; that rank
fills it, loads into it and poisons it. A `store` names its rank, which must own the
page. A freed host object `(base, length)` is poisoned page by page, page `base + i`
by rank `i mod R`, so the ranks share the work and no page is written twice.

Ordering: a transition may free a page and reuse it (an `Insert` evicts, then fills
the freed pages), so effects are cut into maximal runs of one kind, executed in log
order, each run as one batch. Within a run every page is distinct (the model never
fills, loads or frees one page twice in a run), which `plan_rank` checks.

Agreement points are decided by the log (never by a rank's own state), so that a rank
that diverged still meets the others at the same collectives.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

def agreements(name: str, effects: tuple[tuple, ...]) -> tuple[bool, bool]:
    """(agree before, agree after) the log line of transition `name` whose effects, as
    the model computes them from the log (never from a rank's own state, so that a rank
    that left the log still meets the others), are `effects`.

    After every `Commit`: the model's agreement; slab pages other ranks stored become
    readable. Around every transition that frees host pages: ranks run ahead of each
    other between agreements, so a freed host page could be poisoned by one rank while
    a slower one still loads its old content (the barrier before orders every earlier
    load before the poison), or a poison could land after another rank already stored
    new content into the reused page (the barrier after orders the poison before every
    later store).
    """
    frees_host = any(e[0] == "poison_host" for e in effects)
    return frees_host, frees_host or name == "Commit"


class PlanError(ValueError):
    """The model's effects break an assumption of the backend; the message says which."""


@dataclass
class Batch:
    """One batched operation of one kind for one rank.

    `dev` are global device page ids (all in this rank's lane), `host` host page ids
    (same index as `dev` for loads and stores), `content` the identity each page must
    hold afterwards (fills, loads) or holds before (stores); None means poisoned.
    """

    kind: str  # "fill" | "load" | "store" | "poison_dev" | "poison_host"
    dev: list[int] = field(default_factory=list)
    host: list[int] = field(default_factory=list)
    content: list[int | None] = field(default_factory=list)

    def __len__(self) -> int:
        return max(len(self.dev), len(self.host))


def plan_rank(state: Any, rank: int) -> list[Batch]:
    """This rank's batches for the transition that produced `state`, in execution order.

    `content` comes from the model's ghost in `state` (after the transition): the
    identity the model claims each page holds. A rank that owns nothing in a run gets
    no batch for it.
    """
    cfg = state.config
    R = cfg.R
    out: list[Batch] = []
    run_kind: str | None = None
    seen: set[int] = set()
    cur: Batch | None = None
    for eff in state.effects:
        kind = eff[0]
        if kind != run_kind:
            run_kind, seen, cur = kind, set(), None
        if kind == "fill":
            _, page, c = eff
            if page % R != rank:
                continue
            key = page
            cur = _batch(out, cur, kind)
            cur.dev.append(page)
            cur.content.append(c)
        elif kind == "load":
            _, host_page, page = eff
            if page % R != rank:
                continue
            key = page
            cur = _batch(out, cur, kind)
            cur.dev.append(page)
            cur.host.append(host_page)
            cur.content.append(state.dev_content.get(page))
        elif kind == "store":
            _, r, page, host_page = eff
            if page % R != r:
                raise PlanError(f"store by rank {r} names device page {page} of lane {page % R}")
            if r != rank:
                continue
            key = host_page
            cur = _batch(out, cur, kind)
            cur.dev.append(page)
            cur.host.append(host_page)
            cur.content.append(state.dev_content.get(page))
        elif kind == "poison_dev":
            _, page = eff
            if page % R != rank:
                continue
            key = page
            cur = _batch(out, cur, kind)
            cur.dev.append(page)
        elif kind == "poison_host":
            _, base, length = eff
            mine = [base + i for i in range(rank, length, R)]
            if not mine:
                continue
            cur = _batch(out, cur, kind)
            for h in mine:
                if h in seen:
                    raise PlanError(f"host page {h} is freed twice in one transition")
                seen.add(h)
            cur.host.extend(mine)
            continue
        else:
            raise PlanError(f"unknown effect {eff!r}")
        if key in seen:
            raise PlanError(f"{kind} names page {key} twice in one run of effects")
        seen.add(key)
    return out


def _batch(out: list[Batch], cur: Batch | None, kind: str) -> Batch:
    if cur is None:
        cur = Batch(kind)
        out.append(cur)
    return cur


__all__ = ["Batch", "PlanError", "agreements", "plan_rank"]
