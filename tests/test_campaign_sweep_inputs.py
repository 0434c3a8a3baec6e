"""Bad input to `kvsm campaign`, `kvsm sweep`, `kvsm corpus` and the log readers: one
error line naming the input, the place and the reason, exit 2 (3 for a cluster that
cannot be reached), and nothing left behind; and a sweep takes every `kvsm sim
--schedule`, each point equal to its `kvsm sim` run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvsm.cli import app
from kvsm.config import CASE_KNOBS

from .helpers import one_error
from tests.test_campaign import _lines
from tests.test_sweep import _sim_json, _without_wall_time

runner = CliRunner()


def _invoke(*args: str):
    return runner.invoke(app, list(args))




def _walk_log(path: Path) -> Path:
    res = _invoke("walk", "--steps", "30", "-o", str(path))
    assert res.exit_code == 0, res.output
    return path


# ---- campaign: budgets and -c/--config ------------------------------------------------------


@pytest.mark.parametrize("args, message", [
    (["--shrink-seconds", "inf"], "Invalid value for '--shrink-seconds': inf is not a finite number"),
    (["--run-seconds", "inf"], "Invalid value for '--run-seconds': inf is not a finite number"),
    (["--run-seconds", "Infinity"], "Invalid value for '--run-seconds': inf is not a finite number"),
    (["--shrink-seconds", "-inf"], "Invalid value for '--shrink-seconds'"),
    (["--shrink-seconds", "nan"], "Invalid value for '--shrink-seconds'"),
])
def test_a_campaign_refuses_a_budget_that_is_not_a_finite_number(tmp_path, args, message):
    out = tmp_path / "c"
    one_error(_invoke("campaign", "--workers", "1", "-c", "small", "--runs", "1", *args, "-o", str(out)), message)
    assert not out.exists()


@pytest.mark.parametrize("configs", ["small,,l3", "", "small,", ",small"])
def test_a_campaign_refuses_an_empty_item_of_configs(tmp_path, configs):
    out = tmp_path / "c"
    one_error(_invoke("campaign", "--workers", "1", "-c", configs, "--runs", "1", "-o", str(out)),
               f"-c/--config {configs!r}: an empty value in the list")
    assert not out.exists()


def test_a_campaign_names_an_output_it_cannot_write_once(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    res = _invoke("campaign", "-c", "small", "--runs", "1", "-o", str(f / "c"))
    one_error(res, f"error: -o {f / 'c'}: cannot write here: ")
    assert res.output.count(str(f / "c")) == 1
    assert f.read_text() == "x"


# ---- sweep: --schedule, --faults ----------------------------------------------------------


def test_a_sweep_takes_every_kvsm_sim_schedule_and_its_point_equals_the_kvsm_sim_run(tmp_path):
    out = tmp_path / "s"
    # random:.50 is random:0.5: one point
    res = _invoke("sweep", "--workers", "1", "-w", "system-prompts", "-n", "20", "--tiers", "l1,l2,l3",
                  "--schedule", "random:0.5,random:.50", "-o", str(out), "--json")
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    assert s["points"] == s["ran"] == 1 and s["status"]["ok"] == 1
    assert s["grid"]["--schedule"] == ["random:0.5"]
    [rec] = _lines(out / "results.jsonl")
    assert "--schedule random:0.5" in rec["command"]
    sim = _sim_json(rec["command"], subprocess_=False)
    assert _without_wall_time(rec["sim"]) == _without_wall_time(sim)
    # and it is the run of that bias, not of the one drawn from the seed
    drawn = _sim_json(rec["command"].replace("--schedule random:0.5", "--schedule random"), subprocess_=False)
    assert _without_wall_time(drawn) != _without_wall_time(sim)


@pytest.mark.parametrize("args, message", [
    (["--schedule", "serial,random:2"], "--schedule random:2: the bias B of random:B must be a number in [0, 1]"),
    (["--schedule", "random:inf"], "--schedule random:inf: the bias B of random:B must be a number in [0, 1]"),
    (["--schedule", "serial:1"], "--schedule must be one of auto | serial | timed | random | walk | random:B, got 'serial:1'"),
    (["--faults", "slow:2"], "error: --faults 'slow:2': probability 2 of 'slow' is outside [0, 1]"),
    (["--faults", "none,slow:0.1+abort:2"], "error: --faults 'slow:0.1+abort:2': probability 2 of 'abort' is outside [0, 1]"),
    (["--scheduler", "nowhere"], "--scheduler nowhere: not a scheduler address"),
])
def test_a_bad_sweep_value_is_named_once(tmp_path, args, message):
    out = tmp_path / "s"
    res = _invoke("sweep", "-n", "5", *args, "-o", str(out))
    one_error(res, message)
    assert res.output.count(args[1].split(",")[-1]) == 1, "the option and its value are said once"
    assert not out.exists()


# ---- a cluster that cannot be reached -----------------------------------------------------


@pytest.mark.parametrize("command", [["sweep", "-n", "5"], ["campaign", "--runs", "1", "-c", "small"]])
def test_a_cluster_that_cannot_be_reached_leaves_no_file_and_is_connected_to_not_started(tmp_path, monkeypatch, command):
    import kvsm.commands.campaign as campaign

    monkeypatch.setattr(campaign, "CONNECT_SECONDS", 1.0)
    out = tmp_path / "out"
    res = _invoke(*command, "--scheduler", "tcp://127.0.0.1:1", "-o", str(out))
    assert res.exit_code == 3, res.output
    first, *rest = [x for x in res.output.splitlines() if x.strip()]
    assert first.startswith(f"kvsm: {command[0]}: connecting to the Dask scheduler tcp://127.0.0.1:1 (at most 1 s)"), first
    assert len(rest) == 1 and rest[0].startswith("error: cannot reach a Dask cluster: ")
    assert not out.exists(), f"{command[0]} left {sorted(p.name for p in out.iterdir())}"


# ---- JSON errors: the decoder's message with its place ------------------------------------


def test_a_bad_json_line_is_reported_with_its_column(tmp_path):
    from kvsm.campaign.store import Results, StoreError
    from kvsm.log import LogError, _json_line

    with pytest.raises(LogError) as e:
        _json_line("x.jsonl", 4, '{"i": 3, "name": "Ma\tch"}\n')  # a tab inside a string
    assert str(e.value) == "x.jsonl:4: not valid JSON (Invalid control character at column 21)"
    with pytest.raises(LogError) as e:
        _json_line("x.jsonl", 6, '{"i": 5, "name": \n')
    assert str(e.value) == "x.jsonl:6: not valid JSON (Expecting value at column 18); truncated line?"
    log = _walk_log(tmp_path / "w.jsonl")
    rows = log.read_text().splitlines(keepends=True)
    assert rows[3].startswith('{"i":3,"name":"')
    rows[3] = rows[3][:16] + "\t" + rows[3][16:]  # inside the transition's name
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(rows))
    for args in (["replay", str(bad)], ["validate", str(bad)], ["corpus", "add", str(bad), "--name", "x", "--dir", str(tmp_path / "t")]):
        res = _invoke(*args)
        assert res.exit_code == 2, (args, res.output)
        assert f"{bad}:4: not valid JSON (Invalid control character at column 17)" in res.output, (args, res.output)
        assert " at)" not in res.output
    store = tmp_path / "c"
    store.mkdir()
    (store / "results.jsonl").write_text('{"seed": 0}\n{"seed": 1, "x": "a\tb"}\n')
    with pytest.raises(StoreError, match=r"results.jsonl:2: not a JSON line \(Invalid control character at column 20\)"):
        list(Results(store).read())


# ---- corpus ---------------------------------------------------------------------------------


def test_corpus_verify_of_a_log_says_it_is_a_log_not_a_case(tmp_path):
    log = _walk_log(tmp_path / "w.jsonl")
    res = _invoke("corpus", "verify", "--no-tlc", str(log))
    assert res.exit_code == 1, res.output
    assert f"{log}: a kvsm transition log, not a corpus case (kvsm corpus add LOG --name NAME makes a case of it)" in res.output
    assert "kvsm_log" not in res.output and "unknown header field" not in res.output


def test_corpus_verify_of_a_folder_without_a_case_is_an_error(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    res = _invoke("corpus", "verify", "--no-tlc", str(empty))
    one_error(res, f"error: {empty}: no case here")
    assert "every case passes" not in res.output


@pytest.mark.parametrize("args, message", [
    (["--knob", "foo"], f"error: --knob foo: not a fidelity knob (the fidelity knobs: {', '.join(CASE_KNOBS)})"),
    (["--bug", "foo"], "error: --bug foo: not an injected defect (the defects: "),
    (["--bug", "double_free", "--knob", "commit_call"], "error: give --bug or --knob, not both"),
])
def test_corpus_add_names_a_bad_knob_or_bug(tmp_path, args, message):
    log = _walk_log(tmp_path / "w.jsonl")
    res = _invoke("corpus", "add", str(log), "--name", "x", "--dir", str(tmp_path / "t"), *args)
    one_error(res, message)
    assert not (tmp_path / "t").exists()


# ---- gpu replay's directories -----------------------------------------------------------------


@pytest.mark.parametrize("option", ["--slab-dir", "--disk-dir"])
def test_gpu_replay_says_a_missing_directory_does_not_exist(tmp_path, option):
    log = _walk_log(tmp_path / "w.jsonl")
    res = _invoke("gpu", "replay", str(log), "--device", "cpu", option, str(tmp_path / "missing"))
    one_error(res, f"error: {option} {tmp_path / 'missing'}: does not exist")
    res = _invoke("gpu", "replay", str(log), "--device", "cpu", option, str(log))
    one_error(res, f"error: {option} {log}: not a directory")


@pytest.mark.parametrize("command", [["sweep", "-n", "5"], ["campaign", "--runs", "1", "-c", "small"]])
def test_interrupted_while_connecting_it_says_nothing_was_written(tmp_path, monkeypatch, command):
    import signal

    import kvsm.campaign.execute as execute
    from kvsm.commands.common import Interrupted

    def interrupted(**_):
        raise Interrupted(signal.SIGINT)

    monkeypatch.setattr(execute, "connect", interrupted)
    out = tmp_path / "out"
    res = _invoke(*command, "--workers", "1", "-o", str(out))
    assert res.exit_code == 130, res.output
    assert f"kvsm: {command[0]}: nothing was written" in res.output and "--resume" not in res.output
    assert not out.exists()
