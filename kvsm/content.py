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
    """Identity of the page `symbol` that follows the prefix whose last page is `prev`."""
    h = hashlib.blake2b(f"{prev}/{symbol}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "big")


def chain(prev: int, symbols: Iterable[int]) -> tuple[int, ...]:
    out = []
    for s in symbols:
        prev = page_content(prev, s)
        out.append(prev)
    return tuple(out)


def prefix_content(symbols: Iterable[int]) -> tuple[int, ...]:
    return chain(ROOT, symbols)
