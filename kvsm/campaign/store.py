"""The results of a campaign: `DIR/results.jsonl`, one line per finished run, and
`DIR/campaign.json`, the campaign's choices.

A line is appended with one `write` of the whole line on a file opened for appending
and flushed to the disk before the next, so a campaign killed at any point leaves only
whole lines, at worst followed by part of one line that never completed (the kernel
finished or never began the write of a killed process; a power cut can still cut one).
Reading ignores that last fragment, and `--resume` cuts it off before appending. A
resumed campaign must have the same choices as the one it continues
(`campaign.json`), and runs only the seeds that have no line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator

from ..log import json_error
from ..output import FILE_MODE, OutputError, check_output_dir, check_output_file, make_dirs, write_atomic

RESULTS = "results.jsonl"
CHOICES = "campaign.json"


class StoreError(ValueError):
    """A results directory that cannot be used: names the file and why."""


class Results:
    """A campaign's results, keyed by seed; `kvsm sweep` keys its own by point
    (`kvsm.sweep.grid.SweepResults`) through the class attributes."""

    KEY = "seed"  # the field that names a record's run
    KEY_TYPE: type = int
    CHOICES = CHOICES
    WHAT = "campaign"

    def __init__(self, outdir: Path) -> None:
        self.dir = outdir
        self.path = outdir / RESULTS
        self._fd: int | None = None

    # ---- reading ----------------------------------------------------------------------------
    def read(self) -> Iterator[dict[str, Any]]:
        """Every complete line (a final line without its newline is not complete)."""
        if not self.path.exists():
            return
        with open(self.path, "rb") as f:
            for lineno, raw in enumerate(f, start=1):
                if not raw.endswith(b"\n"):
                    return
                try:
                    rec = json.loads(raw)
                except json.JSONDecodeError as e:
                    raise StoreError(f"{self.path}:{lineno}: not a JSON line ({json_error(e)})") from None
                if not isinstance(rec, dict) or not isinstance(rec.get(self.KEY), self.KEY_TYPE):
                    kind = "integer" if self.KEY_TYPE is int else "string"
                    raise StoreError(f"{self.path}:{lineno}: not a run record (no {kind} '{self.KEY}')")
                yield rec

    def done(self) -> set[Any]:
        return {r[self.KEY] for r in self.read()}

    # ---- writing ------------------------------------------------------------------------------
    def check(self, choices: dict[str, Any], resume: bool) -> None:
        """Refuse, before anything runs or is written, a directory this campaign cannot
        use: one where files cannot be made, a new campaign's directory that has results,
        a resumed one's that has no campaign or one with other choices."""
        check_output_dir(self.dir)
        check_output_file(self.path)  # a FIFO or a link in the results' place is refused too
        cpath = self.dir / self.CHOICES
        if resume:
            if not cpath.exists():
                raise StoreError(f"{self.dir}: --resume: no {self.WHAT} here (no {self.CHOICES}); drop --resume to start one")
            try:
                old = json.loads(cpath.read_text())
            except json.JSONDecodeError as e:
                raise StoreError(f"{cpath}: not JSON ({json_error(e)})") from None
            new, was = _flat(json.loads(json.dumps(choices))), _flat(old)
            for k in sorted(set(new) | set(was)):
                if new.get(k) != was.get(k):
                    raise StoreError(f"{cpath}: --resume with another {k} ({new.get(k)!r}; the {self.WHAT} had {was.get(k)!r})")
        elif self.path.exists() and self.path.stat().st_size:
            raise StoreError(f"{self.path}: has results already; --resume continues that {self.WHAT}, or give another -o")

    def open(self, choices: dict[str, Any], resume: bool) -> None:
        """Start writing (after `check`): the choices, and the results file to append to; a
        resumed campaign cuts off a line a kill left incomplete."""
        self.check(choices, resume)
        make_dirs(self.dir)
        if resume:
            self._truncate_fragment()
        write_atomic(self.dir / self.CHOICES, json.dumps(choices, indent=2, sort_keys=True) + "\n")
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
        except OSError as e:
            raise OutputError(self.path, e.strerror or str(e)) from None

    def _truncate_fragment(self) -> None:
        if not self.path.exists():
            return
        with open(self.path, "rb+") as f:
            data = f.read()
            end = data.rfind(b"\n") + 1
            if end != len(data):
                f.truncate(end)

    def append(self, rec: dict[str, Any]) -> None:
        assert self._fd is not None
        data = (json.dumps(rec, separators=(",", ":")) + "\n").encode()
        n = os.write(self._fd, data)
        if n != len(data):  # a regular file takes the whole write; anything else is an error
            raise OSError(f"{self.path}: wrote {n} of {len(data)} bytes")
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    """Nested objects as {"a.b": value}, so that a difference is named by its path."""
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out
