"""Canonical, incremental state digests.

A digest must be stable across processes, runs and Python versions (never the
built-in `hash`) and cheap enough to be written after every transition of a log
over a tree of 100k nodes. Each map of the state is summarised by the sum, modulo
2**256, of a BLAKE2b hash of every entry's canonical text ("AdHash"): a transition
subtracts the hashes of the entries it replaces and adds those it writes, so the
digest costs time proportional to what changed. The digest of a state is the hash
of its scalars and these sums. Empty components contribute nothing, so adding a
component later leaves the digests of older logs unchanged.
"""

from __future__ import annotations

import hashlib
from typing import Any, Iterable, Mapping

MOD = 1 << 256
VERSION = "kvsm-digest-1"


def enc(v: Any) -> str:
    """Canonical text of a value built from ints, bools, None, strs, tuples and dataclass-like
    objects with an `encode()` method."""
    t = type(v)
    if t is int:
        return str(v)
    if v is None:
        return "~"
    if v is True:
        return "T"
    if v is False:
        return "F"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(v, tuple):
        return "(" + ",".join([str(x) if type(x) is int else enc(x) for x in v]) + ")"
    encode = getattr(v, "encode", None)
    if encode is not None:
        return encode()
    raise TypeError(f"cannot encode {type(v).__name__} canonically")


_blake2b = hashlib.blake2b


# per type: its own `encode` method when `enc` would call it (a record type), else None
_ENCODERS: dict[type, Any] = {}


def _encoder(t: type) -> Any:
    if issubclass(t, (int, str, tuple)) or t is type(None):
        m = None
    else:
        m = getattr(t, "encode", None)
    _ENCODERS[t] = m
    return m


def entry_hash(component: str, key: Any, value: Any) -> int:
    # `enc` of an int key and of a record value, without its chain of type tests (the same text)
    k = str(key) if type(key) is int else enc(key)
    t = type(value)
    m = _ENCODERS[t] if t in _ENCODERS else _encoder(t)
    v = m(value) if m is not None else enc(value)
    return int.from_bytes(_blake2b(f"{component}|{k}|{v}".encode(), digest_size=32).digest(), "big")


# The last hash computed for each (component, key), with the value it was computed for: a
# transition that replaces an entry subtracts the old entry's hash, which was computed when
# that value was written, so it is found here by identity instead of being re-encoded. The
# cache holds a reference to the value, so an identity match is sound; it is a cache only
# (a miss recomputes) and is emptied when it grows past _MEMO_MAX entries.
_MEMO: dict[tuple[str, Any], tuple[Any, int]] = {}
_MEMO_MAX = 1 << 20


def memo_hash(component: str, key: Any, value: Any) -> int:
    """`entry_hash(component, key, value)`, remembered for this value object under its key."""
    m = _MEMO.get((component, key))
    if m is not None and m[0] is value:
        return m[1]
    h = entry_hash(component, key, value)
    if len(_MEMO) >= _MEMO_MAX:
        _MEMO.clear()
    _MEMO[(component, key)] = (value, h)
    return h


_WEIGHTS: dict[str, dict[int, int]] = {}  # component -> page -> weight


def page_weights(component: str) -> dict[int, int]:
    """The weights `page_weight` has memoised for a component, by page (read-only)."""
    ws = _WEIGHTS.get(component)
    if ws is None:
        ws = _WEIGHTS[component] = {}
    return ws


def page_weight(component: str, key: int) -> int:
    """A fixed odd pseudo-random 256-bit multiplier per (component, key), memoised."""
    ws = page_weights(component)
    w = ws.get(key)
    if w is None:
        w = ws[key] = entry_hash(component + "@", key, None) | 1
    return w


def content_hash(component: str, key: int, value: int) -> int:
    """Contribution of a ghost content entry (page -> content identity): a multiply by the
    page's weight instead of a hash per write. Content identities are themselves 64-bit
    hashes, so `(c + 1) * weight(page)` summed mod 2**256 changes whenever any page's
    content changes, and moving contents between pages changes it too."""
    return (value + 1) * page_weight(component, key)


_FREE_PAGE: dict[int, int] = {}


def free_page_hash(page: int) -> int:
    """`entry_hash("dev_free", page, True)`, memoised: free lists change by many pages per
    transition and a page's hash never changes."""
    h = _FREE_PAGE.get(page)
    if h is None:
        h = _FREE_PAGE[page] = entry_hash("dev_free", page, True)
    return h


def component_sum(component: str, items: Iterable[tuple[Any, Any]]) -> int:
    total = 0
    for k, v in items:
        total += entry_hash(component, k, v)
    return total % MOD


def combine(scalars: Mapping[str, Any], sums: Mapping[str, int]) -> str:
    h = _blake2b(VERSION.encode(), digest_size=16)
    for name in sorted(scalars):
        h.update(f"\n{name}={enc(scalars[name])}".encode())
    for name in sorted(sums):
        v = sums[name]
        if v:
            h.update(f"\n{name}#".encode())
            h.update(v.to_bytes(32, "big"))
    return h.hexdigest()
