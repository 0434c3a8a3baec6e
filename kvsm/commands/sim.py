"""`kvsm sim`: drive the model from a workload (docs/sim.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, Optional, Sequence

import typer
from rich.table import Table

from rich.markup import escape

from ..bounds import MAX_DEVICE_PAGES, MAX_GENERATED_REQUESTS, MAX_RANKS
from ..sim.shape import L2_GBPS, L3_GBPS, PREFILL_TPS
from ..sim.tenants import MAX_TENANTS
from .common import EXIT_FAILED, bug_option, console, emit_json, err, fail, output_option, progress, warn
from .serving import model_option, rate_option, size_option, ttl_option


def _summary_table(s: dict[str, Any]) -> Table:
    c = s["config"]
    table = Table(title=f"kvsm sim: {s['workload']['name']} ({s['requests']} requests), seed {s['seed']}")
    table.add_column("measure")
    table.add_column("value", justify="right")
    rows = [
        ("schedule, tiers, faults", f"{s['schedule']}, {s['tiers']}, {s['faults']}"),
        ("ranks, page tokens, L1 per lane, L2", f"{c['R']}, {c['P']}, {c['L1']}, {c['L2']}"),
        ("policy, eviction", f"{c['policy']}, {c['eviction']}"),
        ("block hit rate", f"{s['hit_rate_blocks']:.4f}"),
        ("token hit rate", f"{s['hit_rate_tokens']:.4f}"),
        (
            "pages: total / hit L1 / hit L2" + (" / hit L3" if c["L3"] else ""),
            f"{s['pages_total']} / {s['pages_hit_l1']} / {s['pages_hit_l2']}" + (f" / {s['pages_hit_l3']}" if c["L3"] else ""),
        ),
        ("pages recomputed (of which not cached)", f"{s['pages_recomputed']} ({s['pages_uncached']})"),
        ("pages moved L1->L2 / L2->L1", f"{s['pages_moved']['l1_to_l2']} / {s['pages_moved']['l2_to_l1']}"),
        ("pages evicted from L1 / L2", f"{s['evictions']['l1']} / {s['evictions']['l2']}"),
        ("backups reserved / committed / rolled back", f"{s['backups_reserved']} / {s['backups_committed']} / {s['backups_rolled_back']}"),
        ("load-backs (refused)", f"{s['loadbacks']} ({s['loadbacks_refused']})"),
        ("requests finished / aborted / not cached", f"{s['requests_finished']} / {s['requests_aborted']} / {s['requests_uncached']}"),
    ]
    if c["L3"]:
        w = s["reload_wait_ticks"]
        rows[2:2] = [("L3 pages per rank, spill / reload inflight, ttl", f"{c['L3']}, {c['spill_inflight']} / {c['reload_inflight']}, {c['reload_ttl']}")]
        rows += [
            ("pages moved L2->L3 / L3->L2", f"{s['pages_moved']['l2_to_l3']} / {s['pages_moved']['l3_to_l2']}"),
            ("spills submitted / durable / failed / stale", f"{s['spills_submitted']} / {s['spills_durable']} / {s['spills_failed']} / {s['spills_stale']}"),
            ("reloads reserved / admitted / aborted", f"{s['reloads_reserved']} / {s['reloads_admitted']} / {s['reloads_aborted']}"),
            ("requests held / released by ttl", f"{s['requests_held']} / {s['reloads_expired']}"),
            ("reload wait ticks: mean / max", f"{w['mean']:.2f} / {w['max']}"),
        ]
    rows += [
        ("faults injected", ", ".join(f"{k} {v}" for k, v in s["faults_injected"].items()) or "none"),
        ("transitions, sync points", f"{s['transitions']}, {s['sync_points']}"),
        ("wall time", f"{s['seconds']:.2f} s"),
    ]
    from .serving import serving_rows

    rows[2:2] = serving_rows(s)
    at = next(i for i, (k, _) in enumerate(rows) if k == "token hit rate") + 1
    rows[at:at] = tenant_rows(s)
    for k, v in rows:
        table.add_row(k, v)
    return table


# the namespaces the table names one by one (all are in --json)
TABLE_NAMESPACES = 16


def tenant_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    """With more than one namespace: the hit rates isolated and shared, the price of
    isolation, and per namespace (the first TABLE_NAMESPACES)."""
    t = s.get("tenants")
    if t is None:
        return []
    mix = f", mix {t['tenant_mix']:g}" if "tenant_mix" in t else ""
    rows = [
        ("namespaces" + (f" (--tenants {t['tenants']}{mix})" if "tenants" in t else ""), str(t["namespaces"])),
        ("block hit rate isolated / shared", f"{t['isolated']['hit_rate_blocks']:.4f} / {t['shared']['hit_rate_blocks']:.4f}"),
        ("price of isolation (blocks, tokens)", f"{t['price_of_isolation']['blocks']:.4f}, {t['price_of_isolation']['tokens']:.4f}"),
    ]
    for ns, d in list(t["per_namespace"].items())[:TABLE_NAMESPACES]:
        name = f" ({d['name']})" if "name" in d else ""
        rows.append((f"  namespace {ns}{name}: requests, block hit rate isolated / shared", f"{d['requests']}, {d['hit_rate_blocks']:.4f} / {d['shared_hit_rate_blocks']:.4f}"))
    if len(t["per_namespace"]) > TABLE_NAMESPACES:
        rows.append(("  more namespaces (in --json)", str(len(t["per_namespace"]) - TABLE_NAMESPACES)))
    return rows


def sim_outputs(output: Optional[Path], plot: Optional[Path], report: Optional[Path]) -> list[tuple[str, Optional[Path]]]:
    """Every file `kvsm sim` may write, by the option that names it."""
    from ..sim.report import PLOTS

    plots = [("--plot", plot / name) for name in PLOTS] if plot is not None else []
    return [("-o/--output", output), ("--report", report), *plots]


def sim_inputs(workload: str, config: str) -> list[tuple[str, Optional[Path]]]:
    """The files `kvsm sim` reads: the workload's trace (none for a generator), the config."""
    from ..sim.options import config_file
    from ..sim.workload import workload_file

    return [("-w/--workload", workload_file(workload)), ("-c/--config", config_file(config))]


def note(message: str) -> None:
    """`note: message` on one line of stderr: something the user may not expect, done as asked."""
    err.print(f"[cyan]note:[/cyan] {escape(message)}", highlight=False, soft_wrap=True)


def note_short_trace(prep: Any, requests: Optional[int], option: str = "-n") -> None:
    """A note when more requests were asked for than the trace file holds: all of them run."""
    n = len(prep.workload.requests)
    if requests is not None and n < requests:
        note(f"the trace {prep.workload.source} has {n} requests; {option} {requests} runs all of them")


def _tell_story(opts: Any, output: Optional[Path], inputs: Sequence[tuple[str, Optional[Path]]] = ()) -> None:
    """After a run stopped: run the same seed again, keep its log up to where it stops
    (the run itself leaves no log, by design), and print the story of its last steps."""
    from ..log import Header, LogWriter
    from ..output import OutputError, check_distinct
    from ..render.story import tail_story
    from ..sim import STOPS
    from ..sim.options import prepare
    from ..sim.scheduler import Simulation

    path = output.with_name(output.stem + ".failed.jsonl") if output is not None else Path("out") / f"sim-seed{opts.seed}.failed.jsonl"
    try:
        check_distinct([("the failed run's log", path)], inputs)
    except OutputError as e:
        err.print(f"(no story: {escape(str(e))})", highlight=False, soft_wrap=True)
        return
    try:
        prep = prepare(opts)
        sim = Simulation(prep, opts.timing, opts.seed, check=opts.check)
        header = Header(config=prep.cfg, seed=opts.seed, source="sim", initial_digest=sim.cluster.state.digest(), extra={"stopped": "a failed run, up to where it stopped"})
        stopped = False
        with LogWriter(path, header) as w:
            sim.writer = w
            try:
                sim.run()
            except STOPS:
                stopped = True  # the same stop, deterministically: the log keeps what led to it
        if not stopped:
            err.print(f"(no story: the same seed ran to the end the second time; its log is {escape(str(path))})", highlight=False, soft_wrap=True)
            return
        story = tail_story(path)
    except Exception as e:  # noqa: BLE001 - the story is an aid; the run's own error was reported
        err.print(f"(no story of the failed run: {escape(f'{type(e).__name__}: {e}')})", highlight=False, soft_wrap=True)
        return
    from .show import emit_err

    emit_err(story)


# Cost of a run on the project's 2-core machine, per request: under --replicas every each
# replicated step is applied to the log's state and to every rank's replica, and a step's
# work grows with the number of lanes too (100 requests of the bundled trace: 1.2 s on 4
# ranks, 34 s on 64, 112 s on 128; the whole trace on 4 ranks: 14.6 s with L1+L2, 30.7 s
# with L3). Under `agreement` most steps are the log's alone (about a third of the time
# with 4 ranks, counted here as two copies of the state), under `off` all of them.
_MS_PER_REPLICA = 1.0
_MS_PER_REPLICA_SQUARED = 0.05
_SLOW_RUN_SECONDS = 60.0


def estimate_seconds(requests: int, ranks: int, l3: bool, check: bool, replicas: str = "every") -> float:
    """A rough wall time of a simulation on this project's development machine."""
    n = ranks + 1 if replicas == "every" else min(ranks + 1, 2) if replicas == "agreement" else 1
    s = requests * (_MS_PER_REPLICA * n + _MS_PER_REPLICA_SQUARED * (ranks + 1) ** 2) / 1000
    return s * (2 if l3 else 1) * (3 if check else 1)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} seconds"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} minutes"
    return f"{seconds / 3600:.1f} hours"


def _warn_if_slow(prep: Any, check: bool) -> None:
    n, R = len(prep.workload.requests), prep.cfg.R
    est = estimate_seconds(n, R, prep.l3, check, prep.replicas)
    if prep.shared is not None:  # the shared baseline: the same requests again, no replicas
        est += estimate_seconds(n, R, prep.l3, False, "off")
    if est >= _SLOW_RUN_SECONDS:
        why = (f"every replicated step is applied to each of the {R} ranks' replicas, and a step's work grows with the "
               f"ranks; --replicas agreement or off is faster") if prep.replicas == "every" else "a step's work grows with the ranks"
        warn(
            f"{n} requests on {R} ranks{' with L3' if prep.l3 else ''}{' and --check' if check else ''} will take about "
            f"{_duration(est)} here ({why}); progress follows on stderr"
        )


def register(app: typer.Typer) -> None:
    @app.command("sim")
    def sim(
        workload: str = typer.Option("synthetic", "--workload", "-w", help="a trace file (Mooncake JSONL), 'synthetic' (the bundled Mooncake synthetic trace), or a generator: system-prompts, multi-turn, long-doc, thrash, prefix-tree; or config-prompts: the config's own prompts, drawn uniformly"),
        config: str = typer.Option("default", "--config", "-c", help="built-in config name or TOML path; default: R 4, L1 512, L2 4096 pages (docs/sim.md)"),
        ranks: Optional[int] = typer.Option(None, "--ranks", min=1, max=MAX_RANKS, help=f"ranks R, at most {MAX_RANKS} (default 4, the R of -c default; with another -c, its R)"),
        seed: int = typer.Option(0, "--seed", "-s", min=0, max=2**63 - 1, help="decides workload generation, timing and faults"),
        requests: Optional[int] = typer.Option(None, "--requests", "-n", min=1, help=f"first N requests of a trace (default all: 3993 of synthetic); N generated requests, at most {MAX_GENERATED_REQUESTS} (default 2000)"),
        tiers: str = typer.Option("l1,l2", "--tiers", help="l1 | l1,l2 | l1,l2,l3"),
        page_tokens: Optional[int] = typer.Option(None, "--page-tokens", help="tokens per page, dividing the workload's block (default 512, a trace's or generator's block; with -w config-prompts the config's P, 16 in default)"),
        l1_pages: Optional[int] = typer.Option(None, "--l1-pages", help=f"device pages per rank lane (default 512, the L1 of -c default); 0 = enough for the whole workload (ranks * pages at most {MAX_DEVICE_PAGES})"),
        l2_pages: Optional[int] = typer.Option(None, "--l2-pages", help="shared host pages (default 4096, the L2 of -c default); 0 = enough for the whole workload"),
        l3_pages: Optional[int] = typer.Option(None, "--l3-pages", help="disk pages per rank (with --tiers l1,l2,l3; default 0, the L3 of -c default); 0 = enough for the whole workload"),
        eviction: Optional[str] = typer.Option(None, "--eviction", help="lru | slru (default slru, the eviction of every built-in config but sglang-upstream's lru)"),
        faults: str = typer.Option("none", "--faults", help="e.g. slow:0.1,stall:0.01,abort:0.05,burst:0.02,disk:0.001 (docs/sim.md)"),
        schedule: str = typer.Option("auto", "--schedule", help="auto | serial | timed | random | random:B | walk; auto = serial for --tiers l1 --ranks 1; random takes any order the reference leaves open, with bias B (default: drawn from the seed); walk takes any enabled transition of the model at each step, as kvsm walk does, the workload's requests as its arrivals (docs/sim.md)"),
        settings: Optional[List[str]] = typer.Option(None, "--set", help="KEY=VALUE: set a config field (repeat), e.g. --set prepared_backups=true"),
        output: Optional[Path] = output_option(None, "-o", "--output", help="transition log to write (atomically)"),
        as_json: bool = typer.Option(False, "--json", help="print the summary as one JSON object"),
        plot: Optional[Path] = output_option(None, "--plot", help="directory for hit_rate.png, occupancy.png and lanes.png"),
        report: Optional[Path] = output_option(None, "--report", help="self-contained HTML report to write"),
        check: bool = typer.Option(False, "--check", help="check every invariant after every transition"),
        replicas: str = typer.Option("every", "--replicas", help="how the ranks' replicas are kept and compared: every (each replica runs every step, compared after each); agreement (a replica that equals the log's state shares its steps, the others run their own, compared at every collective; about 4 times as fast with 4 ranks, a sweep's default); off (none: no rank divergence detected, invariants with --check still are). The log is the same at every level (docs/sim.md, Ranks and divergence)"),
        bug: Optional[str] = bug_option(),
        model: Optional[str] = model_option(),
        l1_size: Optional[str] = size_option("--l1-size", "device KV memory per rank (GPU), e.g. 40GiB: whole pages of the model's shape, instead of --l1-pages"),
        l2_size: Optional[str] = size_option("--l2-size", "the shared host pool, e.g. 256GiB, instead of --l2-pages"),
        l3_size: Optional[str] = size_option("--l3-size", "disk per rank, e.g. 2TB, instead of --l3-pages"),
        prefill_tps: Optional[float] = rate_option("--prefill-tps", PREFILL_TPS, "prefill tokens per second per rank, for the TTFT estimate"),
        l2_gbps: Optional[float] = rate_option("--l2-gbps", L2_GBPS, "host-to-device GB/s per rank, for the TTFT estimate"),
        l3_gbps: Optional[float] = rate_option("--l3-gbps", L3_GBPS, "disk-to-host GB/s per rank, for the TTFT estimate"),
        reload_ttl_s: Optional[float] = ttl_option(),
        tenants: Optional[int] = typer.Option(None, "--tenants", min=1, max=MAX_TENANTS, help=f"spread the workload over N tenants, each its own namespace (cache never shared across namespaces), at most {MAX_TENANTS}; with N > 1 (or a trace whose lines name namespaces) the same requests also run in one shared namespace, and the summary gives the hit rate per namespace and the price of isolation (default 1: the workload as it is)"),
        tenant_mix: Optional[float] = typer.Option(None, "--tenant-mix", min=0.0, max=1.0, help="with --tenants N > 1: the fraction of the requests on prompts every tenant shares (the same blocks); the rest are on prompts private to their tenant (default 1: every prompt shared)"),
    ) -> None:
        """Simulate a workload on the model: scheduler, per-rank replicas, timing and faults from one seed. A run estimated to take more than a minute is announced on stderr; progress goes to stderr."""
        from ..config import ConfigError, builtin_names
        from ..output import OutputError, check_distinct, check_output_file
        from ..sim.report import PLOTS
        from ..sim import STOPS, FaultSpecError, SimError, SimOptions, WorkloadError, simulate, stop_record

        from ..sim.options import parse_setting
        from ..sim.workload import workload_names

        # an empty value would be read as the current directory: say it is empty
        if not workload:
            raise fail(f"-w/--workload is empty: give a trace file, 'synthetic' or a generator name ({workload_names()})")
        if not config:
            raise fail(f"-c/--config is empty: give a built-in config name ({', '.join(builtin_names())}) or a TOML file's path")
        try:
            sets = tuple(parse_setting(x) for x in settings or ())
        except SimError as e:
            raise fail(str(e)) from None
        opts = SimOptions(
            workload=workload,
            config=config,
            ranks=ranks,
            seed=seed,
            requests=requests,
            tiers=tiers,
            page_tokens=page_tokens,
            l1_pages=l1_pages,
            l2_pages=l2_pages,
            l3_pages=l3_pages,
            eviction=eviction,
            faults=faults,
            schedule=schedule,
            check=check,
            bug=bug,
            settings=sets,
            replicas=replicas,
            model=model,
            l1_size=l1_size,
            l2_size=l2_size,
            l3_size=l3_size,
            prefill_tps=prefill_tps,
            l2_gbps=l2_gbps,
            l3_gbps=l3_gbps,
            reload_ttl_s=reload_ttl_s,
            tenants=tenants,
            tenant_mix=tenant_mix,
        )
        try:  # what is written after the run is checked before it, so a run is never lost to a bad path
            # and no output replaces an input or another output (every file is left as it was)
            check_distinct(sim_outputs(output, plot, report), sim_inputs(workload, config))
            if plot is not None:
                for name in PLOTS:  # refuses a --plot that is a file, or a plot's place that is not one
                    check_output_file(plot / name)
            if report is not None:
                check_output_file(report)
        except OutputError as e:
            raise fail(str(e)) from None
        bar = progress("sim")
        try:
            with bar:
                task = bar.add_task("sim: requests", total=None)

                def on_progress(done: int, total: int) -> None:
                    bar.update(task, completed=done, total=total)

                def on_start(prep: Any) -> None:
                    note_short_trace(prep, requests)
                    _warn_if_slow(prep, check)

                result = simulate(opts, output, on_progress, on_start=on_start)
        except (SimError, ConfigError, WorkloadError, FaultSpecError, OutputError) as e:
            raise fail(str(e)) from None
        except STOPS as e:
            if as_json:
                emit_json({"stopped": stop_record(e, seed)})
                raise typer.Exit(EXIT_FAILED) from None
            stop = fail(str(e), EXIT_FAILED, "run stopped")
            _tell_story(opts, output, sim_inputs(workload, config))
            raise stop from None
        written = []
        try:
            if plot is not None:
                from ..sim.report import write_plots

                written += write_plots(result, plot)
            if report is not None:
                from ..sim.report import write_report

                written.append(write_report(result, report))
        except OutputError as e:
            where = f"; the log {output} is complete" if output is not None else ""
            raise fail(f"{e}{where}") from None
        if as_json:
            emit_json(result.summary)
        else:
            console.print(_summary_table(result.summary))
            if output is not None:
                console.print(f"log: {output}", highlight=False)
            for p in written:
                console.print(f"wrote {p}", highlight=False)
