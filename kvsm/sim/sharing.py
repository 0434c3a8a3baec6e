"""Comparing the ranks' replicas with the log's state, and what `--replicas agreement`
needs to share the log's work with them (`kvsm.sim.cluster`, docs/sim.md "Ranks and
divergence"): the local progress a replica must know, cheap keys that stand for a
state's digest and for its replicated digest, whether a rank's view can decide a step,
and the commit call's one local fact."""

from __future__ import annotations

from operator import attrgetter, itemgetter

from ..config import Config
from ..digest_sums import COMPONENTS, REPLICATED_COMPONENTS, REPLICATED_SCALARS, digest_scalars
from ..state import ClusterState, draft_of
from ..transitions import REGISTRY
from ..transitions.registry import rank_views

# per-rank steps that change only their rank's local state (a count, its commit call, the
# host pages it copied): what the other ranks learn of them at a collective is that count
LOCAL_STEPS = frozenset(("WriteDone", "CommitCall", "AckAppend"))
_I_L3 = COMPONENTS.index("l3")
_REPLICATED_SUMS = itemgetter(*(i for i, n in enumerate(COMPONENTS) if n in REPLICATED_COMPONENTS))
_REPLICATED_SCALARS = attrgetter(*REPLICATED_SCALARS)


def state_key(s: ClusterState) -> tuple:
    """What state `s`'s digest hashes, as a tuple: equal keys, equal digests (and equal
    digests, equal keys, but for a hash collision); cheaper to make and compare."""
    return tuple(digest_scalars(s).items()), s.current_sums()


def replicated_key(s: ClusterState) -> tuple:
    """What `s.replicated_digest()` hashes, as a tuple (`state_key` of the replicated part)."""
    # (`digest_scalars(s, True)`'s values, read without building its dict)
    return _REPLICATED_SCALARS(s), _REPLICATED_SUMS(s.current_sums())


def views_differ(cfg: Config) -> bool:
    """Whether some deciding step may be decided otherwise by a rank from its own view
    under `cfg` (a defect in RANK_VIEW_BUGS, or a knob's reference value): then a
    procedure's outcome depends on the rank that runs it, not only on its state."""
    return any(rank_views(cfg, name) for name, spec in REGISTRY.items() if spec.decides)


def call_only(before: ClusterState, after: ClusterState, rank: int) -> bool:
    """Whether rank `rank`'s `CommitCall` from `before` to `after` changed nothing but that
    rank's entry of `commit_round` (every digest sum and every other scalar the same)."""
    if after.current_sums() != before.current_sums():
        return False
    a, b = digest_scalars(after), digest_scalars(before)
    a.pop("commit_round", None)
    b.pop("commit_round", None)
    return a == b and all(x == y for q, (x, y) in enumerate(zip(after.commit_round, before.commit_round)) if q != rank)


def with_calls(s: ClusterState, rounds: tuple[int, ...]) -> ClusterState:
    """State `s` with the commit round `rounds`: what the calls that changed only
    `commit_round` make of it (built as `Tx.commit` builds a state)."""
    new = draft_of(s)
    new.commit_round = rounds
    new.effects = ()
    new.__class__ = ClusterState
    return new


def local_difference(mine: ClusterState, log: ClusterState, rank: int, every_rank: bool) -> str | None:
    """How rank `rank`'s replica differs from the log in local state it must know: its
    own finished writes and L3 progress, and with `every_rank` everyone's L3 state."""
    if mine.write_done[rank] != log.write_done[rank]:
        return f"it counts {mine.write_done[rank]} finished writes of its own, the log {log.write_done[rank]}"
    if mine.acked[rank] != log.acked[rank]:
        return f"it counts {mine.acked[rank]} appended write acks of its own, the log {log.acked[rank]}"
    if mine.load_done[rank] != log.load_done[rank]:
        return f"it counts {mine.load_done[rank]} landed load-backs of its own, the log {log.load_done[rank]}"
    if not log.config.L3:
        return None
    ranks = range(log.config.R) if every_rank else (rank,)
    for field in ("spill_gathered", "spill_done", "reload_done", "disk_ok"):
        a, b = getattr(mine, field), getattr(log, field)
        for r in ranks:
            if a[r] != b[r]:
                return f"its {field}[{r}] is {a[r]!r}, the log's {b[r]!r}"
    if every_rank and mine.current_sums()[_I_L3] != log.current_sums()[_I_L3]:
        return "its view of the ranks' disks (l3) differs from the log's"
    return None
