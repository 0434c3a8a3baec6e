"""kvsm.checking: the per-transition checks and the fast from-scratch check agree with
kvsm.invariants on correct runs, and planted faults are caught: at once when the
transition wrote the corrupted field, by the next from-scratch check (which names the
transition that broke the state) when it did not."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from kvsm.checking import Checker
from kvsm.config import load_config
from kvsm.digest_sums import recompute_sums
from kvsm.invariants import Cache, holds, violations
from kvsm.log import Header, LogWriter, read_log
from kvsm.replay import replay
from kvsm.sim import SimOptions, simulate
from kvsm.sim.stops import SimInvariantError
from kvsm.state import ROOT_ID, Rejected, initial_state, lane_of
from kvsm.transitions import REGISTRY, apply
from kvsm.tx import Tx
from kvsm.walk import walk
from kvsm.writes import committed, written_between

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> list[Path]:
    """Short runs that reach every family: the simulator with L3 and every fault, with
    L1/L2 and write faults, and walks of the small, l3 and busy-L3 configs."""
    d = tmp_path_factory.mktemp("checking")
    out = []
    for name, opts in {
        "l3": SimOptions(workload="multi-turn", config="default", requests=40, ranks=4, tiers="l1,l2,l3", seed=3,
                         l1_pages=16, l2_pages=48, l3_pages=60, faults="disk:0.02,slow:0.1,stall:0.05,abort:0.1,burst:0.05"),
        "l2": SimOptions(workload="thrash", config="small", requests=40, tiers="l1,l2", seed=5, l1_pages=8, l2_pages=24,
                         faults="slow:0.1,stall:0.05,abort:0.1"),
        # hits carried from the match to the load-back, pinned (carry_host_hit)
        "carry": SimOptions(workload="multi-turn", config="default", requests=60, tiers="l1,l2", seed=3, l1_pages=16,
                            l2_pages=64, settings=(("carry_host_hit", True), ("prepared_backups", True))),
    }.items():
        simulate(opts, d / f"{name}.jsonl")
        out.append(d / f"{name}.jsonl")
    for cfg in ("small", "l3", str(DATA / "l3_busy.toml")):
        c = load_config(cfg)
        s0 = initial_state(c)
        p = d / f"walk-{c.name}.jsonl"
        with LogWriter(p, Header(config=c, seed=1, source="walk", initial_digest=s0.digest(), extra={})) as w:
            for t, s in walk(c, 600, 1, s0):
                w.write(t, s)
        out.append(p)
    return out


def _initial(path: Path):
    return initial_state(read_log(path)[0].config)


def _states(path: Path, s0=None):
    """(line, transition, state before, state after) along a log from `s0` (the initial state)."""
    h, stream = read_log(path)
    s = s0 if s0 is not None else initial_state(h.config)
    for lineno, _, t, _ in stream:
        nxt = apply(s, t)
        yield lineno, t, s, nxt
        s = nxt


def test_the_per_transition_checks_find_nothing_along_correct_runs(logs):
    for p in logs:
        s0 = _initial(p)
        ck = Checker(s0, every=10**9)
        assert ck.start() is None
        agreement = 0
        for lineno, t, _, s in _states(p, s0):
            assert ck.step(t, s, lineno) is None, p
            agreement += REGISTRY[t.name].agreement
        assert ck.finish() is None
        # one from-scratch check at the start, one per agreement point, one at the end
        assert ck.stats.full == 1 + agreement + (1 if ck.stats.step and not REGISTRY[t.name].agreement else 0)
        assert ck.stats.step == lineno - 1


def test_the_fast_from_scratch_check_agrees_with_the_reference_on_correct_and_corrupted_states(logs):
    rng = random.Random(7)
    corrupt = [_bump_lock, _wrong_dev_content, _leak_device_page, _wrong_ondev, _longer_object, _wrong_sums, _wrong_disk_entry,
               _wrong_host_content, _wrong_child_entry, _wrong_pin, _late_stamp, _wrong_hashes, _cycle, _stale_hit]
    checked = 0
    for p in logs:
        cache = Cache()  # (one along the run, as the checker keeps it)
        for k, (_, _, _, s) in enumerate(_states(p)):
            if k % 9:
                continue
            assert holds(s, cache) and violations(s) == [], p
            for f in rng.sample(corrupt, 3):
                bad = f(s)
                if bad is not None:
                    assert not holds(bad, cache) and violations(bad), (p, f.__name__)
                    assert not holds(bad), (p, f.__name__)  # (and with nothing remembered)
                    checked += 1
    assert checked > 100


def test_what_the_from_scratch_check_remembers_is_dropped_when_a_page_or_disk_entry_it_rests_on_changes(logs):
    """`holds` remembers which nodes' pages it found holding their KV (and which durable
    keys it found on the disks) until its mirrors see one of them change: a state that
    differs from a clean one only in such a page or entry (every node the same object;
    the digest sums made to agree, so that only the page or entry check can see it) is
    still rejected, and the clean state accepted again after it."""
    caught = {"device page": 0, "host page": 0, "disk entry": 0}
    for p in logs:
        cache = Cache()
        for k, (_, _, _, s) in enumerate(_states(p)):
            if k % 7:
                continue
            for what, bad in (("device page", _wrong_dev_content(s)), ("host page", _wrong_host_content(s)),
                              ("disk entry", _missing_durable_entry(s))):
                if bad is None:
                    continue
                if bad.sums is not None:
                    bad = replace(bad, sums=recompute_sums(bad))
                assert bad.nodes is s.nodes
                assert holds(s, cache), p
                assert not holds(bad, cache) and violations(bad), (p, what)
                caught[what] += 1
            assert holds(s, cache), p
    assert all(n > 10 for n in caught.values()), caught


def test_the_mirror_of_a_map_follows_it_whatever_the_order_of_its_keys():
    """`Mirror.update` reports every entry of the new map that differs from the last, and
    every one gone, and ends equal to the map: with keys whose hashes collide (a map keeps
    no fixed order among them), many changes at once (it then looks every key up), and a
    walk a key at a time."""
    from immutables import Map

    from kvsm.invariants.mirror import Mirror

    class Key:
        __slots__ = ("v",)

        def __init__(self, v):
            self.v = v

        def __hash__(self):
            return self.v % 3

        def __eq__(self, other):
            return isinstance(other, Key) and other.v == self.v

    rng = random.Random(11)
    makers = (Key, int, lambda x: (x % 4, x * 7919))
    for trial in range(600):
        make = makers[trial % 3]
        mirror = Mirror(block=rng.choice([1, 4, 32]))
        m = Map()
        copy = None
        for _ in range(10):
            if rng.random() < 0.1:
                m = Map({make(rng.randrange(200)): 1 for _ in range(rng.randrange(50))})
            else:
                mm = m.mutate()
                for _ in range(rng.randrange(40)):
                    key = make(rng.randrange(200))
                    if rng.random() < 0.5:
                        mm[key] = rng.randrange(5)
                    elif key in mm:
                        del mm[key]
                m = mm.finish()
            diff = mirror.update(m)
            if diff is None:
                copy = dict(m.items())
            else:
                changed, gone = diff
                assert len({k for k, _, _ in changed} | {k for k, _ in gone}) == len(changed) + len(gone)
                for key, old, new in changed:
                    assert copy.get(key) == old and old != new
                    copy[key] = new
                for key, old in gone:
                    assert copy.pop(key) == old
            assert mirror.d == copy == dict(m.items())


# ---- corruptions of a state (None where the state has nothing to corrupt) ---------------------


def _some_node(s, pred=lambda n: True):
    for nid, n in s.nodes.items():
        if nid != ROOT_ID and pred(n):
            return nid, n
    return None, None


def _bump_lock(s):
    nid, n = _some_node(s)
    return None if n is None else replace(s, nodes=s.nodes.set(nid, n.with_(lock=n.lock + 1)))


def _wrong_dev_content(s):
    nid, n = _some_node(s, lambda n: bool(n.dev))
    return None if n is None else replace(s, dev_content=s.dev_content.set(n.dev[0], 12345))


def _leak_device_page(s):
    for lane, free in enumerate(s.dev_free):
        if len(free):
            lanes = list(s.dev_free)
            lanes[lane] = free.remove(free.first())
            return replace(s, dev_free=tuple(lanes))
    return None


def _wrong_ondev(s):
    nid, n = _some_node(s)
    return None if n is None else replace(s, nodes=s.nodes.set(nid, n.with_(ondev=n.ondev + 1)))


def _longer_object(s):
    for key, o in s.objects.items():
        return replace(s, objects=s.objects.set(key, o.with_(length=o.length + 1)))
    return None


def _wrong_sums(s):
    if s.sums is None:
        return None
    return replace(s, sums=(s.sums[0] + 1,) + s.sums[1:])


def _wrong_host_content(s):
    nid, n = _some_node(s, lambda n: n.host is not None)
    if n is None or n.host not in s.objects or not s.objects[n.host].length:
        return None
    return replace(s, host_content=s.host_content.set(s.objects[n.host].base, 12345))


def _wrong_child_entry(s):
    """A child entry that names another node (which then is its parent's child twice)."""
    nid, n = _some_node(s, lambda n: len(n.children) > 0)
    if n is None:
        return None
    other, _ = _some_node(s, lambda m: m.id != nid and m.id not in n.children.values())
    if other is None:
        return None
    sym = next(iter(n.children.keys()))
    return replace(s, nodes=s.nodes.set(nid, n.with_(children=n.children.set(sym, other))))


def _wrong_pin(s):
    nid, n = _some_node(s)
    return None if n is None else replace(s, nodes=s.nodes.set(nid, n.with_(pin=n.pin + 1)))


def _stale_hit(s):
    """A carried host hit (carry_host_hit) that names a node no longer in the tree, its
    pin let go (invariant 6; the victim index and the sums then differ too)."""
    q = next((q for q in s.requests.values() if q.hit), None)
    if q is None:
        return None
    nodes = s.nodes.set(q.hit, s.nodes[q.hit].with_(pin=s.nodes[q.hit].pin - 1)) if q.hit_pin else s.nodes
    return replace(s, nodes=nodes, requests=s.requests.set(q.id, q.with_(hit=s.next_id, hit_pin=False)))


def _late_stamp(s):
    nid, n = _some_node(s)
    return None if n is None else replace(s, nodes=s.nodes.set(nid, n.with_(touched=s.clock + 1)))


def _wrong_hashes(s):
    nid, n = _some_node(s)
    return None if n is None else replace(s, nodes=s.nodes.set(nid, n.with_(hashes=n.hashes[:-1] + (n.hashes[-1] ^ 1,))))


def _cycle(s):
    """A node and its child made each other's parent (each its parent's child under its first
    page, so only the walk to the root finds it)."""
    nid, n = _some_node(s, lambda n: len(n.children) > 0)
    if n is None:
        return None
    cid = next(iter(n.children.values()))
    c = s.nodes[cid]
    p = s.nodes[n.parent]
    nodes = s.nodes.set(n.parent, p.with_(children=p.children.delete(n.key[0])))
    nodes = nodes.set(nid, n.with_(parent=cid, children=n.children.delete(c.key[0])))
    nodes = nodes.set(cid, c.with_(children=c.children.set(n.key[0], nid)))
    return replace(s, nodes=nodes)


def _missing_durable_entry(s):
    """A disk entry that a durable node needs, gone (and its rank's count of entries with it)."""
    nid, n = _some_node(s, lambda n: n.durable)
    if n is None:
        return None
    r = lane_of(0, s.config.R)
    used = list(s.l3_used)
    used[r] -= 1
    return replace(s, l3=s.l3.delete((r, n.hashes[0])), l3_used=tuple(used))


def _wrong_disk_entry(s):
    for key in s.l3.keys():
        return replace(s, l3=s.l3.set(key, key[1] + 1))
    return None


# ---- planted faults ------------------------------------------------------------------------------


def _corrupting(name, corrupt, at):
    """`name`'s transition that, its `at`-th time (or whenever `at(t)` holds), also
    corrupts what it wrote (a second transaction within the same transition, so the
    checker sees both writes)."""
    right = REGISTRY[name]
    seen = [0]

    def apply_(s, t):
        s2 = right.apply(s, t)
        seen[0] += 1
        if (at(t) if callable(at) else seen[0] == at) is False:
            return s2
        tx = Tx(s2)
        corrupt(tx, s, s2, t)
        return tx.commit()

    return replace(right, apply=apply_)


def _insert_lock(tx, s, s2, t):
    nid = s2.requests[t.arg("rid")].node
    tx.update(nid, lock=tx.node(nid).lock + 1)


def _insert_content(tx, s, s2, t):
    nid = s2.requests[t.arg("rid")].node
    tx.fill_dev(tx.node(nid).dev[-1], 4242)


def _commit_length(tx, s, s2, t):
    nid = s.writes[0]
    key = s2.nodes[nid].host
    tx.objects.set(key, tx.objects[key].with_(length=tx.objects[key].length + 1))


def _write_done_count(tx, s, s2, t):
    tx.write_done[t.rank] = len(tx.writes) + 1


PLANTED = {
    "an Insert that over-locks its node (3 Locks)": ("Insert", _insert_lock, "3 Locks"),
    "an Insert that fills a page with the wrong KV (7 Content)": ("Insert", _insert_content, "7 Content"),
    "a Commit that lengthens the object (6 HostPages)": ("Commit", _commit_length, "6 HostPages"),
    "a WriteDone that counts past the writes (4 Pending)": ("WriteDone", _write_done_count, "4 Pending"),
}


def _rewrite(log: Path, out: Path) -> None:
    """The log's transitions applied by the model as it is now (a planted fault included),
    written with the digests that gives (up to the first transition it rejects)."""
    h, stream = read_log(log)
    s = initial_state(h.config)
    with LogWriter(out, Header(config=h.config, seed=h.seed, source=h.source, initial_digest=s.digest(), extra=h.extra)) as w:
        for _, _, t, _ in stream:
            try:
                s = apply(s, t)
            except Rejected:
                break
            w.write(t, s)


@pytest.mark.parametrize("what", sorted(PLANTED))
def test_a_corrupted_field_the_transition_wrote_is_caught_right_after_it(what, logs, monkeypatch, tmp_path):
    name, corrupt, invariant = PLANTED[what]
    log = logs[0]  # the L3 simulator run: every one of these transitions happens there
    lines = [lineno for lineno, t, _, _ in _states(log) if t.name == name]
    monkeypatch.setitem(REGISTRY, name, _corrupting(name, corrupt, 2))
    _rewrite(log, tmp_path / "planted.jsonl")
    monkeypatch.setitem(REGISTRY, name, _corrupting(name, corrupt, 2))  # counting afresh
    res = replay(tmp_path / "planted.jsonl", check=True)
    assert not res.ok and res.first_mismatch is None, res.first_mismatch
    v = res.violations[0]
    assert v["line"] == lines[1] and v["transition"].startswith(name)
    assert all(x["line"] == lines[1] for x in res.violations)
    assert any(x["violation"].startswith(invariant) for x in res.violations), res.violations


def test_a_corrupted_field_the_transition_did_not_write_is_caught_by_the_next_full_check(logs):
    """The state after transition k gets one node's lock changed outside the transaction
    (the writes recorded are the transition's own): the per-transition checks cannot see
    it; the next from-scratch check (an agreement point, every 16 transitions here, or
    the end) does, and names transition k."""
    log = logs[1]
    every = 16
    s0 = _initial(log)
    ck = Checker(s0, every=every)
    assert ck.start() is None
    k = None
    s = None
    found = None
    for lineno, t, before, after in _states(log, s0):
        written = written_between(before.written, after.written)
        # a leaf right under the root: no other node's lock relation reads its lock
        nid, n = _some_node(after, lambda n: n.id not in written[0] and n.lock == 0 and n.parent == ROOT_ID and not len(n.children))
        if k is None and lineno > 100 and t.name == "Arrive" and n is not None:
            after = replace(after, nodes=after.nodes.set(nid, n.with_(lock=1)))
            object.__setattr__(after, "written", committed(before, written))  # as if the transition had written this state
            k = lineno
        elif k is not None:
            after = apply(s, t)
        s = after
        found = ck.step(t, after, lineno)
        if found is not None:
            break
    else:
        found = ck.finish()
    assert k is not None and found is not None and found.at == k and found.how == "located"
    assert any(v.startswith("3 Locks") for v in found.violations)
    assert lineno - k <= every


def test_sim_check_stops_a_run_at_the_planted_fault(monkeypatch):
    # every rank's replica applies the same faulty Insert (no divergence to stop the run first)
    monkeypatch.setitem(REGISTRY, "Insert", _corrupting("Insert", _insert_lock, lambda t: t.arg("rid") == 2))
    opts = SimOptions(workload="multi-turn", config="small", requests=20, tiers="l1,l2", seed=1, l1_pages=16, l2_pages=32, check=True)
    with pytest.raises(SimInvariantError, match=r"after log transition #\d+ Insert\(rid=2\): 3 Locks"):
        simulate(opts)


def test_a_state_whose_writes_are_not_known_is_checked_from_scratch(logs):
    """A state the checker cannot trace to the previous one by the commits recorded on it
    (here: changed after the fact, with no record of it) gets the from-scratch check at
    once."""
    log = logs[1]
    s0 = _initial(log)
    ck = Checker(s0, every=10**9, at_agreement=False)
    assert ck.start() is None
    for lineno, t, _, after in _states(log, s0):
        if lineno == 30:
            nid, n = _some_node(after)
            after = replace(after, nodes=after.nodes.set(nid, n.with_(touched=after.clock + 5)))
            found = ck.step(t, after, lineno)
            assert found is not None and found.at == lineno and found.how == "full"
            assert any(v.startswith("10 Counts") for v in found.violations)
            return
        assert ck.step(t, after, lineno) is None
    raise AssertionError("the log is too short")


def test_a_step_that_breaks_ownership_and_a_state_invariant_is_reported_with_both():
    """The checker names every invariant a step breaks, its effects' (11 Ownership) and
    its state's, as the whole-state check does: the failed `ReloadDone` of
    `reload_fail_double_free` (the corpus case) poisons a shared host page from one rank
    and leaves it free while its object holds it."""
    from dataclasses import replace as _replace

    from kvsm.corpus.format import read_case
    from kvsm.invariants import step_violations

    case = read_case(str(Path(__file__).resolve().parents[1] / "traces" / "defect-reload-fail-double-free.txt"))
    cfg = _replace(case.config, bug=case.bug)
    s = initial_state(cfg)
    checker = Checker(s)
    found = None
    for t in case.steps:
        s = apply(s, t)
        found = checker.step(t, s)
        if found is not None:
            break
    assert found is not None and t is case.steps[-1]
    names = [v.split(":")[0] for v in found.violations]
    assert "11 Ownership" in names and "6 HostPages" in names
    assert step_violations(t.rank, s) and [v.split(":")[0] for v in violations(s)] == ["6 HostPages"]
