"""Small builders shared by the tests."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Iterator

from kvsm.config import Config, Prompt
from kvsm.invariants import violations_after
from kvsm.state import ClusterState, initial_state
from kvsm.transitions import Transition, apply


def config(**kw: Any) -> Config:
    base = Config(name="test", R=2, P=1, L1=4, L2=8, max_requests=0, max_live=0)
    prompts = kw.pop("prompts", None)
    cfg = replace(base, **kw)
    if prompts is not None:
        cfg = replace(cfg, prompts=tuple(Prompt(tuple(p)) for p in prompts))
    return cfg


def T(name: str, rank: int | None = None, **args: Any) -> Transition:
    return Transition.make(name, rank=rank, **args)


def run(s: ClusterState, *ts: Transition, check: bool = True) -> ClusterState:
    for t in ts:
        s = apply(s, t)
        if check:
            v = violations_after(t.rank, s)
            assert not v, f"after {t}: {v}"
    return s


def serve(s: ClusterState, rid: int, tokens: list[int], out_pages: int = 0, finish: bool = True) -> ClusterState:
    """Arrive, Match, Insert (and Finish) one request."""
    s = run(s, T("Arrive", rid=rid, tokens=tokens, out_pages=out_pages), T("Match", rid=rid), T("Insert", rid=rid))
    if finish:
        s = run(s, T("Finish", rid=rid))
    return s


def commit_round(s: ClusterState) -> ClusterState:
    """One round of the commit collective: every rank's CommitCall, then Commit."""
    s = run(s, *(T("CommitCall", rank=r) for r in range(s.config.R)))
    return run(s, T("Commit"))


def COMMIT(R: int) -> tuple[Transition, ...]:
    """The transitions of one round of the commit collective on R ranks, for a log."""
    return tuple(T("CommitCall", rank=r) for r in range(R)) + (T("Commit"),)


def load_back(s: ClusterState, rid: int) -> ClusterState:
    """LoadBack, then every rank's LoadDone."""
    s = run(s, T("LoadBack", rid=rid))
    return run(s, *(T("LoadDone", rank=r) for r in range(s.config.R)))


def backup(s: ClusterState, nid: int) -> ClusterState:
    """Reserve, every rank's WriteDone, one commit round."""
    s = run(s, T("Reserve", node=nid, fits=True))
    for r in range(s.config.R):
        s = run(s, T("WriteDone", rank=r))
    return commit_round(s)


def fresh(**kw: Any) -> ClusterState:
    return initial_state(config(**kw))


def node_by_key(s: ClusterState, key: tuple[int, ...]) -> int:
    for nid, n in s.nodes.items():
        if n.key == key:
            return nid
    raise KeyError(key)


def append_steps(path: Any, *rows: str) -> None:
    """Add hand-made transition lines to the end of a written log, before its end line,
    and rewrite the end line to count them (a well-formed log that a reader must judge
    by its steps, not refuse as cut short)."""
    import json

    from kvsm.log import end_line

    lines = path.read_text().splitlines()
    assert json.loads(lines[-1]).get("end") is True, "the log has no end line"
    body = lines[:-1] + list(rows)
    last = json.loads(body[-1])
    path.write_text("\n".join(body + [end_line(len(body) - 1, last["digest"])]) + "\n")


def command_paths(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command under a click group, as its words (`("corpus", "verify")`)."""
    for name, cmd in group.commands.items():
        if hasattr(cmd, "commands"):
            yield from command_paths(cmd, (*path, name))
        else:
            yield (*path, name)


def one_error(res: Any, message: str) -> str:
    """A CLI result refused as bad input: exit 2, one `error: ` line holding `message`, no
    traceback; returns the line."""
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    assert message in lines[0], lines[0]
    return lines[0]


def write_back_profile_model(d: Any, name: str, consts: dict[str, str]) -> Any:
    """spec/MC_reference_write_back as model `name` in directory `d`, with the constants
    `consts` (TLA+ values as written, e.g. '"fixed"' or "2") bound otherwise: its cfg."""
    import shutil

    from kvsm.tla.location import spec_dir

    for f in spec_dir().glob("KV*.tla"):
        shutil.copy(f, d / f.name)
    base = spec_dir() / "MC_reference_write_back"
    (d / f"{name}.tla").write_text(base.with_suffix(".tla").read_text().replace("MODULE MC_reference_write_back ", f"MODULE {name} "))
    text = base.with_suffix(".cfg").read_text()
    for k, v in consts.items():
        text, n = re.subn(rf"^(    {k}) = .*$", rf"\1 = {v}", text, flags=re.M)
        assert n == 1, k
    (d / f"{name}.cfg").write_text(text)
    return d / f"{name}.cfg"


def overlocking_insert() -> Any:
    """A planted defect: an Insert of a prompt of two pages or more leaves one lock too
    many on its node (on every rank alike, so only the invariants can see it); the walks
    of `small`, whose prompts have two pages, reach it too. Install it with
    `monkeypatch.setitem(REGISTRY, "Insert", overlocking_insert())`."""
    from kvsm.transitions import REGISTRY
    from kvsm.tx import Tx

    right = REGISTRY["Insert"]

    def apply_(s: ClusterState, t: Transition) -> ClusterState:
        s2 = right.apply(s, t)
        req = s2.requests[t.arg("rid")]
        if len(req.tokens) < 2 or req.node == 0:
            return s2
        tx = Tx(s2)
        tx.update(req.node, lock=tx.node(req.node).lock + 1)
        return tx.commit()

    return replace(right, apply=apply_)


def skew_nth_match(monkeypatch: Any, nth: int) -> None:
    """Plant a model mutation: the `nth` `Match` the model applies (1-based, counted
    from now) also moves the clock one tick, which the spec does not."""
    from kvsm.transitions import REGISTRY

    right = REGISTRY["Match"]
    calls = []

    def match(s: ClusterState, t: Transition) -> ClusterState:
        out = right.apply(s, t)
        calls.append(t)
        return replace(out, clock=out.clock + 1) if len(calls) == nth else out

    monkeypatch.setitem(REGISTRY, "Match", replace(right, apply=match))



def late_write_done() -> Any:
    """A planted guard mutation: a rank's `WriteDone` waits until every lower rank has
    finished at least as many writes, so rank 1's is enabled one step later than the
    spec's (after rank 0's). No invariant breaks and every step the model takes is
    one the spec takes. Install it with `monkeypatch.setitem(REGISTRY, "WriteDone",
    late_write_done())`."""
    from kvsm.transitions import REGISTRY, Rejected

    right = REGISTRY["WriteDone"]

    def apply_(s: ClusterState, t: Transition, *view: Any) -> ClusterState:
        r = t.rank or 0
        if any(s.write_done[q] <= s.write_done[r] for q in range(r)):
            raise Rejected(f"rank {r} waits for the lower ranks' writes")
        return right.apply(s, t, *view)

    return replace(right, apply=apply_)


def skewing_match() -> Any:
    """A planted wrong next state: every `Match` also moves the clock one tick, which
    the spec's does not. Install it with `monkeypatch.setitem(REGISTRY, "Match",
    skewing_match())`."""
    from kvsm.transitions import REGISTRY

    right = REGISTRY["Match"]

    def apply_(s: ClusterState, t: Transition, *view: Any) -> ClusterState:
        out = right.apply(s, t, *view)
        return replace(out, clock=out.clock + 1, _digest=None)

    return replace(right, apply=apply_)


def run_case_command(case, command: str):
    """A campaign case's `kvsm sim` command (`case.json`'s `command`) run through the CLI
    in the case's directory, where its `workload.jsonl` is: the CliRunner result."""
    import os

    from typer.testing import CliRunner

    from kvsm.cli import app

    cwd = os.getcwd()
    os.chdir(case)
    try:
        return CliRunner().invoke(app, command.split()[1:])
    finally:
        os.chdir(cwd)
