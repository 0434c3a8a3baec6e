"""The walk schedule (`kvsm sim --schedule walk`): the model's own seeded random walk
(`kvsm.walk.step`: a transition family drawn by the config's walk weights, then one of
its enabled instances) over the cluster's state, with the workload's requests as its
arrivals, in file order.

Where the other schedules take the steps the reference's scheduler loop would, in some
order of its time, a walk takes any enabled transition of the model at every step: a
request's steps, copy and disk completions, commit calls, evictions of idle victims,
spills, reloads and their expiry, and (only when `--faults` draws the kind) aborts and
disk faults. It is how `kvsm walk` explores the models TLC checks, run on a workload:
with `--workload config-prompts` (the config's own prompts) and one of those configs, it
walks the very model TLC checks, past TLC's bounds on the number of requests.

The walk ends when every request of the workload has arrived and none is alive, when
nothing is enabled, or after `STEPS_PER_REQUEST` steps per request. Where aborts are not
asked for and a request is alive but nothing else is enabled (a write-back insert that
no eviction can make room for), the walk aborts it, as the timed schedule does once a
request has waited `write_back_wait_ms` for room; it is no fault and the walk goes on.

Each step is applied to the log's state as the cluster's step (every rank decides; a
rank that decides otherwise is recorded in the state, invariant 13): there are no
replicas to compare.
"""

from __future__ import annotations

import random
from typing import Any

from ..effects import Load
from ..state import ClusterState
from ..transitions import Transition
from ..walk import names_for, step
from .metrics import depth
from .tenants import arrive_ns

STEPS_PER_REQUEST = 64  # a walk's step budget, per request of its workload


class WalkSchedule:
    """The walk schedule as a part of `Simulation` (kvsm.sim.scheduler)."""

    def run_walk(self: Any) -> None:
        _run_walk(self)


def _run_walk(sim: Any) -> None:
    c = sim.cluster
    w = sim.workload
    m = sim.metrics
    reqs = w.requests
    n = len(reqs)
    weights = dict(sim.cfg.walk_weights)
    # where aborts are not asked for: the only family a stuck walk may still take
    stuck = ({name: 0.0 for name in names_for(sim.cfg)} | {"Abort": 1.0}) if weights.get("Abort", 1.0) == 0 else None
    rng = random.Random(f"kvsm-sim-walk:{sim.seed}")

    def arrival(s: ClusterState) -> Transition | None:
        i = s.next_rid
        if i >= n:
            return None
        r = reqs[i]
        return Transition.make("Arrive", rid=i, tokens=r.hash_ids, out_pages=w.out_pages(r), **arrive_ns(r.ns))

    # request -> [L1 pages its match hit, pages its load-back brought]: counted as admitted
    # once its forward pass is over (Insert or Abort), or at the end
    hits: dict[int, list[int]] = {}

    def admit(rid: int) -> None:
        h1, h2 = hits.pop(rid)
        sim._admitted(rid, rid, h1, h2, False, 0)

    for k in range(STEPS_PER_REQUEST * max(1, n)):
        before = c.log.state
        if before.next_rid >= n and not before.requests:
            break
        nxt = step(before, rng, weights, arrival)
        unstuck = nxt is None and stuck is not None and bool(before.requests)
        if unstuck:
            nxt = step(before, rng, stuck)
        if nxt is None:
            break
        t, after = nxt
        c.tick = k
        c.log.state = after
        c.transitions += 1
        sim._on_apply(t, before, after)
        sim.ticks += 1
        name = t.name
        if name == "Match":
            rid = t.arg("rid")
            hits[rid] = [depth(after, after.requests[rid].node), 0]
        elif name == "LoadBack":
            rid = t.arg("rid")
            if rid in hits:
                hits[rid][1] += sum(1 for e in after.effects if type(e) is Load)  # one a page
        elif name in ("Insert", "Abort"):
            rid = t.arg("rid")
            if rid in hits:
                admit(rid)
            if name == "Abort":
                m.requests_aborted += 1
                if not unstuck:
                    m.faults["abort"] += 1
        elif name == "Finish":
            m.requests_finished += 1
    for rid in sorted(hits):
        admit(rid)
