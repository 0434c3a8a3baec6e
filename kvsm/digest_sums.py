"""The digest bookkeeping of a `ClusterState`: one running sum per component of the
state, and the scalars that are hashed with them into the state's digest.

`kvsm.digest` defines how an entry is hashed and how sums combine into a digest; this
module says which parts of the state are components, how each is summed from scratch
(`recompute_sums`), and which scalars a digest covers (`digest_scalars`). A transaction (`kvsm.tx`) keeps the sums up to date by
adding and subtracting the hashes of exactly the entries it writes; invariant 10
compares those running sums with a recomputation.
"""

from __future__ import annotations

from typing import Any, Iterable

from .digest import MOD, combine, content_hash, entry_hash, memo_hash

# digest components: maps are summed incrementally, free sets by their deltas, and the
# short sequences (bounded by caps) are re-summed when they change
MAP_COMPONENTS = ("nodes", "objects", "pending", "requests", "dev_content", "host_content", "reload_candidates", "l3", "prepared")
SET_COMPONENTS = ("dev_free", "l2_free")
SEQ_COMPONENTS = ("writes", "spill_queue", "spills", "reloads", "spill_staged", "loads")
COMPONENTS = MAP_COMPONENTS + SET_COMPONENTS + SEQ_COMPONENTS
I_DEV_FREE = COMPONENTS.index("dev_free")
I_L2_FREE = COMPONENTS.index("l2_free")
I_WRITES = COMPONENTS.index("writes")
assert COMPONENTS[I_WRITES:] == SEQ_COMPONENTS
REPLICATED_COMPONENTS = (
    "nodes", "objects", "pending", "requests", "reload_candidates", "dev_free", "l2_free", "writes", "spill_queue", "spills", "reloads",
    "loads", "prepared",
)
# the scalars of the replicated part (`digest_scalars(s, True)`, in its order)
REPLICATED_SCALARS = ("next_id", "clock", "next_rid")

def component_items(s: Any, name: str) -> Iterable[tuple[Any, Any]]:
    if name == "dev_free":
        return ((p, True) for lane in s.dev_free for p in lane)
    if name == "l2_free":
        return (((i, run), True) for i, runs in enumerate(s.l2_free) for run in runs)
    if name in SEQ_COMPONENTS:
        return _seq_items(getattr(s, name))
    return getattr(s, name).items()


def _seq_items(seq: tuple) -> Iterable[tuple[int, Any]]:
    # an ordered sequence is summarised by its (position, item) pairs; empty items (a rank
    # with nothing staged) count as absent so that an unused tier adds nothing
    return ((k, v) for k, v in enumerate(seq) if v != ())


def seq_sum(name: str, seq: tuple) -> int:
    total = 0
    for k, v in _seq_items(seq):
        total += entry_hash(name, k, v)
    return total % MOD


CONTENT_COMPONENTS = frozenset({"dev_content", "host_content"})


def value_hash(name: str, k: Any, v: Any) -> int:
    """A map entry's contribution to its component's sum: the entry's text, plus its bulky
    field (if it has one) as an entry of its own; ghost page contents are weighted instead."""
    if name in CONTENT_COMPONENTS:
        return content_hash(name, k, v)
    h = memo_hash(name, k, v)
    bulky = getattr(v, "BULKY", None)
    if bulky is not None:
        h += memo_hash(name + "#", k, getattr(v, bulky))
    return h


def recompute_sums(s: Any) -> tuple[int, ...]:
    out = []
    for name in COMPONENTS:
        total = 0
        for k, v in component_items(s, name):
            total += value_hash(name, k, v)
        out.append(total % MOD)
    return tuple(out)



def digest_scalars(s: Any, replicated_only: bool = False) -> dict[str, Any]:
    """The scalars of state `s` that its digest covers (with `replicated_only`, those of
    its replicated part)."""
    out: dict[str, Any] = {  # (REPLICATED_SCALARS, written out)
        "next_id": s.next_id,
        "clock": s.clock,
        "next_rid": s.next_rid,
    }
    if not replicated_only:
        out["write_done"] = s.write_done
        # the newer local scalars count only when set, so that states which never use
        # them keep the digests they had before these existed
        if any(s.load_done):
            out["load_done"] = s.load_done
        if any(s.commit_round):
            out["commit_round"] = s.commit_round
        if any(s.acked):
            out["acked"] = s.acked
        if s.config.L3:
            out["spill_gathered"] = s.spill_gathered
            out["spill_done"] = s.spill_done
            out["reload_done"] = s.reload_done
            out["disk_ok"] = s.disk_ok
            out["disk_faults"] = s.disk_faults
        if s.diverged is not None:
            out["diverged"] = s.diverged
        if s.halted is not None:
            out["halted"] = s.halted
    return out


def state_digest(s: Any, sums: tuple[int, ...]) -> str:
    """The digest of state `s` whose component sums are `sums`."""
    return combine(digest_scalars(s), dict(zip(COMPONENTS, sums)))


def replicated_digest(s: Any, sums: tuple[int, ...]) -> str:
    """The digest of the replicated part of state `s` whose component sums are `sums`."""
    replicated = {n: v for n, v in zip(COMPONENTS, sums) if n in REPLICATED_COMPONENTS}
    return combine(digest_scalars(s, replicated_only=True), replicated)
