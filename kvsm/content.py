"""Content identity of KV pages (the ghost part of the state; docs/model.md).

The KV of a page is a function of the whole token prefix up to and including that
page. Its identity is a prefix-chained 64-bit hash: the same value is the page's
L3 content hash and the seed from which the GPU backend generates the page's bytes.
"""

from __future__ import annotations

import hashlib
from typing import Iterable

ROOT = 0  # the identity of the empty prefix


def page_content(prev: int, symbol: int) -> int:
    """Identity of the page `symbol` that follows the prefix whose last page is `prev`:
    the first 8 bytes (big-endian) of the BLAKE2b hash of the text `"{prev}/{symbol}"`
    (computed by `chain`, the one place that hashes)."""
    return chain(prev, (symbol,))[0]


_HASHER = hashlib.blake2b(digest_size=8)  # a fresh BLAKE2b of 8 bytes, copied per page


def chain(prev: int, symbols: Iterable[int], _int=int.from_bytes) -> tuple[int, ...]:
    """The identities of the pages `symbols` that follow the prefix whose last page is
    `prev` (`page_content` of each in turn; a copy of a fresh hasher is cheaper to make
    than a new one, and gives the same digest)."""
    out = []
    fresh = _HASHER.copy
    for s in symbols:
        h = fresh()
        h.update(b"%d/%d" % (prev, s))
        prev = _int(h.digest(), "big")
        out.append(prev)
    return tuple(out)


def prefix_content(symbols: Iterable[int]) -> tuple[int, ...]:
    return chain(ROOT, symbols)
