"""kvsm.invariants: per invariant, the rule over a whole state and the rule over what one
transition wrote agree. Along seeded walks, on every step taken from a state where every
invariant holds, the invariants that `violations` finds broken after the step are those
that `local_violations` finds over what the step wrote. Violating steps come from the
injected defects (`kvsm.defects`, `--bug`) and, for the invariants no defect breaks, from
a planted fault: a second transaction on a transition's result (within the transition,
so its writes are on the state it produced). Each case must see its invariant broken,
so a rule that misses it fails the test."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from kvsm.checking import Checker
from kvsm.config import load_config
from kvsm.invariants import Cache, Shadow, local_violations, step_violations, violations
from kvsm.state import initial_state
from kvsm.transitions import REGISTRY, apply
from kvsm.tx import Tx
from kvsm.walk import walk
from kvsm.writes import written_between

from .test_ownership import _write_done_of_the_other_lanes

DIGEST_SUMS = "10 Counts: the digest sums differ from their recomputation"  # (whole-state only: they sum the whole state)


def _numbers(found) -> set[int]:
    return {int(v.split(" ", 1)[0]) for v in found if v != DIGEST_SUMS}


def _written(s, t, after):
    """What the step from `s` to `after` wrote: on `after`, or, when a defect let ranks
    decide differently (the state records it with no record of the commit), on the
    decision of rank 0 that the state follows."""
    w = written_between(s.written, after.written)
    if w is None and after.diverged is not None:
        first = apply(s, t, view=0)
        w = written_between(s.written, first.written)
    return w


def _agree(cfg, seeds: int, steps: int) -> Counter:
    """Walks of `cfg`; asserts the two rules agree on every step from a clean state (a
    walk ends at its first violating step, after which no state is clean) and counts
    the invariants broken."""
    broken: Counter = Counter()
    for seed in range(seeds):
        s = initial_state(cfg)
        cache, sh = Cache(), Shadow(s)
        for t, after in walk(cfg, steps, seed, s):
            w = _written(s, t, after)
            assert w is not None, t
            local = local_violations(s, after, w, sh, cache.chain)
            whole = violations(after)
            assert _numbers(local) == _numbers(whole), (cfg.name, cfg.bug, seed, str(t), local, whole)
            broken.update(_numbers(whole))
            if whole:
                break
            s = after
    return broken


def _planting(monkeypatch, name: str, plant) -> None:
    """`name`'s transition, then `plant(tx, s, s2, t)` in a second transaction on its result."""
    right = REGISTRY[name]

    def apply_(s, t, *view):
        s2 = right.apply(s, t, *view)
        tx = Tx(s2)
        if plant(tx, s, s2, t) is False:
            return s2
        return tx.commit()

    monkeypatch.setitem(REGISTRY, name, replace(right, apply=apply_))


def _inserted(s2, t):
    return s2.requests[t.arg("rid")].node


def _plant_id(tx, s, s2, t):
    nid = _inserted(s2, t)
    if nid == 0:
        return False
    tx.nodes.set(nid, tx.node(nid).with_(id=nid + 1000))


def _plant_unbacked(tx, s, s2, t):
    tx.update(t.arg("node"), host=None)


def _plant_lock(tx, s, s2, t):
    nid = _inserted(s2, t)
    if nid == 0:
        return False
    tx.update(nid, lock=tx.node(nid).lock + 1)


def _plant_leak(tx, s, s2, t):
    if not tx.free_in_lane(0):
        return False
    tx.alloc_dev(0)


def _plant_content(tx, s, s2, t):
    nid = _inserted(s2, t)
    if nid == 0:
        return False
    tx.fill_dev(tx.node(nid).dev[-1], 4242)


def _plant_durable(tx, s, s2, t):
    nid = _inserted(s2, t)
    if nid == 0:
        return False
    tx.update(nid, durable=True)


def _plant_length(tx, s, s2, t):
    n = s2.nodes.get(s.writes[0]) if s.writes else None
    key = n.host if n is not None else None
    if key is None:
        return False
    tx.objects.set(key, tx.objects[key].with_(length=tx.objects[key].length + 1))


def _plant_pin(tx, s, s2, t):
    nid = _inserted(s2, t)
    if nid == 0:
        return False
    tx.update(nid, pin=tx.node(nid).pin + 1)


# invariant -> (config, injected defect, planted fault (transition, plant) or None, walks, steps)
CASES = {
    "1 Tree": ("small", "none", ("Insert", _plant_id), 2, 200),
    "2 Residency": ("small", "none", ("EvictDevice", _plant_unbacked), 2, 300),
    "3 Locks (defect)": ("small", "load_uaf", None, 6, 300),
    "3 Locks (planted)": ("small", "none", ("Insert", _plant_lock), 2, 200),
    "4 Pending": ("small", "evict_pending", None, 6, 300),
    "5 DevicePages": ("small", "none", ("Arrive", _plant_leak), 2, 200),
    "6 HostPages": ("small", "double_free", None, 6, 300),
    "7 Content (defect)": ("default", "duplicate_ack", None, 3, 400),
    "7 Content (planted)": ("small", "none", ("Insert", _plant_content), 2, 200),
    "8 Durable": ("small", "none", ("Insert", _plant_durable), 2, 200),
    "9 Reload": ("small", "none", ("Commit", _plant_length), 2, 400),
    "10 Counts": ("small", "none", ("Insert", _plant_pin), 2, 200),
    "12 Collectives": ("small", "skip_collective", None, 6, 300),
    "13 Agreement": ("l3", "l3_no_min", None, 3, 400),
}


@pytest.mark.parametrize("case", sorted(CASES, key=lambda k: int(k.split()[0])))
def test_the_whole_state_rule_and_the_rule_over_a_transition_agree(case, monkeypatch):
    config, bug, planted, seeds, steps = CASES[case]
    if planted is not None:
        _planting(monkeypatch, *planted)
    broken = _agree(replace(load_config(config), bug=bug), seeds, steps)
    assert broken[int(case.split()[0])] > 0, broken


@pytest.mark.parametrize("config", ["small", "default", "l3", "loads"])
def test_the_rules_agree_along_correct_walks(config):
    assert _agree(load_config(config), 2, 300) == Counter()


def test_ownership_has_one_rule_over_a_transition_which_the_checker_applies(monkeypatch):
    """11 Ownership is a rule over a transition's effects only: the checker reports, right
    after a step, exactly what `step_violations` says of it, and no whole-state rule
    names it."""
    monkeypatch.setitem(REGISTRY, "WriteDone", replace(REGISTRY["WriteDone"], apply=_write_done_of_the_other_lanes))
    cfg = load_config("default")
    caught = 0
    for seed in range(2):
        s0 = initial_state(cfg)
        ck = Checker(s0)
        assert ck.start() is None
        for t, s in walk(cfg, 800, seed, s0):
            bad = step_violations(t.rank, s)
            assert not any(v.startswith("11 ") for v in violations(s))
            found = ck.step(t, s)
            if bad:
                assert found is not None and found.how == "step" and found.violations == bad
                caught += 1
                break
            assert found is None, t
    assert caught


def test_what_a_transaction_wrote_is_not_part_of_the_state():
    """The written keys ride on the state a commit made, outside its identity: a copy
    (which has no record of the commit) is equal, hashes and digests alike, and the
    checker cannot trace it to the state before. (A state is not hashable.)"""
    cfg = load_config("small")
    s = initial_state(cfg)
    for t, after in walk(cfg, 40, 3, s):
        copy = replace(after)
        assert copy == after and copy.digest() == after.digest() and copy.written is not after.written
        assert written_between(s.written, after.written) is not None
        assert written_between(s.written, copy.written) is None
        s = after
