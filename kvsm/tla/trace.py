"""The trace modules of `kvsm validate`: a stretch of a log, with the model's states,
written as a TLA+ module that TLC follows step by step.

A trace module starts from one model state written in full (`Firsts[1]`) and gives,
for every step, the transition with its arguments and what the model's step changed
in each spec variable (its *delta*). `TraceNext` takes the spec's action named by the
step and then compares every variable with the current value patched by the delta
(an unchanged variable with itself), so every variable of every state is compared,
and the variables that differ are named (`bad`); TLC stops at the first step whose
action is not enabled (a deadlock) or whose successor differs (the invariant
`TraceOk`). The comparison against "current value patched" is the model's next state
because the current value is, by induction from the compared initial state, the
model's current state.

Why deltas and not states: the default config's state holds 2,048 device and 4,096
host page contents, so a literal state per step makes the module grow with the state
size times the steps (1.7 MB for 1,000 steps, which TLC parses at about half a
megabyte a second) and evaluating every literal state costs TLC as much again. A
delta grows with what the step changed, and is applied by TLC's built-in
operators (`@@`, `\\`, `\\cup`), which are native.

Values are written compactly, each checked in Python to denote exactly the model's
value (`kvsm.tla.compact`); a first state by `kvsm.tla.encoder`, a step's delta by
`kvsm.tla.delta`. This module assembles the module around them.
"""

from __future__ import annotations

from ..config import Config
from ..transitions import Transition
from .compact import Tokens, ints
from .frame import frames
from .location import spec_dir
from .models import ModelConfig, constant_bindings
from .canon import SPEC_VARIABLES
from .values import to_tla

MODULE = "KVTrace"

# Each transition's parameters in the order of the spec's operator: log argument
# names, and "rank" for the rank of a per-rank transition.
SPEC_PARAMS: dict[str, tuple[str, ...]] = {
    "Arrive": ("rid", "tokens", "out_pages", "ns"),
    "Match": ("rid",),
    "Insert": ("rid",),
    "Finish": ("rid",),
    "Abort": ("rid",),
    "Split": ("node", "at"),
    "PruneStaleTail": ("node", "at"),
    "Reserve": ("node", "fits"),
    "Prepare": ("rid", "fits"),
    "AckAppend": ("rank",),
    "AckAppendAll": (),
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

# How each variable's delta is applied to its current value (an operator of the trace
# module); None: the delta is the new value itself.
APPLY: dict[str, str | None] = {
    "nodes": "ApplyMap",
    "next_id": None,
    "clock": None,
    "next_rid": None,
    "dev_free": "ApplySet",
    "l2_free": "ApplySet",
    "objects": "ApplyMap",
    "pending": "ApplySet",
    "writes": "ApplySeq",
    "requests": "ApplyMap",
    "write_done": None,
    "dev_content": "ApplyDev",
    "host_content": "ApplyFill",
    "spill_queue": "ApplySeq",
    "spills": None,
    "reload_candidates": "ApplyMap",
    "reloads": None,
    "spill_gathered": None,
    "spill_done": None,
    "reload_done": None,
    "disk_ok": None,
    "disk_faults": None,
    "l3": "ApplyRanks",
    "spill_staged": None,
    "loads": None,
    "load_done": None,
    "commit_round": None,
    "acked": None,
    "prepared": None,
    "diverged": None,
    "halted": None,
}
assert tuple(APPLY) == SPEC_VARIABLES


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


# ---- the module -------------------------------------------------------------------------------


def _arg(v: object, tok: Tokens, key: str) -> str:
    if key == "tokens":
        return tok.ref(tuple(v))  # type: ignore[arg-type]
    if isinstance(v, (tuple, list)):
        return ints(v)
    return to_tla(v)


def step_record(t: Transition, tok: Tokens, delta: dict[str, str] | None) -> str:
    """The log's step as `<<code, taken, d, arguments...>>`: the transition's `CODE`,
    whether the model took it (FALSE: the model rejected it, and the stretch ends with
    it, unconstrained), the model's delta `d` (what its step changed in each spec
    variable), and the spec parameters (`SPEC_PARAMS`) in order. A tuple, not a record:
    TLC parses a tuple of values about three times faster than a record of fields."""
    args = dict(t.args)
    if t.name == "Arrive":
        args.setdefault("ns", 0)  # (a log leaves namespace 0 out)
    vals = [str(t.rank) if k == "rank" else _arg(args[k], tok, k) for k in SPEC_PARAMS[t.name]]
    if delta is None:
        head = [str(CODE[t.name]), "FALSE", "EmptyFn"]
    else:
        head = [str(CODE[t.name]), "TRUE", "[" + ", ".join(f"{k} |-> {v}" for k, v in delta.items()) + "]" if delta else "EmptyFn"]
    return "<<" + ", ".join(head + vals) + ">>"


# The order in which `Take` and `Bad` try the transitions (CASE tries its arms in
# turn): the most frequent in a simulator's log first.
ORDER = ("CommitCall", "WriteDone", "Commit", "Arrive", "Match", "Insert", "Finish", "Reserve", "LoadDone", "LoadBack")
ORDER += tuple(n for n in SPEC_PARAMS if n not in ORDER)
assert sorted(ORDER) == sorted(SPEC_PARAMS)
# A step's transition, as the first element of its tuple (`step_record`).
CODE = {name: i for i, name in enumerate(ORDER, start=1)}


def _take_case() -> str:
    """`Take(s)`: the spec's action named by step `s`, with the step's arguments."""
    arms = []
    for name in ORDER:
        args = SPEC_PARAMS[name]
        call = name if not args else f"{name}({', '.join(f's[{i}]' for i in range(4, 4 + len(args)))})"
        arms.append(f"s[1] = {CODE[name]} -> {call}  \\* {name}")
    return "Take(s) ==\n    CASE " + "\n      [] ".join(arms)


def _apply(var: str, cur: str, d: str) -> str:
    op = APPLY[var]
    if op == "ApplyDev":
        return f"{op}({cur}, {d}.{var}, E)"
    return f"{d}.{var}" if op is None else f"{op}({cur}, {d}.{var})"


def _bad_ops() -> str:
    """`BadX(d)` for each transition X: the variables whose value after a step of X is
    not the model's (`d`, what the model's step changed). A variable X may change
    (no top-level UNCHANGED conjunct of its definition keeps it, kvsm.tla.frame) is
    compared with its current value patched by `d`; one X keeps is the current value
    by the spec itself, which is the model's unless `d` names it. `Bad(s)` takes the
    one of step s."""
    fr = frames(spec_dir(), tuple(SPEC_PARAMS), SPEC_VARIABLES)
    ops, arms = [], []
    for a in ORDER:
        may = [v for v in SPEC_VARIABLES if v not in fr[a]]
        kept = "{" + ", ".join(f'"{v}"' for v in SPEC_VARIABLES if v in fr[a]) + "}"
        parts = [f"(DOMAIN d \\cap {kept})"] + [
            f'Chk("{v}", {v}\' = ' + ("E" if v == "nodes" else f'IF "{v}" \\in DOMAIN d THEN {_apply(v, v, "d")} ELSE {v}') + ")"
            for v in may
        ]
        body = "\n    \\cup ".join(parts)
        if "nodes" in may or "dev_content" in may:
            body = 'LET E == IF "nodes" \\in DOMAIN d THEN ApplyMap(nodes, d.nodes) ELSE nodes  \\* the model\'s next nodes\n    IN ' + body
        ops.append(f"Bad{a}(d) ==\n    {body}")
        arms.append(f"s[1] = {CODE[a]} -> Bad{a}(s[3])")
    return "\n\n".join(ops) + "\n\nBad(s) ==\n    CASE " + "\n      [] ".join(arms)


def module_text(init: dict[str, str], steps: list[str], tok: Tokens, from_init: bool) -> str:
    """A trace module of one stretch: `init` is its first state, `steps` its steps. With
    `from_init` the first state is also the spec's `Init` (the log's start)."""
    return module_text_many([(init, steps, from_init)], tok)


def module_text_many(stretches: list[tuple[dict[str, str], list[str], bool]], tok: Tokens, used: set[int] | None = None) -> str:
    """A trace module of several stretches `(first state, steps, from_init)`, followed
    one after another: `Firsts[k]` is stretch k's first state, its steps are
    `Steps[Starts[k]]` .. `Steps[Starts[k + 1] - 1]`, and after its last step TLC jumps
    to the next stretch's first state. Only the first stretch is compared with the
    spec's `Init` (`from_init`): a later stretch with `from_init` must start from the
    same state as the first, which then is `Init` too. `Tok` holds the token sequences
    of `used` (default: those `tok` marked used)."""
    if not stretches:
        raise ValueError("a trace module needs at least one stretch")
    if any(s[2] and not (stretches[0][2] and s[0] == stretches[0][0]) for s in stretches[1:]):
        raise ValueError("a stretch from Init must come first, and every later one from Init start from its state")
    from_init = stretches[0][2]
    same_init = "\n    \\cup ".join(f'Chk("{v}", {v} = Firsts[1].{v})' for v in SPEC_VARIABLES)
    assign = "\n".join(f"    /\\ {v} = F.{v}" for v in SPEC_VARIABLES)
    jump = "\n".join(f"    /\\ {v}' = F.{v}" for v in SPEC_VARIABLES)
    firsts, starts, n = [], [], 1
    for init, steps, _ in stretches:
        firsts.append("[\n    " + ",\n    ".join(_wrap(f"{v} |-> {init[v]}") for v in SPEC_VARIABLES) + "]")
        starts.append(n)
        n += len(steps)
    starts.append(n)
    first = ",\n    ".join(firsts)
    trace_init = (
        "TraceInit == Init /\\ stretch = 1 /\\ cursor = 1 /\\ bad = SameAsFirst" if from_init
        else "TraceInit == SetTo(Firsts[1]) /\\ stretch = 1 /\\ cursor = 1 /\\ bad = {}"
    )
    body_steps = (",\n    ").join(_wrap(s) for _, steps, _ in stretches for s in steps)
    starts_text = _wrap("<<" + ", ".join(map(str, starts)) + ">>")
    return f"""---- MODULE {MODULE} ----
\\* Generated by `kvsm validate`: a stretch of a log as a behaviour to check against KVCache.
EXTENDS KVCache
VARIABLES cursor, bad, stretch

\\* TLC's .cfg has no negative literal: a constant at -1 (MaxDiskFaults, no fault) is bound to this
TraceMinusOne == -1

Ar(a, s, n) == [i \\in 1 .. n |-> a + s * (i - 1)]
ArS(a, s, n) == {{a + s * i : i \\in 0 .. n - 1}}

\\* The token sequences of the log's arrivals that this stretch needs.
Tok == {_wrap(tok.module_text(used))}

Cnt(j, k) == IF j = 0 THEN NoContent ELSE SubSeq(Tok[j], 1, k)
Pre(j, k, n) == [i \\in 1 .. n |-> SubSeq(Tok[j], 1, k + i - 1)]
RunFn(r) == [p \\in ArS(r[1], r[2], r[3]) |-> SubSeq(Tok[r[4]], 1, r[5] + r[6] * ((p - r[1]) \\div r[2]))]
\\* The long folds below are recursive functions local to their operator, not recursive
\\* operators: TLC looks names up along the whole chain of operator calls, so a chain of
\\* n recursive operator calls costs about n^2 (a node of 120 pages, a step of many runs).
FillFrom(rs) == LET F[i \\in 1 .. Len(rs) + 1] == IF i > Len(rs) THEN EmptyFn ELSE RunFn(rs[i]) @@ F[i + 1]
                IN F[1]
Fill(d) == FillFrom(d[1]) @@ [p \\in d[2] |-> NoContent]

Nd(parent, key, dev, host, durable, lock, pin, hits, touched, ns) ==
    [parent |-> parent, key |-> key, dev |-> dev, host |-> host, durable |-> durable,
     lock |-> lock, pin |-> pin, hits |-> hits, touched |-> touched, ns |-> ns]
Ob(base, length, committed, owner) == [base |-> base, length |-> length, committed |-> committed, owner |-> owner]
ObP(base, length, committed, owner, pages) ==
    [base |-> base, length |-> length, committed |-> committed, owner |-> owner, pages |-> pages]
Rq(tokens, out_pages, phase, node, pages, tried, hit, hitlen, hitpin, ns) ==
    [tokens |-> tokens, out_pages |-> out_pages, phase |-> phase, node |-> node, pages |-> pages, tried |-> tried,
     hit |-> hit, hitlen |-> hitlen, hitpin |-> hitpin, ns |-> ns]
PR(t) == [r \\in Ranks |-> t[r + 1]]
Lanes(ls, n) == [i \\in 1 .. n |-> ls[((i - 1) % R) + 1][((i - 1) \\div R) + 1]]

\\* Deltas: a map's <<new entries, changed fields of entries, removed keys>>, a set's
\\* <<removed, added>>, a queue's <<elements dropped at its head, elements appended>>,
\\* page contents as runs for Fill.
Merge(r, m) == [x \\in DOMAIN r |-> IF x \\in DOMAIN m THEN m[x] ELSE r[x]]
ApplyMap(f, d) ==
    LET g == IF d[3] = {{}} THEN f ELSE Remove(f, d[3])
    IN d[1] @@ ([x \\in DOMAIN d[2] |-> Merge(g[x], d[2][x])] @@ g)
ApplySet(f, d) == (f \\ d[1]) \\cup d[2]
ApplySeq(f, d) == SubSeq(f, d[1] + 1, Len(f)) \\o d[2]
ApplyFill(f, d) == Fill(d) @@ f
SeqFill(ps, j, k) ==
    LET F[i \\in 1 .. Len(ps) + 1] == IF i > Len(ps) THEN EmptyFn ELSE (ps[i] :> SubSeq(Tok[j], 1, k + i - 1)) @@ F[i + 1]
    IN F[1]
NodeFills(fs, E) ==
    LET F[i \\in 1 .. Len(fs) + 1] == IF i > Len(fs) THEN EmptyFn ELSE SeqFill(E[fs[i][1]].dev, fs[i][2], fs[i][3]) @@ F[i + 1]
    IN F[1]
\\* Device pages: those filled with the pages of nodes of E (the model's next nodes), and the others.
ApplyDev(f, d, E) == (NodeFills(d[1], E) @@ Fill(d[2])) @@ f
ApplyRanks(f, d) == [r \\in DOMAIN f |-> IF r \\in DOMAIN d THEN ApplyMap(f[r], d[r]) ELSE f[r]]

\\* The first state of each stretch: the model's state before its first step.
Firsts == <<
    {first}>>

\\* The steps of every stretch, one stretch after another: <<the transition's code (as
\\* in Take), whether the model took it (FALSE: its stretch ends with it, unconstrained),
\\* `d`, what the model's step changed, the transition's arguments>>.
Steps == <<
    {body_steps}>>

\\* Stretch k's steps are Steps[Starts[k]] .. Steps[Starts[k + 1] - 1].
Starts == {starts_text}
NS == Len(Starts) - 1

Chk(v, ok) == IF ok THEN {{}} ELSE {{v}}

SameAsFirst ==
    {same_init}

\\* The variables whose value after a step is not the model's: those the step's action
\\* may change (no top-level UNCHANGED of its definition keeps them, kvsm.tla.frame)
\\* compared with their current value patched by the model's delta `d`; one it keeps is
\\* the current value by the spec itself, which is the model's unless `d` names it.
{_bad_ops()}

{_take_case()}

SetTo(F) ==
{assign}

JumpTo(F) ==
{jump}

{trace_init}

\\* Take the step at the cursor; the variables that then differ from the model's
\\* next state are `bad` (TraceOk fails on them). After a stretch's last step, jump
\\* to the next stretch's first state; after the last stretch's, stutter.
TraceNext ==
    \\/ /\\ cursor < Starts[stretch + 1]
       /\\ bad = {{}}
       /\\ Take(Steps[cursor])
       /\\ bad' = IF Steps[cursor][2] THEN Bad(Steps[cursor]) ELSE {{}}
       /\\ cursor' = cursor + 1
       /\\ UNCHANGED stretch
    \\/ /\\ stretch < NS
       /\\ cursor = Starts[stretch + 1]
       /\\ bad = {{}}
       /\\ JumpTo(Firsts[stretch + 1])
       /\\ stretch' = stretch + 1
       /\\ UNCHANGED <<cursor, bad>>
    \\/ /\\ stretch = NS
       /\\ cursor = Len(Steps) + 1
       /\\ UNCHANGED <<vars, cursor, bad, stretch>>

TraceOk == bad = {{}}
\\* The cursor says the stretch too: stretch k's steps are Starts[k] .. Starts[k + 1] - 1.
TraceView == <<cursor, bad>>
====
"""


def trace_config(cfg: Config) -> ModelConfig:
    # Prompts only shape Next's arrivals; the log's Arrive steps carry their own tokens.
    consts = {k: ("<-", "TraceMinusOne") if v == "-1" else ("=", v) for k, v in constant_bindings(cfg).items() if k != "Prompts"}
    consts["Prompts"] = ("=", "{}")
    return ModelConfig(
        constants=consts,
        sections={"INIT": ["TraceInit"], "NEXT": ["TraceNext"], "INVARIANTS": ["TraceOk"], "VIEW": ["TraceView"]},
    )
