"""The cyclic garbage collector during a long run of the model.

A transition allocates many small container objects (records, tuples, persistent map
nodes) that are immutable and form no reference cycles; they die by reference count.
The cyclic collector nonetheless scans them, each time the allocations outnumber the
frees by its threshold, and in a simulator run that scanning was a sixth to a quarter of
the time for nothing (a run of the bundled trace collected no cycle at all).
`quiet_collector` keeps it from scanning what existed before the run (`gc.freeze`) and
lets far more allocations pass between scans; cycles are still collected, only later.
"""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from typing import Iterator

# allocations (net of frees) between two scans of the youngest generation during a run
RUN_THRESHOLD = 100_000

_lock = threading.Lock()
_depth = 0
_saved: tuple[int, ...] = ()
_froze = False  # whether the outermost use froze (not when the process had frozen objects already)


@contextmanager
def quiet_collector() -> Iterator[None]:
    """Within: objects made before are left out of every scan, and the youngest
    generation is scanned every `RUN_THRESHOLD` net allocations (700 by default). The
    outermost exit restores the thresholds and hands the frozen objects and those the
    run made to the collector's oldest generation (nested and concurrent uses share one
    setting). In a process that had frozen objects of its own, nothing is frozen or
    unfrozen: only the threshold changes."""
    global _depth, _saved, _froze
    with _lock:
        if _depth == 0:
            _saved = gc.get_threshold()
            # a process that froze objects itself (before a fork, say) keeps them frozen
            _froze = gc.get_freeze_count() == 0
            if _froze:
                gc.freeze()
            gc.set_threshold(RUN_THRESHOLD, *_saved[1:])
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                # what the run made joins the oldest generation with what was frozen (the
                # young generation's scan of it would come at once, at the old threshold)
                if _froze:
                    gc.freeze()
                    gc.unfreeze()
                gc.set_threshold(*_saved)
