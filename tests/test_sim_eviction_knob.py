"""The config's `eviction` knob: "slru" (the default) protects nodes hit twice or more,
"lru" orders device victims by `(touched, id)` alone, in `Insert`, `EvictDevice` and the
load-back planner alike."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvsm.config import Config, ConfigError
from kvsm.invariants import violations
from kvsm.planner import TreeView
from kvsm.state import initial_state
from kvsm.transitions import Transition, apply


def _serve(s, rid: int, tokens: tuple[int, ...]):
    s = apply(s, Transition.make("Arrive", rid=rid, tokens=tokens, out_pages=0))
    s = apply(s, Transition.make("Match", rid=rid))
    s = apply(s, Transition.make("Insert", rid=rid))
    return apply(s, Transition.make("Finish", rid=rid))


def _cached_first_pages(s) -> set[int]:
    return {n.key[0] for nid, n in s.nodes.items() if nid and n.dev}


def _run(eviction: str):
    # Page 1 is inserted then hit (hits = 2, protected under SLRU); page 2 is newer
    # but hit once. A two-page request into one free page must evict one of them.
    cfg = Config(name="knob", R=1, P=1, L1=3, L2=1, eviction=eviction)
    s = initial_state(cfg)
    s = _serve(s, 0, (1,))
    s = _serve(s, 1, (1,))
    s = _serve(s, 2, (2,))
    assert s.nodes[s.nodes[0].children[1]].hits == 2
    s = _serve(s, 3, (3, 4))
    assert violations(s) == []
    return s


def test_slru_evicts_the_unprotected_node_first():
    assert _cached_first_pages(_run("slru")) == {1, 3}


def test_lru_evicts_the_least_recently_touched_node_whatever_its_hits():
    assert _cached_first_pages(_run("lru")) == {2, 3}


def test_planner_priority_follows_the_knob():
    s = _serve(initial_state(Config(name="knob", R=1, P=1, L1=3, L2=1)), 0, (1,))
    s = _serve(s, 1, (1,))
    nid = s.nodes[0].children[1]
    for eviction, protected in (("slru", True), ("lru", False)):
        view = TreeView(s.nodes.__getitem__, s.pending.__contains__, replace(s.config, eviction=eviction))
        assert view.prio(nid)[0] is protected


def test_config_round_trips_and_rejects_unknown_orders():
    cfg = Config(eviction="lru")
    assert Config.from_json(cfg.to_json()) == cfg
    assert Config.from_json({k: v for k, v in Config().to_json().items() if k != "eviction"}).eviction == "slru"
    with pytest.raises(ConfigError, match="field 'eviction' must be one of slru, lru"):
        Config.from_json({"eviction": "fifo"}, where="x.toml")
