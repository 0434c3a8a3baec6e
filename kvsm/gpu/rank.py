"""One rank's replay of a log: the loop over its lines and where the rank stands.

For every log line the rank applies the pure model (`kvsm.transitions.apply`), compares
the new state's digest with the line's, cuts the state's effects into this rank's
batches (`plan.plan_rank`) and has them executed and checked (`execute.Executor`):
fills and poisons on its device lane, stores of its pages into the shared slab, loads
into its lane; with L3, gathers of its slab pages into staging, writes of staged copies
to its disk store, reads from its disk store into slab pages.

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

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from ..log import LogError, read_log
from ..replay import model_config
from ..state import ClusterState, Rejected, initial_state
from ..transitions import REGISTRY, apply
from ..transitions.registry import rank_views
from . import collectives
from .disk import DiskError
from .execute import Executor
from .generator import POISON_HOST
from .hooks import Hooks
from .options import Options, ReplayError
from .memory import Shape, Slab, create_slab
from .plan import PlanError, agreements, plan_rank

OK, DIGEST, REJECTED, VERIFY, PLAN, LOG, DISK = range(7)
STATUS = {DIGEST: "digest", REJECTED: "rejected", VERIFY: "verify", PLAN: "plan", LOG: "log", DISK: "disk"}
CODE = {kind: code for code, kind in STATUS.items()}  # a failure's kind -> the status it sets


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
        self.cfg = model_config(self.header, opts.bug, opts.log)
        if self.cfg.R != world:
            raise ReplayError(f"{opts.log}: the log's config has R={self.cfg.R} but {world} ranks were started")
        self.shape = Shape(payloads=len(self.cfg.payloads), pages=self.cfg.L2, layers=opts.layers, page_bytes=opts.page_bytes)
        self.report = Report(rank)
        self.status = OK
        self.first_bad = 0
        self.broken = False  # the state is not the log's: apply nothing more
        self.halted = False  # the bytes are wrong: keep the model, move nothing more
        self.run_dir = ""  # the run's disk stores, when the config has L3
        self.executor: Executor | None = None  # made by setup()

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
                    self.executor = Executor(
                        rank=self.rank,
                        world=self.world,
                        cfg=self.cfg,
                        opts=self.opts,
                        device=self.device,
                        shape=self.shape,
                        slab=(path, token),
                        run_dir=run_dir,
                        report=self.report,
                        fail=self._fail,
                    )
                except Exception as e:  # noqa: BLE001
                    err = f"rank {self.rank}: {e}"
            errs = collectives.all_gather(err)
        finally:
            if self.rank == 0 and shared[0]:
                os.unlink(shared[0])
        bad = list(dict.fromkeys(e for e in errs if e))  # rank 0's error reaches every rank
        if bad:
            raise ReplayError("; ".join(bad))

    def close(self) -> None:
        """Close this rank's disk store; rank 0 removes the run's disk directory unless
        the run keeps it. Called after the last collective, so every rank is done with
        its store by then (or gone)."""
        if self.executor is not None:
            self.executor.close()
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
        ex = self.executor
        assert ex is not None, "setup() first"
        hooks = self.opts.hooks
        state = ref = initial_state(self.cfg)
        log_digest = self.header.initial_digest
        if state.digest() != log_digest:
            self._fail(0, {"kind": "log", "transition": 0, "message": f"{self.opts.log}:1: initial digest {log_digest} != {state.digest()} of the config's initial state"})
            self.broken = True
        last = 0
        stopped = False
        stream = iter(self.stream)
        while True:
            try:
                item = next(stream, None)
            except LogError as e:
                self._fail(last + 1, {"kind": "log", "transition": last + 1, "line": e.line, "message": str(e)})
                break
            if item is None:
                break
            _, i, t, digest = item
            try:
                ref_next = apply(ref, t)
            except Rejected as e:  # the log itself is wrong: every rank gets here alike
                self._fail(i, {"kind": "rejected", "transition": i, "message": f"transition {i} {t} rejected by the model: {e}"})
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
            if ex.disk is not None and not self.broken and not self.halted:
                ex.check_disk(last, state)
            self.agree(last, log_digest, state)
        self.report.seconds = time.monotonic() - t_start
        return self.report

    def _fail(self, index: int, failure: dict[str, Any]) -> None:
        """Record a failure after transition `index`; the first sets the rank's status."""
        failure.setdefault("rank", self.rank)
        self.report.failures.append(failure)
        if self.status == OK:
            self.status, self.first_bad = CODE[failure["kind"]], index

    def _step(self, i: int, t: Any, digest: str, state: ClusterState, ref_next: ClusterState, hooks: Hooks) -> ClusterState:
        """Apply transition `i` on this rank (the logged one, already applied as
        `ref_next`, unless a hook substitutes another) and execute its effects."""
        applied = hooks.tampered(i, self.rank, state, t, digest) if hooks else t
        if applied is t and REGISTRY[t.name].decides and rank_views(self.cfg, t.name):
            # under a defect (or a knob's reference value) that lets a rank decide from its
            # own view, this rank takes its own decision, which the digest agreement
            # compares with the others'
            try:
                own = apply(state, t, view=self.rank)
            except Rejected as e:
                self._fail(i, {"kind": "rejected", "transition": i, "message": f"transition {i} {t}: rank {self.rank} decides otherwise: {e}"})
                self.broken = True
                return state
            new = ref_next if own.replicated_digest() == ref_next.replicated_digest() else own
        elif applied is t:
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
            self._fail(i, {"kind": "plan", "transition": i, "message": f"transition {i} {t}: {e}"})
            self.halted = True
            return new
        ex = self.executor
        assert ex is not None
        if batches and not ex.execute(i, t, batches):
            self.halted = True
        if ex.disk is not None and not self.halted and ex.staged_copies != len(new.spill_staged[self.rank]):
            self._fail(
                i,
                {"kind": "plan", "transition": i, "message": f"transition {i} {t}: rank {self.rank} holds {ex.staged_copies} staged spill copies, the model {len(new.spill_staged[self.rank])}"},
            )
            self.halted = True
        return new


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
