"""The L3 part of the spec: TLC checks the l3 model, its state graph equals the Python
model's, and the graph exercises every L3 scenario the model exists to exercise."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from kvsm.cli import app
from kvsm.config import load_config
from kvsm.explore import explore
from kvsm.tla.conform import Interner, conform, tlc_graph
from kvsm.state import lane_of
from kvsm.tx import Tx
from kvsm.tla.models import CONSTANT_FIELDS, config_of_model
from kvsm.tla.location import model_paths
from kvsm.tla.view import stamp_view
from kvsm.transitions import REGISTRY
from kvsm.tla.runner import graph_workers

pytestmark = pytest.mark.tlc

# kvsm explore --config l3: 1,184,453 states, 5,524,250 distinct labelled edges since a
# match stops one page short of its prompt (577,784 and 2,728,667 with the asynchronous
# load-back alone; 520,793 and 2,471,659 before it)
L3_STATES, L3_EDGES = 1184453, 5524250


def test_the_l3_model_has_the_constants_of_the_l3_config():
    module, cfg = model_paths("l3")
    got, want = config_of_model(module, cfg), load_config("l3")
    for field, _ in CONSTANT_FIELDS:
        assert getattr(got, field) == getattr(want, field), field
    assert set(got.prompts) == set(want.prompts) and got.L3 > 0


@pytest.fixture(scope="module")
def l3_graph():
    """TLC's graph of the l3 model under StampView (spec/KVView.tla), read once for the
    scenario tests of this module: one state of each class of states that no step and
    no invariant tells apart (784,617 of the 1,184,453), so an edge of a scenario here
    stands for edges of it in the complete graph. Five minutes of TLC: the scenario
    tests are in the exhaustive run (`pytest -m exhaustive`); the default run checks the
    two three-request scenarios on hand-made logs (below)."""
    module, cfg = model_paths("l3")
    intern = Interner()
    return tlc_graph(module, cfg, config_of_model(module, cfg), intern, view=True), intern


@pytest.fixture(scope="module")
def l3_complete_graph():
    """TLC's complete graph of the l3 model (for conform)."""
    module, cfg = model_paths("l3")
    intern = Interner()
    return tlc_graph(module, cfg, config_of_model(module, cfg), intern), intern


@pytest.mark.exhaustive
def test_check_passes_on_l3_with_the_state_count_of_the_python_model():
    res = CliRunner().invoke(app, ["check", "--config", "l3", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["violation"] is None
    assert out["distinct_states"] == L3_STATES


@pytest.mark.exhaustive
def test_conform_finds_the_graphs_equal_on_l3(l3_complete_graph):
    res = conform("l3", tlc=l3_complete_graph)
    assert res.equal, res.to_json()["examples"]
    assert (res.tlc_states, res.model_states) == (L3_STATES, L3_STATES)
    assert (res.tlc_edges, res.model_edges) == (L3_EDGES, L3_EDGES)


@pytest.mark.exhaustive
def test_the_view_is_a_bisimulation_of_the_l3_graph_and_its_graph_has_a_state_per_class(l3_graph, l3_complete_graph):
    from tests.test_view import view_classes

    g, intern = l3_complete_graph
    config = load_config("l3")
    classes = view_classes(g.states, g.edges, lambda i: stamp_view(intern.canon[i], config))
    assert len(l3_graph[0].states) == len(classes) < len(g.states)


# ---- the scenarios ------------------------------------------------------------------------------
# Canonical states (kvsm.tla.specmap.Canon): a node is (id, parent, key, dev, host, durable,
# lock, pin, hits, touched); a spill (obj, node, hashes, pinned); a reload (key, anchor,
# tokens, hashes, waiters, ttl, base, length); l3 is a set of (rank, hash, content).


def _edges(graph, action):
    g, intern = graph
    return [(intern.canon[a], intern.canon[b]) for a, name, b in g.edges if name == action]


def _durable(c):
    return {n[0] for n in c.nodes if n[5]}


@pytest.mark.exhaustive
def test_l3_spills_a_node_to_every_rank_s_disk(l3_graph):
    """A SpillAck after which a node is durable, each page on its owner rank's disk."""
    acks = [(a, b) for a, b in _edges(l3_graph, "SpillAck") if _durable(b) - _durable(a)]
    assert acks
    for a, b in acks:
        R = len(b.disk_ok)
        for n in b.nodes:
            if n[0] in _durable(b) - _durable(a):
                hashes = next(op[2] for op in a.spills if op[1] == n[0])
                assert all((lane_of(i, R), h) in {(r, x) for r, x, _ in b.l3} for i, h in enumerate(hashes))


@pytest.mark.exhaustive
def test_l3_fails_a_spill_write_on_one_rank_and_marks_nothing_durable_from_it(l3_graph):
    failed = [(a, b) for a, b in _edges(l3_graph, "SpillDone") if sum(len(x) for x in b.spill_done) > sum(len(x) for x in a.spill_done)
              and any(len(y) > len(x) and not y[-1] for x, y in zip(a.spill_done, b.spill_done))]
    assert failed
    # an ack of an op that one rank wrote and the other did not: its node stays not durable
    mixed = [
        (a, b)
        for a, b in _edges(l3_graph, "SpillAck")
        if all(a.spill_done) and len({x[0] for x in a.spill_done}) == 2 and a.spills[0][1] not in _durable(b)
    ]
    assert mixed


def _new_nodes(a, b):
    return {n[0] for n in b.nodes} - {n[0] for n in a.nodes}


@pytest.mark.exhaustive
def test_l3_admits_a_reload_as_a_durable_l2_only_node(l3_graph):
    admitted = [(a, b) for a, b in _edges(l3_graph, "ReloadAdmit") if _new_nodes(a, b)]
    assert admitted
    for a, b in admitted:
        (nid,) = _new_nodes(a, b)
        n = next(n for n in b.nodes if n[0] == nid)
        op = a.reloads[0]
        assert n[5] and n[3] == () and n[4] == nid and n[2] == op[2] and n[1] == op[1]


@pytest.mark.exhaustive
def test_l3_aborts_a_reload_at_admit_when_a_rank_failed_to_read_it_or_it_expired(l3_graph):
    """ReloadAdmit edges with no new node: one whose reload a rank could not read (its
    disk failed), one whose waiters had all expired."""
    aborts = [(a, b) for a, b in _edges(l3_graph, "ReloadAdmit") if not _new_nodes(a, b)]
    assert any(a.reloads[0][4] and not all(x[0] for x in a.reload_done) for a, _ in aborts)
    assert any(not a.reloads[0][4] and all(x[0] for x in a.reload_done) for a, _ in aborts)
    for a, b in aborts:  # the reservation is freed
        base, length = a.reloads[0][6], a.reloads[0][7]
        assert {p for _, p in b.l2_free} >= set(range(base, base + length))


@pytest.mark.exhaustive
def test_l3_expires_a_held_request(l3_graph):
    expired = [
        (a, b)
        for a, b in _edges(l3_graph, "ReloadExpire")
        if any(x[4] and not y[4] for x, y in zip(a.reloads, b.reloads))
    ]
    assert expired


def _misaligned(c, hashes):
    """The first page of `hashes` that its owner rank (index mod R) lacks is on another
    rank's disk: the reload claims fewer pages than the disks hold."""
    R = len(c.disk_ok)
    on = {(r, h) for r, h, _ in c.l3}
    for i, h in enumerate(hashes):
        if (lane_of(i, R), h) not in on:
            return any((r, h) in on for r in range(R))
    return False


def _misaligned_reserves(graph):
    out = []
    for a, b in _edges(graph, "ReloadReserve"):
        (gone,) = {x[0] for x in a.reload_candidates} - {x[0] for x in b.reload_candidates}
        cand = next(x for x in a.reload_candidates if x[0] == gone)
        if _misaligned(a, cand[3]):
            out.append((a, b))
    return out


def _anchor_changed_aborts(graph):
    return [
        (a, b)
        for a, b in _edges(graph, "ReloadAdmit")
        if a.reloads[0][4] and all(x[0] for x in a.reload_done) and not _new_nodes(a, b)
    ]


@pytest.mark.exhaustive
def test_l3_claims_fewer_pages_than_a_candidate_has_when_a_rank_lacks_one(l3_graph):
    """A ReloadReserve that holds its request on a reload shorter than the candidate: the
    MIN over ranks stopped at a page its owner rank does not hold."""
    lowered = []
    for a, b in _edges(l3_graph, "ReloadReserve"):
        (gone,) = {x[0] for x in a.reload_candidates} - {x[0] for x in b.reload_candidates}
        cand = next(x for x in a.reload_candidates if x[0] == gone)
        lowered += [op for op in b.reloads if gone in op[4] and len(op[3]) < len(cand[3])]
    assert lowered


@pytest.mark.exhaustive
def test_the_two_request_model_reaches_an_anchor_change_and_misaligned_owners(l3_graph):
    """The two scenarios that once needed a third request are edges of the l3 model (two
    requests, one alive at a time) since a match stops one page short of its prompt and
    splits there: a reload aborted at admit because its anchor changed under it, and a
    reload reserved for a candidate whose pages sit on the wrong rank's disk after a
    split. TLC checks both exhaustively with the l3 model (its check finds no violation)."""
    assert _anchor_changed_aborts(l3_graph) and _misaligned_reserves(l3_graph)


# ---- a wrong model ------------------------------------------------------------------------------


@pytest.mark.exhaustive
def test_a_wrong_l3_transition_makes_conform_fail_and_name_it(tmp_path, monkeypatch):
    """A SpillDone that marks the node durable as soon as one rank wrote its pages, without
    waiting for the AND over ranks at SpillAck. (On the l3 model's constants with one
    prompt, which keeps the test short: the l3 model's own conform is the test above.)"""
    right = REGISTRY["SpillDone"]

    def spill_done_marking_durable(s, t):
        s2 = right.apply(s, t)
        op = s.spills[len(s.spill_done[t.rank])]
        n = s2.nodes.get(op.node)
        if not t.arg("ok") or n is None or n.durable or n.host != op.obj:
            return s2
        tx = Tx(s2)
        tx.update(op.node, durable=True)
        return tx.commit()

    cfg = _small_l3_model(tmp_path, "MC_wrong", "INIT Init\nNEXT Next\n")
    assert conform(str(cfg)).equal  # the right model first
    monkeypatch.setitem(REGISTRY, "SpillDone", replace(right, apply=spill_done_marking_durable))
    res = conform(str(cfg))
    assert not res.equal
    assert "SpillDone" in res.only_in_model["diverging"] and "SpillDone" in res.only_in_tlc["diverging"]
    first = res.examples[0]
    assert first["kind"] == "divergence" and first["action"] == "SpillDone"
    durable = lambda change: [n["id"] for n in change.get("nodes", first["from"]["nodes"]) if n.get("durable")]  # noqa: E731
    assert durable(first["to"][0]) != durable(first["other_side_to"][0])


# ---- the scenarios with a third request ---------------------------------------------------------
# A reload whose anchor changed, and a reload after a split that misaligned the pages'
# owners, as hand-made logs of the l3 config with three requests (one whose pages are
# spilled, one that splits them, one that reloads), which TLC accepts step by step
# (`kvsm validate`: the spec reaches the model's state after every step). The
# two-request l3 model reaches both too (above).


def _three_request_log(path, steps):
    from kvsm.log import Header, LogWriter
    from kvsm.state import initial_state
    from kvsm.transitions import apply

    cfg = replace(load_config("l3"), name="l3-three", max_requests=3)
    s = initial_state(cfg)
    states = [s]
    with LogWriter(path, Header(config=cfg, seed=None, source="hand", initial_digest=s.digest(), extra={})) as w:
        for t in steps:
            s = apply(s, t)
            states.append(s)
            w.write(t, s)
    return path, states


def _spilled_then_split(T):
    """[1, 2] spilled to both disks (rank 0: page [1], rank 1: page [1, 2]); then [1, 3]
    splits it after one page: node 2 = [1] (a new node: not durable), node 1 = [2] (no
    longer durable: its page's owner moved), node 3 = [3] below node 2."""
    return [
        T("Arrive", rid=0, tokens=[1, 2], out_pages=0), T("Match", rid=0), T("Insert", rid=0),
        T("Reserve", node=1, fits=True), T("WriteDone", rank=0), T("WriteDone", rank=1), T("Commit"), T("Finish", rid=0),
        T("SpillSubmit"), T("SpillGathered", rank=0), T("SpillGathered", rank=1),
        T("SpillDone", rank=0, ok=True), T("SpillDone", rank=1, ok=True), T("SpillAck"),
        T("Arrive", rid=1, tokens=[1, 3], out_pages=0), T("Match", rid=1), T("Insert", rid=1),
    ]


def test_the_spec_lowers_a_reload_s_claim_after_a_split_that_misaligned_owners(tmp_path):
    from kvsm.transitions import Transition
    from kvsm.tla.validate import validate

    T = Transition.make
    steps = _spilled_then_split(T) + [
        T("Finish", rid=1), T("EvictHost", node=1),  # [2] is gone from the tree, its page is on rank 1's disk
        T("Arrive", rid=2, tokens=[1, 2], out_pages=0), T("ReloadMark", rid=2), T("ReloadReserve", rid=2),
    ]
    log, states = _three_request_log(tmp_path / "misaligned.jsonl", steps)
    marked, reserved = states[-2], states[-1]
    cand = marked.reload_candidates[2]
    assert cand.anchor == 2 and cand.tokens == (2,)
    # page [1, 2] is on a disk, but on rank 1, and the reload's page 0 belongs to rank 0
    assert (1, cand.hashes[0]) in marked.l3 and (0, cand.hashes[0]) not in marked.l3
    assert reserved.reloads == () and 2 not in reserved.reload_candidates  # claim 0: dropped
    res = validate(log)
    assert res.ok, res.to_json()


def test_the_spec_aborts_a_reload_at_admit_when_its_anchor_changed(tmp_path):
    from kvsm.transitions import Transition
    from kvsm.tla.validate import validate

    T = Transition.make
    steps = _spilled_then_split(T) + [
        T("Reserve", node=3, fits=True), T("WriteDone", rank=0), T("WriteDone", rank=1), T("Commit"), T("Finish", rid=1),
        # the queue holds node 2 (the split's upper object) and node 3: both are spilled
        T("SpillSubmit"), T("SpillGathered", rank=0), T("SpillGathered", rank=1),
        T("SpillDone", rank=0, ok=True), T("SpillDone", rank=1, ok=True), T("SpillAck"),
        T("SpillSubmit"), T("SpillGathered", rank=0), T("SpillGathered", rank=1),
        T("SpillDone", rank=0, ok=True), T("SpillDone", rank=1, ok=True), T("SpillAck"),
        T("EvictDevice", node=3), T("EvictHost", node=3),  # (Reserve evicted node 1 from L2 to fit)
        # [1, 3] misses below node 2 = [1]; rank 0 holds page [1, 3]: a reload of one page
        T("Arrive", rid=2, tokens=[1, 3], out_pages=0), T("ReloadMark", rid=2), T("ReloadReserve", rid=2),
        # the anchor leaves the tree while the reload is in flight
        T("EvictDevice", node=2), T("EvictHost", node=2),
        T("ReloadDone", rank=0, ok=True), T("ReloadDone", rank=1, ok=True), T("ReloadAdmit"),
    ]
    log, states = _three_request_log(tmp_path / "anchor.jsonl", steps)
    held, before, after = states[-6], states[-2], states[-1]
    assert held.reloads and held.reloads[0].anchor == 2 and held.reloads[0].waiters == (2,)
    assert 2 not in before.nodes and all(before.reload_done[r] == (True,) for r in range(2))
    assert after.reloads == () and set(after.nodes) == set(before.nodes)  # aborted, nothing inserted
    assert len(after.objects) == len(before.objects) - 1  # its reservation freed
    res = validate(log)
    assert res.ok, res.to_json()


# ---- liveness -----------------------------------------------------------------------------------


def _small_l3_model(tmp_path, name, sections):
    """The l3 model's constants with one prompt, [1, 2], arriving twice: the second can
    be held by a reload of what the first spilled."""
    from kvsm.tla.models import read_cfg

    consts = read_cfg(model_paths("l3")[1]).constants
    lines = [f"    {k} {op} {v}" for k, (op, v) in consts.items()]
    (tmp_path / f"{name}.tla").write_text(
        f"---- MODULE {name} ----\nEXTENDS KVCache\nMC_Prompts == {{[pages |-> <<1, 2>>, out_pages |-> 0]}}\n"
        "MC_NodeIds == 1 .. 6\n====\n"
    )
    cfg = tmp_path / f"{name}.cfg"
    cfg.write_text("CONSTANTS\n" + "\n".join(lines) + "\n" + sections)
    return cfg


def test_without_fairness_a_held_request_can_wait_forever(tmp_path):
    """HeldReleased is not vacuous: without the fairness of the reload steps and of the
    reload clock, TLC finds a request that a reload holds forever; it becomes a log that
    the model replays."""
    from kvsm.tla.check import check
    from kvsm.log import read_log
    from kvsm.replay import replay

    cfg = _small_l3_model(tmp_path, "MC_unfair_l3", "SPECIFICATION Unfair\nPROPERTY HeldReleased\n")
    (tmp_path / "MC_unfair_l3.tla").write_text(
        (tmp_path / "MC_unfair_l3.tla").read_text().replace("====", "Unfair == Init /\\ [][Next]_vars\n====")
    )
    res = check(str(cfg), log_path=tmp_path / "held.jsonl")
    assert not res.ok and res.tlc.violation.kind == "property", res.tlc.output[-2000:]
    header, stream = read_log(res.log)
    names = [t.name for _, _, t, _ in stream]
    assert "ReloadReserve" in names and "SpillAck" in names
    assert replay(res.log).ok


def test_with_fairness_every_held_request_is_released_on_a_small_l3_model(tmp_path):
    """HeldReleased alone (392,984 states, two minutes; with BackupsResolve beside it,
    three): BackupsResolve is checked with two requests on ci's constants in this run
    and on the l3 model in the exhaustive one."""
    from kvsm.tla.check import check

    cfg = _small_l3_model(tmp_path, "MC_fair_l3", "SPECIFICATION Spec\nPROPERTIES HeldReleased\n")
    res = check(str(cfg), workers=graph_workers())
    assert res.ok, res.tlc.output[-2000:]
    assert res.tlc.distinct_states > 1000


# ---- the small models of the reference profile: l3-small and reference ----------------------


@pytest.fixture(scope="module")
def l3_small_graph():
    return explore(config_of_model(*model_paths("l3-small")), check=True)


@pytest.mark.tlc
def test_conform_is_equal_on_l3_small_and_it_takes_every_l3_step(l3_small_graph):
    res = conform("l3-small", explored=l3_small_graph)
    assert res.equal, res.to_json()["examples"]
    assert res.tlc_states == res.model_states > 5000
    edges = l3_small_graph.summary()
    assert edges["violations"] == []
    missing = {t for t in ("SpillSubmit", "SpillAck", "ReloadMark", "ReloadReserve", "ReloadDone", "ReloadAdmit", "ReloadExpire")
               if not edges["edges_by_transition"].get(t)}
    assert not missing


@pytest.mark.parametrize("name", ["l3-small", "reference", "reference-write-back"])
def test_the_small_models_constants_are_their_built_in_configs(name):
    got, want = config_of_model(*model_paths(name)), load_config(name)
    assert replace(got, name=want.name, walk_weights=want.walk_weights) == want
    assert want.max_disk_faults == -1 and want.max_requests > 0  # every counter bounded


@pytest.mark.exhaustive
@pytest.mark.parametrize("name", ["reference", "reference-write-back"])
def test_conform_is_equal_on_the_reference_models(name):
    res = conform(name)
    assert res.equal, res.to_json()["examples"]


def test_no_disk_fault_is_minus_one_bound_through_a_definition_in_a_generated_model():
    from kvsm.state import initial_state
    from kvsm.transitions import Rejected, Transition, apply
    from kvsm.tla.models import generated_model

    cfg = replace(load_config("l3-small"), name="nofault")
    text, mc = generated_model(cfg, 6, ["TypeOK"], [])
    assert mc.constants["MaxDiskFaults"] == ("<-", "MC_MaxDiskFaults") and "MC_MaxDiskFaults == -1" in text
    assert "= -" not in mc.text()  # TLC's .cfg has no negative literal
    with pytest.raises(Rejected, match=r"no disk fault \(max_disk_faults = -1\)"):
        apply(initial_state(cfg), Transition.make("DiskFail", rank=0))
    assert explore(replace(cfg, max_requests=1)).summary()["edges_by_transition"].get("DiskFail", 0) == 0
