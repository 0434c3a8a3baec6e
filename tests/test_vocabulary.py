"""One flag vocabulary across every command (issue 41, item 4), and defaults written as
values (item 3): walks the click command tree of the typer app, so a command added
later is held to it too."""

from __future__ import annotations

import re
from typing import Any, Iterator

import pytest
import typer
from typer.testing import CliRunner

from kvsm.cli import app

runner = CliRunner()


def _commands(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, Any]]:
    if hasattr(cmd, "commands"):  # a group
        for name, sub in cmd.commands.items():
            yield from _commands(sub, (*path, name))
    else:
        yield " ".join(path), cmd


COMMANDS = list(_commands(typer.main.get_command(app)))
OPTIONS = [(name, p) for name, cmd in COMMANDS for p in cmd.params if p.param_type_name == "option"]


def _short(short: str) -> list[tuple[str, list[str]]]:
    return [(name, p.opts) for name, p in OPTIONS if short in p.opts]


def test_the_tree_is_walked() -> None:
    names = {name for name, _ in COMMANDS}
    assert {"walk", "run", "sim", "sweep", "campaign", "check", "conform", "validate", "realimpl sglang", "gpu replay"} <= names


@pytest.mark.parametrize(("short", "long"), [("-w", "--workload"), ("-n", "--requests"), ("-c", "--config")])
def test_a_short_flag_has_one_meaning(short: str, long: str) -> None:
    uses = _short(short)
    assert uses, f"no command has {short}"
    wrong = [(name, opts) for name, opts in uses if long not in opts]
    assert not wrong, f"{short} means something other than {long}: {wrong}"


def test_o_is_always_an_output() -> None:
    uses = [(name, p) for name, p in OPTIONS if "-o" in p.opts]
    assert {name for name, _ in uses} >= {"walk", "run", "sim", "sweep", "campaign", "realimpl sglang"}
    for name, p in uses:
        assert "--output" in p.opts, (name, p.opts)
        assert p.metavar == "PATH", (name, p.opts)  # output_option's: a path, never empty


@pytest.mark.parametrize("name", ["walk", "sim", "sweep", "campaign", "run", "realimpl sglang"])
def test_every_o_refuses_an_empty_path(name: str) -> None:
    r = runner.invoke(app, [*name.split(), "-o", ""])
    assert r.exit_code == 2 and "is empty" in r.stderr and "Traceback" not in r.output, r.output


def test_workers_has_no_short_form() -> None:
    uses = [(name, p.opts) for name, p in OPTIONS if "--workers" in p.opts]
    assert {name for name, _ in uses} >= {"campaign", "sweep", "check", "conform", "validate"}
    assert all(opts == ["--workers"] for _, opts in uses), uses


def test_old_spellings_are_hidden_aliases_only() -> None:
    hidden = {(name, tuple(p.opts)) for name, p in OPTIONS if p.hidden}
    assert hidden == {("run", ("--outdir",)), ("campaign", ("--configs",))}
    assert not [(name, p.opts) for name, p in OPTIONS if "--configs" in p.opts and not p.hidden]


# a default written as a reference to another command or to "the config" instead of a value
_REFERENCE = re.compile(r"default:?\s+(kvsm\b|the config's\b|the defaults?\b|default\b)|kvsm \w+'s\)", re.I)


def test_no_default_is_a_reference() -> None:
    texts = [(name, p.opts, p.help or "") for name, p in OPTIONS] + [(name, (), cmd.help or "") for name, cmd in COMMANDS]
    bad = [(name, opts, _REFERENCE.search(text).group(0)) for name, opts, text in texts if _REFERENCE.search(text)]
    assert not bad, bad


def test_the_pattern_catches_what_it_is_for() -> None:
    for text in ("values (e.g. 1,4); default: kvsm sim's", "lru | slru (default: the config's)", "(default: default)"):
        assert _REFERENCE.search(text), text


@pytest.mark.parametrize("command", [name for name, _ in COMMANDS])
def test_every_help_shows(command: str) -> None:
    r = runner.invoke(app, [*command.split(), "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    # typer's own "[default: default]" is a value: -c's default, the config named default
    text = " ".join(r.output.split()).replace("[default: default]", "")
    assert not _REFERENCE.search(text), command


def test_the_hidden_old_names_still_work_and_both_at_once_are_refused(tmp_path) -> None:
    # --configs is read as -c/--config: its bad value is reported under the new name
    r = runner.invoke(app, ["campaign", "--runs", "1", "--configs", "small,,l3", "-o", str(tmp_path / "c")])
    assert r.exit_code == 2 and "-c/--config 'small,,l3': an empty value in the list" in r.stderr, r.output
    r = runner.invoke(app, ["campaign", "--runs", "1", "-c", "small", "--configs", "l3", "-o", str(tmp_path / "c")])
    assert r.exit_code == 2 and "give -c/--config or --configs (its old name), not both" in r.stderr, r.output
    r = runner.invoke(app, ["run", "-o", str(tmp_path / "a"), "--outdir", str(tmp_path / "b")])
    assert r.exit_code == 2 and "give -o/--output or --outdir (its old name), not both" in r.stderr, r.output
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists() and not (tmp_path / "c").exists()


def test_sweep_tiers_take_the_comma_form_repeated_and_the_old_plus_form() -> None:
    from kvsm.sweep.grid import parse_axes

    new = parse_axes({"tiers": ["l1", "l1,l2", "l1,l2,l3"]}).given()["tiers"]
    assert new == ("l1", "l1,l2", "l1,l2,l3")
    assert parse_axes({"tiers": ["l1,l1+l2+l3"]}).given()["tiers"] == ("l1", "l1,l2,l3")


def test_a_sweep_report_shows_the_values_its_points_ran_with() -> None:
    """The grid of report.html and of --json: an option not given shows the values its
    points ran with (the default config's R, L2, eviction, ...), not the word default."""
    import re as _re

    from kvsm.sweep.grid import parse_axes, run_point, used_grid
    from kvsm.sweep.report import render_html

    axes = parse_axes({"workload": "system-prompts", "requests": "20", "l1_pages": "8,16"})
    records = [run_point(p.to_json()) for p in axes.points()]
    grid = used_grid(axes, records)
    assert grid["--ranks"] == [4] and grid["--l2-pages"] == [4096] and grid["--eviction"] == ["slru"] and grid["--page-tokens"] == [512]
    assert grid["--l3-pages"] == [None] and grid["--l1-pages"] == [8, 16]  # no L3 tier; given values as given
    summary = {"points": 2, "ran": 2, "status": {"ok": 2}, "workers": 1, "seconds": 0.0, "knees": []}
    page = render_html(axes, records, summary, {})
    rows = dict(_re.findall(r"<tr><th>([^<]+)</th><td>([^<]*)</td></tr>", page))
    assert rows["--ranks"] == "4" and rows["--l2-pages"] == "4096" and rows["--eviction"] == "slru" and rows["--requests"] == "20"
    assert rows["--bug"] == "none" and rows["--model"] == "llama-3.1-8b"
    assert "default" not in {v for k, v in rows.items() if k != "--config"}


@pytest.mark.parametrize("long", ["--tenants", "--tenant-mix"])
def test_tenant_options_are_one_vocabulary_in_sim_and_sweep(long: str) -> None:
    """`kvsm sweep` takes every `kvsm sim` tenant option under the same name, without a
    short form (a list of the values sim takes one of)."""
    uses = {name: p.opts for name, p in OPTIONS if long in p.opts}
    assert {"sim", "sweep"} <= set(uses), uses
    assert all(opts == [long] for opts in uses.values()), uses
