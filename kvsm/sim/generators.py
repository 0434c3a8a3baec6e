"""Seeded synthetic workloads in the shape of a Mooncake trace.

Each generator draws everything (arrivals, lengths, which prefix a request reuses)
from one `random.Random` seeded by the generator's name and the seed, so a (name,
seed, count, device_pages) gives the same requests on every machine. Prompts are
sequences of content blocks; `PrefixIds` turns them into prefix hash ids exactly as
a Mooncake trace numbers them (an id stands for its block and every block before it),
so two requests share an id only where they share the whole prefix.

- `system-prompts`: a few shared system prompts (popularity skewed), each followed by
  a unique user message.
- `multi-turn`: chats; every turn's prompt is the previous prompt, the previous
  answer and a new user message, so each turn extends the previous one.
- `long-doc`: long documents, each queried repeatedly with short unique questions.
- `thrash`: adversarial: a cyclic scan over long prefixes whose total is about 1.5x
  the device capacity (the worst case for LRU: every prefix is evicted just before
  it comes back), sharing a short common head so the tree keeps splitting, mixed
  with a few hot short prompts.
- `prefix-tree`: the shape of the models TLC checks: every prompt is a path from the
  root of one small trie (2 or 3 children a node, 2 to 4 levels, each node one or two
  blocks), drawn uniformly, with short answers. Every prompt shares its upper levels
  with others and comes back often, so with small tiers its prefixes are evicted,
  spilled, reloaded and matched again under upper levels that stayed, or did not.
- `config-prompts`: the config's own `prompts` list (the requests of the model TLC
  checks), each request one of them drawn uniformly (`config_prompts`).
"""

from __future__ import annotations

import random
from typing import Callable, Sequence

from ..config import Prompt
from .trace import MOONCAKE_BLOCK_TOKENS, TraceRequest, Workload

BLOCK = MOONCAKE_BLOCK_TOKENS
ARRIVALS_PER_S = 4.0  # Poisson arrivals, about the rate of the Mooncake synthetic trace


class PrefixIds:
    """Prefix hash ids: (id of the prefix so far, next content block) -> id."""

    def __init__(self) -> None:
        self._ids: dict[tuple[int, int], int] = {}

    def ids(self, blocks: list[int]) -> tuple[int, ...]:
        out = []
        prev = -1
        for b in blocks:
            key = (prev, b)
            nid = self._ids.get(key)
            if nid is None:
                nid = self._ids[key] = len(self._ids)
            out.append(nid)
            prev = nid
        return tuple(out)


class _Gen:
    def __init__(self, name: str, seed: int) -> None:
        self.rng = random.Random(f"kvsm-sim:{name}:{seed}")
        self.prefix = PrefixIds()
        self.next_block = 0
        self.t = 0.0

    def fresh(self, n: int) -> list[int]:
        """`n` content blocks never used before."""
        out = list(range(self.next_block, self.next_block + n))
        self.next_block += n
        return out

    def arrival(self) -> int:
        self.t += self.rng.expovariate(ARRIVALS_PER_S / 1000.0)
        return int(self.t)

    def zipf(self, n: int, s: float = 1.1) -> int:
        return self.rng.choices(range(n), weights=[1.0 / (i + 1) ** s for i in range(n)])[0]

    def request(self, blocks: list[int], output_length: int) -> TraceRequest:
        return TraceRequest(self.arrival(), len(blocks) * BLOCK, output_length, self.prefix.ids(blocks))


def system_prompts(n: int, seed: int, device_pages: int) -> list[TraceRequest]:
    g = _Gen("system-prompts", seed)
    systems = [g.fresh(g.rng.randint(4, 24)) for _ in range(8)]
    out = []
    for _ in range(n):
        system = systems[g.zipf(len(systems))]
        out.append(g.request(system + g.fresh(g.rng.randint(1, 6)), g.rng.randint(16, 600)))
    return out


def multi_turn(n: int, seed: int, device_pages: int) -> list[TraceRequest]:
    g = _Gen("multi-turn", seed)
    live: list[tuple[list[int], int, int]] = []  # (prompt blocks, last answer length, turns left)
    out = []
    for _ in range(n):
        if not live or g.rng.random() < 0.25:
            blocks = g.fresh(g.rng.randint(1, 4))
            turns = g.rng.randint(2, 12)
        else:
            i = g.rng.randrange(len(live))
            prev, answer, turns = live.pop(i)
            # the previous answer (one block per started 512 tokens) and a new user message
            blocks = prev + g.fresh(-(-answer // BLOCK)) + g.fresh(g.rng.randint(1, 2))
        answer = g.rng.randint(32, 900)
        out.append(g.request(blocks, answer))
        if turns > 1:
            live.append((blocks, answer, turns - 1))
    return out


def long_doc(n: int, seed: int, device_pages: int) -> list[TraceRequest]:
    g = _Gen("long-doc", seed)
    docs = [g.fresh(g.rng.randint(32, 160)) for _ in range(24)]
    out = []
    for _ in range(n):
        doc = docs[g.zipf(len(docs), 0.8)]
        out.append(g.request(doc + g.fresh(1), g.rng.randint(8, 256)))
    return out


def thrash(n: int, seed: int, device_pages: int) -> list[TraceRequest]:
    g = _Gen("thrash", seed)
    head = g.fresh(2)
    length = max(4, device_pages // 16)
    cycle = [head + g.fresh(length - 2) for _ in range(max(2, (3 * device_pages) // (2 * length)))]
    hot = [g.fresh(2) for _ in range(4)]
    out = []
    k = 0
    for _ in range(n):
        if g.rng.random() < 0.2:
            blocks = hot[g.rng.randrange(len(hot))] + g.fresh(1)
        else:
            blocks = cycle[k % len(cycle)]
            k += 1
        out.append(g.request(blocks, g.rng.randint(8, 128)))
    return out


def prefix_tree(n: int, seed: int, device_pages: int) -> list[TraceRequest]:
    g = _Gen("prefix-tree", seed)
    fanout = g.rng.randint(2, 3)
    depth = g.rng.randint(2, 4)
    # the prompts: every path from the root of a trie of `depth` levels, `fanout`
    # children a node, each node one or two blocks (6 to 120 prompts)
    paths: list[list[int]] = []
    level: list[list[int]] = [[]]
    for _ in range(depth):
        level = [p + g.fresh(g.rng.randint(1, 2)) for p in level for _ in range(fanout)]
        paths += level
    out = []
    for _ in range(n):
        out.append(g.request(list(paths[g.rng.randrange(len(paths))]), g.rng.randint(8, 128)))
    return out


# `--workload config-prompts`: the config's own `prompts` (the requests of the model TLC
# checks), each request one of them drawn uniformly, with the generators' arrivals
CONFIG_PROMPTS = "config-prompts"


def config_prompts(prompts: Sequence[Prompt], page_tokens: int, n: int, seed: int) -> Workload:
    """`n` requests, each a prompt of `prompts` drawn uniformly: its pages are the
    request's hash ids (page symbols name a page and, through the model's content hash,
    its prefix) and its `out_pages` its output, in pages of `page_tokens` tokens."""
    g = _Gen(CONFIG_PROMPTS, seed)
    reqs = []
    for _ in range(n):
        p = prompts[g.rng.randrange(len(prompts))]
        reqs.append(TraceRequest(g.arrival(), len(p.pages) * page_tokens, p.out_pages * page_tokens, tuple(p.pages)))
    return Workload(CONFIG_PROMPTS, f"the config's {len(prompts)} prompts, seed {seed}", page_tokens, tuple(reqs))


GENERATORS: dict[str, Callable[[int, int, int], list[TraceRequest]]] = {
    "system-prompts": system_prompts,
    "multi-turn": multi_turn,
    "long-doc": long_doc,
    "thrash": thrash,
    "prefix-tree": prefix_tree,
}


def generate(name: str, n: int, seed: int, device_pages: int = 2048) -> Workload:
    """`n` requests of generator `name`; `device_pages` sizes the adversarial mix."""
    reqs = GENERATORS[name](n, seed, device_pages)
    return Workload(name, f"generator {name} seed {seed} device_pages {device_pages}", BLOCK, tuple(reqs))
