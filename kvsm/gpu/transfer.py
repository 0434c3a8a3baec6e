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
  buffer that one asynchronous DMA moves to pinned host memory, and the CPU scatters it
  into the slab (loads the reverse). Works wherever pinned memory does; on the CPU it
  only adds a copy (kept so that its logic is tested there).

`auto` picks `direct` where it works (always on the CPU; on CUDA when the registered
slab maps to the device) and `staged` otherwise, and says which and why.
"""

from __future__ import annotations

import torch

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

    def gather(self, lidx: torch.Tensor) -> torch.Tensor:
        """Device pages -> a contiguous [N, X, layers, W] buffer on the device."""
        return torch.index_select(self.pool, 0, lidx, out=self.scratch.get("gather", lidx.numel(), self._tail))

    def store(self, lidx: torch.Tensor, hidx: torch.Tensor) -> torch.Tensor:
        """Copy device pages `lidx` into host pages `hidx` of every region; returns the
        gathered source (valid until the next batch) for verification."""
        src = self.gather(lidx)
        X = self._tail[0]
        if self.io == "direct":
            for x in range(X):
                self.slab_dev[x].index_copy_(0, hidx, src[:, x])
            return src
        assert self.staging is not None
        n = lidx.numel()
        stage = self.staging.get("store", X * n, self._row).view(X, n, *self._row)
        for x in range(X):
            stage[x].copy_(src[:, x], non_blocking=self.cuda)
        self.finish()  # the DMA must land before the CPU scatters it
        for x in range(X):
            self.slab.host[x].index_copy_(0, hidx, stage[x])
        return src

    def load(self, lidx: torch.Tensor, hidx: torch.Tensor) -> None:
        """Copy host pages `hidx` of every region into device pages `lidx`."""
        X = self._tail[0]
        n = lidx.numel()
        if self.io == "direct":
            for x in range(X):
                rows = torch.index_select(self.slab_dev[x], 0, hidx, out=self.scratch.get("load", n, self._row))
                self.pool[:, x].index_copy_(0, lidx, rows)
            return
        assert self.staging is not None
        stage = self.staging.get("load", X * n, self._row).view(X, n, *self._row)
        for x in range(X):
            torch.index_select(self.slab.host[x], 0, hidx, out=stage[x])
        for x in range(X):
            rows = self.scratch.get(f"load{x}", n, self._row) if self.cuda else stage[x]
            if self.cuda:
                rows.copy_(stage[x], non_blocking=True)
            self.pool[:, x].index_copy_(0, lidx, rows)

    def finish(self) -> None:
        """The one synchronisation of a batch: every copy issued so far has landed."""
        if self.cuda:
            torch.cuda.current_stream(self.device).synchronize()
