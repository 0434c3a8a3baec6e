"""The transition log: JSONL, documented in docs/log-format.md and
kvsm/schema/log.schema.json.

Line 1 is the header: format version, the config, the seed, the source and the digest
of the initial state. Every other line is one transition: its index, name, rank (for
per-rank transitions), arguments and the digest of the state after it.

Reading is strict and streaming: a malformed line, an unknown transition, bad
arguments, a rejected guard or a digest mismatch stops the reader with the line
number and the reason (`LogError`). Writing is atomic: a log is written to a
temporary file beside its destination and renamed into place when complete, so a
crash or an error never leaves a partial log, nor clobbers an existing one.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Iterator

from .checking import full_violations
from .config import Config, ConfigError
from .state import ClusterState, Rejected, initial_state
from .transitions import REGISTRY, Transition, apply

FORMAT = 1

# The from-scratch check of `replay(check=True)` (`kvsm.checking` also checks each
# transition's writes after it); looked up at each use, so that a test can replace it.
check_invariants = full_violations
SOURCES = ("walk", "sim", "tlc", "hand", "gpu")


class LogError(ValueError):
    """A log that cannot be replayed; `line` is 1-based (0: the file as a whole)."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        super().__init__(f"{path}:{line}: {reason}" if line else f"{path}: {reason}")
        self.path, self.line, self.reason = path, line, reason


class OutputError(ValueError):
    """A log (or report) that cannot be written where it was asked for."""

    def __init__(self, path: str | Path, reason: str) -> None:
        super().__init__(f"{path}: cannot write here: {reason}")
        self.path, self.reason = str(path), reason


def check_output_file(path: str | Path) -> None:
    """Raise OutputError now when a file cannot be made at `path`: it is a directory, or
    an ancestor is a file. Missing parent directories are fine (they are created)."""
    p = Path(path)
    if p.is_dir():
        raise OutputError(p, "is a directory")
    for parent in p.parents:
        if parent.exists():
            if not parent.is_dir():
                raise OutputError(p, f"{parent} is not a directory")
            break


@dataclass(frozen=True)
class Header:
    config: Config
    seed: int | None
    source: str
    initial_digest: str
    extra: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        d = {
            "kvsm_log": FORMAT,
            "source": self.source,
            "seed": self.seed,
            "config": self.config.to_json(),
            "initial_digest": self.initial_digest,
        }
        if self.extra:
            d["extra"] = self.extra
        return d


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), sort_keys=False)


def transition_line(index: int, t: Transition, digest: str) -> str:
    d: dict[str, Any] = {"i": index}
    d.update(t.to_json())
    d["digest"] = digest
    return dumps(d)


class LogWriter:
    """Writes a log atomically: use as a context manager; the file appears only when the
    block exits without an exception."""

    def __init__(self, path: str | Path, header: Header) -> None:
        self.path = Path(path)
        self.header = header
        self.count = 0
        self._tmp: IO[str] | None = None

    def __enter__(self) -> "LogWriter":
        check_output_file(self.path)
        directory = self.path.parent if str(self.path.parent) else Path(".")
        try:
            directory.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=directory)
        except OSError as e:
            raise OutputError(self.path, e.strerror or str(e)) from None
        self._tmp = os.fdopen(fd, "w")
        self._tmp_name = name
        self._tmp.write(dumps(self.header.to_json()) + "\n")
        return self

    def write(self, t: Transition, state: ClusterState) -> None:
        assert self._tmp is not None
        self.count += 1
        self._tmp.write(transition_line(self.count, t, state.digest()) + "\n")

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self._tmp is not None
        self._tmp.close()
        if exc_type is None:
            try:
                os.replace(self._tmp_name, self.path)
            except OSError as e:
                os.unlink(self._tmp_name)
                raise OutputError(self.path, e.strerror or str(e)) from None
        else:
            os.unlink(self._tmp_name)


# ---- reading ---------------------------------------------------------------------------------


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def parse_header(path: str, text: str) -> Header:
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise LogError(path, 1, f"header is not valid JSON: {e.msg}") from None
    if not isinstance(d, dict):
        raise LogError(path, 1, "header must be a JSON object")
    if d.get("kvsm_log") != FORMAT:
        raise LogError(path, 1, f"not a kvsm log of format {FORMAT} (field 'kvsm_log' is {d.get('kvsm_log')!r})")
    for k in ("config", "source", "initial_digest"):
        if k not in d:
            raise LogError(path, 1, f"header lacks field '{k}'")
    if d["source"] not in SOURCES:
        raise LogError(path, 1, f"header field 'source' must be one of {', '.join(SOURCES)}")
    if d.get("seed") is not None and not _int(d["seed"]):
        raise LogError(path, 1, "header field 'seed' must be an integer or null")
    if not isinstance(d["config"], dict):
        raise LogError(path, 1, "header field 'config' must be an object")
    if not isinstance(d["initial_digest"], str):
        raise LogError(path, 1, "header field 'initial_digest' must be a string")
    try:
        cfg = Config.from_json(d["config"], where="header config")
    except ConfigError as e:
        raise LogError(path, 1, str(e)) from None
    extra = d.get("extra", {})
    if not isinstance(extra, dict):
        raise LogError(path, 1, "header field 'extra' must be an object")
    unknown = set(d) - {"kvsm_log", "source", "seed", "config", "initial_digest", "extra"}
    if unknown:
        raise LogError(path, 1, f"header has unknown field '{sorted(unknown)[0]}'")
    return Header(cfg, d.get("seed"), d["source"], d["initial_digest"], extra)


def parse_transition(path: str, lineno: int, text: str) -> tuple[int, Transition, str]:
    """One transition line -> (index, transition, digest); structural checks only."""
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise LogError(path, lineno, f"not valid JSON ({e.msg}); truncated line?") from None
    if not isinstance(d, dict):
        raise LogError(path, lineno, "a transition line must be a JSON object")
    for k, typ in (("i", "an integer"), ("name", "a string"), ("args", "an object"), ("digest", "a string")):
        if k not in d:
            raise LogError(path, lineno, f"field '{k}' is missing")
    if not _int(d["i"]):
        raise LogError(path, lineno, f"field 'i' must be an integer, got {d['i']!r}")
    if not isinstance(d["name"], str):
        raise LogError(path, lineno, f"field 'name' must be a string, got {d['name']!r}")
    if not isinstance(d["args"], dict):
        raise LogError(path, lineno, f"field 'args' must be an object, got {d['args']!r}")
    if not isinstance(d["digest"], str):
        raise LogError(path, lineno, f"field 'digest' must be a string, got {d['digest']!r}")
    unknown = set(d) - {"i", "name", "rank", "args", "digest"}
    if unknown:
        raise LogError(path, lineno, f"unknown field '{sorted(unknown)[0]}'")
    name = d["name"]
    spec = REGISTRY.get(name)
    if spec is None:
        raise LogError(path, lineno, f"unknown transition '{name}'")
    rank = d.get("rank")
    if spec.per_rank:
        if not _int(rank):
            raise LogError(path, lineno, f"{name} needs an integer field 'rank'")
    elif rank is not None:
        raise LogError(path, lineno, f"{name} is not a per-rank transition but has field 'rank'")
    args = d["args"]
    for k, typ in spec.args.items():
        if k not in args:
            raise LogError(path, lineno, f"{name} needs argument '{k}'")
        v = args[k]
        if typ == "int" and not _int(v):
            raise LogError(path, lineno, f"{name} argument '{k}' must be an integer, got {v!r}")
        if typ == "bool" and not isinstance(v, bool):
            raise LogError(path, lineno, f"{name} argument '{k}' must be true or false, got {v!r}")
        if typ == "ints" and not (isinstance(v, list) and all(_int(x) for x in v)):
            raise LogError(path, lineno, f"{name} argument '{k}' must be a list of integers, got {v!r}")
    extra = set(args) - set(spec.args)
    if extra:
        raise LogError(path, lineno, f"{name} has unknown argument '{sorted(extra)[0]}'")
    return d["i"], Transition.make(name, rank=rank, **args), d["digest"]


def _text(path: str, lineno: int, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise LogError(path, lineno, f"not UTF-8 text (byte {e.start + 1} of the line)") from None


def read_log(path: str | Path) -> tuple[Header, Iterator[tuple[int, int, Transition, str]]]:
    """The header and a stream of (line number, index, transition, digest)."""
    p = str(path)
    try:
        f = open(p, "rb")
    except OSError as e:
        raise LogError(p, 0, f"cannot open: {e.strerror}") from None
    first = f.readline()
    if not first:
        f.close()
        raise LogError(p, 1, "empty file: no header")
    if not first.endswith(b"\n"):
        f.close()
        raise LogError(p, 1, "header line is not terminated (truncated file?)")
    try:
        header = parse_header(p, _text(p, 1, first))
    except LogError:
        f.close()
        raise

    def lines() -> Iterator[tuple[int, int, Transition, str]]:
        with f:
            expect = 1
            for lineno, raw in enumerate(f, start=2):
                text = _text(p, lineno, raw)
                if not text.endswith("\n"):
                    raise LogError(p, lineno, "line is not terminated (truncated file?)")
                if not text.strip():
                    raise LogError(p, lineno, "blank line")
                i, t, digest = parse_transition(p, lineno, text)
                if i != expect:
                    raise LogError(p, lineno, f"transition index {i}, expected {expect}")
                expect += 1
                yield lineno, i, t, digest

    return header, lines()


def _found(f: Any) -> list[dict[str, Any]]:
    return [{"line": f.at, "transition": str(f.transition), "violation": x} for x in f.violations]


@dataclass
class ReplayResult:
    transitions: int
    final_digest: str
    violations: list[dict[str, Any]]
    first_mismatch: dict[str, Any] | None
    final_state: ClusterState | None = None

    @property
    def ok(self) -> bool:
        return self.first_mismatch is None and not self.violations

    def to_json(self) -> dict[str, Any]:
        return {
            "transitions": self.transitions,
            "final_digest": self.final_digest,
            "violations": self.violations,
            "first_mismatch": self.first_mismatch,
        }


def replay(
    path: str | Path,
    check: bool = False,
    on_step: Callable[[int], None] | None = None,
) -> ReplayResult:
    """Replay a log from its header's config, verifying every digest (and with `check`
    every invariant after every transition, `kvsm.checking`). Stops at the first mismatch
    or violation; a violation names the line of the first state that breaks it."""
    from .checking import Checker

    p = str(path)
    count = 0
    state: ClusterState | None = None
    try:
        header, stream = read_log(p)
        state = initial_state(header.config)
        if state.digest() != header.initial_digest:
            raise LogError(p, 1, f"initial digest {header.initial_digest} != {state.digest()} of the config's initial state")
        checker = None
        if check:
            checker = Checker(state, full=lambda s: check_invariants(s))
            found = checker.start(1)
            if found is not None:
                return ReplayResult(0, state.digest(), [{"line": 1, "violation": x} for x in found.violations], None, state)
        for lineno, i, t, digest in stream:
            try:
                nxt = apply(state, t)
            except Rejected as e:
                raise LogError(p, lineno, f"{t} rejected: {e}") from None
            got = nxt.digest()
            if got != digest:
                raise LogError(p, lineno, f"digest mismatch after {t}: log has {digest}, replay gives {got}")
            state = nxt
            count += 1
            if checker is not None:
                found = checker.step(t, state, lineno)
                if found is not None:
                    return ReplayResult(count, got, _found(found), None, state)
            if on_step is not None:
                on_step(count)
        if checker is not None:
            found = checker.finish()
            if found is not None:
                return ReplayResult(count, state.digest(), _found(found), None, state)
    except LogError as e:
        last = state.digest() if state is not None else ""
        return ReplayResult(count, last, [], {"line": e.line, "reason": e.reason}, state)
    return ReplayResult(count, state.digest(), [], None, state)
