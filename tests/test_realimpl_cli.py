"""`kvsm realimpl ...` where SGLang need not be installed: the install's pinned commands,
and the inputs the SGLang run refuses before it imports anything (docs/realimpl.md)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvsm.cli import app
from kvsm.realimpl import cpu, install

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent


def test_install_dry_run_prints_the_pinned_requirements_then_sglang_without_its_own() -> None:
    r = runner.invoke(app, ["realimpl", "install", "sglang", "--dry-run"])
    assert r.exit_code == 0, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 2
    assert lines[0].endswith(f"-m pip install -r {install.requirements_file()}")
    assert lines[1].endswith("-m pip install --no-deps sglang==0.5.20")


def test_the_pins_are_exact_and_torch_is_the_gpu_extras() -> None:
    pins = install.pins()
    assert pins and all("==" in p for p in pins)
    names = [p.split("==")[0].lower() for p in pins]
    assert len(names) == len(set(names)) and "sglang" not in names
    gpu = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["gpu"]
    assert [p for p in pins if p.startswith("torch==")] == gpu


@pytest.mark.parametrize(
    "args,says",
    [
        (["install", "pip"], "'sglang'"),
        (["sglang", "--tiers", "l1,l2,l3"], "not mapped yet"),
        (["sglang", "--tiers", "l1"], "give l1,l2"),
        (["sglang", "-c", "small"], "R = 2"),
        (["sglang", "--workload", "no/such/trace.jsonl"], "no such file"),
        (["sglang", "-n", "0"], "--requests"),
    ],
)
def test_bad_input_is_a_one_line_error_and_exit_2(args: list[str], says: str) -> None:
    r = runner.invoke(app, ["realimpl", *args])
    assert r.exit_code == 2, r.output
    assert says in r.output and "Traceback" not in r.output


@pytest.mark.skipif(cpu.available(), reason="SGLang is installed here")
def test_without_sglang_the_run_says_how_to_install_it_and_exits_3() -> None:
    r = runner.invoke(app, ["realimpl", "sglang", "-n", "3"])
    assert r.exit_code == 3, r.output
    assert "kvsm realimpl install sglang" in r.output
