from contextlib import contextmanager

from hypothesis import given, settings
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
    for i in range(5 * sortedset.B * sortedset.B):
        s = s.add(i)
    assert len(s._chunks) > 1 and list(s) == list(range(5 * sortedset.B * sortedset.B))
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


# ---- the B+ tree's shape, with small nodes so that a few hundred elements make a deep tree


@contextmanager
def _small_nodes(b: int = 8):
    saved = sortedset.B, sortedset._MERGE
    sortedset.B, sortedset._MERGE = b, b // 4
    try:
        yield
    finally:
        sortedset.B, sortedset._MERGE = saved


def _check_shape(s: PSortedSet) -> None:
    """Every leaf at the set's height, no node over 2 * B entries, each inner node's
    maxes, counts and summaries those of its children, the elements strictly sorted."""

    def visit(node, height):
        if height == 0:
            assert isinstance(node, tuple) and 0 < len(node) <= 2 * sortedset.B
            return len(node)
        assert 0 < len(node.kids) <= 2 * sortedset.B
        assert node.maxes == tuple(sortedset._top(k) for k in node.kids)
        if s.HAS_AUX:
            assert node.aux == tuple(s._summary(k) for k in node.kids)
        n = sum(visit(k, height - 1) for k in node.kids)
        assert node.n == n
        return n

    if len(s):
        assert visit(s._root, s._height) == len(s)
    else:
        assert s._root == () and s._height == 0
    items = s.to_list()
    assert all(a < b for a, b in zip(items, items[1:])) and len(items) == len(s)


@settings(max_examples=60)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 600)), max_size=700))
def test_deep_trees_match_a_sorted_list(seq):
    """Adds, removes, bulk adds and takes from the front on trees several levels deep: the
    same elements as a sorted list, every query alike, the tree's shape kept, and every
    older version unchanged."""
    with _small_nodes():
        s = PSortedSet(range(0, 600, 3))
        ref = set(range(0, 600, 3))
        versions = []
        for op, x in seq:
            versions.append((s, sorted(ref)))
            if op == 0:
                s = s.add(x)
                ref.add(x)
            elif op == 1:
                s = s.discard(x)
                ref.discard(x)
            elif op == 2:
                more = range(x, x + 40, 2)
                s = s.add_many(more)
                ref.update(more)
            else:
                k = min(x % 50, len(ref))
                taken, s = s.take_first(k)
                assert list(taken) == sorted(ref)[:k]
                ref -= set(taken)
        _check_shape(s)
        ordered = sorted(ref)
        assert s.to_list() == ordered and len(s) == len(ordered)
        for probe in (-1, 0, 7, 301, 599, 700):
            assert s.floor_lt(probe) == max((v for v in ordered if v < probe), default=None)
            assert s.ceil_ge(probe) == min((v for v in ordered if v >= probe), default=None)
            assert list(s.iter_from(probe)) == [v for v in ordered if v > probe]
            assert (probe in s) == (probe in ref)
        for i in range(0, len(ordered), 7):
            assert s[i] == ordered[i]
        for old, expect in versions[:: max(1, len(versions) // 10)]:
            assert old.to_list() == expect


@settings(max_examples=40)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 3000), st.integers(1, 40)), max_size=500), st.integers(1, 45))
def test_deep_run_sets_find_the_first_fit(ops, length):
    with _small_nodes():
        rs = RunSet()
        ref: set[tuple[int, int]] = set()
        for add, base, n in ops:
            run = (base, n)
            if add:
                rs, _ = rs.add(run), ref.add(run)
            else:
                victim = min(ref, default=None)
                if victim is not None:
                    rs, _ = rs.remove(victim), ref.discard(victim)
        _check_shape(rs)
        assert rs.first_fit(length) == next((r for r in sorted(ref) if r[1] >= length), None)


def test_iteration_is_lazy_and_in_order():
    """Iterating a deep tree yields its elements in order, the first without reading the
    rest (a victim order read from its front)."""
    with _small_nodes():
        s = PSortedSet(range(5000))
        assert s._height >= 3 and list(s) == list(range(5000))

        class Unread:
            """A subtree that fails if anything reads it."""

            @property
            def kids(self):
                raise AssertionError("iteration read past what it yielded")

        root = s._root
        s._root = sortedset._Inner((root.kids[0], Unread()), root.maxes[:2], root.n, None)
        it = iter(s)
        assert [next(it) for _ in range(3)] == [0, 1, 2]
