"""The stale-tail prune (`PruneStaleTail`, config `stale_prune`): what it deletes, what
its guard refuses under "reference" and "fixed", what the L3 steps do with what it
removed, the simulator's trigger, and TLC's verdicts on spec/MC_stale_prune*.cfg."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvsm.cli import app
from kvsm.config import Config, ConfigError
from kvsm.state import Rejected
from kvsm.transitions import apply, enabled, names_for
from kvsm.transitions.prune import stale_cut, tokens_in_common

from .helpers import T, backup, fresh, node_by_key, run, serve

ROOT = Path(__file__).resolve().parent.parent


def cached(knob: str, **kw):
    """[1, 2, 3] cached on L1 and backed, [1, 2, 3, 4] below it; request 2 = [1, 5]
    queued, whose match key [1] leaves node [1, 2, 3] after one page."""
    s = serve(fresh(stale_prune=knob, **kw), 0, [1, 2, 3])
    s = backup(s, node_by_key(s, (1, 2, 3)))
    s = serve(s, 1, [1, 2, 3, 4, 6])
    return run(s, T("Arrive", rid=2, tokens=[1, 5], out_pages=0))


def test_off_offers_no_prune_and_refuses_one():
    s = cached("off")
    assert "PruneStaleTail" not in names_for(s.config)
    assert not [t for t in enabled(s) if t.name == "PruneStaleTail"]
    with pytest.raises(Rejected, match="stale_prune is off"):
        apply(s, T("PruneStaleTail", node=node_by_key(s, (1, 2, 3)), at=1))


def test_off_is_left_out_of_a_config_s_json_and_a_bad_value_is_refused():
    assert "stale_prune" not in Config().to_json()
    assert Config(stale_prune="fixed").to_json()["stale_prune"] == "fixed"
    with pytest.raises(ConfigError, match="field 'stale_prune' must be one of off, reference, fixed"):
        Config.from_json({"stale_prune": "maybe"}, where="t.toml")


def test_the_prune_deletes_the_lower_part_and_its_subtree_with_their_pages_and_objects():
    s = cached("reference")
    nid, tail = node_by_key(s, (1, 2, 3)), node_by_key(s, (4, 6))
    freed_dev = set(s.nodes[nid].dev[1:]) | set(s.nodes[tail].dev)
    obj = s.objects[s.nodes[nid].host]
    after = run(s, T("PruneStaleTail", node=nid, at=1))
    assert nid not in after.nodes and tail not in after.nodes
    upper = node_by_key(after, (1,))
    assert not len(after.nodes[upper].children) and after.nodes[upper].host == upper
    assert after.objects[upper].length == 1 and s.nodes[nid].host not in after.objects
    assert all(p in after.dev_free[p % 2] and p not in after.dev_content for p in freed_dev)
    assert all(obj.base + i not in after.host_content for i in range(1, obj.length))
    # the request then matches the upper part and inserts its own page beside nothing
    after = run(after, T("Match", rid=2), T("Insert", rid=2))
    assert after.nodes[node_by_key(after, (5,))].parent == upper


@pytest.mark.parametrize("knob", ["reference", "fixed"])
def test_a_lock_or_a_pending_backup_in_the_subtree_refuses_the_prune(knob):
    s = cached(knob)
    nid = node_by_key(s, (1, 2, 3))
    locked = run(s, T("Arrive", rid=3, tokens=[1, 2, 3, 4, 6, 7], out_pages=0), T("Match", rid=3))
    with pytest.raises(Rejected, match="is locked"):
        apply(locked, T("PruneStaleTail", node=nid, at=1))
    pending = run(s, T("Reserve", node=node_by_key(s, (4, 6)), fits=True))
    with pytest.raises(Rejected, match="pending backup"):
        apply(pending, T("PruneStaleTail", node=nid, at=1))


def test_a_queued_spill_entry_is_pruned_under_reference_and_spares_the_subtree_under_fixed():
    ref = cached("reference", L3=16)
    nid = node_by_key(ref, (1, 2, 3))
    assert nid in ref.spill_queue
    pruned = run(ref, T("PruneStaleTail", node=nid, at=1))
    assert nid in pruned.spill_queue  # the entry outlives its node ...
    upper = node_by_key(pruned, (1,))
    after = run(pruned, T("SpillSubmit"))  # ... and the spill drops it
    assert nid not in after.spill_queue and all(op.node != nid for op in after.spills)
    assert after.spills == () or after.spills[0].node == upper or after.spills[0].node not in (nid,)
    fixed = cached("fixed", L3=16)
    with pytest.raises(Rejected, match="a spill of the subtree is queued or in flight"):
        apply(fixed, T("PruneStaleTail", node=node_by_key(fixed, (1, 2, 3)), at=1))


def test_a_spill_s_pin_refuses_the_prune():
    s = cached("reference", L3=16)
    s = run(s, T("SpillSubmit"))
    assert s.nodes[node_by_key(s, (1, 2, 3))].pin == 1
    with pytest.raises(Rejected, match="pinned by a spill"):
        apply(s, T("PruneStaleTail", node=node_by_key(s, (1, 2, 3)), at=1))


def test_the_simulator_prunes_a_cut_only_where_the_pages_share_leading_tokens():
    assert all(tokens_in_common(1, a, b) == 0 for a in range(5) for b in range(5))
    s = cached("reference", P=16)
    nid = node_by_key(s, (1, 2, 3))
    want = (nid, 1) if tokens_in_common(16, 2, 5) else None
    assert stale_cut(s, 2) == want
    whole = run(serve(fresh(stale_prune="reference", P=16), 0, [7, 8]), T("Arrive", rid=1, tokens=[7, 8, 9], out_pages=0))
    assert stale_cut(whole, 1) is None  # its match key covers the node whole: no cut


# ---- TLC: the reference's prune on small models --------------------------------------------------


@pytest.fixture(scope="module")
def small_conform():
    from kvsm.tla.conform import conform

    return conform(str(ROOT / "spec/MC_stale_prune.cfg"))


@pytest.mark.tlc
def test_conform_is_equal_on_the_stale_prune_model(small_conform):
    assert small_conform.equal, small_conform.to_json()["examples"]
    assert small_conform.tlc_states == small_conform.model_states > 1000
    assert small_conform.tlc_edges == small_conform.model_edges


@pytest.mark.tlc
def test_the_reference_prune_keeps_every_invariant_on_the_l1_l2_model(small_conform):
    """The verdict on spec/MC_stale_prune.cfg: with the graph TLC's (conform), the
    model's exhaustive check of it finds no violation, and the prune is taken."""
    from kvsm.explore import explore
    from kvsm.tla.location import model_paths
    from kvsm.tla.models import config_of_model

    module, cfg = model_paths(str(ROOT / "spec/MC_stale_prune.cfg"))
    summary = explore(config_of_model(module, cfg), check=True).summary()
    assert summary["violations"] == []
    assert summary["edges_by_transition"].get("PruneStaleTail", 0) > 0


# the L3 models (one rank, 258,443 states each, minutes of TLC): the reference's prune and
# the fixed one are both clean
L3_MODELS = {"reference": "spec/MC_stale_prune_l3.cfg", "fixed": "spec/MC_stale_prune_fixed.cfg"}


@pytest.mark.tlc
@pytest.mark.exhaustive
@pytest.mark.parametrize("knob", list(L3_MODELS))
def test_tlc_finds_no_violation_on_the_l3_stale_prune_model(tmp_path, knob):
    res = CliRunner().invoke(app, ["check", "--config", str(ROOT / L3_MODELS[knob]), "--json", "--log", str(tmp_path / "v.jsonl")])
    out = json.loads(res.stdout)
    assert res.exit_code == 0 and out["violation"] is None, res.output
    assert out["distinct_states"] > 100000


@pytest.mark.parametrize("knob", ["reference", "fixed"])
def test_the_simulator_prunes_under_the_knob_and_its_check_holds(tmp_path, knob):
    """`kvsm sim --check` with the knob on: the thrash workload's shared heads are cut
    inside pages, the simulator prunes them, and every invariant holds after every step."""
    from kvsm.sim import SimOptions, simulate

    cfg = tmp_path / f"{knob}.toml"
    cfg.write_text(f'stale_prune = "{knob}"\n' + (ROOT / "tests" / "data" / "sim_l3.toml").read_text())
    taken = []
    simulate(SimOptions(config=str(cfg), ranks=2, l1_pages=64, l2_pages=160, check=True, workload="thrash",
                        tiers="l1,l2,l3", requests=80, seed=5),
             on_transition=lambda t, s: taken.append(t.name))
    assert taken.count("PruneStaleTail") > 0 and "SpillSubmit" in taken


def test_walk_with_the_knob_checks_prunes_and_show_renders_one(tmp_path):
    """`kvsm walk -c <config with stale_prune> --check` takes the prune and every
    invariant holds; `kvsm show` renders the step with what it deleted."""
    cfg = tmp_path / "prune.toml"
    cfg.write_text('stale_prune = "reference"\n' + (ROOT / "kvsm" / "configs" / "l3.toml").read_text())
    log = tmp_path / "w.jsonl"
    res = CliRunner().invoke(app, ["walk", "-c", str(cfg), "--steps", "320", "-s", "2", "--check", "-o", str(log)])
    assert res.exit_code == 0, res.output
    steps = [json.loads(line) for line in log.read_text().splitlines()[1:]]
    at = next(i for i, st in enumerate(steps, start=1) if st.get("name") == "PruneStaleTail")  # steps count from 1
    shown = CliRunner().invoke(app, ["show", str(log), "--at", str(at), "--diff"])
    assert shown.exit_code == 0, shown.output
    assert f"step {at}  PruneStaleTail node=" in shown.output and "tree" in shown.output


def _reload_anchored_in_a_cut_node(knob):
    """[1, 2, 3] cached and [4] below it spilled and dropped; request 2 = [1, 2, 3, 4, 9]
    holds a reload of [4] anchored at [1, 2, 3]; request 3 = [1, 7] cuts [1, 2, 3]."""
    s = serve(fresh(stale_prune=knob, L3=16), 0, [1, 2, 3])
    s = serve(s, 1, [1, 2, 3, 4, 8])
    tail = node_by_key(s, (4, 8))
    s = backup(s, tail)
    s = run(s, T("SpillSubmit"), *(T("SpillGathered", rank=r) for r in range(2)),
            *(T("SpillDone", rank=r, ok=True) for r in range(2)), T("SpillAck"))
    s = run(s, T("EvictDevice", node=tail), T("EvictHost", node=tail))
    s = run(s, T("Arrive", rid=2, tokens=[1, 2, 3, 4, 8, 9], out_pages=0), T("ReloadMark", rid=2), T("ReloadReserve", rid=2))
    anchor = node_by_key(s, (1, 2, 3))
    assert s.reloads and s.reloads[0].anchor == anchor
    return run(s, T("Arrive", rid=3, tokens=[1, 7], out_pages=0)), anchor


def test_the_reference_prune_removes_a_reload_s_anchor_and_the_admit_frees_its_object():
    s, anchor = _reload_anchored_in_a_cut_node("reference")
    obj = s.reloads[0].obj
    s = run(s, T("PruneStaleTail", node=anchor, at=1))
    assert anchor not in s.nodes and s.reloads[0].anchor == anchor
    s = run(s, *(T("ReloadDone", rank=r, ok=True) for r in range(2)), T("ReloadAdmit"))
    assert s.reloads == () and obj not in s.objects and all(n.key != (4, 8) for n in s.nodes.values())
    fixed, anchor = _reload_anchored_in_a_cut_node("fixed")
    with pytest.raises(Rejected, match="a reload is anchored in the subtree"):
        apply(fixed, T("PruneStaleTail", node=anchor, at=1))
