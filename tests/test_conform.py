"""`kvsm conform`: TLC's state graph of the ci model equals the Python model's, and the
graph exercises what the ci model exists to exercise."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvsm.cli import app
from kvsm.config import load_config
from kvsm.tla.conform import Interner, conform, tlc_graph
from kvsm.tla.models import config_of_model
from kvsm.tla.location import model_paths
from kvsm.tla.view import stamp_view
from kvsm.transitions import REGISTRY

pytestmark = pytest.mark.tlc


@pytest.fixture(scope="module")
def ci_graph():
    """TLC's graph of the ci model, read once for the tests of this module."""
    module, cfg = model_paths("ci")
    intern = Interner()
    return tlc_graph(module, cfg, config_of_model(module, cfg), intern), intern


def test_conform_finds_the_graphs_equal_on_ci(ci_graph, small_graph):
    res = conform("ci", tlc=ci_graph, explored=small_graph)
    assert res.equal, res.to_json()["examples"]
    # kvsm explore --config small: 224,863 states, 591,682 distinct labelled edges
    assert (res.tlc_states, res.model_states) == (224863, 224863)
    assert (res.tlc_edges, res.model_edges) == (591682, 591682)
    assert res.examples == []


def test_check_under_the_view_keeps_one_state_of_each_class_of_the_graph(ci_graph):
    """ci checks its invariants under StampView (spec/KVView.tla): on TLC's own complete
    graph the view is a bisimulation, and the check counts one state per view, with the
    depth of a breadth-first search over one state per view."""
    from tests.test_view import quotient_depth, view_classes

    g, intern = ci_graph
    module, cfg = model_paths("ci")
    config = config_of_model(module, cfg)
    view = lambda i: stamp_view(intern.canon[i], config)  # noqa: E731
    classes = view_classes(g.states, g.edges, view)
    res = CliRunner().invoke(app, ["check", "--config", "ci", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["violation"] is None
    assert out["distinct_states"] == len(classes) < len(g.states)
    assert out["depth"] == quotient_depth(g.initial, g.edges, view)
    assert out["states_generated"] >= out["distinct_states"] and out["seconds"] > 0


def test_conform_cli_prints_the_comparison_as_json(tmp_path):
    # a one-request config (generated model): the JSON's shape, not ci's graph, is tested
    from tests.test_tla import one_request_config

    res = CliRunner().invoke(app, ["conform", "--config", str(one_request_config(tmp_path)), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert {"tlc_states", "model_states", "tlc_edges", "model_edges", "only_in_tlc", "only_in_model", "examples"} <= set(out)
    assert out["only_in_tlc"]["edges"] == out["only_in_model"]["edges"] == 0


def _edges(ci_graph, action):
    g, intern = ci_graph
    return [(intern.canon[e.src], intern.canon[e.dst]) for e in g.edges if e.action == action]


def _on_l1(c):
    return {n.id for n in c.nodes if n.dev}


def test_ci_splits_a_node(ci_graph):
    assert _edges(ci_graph, "Split")


def test_ci_has_a_reservation_that_must_evict_host_leaves(ci_graph):
    evicting = [(a, b) for a, b in _edges(ci_graph, "Reserve") if {n.id for n in a.nodes} - {n.id for n in b.nodes}]
    assert evicting
    a, b = evicting[0]
    gone = {n.id for n in a.nodes} - {n.id for n in b.nodes}
    assert all(n.host is not None and not n.dev for n in a.nodes if n.id in gone)  # host-only nodes


def test_ci_has_a_reserve_that_cannot_fit_and_keeps_its_evictions(ci_graph):
    # Reserve(n, fits = false): host leaves gone, no backup started
    failed = [(a, b) for a, b in _edges(ci_graph, "Reserve") if a.pending == b.pending]
    assert failed
    assert all({n.id for n in a.nodes} > {n.id for n in b.nodes} for a, b in failed)


def test_ci_splits_a_node_at_a_full_prompt_hit(ci_graph):
    # a request whose whole prompt is one cached node matches all but its last page,
    # which splits the node: a Match that adds a node
    assert any(len(b.nodes) == len(a.nodes) + 1 for a, b in _edges(ci_graph, "Match"))


def test_ci_commits_with_ranks_out_of_step(ci_graph):
    assert any(len(set(a.write_done)) > 1 for a, _ in _edges(ci_graph, "Commit"))


def test_ci_rolls_back_a_backup_some_rank_already_wrote(ci_graph):
    assert any(max(a.write_done) > 0 for a, _ in _edges(ci_graph, "Rollback"))


def test_ci_evicts_from_device_and_from_host(ci_graph):
    assert _edges(ci_graph, "EvictDevice") and _edges(ci_graph, "EvictHost")


def test_ci_has_a_load_back_that_needs_the_owner_lane_planner(ci_graph):
    """A LoadBack whose successor lost a device node: the planner chose a victim."""
    planned = [(a, b) for a, b in _edges(ci_graph, "LoadBack") if _on_l1(a) - _on_l1(b)]
    assert planned


def test_a_wrong_model_transition_makes_conform_fail_and_name_it(tmp_path, monkeypatch):
    """A Rollback that forgets to un-count the write on the ranks that finished it. (On
    the small config with one request, a generated model of 120 states where a backup
    can be rolled back after one rank wrote it: the wrong model explores 709,216
    states of ci, 288 here.)"""
    from kvsm.explore import explore

    toml = tmp_path / "one_request.toml"
    text = (Path(__file__).resolve().parents[1] / "kvsm" / "configs" / "small.toml").read_text()
    toml.write_text(text.replace("max_requests = 3", "max_requests = 1"))
    assert load_config(str(toml)).max_requests == 1
    right = REGISTRY["Rollback"]
    assert conform(str(toml)).equal  # the right model first
    assert any(name == "Rollback" for _, name, _ in explore(load_config(str(toml)), check=False).edges)

    def rollback_keeping_write_done(s, t):
        return replace(right.apply(s, t), write_done=s.write_done)

    monkeypatch.setitem(REGISTRY, "Rollback", replace(right, apply=rollback_keeping_write_done))
    res = conform(str(toml))
    assert not res.equal
    assert set(res.only_in_model["diverging"]) == {"Rollback"}
    assert set(res.only_in_tlc["diverging"]) == {"Rollback"}
    first = res.examples[0]
    assert first["kind"] == "divergence" and first["action"] == "Rollback"
    # the diffs show what each side's Rollback did: only the spec's un-counts the write
    def write_done(change):
        return change.get("write_done", first["from"]["write_done"])

    assert write_done(first["to"][0]) != write_done(first["other_side_to"][0])


def test_a_shipped_model_whose_node_ids_the_model_outgrows_is_refused_by_name(tmp_path):
    """Conform runs TLC with nothing to check, so a model whose `MC_NodeIds` bound is
    smaller than the node ids the config creates would show only as edges TLC lacks
    (this happened to MC_loads when a match began to split): it is refused up front."""
    import shutil

    from kvsm.tla.conform import conform
    from kvsm.tla.errors import TLCError
    from kvsm.tla.location import spec_dir

    for f in spec_dir().glob("*.tla"):
        shutil.copy(f, tmp_path / f.name)
    shutil.copy(spec_dir() / "MC_commit_early_return.cfg", tmp_path)
    mod = tmp_path / "MC_commit_early_return.tla"
    text = mod.read_text()
    assert "MC_NodeIds == 1 .. 2" in text
    mod.write_text(text.replace("MC_NodeIds == 1 .. 2", "MC_NodeIds == 1 .. 0"))
    with pytest.raises(TLCError, match=r"MC_NodeIds is 1 \.\. 0, but the Python model of this config creates node id 1"):
        conform(str(tmp_path / "MC_commit_early_return.cfg"))
