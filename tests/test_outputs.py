"""What kvsm writes (kvsm/output.py): never onto something that is not a regular file,
with the permissions the umask gives, and every output path checked before the work that
produces it (README, "Errors and exit codes")."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvsm.cli import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
UNWRITABLE = Path("/proc/kvsm-no-such-dir")  # /proc takes no new files, even from root


def kvsm(*args: str, cwd: Path | None = None, umask: int | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    pre = (lambda: os.umask(umask)) if umask is not None else None
    return subprocess.run([sys.executable, "-m", "kvsm.cli", *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, preexec_fn=pre)


def lines(text: str) -> list[str]:
    return [x for x in text.splitlines() if x.strip()]


def walk_log(path: Path) -> Path:
    r = runner.invoke(app, ["walk", "--steps", "30", "-o", str(path)])
    assert r.exit_code == 0, r.output
    return path


# ---- 1. nothing but a regular file is replaced --------------------------------------------------


def _special(kind: str, path: Path, target: Path) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink":
        target.write_text("the link's target\n")
        path.symlink_to(target)
    elif kind == "device":
        if os.geteuid() != 0:
            pytest.skip("making a device node needs root")
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # another /dev/null


@pytest.mark.parametrize("kind, what", [("fifo", "is a FIFO"), ("symlink", "is a symbolic link"), ("device", "is a character device")])
def test_an_output_that_is_not_a_regular_file_is_refused_and_left_alone(tmp_path, kind, what):
    out, target = tmp_path / "out", tmp_path / "target.txt"
    _special(kind, out, target)
    before = os.lstat(out)
    for args in (["walk", "--steps", "10", "-o", str(out)], ["sim", "-n", "3", "--report", str(out)], ["show", str(walk_log(tmp_path / "w.jsonl")), "--html", str(out)]):
        r = runner.invoke(app, args)
        assert r.exit_code == 2, (args, r.output)
        assert lines(r.stderr) and lines(r.stderr)[0].startswith("error: ") and f"{out}: cannot write here: {what}" in r.stderr, (args, r.stderr)
        after = os.lstat(out)
        assert (after.st_mode, after.st_ino, after.st_rdev) == (before.st_mode, before.st_ino, before.st_rdev), args
    if kind == "symlink":
        assert target.read_text() == "the link's target\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "a temporary file was left"


def test_a_plot_or_a_results_file_that_is_not_a_regular_file_is_refused(tmp_path):
    plots = tmp_path / "plots"
    plots.mkdir()
    os.mkfifo(plots / "lanes.png")  # the last of the three plots
    r = runner.invoke(app, ["sim", "-n", "3", "--plot", str(plots)])
    assert r.exit_code == 2 and f"{plots / 'lanes.png'}: cannot write here: is a FIFO" in r.stderr, r.output
    camp = tmp_path / "camp"
    camp.mkdir()
    os.mkfifo(camp / "results.jsonl")
    r = runner.invoke(app, ["campaign", "--runs", "1", "-o", str(camp)])
    assert r.exit_code == 2 and f"{camp / 'results.jsonl'}: cannot write here: is a FIFO" in r.stderr, r.output
    assert sorted(p.name for p in camp.iterdir()) == ["results.jsonl"]


# ---- 2. permissions follow the umask -------------------------------------------------------------


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_every_output_gets_the_permissions_the_umask_gives(tmp_path, umask):
    log, html, report, plots = tmp_path / "w.jsonl", tmp_path / "v.html", tmp_path / "r.html", tmp_path / "plots"
    assert kvsm("walk", "--steps", "20", "-o", str(log), umask=umask).returncode == 0
    assert kvsm("show", str(log), "--html", str(html), umask=umask).returncode == 0
    r = kvsm("sim", "-n", "5", "-o", str(tmp_path / "s.jsonl"), "--report", str(report), "--plot", str(plots), umask=umask)
    assert r.returncode == 0, r.stderr
    files = [log, html, report, tmp_path / "s.jsonl", *sorted(plots.iterdir())]
    assert len(files) == 7
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in files}
    assert modes == {p.name: 0o666 & ~umask for p in files}


# ---- 5, 10. an output that cannot be made is refused before the work, naming the user's path ----


def test_outputs_that_cannot_be_made_are_refused_before_the_run(tmp_path):
    log = walk_log(tmp_path / "w.jsonl")
    cases = [
        (["sim", "-n", "3", "--report", str(UNWRITABLE / "r.html")], f"{UNWRITABLE / 'r.html'}: cannot write here: "),
        (["sim", "-n", "3", "--plot", str(UNWRITABLE)], f"{UNWRITABLE / 'hit_rate.png'}: cannot write here: "),
        (["check", "--bug", "double_free", "--log", str(UNWRITABLE / "x.jsonl")], f"--log: {UNWRITABLE / 'x.jsonl'}: cannot write here: "),
        (["show", str(log), "--html", str(UNWRITABLE / "v.html")], f"{UNWRITABLE / 'v.html'}: cannot write here: "),
        (["walk", "--steps", "5", "-o", str(UNWRITABLE / "w.jsonl")], f"{UNWRITABLE / 'w.jsonl'}: cannot write here: "),
        (["corpus", "add", str(log), "--name", "x", "--dir", str(UNWRITABLE)], f"--dir {UNWRITABLE}: {UNWRITABLE / 'x.txt'}: cannot write here: "),
        (["campaign", "--runs", "1", "-o", str(UNWRITABLE)], f"-o {UNWRITABLE}: cannot write here: "),
    ]
    for args, message in cases:
        t0 = time.monotonic()
        r = runner.invoke(app, args)
        assert r.exit_code == 2, (args, r.output)
        got = lines(r.stderr)
        assert len(got) == 1 and got[0].startswith(f"error: {message}"), (args, r.stderr)
        assert ".tmp" not in got[0] and "Errno" not in got[0], got[0]
        assert time.monotonic() - t0 < 20, f"{args}: the work ran before the output was checked"
        assert "wrote" not in r.stdout


def test_a_report_path_becoming_unwritable_after_the_check_names_the_path_not_the_temporary_file(tmp_path):
    from kvsm.output import OutputError, write_atomic

    d = tmp_path / "d"
    d.mkdir()
    d.chmod(0o500)
    try:
        if os.access(d, os.W_OK) and os.geteuid() == 0:  # root writes anywhere a mode allows nothing
            target = UNWRITABLE / "v.html"
        else:
            target = d / "v.html"
        with pytest.raises(OutputError) as e:
            write_atomic(target, "<html></html>")
        assert str(e.value).startswith(f"{target}: cannot write here: ") and ".tmp" not in str(e.value)
    finally:
        d.chmod(0o700)


# ---- 4. corpus add ------------------------------------------------------------------------------


def test_corpus_add_writes_the_case_alone_with_the_umask(tmp_path):
    log = walk_log(tmp_path / "w.jsonl")
    r = kvsm("corpus", "add", str(log), "--name", "walked", "--dir", str(tmp_path / "cases"), umask=0o027, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert [p.name for p in (tmp_path / "cases").iterdir()] == ["walked.txt"]
    assert stat.S_IMODE((tmp_path / "cases" / "walked.txt").stat().st_mode) == 0o640


# ---- 6, 11. campaign options and plots ----------------------------------------------------------


def test_campaign_refuses_a_bad_scheduler_address_or_a_resume_with_nothing_to_resume(tmp_path):
    out = tmp_path / "c"
    r = runner.invoke(app, ["campaign", "--runs", "1", "--scheduler", "notanaddress", "-o", str(out)])
    assert r.exit_code == 2, r.output
    assert lines(r.stderr) == ["error: --scheduler notanaddress: not a scheduler address (PROTOCOL://HOST:PORT, such as tcp://10.0.0.5:8786)"]
    assert not out.exists()
    r = runner.invoke(app, ["campaign", "--runs", "1", "--resume", "-o", str(out)])
    assert r.exit_code == 2, r.output
    assert lines(r.stderr) == [f"error: -o {out}: --resume: no campaign here (no campaign.json); drop --resume to start one"]
    assert not out.exists()


def test_the_failures_plot_of_a_campaign_without_failures_counts_from_zero(tmp_path, monkeypatch):
    from kvsm.campaign import summary

    limits = []

    def png(fig):
        limits.append(fig.axes[0].get_ylim())
        return b"png"

    monkeypatch.setattr(summary, "_png", png)
    records = [{"seed": s, "status": "ok", "coverage": {}} for s in range(3)]
    paths = summary.write_plots(records, tmp_path)
    assert [p.name for p in paths] == ["coverage.png", "failures.png"]
    assert limits[1] == (0.0, 1.0)
