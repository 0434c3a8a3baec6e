"""The two tiers of real memory: a rank's device KV pool (L1) and the shared host slab (L2),
and the host buffers that stage spills to a rank's disk (L3, `disk.py`).

Byte layout (all words are 64-bit, `W = page_bytes / 8`):

- Device pool of rank `r`: one tensor `[L1, X, layers, W]` on its device, page-major so
  that a batch of pages is one gather or scatter over all payloads and layers. It holds
  only the rank's own lane: global device page `p` (with `p mod R == r`) is local row
  `p // R`. On one GPU every rank allocates its own lane, so the pools together are
  exactly the model's `R * L1` pages.
- Host slab: one file in `/dev/shm` mapped `MAP_SHARED` by every rank of the node: a
  4 KiB header (magic, a run token, the shape), then one region per payload, each
  `[L2, layers, W]`, so host page `h` of payload `x` is the row `slab[x, h]`. On CUDA,
  for direct copies, each rank registers the mapping with `cudaHostRegister` (portable,
  mapped), so that kernels reach it over the bus without a bounce through pageable
  memory; staged copies never need it registered.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import secrets
import struct
from dataclasses import dataclass

import torch

from .generator import POISON_DEV, POISON_HOST

HEADER = 4096
MAGIC = b"KVSMSLAB"
_HEAD = struct.Struct("<8s16sQQQQ")  # magic, token, payloads, L2, layers, page_bytes

CUDA_HOST_REGISTER_PORTABLE = 1
CUDA_HOST_REGISTER_MAPPED = 2
CU_POINTER_ATTRIBUTE_DEVICE_POINTER = 3


class SlabError(RuntimeError):
    pass


@dataclass(frozen=True)
class Shape:
    payloads: int
    pages: int  # L2
    layers: int
    page_bytes: int

    @property
    def row_words(self) -> int:
        return self.layers * self.page_bytes // 8

    @property
    def nbytes(self) -> int:
        return self.payloads * self.pages * self.layers * self.page_bytes


def create_slab(directory: str, shape: Shape) -> tuple[str, bytes]:
    """Create the slab file (rank 0), poisoned, and return its path and run token."""
    token = secrets.token_bytes(16)
    path = os.path.join(directory, f"kvsm-slab-{os.getpid()}-{token.hex()[:12]}")
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    except OSError as e:
        raise SlabError(f"host slab {path}: cannot create: {e.strerror}") from None
    try:
        # Reserve the memory now: a sparse file on a full tmpfs would kill the first rank
        # that touches a missing page with SIGBUS instead of failing here.
        os.posix_fallocate(fd, 0, HEADER + shape.nbytes)
        os.pwrite(fd, _HEAD.pack(MAGIC, token, shape.payloads, shape.pages, shape.layers, shape.page_bytes), 0)
    except OSError as e:
        os.close(fd)
        os.unlink(path)
        raise SlabError(
            f"host slab {path}: cannot reserve {HEADER + shape.nbytes} bytes in {directory}: {e.strerror} (try --slab-dir)"
        ) from None
    os.close(fd)
    return path, token


class Slab:
    """One rank's mapping of the shared host slab."""

    def __init__(self, path: str, token: bytes, shape: Shape, device: torch.device) -> None:
        self.path, self.shape, self.device = path, shape, device
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError as e:
            raise SlabError(f"host slab {path}: cannot open: {e.strerror} (do all ranks run on one node?)") from None
        try:
            size = os.fstat(fd).st_size
            if size != HEADER + shape.nbytes:
                raise SlabError(f"host slab {path}: {size} bytes, expected {HEADER + shape.nbytes}")
            # MAP_POPULATE maps every page now, not at its first touch in the middle of a
            # timed copy (for direct copies on CUDA, cudaHostRegister pins them anyway)
            flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
            self._map = mmap.mmap(fd, size, flags, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        head = _HEAD.unpack_from(self._map, 0)
        if head[0] != MAGIC or head[1] != token:
            raise SlabError(f"host slab {path}: header is not this run's (the ranks do not share one host's memory)")
        if head[2:] != (shape.payloads, shape.pages, shape.layers, shape.page_bytes):
            raise SlabError(f"host slab {path}: shape {head[2:]} differs from {shape}")
        raw = torch.frombuffer(self._map, dtype=torch.int64, offset=HEADER, count=shape.nbytes // 8)
        self.host = raw.view(shape.payloads, shape.pages, shape.layers, shape.page_bytes // 8)
        self.registered = False
        self.dev: torch.Tensor | None = None  # the slab as the device addresses it (see `map_to_device`)
        if device.type != "cuda":
            self.dev = self.host

    def map_to_device(self) -> torch.Tensor:
        """The slab as a CUDA tensor (zero copy over unified addressing): kernels that
        gather from or scatter into it move the bytes over the bus themselves. Registers
        the mapping first; raises SlabError, with the CUDA error consumed, when the
        driver refuses it or maps it at another address than the host's."""
        if self.dev is not None:
            return self.dev
        ptr, n = self.host.data_ptr(), self.shape.nbytes
        err = int(torch.cuda.cudart().cudaHostRegister(ptr, n, CUDA_HOST_REGISTER_PORTABLE | CUDA_HOST_REGISTER_MAPPED))
        if err != 0:
            _consume_cuda_error(self.device)
            raise SlabError(f"host slab {self.path}: cudaHostRegister of {n} bytes failed with CUDA error {err}")
        self.registered = True
        dev_ptr = _device_pointer(ptr)
        if dev_ptr != ptr:
            self._unregister()
            where = "unknown (libcuda's cuPointerGetAttribute failed)" if dev_ptr is None else hex(dev_ptr)
            raise SlabError(f"host slab {self.path}: the device maps the registered slab at {where}, not at its host address {ptr:#x}")

        class _Iface:
            __cuda_array_interface__ = {"shape": (n // 8,), "typestr": "<i8", "data": (ptr, False), "version": 2}

        self.dev = torch.as_tensor(_Iface(), device=self.device).view(self.host.shape)
        return self.dev

    def _unregister(self) -> None:
        if self.registered:
            torch.cuda.cudart().cudaHostUnregister(self.host.data_ptr())
            self.registered = False

    def poison(self, pages: torch.Tensor) -> None:
        """Poison host pages (a CPU index tensor) in every payload region, on the host."""
        for x in range(self.shape.payloads):
            self.host[x].index_fill_(0, pages, POISON_HOST)

    def close(self) -> None:
        self.dev = None
        self._unregister()
        del self.host
        try:
            self._map.close()
        except BufferError:
            pass  # a tensor view is still alive; the mapping goes with the process


def _consume_cuda_error(device: torch.device) -> None:
    """A failed runtime call leaves its error pending: torch would raise it from the next,
    unrelated kernel launch. One tiny kernel takes it (and raises it here, swallowed)."""
    try:
        torch.ones(1, device=device).add_(1)
        torch.cuda.synchronize(device)
    except RuntimeError:
        pass


def _device_pointer(host_ptr: int) -> int | None:
    """The device address of registered host memory, from the driver
    (cuPointerGetAttribute), or None when the driver cannot say."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    out = ctypes.c_uint64()
    rc = lib.cuPointerGetAttribute(ctypes.byref(out), ctypes.c_int(CU_POINTER_ATTRIBUTE_DEVICE_POINTER), ctypes.c_uint64(host_ptr))
    return int(out.value) if rc == 0 else None


def new_pool(lane_pages: int, shape: Shape, device: torch.device) -> torch.Tensor:
    """A rank's device pool: its lane's pages, poisoned (every page starts free)."""
    pool = torch.empty((lane_pages, shape.payloads, shape.layers, shape.page_bytes // 8), dtype=torch.int64, device=device)
    return pool.fill_(POISON_DEV)


class Scratch:
    """Reusable buffers by name, grown by doubling: a fresh allocation per batch costs
    page faults on the CPU and allocator churn on the GPU."""

    def __init__(self, device: torch.device, pinned: bool = False) -> None:
        self.device, self.pinned = device, pinned
        self._bufs: dict[str, torch.Tensor] = {}

    def get(self, name: str, rows: int, tail: tuple[int, ...], dtype: torch.dtype = torch.int64) -> torch.Tensor:
        buf = self._bufs.get(name)
        if buf is None or buf.shape[0] < rows or tuple(buf.shape[1:]) != tail or buf.dtype != dtype:
            n = max(rows, 2 * buf.shape[0] if buf is not None and tuple(buf.shape[1:]) == tail else rows)
            buf = torch.empty((n, *tail), dtype=dtype, device=self.device, pin_memory=self.pinned)
            self._bufs[name] = buf
        return buf[:rows]


class StagingPool:
    """Host buffers `[rows, X, layers, W]` for staged spill copies, reused. Pinned on
    CUDA, so that the copy that checks them on the device is one DMA; pinning costs
    milliseconds per allocation, hence the reuse. A rank holds at most `spill_inflight`
    staged copies at once and sizes are powers of two no larger than an object, so the
    pool stays small."""

    def __init__(self, tail: tuple[int, ...], pinned: bool) -> None:
        self.tail, self.pinned = tail, pinned
        self._free: list[torch.Tensor] = []

    def take(self, rows: int) -> tuple[torch.Tensor | None, torch.Tensor]:
        """(the buffer to give back, its first `rows` rows)."""
        if rows == 0:
            return None, torch.empty((0, *self.tail), dtype=torch.int64)
        for k, buf in enumerate(self._free):
            if buf.shape[0] >= rows:
                del self._free[k]
                return buf, buf[:rows]
        buf = torch.empty((1 << (rows - 1).bit_length(), *self.tail), dtype=torch.int64, pin_memory=self.pinned)
        return buf, buf[:rows]

    def give(self, buf: torch.Tensor | None) -> None:
        if buf is not None:
            self._free.append(buf)
