"""A newcomer's rough edges (issue 27): TLC stops with an interrupted `kvsm check`,
`kvsm show` of a log that does not replay to its end says so and exits as `kvsm replay`
would, `--segments` is bounded, and the long commands are never silent on stderr."""

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

from .helpers import command_paths

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent


def lines(text: str) -> list[str]:
    return [x for x in text.splitlines() if x.strip()]


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> dict[str, Path]:
    """A 200-step walk, the same cut after its 149th transition (no end line), and the
    same with the digest of step 49 (line 50) changed."""
    d = tmp_path_factory.mktemp("logs")
    whole = d / "w.jsonl"
    assert runner.invoke(app, ["walk", "--steps", "200", "-o", str(whole)]).exit_code == 0
    rows = whole.read_text().splitlines()
    (d / "cut.jsonl").write_text("\n".join(rows[:150]) + "\n")
    row = json.loads(rows[49])
    row["digest"] = "0" * len(row["digest"])
    rows[49] = json.dumps(row, separators=(",", ":"))
    (d / "tampered.jsonl").write_text("\n".join(rows) + "\n")
    return {"whole": whole, "cut": d / "cut.jsonl", "tampered": d / "tampered.jsonl"}


# ---- 3. TLC stops with kvsm --------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d.name))
    return out


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.tlc
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_an_interrupted_check_stops_tlc(tmp_path, sig):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([sys.executable, "-m", "kvsm.cli", "check", "--config", "ci"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    jvms: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while not _children(p.pid) and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.1)
        jvms = _children(p.pid)
        assert jvms, "TLC did not start"
        # until TLC checks states (before that, a JVM whose directory is removed dies anyway)
        out = Path("/proc") / str(jvms[0]) / "cwd" / "tlc.out"
        while time.monotonic() < deadline and "Computing initial states" not in (out.read_text(errors="replace") if out.exists() else ""):
            time.sleep(0.1)
        p.send_signal(sig)  # to kvsm alone, as `kill` or a supervisor sends it
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    left = [j for j in jvms if _alive(j)]
    for j in left:  # not to leave them running when the test fails
        os.kill(j, signal.SIGKILL)
    assert p.returncode == 128 + sig, err
    assert not left, "TLC's JVM outlived kvsm"


# ---- 7. show of a log that does not replay to its end --------------------------------------------


def test_show_of_a_cut_log_exits_2_and_says_where_it_stopped(logs, tmp_path):
    r = runner.invoke(app, ["show", str(logs["cut"])])
    assert r.exit_code == 2, r.output
    assert lines(r.stderr) == [f"error: {logs['cut']}:151: replay stopped at step 150: the log ends after transition 149 without its end line: it was cut short (a log of format 2 ends with {{\"end\": true, ...}}) (shown: the 149 steps before it)"]
    assert r.stdout.startswith("state after step 149")
    html = tmp_path / "cut.html"
    r = runner.invoke(app, ["show", str(logs["cut"]), "--html", str(html)])
    assert r.exit_code == 2 and html.is_file()
    assert lines(r.stderr) and lines(r.stderr)[-1].startswith(f"error: {logs['cut']}:151: replay stopped at step 150: ")


def test_show_of_a_tampered_log_exits_1_and_a_step_past_the_mismatch_is_named_as_such(logs):
    r = runner.invoke(app, ["show", str(logs["tampered"])])
    assert r.exit_code == 1, r.output
    assert lines(r.stderr)[-1].startswith(f"mismatch: {logs['tampered']}:50: replay stopped at step 49: digest mismatch: ")
    r = runner.invoke(app, ["show", str(logs["tampered"]), "--at", "60"])
    assert r.exit_code == 1, r.output
    assert lines(r.stderr) == [
        f"mismatch: --at 60: {logs['tampered']} replays only to step 48: it stopped at line 50 (step 49): " + lines(r.stderr)[0].split("(step 49): ", 1)[1]
    ]
    assert "beyond" not in r.stderr and r.stdout == ""
    r = runner.invoke(app, ["show", str(logs["whole"]), "--at", "300"])
    assert r.exit_code == 2 and lines(r.stderr) == [f"error: --at 300: step 300 is beyond the 200 steps of {logs['whole']}"]


# ---- 8. validate --segments is bounded ------------------------------------------------------------


def test_validate_refuses_more_segments_than_its_bound_before_any_tlc(logs):
    t0 = time.monotonic()
    r = runner.invoke(app, ["validate", str(logs["whole"]), "--segments", "100000"])
    assert r.exit_code == 2, r.output
    assert len(lines(r.stderr)) == 1 and "--segments" in r.stderr and "64" in r.stderr
    assert time.monotonic() - t0 < 10


# ---- 9. long commands are never silent ------------------------------------------------------------


def test_busy_prints_the_elapsed_time_every_few_seconds_off_a_terminal(monkeypatch, capsys):
    from kvsm.commands.common import busy

    monkeypatch.setenv("KVSM_PROGRESS_SECONDS", "0.1")
    with busy("check: TLC on ci"):
        time.sleep(0.45)
    got = capsys.readouterr().err.splitlines()
    assert len(got) >= 2 and all(x.startswith("kvsm: check: TLC on ci, ") and x.endswith("s") for x in got), got


def _slow(monkeypatch, module: str, name: str) -> None:
    import importlib

    mod = importlib.import_module(module)
    real = getattr(mod, name)

    def slow(*a, **kw):
        time.sleep(0.5)
        return real(*a, **kw)

    monkeypatch.setattr(mod, name, slow)


def test_show_html_says_it_is_building_the_viewer(monkeypatch, logs, tmp_path):
    monkeypatch.setenv("KVSM_PROGRESS_SECONDS", "0.1")
    _slow(monkeypatch, "kvsm.render.html", "write_html")
    r = runner.invoke(app, ["show", str(logs["whole"]), "--html", str(tmp_path / "v.html")])
    assert r.exit_code == 0, r.output
    assert any(x.startswith(f"kvsm: show: the viewer of {logs['whole']}'s 200 steps, ") for x in r.stderr.splitlines()), r.stderr


def test_check_and_validate_say_tlc_is_running(monkeypatch, logs):
    from kvsm.tla.errors import TLCUnavailable

    def unavailable(*a, **kw):
        time.sleep(0.5)
        raise TLCUnavailable("no java (this test)")

    monkeypatch.setenv("KVSM_PROGRESS_SECONDS", "0.1")
    monkeypatch.setattr("kvsm.tla.check.check", unavailable)
    monkeypatch.setattr("kvsm.tla.validate.validate", unavailable)
    r = runner.invoke(app, ["check", "--config", "ci"])
    assert r.exit_code == 3 and any(x.startswith("kvsm: check: TLC on ci, 1 worker(s), ") for x in r.stderr.splitlines()), r.stderr
    r = runner.invoke(app, ["validate", str(logs["whole"])])
    assert r.exit_code == 3 and any(x.startswith(f"kvsm: validate: TLC follows {logs['whole']}, ") for x in r.stderr.splitlines()), r.stderr


def test_corpus_verify_counts_its_cases_on_stderr(monkeypatch):
    cases = sorted((ROOT / "traces").glob("*.txt"))[:2]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KVSM_PROGRESS_SECONDS": "0"}
    r = subprocess.run([sys.executable, "-m", "kvsm.cli", "corpus", "verify", "--no-tlc", *map(str, cases)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    assert [x.split(" (")[0] for x in r.stderr.splitlines() if x.startswith("kvsm: corpus verify")] == ["kvsm: corpus verify: cases 1/2", "kvsm: corpus verify: cases 2/2"]


# ---- 11. small things ------------------------------------------------------------------------------


def test_help_shows_no_type_beside_a_flag():
    import typer

    every = [(), *command_paths(typer.main.get_command(app))]
    assert len(every) > 12
    for path in every:
        r = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
        assert r.exit_code == 0 and "--help" in r.stdout, path
        assert "<bool>" not in r.stdout, path


def test_the_campaign_table_fits_a_reader_in_a_pipe(tmp_path):
    r = runner.invoke(app, ["campaign", "--runs", "2", "-c", "small", "--workers", "1", "-o", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    widths = [len(x) for x in r.stdout.splitlines()]
    assert "coverage" in r.stdout and max(widths) <= 120, max(widths)


def test_an_error_quoting_a_value_with_colons_keeps_them_and_shows_no_emoji():
    # `random:x` followed by the message's own colon read as the emoji code `:x:` once
    res = subprocess.run([sys.executable, "-m", "kvsm.cli", "sim", "--schedule", "random:x", "-n", "5"], capture_output=True, text=True)
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith("error: --schedule random:x: "), res.stderr
    assert "\u274c" not in res.stderr
