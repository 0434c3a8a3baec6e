"""The transition log: JSONL, documented in docs/log-format.md and
kvsm/schema/log.schema.json.

Line 1 is the header: format version, the config, the seed, the source and the digest
of the initial state. Every other line but the last is one transition: its index, name,
rank (for per-rank transitions), arguments and the digest of the state after it. The
last line (format 2) is the end line: the number of transitions and the final digest,
so that a log cut anywhere, even exactly at a line boundary, is detected.

Reading is strict and streaming: a malformed line, an unknown transition, bad
arguments or a missing end line stops the reader with the line number and the reason
(`LogError`); replaying a log against the model is `kvsm.replay`'s. Logs of format 1 (no end line) are
still read, and `old_format_note` says what they lack. Writing is atomic: a log is
written to a temporary file beside its destination, ended, and renamed into place when
complete (kvsm/output.py), so a crash or an error never leaves a partial log, nor
clobbers an existing one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Iterator

from .bounds import INT64_MAX, MAX_DEVICE_PAGES, MAX_LINE_BYTES
from .config import Config, ConfigError
from .output import AtomicFile, OutputError
from .state import ClusterState
from .transitions import REGISTRY, Transition, arrive_ns

# Format 2 added the end line. Format 1 logs are still read (without truncation
# detection at a line boundary); see `old_format_note`.
FORMAT = 2
READABLE_FORMATS = (1, 2)

SOURCES = ("walk", "sim", "tlc", "hand", "gpu", "realimpl")


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


@dataclass(frozen=True, kw_only=True)
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
        self._out = AtomicFile(self.path)  # kvsm/output.py: checks the path, writes beside it
        self._tmp = self._out.file
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
            self._out.discard()
            return
        try:
            f.write(end_line(self.count, self.last_digest) + "\n")
        except OSError as e:  # a full disk
            self._out.discard()
            raise OutputError(self.path, e.strerror or str(e)) from None
        self._out.commit()  # the renamed file holds the end line, even after a crash


# ---- reading ---------------------------------------------------------------------------------


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def json_error(e: json.JSONDecodeError) -> str:
    """A JSON decoder's error with its place: `Invalid control character at column 17`,
    `Expecting value at line 3 column 1` (the line only for text of several lines: a
    log line's own number is said by its caller). The decoder's `msg` alone may end in
    a dangling "at" (`Invalid control character at`), its place given separately."""
    text = e.doc.rstrip("\r\n")
    pos = min(e.pos, len(text))  # past a line's end (a value expected at its newline): its end
    col = pos - text.rfind("\n", 0, pos)
    where = f"line {text.count(chr(10), 0, pos) + 1} column {col}" if "\n" in text else f"column {col}"
    return f"{e.msg.removesuffix(' at')} at {where}"


def parse_header(path: str, text: str) -> Header:
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise LogError(path, 1, f"header is not valid JSON: {json_error(e)}") from None
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
    return Header(config=cfg, seed=d.get("seed"), source=d["source"], initial_digest=d["initial_digest"], extra=extra, format=fmt)


def _json_line(path: str, lineno: int, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise LogError(path, lineno, f"not valid JSON ({json_error(e)}){_TRUNCATED if _at_end(e) else ''}") from None


_TRUNCATED = "; truncated line?"


def _at_end(e: json.JSONDecodeError) -> bool:
    """The decoder stopped at the end of the text: what a line cut short gives."""
    return e.pos >= len(e.doc.rstrip())


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
            if k in spec.optional:
                continue
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
                if t.name == "Arrive" and arrive_ns(t) < 0:
                    raise LogError(p, lineno, f"Arrive argument 'ns' must be >= 0 (a namespace), got {arrive_ns(t)}")
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
