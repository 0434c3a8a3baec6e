"""`kvsm validate`: TLC decides whether a log is a behaviour of the spec.

The Python model replays the log and computes every state; kvsm writes them, mapped
onto the spec's variables (`kvsm.tla.specmap`), into a generated TLA+ module `KVTrace`
together with the log's transitions, a cursor, and a next-state relation that takes
the transition the log names at the cursor (the spec's own action, with the log's
arguments) and requires the variables to equal the log's next state. TLC runs it
with deadlock checking on: a log the spec accepts ends in a stuttering state and TLC
finishes (exit 0); at the first step the spec does not allow, no successor exists and
TLC reports a deadlock after the matched prefix, whose length names the step.

States are written as deltas: a map-valued variable that changes in a few entries is
the previous value patched, so the module grows with what the log changes, not with
the size of the state. The cursor is the VIEW, which keeps TLC's fingerprints and its
printed traces small (one trace of the log is one state per cursor value).

If the model itself rejects a step (its guard is false), the trace ends with that
step, unconstrained: TLC then says whether the spec allows it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import Config
from ..log import LogError, model_config, read_log
from ..state import Rejected, initial_state
from ..transitions import Transition, apply
from .models import ModelConfig, constant_bindings
from .runner import TLCResult, run_tlc, spec_dir
from .specmap import SPEC_VARIABLES, ContentNames, spec_values
from .values import Expr, Fcn, Record, to_tla

MODULE = "KVTrace"
MAP_VARIABLES = {"nodes", "objects", "requests", "write_done", "dev_content", "host_content"}


@dataclass
class ValidateResult:
    log: str
    steps: int  # transitions in the log (up to the first the model rejects)
    matched: int  # transitions the spec took
    ok: bool
    first_rejected: dict[str, Any] | None  # the first step the spec does not allow
    model_rejected: dict[str, Any] | None  # the first step the Python model does not allow
    digest_mismatch: dict[str, Any] | None  # the first line whose digest the model does not reproduce
    tlc: TLCResult | None

    def to_json(self) -> dict[str, Any]:
        return {
            "log": self.log,
            "ok": self.ok,
            "steps": self.steps,
            "matched": self.matched,
            "first_rejected": self.first_rejected,
            "model_rejected": self.model_rejected,
            "digest_mismatch": self.digest_mismatch,
            "distinct_states": self.tlc.distinct_states if self.tlc else None,
            "seconds": round(self.tlc.seconds, 2) if self.tlc else None,
        }


def _step_record(t: Transition) -> Record:
    rec = Record(name=t.name)
    if t.rank is not None:
        rec["rank"] = t.rank
    for k, v in t.args:
        rec[k] = tuple(v) if isinstance(v, (tuple, list)) else v
    return rec


# Each transition's parameters in the order of the spec's operator: log argument
# names, and "rank" for the rank of a per-rank transition.
SPEC_PARAMS: dict[str, tuple[str, ...]] = {
    "Arrive": ("rid", "tokens", "out_pages"),
    "Match": ("rid",),
    "Insert": ("rid",),
    "Finish": ("rid",),
    "Abort": ("rid",),
    "Split": ("node", "at"),
    "Reserve": ("node", "fits"),
    "Prepare": ("rid", "fits"),
    "WriteDone": ("rank",),
    "CommitCall": ("rank",),
    "Commit": (),
    "Rollback": ("node",),
    "EvictDevice": ("node",),
    "EvictHost": ("node",),
    "LoadBack": ("rid",),
    "LoadDone": ("rank",),
    "SpillSubmit": (),
    "SpillGathered": ("rank",),
    "SpillDone": ("rank", "ok"),
    "SpillAck": (),
    "ReloadMark": ("rid",),
    "ReloadReserve": ("rid",),
    "ReloadDone": ("rank", "ok"),
    "ReloadAdmit": (),
    "ReloadExpire": (),
    "DiskFail": ("rank",),
    "DiskRecover": ("rank",),
}


def _take_case() -> str:
    """`Take(s)`: the spec's action named by step `s`, with the step's arguments."""
    arms = []
    for name in SPEC_PARAMS:
        args = SPEC_PARAMS[name]
        call = name if not args else f"{name}({', '.join('s.' + a for a in args)})"
        arms.append(f's.name = "{name}" -> {call}')
    return "Take(s) ==\n    CASE " + "\n      [] ".join(arms)


class _Prefixes:
    """Page content, request tokens and node keys, which are all prefixes or slices of
    the token sequences of the log's arrivals, written as `SubSeq(Tok[j], a, b)`, so
    that the module grows linearly with the log rather than with its prefixes."""

    def __init__(self) -> None:
        self.tokens: list[tuple[int, ...]] = []
        self.at: dict[tuple[int, ...], tuple[int, int]] = {}  # prefix -> (j, k)

    def add(self, tokens: tuple[int, ...]) -> None:
        if any(tokens[:k] not in self.at for k in range(1, len(tokens) + 1)):
            self.tokens.append(tokens)
            j = len(self.tokens)
            for k in range(1, len(tokens) + 1):
                self.at.setdefault(tokens[:k], (j, k))

    def last(self, prefix: tuple[int, ...], n: int) -> Any:
        """The last `n` symbols of `prefix`."""
        if n == 0 or prefix not in self.at:
            return prefix[len(prefix) - n :]
        j, k = self.at[prefix]
        return Expr(f"SubSeq(Tok[{j}], {k - n + 1}, {k})")

    def content(self, f: dict) -> Fcn:
        return Fcn({p: self.last(pre, len(pre)) for p, pre in f.items()})

    def requests(self, f: dict) -> Fcn:
        return Fcn({rid: Record(r, tokens=self.last(r["tokens"], len(r["tokens"]))) for rid, r in f.items()})

    def nodes(self, f: dict) -> Fcn:
        pre: dict[int, tuple[int, ...]] = {}

        def prefix(n: int) -> tuple[int, ...]:
            if n not in pre:
                r = f[n]
                pre[n] = (prefix(r["parent"]) if r["parent"] in f else ()) + tuple(r["key"])
            return pre[n]

        return Fcn({n: Record(r, key=self.last(prefix(n), len(r["key"]))) for n, r in f.items()})


def _wrap(text: str, width: int = 160) -> str:
    """Break a long line of TLA+ after commas: TLC's parser slows down with the length
    of a line (a value written on one 100k-character line parses five times slower).
    Generated values hold no string with a comma in it."""
    if len(text) <= width:
        return text
    parts = text.split(", ")
    lines, cur = [], parts[0]
    for part in parts[1:]:
        if len(cur) >= width:
            lines.append(cur + ",")
            cur = "    " + part
        else:
            cur += ", " + part
    lines.append(cur)
    return "\n".join(lines)


def _compact(value: Any) -> str:
    """A function on 0..n-1 that maps most points to one value, as that constant
    function patched (the initial content of every page is the empty prefix)."""
    if isinstance(value, Fcn) and len(value) > 8 and set(value) == set(range(len(value))):
        counts: dict[Any, int] = {}
        for v in value.values():
            counts[v] = counts.get(v, 0) + 1
        common, n = max(counts.items(), key=lambda kv: kv[1])
        if n > len(value) // 2:
            rest = Fcn({x: v for x, v in value.items() if v != common})
            return f"Patch([x \\in 0..{len(value) - 1} |-> {to_tla(common)}], {{}}, {to_tla(rest)})"
    return to_tla(value)


class _Emitter:
    """Per-variable definitions, one per change, patched from the previous one when
    the change is small."""

    def __init__(self) -> None:
        self.defs: list[str] = []
        self.last: dict[str, tuple[str, Any]] = {}  # variable -> (definition name, value)

    def ref(self, var: str, value: Any, k: int) -> str:
        prev = self.last.get(var)
        if prev is not None and prev[1] == value:
            return prev[0]
        name = f"{var}_{k}"
        text = _compact(value)
        if prev is not None and var in MAP_VARIABLES and isinstance(value, dict) and isinstance(prev[1], dict):
            old = prev[1]
            gone = frozenset(x for x in old if x not in value)
            upd = Fcn({x: v for x, v in value.items() if x not in old or old[x] != v})
            if len(gone) + len(upd) < len(value) // 2:
                text = f"Patch({prev[0]}, {to_tla(gone)}, {to_tla(upd)})"
        elif prev is not None and isinstance(value, frozenset) and isinstance(prev[1], frozenset):
            gone, new = prev[1] - value, value - prev[1]
            if len(gone) + len(new) < len(value) // 2:
                text = f"(({prev[0]} \\ {to_tla(gone)}) \\cup {to_tla(new)})"
        self.defs.append(_wrap(f"{name} == {text}"))
        self.last[var] = (name, value)
        return name


def trace_module(steps: list[Transition], states: list[dict[str, Any]], cfg: Config) -> str:
    em = _Emitter()
    prefixes = _Prefixes()
    for t in steps:
        if t.name == "Arrive":
            prefixes.add(tuple(t.arg("tokens")))
    rows = []
    for k, values in enumerate(states):
        fields = []
        for var in SPEC_VARIABLES:
            v = values[var]
            if var in ("dev_content", "host_content"):
                v = prefixes.content(v)
            elif var == "requests":
                v = prefixes.requests(v)
            elif var == "nodes":
                v = prefixes.nodes(v)
            fields.append(f"{var} |-> {em.ref(var, v, k) if isinstance(v, (dict, frozenset, tuple)) else to_tla(v)}")
        rows.append(_wrap("[" + ", ".join(fields) + "]"))
    is_now = "\n".join(f"    /\\ {v} = States[k].{v}" for v in SPEC_VARIABLES)
    is_next = "\n".join(f"    /\\ {v}' = States[k].{v}" for v in SPEC_VARIABLES)
    return f"""---- MODULE {MODULE} ----
\\* Generated by `kvsm validate`: a log as a behaviour to check against KVCache.
EXTENDS KVCache
VARIABLE cursor

\\* The token sequences of the log's arrivals; page content is written as their prefixes.
Tok == {_wrap(to_tla(tuple(prefixes.tokens)))}

Patch(f, gone, upd) == [x \\in (DOMAIN f \\ gone) \\cup DOMAIN upd |-> IF x \\in DOMAIN upd THEN upd[x] ELSE f[x]]

\\* The log's transitions; step k leads from States[k] to States[k + 1].
Steps == <<{_wrap(", ".join(to_tla(_step_record(t)) for t in steps))}>>

{chr(10).join(em.defs)}

States == <<{(","+chr(10)+"    ").join(rows)}>>

Is(k) ==
{is_now}

IsNext(k) ==
{is_next}

{_take_case()}

TraceInit == Init /\\ Is(1) /\\ cursor = 1

\\* Take the step at the cursor; where the model computed the state after it, the
\\* spec must reach that state. After the last step, stutter.
TraceNext ==
    \\/ /\\ cursor <= Len(Steps)
       /\\ Take(Steps[cursor])
       /\\ IF cursor + 1 <= Len(States) THEN IsNext(cursor + 1) ELSE TRUE
       /\\ cursor' = cursor + 1
    \\/ /\\ cursor = Len(Steps) + 1
       /\\ UNCHANGED <<vars, cursor>>

TraceView == cursor
====
"""


def trace_config(cfg: Config) -> ModelConfig:
    # Prompts only shape Next's arrivals; the log's Arrive steps carry their own tokens.
    consts = {k: ("=", v) for k, v in constant_bindings(cfg).items() if k != "Prompts"}
    consts["Prompts"] = ("=", "{}")
    return ModelConfig(constants=consts, sections={"INIT": ["TraceInit"], "NEXT": ["TraceNext"], "VIEW": ["TraceView"]})


def validate(path: str | Path, workers: int = 1, bug: str | None = None) -> ValidateResult:
    """Decide with TLC whether the log at `path` is a behaviour of the spec, with the
    injected defect `bug` (the correct spec by default, whatever defect the log was
    written with). The Python model replays the log as it was written (with the
    defect its header names) to compute its states; the spec decides. A log that
    cannot be read (malformed line, unknown transition) raises `LogError`."""
    p = str(path)
    header, stream = read_log(p)
    cfg = header.config
    spec_cfg = model_config(header, bug, p)
    state = initial_state(cfg)
    if state.digest() != header.initial_digest:
        raise LogError(p, 1, f"initial digest {header.initial_digest} != {state.digest()} of the config's initial state", malformed=False)
    names = ContentNames()
    steps: list[Transition] = []
    lines: list[int] = []
    states = [spec_values(state, names)]
    model_rejected = digest_mismatch = None
    for lineno, _, t, digest in stream:
        if t.name == "Arrive":
            names.add(tuple(t.arg("tokens")))
        steps.append(t)
        lines.append(lineno)
        try:
            state = apply(state, t)
        except Rejected as e:
            model_rejected = {"line": lineno, "transition": str(t), "reason": str(e)}
            break
        if digest_mismatch is None and state.digest() != digest:
            digest_mismatch = {"line": lineno, "transition": str(t), "log": digest, "model": state.digest()}
        states.append(spec_values(state, names))
    spec_dir()  # fail early, with the reason, when the spec cannot be found
    text = trace_module(steps, states, cfg)
    t0 = time.perf_counter()
    res = run_tlc(Path(f"{MODULE}.tla"), trace_config(spec_cfg), workers=workers, deadlock=True, extra_modules={MODULE: text}, view=True)
    res.seconds = time.perf_counter() - t0
    v = res.violation
    first_rejected = None
    if v is not None and v.kind == "deadlock":
        matched = (res.depth or 1) - 1
        if v.trace:  # printed through the VIEW: the cursor
            matched = v.trace[-1].state["view"] - 1
        t = steps[matched]
        first_rejected = {"line": lines[matched], "step": matched + 1, "transition": str(t), "name": t.name}
    elif v is not None:
        raise RuntimeError(f"TLC reported {v.property} while validating {p}; the trace module is wrong")
    elif not res.distinct_states:
        first_rejected = {"line": 1, "step": 0, "transition": "Init", "name": "Init"}
        matched = 0
    else:
        matched = len(steps)
    ok = first_rejected is None and model_rejected is None and digest_mismatch is None
    return ValidateResult(p, len(steps), matched, ok, first_rejected, model_rejected, digest_mismatch, res)
