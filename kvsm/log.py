"""The transition log: JSONL, documented in docs/log-format.md and
kvsm/schema/log.schema.json.

Line 1 is the header: format version, the config, the seed, the source and the digest
of the initial state. Every other line but the last is one transition: its index, name,
rank (for per-rank transitions), arguments and the digest of the state after it. The
last line (format 2) is the end line: the number of transitions and the final digest,
so that a log cut anywhere, even exactly at a line boundary, is detected.

Reading is strict and streaming: a malformed line, an unknown transition, bad
arguments, a missing end line, a rejected guard or a digest mismatch stops the reader
with the line number and the reason (`LogError`). Logs of format 1 (no end line) are
still read, and `old_format_note` says what they lack. Writing is atomic: a log is
written to a temporary file beside its destination, ended, and renamed into place when
complete, so a crash or an error never leaves a partial log, nor clobbers an existing one.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Iterator

from .bounds import INT64_MAX, MAX_DEVICE_PAGES, MAX_LINE_BYTES
from .invariants import full_violations
from .config import Config, ConfigError
from .state import ClusterState, Rejected, initial_state
from .transitions import REGISTRY, Transition, apply

# Format 2 added the end line. Format 1 logs are still read (without truncation
# detection at a line boundary); see `old_format_note`.
FORMAT = 2
READABLE_FORMATS = (1, 2)

# The from-scratch check of `replay(check=True)` (`kvsm.checking` also checks each
# transition's writes after it); looked up at each use, so that a test can replace it.
check_invariants = full_violations
SOURCES = ("walk", "sim", "tlc", "hand", "gpu")


# Bounds on the integers of a log line (kvsm/bounds.py, docs/log-format.md): JSON allows
# any size, and a 40-digit page symbol or request id is a damaged log, not a bigger run.
INT_MAX = INT64_MAX


class LogError(ValueError):
    """A log that cannot be replayed; `line` is 1-based (0: the file as a whole).
    `malformed`: the file is not a complete, well-formed log (cannot be opened, bad
    JSON, a missing field, a missing end line); otherwise it is well-formed but does not
    replay (a guard rejects a transition, a digest differs)."""

    def __init__(self, path: str, line: int, reason: str, malformed: bool = True) -> None:
        super().__init__(f"{path}:{line}: {reason}" if line else f"{path}: {reason}")
        self.path, self.line, self.reason, self.malformed = path, line, reason, malformed


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
    format: int = FORMAT  # of the log it was read from; a header is always written in FORMAT

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


def end_line(transitions: int, final_digest: str) -> str:
    """The last line of a log: how many transitions it has and the digest after the last."""
    return dumps({"end": True, "transitions": transitions, "final_digest": final_digest})


class LogWriter:
    """Writes a log atomically: use as a context manager; the file appears, ended by its
    end line, only when the block exits without an exception."""

    def __init__(self, path: str | Path, header: Header) -> None:
        self.path = Path(path)
        self.header = header
        self.count = 0
        self.last_digest = header.initial_digest
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
        self.last_digest = state.digest()
        self._tmp.write(transition_line(self.count, t, self.last_digest) + "\n")

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self._tmp is not None
        f, self._tmp = self._tmp, None
        if exc_type is not None:
            f.close()
            os.unlink(self._tmp_name)
            return
        try:
            f.write(end_line(self.count, self.last_digest) + "\n")
            f.flush()
            os.fsync(f.fileno())  # the renamed file holds the end line, even after a crash
            f.close()
            os.replace(self._tmp_name, self.path)
        except OSError as e:  # a full disk, or the path became a directory meanwhile
            if not f.closed:
                try:
                    f.close()
                except OSError:
                    pass
            os.unlink(self._tmp_name)
            raise OutputError(self.path, e.strerror or str(e)) from None


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
    fmt = d.get("kvsm_log")
    if not _int(fmt) or fmt < 1:
        raise LogError(path, 1, f"not a kvsm log (header field 'kvsm_log' is {fmt!r}, expected the format version {FORMAT})")
    if fmt not in READABLE_FORMATS:
        raise LogError(path, 1, f"log format {fmt} is newer than this kvsm reads (formats {READABLE_FORMATS[0]} to {FORMAT}): upgrade kvsm")
    for k in ("config", "source", "initial_digest"):
        if k not in d:
            raise LogError(path, 1, f"header lacks field '{k}'")
    if d["source"] not in SOURCES:
        raise LogError(path, 1, f"header field 'source' must be one of {', '.join(SOURCES)}")
    if d.get("seed") is not None and not (_int(d["seed"]) and abs(d["seed"]) <= INT_MAX):
        raise LogError(path, 1, f"header field 'seed' must be an integer of at most 64 bits or null, got {d['seed']!r}")
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
    return Header(cfg, d.get("seed"), d["source"], d["initial_digest"], extra, fmt)


def _json_line(path: str, lineno: int, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise LogError(path, lineno, f"not valid JSON ({e.msg}); truncated line?") from None


def parse_transition(path: str, lineno: int, text: str) -> tuple[int, Transition, str]:
    """One transition line -> (index, transition, digest); structural checks only."""
    return _transition(path, lineno, _json_line(path, lineno, text))


def _bounded(v: Any) -> bool:
    return _int(v) and -INT_MAX <= v <= INT_MAX


def _transition(path: str, lineno: int, d: Any) -> tuple[int, Transition, str]:
    if not isinstance(d, dict):
        raise LogError(path, lineno, "a transition line must be a JSON object")
    for k, typ in (("i", "an integer"), ("name", "a string"), ("args", "an object"), ("digest", "a string")):
        if k not in d:
            raise LogError(path, lineno, f"field '{k}' is missing")
    if not _int(d["i"]):
        raise LogError(path, lineno, f"field 'i' must be an integer, got {d['i']!r}")
    if not _bounded(d["i"]):
        raise LogError(path, lineno, f"field 'i' must be within ±(2^63-1), got {d['i']}")
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
        if not _bounded(rank):
            raise LogError(path, lineno, f"{name} field 'rank' must be within ±(2^63-1), got {rank}")
    elif rank is not None:
        raise LogError(path, lineno, f"{name} is not a per-rank transition but has field 'rank'")
    args = d["args"]
    for k, typ in spec.args.items():
        if k not in args:
            raise LogError(path, lineno, f"{name} needs argument '{k}'")
        v = args[k]
        if typ == "int" and not _int(v):
            raise LogError(path, lineno, f"{name} argument '{k}' must be an integer, got {v!r}")
        if typ == "int" and not _bounded(v):
            raise LogError(path, lineno, f"{name} argument '{k}' must be within ±(2^63-1), got {v}")
        if typ == "bool" and not isinstance(v, bool):
            raise LogError(path, lineno, f"{name} argument '{k}' must be true or false, got {v!r}")
        if typ == "ints" and not (isinstance(v, list) and all(_int(x) for x in v)):
            raise LogError(path, lineno, f"{name} argument '{k}' must be a list of integers, got {v!r}")
        if typ == "ints" and not all(_bounded(x) for x in v):
            bad = next(x for x in v if not _bounded(x))
            raise LogError(path, lineno, f"{name} argument '{k}' must hold integers within ±(2^63-1), got {bad}")
    extra = set(args) - set(spec.args)
    if extra:
        raise LogError(path, lineno, f"{name} has unknown argument '{sorted(extra)[0]}'")
    return d["i"], Transition.make(name, rank=rank, **args), d["digest"]


def _text(path: str, lineno: int, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise LogError(path, lineno, f"not UTF-8 text (byte {e.start + 1} of the line)") from None


def _readline(f: IO[bytes], path: str, lineno: int) -> bytes:
    raw = f.readline(MAX_LINE_BYTES + 1)
    if len(raw) > MAX_LINE_BYTES:
        raise LogError(path, lineno, f"line is longer than {MAX_LINE_BYTES >> 20} MiB: not a kvsm log line")
    return raw


def _end(path: str, lineno: int, d: dict[str, Any], count: int, last_digest: str) -> None:
    """Check the end line against what was read: the count and the final digest."""
    unknown = set(d) - {"end", "transitions", "final_digest"}
    if unknown:
        raise LogError(path, lineno, f"end line has unknown field '{sorted(unknown)[0]}'")
    if d["end"] is not True or not _int(d.get("transitions")) or not isinstance(d.get("final_digest"), str):
        raise LogError(path, lineno, "end line must be {\"end\": true, \"transitions\": N, \"final_digest\": D}")
    if d["transitions"] != count:
        raise LogError(path, lineno, f"end line says {d['transitions']} transitions, the log has {count}: lines are missing")
    if d["final_digest"] != last_digest:
        raise LogError(path, lineno, f"end line's final digest {d['final_digest']} is not the last transition's {last_digest}")


def read_log(path: str | Path) -> tuple[Header, Iterator[tuple[int, int, Transition, str]]]:
    """The header and a stream of (line number, index, transition, digest). The stream
    checks the end line (format 2) after the last transition: a log without it, or with
    anything after it, raises `LogError` when the stream reaches its end."""
    p = str(path)
    try:
        f = open(p, "rb")
    except OSError as e:
        raise LogError(p, 0, f"cannot open: {e.strerror}") from None
    try:
        first = _readline(f, p, 1)
        if not first:
            raise LogError(p, 1, "empty file: no header")
        if not first.endswith(b"\n"):
            raise LogError(p, 1, "header line is not terminated (truncated file?)")
        header = parse_header(p, _text(p, 1, first))
    except LogError:
        f.close()
        raise
    except OSError as e:  # a directory opens on some systems and fails on read
        f.close()
        raise LogError(p, 0, f"cannot read: {e.strerror}") from None
    ended = header.format >= 2

    def lines() -> Iterator[tuple[int, int, Transition, str]]:
        with f:
            expect = 1
            last = header.initial_digest
            lineno = 1
            while True:
                lineno += 1
                raw = _readline(f, p, lineno)
                if not raw:
                    break
                text = _text(p, lineno, raw)
                if not text.endswith("\n"):
                    raise LogError(p, lineno, "line is not terminated (truncated file?)")
                if not text.strip():
                    raise LogError(p, lineno, "blank line")
                d = _json_line(p, lineno, text)
                if ended and isinstance(d, dict) and "end" in d:
                    _end(p, lineno, d, expect - 1, last)
                    if f.readline(1):
                        raise LogError(p, lineno + 1, "a line after the end line")
                    return
                i, t, digest = _transition(p, lineno, d)
                if t.name == "Arrive" and t.arg("out_pages") > MAX_DEVICE_PAGES:
                    # a claim, not data: Insert would lay out that many positions (a request
                    # asking for more than its config's device pages is legal: it never fits)
                    raise LogError(p, lineno, f"Arrive argument 'out_pages' {t.arg('out_pages')} is more than the bound {MAX_DEVICE_PAGES}")
                if i != expect:
                    raise LogError(p, lineno, f"transition index {i}, expected {expect}")
                expect += 1
                last = digest
                yield lineno, i, t, digest
            if ended:
                raise LogError(
                    p,
                    lineno,
                    f"the log ends after transition {expect - 1} without its end line: it was cut short "
                    "(a log of format 2 ends with {\"end\": true, ...})",
                )

    return header, lines()


def _found(f: Any) -> list[dict[str, Any]]:
    """A checker's finding as replay reports it; its label is (line, step index)."""
    line, step = f.at
    return [{"line": line, "step": step, "transition": str(f.transition), "violation": x} for x in f.violations]


def old_format_note(path: str | Path, header: Header) -> str | None:
    """What a reader should tell its user about a log of an older format (None for the
    current one): it is read, but a cut exactly at a line boundary cannot be detected."""
    if header.format >= FORMAT:
        return None
    how = f"source '{header.source}'" + (f", seed {header.seed}" if header.seed is not None else "")
    return (
        f"{path}: a log of format {header.format} (this kvsm writes format {FORMAT}): it is read, but it has no end line, "
        f"so a cut at a line boundary would go unnoticed; regenerate it with the command that wrote it ({how}) "
        f"to get format {FORMAT}"
    )


def peek_header(path: str | Path) -> Header | None:
    """The header of the log at `path`, or None when it cannot be read (the reader that
    follows reports why)."""
    p = str(path)
    try:
        with open(p, "rb") as f:
            first = _readline(f, p, 1)
        return parse_header(p, _text(p, 1, first))
    except (OSError, LogError):
        return None


@dataclass
class ReplayResult:
    transitions: int
    final_digest: str
    violations: list[dict[str, Any]]
    first_mismatch: dict[str, Any] | None
    final_state: ClusterState | None = None
    malformed: bool = False  # first_mismatch is a defect of the file itself (LogError.malformed)
    format: int | None = None  # the log's format version (None: the header could not be read)
    bug: str = "none"  # the injected defect the log was replayed with
    log_bug: str = "none"  # the one the log's header says it was written with

    @property
    def ok(self) -> bool:
        return self.first_mismatch is None and not self.violations

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "transitions": self.transitions,
            "final_digest": self.final_digest,
            "violations": self.violations,
            "first_mismatch": self.first_mismatch,
            "malformed": self.malformed,
            "format": self.format,
        }
        if self.bug != "none" or self.log_bug != "none":
            d["bug"] = self.bug
            d["log_bug"] = self.log_bug
        return d


def model_config(header: Header, bug: str | None, where: str) -> Config:
    """The config a checker replays a log with: the header's, with the injected defect it
    is asked for (`--bug`; none by default) whatever defect the header names. A log
    written by a model with a defect says so in its header; it is not replayed with
    that defect unless asked, so that the correct model rejects it where it deviates."""
    want = bug or "none"
    if header.config.bug == want:
        return header.config
    try:
        return header.config.with_bug(want, where)
    except ConfigError as e:
        raise LogError(where, 0, str(e)) from None


def replay(
    path: str | Path,
    check: bool = False,
    on_step: Callable[[int], None] | None = None,
    bug: str | None = None,
) -> ReplayResult:
    """Replay a log from its header's config with the injected defect `bug` (none by
    default, see `model_config`), verifying every digest (and with `check` every
    invariant after every transition, `kvsm.checking`) and its end line. Stops at the
    first mismatch or violation; a mismatch names the step, its transition and why, a
    violation the line of the first state that breaks it."""
    from .checking import Checker

    p = str(path)
    count = 0
    state: ClusterState | None = None
    fmt: int | None = None
    bugs = {"bug": bug or "none", "log_bug": "none"}
    try:
        header, stream = read_log(p)
        fmt = header.format
        bugs["log_bug"] = header.config.bug
        state = initial_state(model_config(header, bug, p))
        if state.digest() != header.initial_digest:
            raise LogError(p, 1, f"initial digest {header.initial_digest} != {state.digest()} of the config's initial state", malformed=False)
        checker = None
        if check:
            # (the checker's own from-scratch check, with its cache, unless a test replaced it)
            checker = Checker(state) if check_invariants is full_violations else Checker(state, full=check_invariants)
            found = checker.start(1)
            if found is not None:
                return ReplayResult(0, state.digest(), [{"line": 1, "violation": x} for x in found.violations], None, state, format=fmt, **bugs)
        for lineno, i, t, digest in stream:
            try:
                nxt = apply(state, t)
            except Rejected as e:
                raise _StepError(p, lineno, f"{t} rejected: {e}", i, t) from None
            got = nxt.digest()
            if got != digest:
                raise _StepError(p, lineno, f"digest mismatch after {t}: log has {digest}, replay gives {got}", i, t)
            state = nxt
            count += 1
            if checker is not None:
                found = checker.step(t, state, (lineno, i))
                if found is not None:
                    return ReplayResult(count, got, _found(found), None, state, format=fmt, **bugs)
            if on_step is not None:
                on_step(count)
        if checker is not None:
            found = checker.finish()
            if found is not None:
                return ReplayResult(count, state.digest(), _found(found), None, state, format=fmt, **bugs)
    except LogError as e:
        last = state.digest() if state is not None else ""
        where: dict[str, Any] = {"line": e.line}
        if isinstance(e, _StepError):
            where |= {"step": e.step, "transition": str(e.transition)}
        return ReplayResult(count, last, [], where | {"reason": e.reason}, state, e.malformed, fmt, **bugs)
    return ReplayResult(count, state.digest(), [], None, state, format=fmt, **bugs)


class _StepError(LogError):
    """A logged step the model does not take as logged (rejected, or another digest)."""

    def __init__(self, path: str, line: int, reason: str, step: int, t: Transition) -> None:
        super().__init__(path, line, reason, malformed=False)
        self.step, self.transition = step, t
