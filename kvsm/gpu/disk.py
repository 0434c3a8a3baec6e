"""A rank's L3: its disk store of pages, addressed by page hash.

Layout, one directory per rank under the run's directory (`<run>/rank<r>/`):

- `pages.dat`: a flat array of page records, each one page of every payload region in
  the slab's word order (`[X, layers, W]` 64-bit words, `record_bytes` in all). Room
  for the config's `L3` records is reserved with `posix_fallocate` when the store is
  made, so a disk too small for the model's L3 fails at setup, not in the middle of a
  spill.
- `pages.idx`: the page hash of record `k` as 8 little-endian bytes at offset `8k`,
  written after the record itself, so a kept store is read back by pairing the two.

Records are appended: a spill of N pages is one `pwritev` of its staged buffer (one
vector entry per run of new pages), a reload one `preadv` per run of consecutive
records, usually one. The model's disk never deletes (no GC) and holds at most `L3`
distinct hashes, and a page hash is its content's identity, so a hash the store holds
already is not written again: the file never grows past `L3` records.

Reads go through the page cache (no O_DIRECT: tmpfs refuses it); a replay verifies
bytes, it does not measure the disk.
"""

from __future__ import annotations

import ctypes
import os
import struct

import torch

IOV_MAX = 512  # below the kernel's UIO_MAXIOV (1024)


class DiskError(RuntimeError):
    """The store cannot do what the model says the rank's disk did; the message says why."""


def as_buffer(t: torch.Tensor) -> memoryview:
    """The bytes of a contiguous CPU tensor, writable, without numpy (which a CPU-only
    torch install may lack)."""
    if t.device.type != "cpu" or not t.is_contiguous():
        raise ValueError("a disk transfer needs a contiguous CPU tensor")
    return memoryview((ctypes.c_char * (t.numel() * t.element_size())).from_address(t.data_ptr())).cast("B")


class DiskStore:
    """One rank's disk store."""

    def __init__(self, directory: str, capacity: int, record_bytes: int) -> None:
        self.directory, self.capacity, self.record_bytes = directory, capacity, record_bytes
        self.slots: dict[int, int] = {}  # page hash -> record index
        self.bytes_written = 0
        self.bytes_read = 0
        try:
            os.makedirs(directory)
        except OSError as e:
            raise DiskError(f"disk store {directory}: cannot create: {e.strerror}") from None
        self.data_path = os.path.join(directory, "pages.dat")
        self.index_path = os.path.join(directory, "pages.idx")
        self._data = self._open(self.data_path)
        self._index = self._open(self.index_path)
        try:
            if capacity:
                os.posix_fallocate(self._data, 0, capacity * record_bytes)
        except OSError as e:
            self.close()
            raise DiskError(
                f"disk store {directory}: cannot reserve {capacity} pages of {record_bytes} bytes: {e.strerror} (try --disk-dir)"
            ) from None

    def _open(self, path: str) -> int:
        try:
            return os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        except OSError as e:
            raise DiskError(f"disk store {path}: cannot create: {e.strerror}") from None

    def holds(self, h: int) -> bool:
        return h in self.slots

    def write(self, hashes: list[int], pages: torch.Tensor) -> list[int]:
        """Append the records of `hashes` (rows of `pages`, a contiguous CPU tensor
        `[N, X, layers, W]`) that the store does not hold; returns the hashes written.
        The data is on disk (fdatasync) when this returns: the model's `SpillDone(ok)`
        says so, and `SpillAck` marks nodes durable from it."""
        new = [j for j, h in enumerate(hashes) if h not in self.slots]
        if len(set(hashes[j] for j in new)) != len(new):
            raise DiskError(f"disk store {self.directory}: one spill lists a page hash twice")
        if len(self.slots) + len(new) > self.capacity:
            raise DiskError(
                f"disk store {self.directory}: {len(self.slots)} pages held and {len(new)} new exceed the config's L3 = {self.capacity}"
            )
        if not new:
            return []
        first = len(self.slots)
        rows = as_buffer(pages)
        rb = self.record_bytes
        # one vector entry per run of consecutive new rows: usually the whole buffer
        bufs: list[memoryview] = []
        a = new[0]
        for k in range(1, len(new) + 1):
            if k == len(new) or new[k] != new[k - 1] + 1:
                bufs.append(rows[a * rb : (new[k - 1] + 1) * rb])
                if k < len(new):
                    a = new[k]
        self._pwritev(self._data, bufs, first * rb)
        self._pwritev(self._index, [b"".join(struct.pack("<Q", hashes[j]) for j in new)], first * 8)
        os.fdatasync(self._data)
        os.fdatasync(self._index)
        for k, j in enumerate(new):
            self.slots[hashes[j]] = first + k
        self.bytes_written += len(new) * rb
        return [hashes[j] for j in new]

    def read(self, hashes: list[int], out: torch.Tensor) -> None:
        """Read the record of each hash into the same row of `out` (a contiguous CPU
        tensor `[N, X, layers, W]`): one `preadv` per run of consecutive records."""
        missing = [h for h in hashes if h not in self.slots]
        if missing:
            raise DiskError(f"disk store {self.directory} holds no page of hash 0x{missing[0]:016x} ({len(missing)} of {len(hashes)} missing)")
        if not hashes:
            return
        rows = as_buffer(out)
        rb = self.record_bytes
        slots = [self.slots[h] for h in hashes]
        a = 0
        for k in range(1, len(slots) + 1):
            if k == len(slots) or slots[k] != slots[k - 1] + 1:
                want = (k - a) * rb
                got = os.preadv(self._data, [rows[a * rb : k * rb]], slots[a] * rb)
                if got != want:
                    raise DiskError(f"disk store {self.data_path}: short read of {got} of {want} bytes at record {slots[a]}")
                a = k
        self.bytes_read += len(hashes) * rb

    def flip_byte(self, h: int, offset: int) -> None:
        """Test-only: flip byte `offset` of the record of hash `h` on disk."""
        pos = self.slots[h] * self.record_bytes + offset
        b = os.pread(self._data, 1, pos)
        os.pwrite(self._data, bytes([b[0] ^ 0xFF]), pos)

    def _pwritev(self, fd: int, bufs: list, offset: int) -> None:
        for i in range(0, len(bufs), IOV_MAX):
            part = bufs[i : i + IOV_MAX]
            want = sum(len(b) for b in part)
            got = os.pwritev(fd, part, offset)
            if got != want:
                raise DiskError(f"disk store {self.directory}: short write of {got} of {want} bytes at offset {offset}")
            offset += want

    def close(self) -> None:
        for fd in (getattr(self, "_data", None), getattr(self, "_index", None)):
            if fd is not None:
                os.close(fd)
        self._data = self._index = None


def read_kept(directory: str, record_bytes: int) -> dict[int, bytes]:
    """A kept store's pages by hash (for inspection and tests)."""
    with open(os.path.join(directory, "pages.idx"), "rb") as f:
        idx = f.read()
    out = {}
    with open(os.path.join(directory, "pages.dat"), "rb") as f:
        for k in range(len(idx) // 8):
            (h,) = struct.unpack_from("<Q", idx, 8 * k)
            f.seek(k * record_bytes)
            out[h] = f.read(record_bytes)
    return out
