"""`kvsm sweep`: a grid of `kvsm sim` runs on Dask distributed, as `kvsm campaign` runs
its runs; a table, plots of hit rate against each capacity with the knee marked, and a
one-file HTML report (docs/sim.md, "Sweeps")."""

from __future__ import annotations

import time
from dataclasses import asdict
from collections import Counter
from pathlib import Path
from typing import Any, List, Optional

import typer
from rich.table import Table

from ..bounds import MAX_SWEEP_POINTS
from .campaign import check_scheduler, run_on_dask
from ..sim.shape import L2_GBPS, L3_GBPS, PREFILL_TPS
from .common import EXIT_FAILED, console, emit_json, err, fail, output_option, progress
from .serving import MODEL_HELP, model_option, size_option

STATUSES = ("ok", "stopped", "killed", "error")
# a grid of more points than this is announced on stderr while its points are prepared
# (each is prepared as `kvsm sim` would before any runs: tens of milliseconds a point)
ANNOUNCE_POINTS = 100


def _list(option: str, example: str, sim_help: str, default: str) -> Any:
    return typer.Option(None, option, help=f"values, comma-separated (e.g. {example}){sim_help} (default {default})")


def register(app: typer.Typer) -> None:
    @app.command("sweep")
    def sweep(
        workload: Optional[str] = typer.Option(None, "--workload", "-w", help="workloads, comma-separated, as kvsm sim --workload (default synthetic)"),
        config: Optional[str] = typer.Option(None, "--config", "-c", help="configs, comma-separated: built-in names or TOML paths (default: the built-in config named default)"),
        ranks: Optional[str] = _list("--ranks", "1,4", "", "4, the R of -c default; with another -c, its R"),
        seed: Optional[str] = typer.Option(None, "--seed", "-s", help="seeds, comma-separated (default 0)"),
        requests: Optional[str] = typer.Option(None, "--requests", "-n", help="request counts, comma-separated, as kvsm sim -n (default all of a trace: 3993 of synthetic; 2000 generated)"),
        tiers: Optional[List[str]] = typer.Option(None, "--tiers", metavar="TIERS", help="a tier set: l1 | l1,l2 | l1,l2,l3; repeat the option for several (--tiers l1 --tiers l1,l2; default l1,l2)"),
        page_tokens: Optional[str] = _list("--page-tokens", "16,512", "", "512, a trace's block; with -w config-prompts the config's P, 16 in default"),
        l1_pages: Optional[str] = _list("--l1-pages", "256,512,1024", ": device pages per rank lane", "512, the L1 of -c default"),
        l2_pages: Optional[str] = _list("--l2-pages", "2048,8192", ": shared host pages, for the points with L2", "4096, the L2 of -c default"),
        l3_pages: Optional[str] = _list("--l3-pages", "4096,0", ": disk pages per rank, for the points with L3", "0, the L3 of -c default: enough for the whole workload"),
        eviction: Optional[str] = _list("--eviction", "lru,slru", "", "slru, the eviction of every built-in config but sglang-upstream's lru"),
        faults: Optional[str] = _list("--faults", "none,slow:0.1+abort:0.05", ": '+' joins the items of one mix", "none"),
        schedule: Optional[str] = _list("--schedule", "serial,timed,random:0.5", ": any kvsm sim --schedule", "auto"),
        bug: Optional[str] = typer.Option(None, "--bug", help="injected defects, comma-separated (docs/defects.md; default none, or the one a config file names)", metavar="NAMES"),
        replicas: Optional[str] = typer.Option(None, "--replicas", help="replica levels, comma-separated, as kvsm sim --replicas: every | agreement | off (default agreement: the fastest that still compares the ranks' replicas)"),
        check: bool = typer.Option(False, "--check", help="check every invariant after every transition of every point (slower)"),
        workers: Optional[int] = typer.Option(None, "--workers", min=1, help="local worker processes (default: the CPU count)"),
        scheduler: Optional[str] = typer.Option(None, "--scheduler", help="address of an existing Dask scheduler (tcp://HOST:PORT)"),
        outdir: Path = output_option(Path("out/sweep"), "-o", "--output", help="directory of results.jsonl, results.csv, the plots and report.html"),
        max_points: int = typer.Option(MAX_SWEEP_POINTS, "--max-points", min=1, metavar="N", help="the most points the grid may have; a larger grid is refused before anything runs"),
        resume: bool = typer.Option(False, "--resume", help="continue the sweep in -o: run only the points without a result (the grid may have grown)"),
        as_json: bool = typer.Option(False, "--json", help="print the summary as one JSON object"),
        model: Optional[str] = model_option(MODEL_HELP.replace("the model", "models, comma-separated,", 1)),
        l1_size: Optional[str] = size_option("--l1-size", "device KV memory per rank, comma-separated (e.g. 8GiB,16GiB), instead of --l1-pages"),
        l2_size: Optional[str] = size_option("--l2-size", "shared host pool sizes, comma-separated, instead of --l2-pages"),
        l3_size: Optional[str] = size_option("--l3-size", "disk sizes per rank, comma-separated, instead of --l3-pages"),
        prefill_tps: Optional[str] = typer.Option(None, "--prefill-tps", metavar="RATES", help=f"prefill tokens per second per rank, comma-separated (default {PREFILL_TPS:g}, an assumption: docs/sim.md)"),
        l2_gbps: Optional[str] = typer.Option(None, "--l2-gbps", metavar="RATES", help=f"host-to-device GB/s per rank, comma-separated (default {L2_GBPS:g})"),
        l3_gbps: Optional[str] = typer.Option(None, "--l3-gbps", metavar="RATES", help=f"disk-to-host GB/s per rank, comma-separated (default {L3_GBPS:g})"),
        reload_ttl_s: Optional[str] = typer.Option(None, "--reload-ttl-s", metavar="SECONDS", help="reload ttls in seconds, comma-separated, as kvsm sim --reload-ttl-s"),
        tenants: Optional[str] = _list("--tenants", "1,2,8", ": tenant counts, as kvsm sim --tenants; with more than one, isolation.png draws the hit rate isolated and shared against them", "1"),
        tenant_mix: Optional[str] = _list("--tenant-mix", "0,0.5,1", ": fractions of the requests on prompts the tenants share, for the points with --tenants N > 1", "1"),
    ) -> None:
        """Run a grid of simulations, one per combination of the values given (every kvsm
        sim option takes a comma-separated list), on Dask distributed; write the results
        as JSON lines and CSV, plots of hit rate against each capacity with its knee, and
        an HTML report."""
        from ..campaign.execute import run_all
        from ..campaign.store import StoreError
        from ..output import OutputError, check_output_file
        from ..sweep.grid import CHOICES, GridError, Point, SweepResults, check_points, check_size, parse_axes, run_point, used_grid
        from ..sweep.report import CSV, REPORT, knees, write_outputs
        from ..sweep.isolation import ISOLATION_CSV, isolation_rows
        from ..sweep.seeds import SEEDS_CSV

        given = {"workload": workload, "config": config, "ranks": ranks, "seed": seed, "requests": requests, "tiers": tiers,
                 "page_tokens": page_tokens, "l1_pages": l1_pages, "l2_pages": l2_pages, "l3_pages": l3_pages,
                 "eviction": eviction, "faults": faults, "schedule": schedule, "bug": bug, "replicas": replicas,
                 "model": model, "l1_size": l1_size, "l2_size": l2_size, "l3_size": l3_size, "prefill_tps": prefill_tps,
                 "l2_gbps": l2_gbps, "l3_gbps": l3_gbps, "reload_ttl_s": reload_ttl_s, "tenants": tenants, "tenant_mix": tenant_mix}
        if workers is not None and scheduler is not None:
            raise fail("give --workers or --scheduler, not both")
        try:
            axes = parse_axes(given, check)
            check_size(axes, max_points)  # before a point is made
            points = axes.points()
            if len(points) > ANNOUNCE_POINTS:
                err.print(f"kvsm: sweep: preparing {len(points):,} points (each checked as kvsm sim would, before any runs)", highlight=False, soft_wrap=True)
            bar = progress()
            with bar:
                task = bar.add_task("sweep: points prepared", total=len(points))
                check_points(points, lambda: bar.advance(task))
        except GridError as e:
            raise fail(str(e)) from None
        check_scheduler(scheduler)
        store = SweepResults(outdir)
        try:  # nothing is written, nor a cluster started, for a directory that cannot be used
            for name in (CSV, SEEDS_CSV, ISOLATION_CSV, REPORT):
                check_output_file(outdir / name)
            store.check(CHOICES, resume)
            done = store.done()
        except (OutputError, StoreError, OSError) as e:
            raise fail(str(e)) from None

        def open_store() -> None:  # once the cluster answers: one that cannot be reached leaves no file
            try:
                store.open(CHOICES, resume)
            except (OutputError, StoreError, OSError) as e:
                raise fail(str(e)) from None
        todo = [p for p in points if p.key not in done]
        t0 = time.perf_counter()
        count: Counter = Counter()

        def describe(rec: dict[str, Any]) -> str:
            count[rec.get("status", "error")] += 1
            bad = sum(v for k, v in count.items() if k != "ok")
            return f"sweep: {sum(count.values())}/{len(todo)} points" + (f", {bad} not ok" if bad else "")

        def execute(session: Any, on_result: Any) -> None:
            def stored(rec: dict[str, Any]) -> None:
                if "options" not in rec:  # a point whose task raised or whose workers died
                    rec["options"] = asdict(Point.from_json(rec.pop("spec")))
                store.append(rec)
                on_result(rec)

            run_all(session, todo, None, stored, run=run_point, key="point")

        n_workers, lost = run_on_dask(todo, store, workers, scheduler, execute, describe, "sweep", open_store)
        latest = {r["point"]: r for r in store.read()}
        records = [latest[p.key] for p in points if p.key in latest]
        status = Counter(r.get("status", "error") for r in records)
        summary: dict[str, Any] = {
            "points": len(points),
            "ran": len(todo),
            "status": {s: status.get(s, 0) for s in STATUSES},
            "workers": n_workers,
            "workers_lost": lost,
            "seconds": round(time.perf_counter() - t0, 3),
            "grid": used_grid(axes, records),
            "knees": knees(axes, records),
        }
        isolation = isolation_rows(axes, records)
        if isolation:  # over several tenant counts: the price of isolation per curve
            summary["isolation"] = isolation
        try:
            written = write_outputs(axes, records, summary, outdir)
        except OutputError as e:
            raise fail(f"{e}; the results are complete in {store.path}") from None
        summary["files"] = [str(p) for p in [store.path, *written]]
        if as_json:
            emit_json(summary)
        else:
            console.print(_table(summary, records, axes.varying()))
            for p in summary["files"]:
                console.print(f"wrote {p}", highlight=False)
        if any(r.get("status") != "ok" for r in records):
            raise typer.Exit(EXIT_FAILED)


def _isolation_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One line per curve of `isolation.csv`: the block hit rate isolated / shared at each tenant count."""
    by: dict[str, list[str]] = {}
    for r in rows:
        by.setdefault(r["curve"], []).append(f"{r['tenants']}: {r['isolated_blocks']:.4f} / {r['shared_blocks']:.4f}")
    return [f"{name}: block hit rate isolated / shared by tenants, {', '.join(v)}" for name, v in by.items()]


def _table(s: dict[str, Any], records: list[dict[str, Any]], varying: list[str]) -> Table:
    from ..sweep.grid import OPTION, show

    t = Table(title=f"kvsm sweep: {s['points']} points, {s['ran']} run now on {s['workers']} workers in {s['seconds']:.1f} s")
    for n in varying:
        t.add_column(OPTION[n])
    for c in ("status", "block hit rate", "token hit rate", "hit L1 / L2 / L3 (blocks)", "tokens saved", "TTFT ms mean / p99"):
        t.add_column(c, justify="right")
    for r in records:
        cells = [show(n, r["options"].get(n)) for n in varying]
        if r.get("status") == "ok":
            h = r["hit_rate"]
            cells += ["ok", f"{h['blocks']:.4f}", f"{h['tokens']:.4f}", " / ".join(f"{h[f'blocks_{x}']:.4f}" for x in ("l1", "l2", "l3"))]
            sim = r["sim"]
            cells += [f"{sim['tokens_saved']['total']:,}", f"{sim['ttft_ms']['mean']:,.1f} / {sim['ttft_ms']['p99']:,.1f}"] if "ttft_ms" in sim else ["-", "-"]
        else:
            cells += [r.get("status", "?"), "-", "-", "-", "-", "-"]
        t.add_row(*cells)
    from ..sweep.seeds import knee_lines

    for line in knee_lines(s["knees"]) + _isolation_lines(s.get("isolation", [])):  # one a curve (the mean's over seeds)
        t.caption = (t.caption + "\n" if t.caption else "") + line
    return t
