"""Arrivals: the workload as the timed schedule receives it, requests arriving at ticks.

Request `rid` is the rid-th to arrive (by timestamp, then file position). The `burst`
and `abort` faults (`FaultDraws`) are asked for here, for every request in arrival
order, before the run starts: a burst makes the next BURST_SIZE requests arrive with
the one that started it, and an abort is its client giving up at a drawn time
(docs/sim.md, Faults).
"""

from __future__ import annotations

from .events import ABORT, ARRIVE
from .faults import BURST_SIZE, FaultDraws
from .options import Timing
from .trace import TraceRequest, Workload


class Arrivals:
    def __init__(self, workload: Workload, timing: Timing, draws: FaultDraws) -> None:
        reqs = workload.requests
        self.workload = workload
        self.order = sorted(range(len(reqs)), key=lambda i: (reqs[i].timestamp, i))  # rid -> file position
        # (tick, ARRIVE or ABORT, rid), in the order they were drawn
        self.events: list[tuple[int, int, int]] = []
        burst_left, burst_ms = 0, 0
        for rid, i in enumerate(self.order):
            req = reqs[i]
            t = req.timestamp
            if burst_left:
                t, burst_left = burst_ms, burst_left - 1
            elif draws.burst():
                burst_left, burst_ms = BURST_SIZE, t
            self.events.append((timing.tick_at(t), ARRIVE, rid))
            if draws.abort():
                expected = len(req.hash_ids) * workload.block_tokens / timing.prefill_tokens_per_ms
                expected += req.output_length * timing.tick_ms
                self.events.append((timing.tick_at(t + 1 + draws.abort_delay_ms(expected)), ABORT, rid))

    def index(self, rid: int) -> int:
        """Request `rid`'s position in the workload file."""
        return self.order[rid]

    def request(self, rid: int) -> TraceRequest:
        return self.workload.requests[self.order[rid]]
