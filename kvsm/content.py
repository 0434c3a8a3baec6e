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


# ---- namespaces (docs/model.md, "Namespaces") ----------------------------------------------------
# A page of namespace k (a tenant, a LoRA adapter) holds KV computed in k: its identity is
# the token chain's, masked by k's mask, `t ^ mask(k)`, and chains from the masked
# identity of its parent (the root, whatever the namespace, is ROOT). Namespace 0's mask
# is 0, so its identities are the chain's own. The token chain `t` of a page is its
# identity unmasked (`tokens_key`): what an L3 key over token ids alone addresses.

_MASKS: dict[int, int] = {0: 0}  # namespace -> mask
_NAMESPACE_OF: dict[int, int] = {0: 0}  # mask -> namespace (as many entries as namespaces)


def ns_mask(ns: int) -> int:
    """The mask of namespace `ns`: 0 for namespace 0, else the first 8 bytes of the BLAKE2b
    hash of the text `"ns/{ns}"` (remembered, one entry per namespace)."""
    m = _MASKS.get(ns)
    if m is None:
        h = _HASHER.copy()
        h.update(b"ns/%d" % ns)
        m = _MASKS[ns] = int.from_bytes(h.digest(), "big")
        _NAMESPACE_OF[m] = ns
    return m


def namespace_of_mask(m: int) -> int | None:
    """The namespace whose mask is `m`, among those whose mask was computed; None if none."""
    return _NAMESPACE_OF.get(m)


def chain_in(ns: int, prev: int, symbols: Iterable[int], chain_fn=None) -> tuple[int, ...]:
    """`chain` in namespace `ns`: the identities of the pages `symbols` that follow the page
    of identity `prev` (ROOT: the root) in namespace `ns`. `chain_fn` is `chain` or a
    remembered form of it."""
    fn = chain_fn or chain
    if not ns:
        return fn(prev, symbols)
    m = ns_mask(ns)
    return tuple(x ^ m for x in fn(prev ^ m if prev != ROOT else ROOT, tuple(symbols)))


def prefix_content_in(ns: int, symbols: Iterable[int]) -> tuple[int, ...]:
    return chain_in(ns, ROOT, symbols)


def tokens_key(c: int, ns: int) -> int:
    """The token chain of a page of identity `c` in namespace `ns` (its identity in namespace 0)."""
    return c ^ ns_mask(ns) if ns else c


# A child's key in its parent's children map: its first symbol in namespace 0, and for
# namespace ns > 0 an integer above every symbol (symbols lie within ±(2^63-1)), distinct
# per (ns, symbol) and ordered as the symbols within one namespace.
_NS_KEY_BASE = 1 << 64


def child_key(ns: int, symbol: int) -> int:
    return symbol if not ns else (ns << 65) + _NS_KEY_BASE + symbol


def key_holds(by_tokens: bool, key: int, c: int | None) -> bool:
    """Whether content `c` is what L3 key `key` names: the same identity, or where keys
    cover the tokens alone (`by_tokens`: `l3_key = "tokens"`) the same token chain in some
    namespace (invariant 7)."""
    if c == key:
        return True
    return by_tokens and c is not None and namespace_of_mask(c ^ key) is not None


def l3_keys(by_tokens: bool, ns: int, hashes: tuple[int, ...]) -> tuple[int, ...]:
    """The L3 keys of pages of namespace `ns` whose identities are `hashes`: the identities
    themselves, or where keys cover the tokens alone (`by_tokens`) their token chain."""
    if not ns or not by_tokens:
        return hashes
    m = ns_mask(ns)
    return tuple(h ^ m for h in hashes)


def l3_contents(by_tokens: bool, ns: int, keys: tuple[int, ...]) -> tuple[int, ...]:
    """The identities of namespace `ns`'s pages whose L3 keys are `keys` (the mask is its
    own inverse)."""
    return l3_keys(by_tokens, ns, keys)


def rebase(c: int, ns: int, to: int) -> int:
    """Identity `c` of a page of namespace `ns` as namespace `to` would name the same
    tokens (ROOT stays ROOT): where a node's parent is of another namespace, what its
    pages would chain from."""
    if ns == to or c == ROOT:
        return c
    return c ^ ns_mask(ns) ^ ns_mask(to)
