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
        return "(" + ",".join(enc(x) for x in v) + ")"
    encode = getattr(v, "encode", None)
    if encode is not None:
        return encode()
    raise TypeError(f"cannot encode {type(v).__name__} canonically")


def entry_hash(component: str, key: Any, value: Any) -> int:
    text = f"{component}|{enc(key)}|{enc(value)}"
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=32).digest(), "big")


def component_sum(component: str, items: Iterable[tuple[Any, Any]]) -> int:
    total = 0
    for k, v in items:
        total += entry_hash(component, k, v)
    return total % MOD


def combine(scalars: Mapping[str, Any], sums: Mapping[str, int]) -> str:
    parts = [VERSION]
    for name in sorted(scalars):
        parts.append(f"{name}={enc(scalars[name])}")
    for name in sorted(sums):
        if sums[name]:
            parts.append(f"{name}#{sums[name]:064x}")
    return hashlib.blake2b("\n".join(parts).encode(), digest_size=16).hexdigest()
