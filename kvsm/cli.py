"""The `kvsm` command line (typer + rich). Errors, exit codes, progress and interruption
work the same in every command (`kvsm/commands/common.py`; README, "Errors and exit
codes")."""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from .bounds import available_memory
from .commands import campaign as campaign_commands
from .commands import corpus as corpus_commands
from .commands import gpu as gpu_commands
from .commands import realimpl as realimpl_commands
from .commands import show as show_commands
from .commands import sim as sim_commands
from .commands import sweep as sweep_commands
from .commands import tla as tla_commands
from .commands.serving import model_option, size_option
from .commands.common import (
    EXIT_FAILED,
    EXIT_INPUT,
    KvsmGroup,
    alias_value,
    bug_option,
    busy,
    bug_or_exit,
    config_or_exit,
    console,
    emit_json,
    err,
    fail,
    output_option,
    print_error,
    progress,
    unwrap_help,
    warn,
    warn_old_log,
)

SEED_MAX = 2**63 - 1

app = typer.Typer(
    cls=KvsmGroup,
    add_completion=False,
    no_args_is_help=True,
    help="kvsm: a formally specified multi-rank tiered KV cache. Exit codes: 0 ok, 1 a check failed, 2 bad input, 3 the environment failed, 130/143 interrupted (README).",
)


def _version(value: bool) -> None:
    if value:
        from .log import FORMAT  # noqa: PLC0415

        console.print(f"kvsm {version()} (log format {FORMAT})", highlight=False)
        raise typer.Exit(0)


def version() -> str:
    """The installed distribution's version (what `pip` installed), or the package's."""
    from importlib import metadata  # noqa: PLC0415

    try:
        return metadata.version("kvsm")
    except metadata.PackageNotFoundError:
        from . import __version__  # noqa: PLC0415

        return __version__


@app.callback()
def _main(
    show_version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="print kvsm's version and the log format it writes, then exit"),
) -> None:
    pass  # the app's options only: --version


@app.command()
def walk(
    config: str = typer.Option("small", "--config", "-c", help="built-in config name or TOML path"),
    steps: int = typer.Option(1000, "--steps", min=0, max=10**9, help="transitions to take (no short form: -n is --requests everywhere)"),
    seed: int = typer.Option(0, "--seed", "-s", min=0, max=SEED_MAX, help="seed of the walk"),
    output: Path = output_option(..., "-o", "--output", help="log file to write (atomically)"),
    check: bool = typer.Option(False, "--check", help="check every invariant after every step"),
    bounded: bool = typer.Option(
        False,
        "--bounded",
        help="keep the config's exploration bounds max_requests and max_disk_faults (the walk stops when they are spent, as `kvsm explore` does); by default a walk lifts them (a config with no disk fault, max_disk_faults = -1, keeps none) and the log's header records the config as walked",
    ),
    bug: Optional[str] = bug_option(),
) -> None:
    """A seeded random walk over the enabled transitions, written as a log; it says which transitions it took. Each step picks a transition family weighted by the config's walk_weights, then one of its enabled instances. With --bug, the model has that defect, and the log's header names it."""
    from .invariants import violations_after
    from .log import Header, LogWriter
    from .output import OutputError, check_distinct
    from .sim.options import config_file
    from .state import initial_state
    from .transitions import names_for
    from .walk import walk as do_walk

    cfg = config_or_exit(config, bug)
    try:  # the log never replaces the config it walks
        check_distinct([("-o/--output", output)], [("-c/--config", config_file(config))])
    except OutputError as e:
        raise fail(str(e)) from None
    if not bounded:
        cfg = replace(cfg, max_requests=0, max_disk_faults=min(cfg.max_disk_faults, 0))  # -1 (no fault) is kept
    s0 = initial_state(cfg)
    header = Header(config=cfg, seed=seed, source="walk", initial_digest=s0.digest(), extra={"steps": steps})
    weights = dict(cfg.walk_weights)
    taken: Counter[str] = Counter()
    t0 = time.perf_counter()
    try:  # LogWriter refuses a bad path on entry (before the walk) and a failed final rename
        with progress() as prog, LogWriter(output, header) as w:
            task = prog.add_task("walk", total=steps)
            for t, s in do_walk(cfg, steps, seed, s0):
                w.write(t, s)
                taken[t.name] += 1
                if check:
                    v = violations_after(t.rank, s)
                    if v:
                        for x in v:
                            print_error(f"after step {w.count} {t}: {x}", "invariant violated")
                        raise typer.Exit(EXIT_FAILED)
                prog.advance(task)
    except OutputError as e:
        raise fail(str(e)) from None
    dt = time.perf_counter() - t0
    end = ""
    if w.count < steps:
        spent = [f"max_requests {cfg.max_requests}"] if cfg.max_requests else []
        end = f"; it stopped after {w.count} of {steps} steps: no transition was enabled" + (
            f" (the config's exploration bounds are spent: {', '.join(spent)}; drop --bounded for a longer walk)" if spent else ""
        )
    console.print(f"wrote {w.count} transitions to {output} in {dt:.2f}s{end}", highlight=False)
    names = names_for(cfg)
    console.print("taken: " + ", ".join(f"{n} {taken[n]}" for n in names if taken[n]), highlight=False)
    missed = [n + (" (walk weight 0)" if weights.get(n, 1.0) == 0 else "") for n in names if not taken[n]]
    if missed:
        console.print(f"not taken: {', '.join(missed)}", highlight=False)


@app.command()
def replay(
    log: Path = typer.Argument(..., help="transition log (JSONL)"),
    check: bool = typer.Option(False, "--check", help="also check every invariant after every transition"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
    bug: Optional[str] = bug_option(),
) -> None:
    """Replay a log, verifying every digest, its end line (and with --check every invariant). Exit 1 when it does not replay, 2 when the file is not a complete log. The model has the defect --bug names, none by default, whatever defect the log was written with."""
    from .replay import replay as do_replay

    bug_or_exit(bug)
    warn_old_log(log)
    t0 = time.perf_counter()
    with progress() as prog:
        task = prog.add_task(f"replay {log.name}", total=None)
        res = do_replay(log, check=check, on_step=lambda n: prog.update(task, completed=n) if n % 256 == 0 else None, bug=bug)
    dt = time.perf_counter() - t0
    if res.first_mismatch:
        m = res.first_mismatch
        where = f"{log}:{m['line']}" if m["line"] else f"{log}"
        step = f" (step {m['step']})" if "step" in m else ""
        print_error(f"{where}{step}: {m['reason']}", "error" if res.malformed else "mismatch")
    for v in res.violations:
        step = f" (step {v['step']}, {v['transition']})" if "step" in v else ""
        print_error(f"{log}:{v['line']}{step}: {v['violation']}", "invariant violated")
    if res.log_bug != res.bug and not res.ok and not res.malformed:
        with_what = f"bug {res.bug}" if res.bug != "none" else "the correct model"
        warn(f"the log was written by the model with bug {res.log_bug}; it was replayed with {with_what} (--bug {res.log_bug} replays it as written)")
    if as_json:
        emit_json(res.to_json())
    elif res.ok:
        console.print(f"replayed {res.transitions} transitions in {dt:.2f}s; final digest {res.final_digest}" + (", every invariant held" if check else ""), highlight=False)
    raise typer.Exit(0 if res.ok else (EXIT_INPUT if res.malformed else EXIT_FAILED))


# Memory an explored state takes (the `small` config: 31,473 states in about 100 MB).
_BYTES_PER_STATE = 3500


@app.command()
def explore(
    config: str = typer.Option("small", "--config", "-c", help="built-in config name or TOML path"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
    max_states: int = typer.Option(
        1_000_000,
        "--max-states",
        min=0,
        help="stop with an error beyond this many states; 0 = no limit. Every state is kept in memory (about 3.5 KB each)",
    ),
    bug: Optional[str] = bug_option(),
) -> None:
    """Explore every reachable state breadth-first, checking the invariants in each (with --bug, of the model with that defect: a state where it breaks an invariant is reached but not explored further). Progress goes to stderr."""
    from .explore import explore as do_explore

    cfg = config_or_exit(config, bug)
    if not max_states:
        warn("--max-states 0: no limit on states; exploration runs until every reachable state is found" + ("" if cfg.max_requests else f" and config '{config}' has no max_requests, so it may never end"))
    avail = available_memory()
    if avail and (not max_states or max_states * _BYTES_PER_STATE > avail):
        most = f"{max_states * _BYTES_PER_STATE / 2**30:.1f} GiB at {max_states} states" if max_states else "memory without bound"
        warn(f"exploration may need {most} (about 3.5 KB a state); this machine has {avail / 2**30:.1f} GiB available")
    t0 = time.perf_counter()
    with progress() as prog:
        task = prog.add_task("explore", total=None)
        try:
            g = do_explore(cfg, check=True, max_states=max_states, cut=cfg.bug != "none",
                           on_level=lambda lvl, n: prog.update(task, completed=n, description=f"explore: depth {lvl}, states"))
        except RuntimeError as e:
            raise fail(f"config '{config}': {e} (--max-states {max_states})") from None
    summary = g.summary()
    summary["seconds"] = round(time.perf_counter() - t0, 3)
    for v in summary["violations"][:10]:
        print_error(f"{v['violation']} via {' -> '.join(v['trace'])}", "invariant violated")
    if as_json:
        emit_json(summary)
    else:
        table = Table(title=f"explore {config}")
        table.add_column("transition")
        table.add_column("edges", justify="right")
        for name, n in summary["edges_by_transition"].items():
            table.add_row(name, str(n))
        console.print(table)
        console.print(
            f"{summary['states']} states, {summary['edges']} edges, depth {summary['depth']}, "
            f"{len(summary['violations'])} violations, {summary['seconds']}s",
            highlight=False,
        )
    raise typer.Exit(0 if not summary["violations"] else EXIT_FAILED)


# What `kvsm run` explores and has TLC check: the `small` config with two requests, the
# constants of spec/MC_defects.cfg (a test checks they agree), so that both see the same
# 20,664 states in seconds (`small` itself, three requests: 224,863 states, a minute).
RUN_MODEL_REQUESTS = 2
RUN_TLC_MODEL = "MC_defects.cfg"
RUN_STEPS = 6


def _step_line(k: int, what: str) -> None:
    """`kvsm: run [k/6] what` on stderr, a terminal or not: the step now running."""
    err.print(f"kvsm: run [{k}/{RUN_STEPS}] {escape(what)}", highlight=False, soft_wrap=True)


@app.command()
def run(
    seed: int = typer.Option(0, "--seed", "-s", min=0, max=SEED_MAX, help="seed of the simulation (its timing and faults); the same seed writes the same log"),
    requests: int = typer.Option(300, "--requests", "-n", min=1, help="first N requests of the bundled Mooncake synthetic trace to simulate (it has 3993; a larger N runs all of them, with a note on stderr)"),
    outdir: Path = output_option(Path("out"), "-o", "--output", help="directory of the run's log and report.html (created if missing)"),
    outdir_old: Optional[Path] = output_option(None, "--outdir", help="-o/--output's old name", hidden=True),
    as_json: bool = typer.Option(False, "--json", help="print the steps' results as one JSON object instead of a table"),
    model: Optional[str] = model_option(),
    l1_size: Optional[str] = size_option("--l1-size", "device KV memory per rank, instead of the run's 256 pages"),
    l2_size: Optional[str] = size_option("--l2-size", "the shared host pool, instead of the run's 2048 pages"),
) -> None:
    """The main job on built-in defaults: a short 4-rank simulation of the bundled Mooncake synthetic trace (kvsm/sim/data/synthetic_trace.jsonl), replay of its log, the same log on 4 rank processes moving and verifying real bytes (CUDA when present, else the CPU), exhaustive exploration of the small config with two requests, TLC on the same model where Java is present, and a report (-o DIR/report.html: the simulation's plots and the steps). One line on stderr as each step starts, then its elapsed time every few seconds ($KVSM_PROGRESS_SECONDS, default 5). Exit 1 if any step failed. The simulation is kvsm sim's default config and 512-token pages, but with a smaller cache, L1 256 and L2 2048 pages (kvsm sim: 512 and 4096), so that a short run evicts from L1 and loads back from L2, and light faults, slow:0.05,stall:0.01,abort:0.02 (kvsm sim: none), so that its log holds recoveries."""
    from .explore import explore as do_explore
    from .replay import replay as do_replay
    from .output import OutputError, check_output_file
    from .sim import simulate
    from .sim.report import write_report
    from .sim.runner import main_job_log, main_job_options, with_shape
    from .commands.sim import note_short_trace
    from .sim import SimError

    outdir = alias_value("-o/--output", outdir, Path("out"), "--outdir", outdir_old)
    log, report = main_job_log(outdir, seed), outdir / "report.html"
    try:  # before anything runs: the log is the first thing every later step needs
        check_output_file(log)
        check_output_file(report)
    except OutputError as e:
        raise fail(f"-o {outdir}: {e}") from None
    rows: list[tuple[str, str, str]] = []
    ok = True
    t0 = time.perf_counter()
    with progress() as prog:
        task = prog.add_task("run: sim, requests", total=None)

        def on_start(prep: Any) -> None:
            # the number actually run: a trace shorter than --requests runs whole (said once)
            n = len(prep.workload.requests)
            what = f"all {n}" if n < requests else f"the first {n}"
            _step_line(1, f"sim: {what} requests of the Mooncake synthetic trace on 4 ranks, L1 and L2")
            note_short_trace(prep, requests, "--requests")
            prog.update(task, total=n)

        try:
            result = simulate(with_shape(main_job_options(seed, requests, 4), model, l1_size, l2_size), log, lambda done, total: prog.update(task, completed=done, total=total), on_start=on_start)
        except OutputError as e:
            raise fail(f"-o {outdir}: {e}") from None
        except SimError as e:  # a bad --model or size: before anything ran
            raise fail(str(e)) from None
    rows.append(("sim (4 ranks, L1+L2)", run_headline(result.summary, log), f"{time.perf_counter() - t0:.1f}s"))
    _step_line(2, f"replay: {log}, every digest")
    t0 = time.perf_counter()
    with busy("run: replay"):
        res = do_replay(log)
    ok &= res.ok
    rows.append(("replay", "every digest reproduced" if res.ok else f"FAILED {res.first_mismatch}", f"{time.perf_counter() - t0:.1f}s"))
    _step_line(3, f"explore: every reachable state of the small config with {RUN_MODEL_REQUESTS} requests, every invariant")
    t0 = time.perf_counter()
    with busy("run: explore"):
        g = do_explore(replace(config_or_exit("small"), max_requests=RUN_MODEL_REQUESTS), check=True)
    s = g.summary()
    ok &= not s["violations"]
    rows.append((f"explore small ({RUN_MODEL_REQUESTS} requests)", f"{s['states']} states, {s['edges']} edges, {len(s['violations'])} violations", f"{time.perf_counter() - t0:.1f}s"))
    _step_line(4, "gpu replay: the log on 4 rank processes moving and verifying real bytes")
    with busy("run: gpu replay"):
        gpu_row = _gpu_row(log)
    ok &= gpu_row[1].startswith(("ok", "skipped"))
    rows.append(gpu_row)
    _step_line(5, f"TLC: every invariant of the spec on the same model (small, {RUN_MODEL_REQUESTS} requests)")
    with busy("run: TLC"):
        tlc_row = _tlc_row()
    ok &= tlc_row[1].startswith(("ok", "skipped"))
    rows.append(tlc_row)
    _step_line(6, f"report: {report}")
    t0 = time.perf_counter()
    try:
        with busy("run: report"):
            write_report(result, report, rows, title=f"kvsm run: seed {seed}, {'every step passed' if ok else 'a step FAILED'}")
    except OutputError as e:
        raise fail(f"-o {outdir}: {e}") from None
    rows.append(("report", f"the simulation's plots and these steps -> {report}", f"{time.perf_counter() - t0:.1f}s"))
    if as_json:
        emit_json({"ok": ok, "steps": [{"step": a, "result": b, "time": c} for a, b, c in rows], "log": str(log), "report": str(report)})
    else:
        table = Table(title="kvsm run")
        for col in ("step", "result", "time"):
            table.add_column(col)
        for r in rows:
            table.add_row(*r)
        console.print(table)
        console.print(_next_steps(log, report), highlight=False, soft_wrap=True)
    raise typer.Exit(0 if ok else EXIT_FAILED)


def run_headline(summary: dict[str, Any], log: Path) -> str:
    """The sim row of `kvsm run` (its table, `--json` and report): what the cache did on
    the run, from `kvsm sim --json`'s summary."""
    head = f"{summary['requests']} requests of the Mooncake synthetic trace"
    saved, ttft, sv = summary.get("tokens_saved"), summary.get("ttft_ms"), summary.get("serving")
    if saved and ttft and sv and summary.get("tokens_total"):
        # with no cache every prompt token is prefilled: the TTFT estimate's first term alone
        bare = summary["tokens_total"] / summary["requests"] / (sv["prefill_tps"] * summary["config"]["R"]) * 1000
        head += (
            f": {saved['total']:,} prefill tokens served from the cache ({saved['total'] / summary['tokens_total']:.1%}; "
            f"L1 {saved['l1']:,}, L2 {saved['l2']:,}), TTFT estimate mean {ttft['mean']:.0f} ms against {bare:.0f} ms with no "
            f"cache ({sv['model']['name']})"
        )
    return f"{head}, block hit rate {summary['hit_rate_blocks']:.3f}, {summary['transitions']} transitions -> {log}"


def _next_steps(log: Path, report: Path) -> str:
    """What `kvsm run` ends with: what to open, and what to try next (README)."""
    viewer = log.with_suffix(".html")
    return "\n".join([
        f"open {report} (the simulation's plots and these steps)",
        "try next:",
        f"  kvsm show {log} --html {viewer}      step through the simulated log in a browser",
        "  kvsm check --bug double_free             TLC finds an injected defect; read its counterexample with the `kvsm show` it prints",
        f"  kvsm campaign --runs 20 -c small -o {log.parent / 'campaign'}      many seeded simulations on Dask, every failure shrunk",
    ])


def _gpu_row(log: Path) -> tuple[str, str, str]:
    """`kvsm gpu replay` of the simulated log (CUDA when there is one, else the CPU; 4 KiB
    pages), or why it could not run."""
    try:
        from . import gpu as _backend  # noqa: F401, PLC0415 - its warning filter, before torch

        import torch  # noqa: PLC0415
    except ImportError:
        return ("gpu replay", "skipped: torch is not installed (pip install 'kvsm[gpu]')", "-")
    from .gpu.launch import Options, ReplayError  # noqa: PLC0415
    from .gpu.launch import replay as gpu_replay  # noqa: PLC0415

    t0 = time.perf_counter()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        s = gpu_replay(Options(str(log), device=device, page_bytes=4096, layers=2))
    except (ReplayError, torch.multiprocessing.ProcessRaisedException, torch.multiprocessing.ProcessExitedException) as e:
        return ("gpu replay", f"FAILED: {e}", f"{time.perf_counter() - t0:.1f}s")
    verdict = "ok" if s["ok"] else f"FAILED: {s['failures'][0]['message'] if s['failures'] else 'see kvsm gpu replay'}"
    return (
        f"gpu replay ({s['ranks']} ranks, {device})",
        f"{verdict}: {s['pages_copied']} pages copied, {s['bytes_verified']} bytes verified, {s['digest_mismatches']} digest mismatches",
        f"{time.perf_counter() - t0:.1f}s",
    )


def _tlc_row() -> tuple[str, str, str]:
    """TLC on the model `kvsm run` explores (spec/MC_defects.cfg: the small config with two
    requests), every invariant, or why it could not run."""
    from .tla.check import check as do_check  # noqa: PLC0415
    from .tla.errors import TLCError, TLCUnavailable  # noqa: PLC0415
    from .tla.location import spec_dir  # noqa: PLC0415

    step = f"TLC check small ({RUN_MODEL_REQUESTS} requests)"
    t0 = time.perf_counter()
    try:
        # every core: a clean check is the expected outcome here, so the shortest and
        # reproducible counterexample that one worker guarantees matters less than time;
        # invariants only, as the `ci` model (liveness: `kvsm check --config spec/MC_defects.cfg`)
        res = do_check(str(spec_dir() / RUN_TLC_MODEL), workers=os.cpu_count() or 1, properties=False)
    except TLCUnavailable as e:
        return (step, f"skipped: {e}", "-")
    except TLCError as e:
        return (step, f"FAILED: {e}", f"{time.perf_counter() - t0:.1f}s")
    t = res.tlc
    verdict = "ok" if res.ok else f"VIOLATION {res.to_json()['violation']['property']}"
    return (step, f"{verdict}: {t.distinct_states} distinct states, depth {t.depth}", f"{time.perf_counter() - t0:.1f}s")


def main() -> None:  # pragma: no cover - console entry point
    app(prog_name="kvsm")  # also under `python -m kvsm.cli`, so messages say `kvsm walk`


# The commands that live beside their feature: each module's `register(app)` adds its
# commands to the app, one line a module (`kvsm --help` lists them in this order).
campaign_commands.register(app)  # campaign
corpus_commands.register(app)  # corpus verify, corpus add
gpu_commands.register(app)  # gpu replay
realimpl_commands.register(app)  # realimpl sglang, realimpl install
show_commands.register(app)  # show
sim_commands.register(app)  # sim
sweep_commands.register(app)  # sweep
tla_commands.register(app)  # check, conform, validate
unwrap_help(app)


if __name__ == "__main__":  # pragma: no cover
    main()
