"""The injected defects under the reference profile (the detection matrix's `reference`
column, benchmarks/defects.py): TLC on the reference's small model with the knobs of
the four findings fixed (spec/MC_reference_defects), so that a violation is the
defect's own, and the simulator on `reference-default` with the same knobs fixed and
the L3 tier. The whole column is a benchmark; these check its path on two defects."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kvsm.config import REFERENCE_KNOBS, load_config
from kvsm.defects import CATALOGUE, FINDING_KNOBS, REFERENCE_MODEL, REFERENCE_SIM_CONFIG, REFERENCE_SIM_EXTRA, REFERENCE_UNREACHABLE, reference_sim
from kvsm.replay import replay
from kvsm.tla.models import config_of_model

ROOT = Path(__file__).resolve().parent.parent


def test_the_column_s_model_is_the_reference_with_the_findings_knobs_fixed():
    p = ROOT / REFERENCE_MODEL
    model = config_of_model(p.with_suffix(".tla"), p)
    ref = load_config("reference")
    assert set(FINDING_KNOBS) < set(REFERENCE_KNOBS)
    fixed = replace(ref, name=model.name, walk_weights=model.walk_weights, **{k: REFERENCE_KNOBS[k][1] for k in FINDING_KNOBS})
    assert model == fixed  # (the walk weights are `kvsm walk`'s, not the model's)
    # the knobs of no finding stay at the reference's value
    assert all(getattr(model, k) == REFERENCE_KNOBS[k][0] for k in set(REFERENCE_KNOBS) - set(FINDING_KNOBS))


def test_the_column_s_simulator_options_fix_the_same_knobs_and_keep_the_defect_s_own():
    for d in CATALOGUE.values():
        opts = reference_sim(d)
        assert opts["config"] == REFERENCE_SIM_CONFIG and opts["tiers"] == "l1,l2,l3"
        extra = REFERENCE_SIM_EXTRA.get(d.name, ({}, ""))[0]
        own = dict(d.sim.get("settings", ()))
        assert dict(opts["settings"]) == own | {k: REFERENCE_KNOBS[k][1] for k in FINDING_KNOBS}
        assert all(opts[k] == v for k, v in (d.sim | extra).items() if k not in ("config", "tiers", "settings"))


def test_a_defect_the_small_model_cannot_reach_says_why():
    assert set(REFERENCE_UNREACHABLE) < set(CATALOGUE)
    p = ROOT / REFERENCE_MODEL
    model = config_of_model(p.with_suffix(".tla"), p)
    # the disk-fault defects: the model has no disk fault; wallclock_tiebreak: one prompt;
    # the defects of a knob the profile leaves at its default: the model's value of it
    assert model.max_disk_faults == -1 and len(model.prompts) == 1
    assert not model.carry_host_hit and model.write_back_evict == "locked" and model.policy == "write_through"
    # backup_host_uaf: backups only inside an insert, one request alive at a time
    assert model.backup_trigger == "insert" and model.max_live == 1
    for name, why in REFERENCE_UNREACHABLE.items():
        assert why and ("disk fault" in why or "one prompt" in why or "carry_host_hit" in why
                        or "write_back_evict" in why or "backup_trigger" in why), name


@pytest.mark.tlc
def test_tlc_catches_a_defect_on_the_reference_with_the_findings_fixed(tmp_path):
    """double_free at the rollback of a prepared backup: the defect's own invariant, 6
    HostPages, in 4 steps (the findings' knobs fixed, the model is clean without it), and
    the Python model with the defect replays TLC's counterexample to the same violation."""
    from kvsm.tla.check import check

    res = check(str(ROOT / REFERENCE_MODEL), bug="double_free", log_path=tmp_path / "double_free.jsonl")
    v = res.to_json()["violation"]
    assert v is not None and v["kind"] == "invariant" and v["property"] == "HostPages" and v["steps"] == 4, v
    mutant = replay(v["log"], check=True, bug="double_free")
    assert mutant.first_mismatch is None and {x["step"] for x in mutant.violations} == {4}
    correct = replay(v["log"], check=True)
    assert correct.first_mismatch is not None or not correct.violations


def test_the_simulator_catches_an_l3_defect_on_reference_default_with_the_findings_fixed():
    """l3_no_min: a rank claims a reload from its own disk without the MIN, so the ranks
    decide the reservation otherwise (13 Agreement) within the first requests, seed 0."""
    from kvsm.sim import STOPS, SimOptions, simulate, stop_record

    with pytest.raises(STOPS) as e:
        simulate(SimOptions(bug="l3_no_min", check=True, seed=0, requests=300, **reference_sim(CATALOGUE["l3_no_min"])))
    rec = stop_record(e.value, 0)
    assert rec["detector"] == "invariant" and "13 Agreement: ReloadReserve" in rec["message"], rec


def test_the_benchmark_s_table_tells_a_catch_an_unreachable_defect_and_a_timeout_apart():
    import importlib.util

    spec = importlib.util.spec_from_file_location("defects_benchmark", ROOT / "benchmarks" / "defects.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    sim = {"caught": True, "detector": "invariant", "seed": 0, "transitions": 497}
    rows = {
        "double_free": {"reference": {"tlc": {"config": REFERENCE_MODEL, "caught": True, "property": "HostPages", "steps": 4,
                                              "distinct_states": 13, "seconds": 1.7}, "sim": sim}},
        "failed_store_visible": {"reference": {"tlc": {"config": REFERENCE_MODEL, "caught": False, "unreachable": "a failed disk write"},
                                               "sim": sim}},
        "load_uaf": {"reference": {"tlc": {"config": REFERENCE_MODEL, "caught": False, "timeout": 60.0},
                                   "sim": {"caught": False, "seeds_run": 5}}},
    }
    none = {"reference": {"tlc": {"caught": False, "models": {
        "fixed": {"violation": None, "distinct_states": 510995, "seconds": 65.0},
        "reference": {"violation": {"property": "Collectives", "kind": "invariant", "steps": 7}, "distinct_states": 124, "seconds": 1.0}}},
        "sim": {"caught": False, "runs": {"double_free": {"seeds": 1, "caught": False}}}}}
    lines = bench.table({"defects": rows, "none": none}).splitlines()
    assert lines[0].count("|") == lines[1].count("|") == 4  # defect, TLC, simulator
    assert lines[2] == "| double_free | HostPages, 4, 13, 1.7 | invariant, 0, 497 |"
    assert "not reachable (a failed disk write)" in lines[3] and "timeout (60 s)" in lines[4] and "not caught (5 seeds)" in lines[4]
    assert lines[5].startswith("| none | clean (510,995 states, 65.0 s); the pure reference: Collectives at 7 steps") and "clean (1 runs)" in lines[5]
