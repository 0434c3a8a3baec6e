"""Every command tried as a new user would (issue: hardening): bad and extreme inputs get
one clean line naming the input, the place and the reason, with the documented exit
code (README, "Errors and exit codes"); nothing is left behind; no input can take the
machine's memory; interruptions clean up; long runs say so and show progress."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvsm.cli import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
TRACE_LINE = {"timestamp": 0, "input_length": 1024, "output_length": 16, "hash_ids": [1, 2]}


def listing(d: Path) -> list[str]:
    """Every name under `d`, hidden temporary files included."""
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


def kvsm(*args: str, env: dict | None = None, timeout: float = 120, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`kvsm ...` as its own process: stderr is a pipe, not a terminal."""
    return subprocess.run(
        [sys.executable, "-m", "kvsm.cli", *args], capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}, cwd=cwd
    )


def error_lines(text: str) -> list[str]:
    return [x for x in text.splitlines() if x.strip()]


def write_trace(path: Path, *lines: dict) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def walk_log(path: Path, *extra: str) -> Path:
    r = runner.invoke(app, ["walk", "--steps", "200", "-o", str(path), *extra])
    assert r.exit_code == 0, r.output
    return path


# ---- 1. bounds: no input can exhaust the machine --------------------------------------------


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("output_length", 10**12, "field 'output_length' must be <= 1048576, got 1000000000000"),
        ("timestamp", 10**30, "field 'timestamp' must be <= 1000000000000, got 1000000000000000000000000000000"),
        ("hash_ids", [1, 10**40], "field 'hash_ids' must be a list of integers in [0, 2147483647], got 10000000000000000000000000000000000000000"),
    ],
)
def test_a_trace_number_beyond_its_bound_is_refused_before_the_run(tmp_path, field, value, message):
    trace = write_trace(tmp_path / "t.jsonl", TRACE_LINE, {**TRACE_LINE, field: value})
    before = listing(tmp_path)
    r = runner.invoke(app, ["sim", "-w", str(trace), "-o", str(tmp_path / "out" / "log.jsonl"), "--plot", str(tmp_path / "p")])
    assert r.exit_code == 2, r.output
    assert r.stderr.strip() == f"error: {trace}:2: {message}"
    assert listing(tmp_path) == before


def test_a_config_beyond_its_bounds_is_refused_by_every_command_that_reads_one(tmp_path):
    big = tmp_path / "big.toml"
    big.write_text("R = 4\nL1 = 2097152\nL2 = 8\n")  # 8M device pages: gigabytes of free sets
    many = tmp_path / "many.toml"
    many.write_text("R = 5000\n")
    before = listing(tmp_path)
    for cfg, message in ((big, "R * L1 = 4 * 2097152 = 8388608 device pages, more than the bound 4194304"), (many, "field 'R' must be <= 1024, got 5000")):
        for args in (["walk", "-c", str(cfg), "-o", str(tmp_path / "w.jsonl")], ["explore", "-c", str(cfg)], ["sim", "-c", str(cfg), "-o", str(tmp_path / "s.jsonl")]):
            r = runner.invoke(app, args)
            assert r.exit_code == 2, (args, r.output)
            assert len(error_lines(r.stderr)) == 1 and message in r.stderr and str(cfg) in r.stderr, (args, r.stderr)
    assert listing(tmp_path) == before


def test_a_log_with_numbers_beyond_their_bounds_is_a_clear_error(tmp_path):
    log = walk_log(tmp_path / "w.jsonl")
    lines = log.read_text().splitlines(keepends=True)

    def edited(name: str, fn) -> Path:
        rows = [json.loads(x) for x in lines]
        fn(rows)
        p = tmp_path / name
        p.write_text("".join(json.dumps(x) + "\n" for x in rows))
        return p

    def first(rows, name):
        return next(r for r in rows if r.get("name") == name)

    cases = [
        (edited("l1.jsonl", lambda rows: rows[0]["config"].update(L1=10**12)), 1, "field 'L1' must be <= 2147483647"),
        (edited("rid.jsonl", lambda rows: first(rows, "Match")["args"].update(rid=10**40)), None, "argument 'rid' must be within ±(2^63-1)"),
        (edited("out.jsonl", lambda rows: first(rows, "Arrive")["args"].update(out_pages=10**9)), None, "Arrive argument 'out_pages' 1000000000 is more than the bound 4194304"),
    ]
    for path, line, message in cases:
        r = runner.invoke(app, ["replay", str(path), "--json"])
        assert r.exit_code == 2, r.output
        out = json.loads(r.stdout)
        assert out["malformed"] and message in out["first_mismatch"]["reason"]
        if line:
            assert out["first_mismatch"]["line"] == line
        assert r.stderr.startswith(f"error: {path}:") and message in r.stderr


def test_generated_requests_and_a_whole_workload_l1_are_bounded(tmp_path):
    r = runner.invoke(app, ["sim", "-w", "thrash", "-n", "1000000", "-o", str(tmp_path / "o.jsonl")])
    assert r.exit_code == 2 and "thrash: --requests 1000000: a generator makes at most 100000 requests" in r.stderr
    # every line claims the most output a line may: enough for the whole workload is too much
    trace = write_trace(tmp_path / "t.jsonl", *({**TRACE_LINE, "hash_ids": [i, i + 5000], "output_length": 1 << 20} for i in range(2100)))
    r = runner.invoke(app, ["sim", "-w", str(trace), "--l1-pages", "0", "-o", str(tmp_path / "o.jsonl")])
    assert r.exit_code == 2, r.output
    assert "--l1-pages 0: the whole workload needs" in r.stderr and "more than the bound 4194304 device pages" in r.stderr
    assert listing(tmp_path) == ["t.jsonl"]


def test_gpu_replay_options_are_bounded_and_the_memory_they_need_is_checked_first(tmp_path):
    log = walk_log(tmp_path / "w.jsonl")
    cases = [
        (["--page-bytes", str(1 << 30)], "--page-bytes must be a positive multiple of 8 of at most 67108864, got 1073741824"),
        (["--layers", "100000"], "--layers must be between 1 and 1024, got 100000"),
        (["--timeout", "inf"], "--timeout must be a positive number of seconds up to 86400 (a day), got inf"),
        # the small config's 2 one-page lanes (and its 2-page slab in RAM): pages of 64 GiB
        (["--page-bytes", str(1 << 26), "--layers", "1024", "--device", "cpu"], "GiB of memory (2 device pools of 1 pages"),
    ]
    for args, message in cases:
        r = runner.invoke(app, ["gpu", "replay", str(log), *args])
        assert r.exit_code == 2, (args, r.output)
        [line] = error_lines(r.stderr)
        assert line.startswith(f"error: {log}: " if "GiB" in message else "error: --") and message in line, (args, line)
    assert "available: use smaller --page-bytes or --layers" in line
    assert listing(tmp_path) == ["w.jsonl"]


def test_out_of_memory_is_one_line_and_exit_3(tmp_path, monkeypatch):
    import kvsm.walk

    def exhausted(*a, **k):
        raise MemoryError
        yield  # pragma: no cover

    monkeypatch.setattr(kvsm.walk, "walk", exhausted)
    r = runner.invoke(app, ["walk", "-o", str(tmp_path / "w.jsonl")])
    assert r.exit_code == 3
    assert error_lines(r.stderr) == [
        "error: out of memory: the run needs more memory than this machine gave it; make it smaller (fewer requests, ranks or pages) or give it more memory"
    ]
    assert listing(tmp_path) == []


# ---- 2, 3. no tracebacks; one error style --------------------------------------------------


def test_a_directory_where_a_file_is_wanted_is_an_error_on_every_command(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    cases = [
        (["walk", "-c", str(d), "-o", str(tmp_path / "w.jsonl")], f"config '{d}': is a directory, not a TOML file"),
        (["explore", "-c", str(d)], f"config '{d}': is a directory, not a TOML file"),
        (["sim", "-c", str(d), "-o", str(tmp_path / "s.jsonl")], f"config '{d}': is a directory, not a TOML file"),
        (["sim", "-w", str(d), "-o", str(tmp_path / "s.jsonl")], f"{d}: is a directory, not a trace file"),
        (["replay", str(d)], f"{d}: cannot open: Is a directory"),
        (["validate", str(d)], f"{d}: cannot open: Is a directory"),
        (["gpu", "replay", str(d)], f"{d}: cannot open: Is a directory"),
        (["check", "--log", str(d)], f"--log: {d}: cannot write here: is a directory"),
    ]
    for args, message in cases:
        r = runner.invoke(app, args)
        assert r.exit_code == 2, (args, r.output)
        assert error_lines(r.stderr) == [f"error: {message}"], (args, r.stderr)
    assert listing(tmp_path) == ["d"]


def test_run_on_an_outdir_that_cannot_be_written_is_one_line_before_anything_runs(tmp_path):
    f = tmp_path / "f"
    f.write_text("a file\n")
    r = runner.invoke(app, ["run", "-o", str(f / "out"), "-n", "5"])
    assert r.exit_code == 2, r.output
    assert error_lines(r.stderr) == [f"error: -o {f / 'out'}: {f / 'out' / 'sim-synthetic-0.jsonl'}: cannot write here: {f} is not a directory"]
    assert r.stdout == "" and listing(tmp_path) == ["f"]


def test_a_missing_log_is_named_alike_by_every_reader(tmp_path):
    missing = tmp_path / "nope.jsonl"
    for args in (["replay", str(missing)], ["replay", "--json", str(missing)], ["validate", str(missing)], ["gpu", "replay", str(missing)]):
        r = runner.invoke(app, args)
        assert r.exit_code == 2, (args, r.output)
        assert error_lines(r.stderr) == [f"error: {missing}: cannot open: No such file or directory"], args


def test_replay_exit_codes_mean_what_they_mean_everywhere(tmp_path):
    log = walk_log(tmp_path / "w.jsonl")
    rows = log.read_text().splitlines(keepends=True)
    broken = tmp_path / "broken.jsonl"
    broken.write_text("".join(rows[:5]) + '{"i": 5, "name": \n' + "".join(rows[6:]))
    r = runner.invoke(app, ["replay", str(broken)])
    assert r.exit_code == 2 and error_lines(r.stderr) == [f"error: {broken}:6: not valid JSON (Expecting value at column 18); truncated line?"]
    tampered = tmp_path / "tampered.jsonl"
    d = json.loads(rows[5])
    d["digest"] = "0" * 32
    tampered.write_text("".join(rows[:5]) + json.dumps(d) + "\n" + "".join(rows[6:]))
    r = runner.invoke(app, ["replay", str(tampered)])
    assert r.exit_code == 1 and error_lines(r.stderr)[0].startswith(f"mismatch: {tampered}:6 (step 5): digest mismatch after ")


def test_errors_are_one_line_when_stderr_is_not_a_terminal(tmp_path):
    deep = tmp_path / ("a-rather-long-directory-name-" * 4) / ("and-another-one-" * 4) / "missing-log.jsonl"
    r = kvsm("replay", str(deep))
    assert r.returncode == 2
    assert r.stderr == f"error: {deep}: cannot open: No such file or directory\n"
    r = kvsm("walk", "--steps", "-3", "-o", str(tmp_path / "w.jsonl"))
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: kvsm walk: Invalid value for '--steps'") and "--help" in r.stderr
    assert listing(tmp_path) == []


def test_a_report_that_cannot_be_written_names_the_users_path_and_leaves_no_temporary_file(tmp_path):
    from kvsm.output import AtomicFile, OutputError

    target = tmp_path / "r.html"
    out = AtomicFile(target)
    out.file.write("<html></html>")
    target.mkdir()  # became a directory after the run's check
    with pytest.raises(OutputError) as e:
        out.commit()
    assert str(e.value) == f"{target}: cannot write here: is a directory"
    assert listing(tmp_path) == ["r.html"]


# ---- 4. gpu replay of a broken log: one error, before any rank starts ------------------------


def test_gpu_replay_of_a_broken_log_is_one_error_before_any_rank_starts(tmp_path):
    log = walk_log(tmp_path / "w.jsonl")
    rows = log.read_text().splitlines(keepends=True)
    rows[150] = rows[150][:30] + "\n"  # line 151 cut short
    log.write_text("".join(rows))
    t0 = time.monotonic()
    r = kvsm("gpu", "replay", str(log), "--device", "cpu", "--slab-dir", str(tmp_path))
    assert r.returncode == 2, r.stderr
    assert time.monotonic() - t0 < 30, "the ranks ran before the log was checked"
    [line] = r.stderr.splitlines()
    assert line.startswith(f"error: {log}:151: not valid JSON (") and line.endswith("); truncated line?")
    assert listing(tmp_path) == ["w.jsonl"]


def test_a_failure_of_the_log_met_by_every_rank_is_reported_once():
    from kvsm.gpu.launch import _once

    same = {"kind": "rejected", "transition": 7, "message": "transition 7 Finish(rid=3) rejected by the model: no request 3"}
    digest = {"kind": "digest", "transition": 7, "rank": 1, "message": "rank 1 differs"}
    out = _once([dict(same, rank=0), dict(same, rank=1), digest])
    assert out == [dict(same, rank=0, ranks=[0, 1]), digest]


# ---- 6. interruption cleans up --------------------------------------------------------------


def _interrupt(args: list[str], sig: int, wait_for: str, tmp_path: Path, env: dict | None = None) -> tuple[int, str]:
    """Start `kvsm ARGS`, send `sig` once stderr shows `wait_for`, return (exit code, stderr)."""
    p = subprocess.Popen(
        [sys.executable, "-m", "kvsm.cli", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env={**os.environ, "KVSM_PROGRESS_SECONDS": "0", **(env or {})}
    )
    seen = []
    try:
        assert p.stderr is not None
        for line in p.stderr:
            seen.append(line)
            if wait_for in line:
                break
        p.send_signal(sig)
        rest = p.stderr.read()
        code = p.wait(60)
    finally:
        if p.poll() is None:
            p.kill()
    return code, "".join(seen) + rest


def test_sigterm_during_sim_removes_the_unfinished_log_and_exits_143(tmp_path):
    out = tmp_path / "out"
    code, err = _interrupt(["sim", "-n", "3000", "-o", str(out / "log.jsonl")], signal.SIGTERM, "requests", tmp_path)
    assert code == 143, err
    assert err.splitlines()[-1] == "interrupted: stopped by SIGTERM; unfinished outputs were removed"
    assert "Traceback" not in err and listing(out) == []


def test_sigint_during_walk_removes_the_unfinished_log_and_exits_130(tmp_path):
    code, err = _interrupt(["walk", "-c", "default", "--steps", "1000000", "--check", "-o", str(tmp_path / "w.jsonl")], signal.SIGINT, "walk", tmp_path)
    assert code == 130, err
    assert err.splitlines()[-1] == "interrupted: stopped by SIGINT; unfinished outputs were removed"
    assert listing(tmp_path) == []


@pytest.mark.slow
def test_sigterm_during_gpu_replay_stops_the_ranks_and_leaves_no_slab(tmp_path):
    pytest.importorskip("torch")
    log = tmp_path / "w.jsonl"
    r = runner.invoke(app, ["walk", "-c", "default", "--steps", "3000", "-o", str(log)])
    assert r.exit_code == 0, r.output
    slabs = tmp_path / "slabs"
    slabs.mkdir()
    p = subprocess.Popen(
        [sys.executable, "-m", "kvsm.cli", "gpu", "replay", str(log), "--device", "cpu", "--slab-dir", str(slabs), "--page-bytes", "8192"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        children: set[int] = set()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(children) < 4:  # the default config has 4 ranks
            children |= {int(x) for x in _children(p.pid)}
            time.sleep(0.2)
        assert len(children) >= 4, "the ranks did not start"
        time.sleep(2)
        p.send_signal(signal.SIGTERM)
        err = p.stderr.read()  # type: ignore[union-attr]
        assert p.wait(60) == 143, err
    finally:
        if p.poll() is None:
            p.kill()
    assert err.splitlines()[-1] == "interrupted: stopped by SIGTERM; unfinished outputs were removed"
    time.sleep(0.5)
    assert not [c for c in children if Path(f"/proc/{c}").exists() and "Z" not in Path(f"/proc/{c}/stat").read_text().split()[2]]
    assert listing(slabs) == []


def _children(pid: int) -> list[str]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(stat.parent.name)
    return out


# ---- 7. long runs say so and show progress --------------------------------------------------


def test_progress_lines_on_stderr_when_it_is_not_a_terminal_at_most_every_interval(monkeypatch):
    import io

    from kvsm.commands import common

    now = [100.0]
    monkeypatch.setattr(common.time, "monotonic", lambda: now[0])
    buf = io.StringIO()
    with common.LineProgress(interval=5, stream=buf) as prog:
        task = prog.add_task("sim: requests", total=320)
        for k in range(1, 321):
            now[0] += 0.125  # 40 s in all
            prog.update(task, completed=k)
    lines = buf.getvalue().splitlines()
    assert len(lines) == 8  # one per 5 s, none before the first 5 s
    assert lines[0] == "kvsm: sim: requests 40/320 (12%), 5s" and lines[-1] == "kvsm: sim: requests 320/320 (100%), 40s"


def test_a_run_whose_size_makes_it_slow_is_announced_with_its_cost(tmp_path):
    code, err = _interrupt(["sim", "--ranks", "1000", "-n", "2000", "-o", str(tmp_path / "o.jsonl")], signal.SIGTERM, "warning:", tmp_path)
    warning = next(x for x in err.splitlines() if x.startswith("warning:"))
    assert warning.startswith("warning: 2000 requests on 1000 ranks will take about ") and " hours here " in warning
    assert code == 143 and listing(tmp_path) == []


def test_explore_without_a_state_limit_says_so(tmp_path):
    cfg = tmp_path / "tiny.toml"
    cfg.write_text("R = 2\nL1 = 1\nL2 = 2\nmax_requests = 1\nmax_live = 1\nprompts = [{pages = [1, 2]}]\n")
    r = runner.invoke(app, ["explore", "-c", str(cfg), "--max-states", "0", "--json"])
    assert r.exit_code == 0, r.output
    assert "warning: --max-states 0: no limit on states" in r.stderr
    assert json.loads(r.stdout)["states"] > 1
    r = runner.invoke(app, ["explore", "-c", str(cfg), "--max-states", "3"])
    assert r.exit_code == 2 and error_lines(r.stderr) == [f"error: config '{cfg}': more than 3 states; the config is too large to explore (--max-states 3)"]


# ---- 8. first impressions ------------------------------------------------------------------


def test_the_default_walk_reaches_evictions_backups_and_load_backs_and_says_so(tmp_path):
    r = runner.invoke(app, ["walk", "-o", str(tmp_path / "w.jsonl")])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"wrote 1000 transitions to {tmp_path / 'w.jsonl'}")
    taken = dict(x.rsplit(" ", 1) for x in lines[1].removeprefix("taken: ").split(", "))
    for name in ("EvictDevice", "EvictHost", "Reserve", "WriteDone", "Commit", "LoadBack", "Split"):
        assert int(taken.get(name, 0)) > 0, name
    assert len(lines) == 2, "a default walk takes every transition of small"
    r = runner.invoke(app, ["walk", "--bounded", "-o", str(tmp_path / "b.jsonl")])
    assert r.exit_code == 0 and "no transition was enabled (the config's exploration bounds are spent: max_requests 3" in r.stdout


def test_help_and_version_stand_on_their_own(tmp_path):
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and r.stdout.startswith("kvsm 0.1.0 (log format 2)")
    from kvsm.cli import app as the_app

    def helps(t):
        for ci in t.registered_commands:
            yield ci.help
        for gi in t.registered_groups:
            yield gi.typer_instance.info.help
            yield from helps(gi.typer_instance)

    texts = list(helps(the_app))
    assert texts and all(h and "\n" not in h.split("\n\n")[0] for h in texts), "a help paragraph has a line break in it"
    for args in (["--help"], ["run", "--help"], ["sim", "--help"], ["walk", "--help"], ["gpu", "replay", "--help"]):
        r = runner.invoke(app, args, env={"COLUMNS": "200"})
        assert r.exit_code == 0 and "MODEL.md" not in r.stdout, args
    run_help = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "250"}).stdout
    assert "seed of the simulation" in run_help and "print the steps' results as one JSON object" in run_help
    assert "Mooncake synthetic trace" in run_help
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        assert "MODEL.md" not in doc.read_text(), doc


# ---- 9. plots a person can use ------------------------------------------------------------


def test_plots_show_each_rank_the_whole_run_and_a_smoothed_hit_rate(tmp_path):
    from kvsm.sim import SimOptions, simulate
    from kvsm.sim.report import flat_rows, grouped_tables, render_html, render_plots, smoothed_hit_rate

    res = simulate(SimOptions(workload="thrash", requests=120, ranks=3, tiers="l1,l2,l3", l1_pages=48, l2_pages=120, l3_pages=150))
    s = res.summary
    assert res.samples[-1].t_ms == s["simulated_ms"] and res.samples[-1].requests == s["requests"]
    assert all(len(p.l1_lanes) == 3 and len(p.l3_ranks) == 3 for p in res.samples)
    smooth = [v for v in smoothed_hit_rate(res) if v is not None]
    assert smooth and all(0 <= v <= 1 for v in smooth)
    pngs = render_plots(res)
    assert set(pngs) == {"hit_rate.png", "occupancy.png", "lanes.png"} and all(b.startswith(b"\x89PNG") for b in pngs.values())
    tables = grouped_tables(s)
    titles = [t for t, _ in tables]
    assert titles[:3] == ["Run", "Config", "Hits"] and "L3" in titles and "Other" not in titles
    keys = {k for _, rows in tables for _, k, _ in rows}
    flat = {k for k, _ in flat_rows({k: v for k, v in s.items() if k not in ("faults_injected", "transitions_by_name")})}
    assert flat <= keys, flat - keys
    page = render_html(res)
    assert page.count("data:image/png;base64,") == 3 and "<h3>Hits</h3>" in page and "<th>block hit rate</th>" in page


# ---- 10. installed, not only checked out (the wheel itself: tests/test_install.py) ----------


def test_the_spec_an_installed_kvsm_carries_is_found_first(tmp_path, monkeypatch):
    from kvsm.tla import location
    from kvsm.tla.errors import TLCError

    monkeypatch.delenv("KVSM_SPEC_DIR", raising=False)
    package = tmp_path / "site-packages" / "kvsm"
    monkeypatch.setattr(location, "__file__", str(package / "tla" / "location.py"))
    with pytest.raises(TLCError) as e:
        location.spec_dir()
    assert f"no KVCache.tla in {package / '_spec'} (an installed kvsm) nor in {tmp_path / 'site-packages' / 'spec'}" in str(e.value)
    for d in (package / "_spec", package.parent / "spec"):
        d.mkdir(parents=True)
        (d / "KVCache.tla").write_text("---- MODULE KVCache ----\n====\n")
    assert location.spec_dir() == package / "_spec"
