"""`kvsm campaign`: many seeded simulations on Dask distributed, every failure shrunk
(docs/campaign.md)."""

from __future__ import annotations

import math
import os
import re
import signal
import time
from pathlib import Path
from typing import Any, Callable, List, Optional

import typer

from ..bounds import MAX_CAMPAIGN_RUNS
from .common import EXIT_ENVIRONMENT, EXIT_FAILED, Interrupted, alias_value, console, emit_json, err, fail, output_option, progress as make_progress

# PROTOCOL://HOST:PORT or HOST:PORT (a name, an IPv4 address or a bracketed IPv6 one)
_ADDRESS = re.compile(r"(?:[a-z]+://)?(?:[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}")
# how long a campaign waits for its cluster: a local one starts in seconds, a scheduler
# that does not answer is reported instead of waited on
CONNECT_SECONDS = 10.0
PLOTS = ("coverage.png", "failures.png")
PIPE_TABLE_WIDTH = 120


def _fail(msg: str, code: int | None = None) -> None:
    raise fail(msg) if code is None else fail(msg, code)


def _range(text: str, option: str) -> tuple[int, int]:
    a, sep, b = text.partition("..")
    try:
        lo, hi = int(a), int(b if sep else a)
    except ValueError:
        _fail(f"{option} {text!r}: expected MIN..MAX (integers)")
    return lo, hi


def _finite(value: float) -> float:
    """A float option's callback: inf and -inf are refused as nan is (by its range), so
    that no `Infinity` reaches campaign.json, which must stay strict JSON."""
    if not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number of seconds (0: no budget)")
    return value


def _configs(text: str) -> list[str]:
    """`-c/--config`: comma-separated names or paths; an empty item (`small,,l3`, or an
    empty list) is an error, not skipped."""
    items = text.split(",")
    if any(not c for c in items):
        _fail(f"-c/--config {text!r}: an empty value in the list")
    return items


def _output_error(outdir: Path, e: Exception) -> str:
    """`-o DIR: reason`, naming DIR once when the error starts with it."""
    msg = str(e)
    return f"-o {msg}" if msg.startswith(f"{outdir}: ") else f"-o {outdir}: {msg}"


def check_scheduler(scheduler: Optional[str]) -> None:
    """A usage error (exit 2) for a --scheduler that is not an address, before anything runs."""
    if scheduler is not None and not _ADDRESS.fullmatch(scheduler):
        _fail(f"--scheduler {scheduler}: not a scheduler address (PROTOCOL://HOST:PORT, such as tcp://10.0.0.5:8786)")


def run_on_dask(
    todo: list,
    store: Any,
    workers: Optional[int],
    scheduler: Optional[str],
    execute: Callable[[Any, Callable[[dict[str, Any]], None]], None],
    describe: Callable[[dict[str, Any]], str],
    label: str,
    open_store: Optional[Callable[[], None]] = None,
) -> tuple[int, list[str]]:
    """Run `todo` on a local cluster of `workers` processes (default: the CPU count) or on
    the cluster behind `scheduler`, with progress on stderr: `execute(session, on_result)`
    submits the runs and stores each result before calling `on_result(rec)`, and
    `describe(rec)` is the progress line after it. The wait for the cluster is announced
    and bounded (CONNECT_SECONDS); `open_store()`, when given, runs once the cluster
    answers (or at once with nothing to do), so a cluster that cannot be reached leaves no
    file behind. Interrupted, it says what was recorded and re-raises (the group exits
    130 or 143). Closes the store; returns the workers seen and those lost."""
    from ..campaign.execute import connect

    n_workers = workers or os.cpu_count() or 1
    session = None
    done = 0
    progress = make_progress("{task.description}")
    try:
        if todo:
            where = f"connecting to the Dask scheduler {scheduler}" if scheduler is not None else f"starting a local Dask cluster of {n_workers} workers"
            err.print(f"kvsm: {label}: {where} (at most {CONNECT_SECONDS:g} s) for {len(todo)} runs", highlight=False, soft_wrap=True)
            try:
                session = connect(workers=n_workers if scheduler is None else None, scheduler=scheduler, timeout=CONNECT_SECONDS)
            except (OSError, ConnectionError, TimeoutError, ValueError) as e:
                _fail(f"cannot reach a Dask cluster: {e}", EXIT_ENVIRONMENT)
        if open_store is not None:
            open_store()
        if todo:
            with progress:
                task = progress.add_task(label, total=len(todo))

                def on_result(rec: dict[str, Any]) -> None:
                    nonlocal done
                    done += 1
                    progress.update(task, advance=1, description=describe(rec))

                execute(session, on_result)
            n_workers = len(session.seen_workers) or n_workers
    except (KeyboardInterrupt, Interrupted) as e:
        kept = f"{done} runs recorded in {store.path}; --resume continues" if store.path.exists() else "nothing was written"
        err.print(f"kvsm: {label}: {kept}", highlight=False, soft_wrap=True)
        raise e if isinstance(e, Interrupted) else Interrupted(signal.SIGINT) from None
    finally:
        lost = list(session.lost_workers) if session is not None else []
        if session is not None:
            session.close()
        store.close()
    return n_workers, lost


def register(app: typer.Typer) -> None:
    @app.command("campaign")
    def campaign(
        runs: Optional[int] = typer.Option(None, "--runs", help="runs numbered 0..N-1 (default 100; no short form: -n is --requests everywhere)"),
        seeds: Optional[str] = typer.Option(None, "--seeds", help="runs numbered A..B (inclusive)"),
        configs: str = typer.Option("small,default,l3", "--config", "-c", help="configs to draw from: built-in names or TOML paths, comma-separated"),
        configs_old: Optional[str] = typer.Option(None, "--configs", hidden=True, help="-c/--config's old name"),
        tiers: Optional[List[str]] = typer.Option(None, "--tiers", metavar="TIERS", help="a tier set to draw from (repeat the option): l1 | l1,l2 | l1,l2,l3 (default all three)"),
        faults: Optional[List[str]] = typer.Option(None, "--faults", help="a fault mix to draw from (repeat the option), as kvsm sim --faults, or swarm (the default): each run turns each kind on or off and draws its rate"),
        schedule: str = typer.Option("swarm", "--schedule", help="the runs' kvsm sim --schedule: swarm (the default: half of the runs walk one of the configs that are TLC models, small and l3 of the defaults, --schedule walk --workload config-prompts; the others take random, a bias drawn per run), random, random:B, walk, timed or auto"),
        knobs: str = typer.Option("fixed", "--knobs", help="fixed | reference: with reference, runs also draw the fidelity knobs' reference values (the reference's findings: such runs fail by design)"),
        bug: str = typer.Option("none", "--bug", help="injected defect of every run's config (kvsm.config.BUGS), or none"),
        workers: Optional[int] = typer.Option(None, "--workers", min=1, help="local worker processes (default: the CPU count)"),
        scheduler: Optional[str] = typer.Option(None, "--scheduler", help="address of an existing Dask scheduler (tcp://HOST:PORT)"),
        outdir: Path = output_option(Path("out/campaign"), "-o", "--output", help="directory of results.jsonl and cases/"),
        max_runs: int = typer.Option(MAX_CAMPAIGN_RUNS, "--max-runs", min=1, metavar="N", help="the most runs the campaign may have; more --runs or --seeds are refused before anything runs"),
        resume: bool = typer.Option(False, "--resume", help="continue the campaign in -o: run only the seeds without a result"),
        as_json: bool = typer.Option(False, "--json", help="print the summary as one JSON object"),
        plot: Optional[Path] = output_option(None, "--plot", help="directory for coverage.png and failures.png"),
        requests: str = typer.Option("8..48", "--requests", help="requests per run, drawn in MIN..MAX"),
        run_seconds: float = typer.Option(300.0, "--run-seconds", min=0, callback=_finite, help="a run's time budget (0: none)"),
        run_transitions: int = typer.Option(500_000, "--run-transitions", min=0, help="a run's transition budget (0: none)"),
        shrink_seconds: float = typer.Option(120.0, "--shrink-seconds", min=0, callback=_finite, help="time a failing run may spend shrinking"),
        validate: Optional[str] = typer.Option(None, "--validate", metavar="all|failed|PERCENT|none", help="runs whose logs TLC follows, the spec as a second implementation: all, failed, none or a percent of the runs chosen by seed (default 10%; none, said in the summary, without Java)"),
    ) -> None:
        """Run many seeded simulations (every invariant checked, every replica compared)
        on Dask distributed; shrink and group every failure; report coverage."""
        from ..campaign.driver import execute_plan, plan
        from ..campaign.run import Budget
        from ..campaign.spec import SpaceError, make_space, seeds_of
        from ..campaign.store import Results, StoreError
        from ..campaign.summary import render, summarize, write_plots
        from ..campaign.validation import DEFAULT, ValidateOptionError, parse_mode, tlc_missing
        from ..output import OutputError, check_output_file

        if workers is not None and scheduler is not None:
            _fail("give --workers or --scheduler, not both")
        configs = alias_value("-c/--config", configs, "small,default,l3", "--configs", configs_old)
        try:
            numbers = seeds_of(runs, seeds)
            if len(numbers) > max_runs:
                given = f"--seeds {seeds}" if seeds is not None else f"--runs {runs}"
                _fail(f"{given}: {len(numbers):,} runs, more than the ceiling {max_runs:,}; --max-runs lifts it")
            space = make_space(_configs(configs), tiers, faults, bug, _range(requests, "--requests"), schedule=schedule, knobs=knobs)
        except SpaceError as e:
            _fail(str(e))
        check_scheduler(scheduler)
        try:
            mode = parse_mode(validate if validate is not None else DEFAULT)
        except ValidateOptionError as e:
            _fail(str(e))
        missing = tlc_missing() if mode != "none" else None
        if missing is not None and validate is not None:
            _fail(f"--validate {validate}: TLC cannot run here: {missing}")
        validation = {"mode": "none" if missing else mode, "unavailable": missing}
        if plot is not None:
            try:
                for name in PLOTS:
                    check_output_file(plot / name)
            except OutputError as e:
                _fail(f"--plot {plot}: {e}")
        budget = Budget(run_seconds, run_transitions, shrink_seconds, validation["mode"])
        choices = {"space": space.to_json(), "budget": budget.to_json()}
        store = Results(outdir)
        try:  # nothing is written, nor a cluster started, for a directory that cannot be used
            store.check(choices, resume)
            todo = plan(space, numbers, store)
        except (StoreError, OutputError) as e:
            _fail(_output_error(outdir, e))
        t0 = time.perf_counter()
        stats = {"failed": 0, "transitions": 0}

        def describe(rec: dict[str, Any]) -> str:
            stats["transitions"] += rec.get("transitions", 0)
            stats["failed"] += rec.get("status") in ("failed", "error")
            rate = stats["transitions"] / max(1e-9, time.perf_counter() - t0)
            return f"campaign: {rate:,.0f} transitions/s, {stats['failed']} failed"

        def open_store() -> None:
            try:
                store.open(choices, resume)
            except (StoreError, OutputError) as e:
                _fail(_output_error(outdir, e))

        n_workers, lost = run_on_dask(
            todo, store, workers, scheduler,
            lambda s, on: execute_plan(s, todo, budget, store, on, max(1, len(s.seen_workers))), describe, "campaign", open_store
        )
        records = list(store.read())
        summary = summarize(records, n_workers, time.perf_counter() - t0, lost, validation)
        written = write_plots(records, plot) if plot is not None else []
        if as_json:
            emit_json(summary)
        else:
            # in a pipe too, a table a person can read: its long cells (the coverage counts)
            # wrap inside their column rather than making rows of a thousand columns
            console.print(render(summary, outdir), width=None if console.is_terminal else PIPE_TABLE_WIDTH)
            for p in written:
                console.print(f"wrote {p}")
            if lost:
                console.print(f"workers lost during the campaign: {', '.join(lost)}; their runs were retried elsewhere "
                              f"({summary['coverage']['runs']['retried']} retried); no result is missing")
        raise typer.Exit(EXIT_FAILED if summary["failures"] else 0)
