"""Mooncake-format traces as values: a workload is a tuple of `TraceRequest`s in file
order, read from a trace file line by line.

Each hash id is one page of the model (its page symbol); a trace block is
`block_tokens` tokens (512 in Mooncake traces). What the simulator does with the
tokens that have no hash id (the output) is described in docs/sim.md and in
`Workload.out_pages`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable

from ..bounds import MAX_HASH_ID, MAX_OUTPUT_TOKENS, MAX_TIMESTAMP_MS, MAX_TRACE_BYTES

MOONCAKE_BLOCK_TOKENS = 512
NAMESPACE_FIELD = "namespace"  # a line's optional tenant (docs/sim.md, "Tenants")
MAX_NAMESPACE = 2**31 - 1  # TLC's integers; a namespace named by a string is in the top half

# Bounds on a trace's numbers (kvsm/bounds.py; docs/sim.md, Workloads), checked line by
# line before the run: what a line only claims (output tokens, a time) is bounded so the
# run stays in proportion to the file.


class WorkloadError(ValueError):
    """A workload that cannot be used: the message names the file, the line and why."""

    def __init__(self, where: str, line: int | None, reason: str) -> None:
        super().__init__(f"{where}:{line}: {reason}" if line is not None else f"{where}: {reason}")
        self.where, self.line, self.reason = where, line, reason


@dataclass(frozen=True, slots=True)
class TraceRequest:
    timestamp: int  # arrival, ms from the start of the trace
    input_length: int  # prompt tokens
    output_length: int  # generated tokens
    hash_ids: tuple[int, ...]  # one prefix hash per block of the prompt = one page symbol each
    ns: int = 0  # its namespace (tenant): 0 without one (`kvsm.sim.tenants`)


@dataclass(frozen=True)
class Workload:
    name: str
    source: str  # the file read, or the generator and its seed
    block_tokens: int
    requests: tuple[TraceRequest, ...]
    sha256: str | None = None  # of the file, for a trace
    # `--tenants`: ((`tenants`, N), (`tenant_mix`, X), (`shared_requests`, count)); () without
    tenants: tuple[tuple[str, Any], ...] = ()
    # the namespaces a trace names by a string: (namespace, name), smallest first
    namespace_names: tuple[tuple[int, str], ...] = ()

    def out_pages(self, req: TraceRequest) -> int:
        """Pages a request holds while it decodes: its output tokens, one page per started
        block. They have no hash id, so they are never cached nor matched later."""
        return -(-req.output_length // self.block_tokens)

    def info(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "name": self.name,
            "source": self.source,
            "requests": len(self.requests),
            "pages": sum(len(r.hash_ids) for r in self.requests),
            "block_tokens": self.block_tokens,
        }
        if self.sha256:
            d["sha256"] = self.sha256
        d.update(self.tenants)
        ns = {r.ns for r in self.requests}
        if ns != {0}:
            d["namespaces"] = len(ns)
        return d


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def parse_line(
    where: str, lineno: int, text: str, block_tokens: int = MOONCAKE_BLOCK_TOKENS, names: dict[int, str] | None = None
) -> TraceRequest:
    """One Mooncake trace line; every defect is a `WorkloadError` naming the line. A
    namespace named by a string goes into `names` (namespace -> name), when given."""
    if not text.strip():
        raise WorkloadError(where, lineno, "blank line")
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        from ..log import json_error  # (the error path only)

        raise WorkloadError(where, lineno, f"not valid JSON ({json_error(e)})") from None
    if not isinstance(d, dict):
        raise WorkloadError(where, lineno, "a request must be a JSON object")
    for k in ("timestamp", "input_length", "output_length", "hash_ids"):
        if k not in d:
            raise WorkloadError(where, lineno, f"field '{k}' is missing")
    for k, lo, hi in (("timestamp", 0, MAX_TIMESTAMP_MS), ("input_length", 1, None), ("output_length", 0, MAX_OUTPUT_TOKENS)):
        if not _int(d[k]):
            raise WorkloadError(where, lineno, f"field '{k}' must be an integer, got {d[k]!r}")
        if d[k] < lo:
            raise WorkloadError(where, lineno, f"field '{k}' must be >= {lo}, got {d[k]}")
        if hi is not None and d[k] > hi:
            raise WorkloadError(where, lineno, f"field '{k}' must be <= {hi}, got {d[k]}")
    ids = d["hash_ids"]
    if not isinstance(ids, list) or not all(_int(x) and 0 <= x <= MAX_HASH_ID for x in ids):
        bad = next((x for x in ids if not (_int(x) and 0 <= x <= MAX_HASH_ID)), None) if isinstance(ids, list) else ids
        raise WorkloadError(where, lineno, f"field 'hash_ids' must be a list of integers in [0, {MAX_HASH_ID}], got {bad!r}")
    need = -(-d["input_length"] // block_tokens)
    if len(ids) != need:
        raise WorkloadError(
            where,
            lineno,
            f"'hash_ids' has {len(ids)} ids but input_length {d['input_length']} needs "
            f"ceil({d['input_length']}/{block_tokens}) = {need}",
        )
    ns = 0
    if NAMESPACE_FIELD in d:
        ns = parse_namespace(d[NAMESPACE_FIELD])
        if ns is None:
            raise WorkloadError(
                where, lineno, f"field '{NAMESPACE_FIELD}' must be an integer in [0, {MAX_NAMESPACE}] or a non-empty string, got {d[NAMESPACE_FIELD]!r}"
            )
        if names is not None and isinstance(d[NAMESPACE_FIELD], str):
            names[ns] = d[NAMESPACE_FIELD]
    return TraceRequest(d["timestamp"], d["input_length"], d["output_length"], tuple(ids), ns)


def parse_namespace(value: Any) -> int | None:
    """A line's `namespace`: an integer in [0, MAX_NAMESPACE] is the namespace; a non-empty
    string names one, in [2^30, 2^31) from its SHA-256 (the same name, the same namespace,
    in every file and on every machine); None for anything else."""
    if _int(value):
        return value if 0 <= value <= MAX_NAMESPACE else None
    if isinstance(value, str) and value:
        h = int.from_bytes(hashlib.sha256(value.encode()).digest()[:4], "big")
        return (1 << 30) | (h & ((1 << 30) - 1))
    return None


def parse_lines(where: str, lines: Iterable[str], limit: int | None = None, names: dict[int, str] | None = None) -> list[TraceRequest]:
    out: list[TraceRequest] = []
    for lineno, text in enumerate(lines, start=1):
        if limit is not None and len(out) >= limit:
            break
        out.append(parse_line(where, lineno, text, names=names))
    if not out:
        raise WorkloadError(where, None, "no requests")
    return out


def read_trace(path: str | Path, limit: int | None = None, name: str | None = None) -> Workload:
    """A Mooncake-format trace file; `limit` keeps its first requests (file order)."""
    p = Path(path)
    where = str(path)
    if p.is_dir():
        raise WorkloadError(where, None, "is a directory, not a trace file")
    try:
        size = p.stat().st_size
        if size > MAX_TRACE_BYTES:
            raise WorkloadError(where, None, f"{size} bytes, more than a trace may have ({MAX_TRACE_BYTES >> 20} MiB)")
        data = p.read_bytes()
    except OSError as e:
        raise WorkloadError(where, None, f"cannot read: {e.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise WorkloadError(where, line, "not UTF-8 text") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    names: dict[int, str] = {}
    reqs = parse_lines(where, lines, limit, names)
    sha = hashlib.sha256(data).hexdigest()
    return Workload(name or p.stem, where, MOONCAKE_BLOCK_TOKENS, tuple(reqs), sha, namespace_names=tuple(sorted(names.items())))


def split_pages(w: Workload, page_tokens: int) -> Workload:
    """The workload in pages of `page_tokens` tokens, which must divide its block size: a
    block of `t` tokens becomes `ceil(t / page_tokens)` pages, page `j` of block id `h` the
    symbol `h x (block / page_tokens) + j`. Two prompts that share a block id share its
    pages; one whose last block is partial shares that block's first pages only, down to
    the page. A symbol past `MAX_HASH_ID` is a ValueError."""
    bt = w.block_tokens
    if page_tokens == bt:
        return w
    if page_tokens < 1 or bt % page_tokens:
        raise ValueError(f"must divide the workload's block size {bt}")
    k = bt // page_tokens
    top = max((h for r in w.requests for h in r.hash_ids), default=0)
    if top * k + k - 1 > MAX_HASH_ID:
        raise ValueError(f"block id {top} x {k} pages per block is past the largest page symbol {MAX_HASH_ID}")
    reqs = []
    for r in w.requests:
        ids: list[int] = []
        last = len(r.hash_ids) - 1
        for i, h in enumerate(r.hash_ids):
            n = k if i < last else -(-(r.input_length - last * bt) // page_tokens)
            ids.extend(range(h * k, h * k + n))
        reqs.append(TraceRequest(r.timestamp, r.input_length, r.output_length, tuple(ids), r.ns))
    return replace(w, block_tokens=page_tokens, requests=tuple(reqs))
