"""Workloads: Mooncake trace parsing (good and bad lines), the bundled trace, and the
seeded generators."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from kvsm.sim import WorkloadError, load_workload, read_trace
from kvsm.sim.generators import GENERATORS, PrefixIds, generate
from kvsm.sim.trace import parse_line
from kvsm.sim.workload import bundled_path

GOOD = {"timestamp": 5, "input_length": 1025, "output_length": 513, "hash_ids": [7, 8, 9]}


def _write(tmp_path: Path, lines: list[str]) -> Path:
    p = tmp_path / "trace.jsonl"
    p.write_text("".join(line + "\n" for line in lines))
    return p


def test_a_good_trace_parses_in_file_order(tmp_path):
    p = _write(tmp_path, [json.dumps(GOOD), json.dumps(GOOD | {"timestamp": 1, "hash_ids": [7], "input_length": 3})])
    w = read_trace(p)
    assert [r.timestamp for r in w.requests] == [5, 1]
    assert w.requests[0].hash_ids == (7, 8, 9)
    assert w.block_tokens == 512
    assert w.out_pages(w.requests[0]) == 2  # 513 output tokens start two 512-token pages
    assert w.sha256 == hashlib.sha256(p.read_bytes()).hexdigest()
    assert len(read_trace(p, limit=1).requests) == 1


@pytest.mark.parametrize(
    "line, reason",
    [
        ("{not json", "not valid JSON"),
        ('{"timestamp": 0, "x": "a\tb"}', "not valid JSON (Invalid control character at column 25)"),
        ("[1, 2]", "a request must be a JSON object"),
        ("", "blank line"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "hash_ids"}), "field 'hash_ids' is missing"),
        (json.dumps(GOOD | {"timestamp": "5"}), "field 'timestamp' must be an integer"),
        (json.dumps(GOOD | {"timestamp": True}), "field 'timestamp' must be an integer"),
        (json.dumps(GOOD | {"timestamp": -1}), "field 'timestamp' must be >= 0"),
        (json.dumps(GOOD | {"input_length": 0, "hash_ids": []}), "field 'input_length' must be >= 1"),
        (json.dumps(GOOD | {"output_length": -2}), "field 'output_length' must be >= 0"),
        (json.dumps(GOOD | {"hash_ids": [1, "2", 3]}), "must be a list of integers in [0, 2147483647], got '2'"),
        (json.dumps(GOOD | {"hash_ids": [1, 2]}), "'hash_ids' has 2 ids but input_length 1025 needs ceil(1025/512) = 3"),
    ],
)
def test_a_malformed_line_names_the_file_the_line_and_the_reason(tmp_path, line, reason):
    p = _write(tmp_path, [json.dumps(GOOD), json.dumps(GOOD), line, json.dumps(GOOD)])
    with pytest.raises(WorkloadError) as e:
        read_trace(p)
    assert e.value.line == 3
    assert str(e.value).startswith(f"{p}:3: ")
    assert reason in str(e.value)


def test_unreadable_or_empty_inputs_are_errors(tmp_path):
    with pytest.raises(WorkloadError, match="no such file, and not a workload name"):
        load_workload(str(tmp_path / "missing.jsonl"))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(WorkloadError, match="no requests"):
        read_trace(empty)
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(json.dumps(GOOD).encode() + b"\n\xff\xfe\n")
    with pytest.raises(WorkloadError, match=":2: not UTF-8"):
        read_trace(binary)


def test_parse_line_rejects_a_mismatched_block_count():
    with pytest.raises(WorkloadError, match="x:9:"):
        parse_line("x", 9, json.dumps(GOOD | {"input_length": 2000}))


def test_the_bundled_trace_is_the_mooncake_file_byte_for_byte():
    sources = (bundled_path("synthetic").parent / "SOURCES.md").read_text()
    digest = hashlib.sha256(bundled_path("synthetic").read_bytes()).hexdigest()
    assert digest == "bd070915a98fc0ed264d7cfef2ce746002eb3076a695ec31ba2674c0111ec131"
    assert digest in sources and "Apache-2.0" in sources
    w = load_workload("synthetic", requests=10)
    assert len(w.requests) == 10
    # the log names the package file, never this machine's path
    assert w.source == "kvsm/sim/data/synthetic_trace.jsonl"


def test_prefix_ids_number_prefixes_not_blocks():
    ids = PrefixIds()
    a = ids.ids([1, 2, 3])
    b = ids.ids([1, 2, 4])
    c = ids.ids([2, 3])
    assert a[:2] == b[:2] and a[2] != b[2]
    assert not set(c) & set(a)  # the same blocks under another prefix are other pages


def _ok_as_trace(w):
    for r in w.requests:
        assert r.input_length == len(r.hash_ids) * w.block_tokens and r.output_length >= 0
    ts = [r.timestamp for r in w.requests]
    assert ts == sorted(ts)


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_each_generator_is_seeded(name):
    a = generate(name, 120, seed=3, device_pages=256)
    assert a == generate(name, 120, seed=3, device_pages=256)
    assert a.requests != generate(name, 120, seed=4, device_pages=256).requests
    assert len(a.requests) == 120
    _ok_as_trace(a)


def _shared_prefix(x: tuple[int, ...], y: tuple[int, ...]) -> int:
    n = 0
    while n < min(len(x), len(y)) and x[n] == y[n]:
        n += 1
    return n


def test_system_prompts_share_a_few_prefixes():
    w = generate("system-prompts", 200, seed=0)
    firsts = {r.hash_ids[0] for r in w.requests}
    assert len(firsts) <= 8  # every request starts with one of the 8 system prompts
    assert len({r.hash_ids[-1] for r in w.requests}) == 200  # each ends in its own message


def test_multi_turn_turns_extend_the_previous_turn():
    w = generate("multi-turn", 300, seed=1)
    reqs = [r.hash_ids for r in w.requests]
    extended = 0
    for i, r in enumerate(reqs):
        prev = [p for p in reqs[:i] if _shared_prefix(p, r) == len(p) and len(p) < len(r)]
        extended += bool(prev)
    assert extended > 150  # most requests are later turns of a chat


def test_long_documents_are_queried_repeatedly():
    w = generate("long-doc", 200, seed=2)
    docs = {r.hash_ids[:-1] for r in w.requests}
    assert len(docs) <= 24 and all(len(d) >= 32 for d in docs)
    assert len({r.hash_ids for r in w.requests}) == 200  # every question is new


def test_thrash_cycles_through_more_than_the_device_holds():
    device_pages = 256
    w = generate("thrash", 400, seed=0, device_pages=device_pages)
    long = {r.hash_ids for r in w.requests if len(r.hash_ids) > 3}
    assert sum(len(k) for k in long) > device_pages * 1.4
    heads = {k[:2] for k in long}
    assert len(heads) == 1  # one shared head: every prefix splits the same node


def test_prefix_tree_prompts_are_paths_of_one_small_trie():
    w = generate("prefix-tree", 300, seed=5)
    prompts = {r.hash_ids for r in w.requests}
    assert len(prompts) <= 120 and all(1 <= len(p) <= 8 for p in prompts)
    assert len({p[0] for p in prompts}) <= 3  # the trie's first level: 2 or 3 nodes
    # a trie: two prompts agree up to where they part, then never again (prefix hash ids)
    ps = sorted(prompts)
    for x in ps:
        for y in ps:
            k = _shared_prefix(x, y)
            assert not set(x[k:]) & set(y[k:])
    # prompts come back: most requests repeat an earlier prompt or extend one
    seen: set = set()
    again = 0
    for r in w.requests:
        again += any(r.hash_ids[:n] in seen for n in range(1, len(r.hash_ids) + 1))
        seen.add(r.hash_ids)
    assert again > 250


def test_prefix_tree_reaches_a_reload_whose_anchor_leaves_while_it_is_in_flight():
    # the order of reload_stale_anchor's TLC counterexample (an anchor that leaves the tree
    # between its reload's reserve and admission): with small tiers and a biased random
    # schedule the prefix-tree workload reaches it (docs/campaign.md: 10 of seeds 0-19),
    # and the defect breaks 1 Tree at the admission
    from kvsm.campaign.run import Budget, execute
    from kvsm.campaign.spec import RunSpec

    spec = RunSpec(1, "default", "l1,l2,l3", "none", "prefix-tree", 80, l1_pages=7, l2_pages=6,
                   schedule="random:0.5", bug="reload_stale_anchor")
    out = execute(spec, Budget(60, 100_000), collect=False, replay_log=False)
    assert out.failure is not None and out.failure.signature == "invariant:1 Tree@ReloadAdmit"
    clean = execute(RunSpec(**{**spec.__dict__, "bug": "none"}), Budget(60, 100_000), collect=False, replay_log=False)
    assert clean.failure is None and clean.status == "ok"
