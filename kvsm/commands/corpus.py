"""`kvsm corpus verify` and `kvsm corpus add`: the regression corpus in traces/
(docs/corpus.md)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Callable, Optional

import typer
from rich.console import Console
from rich.markup import escape

from .common import output_option, progress

console = Console(emoji=False)
err = Console(stderr=True, emoji=False)

corpus_app = typer.Typer(no_args_is_help=True, help="The regression corpus: readable cases in traces/ that verify replays and checks.")


def _case_files(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out += sorted(p.glob("*.txt"))
        else:
            out.append(p)
    return out


def verify_paths(paths: list[Path], rewrite: bool = False, tlc: bool = False, on_case: Callable[[], None] | None = None) -> dict[str, Any]:
    """Verify every case under `paths` (calling `on_case` after each); with `rewrite`,
    write what the renderer prints where an expected output differs. The result is what `--json` prints, plus the
    failures' details and the files rewritten."""
    from ..corpus.format import UNGROUPED, CaseError, read_case
    from ..corpus.run import Failure, rewritten, verify_case
    from ..output import write_atomic

    files = _case_files(paths)
    failed: list[Failure] = []
    passed = 0
    wrote: list[str] = []
    names: dict[str, str] = {}
    groups: dict[str, dict[str, int]] = {}
    for f in files:
        try:
            case = read_case(str(f))
        except CaseError as e:
            failed.append(Failure(str(f), e.line, e.reason))
            if on_case is not None:
                on_case()
            continue
        fails: list[Failure] = []
        if case.name in names:
            fails.append(Failure(str(f), case.lines.get("case", 1), f"case name '{case.name}' is also used by {names[case.name]}"))
        names.setdefault(case.name, str(f))
        got, outputs = verify_case(case, tlc=tlc)
        fails += got
        if rewrite and outputs is not None:
            text = rewritten(case, outputs)
            if text != f.read_text(encoding="utf-8"):
                write_atomic(f, text)
                wrote.append(str(f))
                # the outputs are now the renderer's: only the other failures remain
                fails = [x for x in fails if not x.output]
        failed += fails
        passed += not fails
        for g in case.groups or (UNGROUPED,):
            row = groups.setdefault(g, {"cases": 0, "passed": 0})
            row["cases"] += 1
            row["passed"] += not fails
        if on_case is not None:
            on_case()
    return {"cases": len(files), "passed": passed, "failed": failed, "rewrote": wrote, "groups": dict(sorted(groups.items()))}


@corpus_app.command("verify")
def verify(
    paths: Optional[list[Path]] = typer.Argument(None, help="case files or folders of them (default: traces/)"),
    rewrite: bool = typer.Option(False, "--rewrite", help="write what the renderer prints where an expected output differs or is missing"),
    as_json: bool = typer.Option(False, "--json", help='print {"cases", "passed", "failed": [{"file", "line", "why"}], "groups": {GROUP: {"cases", "passed"}}}'),
    tlc: Optional[bool] = typer.Option(None, "--tlc/--no-tlc", help="have TLC's validate accept every bug-free case (default: when Java is present)"),
) -> None:
    """Replay every case with every invariant checked and compare its outputs; exit 0 only when all pass."""
    targets = paths or [Path("traces")]
    missing = [p for p in targets if not p.exists()]
    if missing:
        err.print(f"[red]error:[/red] {escape(str(missing[0]))}: no such file or folder", soft_wrap=True)
        raise typer.Exit(2)
    empty = [p for p in targets if p.is_dir() and not _case_files([p])]
    if empty:  # a folder without a case verifies nothing: a wrong path, not a pass
        err.print(f"[red]error:[/red] {escape(str(empty[0]))}: no case here (a case is a NAME.txt file: docs/corpus.md)", highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    use_tlc = tlc if tlc is not None else shutil.which("java") is not None
    with progress() as bar:
        task = bar.add_task("corpus verify: cases", total=len(_case_files(targets)))
        res = verify_paths(targets, rewrite=rewrite, tlc=use_tlc, on_case=lambda: bar.advance(task))
    if as_json:
        out = {"cases": res["cases"], "passed": res["passed"], "failed": [f.to_json() for f in res["failed"]], "groups": res["groups"]}
        sys.stdout.write(json.dumps(out) + "\n")
    else:
        for f in res["rewrote"]:
            console.print(f"rewrote {escape(f)}", highlight=False, soft_wrap=True)
        for f in res["failed"]:
            where = f"{f.file}:{f.line}" if f.line else f.file  # line 0: the file as a whole
            err.print(f"[red]{escape(where)}:[/red] {escape(f.why)}", highlight=False, soft_wrap=True)
            if f.detail:
                err.print(escape(f.detail), highlight=False, soft_wrap=True)
        for g, row in res["groups"].items():
            bad = row["cases"] - row["passed"]
            console.print(f"  {g}: {row['cases']} cases, {row['passed']} passed" + (f", [red]{bad} failing[/red]" if bad else ""), highlight=False, soft_wrap=True)
        failing = res["cases"] - res["passed"]
        verdict = "[green]every case passes[/green]" if not failing else f"[red]{failing} failing[/red]"
        console.print(f"{res['cases']} cases, {res['passed']} passed{' (TLC validated each bug-free case)' if use_tlc else ''}: {verdict}", highlight=False, soft_wrap=True)
    raise typer.Exit(0 if res["passed"] == res["cases"] and not res["failed"] else 1)


@corpus_app.command("add")
def add(
    log: Path = typer.Argument(..., help="a transition log: a TLC counterexample, a failing simulator run, a hand-made walk"),
    name: str = typer.Option(..., "--name", help="the case's name (its file is DIR/NAME.txt)"),
    bug: Optional[str] = typer.Option(None, "--bug", help="the injected defect that produces the log's violation"),
    knob: Optional[str] = typer.Option(None, "--knob", help="the fidelity knob (at the reference's value in the log's config) whose behaviour the log's violation is"),
    shows: Optional[str] = typer.Option(None, "--shows", help="one sentence: what the case shows"),
    directory: Path = output_option(Path("traces"), "--dir", help="the corpus folder"),
    seconds: float = typer.Option(120.0, "--seconds", min=0, help="time budget for shrinking"),
) -> None:
    """Turn a log into a case, a failing one shrunk to the fewest steps that fail the same way."""
    from ..config import ConfigError
    from ..corpus.format import _NAME, CaseError, read_case
    from ..corpus.run import case_from_log
    from ..log import LogError
    from ..output import OutputError, check_output_file, write_atomic

    from ..config import BUGS, CASE_KNOBS

    refused = None
    if knob is not None and knob not in CASE_KNOBS:
        refused = f"--knob {knob}: not a fidelity knob (the fidelity knobs: {', '.join(CASE_KNOBS)})"
    elif bug is not None and (bug not in BUGS or bug == "none"):
        refused = f"--bug {bug}: not an injected defect (the defects: {', '.join(b for b in BUGS if b != 'none')})"
    elif bug is not None and knob is not None:
        refused = "give --bug or --knob, not both: a case names an injected defect or a fidelity knob"
    if refused is not None:
        err.print(f"[red]error:[/red] {escape(refused)}", highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    if not _NAME.fullmatch(name):
        err.print(f"[red]error:[/red] --name: a case name is letters, digits, '-', '_' and '.', got '{escape(name)}'", soft_wrap=True)
        raise typer.Exit(2)
    dest = directory / f"{name}.txt"
    in_use = {}
    for p in _case_files([directory]) if directory.is_dir() else []:
        in_use[p.stem] = p
        try:
            in_use.setdefault(read_case(str(p)).name, p)
        except CaseError:
            pass
    if os.path.lexists(dest) or name in in_use:
        err.print(f"[red]error:[/red] a case named '{escape(name)}' exists: {escape(str(in_use.get(name, dest)))}", soft_wrap=True)
        raise typer.Exit(2)
    try:  # before the shrinking (up to --seconds): the case must have somewhere to go
        check_output_file(dest)
    except OutputError as e:
        err.print(f"[red]error:[/red] --dir {escape(str(directory))}: {escape(str(e))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    try:
        text, notes = case_from_log(log, name, dest, bug=bug, shows=shows, seconds=seconds, knob=knob)
        write_atomic(dest, text)
    except (LogError, CaseError, ConfigError, OutputError) as e:
        err.print(f"[red]error:[/red] {escape(str(e))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    console.print(f"wrote {escape(str(dest))}" + (f": {'; '.join(notes)}" if notes else ""), highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.add_typer(corpus_app, name="corpus")
