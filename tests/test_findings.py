"""The findings of docs/model.md: reference behaviours that break an invariant, each
behind a knob (`reference` vs `fixed`). Each has a small TLC model in spec/ where the
violation shows (`kvsm check` turns it into a log) and a case in traces/, a kvsm log
that replays to the violation on its last line."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvsm.cli import app
from kvsm.explore import explore
from kvsm.log import read_log
from kvsm.replay import replay
from kvsm.tla.models import config_of_model
from kvsm.tla.location import model_paths

ROOT = Path(__file__).resolve().parent.parent
# finding: (TLC model, the invariant its trace violates)
FINDINGS = {
    "orphan_eviction": ("spec/MC_orphan_eviction.cfg", "HostPages", 6),
    "durable_split": ("spec/MC_durable_split.cfg", "Durable", 8),
    "own_disk_durable": ("spec/MC_own_disk_durable.cfg", "Agreement", 13),
}


@pytest.mark.parametrize("name", list(FINDINGS))
def test_the_case_in_traces_replays_to_its_violation_on_its_last_line(name):
    _, prop, number = FINDINGS[name]
    log = ROOT / "traces" / f"{name}.jsonl"
    header, stream = read_log(log)
    lines = [lineno for lineno, *_ in stream]
    assert header.source == "tlc" and header.extra["property"] == prop
    res = replay(log, check=True)
    assert res.first_mismatch is None
    assert {v["line"] for v in res.violations} == {lines[-1]}
    assert any(v["violation"].startswith(f"{number} {prop}") for v in res.violations), res.violations
    assert (ROOT / "traces" / f"{name}.md").read_text().startswith(f"# {name}: ")


@pytest.mark.tlc
@pytest.mark.parametrize("name", list(FINDINGS))
def test_tlc_finds_the_violation_on_the_finding_s_model(tmp_path, name):
    model, prop, _ = FINDINGS[name]
    res = CliRunner().invoke(app, ["check", "--config", str(ROOT / model), "--json", "--log", str(tmp_path / "v.jsonl")])
    assert res.exit_code == 1, res.output
    out = json.loads(res.stdout)
    assert out["violation"]["property"] == prop and out["violation"]["kind"] == "invariant"
    assert replay(tmp_path / "v.jsonl", check=True).violations


def test_the_orphan_model_is_clean_with_the_fixed_rule_and_not_with_the_reference():
    module, cfg = model_paths(str(ROOT / FINDINGS["orphan_eviction"][0]))
    ref = config_of_model(module, cfg)
    assert ref.unbacked_evict == "reference"
    bad = explore(ref).violations
    assert bad and all(v["violation"].startswith("6 HostPages") for v in bad)
    assert explore(replace(ref, unbacked_evict="fixed")).violations == []


def test_the_own_disk_model_is_clean_with_the_fixed_rule_and_not_with_the_reference():
    module, cfg = model_paths(str(ROOT / FINDINGS["own_disk_durable"][0]))
    ref = config_of_model(module, cfg)
    assert ref.own_disk_durable == "reference" and ref.max_disk_faults > 0  # every counter bounded
    bad = explore(ref).violations
    assert bad and all(v["violation"].startswith("13 Agreement: SpillSubmit") for v in bad)
    assert explore(replace(ref, own_disk_durable="fixed")).violations == []


@pytest.mark.tlc
def test_tlc_and_the_model_agree_on_the_own_disk_model():
    from kvsm.tla.conform import conform

    res = conform(str(ROOT / FINDINGS["own_disk_durable"][0]))
    assert res.equal and res.tlc_states == res.model_states == 910, res.to_json()


# the simulator's --check sees each finding too, on a workload that reaches it (its
# config: tests/data/sim_l3.toml with the knob at "reference")
SIM_CASES = {
    "unbacked_evict": (dict(workload="multi-turn", tiers="l1,l2", requests=300, seed=1), "6 HostPages"),
    "durable_split": (dict(workload="thrash", tiers="l1,l2,l3", requests=120, seed=5), "8 Durable"),
    "own_disk_durable": (dict(workload="thrash", tiers="l1,l2,l3", requests=40, seed=5), "13 Agreement"),
}


@pytest.mark.parametrize("knob", list(SIM_CASES))
def test_the_simulator_s_check_catches_the_reference_behaviour_and_not_the_fixed_one(tmp_path, knob):
    from kvsm.sim import SimOptions, simulate
    from kvsm.sim.stops import SimInvariantError

    opts, invariant = SIM_CASES[knob]
    base = (ROOT / "tests" / "data" / "sim_l3.toml").read_text()
    for value in ("fixed", "reference"):
        cfg = tmp_path / f"{knob}-{value}.toml"
        cfg.write_text(f'{knob} = "{value}"\n' + base)
        run = lambda: simulate(SimOptions(config=str(cfg), ranks=2, l1_pages=64, l2_pages=160, check=True, **opts))  # noqa: E731
        if value == "fixed":
            run()
        else:
            with pytest.raises(SimInvariantError, match=invariant):
                run()
