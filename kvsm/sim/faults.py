"""Fault injection: which faults a run asks for (`--faults SPEC`), and every draw of them.

Grammar (whitespace is not allowed)::

    SPEC  := "" | "none" | ITEM ("," ITEM)*
    ITEM  := KIND ":" PROB
    KIND  := "slow" | "stall" | "abort" | "burst" | "disk"
    PROB  := a decimal number in [0, 1]

Each kind may appear once. Every draw is made here (`FaultDraws`), from the run's two
fault streams (seeded by the run's seed), in a fixed order, so the same seed gives the
same faults:

- `slow:p`  each backup write of each rank, and with L3 each of its disk writes and
  reads, is, with probability p, SLOW_FACTOR times slower than its drawn duration (a
  slow rank; the others wait at the next MIN).
- `stall:p` before each backup write of each rank, with probability p, the rank's
  copy engine stops for STALL_MS (a stalled rank). Backups still pending
  WRITE_TIMEOUT_MS after their `Reserve` are rolled back on every rank.
- `abort:p` each request is, with probability p, aborted by its client at a time drawn
  uniformly between its arrival and its expected end (prefill plus decode); an abort
  after the request finished has no effect.
- `burst:p` each arrival starts a burst with probability p: the next BURST_SIZE
  requests arrive at the same time as it.
- `disk:p`  (L3 only) in each tick, each rank's working disk fails with probability p
  (`DiskFail(r)`); it recovers (`DiskRecover(r)`) after a number of ticks drawn
  uniformly from DISK_DOWN_TICKS. A failing disk fails fast: its writes and reads end
  at their drawn times, not ok. Disk draws come from a stream of their own, so adding
  them changes no other fault.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import asdict, dataclass

KINDS = ("slow", "stall", "abort", "burst", "disk")
SLOW_FACTOR = 8
STALL_MS = 3000
BURST_SIZE = 16
DISK_DOWN_TICKS = (10, 100)  # ticks a failed disk stays down (0.2 to 2 s at the default 20 ms tick)


class FaultSpecError(ValueError):
    """A `--faults` value that does not parse; the message names the option, the value,
    the item and why, `reason` only the item and why (for a caller whose option is
    another)."""

    def __init__(self, spec: str, reason: str) -> None:
        super().__init__(f"--faults '{spec}': {reason}")
        self.spec = spec
        self.reason = reason


@dataclass(frozen=True)
class Faults:
    slow: float = 0.0
    stall: float = 0.0
    abort: float = 0.0
    burst: float = 0.0
    disk: float = 0.0

    @classmethod
    def parse(cls, spec: str | None) -> "Faults":
        if spec is None or spec in ("", "none"):
            return cls()
        seen: dict[str, float] = {}
        if any(ch.isspace() for ch in spec):
            raise FaultSpecError(spec, "no spaces allowed (KIND:PROB,KIND:PROB)")
        for item in spec.split(","):
            kind, sep, prob = item.partition(":")
            if not sep:
                raise FaultSpecError(spec, f"item '{item}' is not KIND:PROB")
            if kind not in KINDS:
                raise FaultSpecError(spec, f"unknown fault '{kind}' (known: {', '.join(KINDS)})")
            if kind in seen:
                raise FaultSpecError(spec, f"fault '{kind}' is given twice")
            try:
                p = float(prob)
            except ValueError:
                raise FaultSpecError(spec, f"probability '{prob}' of '{kind}' is not a number") from None
            if not 0.0 <= p <= 1.0:
                raise FaultSpecError(spec, f"probability {prob} of '{kind}' is outside [0, 1]")
            seen[kind] = p
        return cls(**seen)

    def __str__(self) -> str:
        items = [f"{k}:{v:g}" for k, v in asdict(self).items() if v]
        return ",".join(items) if items else "none"

    def to_json(self) -> dict[str, float]:
        return asdict(self)


class FaultDraws:
    """Every fault draw of a run, from its two seeded streams, and the count of each
    fault drawn (`counts`, the summary's `faults_injected`; an abort counts when it takes
    effect, which its caller knows).

    The fault stream serves, in the order the run asks: the timed schedule's arrivals
    (per request: a burst, an abort and its time), then its copy engines (per write and
    rank: a stall, then a slow write); the serial schedule's aborts. The disk stream
    serves the disks' failures and recovery times and the slow draws of disk operations,
    so that the disk tier changes no other draw. A kind whose probability is 0 draws
    nothing."""

    def __init__(self, faults: Faults, seed: int, counts: Counter) -> None:
        self.faults = faults
        self.counts = counts
        self._rng = random.Random(f"kvsm-sim:faults:{seed}")
        self._disk_rng = random.Random(f"kvsm-sim:disk-faults:{seed}")

    def _hit(self, p: float, rng: random.Random, kind: str | None) -> bool:
        if not (p and rng.random() < p):
            return False
        if kind is not None:
            self.counts[kind] += 1
        return True

    def burst(self) -> bool:
        """An arrival starts a burst: the next BURST_SIZE requests arrive with it."""
        return self._hit(self.faults.burst, self._rng, "burst")

    def abort(self) -> bool:
        """A request is aborted by its client (counted by the caller when it takes effect)."""
        return self._hit(self.faults.abort, self._rng, None)

    def abort_delay_ms(self, expected_ms: float) -> float:
        """How long after the first millisecond of its life the client of an aborted
        request gives up: uniformly within its expected time (prefill plus decode)."""
        return self._rng.random() * expected_ms

    def stall_ms(self) -> int:
        """The time a rank's copy engine stops before a backup write (0: no stall)."""
        return STALL_MS if self._hit(self.faults.stall, self._rng, "stall") else 0

    def write_slowdown(self) -> int:
        """The factor of a rank's backup write time (SLOW_FACTOR under a slow fault)."""
        return SLOW_FACTOR if self._hit(self.faults.slow, self._rng, "slow") else 1

    def disk_slowdown(self) -> int:
        """The factor of a rank's disk operation time (SLOW_FACTOR under a slow fault)."""
        return SLOW_FACTOR if self._hit(self.faults.slow, self._disk_rng, "slow") else 1

    def disk_fails(self, elapsed: int) -> bool:
        """A working disk fails, drawn once over the `elapsed` ticks since its last draw."""
        if self._disk_rng.random() < 1 - (1 - self.faults.disk) ** elapsed:
            self.counts["disk"] += 1
            return True
        return False

    def disk_down_ticks(self) -> int:
        """How many ticks a failed disk stays down."""
        return self._disk_rng.randint(*DISK_DOWN_TICKS)
