"""One rank's replay of a log: the model, the physical effects, the checks, the agreements.

For every log line the rank applies the pure model (`kvsm.transitions.apply`), compares
the new state's digest with the line's, cuts the state's effects into this rank's
batches (`plan.plan_rank`) and executes them: fills and poisons on its device lane,
stores of its pages into the shared slab, loads into its lane; with L3, gathers of its
slab pages into staging, writes of staged copies to its disk store, reads from its disk
store into slab pages. Every stored page is checked (on the device, before it leaves),
every loaded page (on the device, after it landed), every staged copy (on the device,
before it is written to disk) and every page read from disk (on the device, before it
lands in the slab) against the content generator; a batch's check is one op and its
result comes back once per transition.

The ranks agree (`collectives.agree`) at points the log decides (`plan.agreements`,
on the model applied to the logged transitions): after the model's agreements
(`Commit`, `SpillAck`, `ReloadAdmit`: after them slab pages written by other ranks may
be read), before and after every transition that frees host pages, and at the end.
Each agreement carries the rank's state digest and status; the MIN and MAX digests
equal the log's exactly when every rank's digest does. A rank that found a problem
stops moving bytes but keeps meeting the others, so that the next agreement stops
every rank together and names the transition, the rank and, for a bad page, the page.
"""

from __future__ import annotations

import bisect
import os
import shutil
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import torch

from ..log import LogError, read_log
from ..state import ClusterState, Rejected, initial_state
from ..transitions import apply
from . import collectives
from .disk import DiskError, DiskStore
from .generator import POISON_DEV, POISON_HOST, Generator, as_signed, describe
from .hooks import Hooks
from .options import Options, ReplayError
from .memory import Scratch, Shape, Slab, StagingPool, create_slab, new_pool
from .plan import Batch, PlanError, agreements, plan_rank
from .transfer import Transfer

OK, DIGEST, REJECTED, VERIFY, PLAN, LOG, DISK = range(7)
STATUS = {DIGEST: "digest", REJECTED: "rejected", VERIFY: "verify", PLAN: "plan", LOG: "log", DISK: "disk"}


@dataclass
class Report:
    rank: int
    transitions: int = 0
    pages_filled: int = 0
    pages_loaded: int = 0
    pages_stored: int = 0
    pages_gathered: int = 0  # slab pages copied into spill staging
    pages_spilled: int = 0  # pages of the spill writes the model says succeeded
    pages_reloaded: int = 0  # pages read from disk into the slab
    bytes_to_disk: int = 0  # bytes written (a hash the disk holds already is not rewritten)
    bytes_from_disk: int = 0
    bytes_copied: int = 0
    bytes_verified: int = 0
    agreements: int = 0
    seconds: float = 0.0
    intervals: list[tuple[float, float]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    injected: list[dict[str, Any]] = field(default_factory=list)
    io: str = ""
    io_note: str = ""
    disk_dir: str = ""  # the run's disk stores (rank 0 only)


@dataclass
class Staged:
    """A spill copy this rank gathered and has not written yet: the bytes, and what the
    model said they are (page hashes, the slab pages and the identities they held)."""

    hashes: list[int]
    host: list[int]
    content: list[int | None]
    buf: torch.Tensor | None  # the pool's buffer, given back when written
    rows: torch.Tensor


def select_device(name: str, local_rank: int) -> torch.device:
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda":
        if not torch.cuda.is_available():
            raise ReplayError("--device cuda: CUDA is not available on this machine")
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    raise ReplayError(f"--device must be cuda or cpu, got {name!r}")


class RankReplay:
    def __init__(self, rank: int, world: int, opts: Options, device: torch.device) -> None:
        self.rank, self.world, self.opts, self.device = rank, world, opts, device
        self.header, self.stream = read_log(opts.log)
        self.cfg = self.header.config
        if self.cfg.R != world:
            raise ReplayError(f"{opts.log}: the log's config has R={self.cfg.R} but {world} ranks were started")
        self.shape = Shape(len(self.cfg.payloads), self.cfg.L2, opts.layers, opts.page_bytes)
        self.page_nbytes = self.shape.payloads * opts.layers * opts.page_bytes
        self.report = Report(rank)
        self.status = OK
        self.first_bad = 0
        self.broken = False  # the state is not the log's: apply nothing more
        self.halted = False  # the bytes are wrong: keep the model, move nothing more
        self.run_dir = ""  # the run's disk stores, when the config has L3
        self.disk: DiskStore | None = None
        self.staged: deque[Staged] = deque()  # the model's spill_staged[rank], as bytes

    # ---- setup ----------------------------------------------------------------------------------
    def setup(self) -> None:
        """Rank 0 creates and poisons the slab, every rank maps it and checks the run token
        (so ranks on different hosts are refused), then the file is unlinked: the
        mappings keep it alive and nothing is left behind if a rank dies. With L3, rank 0
        also makes the run's disk directory and every rank its own store in it."""
        shared: list[Any] = [None, None, "", ""]
        if self.rank == 0:
            path = ""
            try:
                path, token = create_slab(self.opts.slab_dir, self.shape)
                fresh = Slab(path, token, self.shape, torch.device("cpu"))
                fresh.host.fill_(POISON_HOST)  # every host page starts free
                fresh.close()
                run_dir = ""
                if self.cfg.L3:
                    where = self.opts.disk_dir or tempfile.gettempdir()
                    try:
                        run_dir = tempfile.mkdtemp(prefix="kvsm-disk-", dir=where)
                    except OSError as e:
                        raise DiskError(f"disk directory {where}: cannot create the run's directory: {e.strerror}") from None
                    self.run_dir = self.report.disk_dir = run_dir
                shared = [path, token, run_dir, ""]
            except Exception as e:  # noqa: BLE001 - reported to every rank below
                if path:
                    os.unlink(path)
                shared = [None, None, "", str(e)]
        try:
            path, token, run_dir, err = collectives.broadcast(shared, src=0)
            if not err:
                try:
                    self.slab = Slab(path, token, self.shape, self.device)
                    self.pool = new_pool(self.cfg.L1, self.shape, self.device)
                    self.xfer = Transfer(self.pool, self.slab, self.opts.io, self.device)
                    self.xfer.warm_up()
                    self.gen = Generator(self.shape.payloads, self.opts.layers, self.opts.page_bytes, self.device)
                    tail = tuple(self.pool.shape[1:])
                    if run_dir:
                        self.disk = DiskStore(os.path.join(run_dir, f"rank{self.rank}"), self.cfg.L3, self.page_nbytes)
                        self.staging = StagingPool(tail, pinned=self.device.type == "cuda")
                        self.reload_buf = Scratch(torch.device("cpu"), pinned=self.device.type == "cuda")
                        # the slab as rows [X * L2, layers, W]: the rows of host page h are
                        # x * L2 + h, so one gather or scatter moves every payload of a batch
                        self.slab_rows = self.slab.host.view(-1, *self.slab.host.shape[2:])
                except Exception as e:  # noqa: BLE001
                    err = f"rank {self.rank}: {e}"
            errs = collectives.all_gather(err)
        finally:
            if self.rank == 0 and shared[0]:
                os.unlink(shared[0])
        bad = list(dict.fromkeys(e for e in errs if e))  # rank 0's error reaches every rank
        if bad:
            raise ReplayError("; ".join(bad))
        self.report.io, self.report.io_note = self.xfer.io, self.xfer.note

    def close(self) -> None:
        """Close this rank's disk store; rank 0 removes the run's disk directory unless
        the run keeps it. Called after the last collective, so every rank is done with
        its store by then (or gone)."""
        if self.disk is not None:
            self.disk.close()
        if self.rank == 0 and self.run_dir and not self.opts.keep:
            shutil.rmtree(self.run_dir, ignore_errors=True)

    # ---- agreements ------------------------------------------------------------------------------
    def agree(self, index: int, log_digest: str, state: ClusterState) -> bool:
        """Agree on digests and statuses with every rank; True when the run goes on.
        `index` is the transition after which the ranks agree (0 = the initial state)."""
        digest = state.digest()
        a = collectives.agree(digest, self.status, self.first_bad, self.rank, self.world)
        self.report.agreements += 1
        if a.unanimous(log_digest):
            return True
        if not collectives.same_digest(digest, log_digest):
            self.report.failures.append(
                {
                    "kind": "digest",
                    "transition": index,
                    "rank": self.rank,
                    "first_divergence": self.first_bad if self.status == DIGEST else None,
                    "log_digest": log_digest,
                    "rank_digest": digest,
                    "min_digest": a.min_digest,
                    "max_digest": a.max_digest,
                    "message": f"transition {index}: rank {self.rank}'s state digest {digest} differs from the log's {log_digest}"
                    + (f" (first different after transition {self.first_bad})" if self.status == DIGEST else ""),
                }
            )
        return False

    # ---- the loop --------------------------------------------------------------------------------
    def run(self) -> Report:
        """The replay. Two states advance: `ref`, the model applied to the logged
        transitions (identical on every rank, so it alone decides where the ranks meet),
        and `state`, what this rank actually applied: the same value unless a fault
        made the rank leave the log, after which `state` stays where it left."""
        t_start = time.monotonic()
        hooks = self.opts.hooks
        state = ref = initial_state(self.cfg)
        log_digest = self.header.initial_digest
        if state.digest() != log_digest:
            self._fail(LOG, 0, {"kind": "log", "transition": 0, "message": f"{self.opts.log}:1: initial digest {log_digest} != {state.digest()} of the config's initial state"})
            self.broken = True
        last = 0
        stopped = False
        stream = iter(self.stream)
        while True:
            try:
                item = next(stream, None)
            except LogError as e:
                self._fail(LOG, last + 1, {"kind": "log", "transition": last + 1, "line": e.line, "message": str(e)})
                break
            if item is None:
                break
            _, i, t, digest = item
            try:
                ref_next = apply(ref, t)
            except Rejected as e:  # the log itself is wrong: every rank gets here alike
                self._fail(REJECTED, i, {"kind": "rejected", "transition": i, "message": f"transition {i} {t} rejected by the model: {e}"})
                break
            before, after = agreements(t.name, ref_next.effects)
            if before and not self.agree(i - 1, log_digest, state):
                stopped = True
                break
            if not self.broken:
                state = self._step(i, t, digest, state, ref_next, hooks)
            ref = ref_next
            log_digest = digest
            last = i
            self.report.transitions = i
            if after and not self.agree(i, log_digest, state):
                stopped = True
                break
        if not stopped:
            if self.disk is not None and not self.broken and not self.halted:
                self._check_disk_holds_the_models_l3(last, state)
            self.agree(last, log_digest, state)
        self.report.seconds = time.monotonic() - t_start
        return self.report

    def _check_disk_holds_the_models_l3(self, i: int, state: ClusterState) -> None:
        """The store holds exactly the hashes the model's `l3` gives this rank: a write
        skipped or made where the model made none shows here, even if no reload read it."""
        assert self.disk is not None
        model = {h for (r, h) in state.l3.keys() if r == self.rank}
        held = set(self.disk.slots)
        if model != held:
            extra, missing = sorted(held - model), sorted(model - held)
            self._fail(
                DISK,
                i,
                {
                    "kind": "disk",
                    "transition": i,
                    "message": f"after transition {i}, rank {self.rank}'s disk store {self.disk.directory} holds {len(held)} pages, the model's L3 {len(model)}"
                    + (f"; missing 0x{missing[0]:016x}" if missing else "")
                    + (f"; not in the model 0x{extra[0]:016x}" if extra else ""),
                },
            )

    def _fail(self, code: int, index: int, failure: dict[str, Any]) -> None:
        failure.setdefault("rank", self.rank)
        self.report.failures.append(failure)
        if self.status == OK:
            self.status, self.first_bad = code, index

    def _step(self, i: int, t: Any, digest: str, state: ClusterState, ref_next: ClusterState, hooks: Hooks) -> ClusterState:
        """Apply transition `i` on this rank (the logged one, already applied as
        `ref_next`, unless a hook substitutes another) and execute its effects."""
        applied = hooks.tampered(i, self.rank, state, t, digest) if hooks else t
        if applied is t:
            new = ref_next
        else:
            self.report.injected.append({"tamper": i, "rank": self.rank, "logged": str(t), "applied": str(applied)})
            new = apply(state, applied) if applied is not None else state
        if new.digest() != digest:
            # This rank left the log: it moves nothing more; the next agreement names it.
            if self.status == OK:
                self.status, self.first_bad = DIGEST, i
            self.broken = True
            return new
        if self.halted:
            return new
        try:
            batches = plan_rank(new, self.rank)
        except PlanError as e:
            self._fail(PLAN, i, {"kind": "plan", "transition": i, "message": f"transition {i} {t}: {e}"})
            self.halted = True
            return new
        if batches:
            self._execute(i, t, batches)
        if self.disk is not None and not self.halted and len(self.staged) != len(new.spill_staged[self.rank]):
            self._fail(
                PLAN,
                i,
                {"kind": "plan", "transition": i, "message": f"transition {i} {t}: rank {self.rank} holds {len(self.staged)} staged spill copies, the model {len(new.spill_staged[self.rank])}"},
            )
            self.halted = True
        return new

    # ---- physical effects ----------------------------------------------------------------------
    def _execute(self, i: int, t: Any, batches: list[Batch]) -> None:
        R = self.world
        rep = self.report
        x = self.xfer
        checks: list[tuple[Batch, torch.Tensor]] = []
        for b in batches:
            n = len(b)
            if b.kind == "poison_host":
                self.slab.poison(torch.tensor(b.host, dtype=torch.int64))
                continue
            if b.kind in ("spill_gather", "spill_write", "reload_read"):
                # the two that write check before they write, so their checks come back
                # at once; after a failure this rank moves nothing more
                if not self._l3(i, t, b):
                    break
                continue
            lidx = x.index([p // R for p in b.dev])
            if b.kind == "poison_dev":
                self.pool.index_fill_(0, lidx, POISON_DEV)
            elif b.kind == "fill":
                ids = torch.tensor([as_signed(c) for c in b.content], dtype=torch.int64).to(self.device)
                for a in range(0, n, self.gen.chunk):
                    z = min(n, a + self.gen.chunk)
                    words = self.gen.words(ids[a:z], x.scratch.get("fill", z - a, tuple(self.pool.shape[1:])))
                    self.pool.index_copy_(0, lidx[a:z], words)
                rep.pages_filled += n
            elif b.kind == "store":
                hidx = x.index(b.host, host_side=True)
                x.reserve(b.kind, n)  # allocations are not bus time
                t0 = time.monotonic()
                src = x.store(lidx, hidx)
                x.finish()
                rep.intervals.append((t0, time.monotonic()))
                rep.pages_stored += n
                rep.bytes_copied += n * self.page_nbytes
                checks.append((b, self._check(src, b.content)))
                c = self.opts.hooks.corrupt_at(i, self.rank) if self.opts.hooks else None
                if c is not None:
                    h = b.host[0] if c.host_page is None else c.host_page
                    self.slab.host[0, h, 0, 0] ^= 0xFF00  # flip byte 1 of the page
                    rep.injected.append({"corrupt_slab": i, "rank": self.rank, "host_page": h, "byte": 1})
            elif b.kind == "load":
                hidx = x.index(b.host, host_side=True)
                x.reserve(b.kind, n)  # allocations are not bus time
                t0 = time.monotonic()
                x.load(lidx, hidx)
                x.finish()
                rep.intervals.append((t0, time.monotonic()))
                rep.pages_loaded += n
                rep.bytes_copied += n * self.page_nbytes
                checks.append((b, self._check(x.gather(lidx), b.content)))
            else:
                raise AssertionError(f"unknown batch kind {b.kind}")
        if not checks:
            x.finish()
            return
        bad = torch.cat([flags for _, flags in checks]).nonzero().flatten().tolist()  # the one read-back
        starts, k = [], 0
        for b, _ in checks:
            starts.append(k)
            k += len(b)
            rep.bytes_verified += len(b) * self.page_nbytes
        for pos in bad:
            j = bisect.bisect_right(starts, pos) - 1
            self._report_bad_page(i, t, checks[j][0], pos - starts[j])

    # ---- L3 ------------------------------------------------------------------------------------
    def _l3(self, i: int, t: Any, b: Batch) -> bool:
        """Execute one L3 batch; False when the rank must stop moving bytes."""
        assert self.disk is not None, "the plan gave L3 work to a run without L3"
        rep = self.report
        n = len(b)
        if b.kind == "spill_gather":
            # slab -> staging, host to host: the bytes go to disk, never through the device
            buf, rows = self.staging.take(n)
            if n:
                torch.index_select(self.slab_rows, 0, self._slab_row_index(b.host), out=rows.view(-1, *rows.shape[2:]))
            self.staged.append(Staged(b.hashes, b.host, b.content, buf, rows))
            rep.pages_gathered += n
            return True
        if b.kind == "spill_write":
            if not self.staged or self.staged[0].hashes != b.hashes:
                have = [f"0x{h:016x}" for h in self.staged[0].hashes] if self.staged else "nothing"
                self._fail(PLAN, i, {"kind": "plan", "transition": i, "message": f"transition {i} {t}: rank {self.rank} writes hashes {[f'0x{h:016x}' for h in b.hashes]} but its oldest staged copy holds {have}"})
                self.halted = True
                return False
            st = self.staged.popleft()
            # the staged copy is checked whether or not the write succeeds: it is the
            # copy the model says holds these pages until SpillDone
            if n and not self._verify_now(i, t, b.kind, st.rows, st.content, st.host, st.hashes, "staged from"):
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
        if not self._verify_now(i, t, b.kind, rows, b.content, b.host, b.hashes, f"read from rank {self.rank}'s disk for"):
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
                VERIFY,
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
        if bad:
            self.halted = True
        return not bad

    def _disk_failed(self, i: int, t: Any, e: Exception) -> bool:
        self._fail(DISK, i, {"kind": "disk", "transition": i, "message": f"transition {i} {t}, rank {self.rank}: {e}"})
        self.halted = True
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
        what = "loaded from" if b.kind == "load" else "to be stored into"
        content = "poison" if c is None else f"content 0x{c:016x}"
        detail = self._describe(actual, c)
        self._fail(
            VERIFY,
            i,
            {
                "kind": "verify",
                "transition": i,
                "rank": self.rank,
                "page": page,
                "host_page": b.host[j],
                "op": b.kind,
                "message": f"transition {i} {t}, rank {self.rank}: device page {page} {what} host page {b.host[j]} "
                f"does not hold {content}: {detail}",
            },
        )
        self.halted = True


def run_rank(rank: int, world: int, opts: Options, local_rank: int | None = None) -> tuple[bool, list[Report] | None]:
    """Join the process group (from the standard env variables), replay, and return
    (whether the run passed, every rank's report on rank 0 / None elsewhere)."""
    r: RankReplay | None = None
    with collectives.process_group(rank, world, opts.timeout_s):
        try:
            device = select_device(opts.device, rank if local_rank is None else local_rank)
            # the ranks of a node share its cores: the CPU side of every copy (the CPU device's
            # copies, staged scatters, poisons, the disk stores' gathers) runs on its share
            local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // local))
            if device.type == "cuda":
                torch.cuda.set_device(device)
            r = RankReplay(rank, world, opts, device)
            r.setup()
            rep = r.run()
            reports = collectives.all_gather(rep)
            ok = not any(x.failures for x in reports)
            return ok, reports if rank == 0 else None
        finally:
            if r is not None:
                r.close()
