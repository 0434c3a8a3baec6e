"""The `kvsm` command line (typer + rich)."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.table import Table

from .commands import register_all
from .commands.common import config_or_exit, console, emit_json, err, progress

app = typer.Typer(add_completion=False, no_args_is_help=True, help="kvsm: a formally specified multi-rank tiered KV cache.")


@app.command()
def walk(
    config: str = typer.Option("small", "--config", "-c", help="built-in config name or TOML path"),
    steps: int = typer.Option(1000, "--steps", "-n", min=0, help="transitions to take"),
    seed: int = typer.Option(0, "--seed", "-s", help="seed of the walk"),
    output: Path = typer.Option(..., "-o", "--output", help="log file to write (atomically)"),
    check: bool = typer.Option(False, "--check", help="check every invariant after every step"),
) -> None:
    """A seeded random walk over the enabled transitions, written as a log."""
    from .invariants import violations_after
    from .log import Header, LogWriter, OutputError
    from .state import initial_state
    from .walk import walk as do_walk

    cfg = config_or_exit(config)
    s0 = initial_state(cfg)
    header = Header(cfg, seed, "walk", s0.digest(), {"steps": steps})
    t0 = time.perf_counter()
    try:  # LogWriter refuses a bad path on entry (before the walk) and a failed final rename
        with progress() as prog, LogWriter(output, header) as w:
            task = prog.add_task("walk", total=steps)
            for t, s in do_walk(cfg, steps, seed, s0):
                w.write(t, s)
                if check:
                    v = violations_after(t.rank, s)
                    if v:
                        err.print(f"[red]invariant violated after step {w.count} {t}:[/red]")
                        for x in v:
                            err.print(f"  {x}")
                        raise typer.Exit(1)
                prog.advance(task)
    except OutputError as e:
        err.print(f"[red]error:[/red] {e}", highlight=False)
        raise typer.Exit(2) from None
    dt = time.perf_counter() - t0
    console.print(f"wrote {w.count} transitions to {output} in {dt:.2f}s" + ("" if w.count == steps else " (nothing else was enabled)"))


@app.command()
def replay(
    log: Path = typer.Argument(..., help="transition log (JSONL)"),
    check: bool = typer.Option(False, "--check", help="also check every invariant after every transition"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Replay a log, verifying every digest (and with --check every invariant)."""
    from .log import replay as do_replay

    t0 = time.perf_counter()
    with progress() as prog:
        task = prog.add_task(f"replay {log.name}", total=None)
        res = do_replay(log, check=check, on_step=lambda n: prog.update(task, completed=n) if n % 256 == 0 else None)
    dt = time.perf_counter() - t0
    if as_json:
        emit_json(res.to_json())
    else:
        if res.first_mismatch:
            err.print(f"[red]line {res.first_mismatch['line']}:[/red] {res.first_mismatch['reason']}")
        for v in res.violations:
            err.print(f"[red]invariant violated[/red] at line {v['line']}: {v['violation']}")
        if res.ok:
            console.print(f"replayed {res.transitions} transitions in {dt:.2f}s; final digest {res.final_digest}" + (", every invariant held" if check else ""))
    raise typer.Exit(0 if res.ok else 1)


@app.command()
def explore(
    config: str = typer.Option("small", "--config", "-c", help="built-in config name or TOML path"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
    max_states: int = typer.Option(2_000_000, "--max-states", help="give up beyond this many states"),
) -> None:
    """Explore every reachable state breadth-first, checking the invariants in each."""
    from .explore import explore as do_explore

    cfg = config_or_exit(config)
    t0 = time.perf_counter()
    with progress() as prog:
        task = prog.add_task("explore", total=None)
        try:
            g = do_explore(cfg, check=True, max_states=max_states, on_level=lambda lvl, n: prog.update(task, completed=n, description=f"explore depth {lvl}"))
        except RuntimeError as e:
            err.print(f"[red]error:[/red] config '{config}': {e}")
            raise typer.Exit(2) from None
    summary = g.summary()
    summary["seconds"] = round(time.perf_counter() - t0, 3)
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
            f"{len(summary['violations'])} violations, {summary['seconds']}s"
        )
        for v in summary["violations"][:10]:
            err.print(f"[red]{v['violation']}[/red] via {' -> '.join(v['trace'])}")
    raise typer.Exit(0 if not summary["violations"] else 1)


@app.command()
def run(
    seed: int = typer.Option(0, "--seed", "-s"),
    requests: int = typer.Option(300, "--requests", "-n", min=1, help="requests of the bundled trace to simulate"),
    outdir: Path = typer.Option(Path("out"), "--outdir", help="where the run's logs go"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """The main job on built-in defaults: a short 4-rank simulation of the bundled Mooncake trace, replay of its log, the same log on 4 rank processes moving and verifying real bytes (CUDA when present, else the CPU), exhaustive exploration of the small config, and TLC on the ci config where Java is present."""
    from .explore import explore as do_explore
    from .log import replay as do_replay
    from .sim import run_main_job

    rows: list[tuple[str, str, str]] = []
    ok = True
    t0 = time.perf_counter()
    summary = run_main_job(outdir, seed=seed, requests=requests, ranks=4)
    log = Path(summary["log"])
    rows.append((
        "sim (4 ranks, L1+L2)",
        f"{summary['requests']} requests, block hit rate {summary['hit_rate_blocks']:.3f}, "
        f"{summary['transitions']} transitions -> {log}",
        f"{time.perf_counter() - t0:.1f}s",
    ))
    t0 = time.perf_counter()
    res = do_replay(log)
    ok &= res.ok
    rows.append(("replay", "every digest reproduced" if res.ok else f"FAILED {res.first_mismatch}", f"{time.perf_counter() - t0:.1f}s"))
    t0 = time.perf_counter()
    g = do_explore(config_or_exit("small"), check=True)
    s = g.summary()
    ok &= not s["violations"]
    rows.append(("explore small", f"{s['states']} states, {s['edges']} edges, {len(s['violations'])} violations", f"{time.perf_counter() - t0:.1f}s"))
    gpu_row = _gpu_row(log)
    ok &= gpu_row[1].startswith(("ok", "skipped"))
    rows.append(gpu_row)
    tlc_row = _tlc_row()
    ok &= tlc_row[1].startswith(("ok", "skipped"))
    rows.append(tlc_row)
    if as_json:
        emit_json({"ok": ok, "steps": [{"step": a, "result": b, "time": c} for a, b, c in rows]})
    else:
        table = Table(title="kvsm run")
        for col in ("step", "result", "time"):
            table.add_column(col)
        for r in rows:
            table.add_row(*r)
        console.print(table)
    raise typer.Exit(0 if ok else 1)


def _gpu_row(log: Path) -> tuple[str, str, str]:
    """`kvsm gpu replay` of the simulated log (CUDA when there is one, else the CPU; 8 KiB
    pages), or why it could not run."""
    try:
        from . import gpu as _backend  # noqa: F401, PLC0415 - its warning filter, before torch

        import torch  # noqa: PLC0415
    except ImportError:
        return ("gpu replay", "skipped: torch is not installed (pip install -e '.[gpu]')", "-")
    from .gpu.launch import Options, ReplayError  # noqa: PLC0415
    from .gpu.launch import replay as gpu_replay  # noqa: PLC0415

    t0 = time.perf_counter()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        s = gpu_replay(Options(str(log), device=device, page_bytes=4096, layers=2))
    except (ReplayError, torch.multiprocessing.ProcessRaisedException) as e:
        return ("gpu replay", f"FAILED: {e}", f"{time.perf_counter() - t0:.1f}s")
    verdict = "ok" if s["ok"] else f"FAILED: {s['failures'][0]['message'] if s['failures'] else 'see kvsm gpu replay'}"
    return (
        f"gpu replay ({s['ranks']} ranks, {device})",
        f"{verdict}: {s['pages_copied']} pages copied, {s['bytes_verified']} bytes verified, {s['digest_mismatches']} digest mismatches",
        f"{time.perf_counter() - t0:.1f}s",
    )


def _tlc_row() -> tuple[str, str, str]:
    """`kvsm check --config ci` (TLC on the spec), or why it could not run."""
    from .tla.check import check as do_check  # noqa: PLC0415
    from .tla.errors import TLCError, TLCUnavailable  # noqa: PLC0415

    t0 = time.perf_counter()
    try:
        res = do_check("ci")
    except TLCUnavailable as e:
        return ("TLC check ci", f"skipped: {e}", "-")
    except TLCError as e:
        return ("TLC check ci", f"FAILED: {e}", f"{time.perf_counter() - t0:.1f}s")
    t = res.tlc
    verdict = "ok" if res.ok else f"VIOLATION {res.to_json()['violation']['property']}"
    return ("TLC check ci", f"{verdict}: {t.distinct_states} distinct states, depth {t.depth}", f"{time.perf_counter() - t0:.1f}s")


def main() -> None:  # pragma: no cover - console entry point
    app()


register_all(app)


if __name__ == "__main__":  # pragma: no cover
    main()
