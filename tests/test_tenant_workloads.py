"""Workloads with tenants (issue 38, item 5; docs/sim.md "Tenants"): the trace's
namespace field, `--tenants N --tenant-mix X` for `kvsm sim` and `kvsm sweep`, the hit
rate per namespace and the price of isolation."""

from __future__ import annotations

import csv
from dataclasses import replace
import json
from collections import defaultdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvsm.cli import app
from kvsm.sim import SimOptions, simulate
from kvsm.sim.options import prepare
from kvsm.sim.tenants import arrive_ns, shared
from kvsm.sim.trace import NAMESPACE_FIELD, TraceRequest, Workload, WorkloadError, parse_line, parse_namespace, read_trace
from kvsm.sim.workload import bundled_path

runner = CliRunner()
LINE = {"timestamp": 0, "input_length": 1000, "output_length": 10, "hash_ids": [1, 2]}


def _line(**extra: object) -> str:
    return json.dumps(LINE | extra)


def _sim(*args: str) -> object:
    return runner.invoke(app, ["sim", *args])


def _trace(tmp_path: Path, namespaces: list[object], n: int = 30) -> Path:
    """The bundled trace's first `n` lines, the i-th with namespace `namespaces[i % len]`."""
    lines = bundled_path("synthetic").read_text().splitlines()[:n]
    out = []
    for i, text in enumerate(lines):
        d = json.loads(text)
        d[NAMESPACE_FIELD] = namespaces[i % len(namespaces)]
        out.append(json.dumps(d))
    p = tmp_path / "ns.jsonl"
    p.write_text("\n".join(out) + "\n")
    return p


# ---- the trace field --------------------------------------------------------------------


def test_the_namespace_field_is_an_integer_or_a_name_and_absent_is_namespace_0():
    assert parse_line("t", 1, _line()).ns == 0
    assert parse_line("t", 1, _line(namespace=7)).ns == 7
    a, b = parse_line("t", 1, _line(namespace="acme")).ns, parse_line("t", 2, _line(namespace="acme")).ns
    assert a == b == parse_namespace("acme") and 2**30 <= a < 2**31  # the same name, the same namespace
    assert parse_namespace("beta") != a and parse_namespace("7") != 7  # a name is not its digits


@pytest.mark.parametrize("bad", [-1, 2**31, True, 1.5, "", [1], None])
def test_a_bad_namespace_is_refused_naming_the_line_and_the_reason(bad):
    with pytest.raises(WorkloadError) as e:
        parse_line("t.jsonl", 4, _line(namespace=bad))
    assert e.value.line == 4 and f"field '{NAMESPACE_FIELD}' must be an integer" in e.value.reason and repr(bad) in e.value.reason


def test_kvsm_sim_refuses_a_bad_namespace_with_exit_2_and_writes_nothing(tmp_path):
    p = _trace(tmp_path, [0, 1, -3])
    log = tmp_path / "out.jsonl"
    r = _sim("-w", str(p), "-o", str(log))
    assert r.exit_code == 2 and f"{p}:3: field 'namespace' must be an integer" in r.stderr and "Traceback" not in r.output, r.output
    assert not log.exists()


def test_a_trace_with_namespaces_reports_each_and_refuses_tenants_on_top(tmp_path):
    p = _trace(tmp_path, [0, "acme", 5])
    w = read_trace(p)
    assert [r.ns for r in w.requests[:3]] == [0, parse_namespace("acme"), 5] and w.info()["namespaces"] == 3
    r = _sim("-w", str(p), "--json")
    assert r.exit_code == 0, r.output
    t = json.loads(r.stdout)["tenants"]
    assert set(t["per_namespace"]) == {"0", "5", str(parse_namespace("acme"))}
    assert t["per_namespace"][str(parse_namespace("acme"))]["name"] == "acme" and "name" not in t["per_namespace"]["5"]
    assert sum(d["requests"] for d in t["per_namespace"].values()) == 30
    r = _sim("-w", str(p), "--tenants", "2")
    assert r.exit_code == 2 and "names its own namespaces" in r.stderr, r.output


def test_the_bundled_trace_has_no_namespace():
    w = read_trace(bundled_path("synthetic"), 500)
    assert {r.ns for r in w.requests} == {0} and "namespaces" not in w.info()


# ---- isolation ----------------------------------------------------------------------------


def _renumbered(w: Workload, path: Path) -> Path:
    """`w` as a trace in namespace 0, each other namespace's block ids renumbered apart:
    what isolation means for the hit rate, made by hand."""
    fresh: dict[tuple[int, int], int] = {}
    top = 1 + max(h for r in w.requests for h in r.hash_ids)
    lines = []
    for r in w.requests:
        ids = r.hash_ids if r.ns == 0 else tuple(fresh.setdefault((r.ns, h), top + len(fresh)) for h in r.hash_ids)
        lines.append(json.dumps({"timestamp": r.timestamp, "input_length": r.input_length, "output_length": r.output_length, "hash_ids": list(ids)}))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("mix", [0.5, 1.0])
def test_the_model_keeps_namespaces_apart_as_renumbered_blocks_would(tmp_path, mix):
    """The isolated run is the workload as it is, each request in its namespace: the
    model's keys keep the namespaces apart, so its hits, per request and tier, are those
    of the same requests with each namespace's blocks renumbered apart."""
    sizes = {"tiers": "l1,l2,l3", "l1_pages": 48, "l2_pages": 96, "l3_pages": 256}
    opts = SimOptions(requests=200, tenants=3, tenant_mix=mix, **sizes)
    prep = prepare(opts)
    assert any(len(ts) > 1 for ts in _users(prep.shared, [r.ns for r in prep.workload.requests]).values())
    by_ns = simulate(opts)
    by_ids = simulate(SimOptions(workload=str(_renumbered(prep.workload, tmp_path / "r.jsonl")), requests=200, **sizes))
    assert by_ns.request_hits == by_ids.request_hits
    assert sum(h[3] for h in by_ns.request_hits) > 0  # L3 reloads took part


def test_the_model_gets_a_namespace_only_when_not_0_and_only_if_its_arrive_takes_one():
    assert arrive_ns(0) == {}
    assert arrive_ns(3) == {"ns": 3}


# ---- --tenants and --tenant-mix ----------------------------------------------------------------


def test_one_tenant_is_the_run_without_the_option_byte_for_byte(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert _sim("-n", "40", "-o", str(a), "--json").exit_code == 0
    r = _sim("-n", "40", "--tenants", "1", "-o", str(b), "--json")
    assert r.exit_code == 0 and "tenants" not in json.loads(r.stdout)
    assert a.read_bytes() == b.read_bytes()


def test_tenants_are_deterministic_and_drawn_from_the_seed(tmp_path):
    logs = []
    for seed, name in ((0, "a"), (0, "b"), (1, "c")):
        p = tmp_path / f"{name}.jsonl"
        r = _sim("-n", "60", "--tenants", "4", "--tenant-mix", "0.5", "--seed", str(seed), "-o", str(p), "--json")
        assert r.exit_code == 0, r.output
        logs.append(p.read_bytes())
    assert logs[0] == logs[1] and logs[0] != logs[2]
    assert [r.ns for r in prepare(SimOptions(requests=60, tenants=4, seed=0)).workload.requests] != [
        r.ns for r in prepare(SimOptions(requests=60, tenants=4, seed=1)).workload.requests
    ]


def _users(w: Workload, tenant_of: list[int]) -> dict[int, set[int]]:
    users: dict[int, set[int]] = defaultdict(set)
    for r, t in zip(w.requests, tenant_of):
        for h in r.hash_ids:
            users[h].add(t)
    return users


def test_mix_0_shares_nothing_across_tenants_and_isolation_costs_nothing():
    opts = SimOptions(requests=300, tenants=4, tenant_mix=0.0)
    prep = prepare(opts)
    tenant_of = [r.ns for r in prep.workload.requests]
    assert set(tenant_of) == {0, 1, 2, 3}
    assert all(len(ts) == 1 for ts in _users(prep.shared, tenant_of).values())  # no block of two tenants
    t = simulate(opts).summary["tenants"]
    assert t["shared_requests"] == 0
    assert t["isolated"]["hit_rate_blocks"] <= t["shared"]["hit_rate_blocks"]


def test_mix_1_shares_every_prompt_and_the_shared_run_is_the_workload_as_it_is():
    base = prepare(SimOptions(requests=300)).workload
    prep = prepare(SimOptions(requests=300, tenants=4, tenant_mix=1.0))
    assert [r.hash_ids for r in prep.shared.requests] == [r.hash_ids for r in base.requests]
    tenant_of = [r.ns for r in prep.workload.requests]
    assert any(len(ts) > 1 for ts in _users(prep.shared, tenant_of).values())  # the tenants share blocks
    t = simulate(SimOptions(requests=300, tenants=4)).summary["tenants"]  # the default mix is 1
    assert t["tenant_mix"] == 1.0 and t["shared_requests"] == 300
    assert t["shared"]["hit_rate_blocks"] == simulate(SimOptions(requests=300)).summary["hit_rate_blocks"]
    assert t["isolated"]["hit_rate_blocks"] < t["shared"]["hit_rate_blocks"]
    assert t["price_of_isolation"]["blocks"] == pytest.approx(t["shared"]["hit_rate_blocks"] - t["isolated"]["hit_rate_blocks"], abs=1e-6)


def test_a_mix_shares_about_that_fraction_of_the_requests():
    """The families (requests with one first block) are shared in a drawn order until they
    hold `mix` of the requests: at least that, less one family more."""
    n = 1000
    fams = [r.hash_ids[0] for r in prepare(SimOptions(workload="long-doc", requests=n)).workload.requests]
    biggest = max(fams.count(f) for f in set(fams))
    assert biggest < n // 4
    for mix in (0.25, 0.5, 0.75):
        prep = prepare(SimOptions(workload="long-doc", requests=n, tenants=3, tenant_mix=mix))
        shared_requests = dict(prep.workload.tenants)["shared_requests"]
        assert mix * n <= shared_requests < mix * n + biggest
        kept = sum(a.hash_ids == b.hash_ids for a, b in zip(prep.shared.requests, prepare(SimOptions(workload="long-doc", requests=n)).workload.requests))
        assert kept == shared_requests  # a shared family keeps its ids, a private one does not


def test_a_conversation_stays_with_its_tenant():
    prep = prepare(SimOptions(workload="multi-turn", requests=400, tenants=8))
    reqs = prep.shared.requests
    tenant_of = [r.ns for r in prep.workload.requests]
    ends = {}
    turns = 0
    for r, t in zip(reqs, tenant_of):
        for k in range(len(r.hash_ids), 0, -1):
            if (k, r.hash_ids[k - 1]) in ends:
                assert ends[(k, r.hash_ids[k - 1])] == t
                turns += 1
                break
        ends[(len(r.hash_ids), r.hash_ids[-1])] = t
    assert turns > 100


def test_the_summary_gives_the_hit_rate_per_namespace():
    s = simulate(SimOptions(requests=200, tenants=3, tenant_mix=0.5)).summary
    t = s["tenants"]
    per = t["per_namespace"]
    assert set(per) == {"0", "1", "2"} and t["namespaces"] == 3
    assert sum(d["requests"] for d in per.values()) == s["requests"]
    assert sum(d["pages_hit"] for d in per.values()) == s["pages_hit_l1"] + s["pages_hit_l2"] + s["pages_hit_l3"]
    assert t["isolated"]["hit_rate_blocks"] == s["hit_rate_blocks"]
    for d in per.values():
        assert d["hit_rate_blocks"] == round(d["pages_hit"] / d["pages_total"], 6)


def test_the_text_summary_and_the_report_show_the_price_of_isolation(tmp_path):
    rep = tmp_path / "r.html"
    r = runner.invoke(app, ["sim", "-n", "50", "--tenants", "2", "--report", str(rep)], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "price of isolation" in r.stdout and "namespace 1: requests" in r.stdout
    page = rep.read_text()
    assert "the price of isolation" in page and "tenants.per_namespace.1.hit_rate_blocks" in page


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tenant-mix", "0.5"], "--tenant-mix 0.5: needs --tenants N with N > 1"),
        (["--tenants", "1", "--tenant-mix", "0.5"], "--tenant-mix 0.5: needs --tenants N with N > 1"),
        (["--tenants", "2", "--tenant-mix", "1.5"], "--tenant-mix"),
        (["--tenants", "0"], "--tenants"),
    ],
)
def test_bad_tenant_options_exit_2(args, message):
    r = _sim("-n", "5", *args)
    assert r.exit_code == 2 and message in r.stderr and "Traceback" not in r.output, r.output


# ---- the sweep ----------------------------------------------------------------------------


def test_a_sweep_over_tenants_writes_isolation_png_and_csv(tmp_path):
    from kvsm.sweep.grid import parse_axes, run_point
    from kvsm.sweep.isolation import ISOLATION_CSV, ISOLATION_PNG
    from kvsm.sweep.report import write_outputs

    axes = parse_axes({"requests": "200", "tenants": "1,2,8"})
    points = axes.points()
    assert [p.tenants for p in points] == [1, 2, 8]
    records = [run_point(p.to_json()) for p in points]
    summary = {"points": 3, "ran": 3, "status": {"ok": 3}, "workers": 1, "seconds": 0.0, "knees": []}
    paths = write_outputs(axes, records, summary, tmp_path)
    assert tmp_path / ISOLATION_PNG in paths and (tmp_path / ISOLATION_PNG).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = list(csv.DictReader((tmp_path / ISOLATION_CSV).open()))
    assert [int(r["tenants"]) for r in rows] == [1, 2, 8]
    iso = [float(r["isolated_blocks"]) for r in rows]
    sh = [float(r["shared_blocks"]) for r in rows]
    assert sh[0] == sh[1] == sh[2] == iso[0] > 0  # mix 1: the shared run is the workload as it is
    assert iso[2] <= iso[1] <= iso[0] and float(rows[0]["price_blocks"]) == 0.0
    assert "sim.tenants.price_of_isolation.blocks" in next(csv.reader((tmp_path / "results.csv").open()))
    assert "isolation.png" in (tmp_path / "report.html").read_text()
    # a point is the kvsm sim run of its command (the isolated run and the shared baseline)
    r = runner.invoke(app, records[2]["command"].split()[1:])
    assert r.exit_code == 0 and "--tenants 8" in records[2]["command"], r.output
    alone = json.loads(r.stdout)
    assert {k: v for k, v in alone.items() if k != "seconds"} == {k: v for k, v in records[2]["sim"].items() if k != "seconds"}


def test_kvsm_sweep_tenants_on_the_bundled_trace(tmp_path):
    out = tmp_path / "s"
    r = runner.invoke(app, ["sweep", "-n", "60", "--tenants", "1,4", "--tenant-mix", "0,1", "--workers", "1", "-o", str(out), "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["points"] == 3  # one tenant has no mix: one point, on both curves
    curves = {(x["curve"], x["tenants"]): x for x in s["isolation"]}
    assert set(curves) == {("--tenant-mix 0", 1), ("--tenant-mix 0", 4), ("--tenant-mix 1", 1), ("--tenant-mix 1", 4)}
    assert curves[("--tenant-mix 0", 4)]["price_blocks"] == 0.0
    assert curves[("--tenant-mix 1", 4)]["shared_blocks"] == curves[("--tenant-mix 1", 1)]["shared_blocks"]
    assert (out / "isolation.png").exists() and (out / "isolation.csv").exists()
    r = runner.invoke(app, ["sweep", "-n", "60", "--tenant-mix", "0.5", "-o", str(tmp_path / "t")])
    assert r.exit_code == 2 and "--tenant-mix 0.5: no point has more than one tenant" in r.stderr
    assert not (tmp_path / "t").exists()
