"""Namespaces (tenants, LoRA adapters): docs/model.md, "Namespaces", and invariant 15
Isolation. A request's match never leaves its namespace; the same tokens in two
namespaces are two nodes whose pages hold two contents; namespace 0 is the cache without
namespaces, byte for byte; an `Arrive` names its namespace in a log only when it is not
0. Under the reference's L3 key (`l3_key = "tokens"`) a reload of one namespace reads
what another spilled under the same tokens, which invariant 15 names in the model, in
TLC (the `tenants` model) and in the GPU backend's check of the bytes read."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from kvsm import content
from kvsm.config import ConfigError, Prompt, load_config
from kvsm.explore import explore
from kvsm.invariants import Cache, holds, violations
from kvsm.log import Header, LogError, LogWriter, read_log
from kvsm.replay import replay
from kvsm.state import ROOT_ID, initial_state
from kvsm.steptext import parse_step
from kvsm.transitions import Transition, apply, arrive_step
from kvsm.walk import walk

ROOT = Path(__file__).resolve().parent.parent


def _run(cfg, steps):
    s = initial_state(cfg)
    for t in steps:
        s = apply(s, t)
    return s


def _served(cfg, rid, tokens, ns):
    """Request `rid` of namespace `ns` arrives, matches and inserts."""
    return [arrive_step(rid, tokens, 0, ns), Transition.make("Match", rid=rid), Transition.make("Insert", rid=rid)]


def _cfg(**kw):
    return replace(load_config("small"), max_requests=0, max_live=0, **kw)


def test_a_match_never_crosses_namespaces():
    cfg = _cfg(L1=4)
    s = _run(cfg, _served(cfg, 0, (1, 2, 3), 0) + [arrive_step(1, (1, 2, 3), 0, 1), Transition.make("Match", rid=1)])
    assert s.requests[1].node == ROOT_ID  # namespace 0's [1, 2, 3] is no match of namespace 1's
    s0 = _run(cfg, _served(cfg, 0, (1, 2, 3), 0) + [arrive_step(1, (1, 2, 3), 0, 0), Transition.make("Match", rid=1)])
    assert s0.requests[1].node != ROOT_ID  # the same request in namespace 0 matches it
    assert violations(s) == [] and violations(s0) == []


def test_the_same_tokens_in_two_namespaces_are_two_nodes_holding_two_contents():
    cfg = _cfg(L1=4)
    s = _run(cfg, _served(cfg, 0, (1, 2), 0) + _served(cfg, 1, (1, 2), 1))
    a, b = s.nodes[s.requests[0].node], s.nodes[s.requests[1].node]
    assert a.id != b.id and (a.ns, b.ns) == (0, 1) and a.key == b.key == (1, 2)
    assert a.parent == b.parent == ROOT_ID
    assert a.hashes == content.prefix_content((1, 2))  # namespace 0: the identities without namespaces
    assert b.hashes == content.prefix_content_in(1, (1, 2)) and not set(a.hashes) & set(b.hashes)
    assert [s.dev_content[p] for p in a.dev] == list(a.hashes) and [s.dev_content[p] for p in b.dev] == list(b.hashes)
    # the L3 key of namespace 1's pages over the tokens alone is namespace 0's identity
    assert content.l3_keys(True, 1, b.hashes) == a.hashes and content.l3_keys(False, 1, b.hashes) == b.hashes
    assert violations(s) == [] and holds(s, Cache())


def test_namespace_zero_keeps_every_encoding_byte_for_byte():
    cfg = _cfg()
    t = arrive_step(0, (1, 2), 1)
    assert t == Transition.make("Arrive", rid=0, tokens=(1, 2), out_pages=1) and "ns" not in t.to_json()["args"]
    s = _run(cfg, _served(cfg, 0, (1, 2), 0))
    n = s.nodes[s.requests[0].node]
    assert "|n" not in n.encode() and "|N" not in s.requests[0].encode()
    s1 = _run(cfg, _served(cfg, 0, (1, 2), 1))
    assert "|n1" in s1.nodes[s1.requests[0].node].encode() and s1.requests[0].encode().endswith("|N1")
    assert s1.digest() != s.digest()


def test_a_log_with_namespaces_round_trips_and_replays_to_its_digests(tmp_path):
    cfg = replace(load_config("tenants"), l3_key="namespace")
    s0 = initial_state(cfg)
    path = tmp_path / "tenants.jsonl"
    steps = list(walk(cfg, 200, 3, s0))
    assert any(t.name == "Arrive" and dict(t.args).get("ns") == 1 for t, _ in steps)
    with LogWriter(path, Header(config=cfg, seed=3, source="walk", initial_digest=s0.digest(), extra={"steps": 200})) as w:
        for t, s in steps:
            w.write(t, s)
    lines = [json.loads(x) for x in path.read_text().splitlines()[1:-1]]
    arrivals = [x["args"] for x in lines if x["name"] == "Arrive"]
    assert all(("ns" in a) == (a["tokens"] == [1, 2]) for a in arrivals)  # written only when not 0
    header, stream = read_log(path)
    assert header.config == cfg and [t for _, _, t, _ in stream] == [t for t, _ in steps]
    res = replay(path, check=True)
    assert res.ok and res.final_digest == steps[-1][1].digest()


def test_a_namespace_is_an_integer_of_at_least_zero_wherever_it_is_read(tmp_path):
    assert parse_step("Arrive rid=0 tokens=[1,2] out_pages=0 ns=2") == arrive_step(0, (1, 2), 0, 2)
    assert parse_step("Arrive rid=0 tokens=[1,2] out_pages=0") == arrive_step(0, (1, 2), 0)
    with pytest.raises(ConfigError, match=r"prompts\[0\]: 'ns' \(the prompt's namespace\) must be an integer"):
        replace(load_config("small")).from_json({"prompts": [{"pages": [1], "ns": -1}]})
    cfg = load_config("small")
    path = tmp_path / "bad.jsonl"
    s0 = initial_state(cfg)
    with LogWriter(path, Header(config=cfg, seed=0, source="walk", initial_digest=s0.digest(), extra={})) as w:
        t = arrive_step(0, (1,), 0, 1)
        w.write(t, apply(s0, t))
    text = path.read_text().replace('"ns":1', '"ns":-1')
    path.write_text(text)
    with pytest.raises(LogError, match="Arrive argument 'ns' must be >= 0"):
        list(read_log(path)[1])


def test_the_reference_l3_key_lets_a_reload_read_another_namespace_s_pages_and_isolation_names_it():
    cfg = load_config("tenants")
    fixed = explore(replace(cfg, l3_key="namespace")).summary()
    assert fixed["violations"] == [] and fixed["edges_by_transition"]["ReloadDone"] > 0
    ref = explore(replace(cfg, l3_key="tokens")).summary()
    first = ref["violations"][0]
    assert first["violation"].startswith("15 Isolation: reload ") and "of namespace 1 read page 0" in first["violation"]
    trace = first["trace"]
    assert trace[-1] == "ReloadDone(r=0, ok=True)" and "Arrive(ns=1, out_pages=0, rid=1, tokens=[1, 2])" in trace
    # the node a leaked reload admits claims its namespace's KV and holds the other's: 7 too
    for v in ref["violations"]:
        assert v["violation"].startswith("15 Isolation") or (v["violation"].startswith("7 Content") and "ReloadAdmit()" in v["trace"])


def test_isolation_names_a_request_on_another_namespace_s_node():
    cfg = _cfg(L1=4)
    s = _run(cfg, _served(cfg, 0, (1, 2), 0) + [arrive_step(1, (1, 2), 0, 1)])
    req = s.requests[1]
    bad = replace(s, requests=s.requests.set(1, req.with_(phase="matched", node=s.requests[0].node)), sums=None, _digest=None)
    assert any(v.startswith("15 Isolation: request 1 of namespace 1 holds node") for v in violations(bad))
    assert not holds(bad, Cache())


@pytest.mark.tlc
def test_tlc_and_the_model_agree_on_the_tenants_model_and_tlc_finds_the_reference_key_s_leak(tmp_path):
    from kvsm.tla.check import check
    from kvsm.tla.conform import conform

    res = conform("tenants", workers=1)
    assert res.equal and res.tlc_states == res.model_states == 6369
    out = check(str(ROOT / "spec" / "MC_tenants_tokens.cfg"), workers=1, log_path=tmp_path / "leak.jsonl", properties=False)
    assert out.tlc.violation is not None and out.tlc.violation.property == "Isolation"
    rep = replay(tmp_path / "leak.jsonl", check=True)
    assert rep.violations and rep.violations[0]["violation"].startswith("15 Isolation")


def _leak_log(path: Path) -> Path:
    """Finding 7's case (TLC's shortest counterexample at the reference's L3 key), its
    steps written as a log."""
    from kvsm.steptext import StepError

    cfg = replace(load_config("tenants"), l3_key="tokens")
    text = (ROOT / "traces" / "finding-l3-key-tokens.txt").read_text()
    steps = []
    for line in text.split("\n\n", 1)[1].splitlines():
        if line and not line[0].isspace():
            try:
                steps.append(parse_step(line))
            except StepError:
                continue  # (a directive: diff, show, ...)
    s = initial_state(cfg)
    with LogWriter(path, Header(config=cfg, seed=None, source="hand", initial_digest=s.digest(), extra={})) as w:
        for t in steps:
            s = apply(s, t)
            w.write(t, s)
    assert len(steps) == 18 and violations(s)[0].startswith("15 Isolation")
    return path


def _own_reload_log(path: Path) -> Path:
    """A walk where namespace 1 spills and reloads its own pages: both prompts in both
    namespaces, four arrivals, the fixed key; cut after the read (seed 39 is the first)."""
    cfg = replace(load_config("tenants"), l3_key="namespace", max_requests=4,
                  prompts=tuple(Prompt(p, 0, ns) for ns in (0, 1) for p in ((1,), (1, 2))))
    s0 = initial_state(cfg)
    steps = []
    for t, s in walk(cfg, 400, 39, s0):
        steps.append((t, s))
        if t.name == "ReloadDone" and t.rank == 0 and dict(t.args)["ok"] and s.reloads[len(s.reload_done[0]) - 1].ns == 1:
            break
    else:
        raise AssertionError("seed 39's walk no longer reloads namespace 1's pages")
    with LogWriter(path, Header(config=cfg, seed=39, source="walk", initial_digest=s0.digest(), extra={})) as w:
        for t, s in steps:
            w.write(t, s)
    return path


def test_the_gpu_backend_names_another_namespace_s_bytes_read_from_disk_and_passes_the_fixed_key(tmp_path):
    from kvsm.gpu.launch import Options
    from kvsm.gpu.launch import replay as gpu_replay

    small = dict(device="cpu", page_bytes=128, layers=1, timeout_s=120)
    bad = gpu_replay(Options(str(_leak_log(tmp_path / "leak.jsonl")), **small))
    assert not bad["ok"] and bad["digest_mismatches"] == 0
    [f] = bad["failures"]
    assert (f["kind"], f["op"], f["rank"]) == ("verify", "reload_read", 0) and "does not hold content" in f["message"]
    good = _own_reload_log(tmp_path / "good.jsonl")
    ok = gpu_replay(Options(str(good), **small))
    assert ok["ok"] and ok["pages_reloaded"] > 0 and ok["failures"] == []


@pytest.mark.tlc
def test_tlc_follows_a_log_of_two_namespaces_step_by_step(tmp_path):
    from kvsm.tla.validate import validate

    log = _own_reload_log(tmp_path / "own.jsonl")
    assert replay(log, check=True).ok
    res = validate(str(log), workers=1)
    assert res.ok and res.matched == res.steps == len(list(read_log(log)[1]))
