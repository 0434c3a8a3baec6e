"""`victims.index_entries`, which `Tx.commit` uses to keep the derived indexes, says
what the three index functions say, node by node."""

from __future__ import annotations

from dataclasses import replace
from itertools import product

import immutables

from kvsm.config import load_config
from kvsm.state import ROOT_ID, Node
from kvsm.victims import backup_candidate, dev_victim_key, host_victim_key, index_entries


def _nodes():
    kids = immutables.Map({7: 9})
    for nid, dev, host, lock, ondev, children, hits, pin in product(
        (ROOT_ID, 3), ((), (4,)), (None, 2), (0, 1, 2), (0, 1), (immutables.Map(), kids), (0, 1, 2), (0, 1)
    ):
        yield Node(id=nid, parent=-1 if nid == ROOT_ID else ROOT_ID, key=(1,), dev=dev, host=host, durable=False,
                   lock=lock, pin=pin, hits=hits, touched=5, children=children, ondev=ondev, hashes=(11,))


def test_index_entries_are_the_three_index_functions():
    base = load_config("small")
    configs = [
        replace(base, policy=policy, eviction=eviction, unbacked_evict=unbacked, write_threshold=threshold, bug=bug)
        for policy, eviction, unbacked, threshold, bug in product(
            ("write_through", "write_back"), ("lru", "slru"), ("fixed", "reference"), (1, 2), ("none", "evict_pending")
        )
    ]
    nodes = list(_nodes())
    for cfg in configs:
        for node, pending in product(nodes, (False, True)):
            want = (dev_victim_key(node, pending, cfg), host_victim_key(node, cfg), backup_candidate(node, pending, cfg))
            assert index_entries(node, pending, cfg) == want, (node, pending, cfg)
