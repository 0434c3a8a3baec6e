"""What the rank processes say to each other over gloo: the process group, the values
rank 0 shares at setup, the digest agreement, and the reports gathered at the end.

Python values travel with torch.distributed's object collectives (pickled, between this
run's own processes). The agreement, the one collective of the replay loop, is a single
all-reduce of a small integer vector instead: docs/gpu.md (Agreements) gives the
measurement that keeps it so.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist


@contextmanager
def process_group(rank: int, world: int, timeout_s: float) -> Iterator[None]:
    """Join the gloo process group (from the standard env variables) for the block."""
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=timeout_s))
    try:
        yield
    finally:
        dist.destroy_process_group()


def broadcast(obj: Any, src: int = 0) -> Any:
    """Rank `src`'s `obj`, on every rank (the others' `obj` is ignored)."""
    box = [obj]
    dist.broadcast_object_list(box, src)
    return box[0]


def all_gather(obj: Any) -> list[Any]:
    """Every rank's `obj`, in rank order, on every rank."""
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def _limbs(hexdigest: str) -> list[int]:
    v = int(hexdigest, 16)
    return [(v >> (32 * k)) & 0xFFFFFFFF for k in range(4)]


def _unlimbs(limbs: list[int]) -> str:
    return f"{sum(int(x) << (32 * k) for k, x in enumerate(limbs)):032x}"


@dataclass(frozen=True)
class Agreement:
    """What one agreement told every rank: the elementwise MIN and MAX of the ranks'
    digests (as 32-bit limbs) and every rank's status and first bad transition."""

    lo: list[int]
    hi: list[int]
    statuses: list[int]
    first_bad: list[int]

    def unanimous(self, digest: str) -> bool:
        """Every rank's digest is `digest` and no rank reported a problem."""
        want = _limbs(digest)
        return self.hi == want and self.lo == want and not any(self.statuses)

    @property
    def min_digest(self) -> str:
        return _unlimbs(self.lo)

    @property
    def max_digest(self) -> str:
        return _unlimbs(self.hi)


def same_digest(a: str, b: str) -> bool:
    """Whether two digests are the same number (as the agreement compares them)."""
    return _limbs(a) == _limbs(b)


def agree(digest: str, status: int, first_bad: int, rank: int, world: int) -> Agreement:
    """One agreement: a MAX all-reduce of this rank's digest limbs, their negations (whose
    MAX is the MIN), and one status and one first-bad slot per rank."""
    mine = _limbs(digest)
    vec = torch.zeros(8 + 2 * world, dtype=torch.int64)
    vec[0:4] = torch.tensor(mine)
    vec[4:8] = -torch.tensor(mine)
    vec[8 + rank] = status
    vec[8 + world + rank] = first_bad
    dist.all_reduce(vec, op=dist.ReduceOp.MAX)
    return Agreement(
        lo=(-vec[4:8]).tolist(),
        hi=vec[0:4].tolist(),
        statuses=vec[8 : 8 + world].tolist(),
        first_bad=vec[8 + world :].tolist(),
    )
