"""`kvsm.collector.quiet_collector`: the collector's setting during a run, and after."""

from __future__ import annotations

import gc

from kvsm.collector import RUN_THRESHOLD, quiet_collector


def test_quiet_collector_raises_the_young_threshold_freezes_and_restores_at_the_outermost_exit():
    before = gc.get_threshold()
    frozen = gc.get_freeze_count()
    with quiet_collector():
        assert gc.get_threshold() == (RUN_THRESHOLD, *before[1:])
        if not frozen:
            assert gc.get_freeze_count() > 0  # what existed before is left out of scans
        with quiet_collector():
            assert gc.get_threshold()[0] == RUN_THRESHOLD
        assert gc.get_threshold()[0] == RUN_THRESHOLD  # the inner exit keeps the run's setting
        a: list = []
        a.append(a)  # a cycle made during the run
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == frozen
    del a
    assert gc.collect() >= 1  # is still collected after
