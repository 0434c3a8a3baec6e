"""The assumptions behind the findings (docs/findings.md): where a finding rests on code
the reference file does not contain, each plausible reading of that code is a value of
the finding's knob, and each reading gets a verdict.

- When a rank's final write ack enters its ack queue (`ack_append`): at a point of each
  rank's own (`"reference"`, `AckAppend(r)`) or at the same point of every rank's program
  (`"lockstep"`, `AckAppendAll`). Finding 1 needs the first.
- What `exists_prefix` consults in the spill maintainer's shortcut (`own_disk_durable`):
  the deciding rank's own disk (`"reference"`) or a shared index of every rank's disk
  (`"shared"`). Finding 2's divergence needs the first."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvsm.config import ConfigError, load_config
from kvsm.explore import explore
from kvsm.tla.location import model_paths, spec_dir
from kvsm.tla.models import config_of_model

from .helpers import T, fresh, run, serve

OWN_DISK = spec_dir() / "MC_own_disk_durable.cfg"


def test_the_readings_are_values_of_their_knobs_and_others_are_refused():
    base = load_config("small").to_json()
    assert load_config("small").ack_append == "fixed"
    from kvsm.config import Config

    assert Config.from_json({**base, "ack_append": "lockstep"}).ack_append == "lockstep"
    assert Config.from_json({**base, "own_disk_durable": "shared"}).own_disk_durable == "shared"
    with pytest.raises(ConfigError, match="'ack_append' must be one of fixed, reference, lockstep"):
        Config.from_json({**base, "ack_append": "shared"})
    with pytest.raises(ConfigError, match="'own_disk_durable' must be one of fixed, reference, shared"):
        Config.from_json({**base, "own_disk_durable": "lockstep"})
    with pytest.raises(ConfigError, match="'durable_split' must be one of fixed, reference,"):
        Config.from_json({**base, "durable_split": "shared"})


def _spilled_on_both(cfg_kw):
    """[1, 2] committed, spilled and acked on two ranks (rank 0 holds page 0's hash, rank
    1 page 1's), then evicted from L1 and L2 and cached again, committed and queued."""
    s = serve(fresh(L3=4, **cfg_kw), 0, [1, 2])
    s = run(s, T("Reserve", node=1, fits=True), T("WriteDone", rank=0), T("WriteDone", rank=1),
            T("CommitCall", rank=0), T("CommitCall", rank=1), T("Commit"), T("SpillSubmit"),
            T("SpillGathered", rank=0), T("SpillGathered", rank=1), T("SpillDone", rank=0, ok=True),
            T("SpillDone", rank=1, ok=True), T("SpillAck"))
    return s


def test_the_shared_index_counts_a_page_any_rank_s_disk_holds_and_the_own_disk_only_the_owner_s():
    from kvsm.transitions.spill import own_disk_holds, shared_index_holds

    s = _spilled_on_both({"own_disk_durable": "shared"})
    assert s.nodes[1].durable
    hashes = s.nodes[1].hashes
    assert shared_index_holds(s, hashes) and own_disk_holds(s, 0, hashes) and own_disk_holds(s, 1, hashes)
    # a page held by the rank that does not own it counts for the shared index, not for
    # the owner's own disk
    swapped = tuple(reversed(hashes))
    assert shared_index_holds(s, swapped) and not own_disk_holds(s, 0, swapped)
    assert not shared_index_holds(s, hashes + (12345,))


def test_the_own_disk_model_diverges_only_under_the_own_disk_reading():
    ref = config_of_model(*model_paths(str(OWN_DISK)))
    assert ref.own_disk_durable == "reference"
    bad = explore(ref).violations
    assert bad and all(v["violation"].startswith("13 Agreement: SpillSubmit") for v in bad)
    shared = explore(replace(ref, own_disk_durable="shared"))
    assert shared.violations == [] and len(shared.states) == 906


@pytest.mark.tlc
def test_tlc_and_the_model_agree_on_the_own_disk_model_under_the_shared_index(tmp_path):
    import shutil

    from kvsm.tla.conform import conform

    for f in spec_dir().glob("KV*.tla"):
        shutil.copy(f, tmp_path / f.name)
    (tmp_path / "MC_shared.tla").write_text(OWN_DISK.with_suffix(".tla").read_text().replace("MODULE MC_own_disk_durable", "MODULE MC_shared"))
    (tmp_path / "MC_shared.cfg").write_text(OWN_DISK.read_text().replace('OwnDiskDurable = "reference"', 'OwnDiskDurable = "shared"'))
    res = conform(str(tmp_path / "MC_shared.cfg"))
    assert res.equal and res.tlc_states == res.model_states == 906, res.to_json()


def _reference_order(cfg_kw, tail):
    """[1, 2] inserted and backed up in the insert's own step, as the reference's insert
    does (`_inc_hit_count` with threshold 1: the profile's `backup_trigger = "insert"`),
    committed; then `tail`. Returns the first violation."""
    from kvsm.invariants import violations_after
    from kvsm.state import initial_state
    from kvsm.transitions import apply

    s = initial_state(replace(load_config("reference"), **cfg_kw))
    steps = [T("Arrive", rid=0, tokens=[1, 2], out_pages=0), T("Match", rid=0), T("Insert", rid=0),
             T("AckAppend", rank=0), T("AckAppend", rank=1), T("WriteDone", rank=0), T("WriteDone", rank=1),
             T("CommitCall", rank=0), T("CommitCall", rank=1), T("Commit"), T("Finish", rid=0), *tail]
    for t in steps:
        s = apply(s, t)
        v = violations_after(t.rank, s)
        if v:
            return t.name, v
    return None


def test_findings_2_and_4_follow_from_the_reference_s_own_backup_order():
    """The same violations as findings 2 and 4's cases follow when the backup is the
    insert's own and the second request comes only after the commit."""
    split = [T("Arrive", rid=1, tokens=[1, 2], out_pages=0), T("Match", rid=1)]
    # finding 2: the match splits [1, 2] before its queued spill is submitted
    got = _reference_order({"commit_call": "fixed"}, [*split, T("SpillSubmit")])
    assert got is not None and got[0] == "SpillSubmit" and got[1][0].startswith("13 Agreement")
    assert _reference_order({"commit_call": "fixed", "own_disk_durable": "fixed"}, [*split, T("SpillSubmit")]) is None
    # finding 4: the match splits it while its spill is in flight
    fixed = {"commit_call": "fixed", "own_disk_durable": "fixed", "unbacked_evict": "fixed"}
    spill = [T("SpillGathered", rank=0), T("SpillGathered", rank=1), T("SpillDone", rank=0, ok=True), T("SpillDone", rank=1, ok=True), T("SpillAck")]
    got = _reference_order(fixed, [T("SpillSubmit"), *split, *spill])
    assert got is not None and got[0] == "SpillAck" and got[1][0].startswith("8 Durable")
    # with the knob fixed the same steps break nothing
    assert _reference_order({**fixed, "durable_split": "fixed"}, [T("SpillSubmit"), *split, *spill]) is None
