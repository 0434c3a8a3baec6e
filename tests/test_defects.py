"""The injected defects (docs/defects.md). Each one is a deviation of the Python model and
of the spec under the same name; TLC catches it on its model with a counterexample that
the model with the defect replays to the same violation at the same step, and that the
correct model and the correct spec both refuse at the step where it deviates; a fixed
simulator seed catches it; the GPU backend (on the CPU) catches the ones whose symptom
is wrong bytes or ranks that disagree; and model and spec have the same state graph
under it (up to the states where it breaks an invariant)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvsm.config import BUGS, IMPLEMENTED_BUGS, Config, ConfigError, load_config
from kvsm.defects import CATALOGUE, SIM_REQUESTS, byte_witness, config_with, conform_model, counterexample, witness_model, write_log
from kvsm.invariants import violations
from kvsm.replay import replay
from kvsm.state import initial_state
from kvsm.transitions import apply, successors
from kvsm.tla.runner import graph_workers

ROOT = Path(__file__).resolve().parent.parent
DEFECTS = sorted(CATALOGUE)


def _model(name: str) -> str:
    m = CATALOGUE[name].model
    return str(ROOT / m) if m.endswith(".cfg") else m


# ---- the config and the log ------------------------------------------------------------------------


def test_every_implemented_defect_is_a_config_value_and_an_unknown_one_is_refused():
    for bug in IMPLEMENTED_BUGS:
        assert Config.from_json({"bug": bug}).bug == bug
    with pytest.raises(ConfigError, match="field 'bug' must be one of"):
        Config.from_json({"bug": "double_fre"})
    assert set(CATALOGUE) <= set(IMPLEMENTED_BUGS) <= set(BUGS)


def test_a_bug_free_config_runs_the_same_model_as_before():
    # no defect: every transition of small's graph is the one `bug = none` always took
    cfg = load_config("small")
    assert cfg.bug == "none"
    s = initial_state(cfg)
    for t, s2 in successors(s):
        assert s2.diverged is None and not violations(s2)


def test_a_log_is_replayed_with_its_defect_only_when_asked(tmp_path):
    # double_free's counterexample on small: the correct model refuses it at the step that
    # deviates and the header names the defect; with --bug it replays to the violation
    cfg = config_with(load_config("small"), "double_free")
    steps = counterexample(cfg)
    log = write_log(cfg, steps, tmp_path / "double_free.jsonl")
    mutant = replay(log, check=True, bug="double_free")
    assert mutant.first_mismatch is None and mutant.violations
    assert {v["step"] for v in mutant.violations} == {len(steps)}
    assert all(v["violation"].startswith("6 HostPages") for v in mutant.violations)
    correct = replay(log, check=True)
    assert correct.first_mismatch["step"] == len(steps) and correct.first_mismatch["transition"].startswith("Rollback")
    assert correct.to_json()["log_bug"] == "double_free" and correct.to_json()["bug"] == "none"


def test_a_rank_decides_from_its_own_view_only_under_a_rank_view_defect():
    # local_host_alloc: the counterexample's last Reserve is rank 0's decision; rank 1 refuses it
    cfg = config_with(load_config("small"), "local_host_alloc")
    steps = counterexample(cfg)
    s = initial_state(cfg)
    for t in steps[:-1]:
        s = apply(s, t)
    last = steps[-1]
    after = apply(s, last)
    assert after.diverged == (last.name, (1,))
    assert apply(s, last, view=0).replicated_digest() == after.replicated_digest()
    with pytest.raises(Exception, match="no free run"):
        apply(s, last, view=1)
    correct = load_config("small")
    s = initial_state(correct)
    for t in steps[:-1]:
        s = apply(s, t)
    # without the defect every rank's view is the replicated one
    assert apply(s, last, view=1).digest() == apply(s, last).digest()


# ---- TLC --------------------------------------------------------------------------------------------

TLC_PROPERTY = {
    "skip_collective": "Collectives",
    "local_host_alloc": "Agreement",
    "double_free": "HostPages",
    "evict_pending": "Pending",
    "split_pending": "Locks",
    "duplicate_ack": "Content",
    "reload_stale_anchor": "Tree",
    "l3_no_min": "Agreement",
    "wallclock_tiebreak": "Agreement",
    "load_uaf": "Locks",
    "backup_host_uaf": "HostPages",
    "load_host_release": "DevicePages",
    "lease_expiry_free": "HostPages",
    "reload_fail_double_free": "HostPages",
    "failed_store_visible": "Content",
    "host_hit_unpinned": "HostPages",
    "loadback_evicts_own_host": "DevicePages",
    "write_back_fail_evict": "Residency",
    "host_key_no_ns": "Isolation",
    "lora_salt_collision": "Isolation",
    "l3_key_no_ns": "Isolation",
}


@pytest.fixture(scope="module")
def tlc_caught(tmp_path_factory):
    """TLC's check of each defect on its model, run once for every test that reads it."""
    from kvsm.tla.check import check

    d = tmp_path_factory.mktemp("tlc")
    runs: dict = {}

    def get(name: str):
        if name not in runs:
            runs[name] = check(_model(name), bug=name, log_path=d / f"{name}.jsonl")
        return runs[name]

    return get


# field bugs whose TLC run costs more than the default budget allows (lease_expiry_free and
# reload_fail_double_free: the one-rank L3 model to its 17th and 18th steps;
# load_host_release: MC_load_uaf to its 14th step, 3,285 states): `pytest -m exhaustive`;
# their corpus cases replay the counterexamples by default
FIELD_TLC_EXHAUSTIVE = {"lease_expiry_free", "load_host_release", "reload_fail_double_free", "host_hit_unpinned", "loadback_evicts_own_host",
                        "write_back_fail_evict"}


@pytest.mark.tlc
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.exhaustive) if n in FIELD_TLC_EXHAUSTIVE else n for n in DEFECTS]
)
def test_tlc_catches_the_defect_and_its_counterexample_replays_to_the_same_violation(name, tlc_caught):
    res = tlc_caught(name)
    v = res.to_json()["violation"]
    assert v is not None and v["kind"] == "invariant" and v["property"] == TLC_PROPERTY[name], v
    assert v["log"] is not None, v.get("log_error")
    steps = v["steps"]
    mutant = replay(v["log"], check=True, bug=name)
    assert mutant.first_mismatch is None
    assert mutant.violations and {x["step"] for x in mutant.violations} == {steps}
    assert any(x["violation"].split(":")[0].split(" ", 1)[1] == TLC_PROPERTY[name] for x in mutant.violations)


# the field bugs' cross-check (TLC's validate of the counterexample, a JVM run of its
# own): left to `pytest -m exhaustive` to keep their default cost within budget
FIELD_VALIDATE_EXHAUSTIVE = {"backup_host_uaf", "load_host_release", "lease_expiry_free", "reload_fail_double_free",
                             "failed_store_visible", "host_hit_unpinned", "loadback_evicts_own_host", "write_back_fail_evict",
                             "host_key_no_ns", "lora_salt_collision", "l3_key_no_ns"}


@pytest.mark.tlc
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.exhaustive) if n in FIELD_VALIDATE_EXHAUSTIVE else n for n in DEFECTS]
)
def test_the_correct_model_and_the_correct_spec_refuse_the_counterexample_at_the_same_step(name, tlc_caught):
    from kvsm.tla.validate import validate

    log = tlc_caught(name).to_json()["violation"]["log"]
    correct = replay(log)
    assert correct.first_mismatch is not None and "step" in correct.first_mismatch
    res = validate(log)
    assert not res.ok and res.first_rejected is not None
    assert res.first_rejected["step"] == correct.first_mismatch["step"]
    assert res.first_rejected["transition"] == correct.first_mismatch["transition"]


# the defects' own models, each checked without its defect (the L3 ones take minutes;
# MC_loads is checked clean in the default run by tests/test_fidelity.py already)
_HEAVY_MODEL_OF = ("l3_no_min", "reload_stale_anchor", "load_uaf", "backup_host_uaf", "load_host_release",
                   "host_hit_unpinned", "loadback_evicts_own_host",
                   # MC_tenants and MC_tenant_salt with liveness (25 s each): the Python
                   # model's graphs of both are checked clean by tests/test_tenant_defects.py
                   # and tests/test_tenants.py conforms MC_tenants
                   "host_key_no_ns", "lora_salt_collision")
# one entry per model, heavy when any defect of it is (a model two defects share was
# checked twice before, once in the default run)
DEFECT_MODELS = sorted(
    (m, any(_model(n) == m and n in _HEAVY_MODEL_OF for n in DEFECTS))
    for m in {_model(n) for n in DEFECTS if CATALOGUE[n].model != "ci"}
)


@pytest.mark.tlc
@pytest.mark.parametrize(
    "model",
    [pytest.param(m, marks=[pytest.mark.exhaustive] if heavy else [], id=Path(m).stem) for m, heavy in DEFECT_MODELS],
)
def test_every_shipped_model_is_clean_without_a_defect(model):
    from kvsm.tla.check import check

    res = check(model, workers=graph_workers())
    assert res.ok, (model, res.to_json())


# the two L3 defects' models have hundreds of thousands of states, and the field bugs'
# conform runs take minutes of TLC: whole-graph runs left to `pytest -m exhaustive`
HEAVY_CONFORM = {"l3_no_min", "reload_stale_anchor", "backup_host_uaf", "load_host_release", "lease_expiry_free",
                 "reload_fail_double_free", "failed_store_visible", "host_hit_unpinned", "loadback_evicts_own_host", "write_back_fail_evict",
                 # the tenant defects: a minute of TLC each (MC_tenants, MC_tenant_salt)
                 "host_key_no_ns", "lora_salt_collision", "l3_key_no_ns",
                 # the slowest of ci's (35-55 s each on the CI machine): the default run keeps
                 # double_free, load_uaf, evict_pending, split_pending and wallclock_tiebreak
                 "duplicate_ack", "skip_collective", "local_host_alloc"}


@pytest.mark.tlc
@pytest.mark.slow
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.exhaustive) if n in HEAVY_CONFORM else n for n in DEFECTS]
)
def test_model_and_spec_have_the_same_graph_under_the_defect(name):
    from kvsm.tla.conform import conform

    model = conform_model(CATALOGUE[name])
    res = conform(str(ROOT / model) if model.endswith(".cfg") else model, bug=name)
    assert res.equal, res.to_json()["examples"]
    assert res.tlc_states == res.model_states and res.tlc_edges == res.model_edges


# ---- the simulator ----------------------------------------------------------------------------------


# the field bugs whose seed runs (300 requests with the defect, then without) cost 15-25 s
# each: `pytest -m exhaustive` (benchmarks/defects.py runs them all)
FIELD_SIM_EXHAUSTIVE = {"backup_host_uaf", "load_host_release", "reload_fail_double_free", "failed_store_visible",
                        "host_hit_unpinned", "loadback_evicts_own_host", "write_back_fail_evict"}


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.exhaustive) if n in FIELD_SIM_EXHAUSTIVE else n for n in DEFECTS]
)
def test_a_fixed_simulator_seed_catches_the_defect(name):
    from kvsm.sim import STOPS, SimOptions, simulate, stop_record

    d = CATALOGUE[name]
    opts = SimOptions(bug=name, check=True, seed=d.sim_seed, requests=SIM_REQUESTS, **d.sim)
    with pytest.raises(STOPS) as e:
        simulate(opts)
    rec = stop_record(e.value, d.sim_seed)
    assert rec["detector"] == d.sim_detector, rec
    # the same seed without the defect runs to its end, every invariant held
    clean = simulate(SimOptions(check=True, seed=d.sim_seed, requests=SIM_REQUESTS, **d.sim))
    assert clean.summary["requests"] == SIM_REQUESTS


# ---- the GPU backend on the CPU ----------------------------------------------------------------------


def _gpu_log(name: str, tmp_path: Path) -> Path:
    d = CATALOGUE[name]
    model = witness_model(d)
    if model == "ci":
        cfg = config_with(load_config("small"), name)
    else:
        from kvsm.tla.models import config_of_model

        cfg_path = ROOT / model
        cfg = config_with(config_of_model(cfg_path.with_suffix(".tla"), cfg_path), name)
    steps = byte_witness(cfg) if d.gpu == "bytes" else counterexample(cfg)
    assert steps, f"no run of {name} to replay"
    return write_log(cfg, steps, tmp_path / f"{name}.jsonl")


# defects whose byte witness is a search of minutes (the whole `loads` graph to its 20th
# step): left to `pytest -m exhaustive`
HEAVY_WITNESS = {"backup_host_uaf",
                 # the same reload_read check of the bytes as finding 7's test (tests/test_tenants.py)
                 "l3_key_no_ns"}


@pytest.mark.parametrize("device", [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.exhaustive) if n in HEAVY_WITNESS else n for n in DEFECTS if CATALOGUE[n].gpu]
)
def test_the_gpu_backend_catches_the_defect_on_real_bytes_or_by_the_ranks_digests(name, device, tmp_path):
    pytest.importorskip("torch")
    from kvsm.gpu.launch import Options, replay as gpu_replay

    log = _gpu_log(name, tmp_path)
    s = gpu_replay(Options(str(log), device=device, page_bytes=512, layers=1, timeout_s=120, bug=name))
    assert not s["ok"]
    f = s["failures"][0]
    last = sum(1 for _ in open(log)) - 2  # header and end line
    assert f["transition"] == last, f
    if CATALOGUE[name].gpu == "bytes":
        assert f["kind"] == "verify" and "loaded from host page" in f["message"], f
    elif CATALOGUE[name].gpu == "reload":
        # the L3 read's bytes are not the KV the key names in the reload's namespace
        assert (f["kind"], f["op"]) == ("verify", "reload_read") and "does not hold content" in f["message"], f
    else:
        assert f["kind"] in ("rejected", "digest") and f["rank"] != 0, f
    # the same log replayed by ranks without the defect: the correct model refuses it
    s = gpu_replay(Options(str(log), device=device, page_bytes=512, layers=1, timeout_s=120))
    assert not s["ok"] and s["failures"][0]["kind"] in ("rejected", "digest")


# ---- the command line --------------------------------------------------------------------------------


def test_every_command_that_runs_the_model_takes_bug_and_refuses_an_unknown_one(tmp_path):
    from typer.testing import CliRunner

    from kvsm.cli import app

    runner = CliRunner()
    for cmd in (["walk"], ["replay"], ["sim"], ["check"], ["conform"], ["validate"], ["gpu", "replay"], ["explore"]):
        res = runner.invoke(app, [*cmd, "--help"])
        assert "--bug" in res.output, cmd
    res = runner.invoke(app, ["walk", "-c", "small", "--steps", "5", "-o", str(tmp_path / "w.jsonl"), "--bug", "double_fre"])
    assert res.exit_code == 2 and "field 'bug' must be one of" in res.output


def test_sim_json_names_the_detector_and_the_seed_of_a_stopped_run():
    import json

    from typer.testing import CliRunner

    from kvsm.cli import app

    d = CATALOGUE["l3_no_min"]
    res = CliRunner().invoke(app, ["sim", "--tiers", d.sim["tiers"], "-n", "20", "--bug", "l3_no_min", "--check", "--json"])
    assert res.exit_code == 1
    stop = json.loads(res.stdout)["stopped"]
    assert stop["detector"] == "invariant" and stop["seed"] == 0 and stop["transition"] > 0
    assert "13 Agreement" in stop["message"]
