"""Build step that pyproject.toml cannot express: ship the TLA+ spec inside the wheel.

`spec/` stays at the top of the source tree (where TLC users and the spec's authors
work); at build time its files are copied into the package as `kvsm/_spec/`, where
`kvsm.tla.location.spec_dir()` finds them in an installed kvsm (`pip install .`, a
wheel). An editable install runs from the checkout and uses `spec/` itself.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SPEC = Path(__file__).resolve().parent / "spec"
SPEC_FILES = ("*.tla", "*.cfg", "README.md")


class build_py_with_spec(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # the checkout's spec/ is used in place
        target = Path(self.build_lib) / "kvsm" / "_spec"
        target.mkdir(parents=True, exist_ok=True)
        files = sorted({f for pattern in SPEC_FILES for f in SPEC.glob(pattern)})
        if not any(f.name == "KVCache.tla" for f in files):
            raise SystemExit(f"{SPEC}: no KVCache.tla to ship; build from a checkout or an sdist of kvsm")
        for f in files:
            shutil.copy2(f, target / f.name)


setup(cmdclass={"build_py": build_py_with_spec})
