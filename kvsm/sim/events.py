"""The timed schedule's event queue: what happens at which tick, in a fixed order.

Events at one tick are handled in the order of their kind (below), then in the order
they were pushed, so that the run does not depend on anything but the seed.
"""

from __future__ import annotations

import heapq
from typing import Any, NamedTuple

# event kinds, in the order an iteration handles them; WRITE, LOAD and DISK are rank steps
WRITE, LOAD, DISK, WAKE, FINISH, ABORT, INSERT, ARRIVE = range(8)


class Event(NamedTuple):
    """One event; events order as their fields do, and `seq` is unique, so the payload
    is never compared."""

    tick: int
    kind: int
    seq: int  # push order
    work: bool  # counts as work: the run goes on while an event that does is queued
    payload: Any


class Events:
    def __init__(self) -> None:
        self._heap: list[Event] = []
        self._seq = 0
        # events in the queue that count as work: a run goes on while there is any (a
        # disk recovery alone does not keep it going)
        self.work = 0

    def push(self, tick: int, kind: int, payload: Any, work: bool = True) -> None:
        self._seq += 1
        self.work += work
        heapq.heappush(self._heap, Event(tick=tick, kind=kind, seq=self._seq, work=work, payload=payload))

    def pop_tick(self) -> tuple[int, list[Event], bool]:
        """Every event of the earliest tick, in handling order, and whether any is work."""
        heap = self._heap
        tick = heap[0].tick
        batch = []
        work = False
        while heap and heap[0].tick == tick:
            e = heapq.heappop(heap)
            self.work -= e.work
            work |= e.work
            batch.append(e)
        return tick, batch, work
