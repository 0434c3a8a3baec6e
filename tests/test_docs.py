"""What README and docs/ claim that a program can check: the transitions a walk takes,
the commands they list, the configs, models and files they name, the L3 constants
docs/sim.md gives the built-in configs, and the commands README says to try next."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from kvsm.cli import app
from kvsm.config import builtin_names, load_config
from kvsm.tla.location import NAMED_MODELS
from kvsm.transitions import names_for

from .helpers import command_paths

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
DOCS = {p.name: p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))}
ALL = {"README.md": README, **DOCS}


COMMANDS = set(command_paths(typer.main.get_command(app)))


def test_a_walk_on_small_takes_as_many_transitions_as_readme_says(tmp_path):
    n = int(re.search(r"1000 steps on `small` take all (\d+) of its transitions", README).group(1))
    names = names_for(load_config("small"))
    assert n == len(names)
    r = runner.invoke(app, ["walk", "--steps", "1000", "-o", str(tmp_path / "w.jsonl")])
    assert r.exit_code == 0, r.output
    taken = r.stdout.split("taken: ", 1)[1].splitlines()[0]
    assert {x.rsplit(" ", 1)[0] for x in taken.split(", ")} == set(names) and "not taken" not in r.stdout


def test_the_commands_readme_lists_are_the_commands_there_are():
    rows = re.findall(r"^\| `kvsm ([a-z][a-z ]*?)(?: [A-Z\[-].*?)?` \|", README, re.M)
    listed = {tuple(r.split()) for r in rows}
    assert listed, "no command table found"
    assert listed <= COMMANDS, f"listed but not commands: {sorted(listed - COMMANDS)}"
    assert COMMANDS <= listed, f"commands README does not list: {sorted(COMMANDS - listed)}"


def test_every_kvsm_command_in_readme_and_docs_exists():
    bad = []
    for name, text in ALL.items():
        for words in re.findall(r"`kvsm ([a-z][a-z-]*(?:\s+[a-z][a-z-]*)?)", text):
            w = tuple(words.split())
            groups = {c[:1] for c in COMMANDS if len(c) > 1}
            if w[:1] in COMMANDS or w[:2] in COMMANDS or (w[:1] in groups and (len(w) == 1 or w[:2] in COMMANDS)):
                continue
            bad.append(f"{name}: kvsm {' '.join(w)}")
    assert not bad, bad


def test_the_configs_models_and_files_named_exist():
    models = set(NAMED_MODELS)
    bad = []
    for name, text in ALL.items():
        for cfg in re.findall(r"--config ([a-z0-9_]+)(?![\w./])", text):
            if cfg not in models and cfg not in builtin_names():
                bad.append(f"{name}: --config {cfg}")
        for m in re.finditer(r"\b((?:kvsm/configs|spec|traces|benchmarks|tests|kvsm)/[A-Za-z0-9_./-]*[A-Za-z0-9_])", text):
            path, rest = m.group(1), text[m.end() : m.end() + 2]
            if "NAME" in path or (ROOT / path).exists() or re.match(r":\d", rest):  # `FILE:LINE: ...`: an example message
                continue
            if rest.startswith(("*", ".*")) and list(ROOT.glob(path + "*")):  # `traces/x.*`, `spec/MC_*.cfg`
                continue
            # a file named without its extension (`traces/commit_early_return`) is not there either
            if path.endswith((".toml", ".cfg", ".tla", ".txt", ".jsonl", ".md", ".py", ".json")) or path.startswith(("traces/", "spec/")):
                bad.append(f"{name}: {path}")
    assert not bad, bad


def test_docs_sim_gives_the_built_in_configs_l3_constants():
    text = " ".join(DOCS["sim.md"].split())
    limits = lambda c: (c.spill_inflight, c.reload_inflight, c.spill_queue_cap, c.reload_ttl)  # noqa: E731
    assert limits(load_config("default")) == (32, 32, 262144, 4096)
    assert "the reference's 32, 32, 2^18 and 4096 ticks in `default`" in text
    assert limits(load_config("l3")) == (1, 1, 8, 1)
    assert "1, 1, 8, 1 in `l3` (made for exhaustive checking)" in text
    for name in ("small", "loads"):
        c = load_config(name)
        assert c.L3 == 0 and limits(c) == (1, 1, 8, 2), name


def test_the_commands_readme_says_to_try_next_run(monkeypatch):
    block = README.split("Try these next", 1)[1].split("\n\n", 2)[1]
    tried = re.findall(r"`kvsm ([^`]+)`", block)
    assert len(tried) >= 4
    for cmd in tried:
        words = tuple(cmd.split())
        assert words[:1] in COMMANDS or words[:2] in COMMANDS, cmd
    # the corpus case, read as README says, in the checkout (the others write out/ or run TLC)
    case = next(c for c in tried if c.startswith("show traces/"))
    monkeypatch.chdir(ROOT)
    r = runner.invoke(app, case.split())
    assert r.exit_code == 0 and "Arrive" in r.stdout, r.output


@pytest.mark.parametrize("doc", ["README.md", "docs/sim.md"])
def test_no_stale_figure_of_the_main_job(doc):
    text = (ROOT / doc).read_text()
    assert "about 35 s" not in text and "all 13 of its transitions" not in text


def test_a_trace_read_with_a_request_limit_is_parsed_only_that_far_as_docs_sim_says(tmp_path):
    line = '{"timestamp": 0, "input_length": 1024, "output_length": 16, "hash_ids": [1, 2]}'
    trace = tmp_path / "t.jsonl"
    trace.write_text(line + "\n" + line + "\n\n")  # a trailing blank line
    r = runner.invoke(app, ["sim", "-w", str(trace), "--json"])
    assert r.exit_code == 2 and r.stderr.strip() == f"error: {trace}:3: blank line", r.output
    r = runner.invoke(app, ["sim", "-w", str(trace), "-n", "2", "--json"])
    assert r.exit_code == 0, r.output
    text = " ".join(DOCS["sim.md"].split())
    assert "keeps a trace's first N lines (file order) and parses no further (a line after them, blank or not, is not looked at" in text
    assert "Any other line read (bad JSON, blank, a trailing blank line included," in text
