"""The fast owner-lane planner chooses the same victims, in the same order, as the
reference algorithm, on random trees and deficits."""

from __future__ import annotations

import random

import immutables
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsm.planner import TreeView, plan, plan_reference
from kvsm.state import ROOT_ID, Node
from kvsm.victims import dev_victim_key

from .helpers import config


def random_tree(rng: random.Random, n: int, R: int, policy: str, unbacked_evict: str = "fixed"):
    """A tree obeying the model's residency rule, with random locks, pending backups,
    hit counts, stamps and lane layouts."""
    cfg = config(R=R, policy=policy, unbacked_evict=unbacked_evict)
    raw = {ROOT_ID: dict(parent=-1, dev=True, host=False, lock=0, hits=0, touched=0, pages=0)}
    pending: set[int] = set()
    next_page = [0] * R
    stamps = rng.sample(range(1, 10 * n + 10), n)
    for i in range(1, n + 1):
        parent = rng.randrange(i)
        on_l1 = raw[parent]["dev"] and rng.random() < 0.8
        host = (not on_l1) or rng.random() < 0.5
        lock = rng.choice([0, 0, 0, 0, 1]) if on_l1 else 0
        if on_l1 and not host and rng.random() < 0.1:
            pending.add(i)
            lock += 1
        raw[i] = dict(parent=parent, dev=on_l1, host=host, lock=lock, hits=rng.randrange(4), touched=stamps[i - 1], pages=rng.randint(1, 6))
    nodes = {}
    children: dict[int, dict[int, int]] = {i: {} for i in raw}
    for i, r in raw.items():
        if i != ROOT_ID:
            children[r["parent"]][i] = i
    for i, r in raw.items():
        dev = []
        if r["dev"] and i != ROOT_ID:
            for _ in range(r["pages"]):
                lane = rng.randrange(R)
                dev.append(lane + R * next_page[lane])
                next_page[lane] += 1
        ondev = sum(1 for c in children[i] if raw[c]["dev"])
        nodes[i] = Node(
            id=i, parent=r["parent"], key=tuple(range(i * 100, i * 100 + max(1, r["pages"]))) if i else (),
            dev=tuple(dev), host=i if (r["host"] and i) else None, durable=False, lock=r["lock"], pin=0,
            hits=r["hits"], touched=r["touched"], children=immutables.Map({c * 100: c for c in children[i]}),
            ondev=ondev, hashes=(),
        )
    for i in raw:  # children keyed by their first symbol
        nodes[i] = Node(**{**{f: getattr(nodes[i], f) for f in Node.__slots__}, "children": immutables.Map({nodes[c].key[0]: c for c in children[i]})})
    view = TreeView(nodes.__getitem__, pending.__contains__, cfg)
    candidates = [i for i, nd in nodes.items() if dev_victim_key(nd, i in pending, cfg) is not None]
    return view, candidates


@settings(max_examples=300)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 80),
    R=st.integers(1, 4),
    policy=st.sampled_from(["write_through", "write_back"]),
    deficits=st.lists(st.integers(0, 40), min_size=4, max_size=4),
    knob=st.sampled_from(["fixed", "reference"]),
)
def test_fast_planner_matches_the_reference(seed, n, R, policy, deficits, knob):
    view, candidates = random_tree(random.Random(seed), n, R, policy, knob)
    d = deficits[:R]
    ref = plan_reference(view, d, candidates)
    fast = plan(TreeView(view.get, view.is_pending, config(R=R, policy=policy, unbacked_evict=knob)), d, candidates)
    assert fast == ref


@pytest.mark.parametrize("knob", ["fixed", "reference"])
def test_candidates_agree_with_the_models_evictability(knob):
    view, candidates = random_tree(random.Random(5), 60, 2, "write_through", knob)
    for nid in candidates:
        assert view.after_plan(nid, set())
    others = [i for i in range(61) if i not in candidates]
    assert not any(view.after_plan(i, set()) for i in others)


def test_under_unbacked_evict_reference_an_unbacked_parent_of_l2_only_children_is_a_candidate():
    # the reference's `_cp_device_node_is_load_back_victim_after_plan` asks only that
    # every child be evicted or planned; the fixed model keeps such a parent (it would
    # orphan its children)
    found = {}
    for knob in ("fixed", "reference"):
        view, candidates = random_tree(random.Random(1), 60, 2, "write_through", knob)
        found[knob] = {
            i for i in candidates
            if view.get(i).host is None and any(not view.get(c).dev for c in view.get(i).children.values())
        }
    assert not found["fixed"] and found["reference"]


def test_unlock_contribution_picks_a_leaf_that_frees_a_contributing_parent():
    # parent has its page in lane 0; its only child has its page in lane 1; lane 0 short
    cfg = config(R=2)
    mk = lambda i, parent, dev, kids, touched: Node(  # noqa: E731
        id=i, parent=parent, key=(i,), dev=dev, host=i, durable=False, lock=0, pin=0, hits=0,
        touched=touched, children=immutables.Map({k: k for k in kids}), ondev=len(kids), hashes=())
    nodes = {
        0: Node(id=0, parent=-1, key=(), dev=(), host=None, durable=False, lock=0, pin=0, hits=0, touched=0,
                children=immutables.Map({1: 1, 3: 3}), ondev=2, hashes=()),
        1: mk(1, 0, (0,), [2], 1),
        2: mk(2, 1, (1,), [], 2),
        3: mk(3, 0, (3,), [], 3),  # a leaf in lane 1 only, more recent
    }
    view = TreeView(nodes.__getitem__, lambda i: False, cfg)
    expect = plan_reference(view, [1, 0], [2, 3])
    assert expect.victims == (2, 1) and expect.remaining == (0, 0)
    assert plan(view, [1, 0], [2, 3]) == expect
