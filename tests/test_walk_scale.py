"""The walk on large trees: `Reserve` candidates whose `fits` is decided lazily, once per
page length, and the walk's random draws for a family the commit round blocks, made
without enumerating it. Each must agree exactly with what it replaces, or walk logs
would change."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from kvsm.config import Config, Prompt
from kvsm.state import ClusterState, Rejected
from kvsm.transitions import REGISTRY, Transition, names_for
from kvsm.transitions.registry import cluster_view, waits_for_round
from kvsm.transitions.reserve import FitsByLength, reserve, reserve_candidates, reserve_fits
from kvsm import walk as walk_module
from kvsm.walk import _candidates, advance_as_shuffle, walk


def _config(**changes) -> Config:
    """Prompts sharing 8-page prefixes with 4- to 12-page suffixes: enough distinct keys
    for a few hundred nodes, most of them backup candidates."""
    prompts, sym = [], 1
    for s in range(12):
        system = tuple(range(sym, sym + 8))
        sym += 8
        for k in range(30):
            n = 4 + (s * 7 + k * 3) % 9
            prompts.append(Prompt(system + tuple(range(sym, sym + n)), 1))
            sym += n
    weights = {"Arrive": 1.0, "Insert": 1.0, "Reserve": 0.3, "WriteDone": 2.0, "Commit": 0.5, "EvictDevice": 0.15, "EvictHost": 0.05}
    base = replace(Config(), name="scale", R=4, P=16, L1=1000, L2=4000, max_live=8, prompts=tuple(prompts),
                   walk_weights=tuple(sorted(weights.items())))
    return replace(base, **changes)


CONFIGS = {
    "write_through": {},
    "write_back": {"policy": "write_back"},
    "prepared": {"prepared_backups": True},
    "tight_l2": {"L2": 160},
    "local_host_alloc": {"bug": "local_host_alloc", "L2": 200},
    "wallclock_tiebreak": {"bug": "wallclock_tiebreak", "L2": 200},
}


def _states(changes: dict, steps: int = 2500, every: int = 97, seed: int = 1) -> list[ClusterState]:
    return [s for i, (_, s) in enumerate(walk(_config(**changes), steps, seed)) if i % every == every - 1]


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_fits_by_length_is_what_reserve_decides(name):
    """For every backup candidate of states along a walk, the memoised `fits` equals
    `reserve_fits`, and `reserve` accepts that outcome and refuses the other."""
    checked = 0
    lengths_differ = False
    for s in _states(CONFIGS[name]):
        view = cluster_view(s.config)
        memo = FitsByLength(s, view)
        seen = set()
        for nid in s.backup_index:
            fits = memo(nid)
            assert fits == reserve_fits(s, nid, view), (name, nid)
            seen.add(fits)
            with pytest.raises(Rejected):
                reserve(s, Transition.make("Reserve", node=nid, fits=not fits), view)
            try:
                reserve(s, Transition.make("Reserve", node=nid, fits=fits), view)
            except Rejected as e:
                # the one refusal of the right outcome: a failed attempt with nothing to evict
                assert not fits and not s.host_index and "nothing would change" in str(e)
            checked += 1
        lengths_differ |= len(seen) == 2
    assert checked > 200
    if name == "tight_l2":
        assert lengths_differ, "the tight host pool should make some lengths fit and others not"


def _eager_reserve_order(s: ClusterState, rng: random.Random) -> list[Transition]:
    """The walk's order of `Reserve` candidates as it was first written: eight drawn at
    random (fits decided from view None) when there are more than 16, then every
    candidate of `reserve_candidates`, shuffled."""
    out = []
    pool = s.backup_index
    if len(pool) > 16:
        for _ in range(8):
            nid = pool[rng.randrange(len(pool))]
            out.append(Transition.make("Reserve", node=nid, fits=reserve_fits(s, nid)))
    cands = list(reserve_candidates(s))
    rng.shuffle(cands)
    return out + cands


@pytest.mark.parametrize("name", ["write_through", "local_host_alloc", "tight_l2"])
def test_lazy_reserve_order_is_the_eager_one(name):
    """The lazily decided candidates come in the eager order with the same `fits`, and a
    blocked family's draws leave the generator where trying them all would."""
    states = _states(CONFIGS[name], every=211)
    assert max(len(s.backup_index) for s in states) > 16
    for i, s in enumerate(states):
        lazy, eager, blocked = (random.Random(i) for _ in range(3))
        assert list(_candidates(s, "Reserve", lazy)) == _eager_reserve_order(s, eager)
        assert list(_candidates(s, "Reserve", blocked, blocked=True)) == []
        assert lazy.getstate() == eager.getstate() == blocked.getstate()


def test_blocked_families_draw_as_if_tried():
    """Every family a walk can pick draws the same random numbers blocked or not."""
    states = _states(CONFIGS["prepared"], every=157)
    assert any(waits_for_round(REGISTRY["Reserve"], s) for s in states)
    for i, s in enumerate(states):
        for name in names_for(s.config):
            a, b = random.Random(i), random.Random(i)
            for _ in _candidates(s, name, a):
                pass
            assert list(_candidates(s, name, b, blocked=True)) == []
            assert a.getstate() == b.getstate(), name


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 5000), seed=st.integers(0, 2**32 - 1))
def test_advance_as_shuffle_is_a_shuffle(n, seed):
    a, b, c = random.Random(seed), random.Random(seed), random.Random(seed)
    a.shuffle(list(range(n)))
    advance_as_shuffle(b, n)
    walk_module._shuffle_words(c, n)  # what advance_as_shuffle uses where it agrees
    assert a.getstate() == b.getstate() == c.getstate()
    assert a.random() == b.random()


def test_shuffle_words_agree_here():
    """This Python's shuffle is the one `_shuffle_words` replays (else walks fall back
    to shuffling, slower but alike)."""
    assert walk_module._shuffle_words_agree()


@pytest.mark.parametrize("numpy", [True, False])
def test_advance_as_shuffle_at_block_edges(numpy, monkeypatch):
    """Lengths at and around powers of two, where the bits per draw change, with the
    draws replayed by numpy (where installed) and without."""
    if numpy:
        pytest.importorskip("numpy")
    else:
        monkeypatch.setattr(walk_module, "_np", None)
    for k in range(1, 18):
        for n in (2**k - 1, 2**k, 2**k + 1):
            for seed in range(3):
                a, b = random.Random(seed), random.Random(seed)
                a.shuffle(list(range(n)))
                walk_module._shuffle_words(b, n)
                assert a.getstate() == b.getstate(), n
