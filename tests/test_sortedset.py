from hypothesis import given
from hypothesis import strategies as st

from kvsm import sortedset
from kvsm.sortedset import PSortedSet, RunSet

ops = st.lists(st.tuples(st.booleans(), st.integers(0, 2000)), max_size=1500)


@given(ops)
def test_matches_a_sorted_list_and_old_versions_stay_valid(seq):
    s = PSortedSet()
    ref: set[int] = set()
    versions = []
    for add, x in seq:
        versions.append((s, sorted(ref)))
        if add:
            s = s.add(x)
            ref.add(x)
        elif x in ref:
            s = s.remove(x)
            ref.discard(x)
        else:
            assert s.discard(x) is s
    assert list(s) == sorted(ref) and len(s) == len(ref)
    for old, expect in versions[:: max(1, len(versions) // 20)]:
        assert list(old) == expect


@given(st.sets(st.integers(0, 500), max_size=800), st.integers(-1, 501))
def test_neighbour_queries(items, probe):
    s = PSortedSet(items)
    lower = [x for x in items if x < probe]
    upper = [x for x in items if x >= probe]
    assert s.floor_lt(probe) == (max(lower) if lower else None)
    assert s.ceil_ge(probe) == (min(upper) if upper else None)
    assert list(s.iter_from(probe)) == sorted(x for x in items if x > probe)
    assert (probe in s) == (probe in items)
    ordered = sorted(items)
    for i in range(0, len(ordered), 37):
        assert s[i] == ordered[i]


@given(st.sets(st.integers(0, 3000), max_size=1200), st.lists(st.integers(0, 3000), max_size=700), st.integers(0, 400))
def test_bulk_operations_match_one_at_a_time(base, more, k):
    s = PSortedSet(base)
    bulk = s.add_many(more)
    one = s
    for x in more:
        one = one.add(x)
    assert list(bulk) == list(one) == sorted(base | set(more)) and len(bulk) == len(one)
    if k <= len(bulk):
        taken, rest = bulk.take_first(k)
        assert list(taken) == sorted(base | set(more))[:k] and list(rest) == sorted(base | set(more))[k:]
        assert len(rest) == len(bulk) - k


def test_chunks_split_when_large():
    s = PSortedSet()
    for i in range(5 * sortedset.CHUNK):
        s = s.add(i)
    assert len(s._chunks) > 1 and list(s) == list(range(5 * sortedset.CHUNK))
    assert s.first() == 0


@given(st.lists(st.tuples(st.integers(0, 5000), st.integers(1, 40)), max_size=900), st.integers(1, 45))
def test_run_set_first_fit_is_the_lowest_based_run_long_enough(runs, length):
    rs = RunSet()
    for r in runs:
        rs = rs.add(r)
    rs = rs.add_many(runs[:50])
    expect = next((r for r in sorted(set(runs)) if r[1] >= length), None)
    assert rs.first_fit(length) == expect
    if runs:
        rs2 = rs.remove(sorted(set(runs))[0])
        expect2 = next((r for r in sorted(set(runs))[1:] if r[1] >= length), None)
        assert rs2.first_fit(length) == expect2
        taken, rest = rs.take_first(min(3, len(rs)))
        assert rest.first_fit(length) == next((r for r in sorted(set(runs))[len(taken):] if r[1] >= length), None)
