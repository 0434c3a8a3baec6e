"""The findings of docs/findings.md: reference behaviours that break an invariant, each
behind a fidelity knob (`reference` vs `fixed`). Each is a case in traces/ (a `knob`
line: its steps break the invariant with the knob at the reference's value and nothing
with it fixed), TLC's shortest counterexample on the reference model
(spec/MC_reference.cfg) with the knobs of the findings before it fixed; and the
reference model with every knob fixed is clean."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvsm.cli import app
from kvsm.config import REFERENCE_KNOBS, load_config
from kvsm.corpus.format import CaseError, parse_case, read_case
from kvsm.corpus.run import verify_case
from kvsm.explore import explore
from kvsm.replay import replay
from kvsm.tla.location import spec_dir

ROOT = Path(__file__).resolve().parent.parent
# finding: (its case, the knob, the invariant, the knobs fixed before TLC reaches it on the
# reference model: TLC stops at the first violation, so each finding is found with the
# earlier ones fixed)
FINDINGS = {
    "commit_early_return": ("finding-commit-early-return", "commit_call", "12 Collectives", ()),
    "own_disk_durable": ("finding-own-disk-durable", "own_disk_durable", "13 Agreement", ("commit_call",)),
    "durable_split": ("finding-durable-split", "durable_split", "8 Durable", ("commit_call", "own_disk_durable")),
}
# the knobs of no finding: with every finding's knob fixed and these at the reference's
# value, TLC finds MC_reference clean (docs/findings.md, "The runs")
NO_FINDING = ("ack_append", "stale_prune")
# the knobs of a finding that breaks no invariant, a waste that recovers (finding 3: the
# orphans stay host victims; its case shows the waste and the recovery)
WASTES = ("unbacked_evict",)
# the knobs of a finding that needs what MC_reference lacks: finding 7 needs two
# namespaces sharing tokens (MC_tenants_tokens, tests/test_tenants.py); MC_reference
# has one, where the two L3 keys are the same
ELSEWHERE = ("l3_key",)
# a fix that holds its invariant only with another finding's knob fixed too: the own-disk
# shortcut (finding 2) also marks durable on rank 0 a node whose page rank 1 owns and
# does not hold, which breaks 8 Durable as finding 4 does (docs/findings.md)
ALSO_FIXED = {"durable_split": ("own_disk_durable",)}


@pytest.mark.parametrize("name", list(FINDINGS))
def test_the_finding_s_case_breaks_its_invariant_with_the_reference_value_and_nothing_when_fixed(name):
    case_name, knob, invariant, fixed_before = FINDINGS[name]
    case = read_case(str(ROOT / "traces" / f"{case_name}.txt"))
    assert case.knob == knob and case.config_base == "reference"
    assert all(getattr(case.config, k) == REFERENCE_KNOBS[k][1] for k in fixed_before)
    assert case.violations and all(v.startswith(invariant) for v in case.violations)
    fails, _ = verify_case(case)
    assert fails == [], [f.why for f in fails]


def test_a_knob_line_needs_the_config_at_the_reference_value():
    text = (ROOT / "traces" / "finding-commit-early-return.txt").read_text()
    bad = text.replace("config reference\n", 'config reference\n  commit_call = "fixed"\n', 1)
    with pytest.raises(CaseError, match="knob commit_call: the config must set it to the reference's value 'reference'"):
        parse_case(bad, "x.txt")
    with pytest.raises(CaseError, match="'nonsense' is not a fidelity knob"):
        parse_case(text.replace("knob commit_call", "knob nonsense"), "x.txt")


def test_the_reference_profile_sets_every_knob_at_the_reference_s_value():
    for name in ("reference", "reference-default"):
        cfg = load_config(name)
        assert all(getattr(cfg, k) == ref for k, (ref, _) in REFERENCE_KNOBS.items()), name
        assert cfg.prepared_backups and cfg.L3 > 0, name
    assert load_config("reference").max_disk_faults == -1


def _reference_variant(d: Path, name: str, fixed: tuple[str, ...], invariants: list[str] | None = None) -> Path:
    """spec/MC_reference with the knobs `fixed` at their fixed value (and only
    `invariants` checked, when given)."""
    from kvsm.tla.models import CONSTANT_FIELDS

    for f in spec_dir().glob("KV*.tla"):
        shutil.copy(f, d / f.name)
    (d / f"{name}.tla").write_text((spec_dir() / "MC_reference.tla").read_text().replace("MODULE MC_reference", f"MODULE {name}"))
    text = (spec_dir() / "MC_reference.cfg").read_text()
    spec_name = dict(CONSTANT_FIELDS)
    for k in fixed:
        text, n = re.subn(rf"^(    {spec_name[k]}) = .*$", rf'\1 = "{REFERENCE_KNOBS[k][1]}"', text, flags=re.M)
        assert n == 1, k
    if invariants is not None:
        text = text.split("INVARIANTS")[0] + "INVARIANTS\n" + "".join(f"    {i}\n" for i in [*invariants, "MC_NodeIdsCovered"])
    (d / f"{name}.cfg").write_text(text)
    return d / f"{name}.cfg"


@pytest.mark.tlc
@pytest.mark.parametrize("name", ["own_disk_durable"])
def test_tlc_finds_the_finding_on_the_reference_model_with_the_earlier_ones_fixed(tmp_path, name):
    _, _, invariant, fixed_before = FINDINGS[name]
    cfg = _reference_variant(tmp_path, "MC_peel", fixed_before)
    res = CliRunner().invoke(app, ["check", "--config", str(cfg), "--json", "--log", str(tmp_path / "v.jsonl")])
    assert res.exit_code == 1, res.output
    out = json.loads(res.stdout.splitlines()[0])
    assert out["violation"]["property"] == invariant.split()[1]
    assert replay(tmp_path / "v.jsonl", check=True).violations


@pytest.mark.exhaustive
@pytest.mark.parametrize("name", list(FINDINGS))
def test_tlc_finds_every_finding_on_the_reference_model_with_the_earlier_ones_fixed(tmp_path, name):
    test_tlc_finds_the_finding_on_the_reference_model_with_the_earlier_ones_fixed(tmp_path, name)


def test_every_knob_is_a_finding_s_or_one_of_no_finding():
    found = {knob for _, knob, _, _ in FINDINGS.values()}
    groups = [found, set(NO_FINDING), set(WASTES), set(ELSEWHERE)]
    assert sum(map(len, groups)) == len(set().union(*groups))  # no knob in two groups
    assert set().union(*groups) == set(REFERENCE_KNOBS)


@pytest.mark.exhaustive
def test_tlc_the_reference_model_with_every_finding_fixed_is_clean_with_the_other_knobs_at_the_reference(tmp_path):
    from kvsm.tla.check import check

    cfg = _reference_variant(tmp_path, "MC_found", tuple(knob for _, knob, _, _ in FINDINGS.values()))
    res = check(str(cfg), log_path=tmp_path / "t.jsonl")
    assert res.tlc.violation is None and res.tlc.distinct_states > 200_000


@pytest.mark.exhaustive
def test_tlc_the_reference_model_with_every_knob_fixed_is_clean(tmp_path):
    from kvsm.tla.check import check

    cfg = _reference_variant(tmp_path, "MC_fixed", tuple(REFERENCE_KNOBS))
    res = check(str(cfg), log_path=tmp_path / "t.jsonl")
    assert res.tlc.violation is None and res.tlc.distinct_states > 100_000


@pytest.mark.exhaustive
@pytest.mark.parametrize("name", list(FINDINGS))
def test_tlc_the_fixed_knob_holds_its_invariant_with_every_other_knob_at_the_reference(tmp_path, name):
    from kvsm.tla.check import check

    _, knob, invariant, _ = FINDINGS[name]
    cfg = _reference_variant(tmp_path, "MC_fix", (knob, *ALSO_FIXED.get(name, ())), ["TypeOK", invariant.split()[1]])
    res = check(str(cfg), log_path=tmp_path / "t.jsonl")
    assert res.tlc.violation is None


@pytest.mark.exhaustive
def test_tlc_the_reference_model_is_clean_with_every_finding_fixed_but_the_wastes(tmp_path):
    """Finding 3 (`unbacked_evict`), ack_append and stale_prune at the reference's value,
    every correctness finding's knob fixed: clean (204,170 states, docs/findings.md)."""
    from kvsm.tla.check import check

    cfg = _reference_variant(tmp_path, "MC_wastes", tuple(knob for _, knob, _, _ in FINDINGS.values()))
    res = check(str(cfg), log_path=tmp_path / "t.jsonl")
    assert res.tlc.violation is None and res.tlc.distinct_states > 200_000


def test_the_orphan_model_is_clean_under_both_readings_and_the_reference_frees_its_orphans():
    """Finding 3 as the reference pays it (docs/findings.md): no invariant breaks; under
    the reference's rule the graph has husks whose orphans are host victims, and states
    where host evictions freed them all again."""
    from kvsm.state import GONE
    from kvsm.tla.location import model_paths
    from kvsm.tla.models import config_of_model

    ref = config_of_model(*model_paths(str(spec_dir() / "MC_orphan_eviction.cfg")))
    assert ref.unbacked_evict == "reference"
    res = explore(ref)
    assert res.violations == []
    husked = [s for s in res.states.values() if any(n.parent == GONE for n in s.nodes.values())]
    assert husked
    assert any(s.host_index and any(s.nodes[k[2]].parent != 0 for k in s.host_index) for s in husked)
    # a husk goes with its last orphan: every state's husks have orphans (invariant 1)
    assert all(len(n.children) for s in husked for n in s.nodes.values() if n.parent == GONE)
    fixed = explore(replace(ref, unbacked_evict="fixed"))
    assert fixed.violations == [] and not any(n.parent == GONE for s in fixed.states.values() for n in s.nodes.values())


def test_the_orphan_case_shows_the_waste_and_the_recovery():
    case = read_case(str(ROOT / "traces" / "finding-orphan-eviction.txt"))
    assert case.config.unbacked_evict == "reference" and not case.violations
    fails, _ = verify_case(case)
    assert fails == [], [f.why for f in fails]


OWN_DISK_MODEL = "spec/MC_own_disk_durable.cfg"


def test_the_own_disk_model_is_clean_with_the_fixed_rule_and_not_with_the_reference():
    from kvsm.tla.location import model_paths
    from kvsm.tla.models import config_of_model

    module, cfg = model_paths(str(ROOT / OWN_DISK_MODEL))
    ref = config_of_model(module, cfg)
    assert ref.own_disk_durable == "reference" and ref.max_disk_faults > 0  # every counter bounded
    bad = explore(ref).violations
    assert bad and all(v["violation"].startswith("13 Agreement: SpillSubmit") for v in bad)
    assert explore(replace(ref, own_disk_durable="fixed")).violations == []


@pytest.mark.tlc
def test_tlc_and_the_model_agree_on_the_own_disk_model():
    from kvsm.tla.conform import conform

    res = conform(str(ROOT / OWN_DISK_MODEL))
    assert res.equal and res.tlc_states == res.model_states == 910, res.to_json()


# the simulator's --check sees each finding too, on a workload that reaches it (its
# config: tests/data/sim_l3.toml with the knob at "reference")
SIM_CASES = {
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


def test_the_simulator_orphans_under_the_reference_rule_every_invariant_holding_and_frees_them(tmp_path):
    """Finding 3 in a checked simulation (the workload that reached it when the model
    deleted the orphans): husks appear, every invariant holds, and host evictions free
    orphans again."""
    from kvsm.sim import SimOptions, simulate
    from kvsm.state import GONE

    base = (ROOT / "tests" / "data" / "sim_l3.toml").read_text()
    cfg = tmp_path / "orphans.toml"
    cfg.write_text('unbacked_evict = "reference"\n' + base)
    husks: set[int] = set()
    seen = {"orphaned": 0, "freed": 0}

    def watch(t, s):
        now = {nid for nid, n in s.nodes.items() if n.parent == GONE}
        seen["orphaned"] += len(now - husks)
        seen["freed"] += len(husks - now)
        husks.clear()
        husks.update(now)

    opts = SimOptions(config=str(cfg), ranks=2, l1_pages=64, l2_pages=160, check=True, workload="multi-turn", tiers="l1,l2", requests=300, seed=1)
    simulate(opts, on_transition=watch)  # raises on any violation
    assert seen["orphaned"] > 0 and seen["freed"] > 0


@pytest.mark.tlc
def test_conform_is_equal_on_the_orphan_model():
    """The husks and orphans of `unbacked_evict = "reference"`: the spec and the model have
    the same state graph (2,349 states)."""
    from kvsm.tla.conform import conform

    res = conform(str(spec_dir() / "MC_orphan_eviction.cfg"))
    assert res.equal, res.to_json()["examples"]
