"""`kvsm show`: the state after any step of a log (or a corpus case), every step as a
story, or a one-file HTML viewer to step through it (docs/corpus.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.markup import escape

from .common import output_option

console = Console(emoji=False)
err = Console(stderr=True, emoji=False)


def emit(text: str) -> None:
    """Plain text to a pipe or a file (no colour, no wrapping); coloured on a terminal."""
    from ..render import styled

    if console.is_terminal:
        console.print(styled(text), soft_wrap=True, highlight=False)
    else:
        sys.stdout.write(text + "\n")


def emit_err(text: str) -> None:
    """The same, to stderr (a failure's story, beside the failure)."""
    from ..render import styled

    if err.is_terminal:
        err.print(styled(text), soft_wrap=True, highlight=False)
    else:
        sys.stderr.write(text + "\n")


def register(app: typer.Typer) -> None:
    @app.command("show")
    def show(
        log: Path = typer.Argument(..., help="a transition log (JSONL) or a corpus case (traces/*.txt)"),
        at: Optional[int] = typer.Option(None, "--at", min=0, help="the state after step N (0: the initial state; default: the last)"),
        every: bool = typer.Option(False, "--all", help="every step as a story: its transition, then what it changed"),
        as_diff: bool = typer.Option(False, "--diff", help="only what changed: step N's changes (with --at), or the story without full states (with --all)"),
        html: Optional[Path] = output_option(None, "--html", help="write a one-file HTML viewer that steps through the log (opens at FILE#step=N)"),
        check: bool = typer.Option(True, "--check/--no-check", help="check every invariant of every state shown (--all and --html: of every step; costs about 10 ms a step on a large state)"),
        sections: Optional[str] = typer.Option(None, "--sections", help="comma-separated sections to print (tree, lanes, host, writes, disks, spill-queue, spills, reload-candidates, reloads, requests, content)"),
    ) -> None:
        """Show the state of a log after a step, the story of every step, or an HTML viewer."""
        from ..log import LogError
        from ..corpus.format import CaseError
        from ..render import SECTIONS, render, render_diff
        from ..corpus.run import read_run
        from ..render.story import config_line, story

        if at is not None and every:
            err.print("[red]error:[/red] --at and --all are alternatives", soft_wrap=True)
            raise typer.Exit(2)
        chosen = None
        if sections:
            chosen = tuple(x.strip() for x in sections.split(","))
            if "" in chosen:
                err.print(f"[red]error:[/red] --sections '{escape(sections)}': an empty value in the list", soft_wrap=True)
                raise typer.Exit(2)
            bad = [x for x in chosen if x not in SECTIONS]
            if bad:
                err.print(f"[red]error:[/red] --sections: unknown section '{escape(bad[0])}' (sections: {', '.join(SECTIONS)})", soft_wrap=True)
                raise typer.Exit(2)
        if html is not None:  # before the log is read: the viewer never replaces what it shows
            from ..output import OutputError, check_distinct

            try:
                check_distinct([("--html", html)], [("LOG", log)])
            except OutputError as e:
                err.print(f"[red]error:[/red] {escape(str(e))}", highlight=False, soft_wrap=True)
                raise typer.Exit(2) from None
        try:
            run = read_run(log)
            run.check = check
        except (LogError, CaseError) as e:
            err.print(f"[red]error:[/red] {escape(str(e))}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        if html is not None:
            from ..output import OutputError, check_output_file
            from ..render.html import write_html
            from .common import busy

            try:
                check_output_file(html)
                with busy(f"show: the viewer of {log}'s {len(run.steps)} steps"):
                    write_html(run, html, title=str(log))
            except (OutputError, OSError) as e:
                err.print(f"[red]error:[/red] {escape(str(e))}", highlight=False, soft_wrap=True)
                raise typer.Exit(2) from None
            first = run.first_violation()
            where = f"#step={first}" if first is not None else f"#step={len(run.steps)}"
            console.print(f"wrote {html} ({len(run.steps)} steps); open {html}{where}", highlight=False, soft_wrap=True)
            if at is None and not every:
                _stopped_exit(run)
                return
        n = len(run.steps)
        if every:
            if as_diff:
                from ..render.story import step_story

                lines = [f"{run.source}: {config_line(run.config)}, {n} steps", *run.about]
                prev = run.view(0)
                for k in range(1, n + 1):
                    cur = run.view(k)
                    lines.append(step_story(run, k, prev, cur))
                    prev = cur
                emit("\n".join(lines))
            else:
                emit(story(run))
        else:
            k = n if at is None else at
            if k > n:
                if run.stopped is not None:
                    s = run.stopped
                    label = "error" if s.get("malformed") else "mismatch"
                    err.print(f"[red]{label}:[/red] --at {k}: {escape(str(log))} replays only to step {n}: it stopped at line {s['line']} (step {s['step']}): {escape(s['reason'])}", highlight=False, soft_wrap=True)
                    raise typer.Exit(_stopped_code(run))
                err.print(f"[red]error:[/red] --at {k}: step {k} is beyond the {n} steps of {escape(str(log))}", highlight=False, soft_wrap=True)
                raise typer.Exit(2)
            if as_diff:
                if k == 0:
                    err.print("[red]error:[/red] --diff needs a step N >= 1 (what step N changed)", soft_wrap=True)
                    raise typer.Exit(2)
                from ..render.story import step_line

                text = f"step {k}  {step_line(run.steps[k - 1].transition)}\n" + render_diff(run.view(k - 1), run.view(k), chosen)
            else:
                from ..render.story import step_line

                head = "initial state" if k == 0 else f"state after step {k}  {step_line(run.steps[k - 1].transition)}"
                text = head + "\n" + render(run.view(k), chosen)
            text += "".join(f"\nviolation {v}" for v in run.violations(k))
            emit(text)
        _stopped_exit(run)


def _stopped_code(run: Any) -> int:
    """A log cut or malformed is bad input (2); one whose replay the model refuses (a
    digest, a guard) is a verdict (1), as `kvsm replay` says (README, exit codes)."""
    return 2 if run.stopped.get("malformed") else 1


def _stopped_exit(run: Any) -> None:
    """When the replay of the input stopped before its end: say where and why on stderr
    (what was shown is the part before it) and exit 2 or 1."""
    if run.stopped is None:
        return
    s = run.stopped
    label = "error" if s.get("malformed") else "mismatch"
    err.print(
        f"[red]{label}:[/red] {escape(run.source)}:{s['line']}: replay stopped at step {s['step']}: {escape(s['reason'])} "
        f"(shown: the {len(run.steps)} steps before it)",
        highlight=False, soft_wrap=True,
    )
    raise typer.Exit(_stopped_code(run))
