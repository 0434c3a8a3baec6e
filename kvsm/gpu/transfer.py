"""Batched copies between a rank's device pool (L1) and the shared host slab (L2).

A batch is every page of one kind of one transition for one rank: one gather and one
scatter per payload region, never a loop over pages, and one synchronisation at its
end (the caller's `finish`). Two ways to cross the bus:

- `direct`: the device addresses the slab itself. On CUDA the registered slab is mapped
  into the device's address space and the gather/scatter kernels read and write host
  memory over the bus (zero copy, as SGLang HiCache's kernel I/O backend does); on the
  CPU "device" memory and the slab are the same kind of memory, so this is plain
  index_select/index_copy.
- `staged`: through a pinned staging buffer: the device gathers into a contiguous
  buffer that asynchronous DMAs (one per payload region) move to pinned host memory,
  and the CPU scatters it into the slab (loads the reverse). Works wherever pinned
  memory does; on the CPU it only adds a copy (kept so that its logic is tested there).

`auto` picks `direct` where it works (always on the CPU; on CUDA when the registered
slab maps to the device) and `staged` otherwise, and says which and why.
"""

from __future__ import annotations

import torch

from ..effects import Load, Store
from .generator import POISON_DEV
from .memory import Scratch, Slab
from .options import IO_MODES


class Transfer:
    def __init__(self, pool: torch.Tensor, slab: Slab, io: str, device: torch.device) -> None:
        if io not in IO_MODES:
            raise ValueError(f"io must be one of {', '.join(IO_MODES)}, got {io!r}")
        self.pool, self.slab, self.device = pool, slab, device
        self.cuda = device.type == "cuda"
        self.note = ""
        if io == "auto":
            try:
                self.slab_dev = slab.map_to_device()
                io = "direct"
            except Exception as e:  # noqa: BLE001 - any failure to map means: stage instead
                io = "staged"
                self.note = f"direct mapping of the slab failed ({type(e).__name__}: {e}); staged copies used"
        elif io == "direct":
            self.slab_dev = slab.map_to_device()
        self.io = io
        self.scratch = Scratch(device)
        self.staging = Scratch(torch.device("cpu"), pinned=self.cuda) if io == "staged" else None
        self._tail = tuple(pool.shape[1:])  # (X, layers, W)
        self._row = tuple(pool.shape[2:])  # (layers, W)

    def index(self, ids: list[int], host_side: bool = False) -> torch.Tensor:
        """An index tensor where the copy that uses it runs."""
        t = torch.tensor(ids, dtype=torch.int64)
        if host_side and self.io == "staged":
            return t
        return t.to(self.device, non_blocking=True) if self.cuda else t

    # Every buffer a batch of n pages uses, obtained in one place, so that `reserve` can
    # make them exist before a copy is timed: a first allocation (cudaMalloc, a pinned
    # cudaHostAlloc, first-touch page faults) is not bus traffic.
    def _store_buffers(self, n: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        src = self.scratch.get("gather", n, self._tail)
        if self.staging is None:
            return src, None
        return src, self.staging.get("store", self._tail[0] * n, self._row).view(self._tail[0], n, *self._row)

    def _load_buffers(self, n: int) -> tuple[list[torch.Tensor], torch.Tensor | None]:
        X = self._tail[0]
        if self.staging is None:
            return [self.scratch.get("load", n, self._row)] * X, None
        stage = self.staging.get("load", X * n, self._row).view(X, n, *self._row)
        rows = [self.scratch.get(f"load{x}", n, self._row) for x in range(X)] if self.cuda else list(stage)
        return rows, stage

    def reserve(self, op: type[Store] | type[Load], n: int) -> None:
        """Allocate now every buffer a batch of `n` stores or of `n` loads needs."""
        (self._store_buffers if op is Store else self._load_buffers)(n)

    def warm_up(self) -> None:
        """One load and one store of a single page, each way across the bus, so that the
        kernels' first launch (CUDA loads modules lazily) and, for `direct`, the first
        touch of the mapped slab happen at setup rather than in the first timed copy; a
        device that cannot reach the slab fails here. Page 0 of the pool is poisoned
        again afterwards; host page 0 gets back the bytes it held."""
        if not (self.pool.shape[0] and self.slab.shape.pages):
            return
        i, h = self.index([0]), self.index([0], host_side=True)
        self.load(i, h)
        self.store(i, h)
        self.pool.index_fill_(0, i, POISON_DEV)
        self.finish()

    def gather(self, lidx: torch.Tensor) -> torch.Tensor:
        """Device pages -> a contiguous [N, X, layers, W] buffer on the device."""
        return torch.index_select(self.pool, 0, lidx, out=self.scratch.get("gather", lidx.numel(), self._tail))

    def store(self, lidx: torch.Tensor, hidx: torch.Tensor) -> torch.Tensor:
        """Copy device pages `lidx` into host pages `hidx` of every region; returns the
        gathered source (valid until the next batch) for verification."""
        _, stage = self._store_buffers(lidx.numel())
        src = self.gather(lidx)
        X = self._tail[0]
        if stage is None:
            for x in range(X):
                self.slab_dev[x].index_copy_(0, hidx, src[:, x])
            return src
        for x in range(X):
            stage[x].copy_(src[:, x], non_blocking=self.cuda)
        self.finish()  # the DMA must land before the CPU scatters it
        for x in range(X):
            self.slab.host[x].index_copy_(0, hidx, stage[x])
        return src

    def load(self, lidx: torch.Tensor, hidx: torch.Tensor) -> None:
        """Copy host pages `hidx` of every region into device pages `lidx`."""
        rows, stage = self._load_buffers(lidx.numel())
        X = self._tail[0]
        if stage is None:
            for x in range(X):
                torch.index_select(self.slab_dev[x], 0, hidx, out=rows[x])
                self.pool[:, x].index_copy_(0, lidx, rows[x])
            return
        for x in range(X):
            torch.index_select(self.slab.host[x], 0, hidx, out=stage[x])
        for x in range(X):
            if self.cuda:
                rows[x].copy_(stage[x], non_blocking=True)
            self.pool[:, x].index_copy_(0, lidx, rows[x])
        self.finish()  # the next batch refills the staging buffer from the CPU

    def finish(self) -> None:
        """The one synchronisation of a batch: every copy issued so far has landed."""
        if self.cuda:
            torch.cuda.current_stream(self.device).synchronize()
