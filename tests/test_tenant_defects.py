"""The tenant-isolation defects (docs/defects.md, "Tenant isolation"): `host_key_no_ns`
(the host tier looked up by tokens alone, vLLM issue 44250), `lora_salt_collision` (a
LoRA adapter's name and a cache salt in one untagged key, vLLM issue 44701) and
`l3_key_no_ns` (the L3 key over tokens alone, LMCache issue 2961). TLC and the simulator
catch each (tests/test_defects.py runs the catalogue); here: each deviation is where its
defect says and nowhere else, and the models they are caught on are clean without them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from kvsm.config import load_config
from kvsm.defects import CATALOGUE
from kvsm.explore import explore
from kvsm.invariants import violations
from kvsm.state import ROOT_ID, initial_state
from kvsm.tla.models import config_of_model
from kvsm.transitions import Transition, apply, arrive_step
from kvsm.transitions.tree import ns_key_partner, walk_key

ROOT = Path(__file__).resolve().parent.parent
NAMES = ("host_key_no_ns", "lora_salt_collision", "l3_key_no_ns")


def _run(cfg, steps):
    s = initial_state(cfg)
    for t in steps:
        s = apply(s, t)
    return s


def _served(rid, tokens, ns):
    return [arrive_step(rid, tokens, 0, ns), Transition.make("Match", rid=rid), Transition.make("Insert", rid=rid),
            Transition.make("Finish", rid=rid)]


def test_each_tenant_defect_is_caught_as_isolation_and_cites_its_tracker():
    for name in NAMES:
        d = CATALOGUE[name]
        assert d.invariant == "15 Isolation" and d.tracker and d.sim["tenants"] >= 2, name
        # the L3 key the fixed one: only the defect leaks (the reference's key is finding 7)
        assert dict(d.sim["settings"])["l3_key"] == "namespace"
        assert (ROOT / "traces" / f"defect-{name.replace('_', '-')}.txt").exists()
    # lora_salt_collision's simulator run has the colliding pair 1 (adapter 1), 2 (salt 1)
    assert CATALOGUE["lora_salt_collision"].sim["tenants"] >= 3


def test_an_adapter_and_a_salt_of_the_same_name_collide_and_nothing_else_does():
    assert ns_key_partner(0) is None
    assert [ns_key_partner(k) for k in (1, 2, 3, 4)] == [2, 1, 4, 3]
    cfg = replace(load_config("small"), max_requests=0, max_live=0, L1=4)
    steps = _served(0, (1, 2), 1) + [arrive_step(1, (1, 2), 0, 2), Transition.make("Match", rid=1)]
    bad = _run(replace(cfg, bug="lora_salt_collision"), steps)
    assert bad.requests[1].node != ROOT_ID and bad.nodes[bad.requests[1].node].ns == 1
    assert any(v.startswith("15 Isolation: request 1 of namespace 2 holds node") for v in violations(bad))
    # without the defect, and under it for namespaces that do not collide (2 and 3): a miss
    assert _run(cfg, steps).requests[1].node == ROOT_ID
    other = _served(0, (1, 2), 2) + [arrive_step(1, (1, 2), 0, 3), Transition.make("Match", rid=1)]
    assert _run(replace(cfg, bug="lora_salt_collision"), other).requests[1].node == ROOT_ID


def test_the_host_tier_s_token_lookup_takes_another_namespace_s_node_only_off_l1():
    cfg = replace(load_config("small"), max_requests=0, max_live=0, L1=4, bug="host_key_no_ns")
    s = _run(cfg, _served(0, (1, 2), 0) + [arrive_step(1, (1, 2, 3), 0, 1)])
    nid = next(n for n, x in s.nodes.items() if x.key == (1, 2))
    # namespace 0's node on L1: a walk of namespace 1 does not take it
    assert s.nodes[nid].dev and walk_key(s.nodes, (1, 2, 3), ns=1, bug=cfg.bug).full == ()
    # the same node off L1 but backed (its KV on the host only): the walk takes it
    host_only = {k: (v.with_(dev=(), host=7) if k == nid else v) for k, v in s.nodes.items()}
    assert walk_key(host_only, (1, 2, 3), ns=1, bug=cfg.bug).full == (nid,)
    assert walk_key(host_only, (1, 2, 3), ns=1).full == ()


def test_the_l3_defect_keys_by_tokens_whatever_the_knob():
    cfg = load_config("tenants")
    assert cfg.l3_key == "namespace" and not cfg.l3_by_tokens
    assert replace(cfg, bug="l3_key_no_ns").l3_by_tokens and replace(cfg, l3_key="tokens").l3_by_tokens


def test_the_salt_model_is_clean_without_a_defect_and_has_the_tenants_graph():
    # MC_tenant_salt is MC_tenants with namespaces 1 and 2 for 0 and 1: without a defect the
    # renaming changes nothing (the same 6,369 states, every invariant held)
    p = ROOT / "spec" / "MC_tenant_salt.cfg"
    cfg = config_of_model(p.with_suffix(".tla"), p)
    assert {x.ns for x in cfg.prompts} == {1, 2} and cfg.bug == "none"
    summary = explore(cfg).summary()
    assert summary["violations"] == [] and summary["states"] == 6369
