"""`ack_append`: when a rank's final write ack enters its ack queue. `"fixed"` (the
default) with its copy's end, in `WriteDone(r)`; `"reference"` before it
(`AckAppend(r)`), the copy's end then being the ack's finish query, as the reference's
`writing_check` reads `finish_event.query()` and stops at the first unfinished ack.
A commit takes only finished copies either way; the early return of
`commit_call = "reference"` reads the queue's length, which now counts unfinished acks."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvsm.config import Config
from kvsm.explore import explore
from kvsm.state import Rejected, Round
from kvsm.tla.location import spec_dir
from kvsm.tla.models import load_model
from kvsm.invariants import violations_after
from kvsm.transitions import apply, enabled, names_for

from .helpers import T, fresh, run, serve

MC = spec_dir() / "MC_ack_append.cfg"


def backed_up(**kw):
    """One node [1, 2] inserted and its backup reserved under `ack_append = "reference"`."""
    s = serve(fresh(ack_append="reference", **kw), 0, [1, 2])
    return run(s, T("Reserve", node=1, fits=True))


def test_the_default_appends_with_the_copy_and_leaves_the_knob_out_of_the_config_json():
    cfg = Config()
    assert cfg.ack_append == "fixed" and "ack_append" not in cfg.to_json()
    assert replace(cfg, ack_append="reference").to_json()["ack_append"] == "reference"
    assert "AckAppend" not in names_for(cfg) and "AckAppend" in names_for(replace(cfg, ack_append="reference"))
    s = run(serve(fresh(), 0, [1, 2]), T("Reserve", node=1, fits=True))
    assert not [t for t in enabled(s) if t.name == "AckAppend"]
    with pytest.raises(Rejected, match="ack_append = fixed"):
        apply(s, T("AckAppend", rank=0))
    s = run(s, T("WriteDone", rank=0))
    assert s.acked == (0, 0) and s.write_done == (1, 0)


def test_a_copy_finishes_only_after_its_ack_is_appended_and_only_finished_copies_commit():
    s = backed_up()
    with pytest.raises(Rejected, match="not appended the ack"):
        apply(s, T("WriteDone", rank=0))
    # both ranks appended, neither copy finished: both enter the MIN with 0, nothing commits
    s = run(s, T("AckAppend", rank=0), T("AckAppend", rank=1), T("CommitCall", rank=0), T("CommitCall", rank=1))
    assert s.commit_round == (Round.IN, Round.IN)
    s = run(s, T("Commit"))
    assert s.writes == (1,) and s.nodes[1].host is None and s.acked == (1, 1)
    # rank 0's copy finishes: the MIN is still 0 (rank 1's appended ack is unfinished)
    s = run(s, T("WriteDone", rank=0), T("CommitCall", rank=0), T("CommitCall", rank=1), T("Commit"))
    assert s.writes == (1,) and 1 in s.pending
    s = run(s, T("WriteDone", rank=1), T("CommitCall", rank=0), T("CommitCall", rank=1), T("Commit"))
    assert s.writes == () and s.nodes[1].host == 1 and s.acked == (0, 0) and s.write_done == (0, 0)


def test_an_ack_may_be_appended_while_the_rank_waits_in_the_collective_and_a_rollback_scrubs_it():
    s = run(backed_up(), T("AckAppend", rank=0), T("CommitCall", rank=0))
    s = run(s, T("AckAppend", rank=1))
    assert s.acked == (1, 1) and s.commit_round[0] == Round.IN
    s = run(s, T("CommitCall", rank=1), T("Commit"), T("Rollback", node=1))
    assert s.writes == () and s.acked == (0, 0) and 1 not in s.pending


def test_under_the_reference_entry_a_rank_with_an_unfinished_appended_ack_enters_the_min():
    s = run(backed_up(commit_call="reference"), T("AckAppend", rank=0), T("CommitCall", rank=0), T("CommitCall", rank=1), check=False)
    # rank 0's queue holds an ack (unfinished), rank 1's is empty: the calls do not pair
    assert s.commit_round == (Round.IN, Round.SKIPPED) and s.write_done == (0, 0)
    assert [v.split(":")[0] for v in violations_after(1, s)] == ["12 Collectives"]


def test_the_ack_append_model_exhausts_clean_under_both_values_and_the_reference_entry_breaks_invariant_12():
    cfg = load_model(str(MC), properties=False).config
    assert cfg.ack_append == "reference" and cfg.commit_call == "fixed" and cfg.prepared_backups
    ref = explore(cfg)
    assert not ref.violations and len(ref.states) == 164
    # the state the fixed value lacks: an ack appended on a rank whose copy has not finished
    assert any(a > d for s in ref.states.values() for a, d in zip(s.acked, s.write_done))
    assert {"AckAppend", "WriteDone", "Commit", "Rollback"} <= {name for _, name, _ in ref.edges}
    fixed = explore(replace(cfg, ack_append="fixed"))
    assert not fixed.violations and len(fixed.states) == 84
    bad = explore(replace(cfg, commit_call="reference"), cut=True)
    assert bad.violations and all(v["violation"].startswith("12 Collectives") for v in bad.violations)


@pytest.mark.tlc
def test_tlc_and_the_model_agree_on_the_ack_append_model():
    from kvsm.tla.conform import conform

    res = conform(str(MC))
    assert res.equal and res.tlc_states == res.model_states == 164, res.to_json()



def _builtin_with(tmp_path, name: str, lines: str):
    """A TOML copy of built-in config `name` with `lines` after its policy line."""
    toml = tmp_path / f"{name}_ack.toml"
    text = (spec_dir().parent / "kvsm" / "configs" / f"{name}.toml").read_text()
    toml.write_text(text.replace('policy = "write_through"\n', 'policy = "write_through"\n' + lines))
    return toml


def test_the_simulator_appends_each_rank_s_acks_at_its_engine_s_start_and_the_log_replays(tmp_path):
    from kvsm.cli import app

    from typer.testing import CliRunner

    toml = _builtin_with(tmp_path, "default", 'ack_append = "reference"\n')
    log = tmp_path / "s.jsonl"
    r = CliRunner().invoke(app, ["sim", "-c", str(toml), "-n", "40", "-s", "1", "--faults", "stall:0.3", "-o", str(log)])
    assert r.exit_code == 0, r.output
    names = [line.split('"name":"')[1].split('"')[0] for line in log.read_text().splitlines() if '"name":"' in line]
    assert "AckAppend" in names and "AckAppendAll" not in names and "Commit" in names
    # every ack is appended before its copy's end on that rank: the log replays cleanly
    r = CliRunner().invoke(app, ["replay", str(log), "--check"])
    assert r.exit_code == 0 and "every invariant held" in r.output, r.output


def test_the_simulator_reaches_the_early_return_where_ranks_append_at_times_of_their_own(tmp_path):
    """Finding 1 in the simulator: under the per-rank reading (`ack_append =
    "reference"`) a random schedule lets one rank reach the commit call with its ack
    appended and another without; under `"lockstep"` the same run pairs its calls."""
    from kvsm.sim import SimOptions, simulate
    from kvsm.sim.stops import SimInvariantError

    opts = dict(config="reference-default", seed=3, requests=100, tiers="l1,l2,l3", schedule="random", check=True)
    with pytest.raises(SimInvariantError, match="12 Collectives"):
        simulate(SimOptions(**opts, settings=(("own_disk_durable", "fixed"),)))
    simulate(SimOptions(**opts, settings=(("own_disk_durable", "fixed"), ("durable_split", "fixed"), ("ack_append", "lockstep"))))


@pytest.mark.tlc
def test_validate_accepts_a_walk_with_acks_appended_before_their_copies(tmp_path):
    from typer.testing import CliRunner

    from kvsm.cli import app
    from kvsm.tla.validate import validate

    toml = _builtin_with(tmp_path, "small", 'ack_append = "reference"\n')
    log = tmp_path / "w.jsonl"
    r = CliRunner().invoke(app, ["walk", "-c", str(toml), "--steps", "200", "-s", "3", "-o", str(log)])
    assert r.exit_code == 0, r.output
    assert '"name":"AckAppend"' in log.read_text()
    res = validate(log, workers=1)
    assert res.ok and res.matched == 200


def test_every_transition_names_its_parameters_for_the_trace_module():
    from kvsm.tla.trace import SPEC_PARAMS
    from kvsm.transitions import NAMES

    assert set(SPEC_PARAMS) == set(NAMES) and SPEC_PARAMS["AckAppend"] == ("rank",)


def test_a_rollback_between_the_appends_and_the_next_min_keeps_the_replicas_together(tmp_path):
    """A reference campaign (seed 115 of 2,000) diverged here: under the random schedule a
    backup was rolled back after every rank appended its acks but before the MIN that
    told the other replicas, so they learned an append of a write already dropped."""
    from typer.testing import CliRunner

    from kvsm.cli import app

    args = [
        "sim", "--workload", "multi-turn", "--config", "reference-default", "--seed", "115", "--tiers", "l1,l2,l3",
        "--requests", "5", "--l1-pages", "3", "--faults", "stall:0.2", "--schedule", "random",
        "--set", "prepared_backups=false", "--set", "commit_call=fixed", "--set", "reload_ttl=1", "--set", "spill_inflight=4",
        "--set", "reload_inflight=2", "--set", "spill_queue_cap=2", "--check", "-o", str(tmp_path / "s.jsonl"), "--json",
    ]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    log = (tmp_path / "s.jsonl").read_text()
    assert '"AckAppend"' in log and '"Rollback"' in log  # the run still takes both


# ---- `ack_append = "lockstep"`: the reading under which the reference's comment holds ----


def test_lockstep_appends_every_rank_s_ack_in_one_step_and_never_inside_an_open_round():
    s = run(serve(fresh(ack_append="lockstep", commit_call="reference"), 0, [1, 2]), T("Reserve", node=1, fits=True))
    assert "AckAppendAll" in names_for(s.config) and "AckAppend" not in names_for(s.config)
    with pytest.raises(Rejected, match="AckAppendAll"):
        apply(s, T("AckAppend", rank=0))
    # no ack appended yet: every rank's queue is empty, every rank returns early
    s = run(s, T("CommitCall", rank=0))
    assert s.commit_round == (Round.SKIPPED, Round.IDLE)
    with pytest.raises(Rejected, match="at the commit collective's call"):
        apply(s, T("AckAppendAll"))
    s = run(s, T("CommitCall", rank=1))
    assert s.commit_round == (Round.IDLE, Round.IDLE)
    s = run(s, T("AckAppendAll"))
    assert s.acked == (1, 1)
    with pytest.raises(Rejected, match="appended the acks of all 1"):
        apply(s, T("AckAppendAll"))
    # every queue holds the ack: every rank enters, and the calls pair up
    s = run(s, T("WriteDone", rank=0), T("CommitCall", rank=0), T("CommitCall", rank=1), T("Commit"))
    assert s.writes == (1,) and s.acked == (1, 1)
    s = run(s, T("WriteDone", rank=1), T("CommitCall", rank=1), T("CommitCall", rank=0), T("Commit"))
    assert s.writes == () and s.nodes[1].host == 1 and s.acked == (0, 0)
    with pytest.raises(Rejected, match="only under ack_append = lockstep"):
        apply(backed_up(), T("AckAppendAll"))


def test_lockstep_with_the_reference_entry_exhausts_the_ack_append_model_clean():
    """Finding 1's assumption: with acks appended at the same point of every rank's
    program the reference's early return is uniform, and invariant 12 holds."""
    cfg = replace(load_model(str(MC), properties=False).config, ack_append="lockstep", commit_call="reference")
    res = explore(cfg)
    assert not res.violations and len(res.states) == 94
    assert "AckAppendAll" in {name for _, name, _ in res.edges}
    assert all(len(set(s.acked)) == 1 for s in res.states.values())


@pytest.mark.tlc
def test_tlc_and_the_model_agree_on_the_ack_append_model_in_lockstep_with_the_reference_entry(tmp_path):
    import shutil

    from kvsm.tla.conform import conform

    for f in spec_dir().glob("KV*.tla"):
        shutil.copy(f, tmp_path / f.name)
    (tmp_path / "MC_lockstep.tla").write_text(MC.with_suffix(".tla").read_text().replace("MODULE MC_ack_append", "MODULE MC_lockstep"))
    text = MC.read_text().replace('AckTiming = "reference"', 'AckTiming = "lockstep"').replace('CommitEntry = "fixed"', 'CommitEntry = "reference"')
    (tmp_path / "MC_lockstep.cfg").write_text(text)
    res = conform(str(tmp_path / "MC_lockstep.cfg"))
    assert res.equal and res.tlc_states == res.model_states == 94, res.to_json()


def test_the_simulator_under_lockstep_appends_with_one_replicated_step_and_pairs_the_reference_calls(tmp_path):
    from typer.testing import CliRunner

    from kvsm.cli import app

    toml = _builtin_with(tmp_path, "default", 'ack_append = "lockstep"\ncommit_call = "reference"\n')
    log = tmp_path / "s.jsonl"
    for schedule in ("timed", "random"):
        r = CliRunner().invoke(app, ["sim", "-c", str(toml), "-n", "40", "-s", "1", "--schedule", schedule, "--check", "-o", str(log)])
        assert r.exit_code == 0, r.output
        text = log.read_text()
        assert '"name":"AckAppendAll"' in text and '"name":"AckAppend"' not in text and '"name":"Commit"' in text
        r = CliRunner().invoke(app, ["replay", str(log), "--check"])
        assert r.exit_code == 0 and "every invariant held" in r.output, r.output
