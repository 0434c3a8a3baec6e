"""Campaign runs with tenants: one run in two that does not walk spreads its workload over
namespaces (`kvsm sim --tenants N --tenant-mix X`), drawn from its own stream so that no
other draw moves; with a disk key that ignores the namespace (`l3_key = "tokens"`, the
reference's: finding 7) a small campaign finds invariant 15 Isolation in such a run,
which its command and its shrunk case reproduce, and with the fixed key it finds
nothing."""

from __future__ import annotations

import json
import re
from dataclasses import replace

from rich.console import Console
from typer.testing import CliRunner

import kvsm.campaign.spec as campaign_spec
from kvsm.campaign.driver import run_campaign
from kvsm.campaign.execute import connect
from kvsm.campaign.run import Budget
from kvsm.campaign.spec import TENANT_MIXES, TENANTS, RunSpec, command, derive, make_space
from kvsm.campaign.summary import render
from kvsm.cli import app
from kvsm.replay import replay

from .helpers import run_case_command

# an L3 cluster with every knob fixed but the disk key (`kvsm.config.L3_KEYS`)
CONFIG = """R = 2
P = 16
L1 = 64
L2 = 256
L3 = 512
policy = "write_through"
write_threshold = 1
load_back_threshold = 32
l3_key = "{key}"
"""


def test_runs_that_do_not_walk_draw_tenants_from_their_own_stream_and_keep_every_other_draw(monkeypatch):
    space = make_space()
    specs = [derive(space, s) for s in range(160)]
    assert specs[:40] == [derive(make_space(), s) for s in range(40)]  # by the number alone
    spread = [sp for sp in specs if sp.tenants is not None]
    randoms = [sp for sp in specs if sp.schedule == "random"]
    # half of the runs that take the random schedule; no walk (its model's own prompts)
    assert all(sp.schedule == "random" and sp.workload != "config-prompts" for sp in spread)
    assert 0.3 * len(randoms) <= len(spread) <= 0.7 * len(randoms)
    assert {sp.tenants for sp in spread} == set(TENANTS) and {sp.tenant_mix for sp in spread} == set(TENANT_MIXES)
    for sp in specs:
        cmd = command(sp)
        if sp.tenants is None:
            assert sp.tenant_mix is None and "--tenant" not in cmd and "tenants" not in sp.to_json()
        else:
            assert f" --tenants {sp.tenants} --tenant-mix {sp.tenant_mix:g} " in cmd
        assert RunSpec.from_json(json.loads(json.dumps(sp.to_json()))) == sp
    # without the tenants draw every run is the run its number gave: the same features
    # (so the same command, for the runs that spread nothing)
    monkeypatch.setattr(campaign_spec, "TENANT_SHARE", 0.0)
    assert [derive(space, sp.seed) for sp in specs] == [replace(sp, tenants=None, tenant_mix=None) for sp in specs]
    # a trace replaces the workload, namespaces included: no second spread
    assert spread[0].options(workload="w.jsonl").tenants is None and "--tenants" not in command(spread[0], workload="w.jsonl")


def _campaign(tmp_path, key: str) -> tuple[dict, dict[int, dict]]:
    cfg = tmp_path / f"{key}.toml"
    cfg.write_text(CONFIG.format(key=key))
    space = make_space([str(cfg)], ["l1,l2,l3"], requests=(8, 24))
    out = tmp_path / key
    session = connect(workers=1, processes=False)
    try:
        s = run_campaign(space, range(24, 32), Budget(60, 100_000, 20), out, session)
    finally:
        session.close()
    recs = {r["seed"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    return s, recs


def test_with_l3_key_tokens_a_tenant_run_breaks_isolation_and_reproduces_with_the_namespace_key_none_does(tmp_path):
    s, recs = _campaign(tmp_path, "tokens")
    tenants = s["coverage"]["spec"]["tenants"]
    spread = [r for r in recs.values() if "tenants" in r["spec"]]
    assert sum(tenants.values()) == 8 and sum(v for k, v in tenants.items() if k != "1") == len(spread) >= 2
    # the table says how many runs spread their workload over tenants
    console = Console(width=200, record=True)
    console.print(render(s, tmp_path))
    assert re.search(rf"runs with tenants .*\b{len(spread)} \(", console.export_text())
    groups = {g["signature"]: g for g in s["failures"]}
    iso = [sig for sig in groups if sig.startswith("invariant:15 Isolation@")]
    assert iso, s["failures"]
    for sig in iso:
        for seed in groups[sig]["runs"]:
            rec = recs[seed]
            assert rec["spec"]["tenants"] > 1 and " --tenants " in rec["command"]
            # the run alone, from its command
            r = CliRunner().invoke(app, rec["command"].split()[1:])
            assert r.exit_code == 1 and "15 Isolation" in r.output, r.output[-800:]
            # its shrunk case: a trace that names each request's namespace, and a log whose
            # arrivals carry it, failing the same way
            case = tmp_path / "tokens" / rec["case"]
            side = json.loads((case / "case.json").read_text())
            assert side["shrunk"]["workload_reproduced"] and "--tenants" not in side["command"]
            lines = [json.loads(x) for x in (case / "workload.jsonl").read_text().splitlines()]
            assert len({x.get("namespace", 0) for x in lines}) >= 2
            assert any(json.loads(x).get("args", {}).get("ns") for x in (case / "case.jsonl").read_text().splitlines())
            res = replay(case / "case.jsonl", check=True)
            assert res.violations and res.violations[0]["violation"].startswith("15 Isolation")
            r = run_case_command(case, side["command"])
            assert r.exit_code == 1 and "15 Isolation" in r.output, r.output[-800:]
    # the fixed key: the same runs, tenants and all, keep namespaces apart
    s, recs = _campaign(tmp_path, "namespace")
    assert s["failures"] == [] and s["coverage"]["spec"]["tenants"] == tenants


def test_reference_knobs_draw_the_token_disk_key_last_and_only_with_l3(monkeypatch):
    """`--knobs reference` draws `l3_key = tokens` (the reference's disk key) as its last
    draw: only where the run has L3, and every other feature is the one the run has
    without that draw."""
    space = make_space(knobs="reference", schedule="random")
    specs = [derive(space, s) for s in range(200)]
    with_key = [sp for sp in specs if ("l3_key", "tokens") in sp.settings]
    assert with_key and all(sp.tiers == "l1,l2,l3" for sp in with_key)
    assert len(with_key) < len([sp for sp in specs if sp.tiers == "l1,l2,l3"])  # drawn, not always
    monkeypatch.setattr(campaign_spec, "L3_KEY_DRAW", ("l3_key", (None,), "l1,l2,l3"))
    without = [derive(space, s) for s in range(200)]
    assert without == [replace(sp, settings=tuple(kv for kv in sp.settings if kv[0] != "l3_key")) for sp in specs]
