"""Swarm campaigns: each run draws its features from its number and a failing run
reproduces from the `kvsm sim` command it prints; coverage against the kinds and
ordered pairs of kinds of the spec's state graph of `small` (kept in
kvsm/campaign/small_graph.json)."""

from __future__ import annotations

import json
import random
import re

import pytest
from typer.testing import CliRunner

from kvsm.campaign.coverage import Coverage, against_graph, empty, merge
from kvsm.campaign.run import Budget, execute
from kvsm.campaign.spec import (KNOB_FIELDS, SWARM, WALK_LIFT, WALK_REQUESTS, WALK_WIDE_PAGES, WORKLOADS, command, derive, make_space,
                                walk_models)
from kvsm.campaign.spec_graph import compute, dumps, load
from kvsm.campaign.summary import summarize
from kvsm.cli import app
from kvsm.config import load_config
from kvsm.state import initial_state
from kvsm.transitions import Transition, apply, names_for, successors

T = Transition.make


def test_the_kept_graph_lists_small_s_kinds_and_only_pairs_a_walk_of_small_can_take():
    g = load()
    assert g["config"] == "small" and set(g["kinds"]) == set(names_for(load_config("small")))
    pairs = set(g["pairs"])
    assert all(a in g["kinds"] and b in g["kinds"] for a, b in (p.split(">") for p in pairs))
    # every walk of small is a path of its graph: each step after another is a kept pair,
    # and the walks together take many of them
    cfg = load_config("small")
    rng = random.Random(7)
    seen = set()
    for _ in range(40):
        s, last = initial_state(cfg), None
        for _ in range(40):
            nxt = list(successors(s))
            if not nxt:
                break
            t, s = rng.choice(nxt)
            if last is not None:
                assert f"{last}>{t.name}" in pairs, f"{last}>{t.name} taken on small but not in small_graph.json"
                seen.add(f"{last}>{t.name}")
            last = t.name
    assert len(seen) > len(pairs) // 3


@pytest.mark.exhaustive
def test_the_kept_graph_is_what_exploring_small_gives():
    # python3 -m kvsm.campaign.spec_graph rewrites it (about a minute and a half)
    from importlib import resources

    assert resources.files("kvsm.campaign").joinpath("small_graph.json").read_text() == dumps(compute())


def test_coverage_counts_pairs_and_the_summary_lists_what_the_graph_has_and_runs_missed():
    cov = Coverage(probe_every=1 << 30)
    s = initial_state(load_config("small"))
    for name in ("Arrive", "Match", "Insert", "Finish", "Arrive"):
        cov.after(T(name), s, s)
    run = cov.to_json({}, {})
    assert run["pairs"] == {"Arrive>Match": 1, "Match>Insert": 1, "Insert>Finish": 1, "Finish>Arrive": 1}
    total = empty()
    merge(total, run)
    merge(total, run)
    assert total["pairs"]["Arrive>Match"] == 2
    graph = {"config": "small", "kinds": ["Arrive", "Match", "Split"], "pairs": ["Arrive>Match", "Match>Split", "Split>Arrive"]}
    g = against_graph(total, graph)
    assert g["kinds"] == {"reached": 2, "of": 3, "missing": ["Split"]}
    assert g["pairs"]["reached"] == 1 and g["pairs"]["missing"] == ["Match>Split", "Split>Arrive"]
    assert g["pairs"]["percent"] == 33.3 and g["pairs"]["beyond"] == 3
    # every campaign summary carries the comparison with the kept graph
    summ = summarize([{"seed": 0, "status": "ok", "transitions": 5, "coverage": run}], 1, 1.0)
    kept = load()
    assert summ["coverage"]["graph"]["pairs"]["of"] == len(kept["pairs"])
    assert "Arrive>Match" not in summ["coverage"]["graph"]["pairs"]["missing"]


def test_swarm_runs_draw_their_features_from_their_number():
    space = make_space()
    assert space.faults == (SWARM,) and space.schedule == "swarm"
    specs = [derive(space, s) for s in range(80)]
    assert {sp.schedule for sp in specs} == {"random", "walk"}
    assert specs[5] == derive(make_space(), 5)
    keys = {k for sp in specs for k, _ in sp.settings}
    assert {"prepared_backups", "commit_call", "policy", "write_threshold", "load_back_threshold", "spill_inflight",
            "carry_host_hit", "write_back_evict"} <= keys
    assert {dict(sp.settings).get("prepared_backups", False) for sp in specs} == {True, False}
    assert len({sp.faults for sp in specs}) > 20  # kinds on and off, rates drawn
    assert all("disk" not in sp.faults for sp in specs if sp.tiers != "l1,l2,l3")
    assert {sp.eviction for sp in specs} == {None, "lru", "slru"}
    assert {sp.workload for sp in specs if sp.schedule == "random"} == set(WORKLOADS)
    assert 0.25 in {sp.prompts[0] for sp in specs if sp.prompts}  # tiny pools
    # the fidelity knobs' reference values only when asked for
    assert not any(v == "reference" for sp in specs for _, v in sp.settings)
    ref = [derive(make_space(knobs="reference"), s) for s in range(40)]
    assert any(v == "reference" for sp in ref for _, v in sp.settings)
    # the spec records them, and its command sets them
    for sp in (next(sp for sp in specs if sp.schedule == k) for k in ("random", "walk")):
        d = sp.to_json()
        assert d["schedule"] == sp.schedule and isinstance(d["settings"], dict)
        assert type(sp).from_json(json.loads(json.dumps(d))) == sp
    cmd = command(next(sp for sp in specs if sp.settings and sp.schedule == "random"))
    assert "--schedule random" in cmd and "--set " in cmd


def test_a_swarm_failure_reproduces_from_the_command_its_number_gives():
    space = make_space(["small", "default"], bug="double_free", requests=(8, 24))
    for seed in range(40):
        spec = derive(space, seed)
        out = execute(spec, Budget(seconds=60), collect=False, replay_log=False)
        if out.failure is not None:
            break
    else:
        pytest.fail("no run of 40 caught double_free")
    assert out.failure.detector == "invariant"
    args = command(spec).split()[1:]
    res = CliRunner().invoke(app, args)
    assert res.exit_code != 0
    assert out.failure.what in res.output and re.search(rf"\b{out.failure.at}\b", res.output), res.output[-800:]


def test_campaign_rejects_a_bad_schedule_or_knobs_mode():
    res = CliRunner().invoke(app, ["campaign", "--runs", "1", "--schedule", "randomly"])
    assert res.exit_code == 2 and "--schedule" in res.output
    res = CliRunner().invoke(app, ["campaign", "--runs", "1", "--knobs", "all"])
    assert res.exit_code == 2 and "--knobs 'all'" in res.output


def test_swarm_runs_keep_the_knobs_a_config_sets_away_from_their_default():
    # the reference profile sets every knob at the reference's value (and prepared
    # backups on): no run of a campaign on it draws another value over one, in either
    # knobs mode, while its other settings are still drawn
    for knobs in ("fixed", "reference"):
        space = make_space(["reference"], knobs=knobs)
        specs = [derive(space, s) for s in range(60)]
        drawn = {k for sp in specs for k, _ in sp.settings}
        assert drawn and not drawn & set(KNOB_FIELDS), drawn
        assert {"write_threshold", "load_back_threshold"} <= drawn
    # a config at the defaults has its knobs drawn
    specs = [derive(make_space(["small"], knobs="reference"), s) for s in range(60)]
    assert {dict(sp.settings).get("commit_call") for sp in specs} >= {"atomic", "reference"}
    assert {dict(sp.settings).get("prepared_backups") for sp in specs} >= {True}


def test_half_of_swarm_runs_walk_a_tlc_model_of_the_campaign_and_the_rest_keep_their_draws():
    space = make_space()
    fixed = make_space(schedule="random")
    assert walk_models(space) == ("small", "l3")  # `default` is no model TLC checks
    specs = [derive(space, s) for s in range(400)]
    walks = [sp for sp in specs if sp.schedule == "walk"]
    assert 160 <= len(walks) <= 240  # WALK_SHARE = 1/2
    for sp in specs:
        if sp.schedule == "random":  # a run that does not walk is the run its number gave before
            assert sp == derive(fixed, sp.seed)
            continue
        # the walk's other features are those its number draws for the model it walks
        other = derive(make_space([sp.config], schedule="random"), sp.seed)
        cfg = load_config(sp.config)
        # the model TLC checks: its prompts, pools, ranks and tiers; the run's drawn faults
        # and victim order, more requests
        assert sp.workload == "config-prompts" and sp.prompts is None and sp.ranks is None
        assert sp.tiers == ("l1,l2,l3" if cfg.L3 else "l1,l2" if cfg.L2 else "l1")
        assert sp.requests == other.requests * WALK_REQUESTS and sp.eviction == other.eviction
        assert not {k for k, _ in sp.settings} & {"write_threshold", "load_back_threshold", "reload_ttl", "spill_inflight"}
        cmd = command(sp)
        assert "--schedule walk" in cmd and "--workload config-prompts" in cmd
        # the model's device, or one a page per lane wider (WALK_WIDE_SHARE)
        assert sp.l1_pages in (None, cfg.L1 + WALK_WIDE_PAGES) and ("--l1-pages" in cmd) == (sp.l1_pages is not None)
    assert {sp.config for sp in walks} == {"small", "l3"}
    assert 0.35 * len(walks) <= sum(sp.l1_pages is not None for sp in walks) <= 0.65 * len(walks)
    # a campaign of configs none of which is a TLC model never walks
    assert all(derive(make_space(["default"]), s).schedule == "random" for s in range(40))
    # a campaign told another schedule never walks
    assert all(derive(make_space(schedule="timed"), s).schedule == "timed" for s in range(40))


def test_a_walk_run_catches_the_reload_defects_and_reproduces_from_its_command():
    # the two defects the simulator's schedules reach once in hundreds of runs: a walk of
    # the l3 model reaches both (reload_fail_double_free with the disk faults drawn)
    space = make_space(["l3"], bug="reload_stale_anchor")
    seeds = [s for s in range(200) if derive(space, s).schedule == "walk"]
    for seed in seeds:
        spec = derive(space, seed)
        out = execute(spec, Budget(seconds=60), collect=False, replay_log=False)
        if out.failure is not None:
            break
    else:
        pytest.fail(f"no walk run of {len(seeds)} caught reload_stale_anchor")
    assert out.failure.detector == "invariant" and "Tree" in out.failure.what
    res = CliRunner().invoke(app, command(spec).split()[1:])
    assert res.exit_code != 0 and out.failure.what in res.output


def test_a_wide_walk_evicts_with_two_victims_to_choose_from_where_the_models_device_never_does(tmp_path):
    """small holds one device page per lane, so an eviction there has one victim and the
    victim order is never compared with the spec's; a wide walk (one page more) chooses."""
    from kvsm.campaign.worker import run_task
    from kvsm.log import read_log

    space = make_space(["small"], ["l1,l2"], requests=(2, 3))
    choices = {}
    for seed in (4, 8):  # wide, then the model's device
        spec = derive(space, seed)
        assert spec.schedule == "walk" and (spec.l1_pages is not None) == (seed == 4)
        rec = run_task(spec.to_json(), Budget(60, 100_000, 0, "10%").to_json())
        path = tmp_path / f"{seed}.jsonl"
        path.write_text(rec["log"])
        header, stream = read_log(path)
        s, evictions, chose = initial_state(header.config), 0, 0
        for _, _, t, _ in stream:
            if t.name == "EvictDevice":
                evictions += 1
                chose += len(s.dev_index) >= 2
            s = apply(s, t)
        choices[seed] = (evictions, chose)
    assert choices[4][1] > 0 and choices[8][0] > 0 and choices[8][1] == 0, choices


def test_lifted_walks_take_the_pairs_of_small_s_graph_the_models_weights_leave_out():
    # with small's walk weights (rollbacks and free host evictions rare) none of a default
    # campaign's first 40 runs takes these, 4 to 15 of 200 take each; one walk in two
    # lifts both (WALK_LIFT), and two lifted walks of small take all four
    rare = ("EvictHost>Rollback", "EvictHost>Split", "Rollback>CommitCall", "Rollback>EvictHost")
    space = make_space(["small"])
    specs = [derive(space, s) for s in range(200)]
    lifted = [sp for sp in specs if WALK_LIFT in sp.settings]
    assert all(sp.schedule == "walk" for sp in lifted) and 30 <= len(lifted) <= 70  # 1/2 of 1/2
    assert "--set walk_weights=EvictHost:1,Rollback:1" in command(lifted[0])
    assert derive(space, 5) == specs[5] and WALK_LIFT in specs[5].settings and WALK_LIFT in specs[19].settings
    total = empty()
    for seed in (5, 19):
        out = execute(specs[seed], Budget(seconds=60), replay_log=False)
        assert out.failure is None
        merge(total, out.coverage)
    assert all(total["pairs"].get(p, 0) > 0 for p in rare), {p: total["pairs"].get(p, 0) for p in rare}
    assert not against_graph(total)["kinds"]["missing"]


def test_set_walk_weights_replaces_the_named_families_weights_and_rejects_a_bad_one():
    from kvsm.sim import SimError
    from kvsm.sim.options import parse_setting, prepare

    base = dict(load_config("small").walk_weights)
    opts = derive(make_space(["small"]), 5).options()
    assert dict(prepare(opts).cfg.walk_weights)["Rollback"] == 1.0 == dict(prepare(opts).cfg.walk_weights)["EvictHost"]
    assert dict(prepare(opts).cfg.walk_weights)["LoadBack"] == base["LoadBack"]
    for bad in ("walk_weights=Rollback", "walk_weights=Nope:1", "walk_weights=Rollback:-1", "walk_weights=Rollback:nan"):
        with pytest.raises(SimError, match="walk_weights"):
            parse_setting(bad)
