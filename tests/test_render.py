"""The renderer: a state as text a person reads at a glance, the diff of two states, and
the story of a log (docs/corpus.md)."""

from __future__ import annotations

from dataclasses import replace

from kvsm.render import Names, diff, show, styled
from kvsm.corpus.run import read_run
from kvsm.render.story import tail_story
from kvsm.state import initial_state
from kvsm.transitions import REGISTRY

from .helpers import append_steps, T, backup, fresh, run, serve


def _served_and_backed():
    s = serve(fresh(), 0, [1, 2, 3])
    s = run(s, T("Arrive", rid=1, tokens=[1, 2, 9], out_pages=1), T("Match", rid=1))
    return backup(s, 1)


def test_show_prints_every_part_of_the_state_in_a_fixed_layout():
    s = run(_served_and_backed(), T("Insert", rid=1))
    assert show(s) == "\n".join([
        "clock 5  next node #4  next request r2",
        "tree",
        "  #0  root",
        "  └─ #2  [1,2]  L1 p0(r0) p1(r1)  lock 1  hits 2  touched 4",
        "     ├─ #1  [3]  L1 p2(r0)  L2 h0  hits 1  touched 2",
        "     └─ #3  [9]  L1 p4(r0)  lock 1  hits 1  touched 5",
        "lanes",
        "  r0  used 3/4  free p6",
        "  r1  used 2/4  free p5 p7",
        "host  used 1/8  free h1..7",
        "writes  r0 done 0  r1 done 0",
        "requests",
        "  r1  decoding  [1,2,9]  out 1  at #3  holds p3(r1)",
    ])


def test_show_is_deterministic_and_has_no_blank_line():
    a = show(_served_and_backed())
    assert a == show(_served_and_backed())
    assert "\n\n" not in a and not a.endswith("\n")


def test_a_pending_backup_shows_its_object_being_written_and_which_ranks_wrote_it():
    s = serve(fresh(), 0, [1, 2])
    s = run(s, T("Reserve", node=1, fits=True), T("WriteDone", rank=1))
    text = show(s, sections=("tree", "writes"))
    assert "#1  [1,2]  L1 p0(r0) p1(r1)  L2 h0..1 writing  lock 1" in text
    assert "writes  r0 done 0  r1 done 1\n  #1  h0..1  done by r1" in text


def test_diff_shows_only_what_the_transition_changed():
    a = run(fresh(), T("Arrive", rid=0, tokens=[1], out_pages=0), T("Match", rid=0), T("Insert", rid=0))
    b = run(a, T("Finish", rid=0))
    assert diff(a, b) == "\n".join([
        "tree",
        "  ~ #1  lock 1 → 0",
        "requests",
        "  - r0  decoding  [1]  at #1",
    ])
    assert diff(b, b) == "(no change)"


def test_diff_names_a_new_node_s_parent_and_a_moved_node():
    s = serve(fresh(), 0, [1, 2, 3])
    a = run(s, T("Arrive", rid=1, tokens=[1, 9], out_pages=0))
    b = run(a, T("Split", node=1, at=1))
    d = diff(a, b, sections=("tree",))
    assert "+ #2  under #0  [1]  L1 p0(r0)" in d
    assert "~ #1  [1,2,3] → [2,3]  moved under #2 (was #0)  L1 p0(r0) p1(r1) p2(r0) → p1(r1) p2(r0)" in d


def test_l3_pages_are_named_by_the_prefix_they_hold_and_ranks_by_their_progress():
    s = serve(fresh(L3=4), 0, [1, 2])
    s = run(backup(s, 1), T("SpillSubmit"), T("SpillGathered", rank=0), T("SpillDone", rank=0, ok=True))
    text = show(s, sections=("disks", "spills"))
    assert text == "\n".join([
        "disks",
        "  r0  up  used 1/4  holds [1]",
        "  r1  up  used 0/4",
        "spills",
        "  #1  [1,2]  pinned  r0 written  r1 -",
    ])


def test_a_broken_state_is_shown_not_refused():
    """A node whose parent is gone and a page whose content is not its node's: what a
    violation looks like is what the renderer exists to show."""
    s = serve(fresh(), 0, [1, 2])
    n = s.nodes[1]
    broken = replace(s, nodes=s.nodes.set(1, n.with_(parent=7)), dev_content=s.dev_content.set(0, 12345))
    text = show(broken, Names([(1, 2)]))  # the unreachable node has no prefix; the log names it
    assert "#1  [1,2]  L1 p0(r0) p1(r1)  hits 1  touched 1  unreachable from the root, parent #7" in text
    assert "content (pages that do not hold what their node says)\n  L1 p0  holds ?0000000000003039  expected [1] (#1 page 0)" in text


def test_names_given_by_a_log_name_pages_whose_request_is_gone():
    s = serve(fresh(L3=4), 0, [1, 2])
    s = run(backup(s, 1), T("SpillSubmit"), T("SpillGathered", rank=0), T("SpillGathered", rank=1),
            T("SpillDone", rank=0, ok=True), T("SpillDone", rank=1, ok=True), T("SpillAck"),
            T("EvictDevice", node=1), T("EvictHost", node=1))
    assert "holds ?" in show(s, sections=("disks",))  # nothing in the state names [1,2] any more
    assert "r1  up  used 1/4  holds [1,2]" in show(s, Names([(1, 2)]), sections=("disks",))


def test_styled_colours_added_removed_and_changed_lines():
    text = styled("tree\n  + #2\n  - #3\n  ~ #4  lock 1 → 0")
    styles = {span.style for span in text.spans}
    assert {"green", "red", "yellow", "bold"} <= styles
    assert text.plain == "tree\n  + #2\n  - #3\n  ~ #4  lock 1 → 0"


# ---- stories of logs ----------------------------------------------------------------------------------


def _violating_log(tmp_path, monkeypatch):
    """A walk on a model whose Commit forgets to take the committed writes off the ranks'
    counts (invariant 4, Pending)."""
    from typer.testing import CliRunner

    from kvsm.cli import app

    right = REGISTRY["Commit"]
    monkeypatch.setitem(REGISTRY, "Commit", replace(right, apply=lambda s, t: replace(right.apply(s, t), write_done=s.write_done)))
    for seed in range(50):
        log = tmp_path / f"walk-{seed}.jsonl"
        res = CliRunner().invoke(app, ["walk", "--config", "small", "--steps", "60", "--seed", str(seed), "-o", str(log)])
        assert res.exit_code == 0, res.output
        r = read_run(log)
        first = r.first_violation()
        if first is not None and first > 8:
            return log, first
    raise AssertionError("no walk commits within 60 steps")


def test_a_story_marks_the_violation_at_its_step(tmp_path, monkeypatch):
    log, first = _violating_log(tmp_path, monkeypatch)
    r = read_run(log)
    assert r.steps[first - 1].transition.name == "Commit"
    assert "4 Pending" in r.violations(first)[0] and not r.violations(first - 1)


def test_tail_story_tells_the_last_steps_before_the_violation_and_how_to_open_it(tmp_path, monkeypatch):
    log, first = _violating_log(tmp_path, monkeypatch)
    text = tail_story(log, last=3)
    lines = text.split("\n")
    assert lines[1] == f"the last 3 steps up to step {first}:"
    assert [x.split("  ")[0] for x in lines if x.startswith("step ")] == [f"step {first - 2}", f"step {first - 1}", f"step {first}"]
    assert f"step {first}  Commit" in text and "  violation 4 Pending: rank 0 has finished" in text
    assert f"state after step {first}\n  clock" in text
    assert lines[-2] == f"shrink it to a corpus case: kvsm corpus add {log} --name NAME"
    assert lines[-1].startswith(f"the whole story: kvsm show {log} --all")


def test_tail_story_ends_where_replay_stops(tmp_path):
    from kvsm.log import Header, LogWriter
    from kvsm.transitions import apply

    cfg = fresh().config
    s = initial_state(cfg)
    log = tmp_path / "bad.jsonl"
    with LogWriter(log, Header(config=cfg, seed=None, source="hand", initial_digest=s.digest(), extra={})) as w:
        for t in (T("Arrive", rid=0, tokens=[1], out_pages=0), T("Match", rid=0)):
            s = apply(s, t)
            w.write(t, s)
    last = log.read_text().splitlines()[-2]
    append_steps(log, last.replace('"i":2', '"i":3').replace('"Match"', '"Finish"'))
    text = tail_story(log)
    assert "step 3  Finish rid=0\n  stopped at line 4: rejected: request 0 is matched, not decoding" in text


def test_effects_are_one_line_per_batch_of_a_kind_in_the_view_s_words():
    from kvsm.effects import Fill, HostPage, PoisonDev, PoisonHost, ReloadRead, SpillGather, SpillWrite, Store
    from kvsm.render.effects import effect_lines

    names = Names([(1, 2)])
    one, two = sorted(names.names, key=lambda c: len(names.names[c]))
    effects = [
        PoisonDev(3), Fill(0, one), Fill(3, two), Store(0, 0, 4), Store(0, 3, 5), PoisonHost(0, 2), PoisonHost(6, 1),
        SpillGather(rank=1, base=4, pages=(HostPage(host=5, hash=two),)),
        SpillGather(rank=0, base=4, pages=()),
        SpillWrite(rank=1, hashes=(two,), ok=False),
        ReloadRead(rank=0, base=2, pages=(HostPage(host=2, hash=one),), ok=True),
    ]
    assert effect_lines(effects, names, 2) == [
        "poison p3(r1)",
        "fill p0(r0)←[1] p3(r1)←[1,2]",
        # a copy by another rank than the page's owner (a defect) says who
        "store h4←p0(r0) h5←p3(r1) by r0",
        "poison h0..1 h6",
        "gather r1 [1,2]←h5",
        "gather r0 nothing",
        "disk write r1 [1,2] failed",
        "disk read r0 h2←[1]",
    ]
    assert effect_lines([], names, 2) == []


def test_a_story_shows_each_step_s_effects_under_it(tmp_path):
    from kvsm.render.story import run_steps, story

    steps = [T("Arrive", rid=0, tokens=[1, 2], out_pages=0), T("Match", rid=0), T("Insert", rid=0)]
    r = run_steps(fresh().config, ((0, t, None) for t in steps))
    text = story(r, with_states=False)
    assert "step 2  Match rid=0\n  requests\n" in text  # no effect, no line
    assert "step 3  Insert rid=0\n  fill p0(r0)←[1] p1(r1)←[1,2]\n  clock 0 → 1" in text
