"""kvsm installed, not only checked out: a wheel built from the source carries what its
commands need (the TLA+ spec, the configs, the bundled trace), and `kvsm run` passes
from a fresh virtual environment outside the checkout."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "kvsm", "spec")


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)
    assert r.returncode == 0, (cmd, r.stdout[-2000:], r.stderr[-2000:])
    return r


@pytest.mark.slow
def test_a_wheel_built_from_the_source_runs_the_main_job_from_a_fresh_environment(tmp_path):
    # the source as a user gets it (what the repository tracks), away from this checkout
    src = tmp_path / "src"
    for name in SOURCE:
        p = ROOT / name
        if p.is_dir():
            shutil.copytree(p, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "_spec"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(p, src / name)
    dist = tmp_path / "dist"
    # no build isolation where setuptools is at hand: the build then needs no network
    no_isolation = ["--no-build-isolation"] if importlib.util.find_spec("setuptools") else []
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", *no_isolation, "-w", str(dist), str(src)])
    [wheel] = dist.glob("kvsm-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"kvsm/_spec/KVCache.tla", "kvsm/_spec/MC_ci.cfg", "kvsm/_spec/MC_ci.tla", "kvsm/configs/small.toml", "kvsm/sim/data/synthetic_trace.jsonl", "kvsm/schema/log.schema.json"} <= names

    # a fresh environment; kvsm's dependencies (typer, torch, ...) come from this one's
    # site directories, added after the environment's own so that its kvsm is the wheel's
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    py = venv / "bin" / "python"
    site_dir = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    deps = [p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and Path(p).is_dir()]
    (site_dir / "zz_kvsm_test_deps.pth").write_text("\n".join(deps) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KVSM_SPEC_DIR")}
    _run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], env=env)

    away = tmp_path / "elsewhere"
    away.mkdir()
    where = _run([str(py), "-c", "import kvsm, kvsm.tla.location as r; print(kvsm.__file__); print(r.spec_dir())"], env=env, cwd=away).stdout.split()
    assert where[0].startswith(str(site_dir)) and where[1] == str(site_dir / "kvsm" / "_spec"), where

    r = subprocess.run([str(venv / "bin" / "kvsm"), "run", "-n", "20", "-o", str(away / "out"), "--json"], capture_output=True, text=True, env=env, cwd=away, timeout=300)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    out = json.loads(r.stdout)
    steps = {s["step"].split(" (")[0]: s["result"] for s in out["steps"]}
    assert out["ok"] and steps["replay"] == "every digest reproduced"
    assert "20 requests of the Mooncake synthetic trace" in steps["sim"]
    if shutil.which("java"):
        assert steps["TLC check small"].startswith("ok:"), steps["TLC check small"]  # the spec came from the wheel
    assert (away / "out" / "sim-synthetic-0.jsonl").is_file() and (away / "out" / "report.html").is_file()
