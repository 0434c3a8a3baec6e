"""Fault injection: which faults a run draws, from `--faults SPEC`.

Grammar (whitespace is not allowed)::

    SPEC  := "" | "none" | ITEM ("," ITEM)*
    ITEM  := KIND ":" PROB
    KIND  := "slow" | "stall" | "abort" | "burst" | "disk"
    PROB  := a decimal number in [0, 1]

Each kind may appear once. Every draw comes from the run's fault stream (seeded by
the run's seed), in a fixed order, so the same seed gives the same faults:

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

from dataclasses import asdict, dataclass

KINDS = ("slow", "stall", "abort", "burst", "disk")
SLOW_FACTOR = 8
STALL_MS = 3000
BURST_SIZE = 16
DISK_DOWN_TICKS = (10, 100)  # ticks a failed disk stays down (0.2 to 2 s at the default 20 ms tick)


class FaultSpecError(ValueError):
    """A `--faults` value that does not parse; the message names the item and why."""


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
            raise FaultSpecError(f"--faults '{spec}': no spaces allowed (KIND:PROB,KIND:PROB)")
        for item in spec.split(","):
            kind, sep, prob = item.partition(":")
            if not sep:
                raise FaultSpecError(f"--faults '{spec}': item '{item}' is not KIND:PROB")
            if kind not in KINDS:
                raise FaultSpecError(f"--faults '{spec}': unknown fault '{kind}' (known: {', '.join(KINDS)})")
            if kind in seen:
                raise FaultSpecError(f"--faults '{spec}': fault '{kind}' is given twice")
            try:
                p = float(prob)
            except ValueError:
                raise FaultSpecError(f"--faults '{spec}': probability '{prob}' of '{kind}' is not a number") from None
            if not 0.0 <= p <= 1.0:
                raise FaultSpecError(f"--faults '{spec}': probability {prob} of '{kind}' is outside [0, 1]")
            seen[kind] = p
        return cls(**seen)

    def __str__(self) -> str:
        items = [f"{k}:{v:g}" for k, v in asdict(self).items() if v]
        return ",".join(items) if items else "none"

    def to_json(self) -> dict[str, float]:
        return asdict(self)
