"""Workloads with tenants (docs/sim.md, "Tenants"): a request's namespace, the trace field
that names it, `--tenants N --tenant-mix X` over any workload, and the two runs that price
isolation.

A namespace is an int >= 0; 0 is a workload without tenants. Each request runs in its
namespace (`Arrive`'s `ns`, passed by `arrive_ns`, the one place that does), and the
model keeps namespaces apart on every tier where its knobs say the serving engine does:
the *isolated* run is the workload as it is, and two namespaces with the same block ids
share no page unless a tier's key ignores the namespace (`l3_key = "tokens"`, or an
injected defect), which the Isolation invariant then reports. The *shared* baseline is
the same requests with every namespace 0 (`shared`).
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

from .trace import Workload, WorkloadError

MAX_TENANTS = 4096  # `--tenants`


def namespaces(w: Workload) -> list[int]:
    """The namespaces of `w`'s requests, each once, smallest first."""
    return sorted({r.ns for r in w.requests})


def check_tenants(n: int, mix: float | None) -> None:
    """`--tenants` and `--tenant-mix`: a ValueError naming the option and why."""
    if not 1 <= n <= MAX_TENANTS:
        raise ValueError(f"--tenants {n}: must be 1..{MAX_TENANTS}")
    if mix is not None and not 0.0 <= mix <= 1.0:
        raise ValueError(f"--tenant-mix {mix:g}: must be a fraction in [0, 1]")


def with_tenants(w: Workload, n: int, mix: float, seed: int) -> Workload:
    """`w`'s requests spread over `n` tenants (namespaces 0..n-1), a fraction `mix` of
    them on prompts every tenant shares, the rest on prompts private to their tenant.
    `n == 1` is `w` itself.

    - A request's tenant: that of the latest earlier request whose whole prompt its own
      extends (the next turn of a conversation stays with its tenant); otherwise drawn
      uniformly, from the seed alone (so `mix` changes the sharing only).
    - A prompt family: the requests whose first block id is the same (one system prompt,
      one document, one conversation's opening). The families, in an order drawn from
      the seed, are shared until they hold at least `mix` of the requests: 0 shares
      none, 1 all. A shared family keeps its block ids (every tenant that uses it has the
      same blocks); a private family's ids are renumbered per tenant (fresh ids above
      the workload's, first use first), so it shares only inside its tenant."""
    if n == 1:
        return w
    reqs = w.requests
    draw = random.Random(f"kvsm-sim-tenants:{seed}")
    tenant: list[int] = []
    ends: dict[tuple[int, int], int] = {}  # (prompt length, last block id) -> its tenant
    for r in reqs:
        ids = r.hash_ids
        t = None
        for k in range(len(ids), 0, -1):
            t = ends.get((k, ids[k - 1]))
            if t is not None:
                break
        if t is None:
            t = draw.randrange(n)
        tenant.append(t)
        if ids:
            ends[(len(ids), ids[-1])] = t
    families: dict[int, int] = {}  # first block id -> requests, in first-use order
    for r in reqs:
        if r.hash_ids:
            families[r.hash_ids[0]] = families.get(r.hash_ids[0], 0) + 1
    order = list(families)
    random.Random(f"kvsm-sim-tenant-mix:{seed}").shuffle(order)
    shared_families: set[int] = set()
    covered = 0
    for f in order:
        if covered >= mix * len(reqs):
            break
        shared_families.add(f)
        covered += families[f]
    fresh = _Fresh(w)
    out = []
    for r, t in zip(reqs, tenant):
        ids = r.hash_ids
        if ids and ids[0] not in shared_families:
            ids = tuple(fresh.id((t, h)) for h in ids)
        out.append(replace(r, hash_ids=ids, ns=t))
    info = (("tenants", n), ("tenant_mix", mix), ("shared_requests", covered))
    return replace(w, requests=tuple(out), tenants=info)


def shared(w: Workload) -> Workload:
    """`w` with every request in namespace 0 (its block ids as they are): the baseline
    whose hit rate isolation is priced against."""
    return replace(w, requests=tuple(replace(r, ns=0) if r.ns else r for r in w.requests))


class _Fresh:
    """Fresh block ids above a workload's largest, numbered in first-use order."""

    def __init__(self, w: Workload) -> None:
        self.next = 1 + max((h for r in w.requests for h in r.hash_ids), default=-1)
        self.ids: dict[Any, int] = {}
        self.where = w.source

    def id(self, key: Any) -> int:
        v = self.ids.get(key)
        if v is None:
            from ..bounds import MAX_HASH_ID

            if self.next > MAX_HASH_ID:
                raise WorkloadError(self.where, None, f"tenants: renumbered block ids pass the largest page symbol {MAX_HASH_ID}")
            v = self.ids[key] = self.next
            self.next += 1
        return v


def per_namespace(w: Workload, request_hits: list[tuple[int, int, int, int]]) -> dict[int, dict[str, Any]]:
    """Per namespace of `w`: requests admitted, pages, hit pages and the block and token
    hit rates (as `kvsm sim`'s `hit_rate_blocks` and `hit_rate_tokens`)."""
    bt = w.block_tokens
    acc: dict[int, list[int]] = {}
    for index, h1, h2, h3 in request_hits:
        r = w.requests[index]
        a = acc.setdefault(r.ns, [0, 0, 0, 0, 0])
        hits = h1 + h2 + h3
        a[0] += 1
        a[1] += len(r.hash_ids)
        a[2] += hits
        a[3] += r.input_length
        a[4] += min(hits * bt, r.input_length)
    names = dict(w.namespace_names)
    return {
        ns: {
            **({"name": names[ns]} if ns in names else {}),
            "requests": n,
            "pages_total": pages,
            "pages_hit": hit,
            "hit_rate_blocks": round(hit / pages, 6) if pages else 0.0,
            "hit_rate_tokens": round(toks_hit / toks, 6) if toks else 0.0,
        }
        for ns, (n, pages, hit, toks, toks_hit) in sorted(acc.items())
    }


def tenant_summary(w: Workload, isolated: dict[str, Any], isolated_hits: list, base: dict[str, Any], base_hits: list) -> dict[str, Any]:
    """The summary's `tenants`: the isolated run's and the shared baseline's hit rates,
    over all and per namespace, and the price of isolation (shared minus isolated).
    The baseline's per-namespace rates count its requests by the namespace they have
    in the isolated run (`w`'s)."""
    iso_ns, base_ns = per_namespace(w, isolated_hits), per_namespace(w, base_hits)
    out: dict[str, Any] = dict(w.tenants)
    out["namespaces"] = len(namespaces(w))
    out["isolated"] = {"hit_rate_blocks": isolated["hit_rate_blocks"], "hit_rate_tokens": isolated["hit_rate_tokens"]}
    out["shared"] = {"hit_rate_blocks": base["hit_rate_blocks"], "hit_rate_tokens": base["hit_rate_tokens"]}
    out["price_of_isolation"] = {k: round(base[f"hit_rate_{k}"] - isolated[f"hit_rate_{k}"], 6) for k in ("blocks", "tokens")}
    out["per_namespace"] = {
        str(ns): {**d, "shared_hit_rate_blocks": base_ns.get(ns, {}).get("hit_rate_blocks", 0.0), "shared_hit_rate_tokens": base_ns.get(ns, {}).get("hit_rate_tokens", 0.0)}
        for ns, d in iso_ns.items()
    }
    return out


def arrive_ns(ns: int) -> dict[str, int]:
    """The namespace argument of an `Arrive` transition: `{"ns": ns}` where the request has
    one (not 0); otherwise none, so that a workload
    without tenants writes the log it always did."""
    return {"ns": ns} if ns else {}
