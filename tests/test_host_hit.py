"""Carried host hits (`carry_host_hit`, docs/model.md) and the defect that leaves them
unpinned (`host_hit_unpinned`, vLLM issue 39702, docs/defects.md): Match records its host
hit and pins it until the LoadBack that loads it; without the pin an eviction between the
two frees the hit under the request that carries it (6 HostPages)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kvsm.config import Config, ConfigError
from kvsm.invariants import violations
from kvsm.state import Rejected, initial_state
from kvsm.tla.models import config_of_model
from kvsm.transitions import Transition, apply

ROOT = Path(__file__).resolve().parent.parent
T = Transition.make

# request 0 caches [1, 2] and its backup is committed; the node is evicted from L1; request
# 1 matches [1] of it (splitting it) on L2: its host hit is the upper part, node 2
TO_MATCH = [
    T("Arrive", rid=0, tokens=[1, 2], out_pages=0), T("Match", rid=0), T("Insert", rid=0), T("Finish", rid=0),
    T("Arrive", rid=1, tokens=[1, 2], out_pages=0), T("Reserve", node=1, fits=True),
    T("WriteDone", rank=0), T("WriteDone", rank=1), T("CommitCall", rank=0), T("CommitCall", rank=1), T("Commit"),
    T("EvictDevice", node=1), T("Match", rid=1),
]


def _config(bug: str = "none", carry: bool = True) -> Config:
    cfg = config_of_model(ROOT / "spec/MC_host_hit.tla", ROOT / "spec/MC_host_hit.cfg")
    return replace(cfg, carry_host_hit=carry, bug=bug)


def _run(cfg: Config, steps: list[Transition]):
    s = initial_state(cfg)
    for t in steps:
        s = apply(s, t)
        assert not violations(s), (t, violations(s))
    return s


def test_the_knob_is_left_out_of_the_json_at_its_default_and_checked():
    assert "carry_host_hit" not in Config().to_json()
    assert Config.from_json({"carry_host_hit": True}).to_json()["carry_host_hit"] is True
    with pytest.raises(ConfigError, match="field 'carry_host_hit' must be true or false"):
        Config.from_json({"carry_host_hit": "yes"})


def test_the_match_records_and_pins_its_hit_and_the_load_back_uses_and_releases_it():
    s = _run(_config(), TO_MATCH)
    q = s.requests[1]
    assert (q.hit, q.hit_pages, q.hit_pin) == (2, 1, True) and s.nodes[2].pin == 1
    s = apply(s, T("EvictHost", node=1))  # the lower part is no hit: it goes
    with pytest.raises(Rejected, match="no node can be evicted from L2"):
        apply(s, T("EvictHost", node=2))  # the pinned hit is no host victim
    s = apply(s, T("LoadBack", rid=1))
    assert not violations(s)
    assert s.requests[1].hit == 0 and s.nodes[2].pin == 0 and s.nodes[2].dev and s.requests[1].node == 2


def test_without_the_knob_the_match_records_nothing():
    s = _run(_config(carry=False), TO_MATCH)
    assert s.requests[1].hit == 0 and s.nodes[2].pin == 0
    assert "|H" not in s.requests[1].encode()


def test_an_unpinned_hit_is_evicted_under_its_request_and_host_pages_catches_it():
    s = _run(_config("host_hit_unpinned"), TO_MATCH + [T("EvictHost", node=1)])
    assert s.requests[1].hit_pin is False and s.nodes[2].pin == 0
    s = apply(s, T("EvictHost", node=2))
    assert violations(s) == ["6 HostPages: request 1 carries a host hit on node 2, which no longer holds its L2 copy"]
    with pytest.raises(Rejected, match="has left the tree"):
        apply(s, T("LoadBack", rid=1))


def test_an_abort_or_an_insert_releases_the_pin_of_a_hit_never_loaded():
    s = _run(_config(), TO_MATCH)
    assert _run(_config(), TO_MATCH + [T("Abort", rid=1)]).nodes[2].pin == 0
    s = apply(s, T("Insert", rid=1))
    assert not violations(s) and s.nodes[2].pin == 0 and s.requests[1].hit == 0
