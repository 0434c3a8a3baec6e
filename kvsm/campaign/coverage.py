"""What a run exercised, and what a campaign did in total.

Per run (`Coverage`, fed every transition of the log with the state before and after):

- `transitions`: how many times each transition was taken;
- `guards`: each transition's guard outcomes in the states the run reached: every
  `PROBE_EVERY` transitions (and after the first), up to `PROBE_CANDIDATES` instances of
  every transition the config can take are tried on the state, and each is counted as
  `enabled` or `rejected: <reason>` (the `Rejected` message with its numbers written `N`,
  so that one reason counts once whatever node or page it names);
- `faults`: the faults the simulator injected, per kind;
- `invariants`: how many times each invariant was evaluated, from scratch (`full`) and
  after a transition from what it wrote (`step`) (`kvsm.checking.Stats`);
- `scenarios`: the edges of the spec's scenario list (docs/tla.md) the run took, each
  recognised from the transition and the states around it (`SCENARIOS`);
- `pairs`: how many times each ordered pair of transition kinds `a>b` was taken, b right
  after a in the log (on the same request or another).

`merge` adds runs' coverages into a campaign's; `against_graph` compares a campaign's
kinds and pairs with those of the state graph of `small` (`kvsm.campaign.spec_graph`).
"""

from __future__ import annotations

import re
from itertools import islice
from typing import Any, Callable

from ..state import ClusterState, Rejected, lane_of
from ..transitions import NAMES, REGISTRY, Transition, names_for

PROBE_EVERY = 16
PROBE_CANDIDATES = 3


def reason_key(message: str) -> str:
    """A rejection reason without the numbers that name its node, page or request."""
    s = re.sub(r"\[[^\]]*\]", "[...]", message)
    s = re.sub(r"\{[^}]*\}", "{...}", s)
    s = re.sub(r"\b[0-9a-f]{9,}\b", "H", s)
    return re.sub(r"-?\d+", "N", s)


# ---- the scenario list of docs/tla.md -----------------------------------------------------------


def _new_nodes(b: ClusterState, a: ClusterState) -> bool:
    return a.next_id > b.next_id


def _newly_durable(b: ClusterState, a: ClusterState, nid: int) -> bool:
    now, was = a.nodes.get(nid), b.nodes.get(nid)
    return now is not None and now.durable and (was is None or not was.durable)


def _spill_durable(b: ClusterState, t: Transition, a: ClusterState) -> bool:
    return any(_newly_durable(b, a, op.node) for op in b.spills)


def _ack_of_failed_write(b: ClusterState, t: Transition, a: ClusterState) -> bool:
    """The head op was written by every rank, not ok on some, and nothing became durable from it."""
    if not b.spills or not all(b.spill_done) or all(done[0] for done in b.spill_done):
        return False
    return not _newly_durable(b, a, b.spills[0].node)


def _candidate_of(b: ClusterState, a: ClusterState, t: Transition):
    return b.reload_candidates.get(t.arg("rid"))


def _claims_fewer(b: ClusterState, t: Transition, a: ClusterState) -> bool:
    cand = _candidate_of(b, a, t)
    rid = t.arg("rid")
    return cand is not None and any(rid in op.waiters and len(op.hashes) < len(cand.hashes) for op in a.reloads)


def _misaligned(b: ClusterState, t: Transition, a: ClusterState) -> bool:
    """The first page of the candidate that its owner lacks is on another rank's disk."""
    cand = _candidate_of(b, a, t)
    if cand is None:
        return False
    R = b.config.R
    for i, h in enumerate(cand.hashes):
        if (lane_of(i, R), h) not in b.l3:
            return any((r, h) in b.l3 for r in range(R))
    return False


def _joined(b: ClusterState, t: Transition, a: ClusterState) -> bool:
    keys = {op.key: op for op in b.reloads}
    return any(op.key in keys and len(op.waiters) > len(keys[op.key].waiters) for op in a.reloads)


def _admitted(b: ClusterState, t: Transition, a: ClusterState) -> bool:
    if not _new_nodes(b, a):
        return False
    n = a.nodes.get(b.next_id)
    return n is not None and n.durable and not n.dev


def _abort_failed_read(b: ClusterState, t: Transition, a: ClusterState) -> bool:
    return not _new_nodes(b, a) and bool(b.reloads) and not all(done[0] for done in b.reload_done)


def _abort_expired(b: ClusterState, t: Transition, a: ClusterState) -> bool:
    return not _new_nodes(b, a) and bool(b.reloads) and all(done[0] for done in b.reload_done) and not b.reloads[0].waiters


def _abort_anchor(b: ClusterState, t: Transition, a: ClusterState) -> bool:
    return not _new_nodes(b, a) and bool(b.reloads) and all(done[0] for done in b.reload_done) and bool(b.reloads[0].waiters)


def _expired(b: ClusterState, t: Transition, a: ClusterState) -> bool:
    return any(x.waiters and not y.waiters for x, y in zip(b.reloads, a.reloads))


# (name, the transition that shows it, recogniser over (state before, transition, state after))
SCENARIOS: tuple[tuple[str, str, Callable[[ClusterState, Transition, ClusterState], bool]], ...] = (
    ("SpillAck makes a node durable, each page on its owner's disk", "SpillAck", _spill_durable),
    ("SpillDone fails (ok = false) on one rank", "SpillDone", lambda b, t, a: t.arg("ok") is False),
    ("SpillAck of an op one rank failed to write marks nothing durable", "SpillAck", _ack_of_failed_write),
    ("ReloadReserve claims fewer pages than its candidate has", "ReloadReserve", _claims_fewer),
    ("ReloadReserve after a split that misaligned the owners", "ReloadReserve", _misaligned),
    ("a second request joins an in-flight reload", "ReloadReserve", _joined),
    ("ReloadAdmit inserts a durable, L2-only node", "ReloadAdmit", _admitted),
    ("ReloadAdmit aborts: a rank could not read", "ReloadAdmit", _abort_failed_read),
    ("ReloadAdmit aborts: every waiter expired", "ReloadAdmit", _abort_expired),
    ("ReloadAdmit aborts: the anchor changed while in flight", "ReloadAdmit", _abort_anchor),
    ("ReloadExpire releases a held request", "ReloadExpire", _expired),
    ("two spills in flight", "SpillSubmit", lambda b, t, a: len(a.spills) >= 2),
    ("two reloads in flight", "ReloadReserve", lambda b, t, a: len(a.reloads) >= 2),
    ("one SpillAck acknowledges two ops", "SpillAck", lambda b, t, a: len(b.spills) - len(a.spills) >= 2),
)
_BY_TRANSITION: dict[str, list[tuple[str, Callable]]] = {}
for _name, _t, _f in SCENARIOS:
    _BY_TRANSITION.setdefault(_t, []).append((_name, _f))


class Coverage:
    """One run's coverage, fed by `after(t, before, after)` for every transition."""

    def __init__(self, probe_every: int = PROBE_EVERY) -> None:
        self.probe_every = probe_every
        self.transitions: dict[str, int] = {}
        self.guards: dict[str, dict[str, int]] = {}
        self.scenarios: dict[str, int] = {}
        self.pairs: dict[str, int] = {}
        self.last: str | None = None
        self.count = 0

    def after(self, t: Transition, before: ClusterState, after: ClusterState) -> None:
        self.count += 1
        name = t.name
        self.transitions[name] = self.transitions.get(name, 0) + 1
        if self.last is not None:
            pair = f"{self.last}>{name}"
            self.pairs[pair] = self.pairs.get(pair, 0) + 1
        self.last = name
        for sname, f in _BY_TRANSITION.get(name, ()):
            if f(before, t, after):
                self.scenarios[sname] = self.scenarios.get(sname, 0) + 1
        if self.count == 1 or self.count % self.probe_every == 0:
            self.probe(after)

    def probe(self, s: ClusterState) -> None:
        """Try up to PROBE_CANDIDATES instances of every transition on `s` (the state is
        not changed: transitions are pure)."""
        for name in names_for(s.config):
            spec = REGISTRY[name]
            out = self.guards.setdefault(name, {})
            try:
                cands = list(islice(spec.candidates(s), PROBE_CANDIDATES))
            except Rejected as e:  # a family whose candidates need a guard of their own
                k = "rejected: " + reason_key(str(e))
                out[k] = out.get(k, 0) + 1
                continue
            if not cands:
                out["no instance"] = out.get("no instance", 0) + 1
            for t in cands:
                try:
                    spec.apply(s, t)
                    k = "enabled"
                except Rejected as e:
                    k = "rejected: " + reason_key(str(e))
                out[k] = out.get(k, 0) + 1

    def to_json(self, faults: dict[str, int], invariants: dict[str, dict[str, int]]) -> dict[str, Any]:
        return {
            "transitions": dict(sorted(self.transitions.items())),
            "guards": {k: dict(sorted(v.items())) for k, v in sorted(self.guards.items())},
            "faults": {k: v for k, v in sorted(faults.items()) if v},
            "invariants": invariants,
            "scenarios": dict(sorted(self.scenarios.items())),
            "pairs": dict(sorted(self.pairs.items())),
        }


def empty() -> dict[str, Any]:
    """A campaign's coverage before any run: every transition, fault kind, invariant and
    scenario listed with 0, so that what was never reached shows."""
    from ..checking import INVARIANTS
    from ..sim.faults import KINDS

    return {
        "transitions": {n: 0 for n in NAMES},
        "guards": {},
        "faults": {k: 0 for k in KINDS},
        "invariants": {k: {"full": 0, "step": 0} for k in INVARIANTS},
        "scenarios": {name: 0 for name, _, _ in SCENARIOS},
        "pairs": {},
    }


def merge(total: dict[str, Any], run: dict[str, Any]) -> None:
    """Add one run's coverage (`Coverage.to_json`) into `total` (from `empty`)."""
    for k, v in run.get("transitions", {}).items():
        total["transitions"][k] = total["transitions"].get(k, 0) + v
    for name, outcomes in run.get("guards", {}).items():
        g = total["guards"].setdefault(name, {})
        for k, v in outcomes.items():
            g[k] = g.get(k, 0) + v
    for k, v in run.get("faults", {}).items():
        total["faults"][k] = total["faults"].get(k, 0) + v
    for k, kinds in run.get("invariants", {}).items():
        t = total["invariants"].setdefault(k, {"full": 0, "step": 0})
        for kind, v in kinds.items():
            t[kind] = t.get(kind, 0) + v
    for k, v in run.get("scenarios", {}).items():
        total["scenarios"][k] = total["scenarios"].get(k, 0) + v
    pairs = total.setdefault("pairs", {})
    for k, v in run.get("pairs", {}).items():
        pairs[k] = pairs.get(k, 0) + v


def against_graph(total: dict[str, Any], graph: dict[str, Any] | None = None) -> dict[str, Any]:
    """The kinds and pairs of kinds of the spec's graph of `small` (`spec_graph.load()`)
    that the campaign's coverage `total` reached, and those it never reached."""
    from .spec_graph import load

    g = graph if graph is not None else load()
    taken = {k for k, v in total.get("transitions", {}).items() if v}
    pairs = {k for k, v in total.get("pairs", {}).items() if v}
    kinds, gpairs = g["kinds"], g["pairs"]
    reached_p = [p for p in gpairs if p in pairs]
    return {
        "config": g["config"],
        "kinds": {"reached": sum(k in taken for k in kinds), "of": len(kinds), "missing": [k for k in kinds if k not in taken]},
        "pairs": {
            "reached": len(reached_p),
            "of": len(gpairs),
            "percent": round(100.0 * len(reached_p) / max(1, len(gpairs)), 1),
            "missing": [p for p in gpairs if p not in pairs],
            # pairs the runs took that the small model cannot (more requests, ranks or tiers)
            "beyond": sum(1 for p in pairs if p not in set(gpairs)),
        },
    }
