"""The injected defects (docs/defects.md): where each one is reachable, what is meant to
catch it, and runs that show it.

`CATALOGUE` names, per defect, the TLC model it is reachable in, the invariant meant to
catch it, the simulator options it needs (tiers, faults, sizes) and what the GPU backend
can see of it: wrong bytes, ranks that disagree, or nothing (then why). The detection
matrix (`benchmarks/defects.py`) and the tests read it.

`byte_witness` finds the shortest run of a model with a defect whose last step loads a
page into L1 that does not hold the KV its node claims: a log that the GPU backend,
which checks every loaded page against what its node claims, must refuse on real
bytes. It explores the model past the state where an invariant first breaks (the
checkers stop there; the bytes go wrong later), so a step the defect leaves undefined
there (it fails with an exception) is simply not taken.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from . import effects as fx
from .config import REFERENCE_KNOBS, Config
from .invariants import violations
from .log import Header, LogWriter
from .state import ClusterState, initial_state
from .transitions import Transition, successors


@dataclass(frozen=True)
class Defect:
    name: str
    model: str  # the TLC model where it is reachable: ci, l3, or a spec/ .cfg path
    invariant: str  # the invariant (or detector) meant to catch it
    sim: dict[str, Any]  # kvsm sim options it needs (SimOptions fields)
    # "bytes" (a load gets wrong KV), "reload" (an L3 read gets another namespace's KV, at the
    # counterexample's last step), "ranks" (ranks disagree), or None
    gpu: str | None
    why_no_gpu: str = ""  # when gpu is None: why the backend cannot see it
    sim_seed: int = 0  # the first seed of 0..199 whose run catches it (benchmarks/defects.py)
    sim_detector: str = "invariant"  # what catches it there: invariant, divergence or stuck
    conform_on: str = ""  # the model `kvsm conform --bug` compares it on, when not its own (or MC_defects for ci's)
    bytes_on: str = ""  # the model whose byte witness the GPU backend replays, when not its own
    tracker: str = ""  # the public report it reproduces (docs/defects.md, Field bugs), when it came from one


SPEC = "spec"

# the simulator run of the two write-back defects: the reference's synchronous write-back
# under the write-back policy, pools that make a load-back evict unbacked device leaves
_WRITE_BACK_SIM = {"tiers": "l1,l2", "workload": "multi-turn", "l1_pages": 32, "l2_pages": 16,
                   "settings": (("policy", "write_back"), ("write_back_evict", "sync"))}

# the simulator run of the tenant-isolation defects: two tenants sharing every prompt
# (`--tenants 2`, mix 1), the L3 key the fixed one (so that under the reference profile,
# whose key covers the tokens, finding 7, only the defect leaks)
_TENANT_SIM = {"tenants": 2, "settings": (("l3_key", "namespace"),)}

CATALOGUE: dict[str, Defect] = {
    d.name: d
    for d in (
        Defect(
            "skip_collective", "ci", "12 Collectives",
            {"tiers": "l1,l2"}, None,
            why_no_gpu=(
                "the backend replays the log's calls as steps of the model: every rank takes "
                "the skipping rank's early return from the log alike (the same state on every "
                "rank), and its only collective is the agreement at Commit, which a round with "
                "a skipped call never reaches; nothing hangs or pairs wrongly, and no byte "
                "moves wrong (nothing is committed)"
            ),
        ),
        Defect(
            "local_host_alloc", "ci", "13 Agreement",
            {"tiers": "l1,l2"}, "ranks",
        ),
        Defect(
            "double_free", "ci", "6 HostPages",
            {"tiers": "l1,l2", "faults": "stall:0.05"}, "bytes",
        ),
        Defect(
            "load_uaf", f"{SPEC}/MC_loads.cfg", "3 Locks",
            {"tiers": "l1,l2"}, "bytes", conform_on=f"{SPEC}/MC_load_uaf.cfg",
        ),
        Defect(
            "evict_pending", "ci", "4 Pending",
            {"tiers": "l1,l2", "faults": "stall:0.05", "l1_pages": 64}, None,
            why_no_gpu=(
                "the evicted node is deleted with its backup still pending: its pages are "
                "poisoned, and no later step of the model copies or loads them (its write "
                "has no node left to copy), so no byte the backend moves is wrong; the "
                "reference fails loud here instead (`_cp_account_leave_node_evict`)"
            ),
        ),
        Defect(
            "split_pending", "ci", "3 Locks",
            {"tiers": "l1,l2", "faults": "stall:0.05"}, None,
            why_no_gpu=(
                "the model's write copies the node's pages as they are when it runs, so the "
                "split moves no byte to a wrong place; what breaks is accounting (the "
                "backup's lock copied to the upper part, an object longer than its node), "
                "which the backend does not see"
            ),
        ),
        Defect(
            "duplicate_ack", "ci", "7 Content",
            {"tiers": "l1,l2"}, "bytes", sim_detector="divergence",
        ),
        Defect(
            "reload_stale_anchor", f"{SPEC}/MC_reload_stale_anchor.cfg", "1 Tree",
            {"tiers": "l1,l2,l3", "workload": "multi-turn", "l1_pages": 32, "l2_pages": 64}, None, sim_seed=1,
            why_no_gpu=(
                "the reloaded node holds the right KV for its prefix; it hangs below an "
                "anchor that left the tree (or shadows a sibling), so it and its object "
                "leak, which no copy shows"
            ),
        ),
        Defect(
            "l3_no_min", f"{SPEC}/MC_l3_no_min.cfg", "13 Agreement",
            {"tiers": "l1,l2,l3"}, "ranks",
        ),
        Defect(
            "wallclock_tiebreak", f"{SPEC}/MC_wallclock_tiebreak.cfg", "13 Agreement",
            {"tiers": "l1,l2", "workload": "multi-turn", "l1_pages": 64}, "ranks", sim_seed=2,
        ),
        Defect(
            "backup_host_uaf", f"{SPEC}/MC_load_uaf.cfg", "6 HostPages",
            {"tiers": "l1,l2", "l2_pages": 256, "faults": "stall:0.05"}, "bytes",
            bytes_on=f"{SPEC}/MC_loads.cfg", tracker="sglang PR 28468",
        ),
        Defect(
            "load_host_release", f"{SPEC}/MC_load_uaf.cfg", "5 DevicePages",
            {"tiers": "l1,l2"}, "bytes", tracker="sglang issue 30321",
        ),
        Defect(
            "lease_expiry_free", f"{SPEC}/MC_reload_stale_anchor.cfg", "6 HostPages",
            {"config": "l3", "tiers": "l1,l2,l3", "workload": "multi-turn"}, None, sim_seed=1,
            conform_on=f"{SPEC}/MC_l3_field.cfg",
            tracker="Mooncake issue 850",
            why_no_gpu=(
                "not shown yet: wrong bytes need the released pages given to another object "
                "and loaded while the reload's read still lands in them; no such run has been "
                "searched for (the invariant catches the release at the expiry itself)"
            ),
        ),
        Defect(
            "reload_fail_double_free", f"{SPEC}/MC_reload_stale_anchor.cfg", "6 HostPages",
            {"tiers": "l1,l2,l3", "workload": "multi-turn", "l1_pages": 32, "l2_pages": 64, "faults": "disk:0.02"}, None,
            conform_on=f"{SPEC}/MC_l3_field.cfg",
            tracker="sglang issue 13483",
            why_no_gpu=(
                "not shown yet: wrong bytes need the released pages given to another object "
                "and loaded before the reload's admission frees them again; no such run has "
                "been searched for (the invariant catches the release at the failed read)"
            ),
        ),
        Defect(
            "failed_store_visible", f"{SPEC}/MC_reload_stale_anchor.cfg", "7 Content",
            {"tiers": "l1,l2,l3", "workload": "multi-turn", "l1_pages": 32, "l2_pages": 64, "faults": "disk:0.02"}, None,
            conform_on=f"{SPEC}/MC_l3_field.cfg",
            tracker="LMCache issue 4991",
            why_no_gpu=(
                "not shown yet: wrong bytes need a reload that reads the failed entry and a "
                "load-back of its node; no such run has been searched for (the invariant "
                "catches the failed entry at the write itself)"
            ),
        ),
        Defect(
            "host_hit_unpinned", f"{SPEC}/MC_host_hit.cfg", "6 HostPages",
            {"tiers": "l1,l2", "workload": "multi-turn", "l1_pages": 32, "l2_pages": 128,
             "settings": (("carry_host_hit", True), ("prepared_backups", True))}, None,
            tracker="vLLM issue 39702",
            why_no_gpu=(
                "the invariant catches the hit at the eviction that frees it, and the model's "
                "LoadBack refuses a carried hit whose node left the tree (the reference asserts "
                "there); the bytes the reference would read from a detached node's freed host "
                "pages have no node in the model to land in"
            ),
        ),
        Defect(
            "loadback_evicts_own_host", f"{SPEC}/MC_write_back_sync.cfg", "5 DevicePages",
            _WRITE_BACK_SIM, None, sim_seed=1,
            tracker="sglang PR 27631",
            why_no_gpu=(
                "the node the load restores has left the tree, so no node claims the pages "
                "its copies land in: the backend checks such a page against the host page's "
                "present KV, which is what the copy reads (another node's, written back in "
                "the same step); the invariant catches the load at its LoadBack"
            ),
        ),
        Defect(
            "write_back_fail_evict", f"{SPEC}/MC_write_back_sync.cfg", "2 Residency",
            _WRITE_BACK_SIM, None, sim_seed=1,
            tracker="sglang PR 27108",
            why_no_gpu=(
                "the victim's device pages are freed with no copy anywhere, so nothing is "
                "left to load: a later match finds the node neither on L1 nor on L2, and no "
                "step of the model copies it; no byte moves wrong, a KV is lost"
            ),
        ),
        Defect(
            "host_key_no_ns", f"{SPEC}/MC_tenants.cfg", "15 Isolation",
            _TENANT_SIM | {"tiers": "l1,l2"}, None,
            tracker="vLLM issue 44250",
            why_no_gpu=(
                "every page moves as the model says: a load-back copies the other namespace's "
                "node's host pages, which hold the KV that node claims, and the backend checks a "
                "loaded page against its node's claim; what is wrong is whose request holds the "
                "node, which no copy shows"
            ),
        ),
        Defect(
            "lora_salt_collision", f"{SPEC}/MC_tenant_salt.cfg", "15 Isolation",
            _TENANT_SIM | {"tiers": "l1,l2", "tenants": 3}, None,
            tracker="vLLM issue 44701",
            why_no_gpu=(
                "the request is put on the colliding namespace's node, whose pages hold the KV "
                "that node claims; no copy moves a byte the backend can find wrong"
            ),
        ),
        Defect(
            "l3_key_no_ns", f"{SPEC}/MC_tenants.cfg", "15 Isolation",
            _TENANT_SIM | {"tiers": "l1,l2,l3", "l1_pages": 32, "l2_pages": 64}, "reload",
            tracker="LMCache issue 2961",
        ),
    )
}
# The simulator runs of the catalogue: the default config, this many requests of the
# workload (a run stops at its first catch).
SIM_REQUESTS = 300
# The model `kvsm conform --bug` compares each defect on: ci's defects on ci with two
# requests (the same counterexamples, an eighth of the graph), load_uaf on loads with two
# requests (spec/MC_load_uaf: the same counterexample, a twentieth of the graph), the
# others on their own.
CONFORM_DEFECTS_MODEL = f"{SPEC}/MC_defects.cfg"


# The production write-through path (prepared backups, `Prepare`): the model where the
# defects that reach it are checked with prepared backups on and no other backup, and per
# defect the invariant TLC reports there and the transition its counterexample ends with
# (the step on the prepared path where the defect bites).
PREPARED_MODEL = f"{SPEC}/MC_prepared_defects.cfg"
PREPARED_PATH: dict[str, tuple[str, str]] = {
    "local_host_alloc": ("Agreement", "Prepare"),  # evict-to-fit sized by the rank's own pages
    "wallclock_tiebreak": ("Agreement", "Prepare"),  # evict-to-fit in the rank's own victim order
    "double_free": ("HostPages", "Abort"),  # the rollback of a prepared backup
}


# The reference profile (docs/findings.md), the matrix's `reference` column: every defect
# on the reference's mechanisms at once (prepared backups, an L3 disk, every knob at the
# reference's value) but for the knobs of the four findings, which are fixed: the reference
# itself breaks invariants (the findings), so only with them fixed is a violation under a
# defect the defect's own. TLC checks the reference's small model so (clean without a
# defect), the simulator the realistic config with the same knobs fixed and the L3 tier.
REFERENCE_MODEL = f"{SPEC}/MC_reference_defects.cfg"
REFERENCE_SIM_CONFIG = "reference-default"
# the knob of each finding of docs/findings.md, in the order TLC finds them on `reference`
FINDING_KNOBS = ("commit_call", "own_disk_durable", "unbacked_evict", "durable_split")
# defects the reference's small model cannot reach, and why: their branch is never taken
# there, so TLC's graph under each is the bug-free one (the matrix's `none` row); the
# simulator's column tries them at realistic sizes
REFERENCE_UNREACHABLE: dict[str, str] = {
    "wallclock_tiebreak": (
        "one prompt ([1, 2]): the tree is a chain with one leaf per tier, so no eviction "
        "has two victims to order"
    ),
    "backup_host_uaf": (
        "evict-to-fit with no host leaf while a backup is in flight; with backups only inside "
        "an insert (backup_trigger = insert), one request at a time over one prompt never "
        "reserves while another backup holds the pool (TLC's graph is the bug-free one)"
    ),
    "reload_fail_double_free": "a failed disk read; the model has no disk fault (max_disk_faults = -1)",
    "failed_store_visible": "a failed disk write; the model has no disk fault (max_disk_faults = -1)",
    "host_hit_unpinned": (
        "a match that carries its host hit (carry_host_hit); the reference profile's model "
        "finds its hit at the load-back (CarryHostHit = FALSE)"
    ),
    "loadback_evicts_own_host": (
        "the write-back policy's synchronous write-back (write_back_evict = sync); the "
        "reference profile writes through with prepared backups"
    ),
    "write_back_fail_evict": (
        "the write-back policy's synchronous write-back (write_back_evict = sync); the "
        "reference profile writes through with prepared backups"
    ),
    "host_key_no_ns": "one prompt, in namespace 0: no second namespace to leak into",
    "lora_salt_collision": "one prompt, in namespace 0: no pair of namespaces to collide",
    "l3_key_no_ns": "one prompt, in namespace 0: no second namespace to read another's disk entries",
}

# options a defect needs under the reference profile beyond its own, and why
REFERENCE_SIM_EXTRA: dict[str, tuple[dict[str, Any], str]] = {
    "skip_collective": ({"faults": "stall:0.05"}, (
        "on the prepared path a write's copies start at its Prepare, before the forward "
        "pass, and every rank's have finished when the commit collective is called after "
        "the Insert, so no rank has nothing finished (seeds 0-4 clean without stalls); a "
        "stalled copy leaves one rank behind")),
}


def reference_sim(d: Defect) -> dict[str, Any]:
    """The simulator options of `d` under the reference profile: its own (workload, sizes,
    faults; `REFERENCE_SIM_EXTRA` where it needs more) on `reference-default` with the L3
    tier and the findings' knobs fixed."""
    extra = REFERENCE_SIM_EXTRA.get(d.name, ({}, ""))[0]
    # the defect's own settings (the knob it needs) stay; the findings' knobs are fixed
    own = tuple((k, v) for k, v in d.sim.get("settings", ()) + extra.get("settings", ()) if k not in FINDING_KNOBS)
    return {**d.sim, **extra, "config": REFERENCE_SIM_CONFIG, "tiers": "l1,l2,l3",
            "settings": own + tuple((k, REFERENCE_KNOBS[k][1]) for k in FINDING_KNOBS)}


def conform_model(d: Defect) -> str:
    return d.conform_on or (CONFORM_DEFECTS_MODEL if d.model == "ci" else d.model)


def witness_model(d: Defect) -> str:
    """The model the GPU backend's log of `d` is found in (its byte witness or its
    counterexample)."""
    return d.bytes_on or d.model


def config_with(cfg: Config, bug: str) -> Config:
    return cfg.with_bug(bug, f"config '{cfg.name}' with bug {bug}")


def _loads_wrong_bytes(s: ClusterState) -> bool:
    """The step that made `s` loaded a page that does not hold the KV its node claims."""
    return any(isinstance(e, fx.Load) and s.dev_content.get(e.page) != e.claim for e in s.effects)


def _shortest(cfg: Config, found: Callable[[ClusterState], bool], past_broken: bool, max_states: int) -> list[Transition] | None:
    """The shortest run of `cfg`'s model to a state `found` accepts, breadth first (states
    identified by their digest); None when there is none within `max_states` states.
    With `past_broken` the search goes on past states that break an invariant, and a
    step the defect leaves undefined there (it fails with an exception) is not taken."""
    s0 = initial_state(cfg)
    parents: dict[str, tuple[str, Transition] | None] = {s0.digest(): None}
    frontier = deque([s0])
    while frontier:
        s = frontier.popleft()
        d = s.digest()
        try:
            nexts = list(successors(s))
        except Exception:  # noqa: BLE001 - past a broken state, a step may be undefined
            if not past_broken:
                raise
            continue
        for t, s2 in nexts:
            d2 = s2.digest()
            if d2 in parents:
                continue
            parents[d2] = (d, t)
            if found(s2):
                path = [t]
                cur = parents[d]
                while cur is not None:
                    path.append(cur[1])
                    cur = parents[cur[0]]
                return path[::-1]
            if len(parents) >= max_states:
                return None
            if past_broken or not violations(s2):
                frontier.append(s2)
    return None


def counterexample(cfg: Config, max_states: int = 500_000) -> list[Transition] | None:
    """The shortest run of `cfg`'s model (with its defect) to a state that breaks an
    invariant: what TLC's breadth-first search finds (up to the order of ties)."""
    return _shortest(cfg, lambda s: bool(violations(s)), False, max_states)


def byte_witness(cfg: Config, max_states: int = 500_000) -> list[Transition] | None:
    """The shortest run of `cfg`'s model (with its defect) whose last step loads a page
    into L1 that does not hold the KV its node claims; None when there is none within
    `max_states` states."""
    return _shortest(cfg, _loads_wrong_bytes, True, max_states)


def write_log(cfg: Config, steps: list[Transition], path: str | Path, source: str = "hand", extra: dict[str, Any] | None = None) -> Path:
    """The run `steps` of `cfg`'s model as a kvsm log (its header names the defect)."""
    from .transitions import apply

    s = initial_state(cfg)
    with LogWriter(path, Header(config=cfg, seed=None, source=source, initial_digest=s.digest(), extra=extra or {})) as w:
        for t in steps:
            s = apply(s, t)
            w.write(t, s)
    return Path(path)


__all__ = ["CATALOGUE", "CONFORM_DEFECTS_MODEL", "PREPARED_MODEL", "PREPARED_PATH", "FINDING_KNOBS", "REFERENCE_MODEL", "REFERENCE_SIM_CONFIG", "REFERENCE_SIM_EXTRA", "REFERENCE_UNREACHABLE", "SIM_REQUESTS", "Defect", "byte_witness", "config_with", "conform_model", "counterexample", "reference_sim", "witness_model", "write_log"]
