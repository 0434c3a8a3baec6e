"""Where a failure's shrunk case goes: one function, `write_case`, so that the format can
change in one place (to `kvsm corpus add`'s when the corpus exists).

Today a case is a directory `DIR/cases/<signature>-<seed>/` holding

- `case.jsonl`: the shrunk transition log (docs/log-format.md); for an `invariant` or
  `held` failure, `kvsm replay --check case.jsonl` fails on its last lines the same way;
- `workload.jsonl`: the shrunk workload, a Mooncake trace;
- `case.json`: the sidecar: the signature, the run's seed and spec, the message, the
  `kvsm sim` command that reproduces it on `workload.jsonl` (run in the case's
  directory), the original run's command, and what shrinking did.

The files are written to a temporary directory and renamed into place
(kvsm/output.py), so a case directory is complete or absent.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..output import atomic_dir


def case_name(signature: str, seed: int) -> str:
    """A directory name from the signature: letters, digits, '-' and '_' only."""
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", signature).strip("-")[:80]
    return f"{slug}-{seed}"


def write_case(outdir: Path, signature: str, seed: int, files: dict[str, str]) -> Path:
    """Write a case's files under `outdir/cases/`; returns its path relative to `outdir`.
    A case resumed after its directory was written but before its line was replaces it."""
    final = outdir / "cases" / case_name(signature, seed)
    with atomic_dir(final) as tmp:
        for name, text in files.items():
            (tmp / name).write_text(text)
    return final.relative_to(outdir)
