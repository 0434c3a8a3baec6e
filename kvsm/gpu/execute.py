"""One rank's physical effects: its batches executed on its device lane, the shared
slab and its disk store, and every page they move checked against the content generator.

Stores are checked on the device before they leave, loads after they landed, staged
spill copies before they are written to disk and pages read from disk before they land
in the slab; a batch's check is one op and its result comes back once per transition.
A bad page, a failed disk operation or a plan the bytes contradict is reported through
`fail` and stops this rank moving bytes (`execute` returns False); the rank keeps its
model and meets the others at the next agreement.
"""

from __future__ import annotations

import bisect
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .. import effects as fx
from ..config import Config
from ..state import ClusterState
from .disk import DiskError, DiskStore
from .generator import POISON_DEV, Generator, as_signed, describe
from .memory import Scratch, Shape, Slab, StagingPool, new_pool
from .options import Options
from .plan import Batch
from .transfer import Transfer

Fail = Callable[[int, dict[str, Any]], None]  # (transition, failure with its "kind")


@dataclass
class Staged:
    """A spill copy this rank gathered and has not written yet: the bytes, and what the
    model said they are (page hashes, the slab pages and the identities they held)."""

    hashes: list[int]
    host: list[int]
    content: list[int | None]
    buf: torch.Tensor | None  # the pool's buffer, given back when written
    rows: torch.Tensor


class Executor:
    def __init__(
        self,
        rank: int,
        world: int,
        cfg: Config,
        opts: Options,
        device: torch.device,
        shape: Shape,
        slab: tuple[str, bytes],
        run_dir: str,
        report: Any,
        fail: Fail,
    ) -> None:
        """Map the slab (path and run token) and make this rank's pool, copy machinery and
        content generator; with L3 (`run_dir`), its disk store and staging buffers."""
        self.rank, self.world, self.cfg, self.opts, self.device = rank, world, cfg, opts, device
        self.shape = shape
        self.page_nbytes = shape.payloads * opts.layers * opts.page_bytes
        self.report = report  # the rank's Report: this counts its pages and bytes
        self._fail = fail
        self.disk: DiskStore | None = None
        self.staged: deque[Staged] = deque()  # the model's spill_staged[rank], as bytes
        try:
            self.slab = Slab(slab[0], slab[1], shape, device)
            self.pool = new_pool(cfg.L1, shape, device)
            self.xfer = Transfer(self.pool, self.slab, opts.io, device)
            self.xfer.warm_up()
            self.gen = Generator(shape.payloads, opts.layers, opts.page_bytes, device)
            tail = tuple(self.pool.shape[1:])
            if run_dir:
                self.disk = DiskStore(os.path.join(run_dir, f"rank{rank}"), cfg.L3, self.page_nbytes)
                self.staging = StagingPool(tail, pinned=device.type == "cuda")
                self.reload_buf = Scratch(torch.device("cpu"), pinned=device.type == "cuda")
                # the slab as rows [X * L2, layers, W]: the rows of host page h are
                # x * L2 + h, so one gather or scatter moves every payload of a batch
                self.slab_rows = self.slab.host.view(-1, *self.slab.host.shape[2:])
        except Exception:
            self.close()
            raise
        report.io, report.io_note = self.xfer.io, self.xfer.note

    def close(self) -> None:
        if self.disk is not None:
            self.disk.close()

    @property
    def staged_copies(self) -> int:
        return len(self.staged)

    def check_disk(self, i: int, state: ClusterState) -> None:
        """The store holds exactly the hashes the model's `l3` gives this rank: a write
        skipped or made where the model made none shows here, even if no reload read it."""
        assert self.disk is not None
        model = {h for (r, h) in state.l3.keys() if r == self.rank}
        held = set(self.disk.slots)
        if model != held:
            extra, missing = sorted(held - model), sorted(model - held)
            self._fail(
                i,
                {
                    "kind": "disk",
                    "transition": i,
                    "message": f"after transition {i}, rank {self.rank}'s disk store {self.disk.directory} holds {len(held)} pages, the model's L3 {len(model)}"
                    + (f"; missing 0x{missing[0]:016x}" if missing else "")
                    + (f"; not in the model 0x{extra[0]:016x}" if extra else ""),
                },
            )

    def execute(self, i: int, t: Any, batches: list[Batch]) -> bool:
        """Execute transition `i`'s batches for this rank and check what they moved; False
        when something failed (reported) and the rank must stop moving bytes."""
        ok = True
        rep = self.report
        x = self.xfer
        checks: list[tuple[Batch, torch.Tensor]] = []
        for b in batches:
            match b.op:
                case fx.PoisonHost:
                    self.slab.poison(torch.tensor(b.host, dtype=torch.int64))
                case fx.SpillGather | fx.SpillWrite | fx.ReloadRead:
                    # the two that write check before they write, so their checks come back
                    # at once; after a failure this rank moves nothing more
                    if not self._l3(i, t, b):
                        ok = False
                        break
                case fx.PoisonDev | fx.Fill | fx.Store | fx.Load:
                    flags = self._on_lane(i, b)
                    if flags is not None:
                        checks.append((b, flags))
                case _:
                    raise AssertionError(f"a batch of {b.op.__name__} effects, which this rank cannot execute")
        if not checks:
            x.finish()
            return ok
        bad = torch.cat([flags for _, flags in checks]).nonzero().flatten().tolist()  # the one read-back
        starts, k = [], 0
        for b, _ in checks:
            starts.append(k)
            k += len(b)
            rep.bytes_verified += len(b) * self.page_nbytes
        for pos in bad:
            j = bisect.bisect_right(starts, pos) - 1
            self._report_bad_page(i, t, checks[j][0], pos - starts[j])
        return ok and not bad

    def _on_lane(self, i: int, b: Batch) -> torch.Tensor | None:
        """Execute one batch on this rank's device lane; the check flags of the pages it
        moved between the lane and the slab (None for a fill or a poison)."""
        rep = self.report
        x = self.xfer
        n = len(b)
        lidx = x.index([p // self.world for p in b.dev])
        match b.op:
            case fx.PoisonDev:
                self.pool.index_fill_(0, lidx, POISON_DEV)
                return None
            case fx.Fill:
                ids = torch.tensor([as_signed(c) for c in b.content], dtype=torch.int64).to(self.device)
                for a in range(0, n, self.gen.chunk):
                    z = min(n, a + self.gen.chunk)
                    words = self.gen.words(ids[a:z], x.scratch.get("fill", z - a, tuple(self.pool.shape[1:])))
                    self.pool.index_copy_(0, lidx[a:z], words)
                rep.pages_filled += n
                return None
        hidx = x.index(b.host, host_side=True)
        x.reserve(b.op, n)  # allocations are not bus time
        t0 = time.monotonic()
        if b.op is fx.Store:
            src = x.store(lidx, hidx)
        else:
            x.load(lidx, hidx)
        x.finish()
        rep.intervals.append((t0, time.monotonic()))
        rep.bytes_copied += n * self.page_nbytes
        if b.op is fx.Load:
            rep.pages_loaded += n
            return self._check(x.gather(lidx), b.content)
        rep.pages_stored += n
        flags = self._check(src, b.content)
        c = self.opts.hooks.corrupt_at(i, self.rank) if self.opts.hooks else None
        if c is not None:
            h = b.host[0] if c.host_page is None else c.host_page
            self.slab.host[0, h, 0, 0] ^= 0xFF00  # flip byte 1 of the page
            rep.injected.append({"corrupt_slab": i, "rank": self.rank, "host_page": h, "byte": 1})
        return flags

    # ---- L3 ------------------------------------------------------------------------------------
    def _l3(self, i: int, t: Any, b: Batch) -> bool:
        """Execute one L3 batch; False when the rank must stop moving bytes."""
        assert self.disk is not None, "the plan gave L3 work to a run without L3"
        rep = self.report
        n = len(b)
        if b.op is fx.SpillGather:
            # slab -> staging, host to host: the bytes go to disk, never through the device
            buf, rows = self.staging.take(n)
            if n:
                torch.index_select(self.slab_rows, 0, self._slab_row_index(b.host), out=rows.view(-1, *rows.shape[2:]))
            self.staged.append(Staged(hashes=b.hashes, host=b.host, content=b.content, buf=buf, rows=rows))
            rep.pages_gathered += n
            return True
        if b.op is fx.SpillWrite:
            if not self.staged or self.staged[0].hashes != b.hashes:
                have = [f"0x{h:016x}" for h in self.staged[0].hashes] if self.staged else "nothing"
                self._fail(i, {"kind": "plan", "transition": i, "message": f"transition {i} {t}: rank {self.rank} writes hashes {[f'0x{h:016x}' for h in b.hashes]} but its oldest staged copy holds {have}"})
                return False
            st = self.staged.popleft()
            # the staged copy is checked whether or not the write succeeds: it is the
            # copy the model says holds these pages until SpillDone
            if n and not self._verify_now(i, t, b.op.kind, st.rows, st.content, st.host, st.hashes, "staged from"):
                return False
            if b.ok and n:
                try:
                    written = self.disk.write(b.hashes, st.rows)
                except (DiskError, OSError) as e:
                    return self._disk_failed(i, t, e)
                rep.pages_spilled += n
                rep.bytes_to_disk += len(written) * self.page_nbytes
                c = self.opts.hooks.corrupt_disk_at(i, self.rank) if self.opts.hooks else None
                if c is not None and (c.page_hash is not None or written):
                    h = written[0] if c.page_hash is None else c.page_hash
                    self.disk.flip_byte(h, 1)  # byte 1 of payload 0, layer 0
                    rep.injected.append({"corrupt_disk": i, "rank": self.rank, "hash": f"{h:016x}", "byte": 1})
            self.staging.give(st.buf)
            return True
        # reload_read: disk -> staging, checked on the device, then into the slab
        if not b.ok or not n:
            return True  # the model's read failed (or the rank owns none of the pages): nothing moves
        rows = self.reload_buf.get("reload", n, tuple(self.pool.shape[1:]))
        try:
            self.disk.read(b.hashes, rows)
        except (DiskError, OSError) as e:
            return self._disk_failed(i, t, e)
        rep.bytes_from_disk += n * self.page_nbytes
        if not self._verify_now(i, t, b.op.kind, rows, b.content, b.host, b.hashes, f"read from rank {self.rank}'s disk for"):
            return False  # nothing lands in the slab
        self.slab_rows.index_copy_(0, self._slab_row_index(b.host), rows.view(-1, *rows.shape[2:]))
        rep.pages_reloaded += n
        return True

    def _slab_row_index(self, host: list[int]) -> torch.Tensor:
        X, L2 = self.shape.payloads, self.cfg.L2
        return torch.tensor([x * L2 + h for h in host for x in range(X)], dtype=torch.int64)

    def _verify_now(self, i: int, t: Any, kind: str, rows: torch.Tensor, content: list[int | None], host: list[int], hashes: list[int], what: str) -> bool:
        """Check host rows on the device against the identities the model gives them, and
        read the result back now (the caller writes them only if they are right)."""
        n = rows.shape[0]
        if self.device.type == "cpu":
            actual = rows
        else:
            actual = self.xfer.scratch.get("disk", n, tuple(rows.shape[1:]))
            actual.copy_(rows, non_blocking=True)
        bad = self._check(actual, content).nonzero().flatten().tolist()
        self.report.bytes_verified += n * self.page_nbytes
        for j in bad:
            c = content[j]
            self._fail(
                i,
                {
                    "kind": "verify",
                    "transition": i,
                    "rank": self.rank,
                    "page": None,
                    "host_page": host[j],
                    "hash": f"{hashes[j]:016x}",
                    "op": kind,
                    "message": f"transition {i} {t}, rank {self.rank}: page hash 0x{hashes[j]:016x} {what} host page {host[j]} "
                    f"does not hold {'poison' if c is None else f'content 0x{c:016x}'}: {self._describe(rows[j], c)}",
                },
            )
        return not bad

    def _disk_failed(self, i: int, t: Any, e: Exception) -> bool:
        self._fail(i, {"kind": "disk", "transition": i, "message": f"transition {i} {t}, rank {self.rank}: {e}"})
        return False

    def _describe(self, actual: torch.Tensor, c: int | None) -> str:
        ids = torch.tensor([as_signed(c) if c is not None else 0], dtype=torch.int64, device=self.device)
        exp = torch.empty((1, *self.pool.shape[1:]), dtype=torch.int64, device=self.device)
        self.gen.expected(ids, [0] if c is None else [], exp)
        return describe(actual.cpu(), exp[0].cpu(), self.cfg.payloads)

    # ---- checks ----------------------------------------------------------------------------------
    def _check(self, actual: torch.Tensor, content: list[int | None]) -> torch.Tensor:
        ids = torch.tensor([as_signed(c) if c is not None else 0 for c in content], dtype=torch.int64).to(self.device)
        poisoned = [j for j, c in enumerate(content) if c is None]
        scratch = self.xfer.scratch.get("expect", min(len(content), self.gen.chunk), tuple(self.pool.shape[1:]))
        return self.gen.mismatches(actual, ids, poisoned, scratch)

    def _report_bad_page(self, i: int, t: Any, b: Batch, j: int) -> None:
        page, c = b.dev[j], b.content[j]
        actual = self.pool[page // self.world].cpu()
        what = "loaded from" if b.op is fx.Load else "to be stored into"
        content = "poison" if c is None else f"content 0x{c:016x}"
        detail = self._describe(actual, c)
        self._fail(
            i,
            {
                "kind": "verify",
                "transition": i,
                "rank": self.rank,
                "page": page,
                "host_page": b.host[j],
                "op": b.op.kind,
                "message": f"transition {i} {t}, rank {self.rank}: device page {page} {what} host page {b.host[j]} "
                f"does not hold {content}: {detail}",
            },
        )

