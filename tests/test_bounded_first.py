"""Checked and bounded before anything runs (issue 41, item 5): an empty output path is
refused by every command that writes one, a sweep's grid and a campaign's runs have a
ceiling that an option lifts, a campaign's --requests is held to `kvsm sim -n`'s bound,
and a bad $KVSM_PROGRESS_SECONDS is refused; each is one error line, exit 2, and nothing
is written."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from kvsm.cli import app

runner = CliRunner()


def _one_error(res, message: str) -> str:
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    assert message in lines[0], lines[0]
    return lines[0]


def _nothing_written(where) -> None:
    assert sorted(p.name for p in where.iterdir()) == []


# ---- -o '' --------------------------------------------------------------------------------


@pytest.mark.parametrize("args, option", [
    (["walk", "-o", ""], "'-o' / '--output'"),
    (["run", "--outdir", ""], "'--outdir'"),
    (["sim", "-n", "5", "-o", ""], "'-o' / '--output'"),
    (["sim", "-n", "5", "--plot", ""], "'--plot'"),
    (["sim", "-n", "5", "--report", ""], "'--report'"),
    (["sweep", "-n", "5", "-o", ""], "'-o' / '--output'"),
    (["campaign", "--runs", "1", "--configs", "small", "-o", ""], "'-o' / '--output'"),
    (["campaign", "--runs", "1", "--configs", "small", "--plot", ""], "'--plot'"),
    (["show", "x.jsonl", "--html", ""], "'--html'"),
    (["check", "--log", ""], "'--log'"),
    (["corpus", "add", "x.jsonl", "--name", "x", "--dir", ""], "'--dir'"),
])
def test_an_empty_output_path_is_refused_everywhere(tmp_path, monkeypatch, args, option):
    monkeypatch.chdir(tmp_path)  # an empty path is the current directory: nothing lands here
    line = _one_error(runner.invoke(app, args), f"Invalid value for {option}: is empty, which would be the current directory; give a path")
    assert f" {args[0]}" in line.split(":")[1]  # the command named
    _nothing_written(tmp_path)


def test_a_sweep_writes_under_out_by_default():
    from kvsm.commands.common import output_path

    sweep = next(c for c in app.registered_commands if c.name == "sweep")
    import inspect

    default = inspect.signature(sweep.callback).parameters["outdir"].default
    assert default.default == output_path("out/sweep") and default.parser is output_path
