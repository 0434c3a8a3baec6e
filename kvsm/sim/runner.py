"""Running a simulation end to end: options in, log and summary out."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from ..log import Header, LogWriter
from ..state import ClusterState
from ..transitions import Transition
from .metrics import Sample
from .options import CLOCKLESS, Prepared, SimOptions, prepare
from .scheduler import Simulation
from .shape import capacities, serving_summary
from .watch import Watch


@dataclass
class SimResult:
    summary: dict[str, Any]
    samples: list[Sample]
    final_state: ClusterState
    request_hits: list[tuple[int, int, int, int]]  # per admitted request: (file index, L1, L2, L3 pages)


def simulate(
    opts: SimOptions,
    log: str | Path | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    on_transition: Callable[[Transition, ClusterState], None] | None = None,
    on_start: Callable[[Prepared], None] | None = None,
) -> SimResult:
    """Run one simulation. With `log`, write the transition log there (atomically: a
    run that fails leaves no file). `on_start(prepared)` is called once the options are
    checked and the workload is loaded, before the run; `on_progress(done, total)` per
    request; `on_transition(t, state after)` per transition of the log (an exception it
    raises stops the run). With `opts.check`, a `kvsm.checking.Checker` checks every
    invariant after every transition and a violation raises `SimInvariantError`."""
    prep = prepare(opts)
    if on_start is not None:
        on_start(prep)
    total = len(prep.workload.requests)
    # with tenants, the shared baseline runs the same requests after the isolated run
    runs = 2 if prep.shared is not None else 1
    progress = (lambda n: on_progress(n, runs * total)) if on_progress is not None else None
    sim = Simulation(prep, opts.timing, opts.seed, check=False, on_progress=progress)
    watch = Watch(sim.cluster.state, opts.check, on_transition) if (opts.check or on_transition) else None
    extra = {
        "workload": prep.workload.info(),
        "tiers": opts.tiers,
        "schedule": prep.schedule,
        "faults": str(prep.faults),
        "timing": opts.timing.to_json(prep.l3) if prep.schedule not in CLOCKLESS else None,
    }
    if sim.bias is not None:
        extra["bias"] = sim.bias
    t0 = time.perf_counter()
    if log is not None:
        header = Header(config=prep.cfg, seed=opts.seed, source="sim", initial_digest=sim.cluster.state.digest(), extra=extra)
        with LogWriter(log, header) as w:
            sim.writer = _Tee(w, watch) if watch is not None else w
            sim.run()
            if watch is not None:
                watch.finish()
    else:
        sim.writer = watch
        sim.run()
        if watch is not None:
            watch.finish()
    seconds = time.perf_counter() - t0
    # the plots' time axis ends where the simulation does, not at the last admission
    sim.metrics.sample(sim.end_ms if prep.schedule not in CLOCKLESS else 0, sim.cluster.state)
    cfg = prep.cfg
    summary: dict[str, Any] = sim.metrics.summary()
    summary.update(
        transitions=sim.applied,
        seconds=round(seconds, 3),
        sync_points=sim.cluster.sync_points,
        replicas=prep.replicas,
        iterations=sim.ticks,
        simulated_ms=sim.end_ms,
        final_digest=sim.cluster.state.digest(),
        seed=opts.seed,
        schedule=prep.schedule,
        tiers=opts.tiers,
        **({"bias": sim.bias} if prep.schedule == "random" else {}),
        faults=str(prep.faults),
        faults_injected=summary.pop("faults"),
        workload=prep.workload.info(),
        config={
            "name": cfg.name,
            "R": cfg.R,
            "P": cfg.P,
            "L1": cfg.L1,
            "L2": cfg.L2,
            "L3": cfg.L3,
            "policy": cfg.policy,
            "eviction": cfg.eviction,
            "write_threshold": cfg.write_threshold,
            "load_back_threshold": cfg.load_back_threshold,
            "spill_inflight": cfg.spill_inflight,
            "reload_inflight": cfg.reload_inflight,
            "spill_queue_cap": cfg.spill_queue_cap,
            "reload_ttl": cfg.reload_ttl,
            # a reload's ttl counts ticks of the timed schedule's clock
            "reload_ttl_s": round(cfg.reload_ttl * opts.timing.tick_ms / 1000, 6),
        },
        log=str(log) if log is not None else None,
    )
    reqs = prep.workload.requests
    per_request = [(reqs[i].input_length, h1, h2, h3, i) for i, h1, h2, h3 in sim.metrics.request_hits]
    figures = serving_summary(per_request, summary["pages_moved"], cfg.P, cfg.R, prep.serving)
    summary.update(figures, capacity=capacities(cfg, figures["serving"]["page_bytes"], prep.l2, prep.l3))
    if prep.shared is not None:
        summary["tenants"] = _shared_baseline(prep, opts, summary, sim.metrics.request_hits, on_progress, total)
    return SimResult(summary=summary, samples=sim.metrics.samples, final_state=sim.cluster.state, request_hits=sim.metrics.request_hits)


def _shared_baseline(prep: Prepared, opts: SimOptions, summary: dict[str, Any], hits: list, on_progress: Any, total: int) -> dict[str, Any]:
    """The same run with every request in one namespace (no log, no checks, no replicas:
    the same run at every level, docs/sim.md "Ranks and divergence"): its hit rates
    against the isolated run's, over all and per namespace (`kvsm.sim.tenants`)."""
    from .tenants import tenant_summary

    progress = (lambda n: on_progress(total + n, 2 * total)) if on_progress is not None else None
    base = Simulation(replace(prep, workload=prep.shared, shared=None, replicas="off"), opts.timing, opts.seed, check=False, on_progress=progress)
    base.writer = None
    base.run()
    return tenant_summary(prep.workload, summary, hits, base.metrics.summary(), base.metrics.request_hits)


class _Tee:
    def __init__(self, log: LogWriter, watch: Watch) -> None:
        self.log, self.watch = log, watch

    def write(self, t: Transition, state: ClusterState) -> None:
        self.log.write(t, state)
        self.watch.write(t, state)


def main_job_log(outdir: str | Path, seed: int) -> Path:
    """Where `kvsm run` writes its simulation's log."""
    return Path(outdir) / f"sim-synthetic-{seed}.jsonl"


def main_job_options(seed: int = 0, requests: int = 300, ranks: int = 4) -> SimOptions:
    """The simulation of `kvsm run`: a short multi-rank run (L1 and the shared L2) over
    the first `requests` requests of the bundled Mooncake synthetic trace, on the default
    config, with a light fault mix."""
    return SimOptions(
        workload="synthetic",
        config="default",
        ranks=ranks,
        seed=seed,
        requests=requests,
        tiers="l1,l2",
        # small enough that the trace's first requests evict from L1 and load back from L2
        l1_pages=256,
        l2_pages=2048,
        faults="slow:0.05,stall:0.01,abort:0.02",
    )


def with_shape(opts: SimOptions, model: str | None = None, l1_size: str | None = None, l2_size: str | None = None) -> SimOptions:
    """`opts` with the model of its byte and TTFT figures, and a size (when given) in place
    of its tier's pages (`kvsm run --model --l1-size --l2-size`)."""
    opts = replace(opts, model=model)
    if l1_size is not None:
        opts = replace(opts, l1_pages=None, l1_size=l1_size)
    if l2_size is not None:
        opts = replace(opts, l2_pages=None, l2_size=l2_size)
    return opts


def run_main_job(
    outdir: str | Path = "out",
    seed: int = 0,
    requests: int = 300,
    ranks: int = 4,
    on_progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """The simulator's part of `kvsm run` (`main_job_options`), writing its log to
    `outdir/sim-synthetic-<seed>.jsonl`. Returns the summary (its `log` names the file)."""
    return simulate(main_job_options(seed, requests, ranks), main_job_log(outdir, seed), on_progress).summary
