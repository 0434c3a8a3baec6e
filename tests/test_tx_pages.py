"""The transaction's page allocation and freeing: the fast paths give what the plain
per-page rules give (page at position k in lane k mod R, each lane's lowest free pages
in order; freed pages back in their own lanes)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings, strategies as st

from kvsm.config import load_config
from kvsm.state import Rejected, initial_state, lane_of
from kvsm.tx import Tx, _by_lane

_CFG = load_config("default")


def _outcome(f):
    try:
        return f()
    except Rejected as e:
        return ("rejected", str(e))


@settings(max_examples=200, deadline=None)
@given(R=st.integers(1, 5), allocs=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 25)), min_size=1, max_size=6))
def test_alloc_positions_is_alloc_lanes_of_the_positions_lanes(R, allocs):
    s = initial_state(replace(_CFG, R=R, L1=24))
    for start, n in allocs:
        a, b = Tx(s), Tx(s)
        got = _outcome(lambda: a.alloc_positions(start, n))
        want = _outcome(lambda: b.alloc_lanes([lane_of(start + j, R) for j in range(n)]))
        assert got == want
        if isinstance(got, tuple) and got and got[0] == "rejected":
            continue
        assert [tuple(f) for f in a.dev_free] == [tuple(f) for f in b.dev_free]
        s = a.commit()


@given(R=st.integers(2, 6), pages=st.one_of(
    st.builds(lambda b, n: tuple(range(b, b + n)), st.integers(0, 500), st.integers(1, 30)),
    st.lists(st.integers(0, 500), min_size=1, max_size=30, unique=True).map(tuple),
))
def test_pages_grouped_by_lane_are_each_page_in_its_own_lane_once(R, pages):
    groups = _by_lane(pages, R)
    assert len({lane for lane, _ in groups}) == len(groups)
    assert sorted(p for _, ps in groups for p in ps) == sorted(pages)
    assert all(p % R == lane for lane, ps in groups for p in ps)
