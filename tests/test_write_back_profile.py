"""The `reference-write-back` profile: the reference under its write_back policy, with a
load-back's write-back eviction in the reference's own order (`write_back_evict =
"deferred"`), and invariant 14 Running, which says the reference never reaches a `raise`
or an `assert` (docs/findings.md, path a: the re-check that raises "plan diverged before
reservation")."""

from __future__ import annotations

from dataclasses import asdict, replace

import pytest

from kvsm.config import CASE_KNOBS, REFERENCE_KNOBS, WRITE_BACK_KNOBS, ConfigError, load_config
from kvsm.corpus.format import read_case
from kvsm.invariants import violations_after
from kvsm.tla.location import model_paths, spec_dir
from kvsm.tla.models import config_of_model
from kvsm.transitions import apply

from .helpers import T, fresh, run, serve, write_back_profile_model

FINDINGS_FIXED = {k: REFERENCE_KNOBS[k][1] for k in ("commit_call", "own_disk_durable", "unbacked_evict", "durable_split")}


def test_the_profile_sets_every_knob_at_the_reference_s_value_and_its_model_has_its_constants():
    for name in ("reference-write-back", "reference-write-back-default"):
        cfg = load_config(name)
        assert cfg.policy == "write_back" and not cfg.prepared_backups, name
        assert all(getattr(cfg, k) == ref for k, (ref, _) in CASE_KNOBS.items()), name
    assert load_config("reference-write-back-default").L3 > 0
    model = config_of_model(*model_paths("reference-write-back"))
    assert {k: v for k, v in asdict(model).items() if k != "name"} == {
        k: v for k, v in asdict(load_config("reference-write-back")).items() if k != "name"
    }
    # the write-through profile leaves the write-back knob at its default
    assert load_config("reference").write_back_evict == "locked" and set(WRITE_BACK_KNOBS).isdisjoint(REFERENCE_KNOBS)
    with pytest.raises(ConfigError, match="'write_back_evict' must be one of locked, sync, deferred, deferred_fixed"):
        replace(load_config("small")).from_json({**load_config("small").to_json(), "write_back_evict": "later"})


def _two_unbacked_on_l1(value: str):
    """Under write_back: [1] written back and off L1, [3] above [4] unbacked on L1 (one
    page a lane), and a request for [1, 2] matched, its host hit [1] to load back."""
    s = fresh(R=2, L1=1, L2=4, policy="write_back", write_back_evict=value)
    s = serve(s, 0, [1])
    s = run(s, T("Reserve", node=1, fits=True), T("WriteDone", rank=0), T("WriteDone", rank=1),
            T("CommitCall", rank=0), T("CommitCall", rank=1), T("Commit"), T("EvictDevice", node=1))
    s = serve(s, 1, [3, 4])
    # a request for [3, 4] matches [3] (a match key leaves the last page out), which
    # splits the node; it aborts
    s = run(s, T("Arrive", rid=2, tokens=[3, 4], out_pages=0), T("Match", rid=2), T("Abort", rid=2))
    s = run(s, T("Arrive", rid=3, tokens=[1, 2], out_pages=0), T("Match", rid=3))
    return s


def test_the_deferred_write_back_makes_the_re_check_of_the_parent_raise():
    s = _two_unbacked_on_l1("deferred")
    upper = next(n for n, x in s.nodes.items() if x.key == (3,))
    lower = next(n for n, x in s.nodes.items() if x.key == (4,))
    assert s.nodes[upper].host is None and s.nodes[lower].host is None and s.nodes[lower].dev
    after = apply(s, T("LoadBack", rid=3))
    assert after.halted == "LoadBack" and after.effects == ()
    # nothing else moved: the reference dies at the raise
    assert replace(after, halted=None) == s
    v = violations_after(None, after)
    assert len(v) == 1 and v[0].startswith("14 Running: LoadBack: ") and "plan diverged before reservation" in v[0]


@pytest.mark.parametrize("value", ["deferred_fixed", "sync"])
def test_with_the_re_check_fixed_or_each_victim_evicted_at_once_the_load_back_goes_through(value):
    s = _two_unbacked_on_l1(value)
    after = apply(s, T("LoadBack", rid=3))
    assert after.halted is None and not violations_after(None, after)
    # both victims were written back, then evicted: L2-only, the load's pages on L1
    for key in ((3,), (4,)):
        n = next(x for x in after.nodes.values() if x.key == key)
        assert n.host is not None and not n.dev, key
    assert after.loads


def test_the_write_back_finding_s_case_is_a_knob_case_of_the_profile():
    case = read_case(str(spec_dir().parent / "traces" / "finding-write-back-recheck.txt"))
    assert case.knob == "write_back_evict" and case.config_base == "reference-write-back"
    assert all(getattr(case.config, k) == v for k, v in FINDINGS_FIXED.items())
    assert case.violations and case.violations[0].startswith("14 Running")


def test_the_simulator_s_check_catches_the_raise_at_realistic_sizes_and_not_with_the_fix(tmp_path):
    from kvsm.sim import SimOptions, simulate
    from kvsm.sim.stops import SimInvariantError

    base = dict(config="reference-write-back-default", workload="multi-turn", seed=1, requests=300, tiers="l1,l2",
                l1_pages=32, l2_pages=256, check=True)
    sets = tuple(FINDINGS_FIXED.items())
    with pytest.raises(SimInvariantError, match="14 Running: LoadBack"):
        simulate(SimOptions(**base, settings=sets))
    simulate(SimOptions(**base, settings=sets + (("write_back_evict", "deferred_fixed"),)))


@pytest.mark.exhaustive
def test_tlc_finds_finding_1_then_finding_5_on_the_write_back_profile(tmp_path):
    from kvsm.tla.check import check

    res = check("reference-write-back", log_path=tmp_path / "a.jsonl")
    assert res.tlc.violation is not None and res.tlc.violation.property == "Collectives"
    cfg = write_back_profile_model(tmp_path, "MC_wb_commit_fixed", {"CommitEntry": '"fixed"'})
    res = check(str(cfg), log_path=tmp_path / "b.jsonl")
    assert res.tlc.violation is not None and res.tlc.violation.property == "Running"


def test_invariant_14_s_three_forms_agree_on_the_halting_step():
    """The whole-state rule, the rule over what the step wrote and the fast form all
    refuse the state the re-check's raise leaves, and none refuses the state before."""
    from kvsm.invariants import Cache, Shadow, holds, local_violations, violations
    from kvsm.writes import written_between

    s = _two_unbacked_on_l1("deferred")
    after = apply(s, T("LoadBack", rid=3))
    w = written_between(s.written, after.written)
    assert w is not None
    local = local_violations(s, after, w, Shadow(s), Cache().chain)
    assert [v.split(":")[0] for v in local] == [v.split(":")[0] for v in violations(after)] == ["14 Running"]
    assert holds(s) and not holds(after)
