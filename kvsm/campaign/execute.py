"""Running a campaign's runs on Dask distributed.

One Dask task per run (`kvsm.campaign.worker.run_task`), on a `LocalCluster` of W worker
processes (one thread each: the model is pure Python and holds the GIL) or on the
workers of an existing scheduler (`--scheduler ADDRESS`). Results come back as they
finish, in any order, and the caller stores each at once.

Dask reschedules the tasks of a worker that dies (killed, out of memory) on the others;
a task whose workers died `distributed.scheduler.allowed-failures` times (3) is given up
as `KilledWorker`, which the campaign records as status `killed`. Each task announces
its start on a worker (a Dask event, topic `kvsm-campaign`), so a result says on how many
workers its run started (`attempts`) and which (`workers`); the workers that left the
cluster during the campaign are listed too.

`kvsm sweep` runs its points the same way (`run_all(..., run=run_point, key="point")`):
a task runs `run(spec_json, budget_json)`, and `key` is the field of a spec's JSON that
names it.
"""

from __future__ import annotations

import logging
import shutil
import signal
import tempfile
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

from .run import Budget
from .worker import run_task
from .spec import RunSpec

TOPIC = "kvsm-campaign"


def task(
    spec_json: dict[str, Any],
    budget_json: dict[str, Any] | None,
    run: Callable[[dict[str, Any], dict[str, Any] | None], dict[str, Any]] = run_task,
    key: str = "seed",
) -> dict[str, Any]:
    """What a worker runs: announce the start, then the run."""
    from distributed import get_worker

    try:
        w = get_worker()
        w.log_event(TOPIC, {"key": spec_json[key], "worker": w.address})
    except ValueError:  # not on a worker (called directly)
        pass
    return run(spec_json, budget_json)


@dataclass
class Session:
    """A Dask client, and the local cluster it owns (None on an existing scheduler)."""

    client: Any
    local: Any
    address: str
    starts: dict[Any, list[str]] = field(default_factory=dict)  # by the spec's key
    seen_workers: set[str] = field(default_factory=set)
    lost_workers: list[str] = field(default_factory=list)

    def workers(self) -> set[str]:
        # asked of the scheduler directly: `Client.scheduler_info` returns a cache that the
        # client's own periodic refresh may replace, at any moment, by one without workers
        c = self.client
        return set(c.sync(c.scheduler.identity, n_workers=-1)["workers"])

    scratch: str | None = None  # the local workers' directory, removed at close

    def close(self) -> None:
        # a local scheduler runs in this process: while the client and the cluster go
        # down, it may still try to send a finished task's news to the closed client and
        # log that as CRITICAL with a traceback, news nobody waits for any more
        with _quiet_dask():
            try:
                self.client.close()
            finally:
                try:
                    if self.local is not None:
                        self.local.close()
                finally:
                    if self.scratch is not None:
                        shutil.rmtree(self.scratch, ignore_errors=True)


@contextmanager
def _quiet_dask() -> Iterator[None]:
    """Dask's and tornado's loggers silent, at every level, for the block's length."""
    names = [n for n in list(logging.root.manager.loggerDict) if n.split(".")[0] in ("distributed", "tornado")]
    loggers = [logging.getLogger(n) for n in {"distributed", "tornado", *names}]
    saved = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for lg, level in zip(loggers, saved):
            lg.setLevel(level)


def connect(workers: int | None = None, scheduler: str | None = None, processes: bool = True, timeout: float = 30.0) -> Session:
    """A local cluster of `workers` processes, or the cluster behind `scheduler`."""
    import dask
    from distributed import Client, LocalCluster

    for name in ("distributed", "tornado"):
        logging.getLogger(name).setLevel(logging.ERROR)
    if scheduler is not None:
        client = Client(scheduler, timeout=timeout)
        local = None
        deadline = time.monotonic() + timeout
        while not client.sync(client.scheduler.identity, n_workers=-1)["workers"] and time.monotonic() < deadline:
            time.sleep(0.2)
        if not client.sync(client.scheduler.identity, n_workers=-1)["workers"]:
            client.close()
            raise ConnectionError(f"--scheduler {scheduler}: no worker joined within {timeout:g} s")
        address = scheduler
        scratch = None
    else:
        # the workers' files in a directory of this campaign's own, removed at close
        # (Dask's default, dask-scratch-space/ in the temporary directory, stays behind)
        scratch = tempfile.mkdtemp(prefix="kvsm-dask-")
        try:
            with _workers_ignore_sigint(), dask.config.set({"temporary-directory": scratch}):
                local = LocalCluster(
                    n_workers=workers,
                    threads_per_worker=1,
                    processes=processes,
                    dashboard_address=None,
                    # no dashboard; its HTTP server (health checks) on a free port, not on
                    # 8787, which another cluster may hold (a warning on stderr each time)
                    scheduler_kwargs={"dashboard_address": ":0"},
                    # the workers' own logs: only CRITICAL. A task's error comes back to
                    # the campaign as the task's exception, which it records; what the
                    # workers log at ERROR is their side of the teardown (a heartbeat to
                    # a scheduler already closed, after a Ctrl-C), a traceback on stderr
                    # that nobody can act on
                    silence_logs=logging.CRITICAL,
                    local_directory=scratch,
                )
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        try:
            client = Client(local)
        except BaseException:  # a signal, or a cluster that will not answer: nothing stays behind
            try:
                local.close()
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            raise
        address = local.scheduler_address
    s = Session(client, local, address, scratch=scratch)
    s.seen_workers = s.workers()

    def on_start(event: Any) -> None:
        _, msg = event
        s.starts.setdefault(msg["key"], []).append(msg["worker"])

    client.subscribe_topic(TOPIC, on_start)
    return s


@contextmanager
def _workers_ignore_sigint() -> Iterator[None]:
    """Start worker processes with SIGINT ignored (a disposition a new process inherits,
    and Python keeps): a Ctrl-C at the terminal reaches the whole process group, and the
    campaign, not each worker, answers it (each would print its own traceback); the
    campaign's close stops the workers."""
    try:
        saved = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: nothing to change
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, saved)


def run_all(
    session: Session,
    specs: Iterable[RunSpec],
    budget: Budget | None,
    on_result: Callable[[dict[str, Any]], None],
    run: Callable[[dict[str, Any], dict[str, Any] | None], dict[str, Any]] = run_task,
    key: str = "seed",
) -> None:
    """Submit every run and hand each result to `on_result` as it finishes; a run is
    `run(spec.to_json(), budget.to_json())` on a worker, named by its spec's `key`."""
    from distributed import as_completed

    client = session.client
    token = uuid.uuid4().hex[:8]
    budget_json = budget.to_json() if budget is not None else None
    futures = {}
    for spec in specs:
        spec_json = spec.to_json()
        name = spec_json[key]
        f = client.submit(task, spec_json, budget_json, run, key, key=f"kvsm-run-{name}-{token}", pure=False)
        futures[f] = (name, spec_json)
    for fut in as_completed(list(futures)):
        name, spec_json = futures.pop(fut)
        _notice_workers(session)
        if fut.status == "finished":
            rec = fut.result()
        else:
            exc = fut.exception()
            killed = type(exc).__name__ == "KilledWorker"
            rec = {
                key: name,
                "status": "killed" if killed else "error",
                "spec": spec_json,
                "error": f"{type(exc).__name__}: {exc}"[:2000],
                "transitions": 0,
            }
        starts = session.starts.get(name, [])
        rec["attempts"] = max(1, len(starts))
        if len(starts) > 1:
            rec["workers"] = starts
        on_result(rec)
        fut.release()
    _notice_workers(session)


def _notice_workers(session: Session) -> None:
    try:
        now = session.workers()
    except Exception:  # noqa: BLE001 - the scheduler is busy; look again at the next result
        return
    for w in sorted(session.seen_workers - now):
        if w not in session.lost_workers:
            session.lost_workers.append(w)
    session.seen_workers |= now
