"""`kvsm check`, `kvsm conform`, `kvsm validate`: the TLA+ spec against the model."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from ..bounds import MAX_SEGMENTS, MAX_SUCCESSOR_STATES
from .common import EXIT_ENVIRONMENT, EXIT_FAILED, EXIT_INPUT, bug_option, output_option, bug_or_exit, busy, console, emit_json, err, fail, warn_old_log

MODEL_HELP = (
    "model: ci, deep, l3, l3-small, reference, a path to a TLC .cfg (its module is the .tla beside it), or a kvsm config "
    "(a TOML path or a built-in config name such as small or default) whose TLC model is generated"
)


def _fail(msg: str, code: int = EXIT_INPUT) -> typer.Exit:
    return fail(msg, code)


def _tlc_failed(e: Exception) -> typer.Exit:
    """TLC missing (Java, the jar, the spec) is the machine's; TLC refusing a model is the input's."""
    from ..tla.errors import TLCUnavailable  # noqa: PLC0415

    return _fail(str(e), EXIT_ENVIRONMENT if isinstance(e, TLCUnavailable) else EXIT_INPUT)


def _tell_story(path: str | Path, until: Optional[int] = None) -> None:
    """On stderr (stdout stays the command's result, pure JSON with --json): the story of
    the log's last steps up to `until` (default: its first violation, else its end) and
    how to open the whole of it with `kvsm show`."""
    from ..render.story import tail_story
    from .show import emit_err

    try:
        story = tail_story(path, until=until)
    except Exception as e:  # noqa: BLE001 - the story is an aid; the failure itself was reported
        err.print(f"(no story of {escape(str(path))}: {escape(f'{type(e).__name__}: {e}')})", highlight=False, soft_wrap=True)
        return
    emit_err(story)


def _print_check(res: Any, out: dict, config: str, sim: dict | None, seed: int, depth: int, as_json: bool) -> None:
    """What `kvsm check` prints of its result."""
    if as_json:
        emit_json(out)
    else:
        t = res.tlc
        if sim is not None:
            done = f"{out['behaviours']} behaviours" if out["behaviours"] else "stopped at a violation"
            console.print(
                f"{config}: simulation, seed {seed}, depth {depth}: {done}, {t.states_generated} states, "
                f"{t.seconds:.1f}s ({out['states_per_second'] or 0:,.1f} states/s"
                + (f", {out['behaviours_per_second']:,.2f} behaviours/s)" if out["behaviours_per_second"] else ")")
            )
        else:
            rate = (t.distinct_states or 0) / t.seconds if t.seconds else 0
            console.print(
                f"{config}: {t.distinct_states} distinct states, {t.states_generated} generated, depth {t.depth}, "
                f"{t.seconds:.1f}s ({rate:,.0f} distinct states/s)"
            )
        v = out["violation"]
        if v is None:
            console.print("[green]no violation[/green]")
        else:
            err.print(f"[red]{v['kind']} violated: {v['property']}[/red] after {v['steps']} steps")
            if v["log"]:
                again = f" --bug {res.bug}" if res.bug != "none" else ""
                err.print(f"trace written as a kvsm log: {v['log']}  (kvsm replay --check{again} {v['log']})")
            else:
                err.print(f"the trace could not become a log: {v.get('log_error')}")


def _print_conform(res: Any, config: str, as_json: bool) -> None:
    """What `kvsm conform` prints of its result."""
    if as_json:
        emit_json(res.to_json())
    else:
        table = Table(title=f"conform {config}")
        for col in ("", "TLC", "model", "only in TLC", "only in model"):
            table.add_column(col, justify="right")
        table.add_row("states", str(res.tlc_states), str(res.model_states), str(res.only_in_tlc["states"]), str(res.only_in_model["states"]))
        table.add_row("edges", str(res.tlc_edges), str(res.model_edges), str(res.only_in_tlc["edges"]), str(res.only_in_model["edges"]))
        console.print(table)
        if res.equal:
            console.print(f"[green]the graphs are equal[/green] (TLC {res.seconds['tlc']}s, model {res.seconds['model']}s)")
        else:
            for side, d in (("TLC", res.only_in_tlc), ("model", res.only_in_model)):
                if d["diverging"]:
                    err.print(f"[red]transitions only the {side} takes from a shared state:[/red] {d['diverging']}")
            for ex in res.examples:
                err.print(json.dumps(ex, indent=1))


def _print_validate(res: Any, log: Path, as_json: bool) -> None:
    """What `kvsm validate` prints of its result."""
    if as_json:
        emit_json(res.to_json())
    else:
        if res.first_rejected:
            r = res.first_rejected
            why = res.rejection or {}
            err.print(f"[red]{log}:{r['line']}: step {r['step']} {r['transition']} is not allowed by the spec[/red] (after {res.matched} matched steps)")
            if why:
                names = ", ".join(why["variables"])
                err.print(f"{why['reason']}" + (f": {names}" if names else "") + f" (segment {why['segment']})")
        if res.model_rejected:
            r = res.model_rejected
            err.print(f"{log}:{r['line']}: the Python model rejects {r['transition']}: {r['reason']}")
            if not res.first_rejected:
                err.print("[red]but the spec allows it: the model and the spec disagree[/red]")
        if res.digest_mismatch:
            r = res.digest_mismatch
            err.print(f"[red]{log}:{r['line']}: digest {r['log']} is not the model's {r['model']}[/red] after {r['transition']}")
        if res.ok:
            console.print(
                f"[green]{log}: all {res.steps} steps are a behaviour of the spec[/green] "
                f"({res.seconds:.1f}s, {res.transitions_per_second:,.0f} transitions/s, {len(res.segments)} segment(s))"
            )


def _successors(logs: list[Path], limit: Optional[int], last: bool, bug: Optional[str], as_json: bool) -> None:
    """`kvsm validate --successors`: local conform at each log's states."""
    from ..log import LogError
    from ..tla.canon import MappingError
    from ..tla.errors import TLCError, TLCUnavailable
    from ..tla.local import SAMPLE, local_log

    if bug is not None:
        raise _fail("--successors compares the model the log was written with; --bug does not apply")
    differ = False
    for log in logs:
        try:
            with busy(f"validate --successors: TLC expands the states of {log}"):
                ls, res = local_log(log, limit or SAMPLE, last)
        except LogError as e:
            raise _fail(str(e), EXIT_INPUT if e.malformed else EXIT_FAILED) from None
        except MappingError as e:
            raise _fail(str(e)) from None
        except (TLCError, TLCUnavailable) as e:
            raise _tlc_failed(e) from None
        diffs = [{"step": ls.steps[d.index], **{k: v for k, v in d.to_json().items() if k != "index"}} for d in res.differences]
        differ = differ or bool(diffs)
        if as_json:
            emit_json({"log": str(log), "ok": res.ok, "steps": ls.length, "states": res.states, "spec_edges": res.spec_edges,
                       "model_edges": res.model_edges, "differences": diffs, "seconds": res.seconds})
            continue
        for d in diffs:
            other = "spec" if d["side"] == "model" else "model"
            err.print(f"[red]{log}: from the state after step {d['step']}, only the {d['side']} steps by {d['action']}[/red] "
                      f"to {d['to']}; the {other}'s {d['action']} steps: {d['other_side_to'] or 'none'}", highlight=False)
        if res.ok:
            console.print(f"[green]{log}: the spec and the model have the same {res.spec_edges} steps out of {res.states} states[/green] "
                          f"(of {ls.length + 1} the log passes through)", highlight=False)
    raise typer.Exit(EXIT_FAILED if differ else 0)


def register(app: typer.Typer) -> None:
    @app.command()
    def check(
        config: str = typer.Option("ci", "--config", "-c", help=MODEL_HELP),
        workers: int = typer.Option(1, "--workers", min=1, help="TLC worker threads"),
        log: Optional[Path] = output_option(None, "--log", help="where a violation's trace goes (default out/tlc-<model>-<property>.jsonl)"),
        simulate: bool = typer.Option(False, "--simulate", help="TLC's random simulation instead of an exhaustive check (for configs too large to exhaust)"),
        depth: int = typer.Option(100, "--depth", min=1, help="with --simulate: states per behaviour at most"),
        traces: int = typer.Option(100, "--traces", min=1, help="with --simulate: behaviours to generate"),
        seed: int = typer.Option(0, "--seed", help="with --simulate: TLC's random seed"),
        as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
        bug: Optional[str] = bug_option(),
    ) -> None:
        """Model-check the spec with TLC: its invariants and the liveness properties, or
        with --simulate its invariants along random behaviours (with --bug, of the spec
        with that defect). A violation's trace becomes a kvsm log that `kvsm replay
        --check` replays (with the same --bug)."""
        from ..output import OutputError, check_distinct, check_output_file
        from ..tla.check import check as do_check
        from ..tla.errors import TLCError, TLCUnavailable

        bug_or_exit(bug)
        try:  # before TLC runs: a violation's log never replaces the model it checks
            check_distinct([("--log", log)], [("-c/--config", Path(config) if os.path.isfile(config) else None)])
        except OutputError as e:
            raise _fail(str(e)) from None
        try:  # before TLC runs: a violation's log must have somewhere to go
            if log is not None:
                check_output_file(log)
        except OutputError as e:
            raise _fail(f"--log: {e}") from None
        sim = {"num": traces, "depth": depth, "seed": seed} if simulate else None
        try:
            with busy(f"check: TLC on {config}{' --bug ' + bug if bug else ''}, {workers} worker(s){', simulating' if sim else ''}"):
                res = do_check(config, workers=workers, log_path=log, simulate=sim, bug=bug)
        except (TLCError, TLCUnavailable) as e:
            raise _tlc_failed(e) from None
        out = res.to_json()
        _print_check(res, out, config, sim, seed, depth, as_json)
        if out["violation"] is not None and out["violation"]["log"]:
            _tell_story(out["violation"]["log"])
        raise typer.Exit(0 if res.ok else EXIT_FAILED)

    @app.command()
    def conform(
        config: str = typer.Option("ci", "--config", "-c", help=MODEL_HELP),
        workers: Optional[int] = typer.Option(None, "--workers", min=1, help="TLC worker threads (default: one per CPU; the graph does not depend on them)"),
        as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
        bug: Optional[str] = bug_option(),
    ) -> None:
        """Compare TLC's complete state graph of a model with the Python model's: the
        same states and the same labelled edges. With --bug, both have that defect and
        each graph stops at the states where it breaks an invariant."""
        from ..tla.conform import conform as do_conform
        from ..tla.errors import TLCError, TLCUnavailable

        bug_or_exit(bug)
        try:
            with busy(f"conform: TLC's state graph of {config} and the model's"):
                res = do_conform(config, workers=workers, bug=bug)
        except (TLCError, TLCUnavailable) as e:
            raise _tlc_failed(e) from None
        _print_conform(res, config, as_json)
        raise typer.Exit(0 if res.equal else EXIT_FAILED)

    @app.command()
    def validate(
        logs: list[Path] = typer.Argument(..., help="transition logs (JSONL); several are followed by shared TLC processes"),
        workers: Optional[int] = typer.Option(None, "--workers", min=1, help="TLC processes at once (default: one per CPU)"),
        segments: Optional[int] = typer.Option(None, "--segments", min=1, max=MAX_SEGMENTS, help=f"stretches of each log checked apart, each by a TLC process of its own, at most {MAX_SEGMENTS} (default: one per worker for a long log)"),
        as_json: bool = typer.Option(False, "--json", help="print one JSON object per log, one a line"),
        bug: Optional[str] = bug_option(),
        successors: bool = typer.Option(False, "--successors", help="local conform instead: compare the spec's successors of the log's states with the model's (every action, one step), as `kvsm conform` compares edges"),
        states: Optional[int] = typer.Option(None, "--states", min=1, max=MAX_SUCCESSOR_STATES, help="with --successors: the log's states compared at most, when it has more: an equal share for each transition taken from them, drawn from its seed (default 128)"),
        last: bool = typer.Option(False, "--last", help="with --successors: the log's last state only (a shrunk case's)"),
    ) -> None:
        """Decide with TLC whether each log is a behaviour of the spec: every step, from the
        model's state before it, to the model's state after it (with --bug, of the spec
        with that defect; the correct spec by default, whatever defect the log was
        written with). Exit 1 if any log is not. With --successors, whether the spec and
        the model have the same steps out of the log's states; exit 1 if any differ."""
        from ..log import LogError
        from ..tla.errors import TLCError, TLCUnavailable
        from ..tla.validate import validate as do_validate, validate_many

        bug_or_exit(bug)
        for log in logs:
            warn_old_log(log)
        if successors:
            _successors(logs, states, last, bug, as_json)
            return
        if states is not None or last:
            raise _fail(f"{'--states' if states is not None else '--last'} goes with --successors")
        what = "segments" if len(logs) == 1 else "TLC processes"

        def on_segment(done: int, total: int) -> None:
            if total > 1:
                err.print(f"kvsm: validate: {done}/{total} {what} decided", highlight=False, soft_wrap=True)

        try:
            with busy(f"validate: TLC follows {logs[0] if len(logs) == 1 else f'{len(logs)} logs'}"):
                if len(logs) == 1:
                    results = [do_validate(logs[0], workers=workers, segments=segments, bug=bug, on_segment=on_segment)]
                else:
                    results = validate_many(logs, workers=workers, segments=segments, bug=bug, on_run=on_segment)
        except LogError as e:
            raise _fail(str(e), EXIT_INPUT if e.malformed else EXIT_FAILED) from None
        except (TLCError, TLCUnavailable) as e:
            raise _tlc_failed(e) from None
        for log, res in zip(logs, results):
            _print_validate(res, log, as_json)
            if not res.ok:
                # up to the first step the spec rejects; else the log up to where the model
                # stops replaying it (its rejection or its digest mismatch, which the story names)
                _tell_story(log, res.first_rejected["step"] if res.first_rejected else res.steps)
        raise typer.Exit(0 if all(res.ok for res in results) else EXIT_FAILED)
