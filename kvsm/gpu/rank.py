"""One rank's replay of a log: the model, the physical effects, the checks, the agreements.

For every log line the rank applies the pure model (`kvsm.transitions.apply`), compares
the new state's digest with the line's, cuts the state's effects into this rank's
batches (`plan.plan_rank`) and executes them: fills and poisons on its device lane,
stores of its pages into the shared slab, loads into its lane. Every stored page is
checked (on the device, before it leaves) and every loaded page is checked (on the
device, after it landed) against the content generator; a batch's check is one op and
its result comes back once per transition.

Agreements are all-reduces over gloo, at points the log decides (`plan.agreements`,
on the model applied to the logged transitions): at every `Commit` (the model's only
cross-rank agreement: after it, slab pages written by other ranks may be read), before
and after every transition that frees host pages, and at the end. Each carries the rank's state digest (as four
32-bit limbs; MAX of the limbs and MAX of their negations give the elementwise MAX and
MIN, equal to the log's digest exactly when every rank's digest is) and the rank's
status. A rank that found a problem stops moving bytes but keeps meeting the others,
so that the next agreement stops every rank together and names the transition, the
rank and, for a bad page, the page.
"""

from __future__ import annotations

import bisect
import ctypes
import os
import pickle
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from ..log import LogError, read_log
from ..state import ClusterState, Rejected, initial_state
from ..transitions import apply
from .generator import POISON_DEV, POISON_HOST, Generator, as_signed, describe
from .hooks import Hooks
from .options import Options, ReplayError
from .memory import Shape, Slab, create_slab, new_pool
from .plan import Batch, PlanError, agreements, plan_rank
from .transfer import Transfer

OK, DIGEST, REJECTED, VERIFY, PLAN, LOG = range(6)
STATUS = {DIGEST: "digest", REJECTED: "rejected", VERIFY: "verify", PLAN: "plan", LOG: "log"}


@dataclass
class Report:
    rank: int
    transitions: int = 0
    pages_filled: int = 0
    pages_loaded: int = 0
    pages_stored: int = 0
    bytes_copied: int = 0
    bytes_verified: int = 0
    agreements: int = 0
    seconds: float = 0.0
    intervals: list[tuple[float, float]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    injected: list[dict[str, Any]] = field(default_factory=list)
    io: str = ""
    io_note: str = ""


def _limbs(hexdigest: str) -> list[int]:
    v = int(hexdigest, 16)
    return [(v >> (32 * k)) & 0xFFFFFFFF for k in range(4)]


def _unlimbs(limbs: list[int]) -> str:
    return f"{sum(int(x) << (32 * k) for k, x in enumerate(limbs)):032x}"


# torch.distributed's *_object collectives need numpy, which a CPU-only install may
# lack; these move pickled bytes (between this run's own processes) as uint8 tensors.
def _to_tensor(obj: Any) -> torch.Tensor:
    return torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)


def _from_tensor(t: torch.Tensor, n: int) -> Any:
    return pickle.loads(ctypes.string_at(t.data_ptr(), n))


def broadcast_obj(obj: Any, rank: int, src: int) -> Any:
    data = _to_tensor(obj) if rank == src else None
    n = torch.tensor([data.numel() if data is not None else 0], dtype=torch.int64)
    dist.broadcast(n, src)
    buf = data if data is not None else torch.empty(int(n.item()), dtype=torch.uint8)
    dist.broadcast(buf, src)
    return _from_tensor(buf, int(n.item()))


def all_gather_obj(obj: Any, world: int) -> list[Any]:
    data = _to_tensor(obj)
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([data.numel()], dtype=torch.int64))
    top = max(int(s.item()) for s in sizes)
    padded = torch.zeros(top, dtype=torch.uint8)
    padded[: data.numel()] = data
    bufs = [torch.empty(top, dtype=torch.uint8) for _ in range(world)]
    dist.all_gather(bufs, padded)
    return [_from_tensor(b, int(s.item())) for b, s in zip(bufs, sizes)]


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

    # ---- setup ----------------------------------------------------------------------------------
    def setup(self) -> None:
        """Rank 0 creates and poisons the slab, every rank maps it and checks the run token
        (so ranks on different hosts are refused), then the file is unlinked: the
        mappings keep it alive and nothing is left behind if a rank dies."""
        shared: list[Any] = [None, None, ""]
        if self.rank == 0:
            path = ""
            try:
                path, token = create_slab(self.opts.slab_dir, self.shape)
                fresh = Slab(path, token, self.shape, torch.device("cpu"))
                fresh.host.fill_(POISON_HOST)  # every host page starts free
                fresh.close()
                shared = [path, token, ""]
            except Exception as e:  # noqa: BLE001 - reported to every rank below
                if path:
                    os.unlink(path)
                shared = [None, None, str(e)]
        try:
            path, token, err = broadcast_obj(shared, self.rank, src=0)
            if not err:
                try:
                    self.slab = Slab(path, token, self.shape, self.device)
                    self.pool = new_pool(self.cfg.L1, self.shape, self.device)
                    self.xfer = Transfer(self.pool, self.slab, self.opts.io, self.device)
                    self.gen = Generator(self.shape.payloads, self.opts.layers, self.opts.page_bytes, self.device)
                except Exception as e:  # noqa: BLE001
                    err = f"rank {self.rank}: {e}"
            errs = all_gather_obj(err, self.world)
        finally:
            if self.rank == 0 and shared[0]:
                os.unlink(shared[0])
        bad = list(dict.fromkeys(e for e in errs if e))  # rank 0's error reaches every rank
        if bad:
            raise ReplayError("; ".join(bad))
        self.report.io, self.report.io_note = self.xfer.io, self.xfer.note

    # ---- agreements ------------------------------------------------------------------------------
    def agree(self, index: int, log_digest: str, state: ClusterState) -> bool:
        """All-reduce digests and statuses; True when the run goes on. `index` is the
        transition after which the ranks agree (0 = the initial state)."""
        W = self.world
        mine = _limbs(state.digest())
        vec = torch.zeros(8 + 2 * W, dtype=torch.int64)
        vec[0:4] = torch.tensor(mine)
        vec[4:8] = -torch.tensor(mine)
        vec[8 + self.rank] = self.status
        vec[8 + W + self.rank] = self.first_bad
        dist.all_reduce(vec, op=dist.ReduceOp.MAX)
        self.report.agreements += 1
        hi, lo = vec[0:4].tolist(), (-vec[4:8]).tolist()
        want = _limbs(log_digest)
        if hi == want and lo == want and not any(vec[8 : 8 + W].tolist()):
            return True
        if mine != want:
            self.report.failures.append(
                {
                    "kind": "digest",
                    "transition": index,
                    "rank": self.rank,
                    "first_divergence": self.first_bad if self.status == DIGEST else None,
                    "log_digest": log_digest,
                    "rank_digest": state.digest(),
                    "min_digest": _unlimbs(lo),
                    "max_digest": _unlimbs(hi),
                    "message": f"transition {index}: rank {self.rank}'s state digest {state.digest()} differs from the log's {log_digest}"
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
            self.agree(last, log_digest, state)
        self.report.seconds = time.monotonic() - t_start
        return self.report

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
                t0 = time.monotonic()
                src = x.store(lidx, hidx)
                x.finish()
                rep.intervals.append((t0, time.monotonic()))
                rep.pages_stored += n
                rep.bytes_copied += n * self.page_nbytes
                checks.append((b, self._check(src, b)))
                c = self.opts.hooks.corrupt_at(i, self.rank) if self.opts.hooks else None
                if c is not None:
                    h = b.host[0] if c.host_page is None else c.host_page
                    self.slab.host[0, h, 0, 0] ^= 0xFF00  # flip byte 1 of the page
                    rep.injected.append({"corrupt_slab": i, "rank": self.rank, "host_page": h, "byte": 1})
            elif b.kind == "load":
                hidx = x.index(b.host, host_side=True)
                t0 = time.monotonic()
                x.load(lidx, hidx)
                x.finish()
                rep.intervals.append((t0, time.monotonic()))
                rep.pages_loaded += n
                rep.bytes_copied += n * self.page_nbytes
                checks.append((b, self._check(x.gather(lidx), b)))
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

    def _check(self, actual: torch.Tensor, b: Batch) -> torch.Tensor:
        ids = torch.tensor([as_signed(c) if c is not None else 0 for c in b.content], dtype=torch.int64).to(self.device)
        poisoned = [j for j, c in enumerate(b.content) if c is None]
        scratch = self.xfer.scratch.get("expect", min(len(b), self.gen.chunk), tuple(self.pool.shape[1:]))
        return self.gen.mismatches(actual, ids, poisoned, scratch)

    def _report_bad_page(self, i: int, t: Any, b: Batch, j: int) -> None:
        page, c = b.dev[j], b.content[j]
        actual = self.pool[page // self.world].cpu()
        ids = torch.tensor([as_signed(c) if c is not None else 0], dtype=torch.int64, device=self.device)
        exp = torch.empty((1, *self.pool.shape[1:]), dtype=torch.int64, device=self.device)
        self.gen.expected(ids, [0] if c is None else [], exp)
        what = "loaded from" if b.kind == "load" else "to be stored into"
        content = "poison" if c is None else f"content 0x{c:016x}"
        detail = describe(actual, exp[0].cpu(), self.cfg.payloads)
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
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=opts.timeout_s))
    try:
        device = select_device(opts.device, rank if local_rank is None else local_rank)
        if device.type == "cpu":
            local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // local))
        else:
            torch.cuda.set_device(device)
        r = RankReplay(rank, world, opts, device)
        r.setup()
        rep = r.run()
        reports = all_gather_obj(rep, world)
        ok_vec = torch.tensor([0 if rep.failures else 1], dtype=torch.int64)
        dist.all_reduce(ok_vec, op=dist.ReduceOp.MIN)
        return bool(ok_vec.item()), reports if rank == 0 else None
    finally:
        dist.destroy_process_group()
