"""Where a campaign's or a sweep's run keeps its temporary files (its run log, a shrink's
workload): on a Dask worker, inside the worker's own directory, which a local cluster
keeps under the campaign's scratch directory (`kvsm.campaign.execute.connect`), and
which the campaign removes at close however the worker process ends (a SIGTERM to the
campaign stops the workers mid-run: a run's own `finally` never runs there). Off a
worker (a run called directly), the temporary directory."""

from __future__ import annotations


def scratch_dir() -> str | None:
    """The Dask worker's directory when this process is one, else None (`tempfile`'s
    default directory)."""
    try:
        from distributed import get_worker  # noqa: PLC0415

        return get_worker().local_directory
    except (ImportError, ValueError, AttributeError):
        return None
