"""`kvsm walk`: a seeded random walk over the enabled transitions.

Each step picks a transition at random, weighted by the config's `walk_weights`
(default 1), among the transitions that have an enabled instance, then one of its
enabled instances uniformly (for `Arrive`: a prompt drawn uniformly from the config's
list). The same config and seed give the
same walk, byte for byte.

A step costs what the walk tries, not the tree's size: `Reserve`'s candidates (one per
node of `backup_index`) are shuffled as node ids and each one's `fits` is decided when
it is tried, once per page length; a family the open commit round blocks is not tried
at all, only its random draws are made (for `Reserve`, the shuffle's draws without the
list). What remains linear is the draws of a blocked `Reserve`'s shuffle: about 0.02-0.05 us
a candidate with numpy, 0.15-0.2 us without.
"""

from __future__ import annotations

import random
from typing import Callable, Iterator

from .config import Config
from .state import ClusterState, Rejected, initial_state
from .transitions import REGISTRY, Transition, arrive_step, names_for
from .transitions.registry import cluster_view, waits_for_round
from .transitions.reserve import FitsByLength, insert_triggers

# the `Arrive` a walk may take in a state, if any (`step`'s `arrival`)
Arrival = Callable[[ClusterState], "Transition | None"]


def _candidates(
    state: ClusterState, name: str, rng: random.Random, blocked: bool = False, arrival: Arrival | None = None
) -> Iterator[Transition]:
    """A family's instances in the walk's random order; large families are sampled first.
    With `blocked` (every instance is known to be disabled), nothing is yielded but the
    random draws are the same, so that the walk goes on as if each had been rejected.
    `arrival`, where given, is the one `Arrive` the walk may take (a workload's next
    request, `kvsm sim --schedule walk`), instead of a draw from the config's prompts."""
    spec = REGISTRY[name]
    if name == "Arrive" and arrival is not None:
        t = arrival(state)
        if t is not None and not blocked:
            yield t
        return
    if name == "Arrive" and state.config.prompts:
        # one prompt drawn from the config's list (a list of 100k prompts is not
        # enumerated at every step); a rejected arrival rejects them all
        p = rng.choice(state.config.prompts)
        if not blocked:
            yield arrive_step(state.next_rid, p.pages, p.out_pages, p.ns)
        return
    if name == "Reserve":
        yield from _reserve_candidates(state, rng, blocked)
        return
    cands = list(spec.candidates(state))
    rng.shuffle(cands)
    if not blocked:
        yield from cands


def _reserve_candidates(state: ClusterState, rng: random.Random, blocked: bool) -> Iterator[Transition]:
    """`Reserve` has a candidate for every node of `state.backup_index` (thousands on a
    large tree): the node ids are drawn and shuffled, and a candidate's `fits` is decided
    only when the walk tries it, once per page length (`FitsByLength`). The order is the
    one `reserve_candidates` shuffled would give: a shuffle's permutation depends only on
    the list's length."""
    if insert_triggers(state.config):
        return  # no Reserve of its own: Insert takes the backups
    pool = state.backup_index
    view = cluster_view(state.config)
    fits = FitsByLength(state, view)
    if len(pool) > 16:
        # try a few drawn at random before the whole shuffled pool (decided from the
        # cluster's view None, as these draws always have been)
        drawn = fits if view is None else FitsByLength(state, None)
        for _ in range(8):
            nid = pool[rng.randrange(len(pool))]
            if not blocked:
                yield Transition.make("Reserve", node=nid, fits=drawn(nid))
    if blocked:
        advance_as_shuffle(rng, len(pool))
        return
    ids = pool.to_list()
    rng.shuffle(ids)
    for nid in ids:
        yield Transition.make("Reserve", node=nid, fits=fits(nid))


def _shuffle_words(rng: random.Random, n: int) -> None:
    """Advance `rng` as `rng.shuffle` of an `n`-item list does, without the list: that
    shuffle draws `_randbelow(m)` for m = n down to 2, each a `getrandbits(m.bit_length())`
    repeated until below m, and every such call takes one 32-bit word of the generator.
    The words are drawn by the thousand in one call and the rejections replayed on
    them; the generator is then set back and advanced by exactly the words used."""
    m = n
    while m >= 2:
        k = m.bit_length()
        lo = max(2, 1 << (k - 1))  # every m down to lo has k bits
        while m >= lo:
            saved = rng.getstate()
            if _np is not None and k >= 13:
                m, used = _replay_words_np(rng, m, lo, k)
            else:
                m, used = _replay_words(rng, m, lo, k)
            if used is not None:  # the block ended inside the words drawn
                rng.setstate(saved)
                rng.getrandbits(32 * used)
        m = lo - 1


def _replay_words(rng: random.Random, m: int, lo: int, k: int) -> tuple[int, int | None]:
    """Draws of `k` bits for m, m - 1, ... down to lo, on a batch of words: the m reached
    and, where it went below lo, the words that took (else None: all were used)."""
    shift = 32 - k
    # a word w gives (w >> shift) < m exactly when w < m << shift
    bound, unit, end = m << shift, 1 << shift, lo << shift
    count = 2 * (m - lo + 1) + 34  # each m takes 2 words on average at worst
    words = memoryview(rng.getrandbits(32 * count).to_bytes(4 * count, "little")).cast("I")
    for used, w in enumerate(words, 1):
        if w < bound:
            bound -= unit
            if bound < end:
                return lo - 1, used
    return bound >> shift, None


def _replay_words_np(rng: random.Random, m: int, lo: int, k: int) -> tuple[int, int | None]:
    """`_replay_words` on a chunk of words at once: with m0 the m at its start, a value
    below m0 - count + 1 is accepted whatever came before it in the chunk and one at or
    above m0 is rejected; only the few in between are decided one by one, against m0
    less the acceptances before them."""
    np = _np
    count = min(2 * (m - lo + 1) + 34, 16 << (k // 2))
    words = np.frombuffer(rng.getrandbits(32 * count).to_bytes(4 * count, "little"), dtype="<u4")
    v = (words >> (32 - k)).astype(np.int64)
    sure = m - count + 1
    acc = (v < sure).astype(np.int64)
    between = np.flatnonzero((v >= sure) & (v < m))
    if len(between):
        before = np.cumsum(acc)[between].tolist()
        extra = 0
        for j, vj, b in zip(between.tolist(), v[between].tolist(), before):
            if vj < m - b - extra:
                acc[j] = 1
                extra += 1
    need = m - lo + 1
    taken = np.cumsum(acc)
    if taken[-1] >= need:
        return lo - 1, int(np.searchsorted(taken, need)) + 1
    return m - int(taken[-1]), None


try:  # numpy, where installed, replays long shuffles' draws about ten times faster
    import numpy as _np
except ImportError:  # pragma: no cover - numpy comes with the GPU backend's torch
    _np = None


_SHUFFLE_WORDS_AGREE: bool | None = None


def advance_as_shuffle(rng: random.Random, n: int) -> None:
    """Advance `rng` exactly as `rng.shuffle` of an `n`-item list would: by `_shuffle_words`
    where it agrees with this Python's `random.shuffle` (checked once), else by shuffling."""
    global _SHUFFLE_WORDS_AGREE
    if _SHUFFLE_WORDS_AGREE is None:
        _SHUFFLE_WORDS_AGREE = _shuffle_words_agree()
    if _SHUFFLE_WORDS_AGREE:
        _shuffle_words(rng, n)
    else:
        rng.shuffle(list(range(n)))


def _shuffle_words_agree() -> bool:
    for n in (0, 1, 2, 3, 17, 100, 1025, 9000):
        a, b = random.Random(n), random.Random(n)
        a.shuffle(list(range(n)))
        _shuffle_words(b, n)
        if a.getstate() != b.getstate():
            return False
    return True


def step(
    state: ClusterState, rng: random.Random, weights: dict[str, float], arrival: Arrival | None = None
) -> tuple[Transition, ClusterState] | None:
    """One step of a walk: a family drawn by weight among those not yet found disabled,
    then its instances in random order until one applies; None where none is enabled."""
    names = [n for n in names_for(state.config) if weights.get(n, 1.0) > 0]
    while names:
        w = [weights.get(n, 1.0) for n in names]
        name = rng.choices(names, weights=w)[0]
        spec = REGISTRY[name]
        for t in _candidates(state, name, rng, waits_for_round(spec, state), arrival):
            try:
                return t, spec.apply(state, t)
            except Rejected:
                continue
        names.remove(name)
    return None


def walk(cfg: Config, steps: int, seed: int, state: ClusterState | None = None) -> Iterator[tuple[Transition, ClusterState]]:
    """Up to `steps` transitions; stops early where nothing is enabled."""
    rng = random.Random(seed)
    weights = dict(cfg.walk_weights)
    s = state if state is not None else initial_state(cfg)
    for _ in range(steps):
        nxt = step(s, rng, weights)
        if nxt is None:
            return
        yield nxt
        s = nxt[1]
