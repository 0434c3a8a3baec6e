"""Deterministic page bytes from a 64-bit content identity, and their verification.

A page holds, for each payload `x` and layer `l`, `W = page_bytes / 8` 64-bit words:

    word(c, x, l, w) = seed(c, x, l) XOR T[w]

`seed` is a counter-based hash of (identity `c`, payload, layer), computed on the
device for all pages of a batch at once; `T[w]` is a fixed table of hashed word
offsets, made once per shape. So a page costs one XOR per word to make and one
compare per word to check, and any flipped byte, stale page (other identity), page
from another layer or payload, or row written at a shifted offset differs from the
expectation. It is not cryptographic and need not be.

Freed pages are poisoned with a constant word (device and host differ), so a page read
after it was freed is recognised as such in a report.

All arithmetic is on int64 tensors holding 32-bit values, multiplied in 16-bit halves
so that no product overflows (signed overflow is undefined in the kernels).
"""

from __future__ import annotations

import torch

M32 = 0xFFFFFFFF
POISON_DEV = 0x0DEAD0DE_0DEAD0DE  # "0DEAD0DE": a freed device page
POISON_HOST = 0x0DEADF00_0DEADF00  # "0DEADF00": a freed host page
POISON_NAMES = {POISON_DEV: "device poison", POISON_HOST: "host poison"}
# Bound on the temporary memory of one generation step (bytes of page data).
CHUNK_BYTES = 64 << 20


def _mul32(a: torch.Tensor, c: int) -> torch.Tensor:
    lo, hi = c & 0xFFFF, c >> 16
    return (a * lo + ((a * hi) & 0xFFFF) * 65536) & M32


def _fmix32(h: torch.Tensor) -> torch.Tensor:
    h = h ^ (h >> 16)
    h = _mul32(h, 0x85EBCA6B)
    h = h ^ (h >> 13)
    h = _mul32(h, 0xC2B2AE35)
    return h ^ (h >> 16)


def _join64(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(a << 32) | b as a signed int64, a and b in [0, 2^32), without overflow."""
    return ((a ^ 0x80000000) - 0x80000000) * (1 << 32) + b


def as_signed(c: int) -> int:
    """A 64-bit unsigned identity as the int64 that holds the same bits."""
    return c - (1 << 64) if c >= 1 << 63 else c


class Generator:
    """The content generator for one page shape on one device."""

    def __init__(self, payloads: int, layers: int, page_bytes: int, device: torch.device) -> None:
        if page_bytes <= 0 or page_bytes % 8:
            raise ValueError(f"page bytes must be a positive multiple of 8, got {page_bytes}")
        self.X, self.L, self.W = payloads, layers, page_bytes // 8
        self.device = device
        w = torch.arange(self.W, dtype=torch.int64, device=device)
        a = _fmix32(_mul32(w, 0x9E3779B9) ^ 0x2545F491)
        b = _fmix32(a ^ _mul32(w + 1, 0x27D4EB2F))
        self.table = _join64(a, b)  # [W]
        k = torch.arange(payloads * layers, dtype=torch.int64, device=device).view(1, payloads, layers)
        self._k1 = _fmix32(_mul32(k, 0x9E3779B9) ^ 0x5BD1E995)
        self._k2 = _fmix32(_mul32(k + 1, 0x85EBCA6B) ^ 0x68E31DA4)
        self.page_words = payloads * layers * self.W
        self.chunk = max(1, CHUNK_BYTES // (8 * self.page_words))

    def seeds(self, ids: torch.Tensor) -> torch.Tensor:
        """[N] int64 identities -> [N, X, L] int64 seeds."""
        lo = (ids & M32).view(-1, 1, 1)
        hi = ((ids >> 32) & M32).view(-1, 1, 1)
        a = _fmix32(lo ^ self._k1)
        b = _fmix32(hi ^ _fmix32(a ^ self._k2))
        a = _fmix32(a ^ _mul32(b, 0xC2B2AE35))
        return _join64(a, b)

    def expected(self, ids: torch.Tensor, poisoned: list[int], out: torch.Tensor) -> torch.Tensor:
        """Write into `out` [N, X, L, W] the bytes that pages of identities `ids` [N] hold;
        rows listed in `poisoned` (known on the host, from the model) hold the device
        poison instead."""
        torch.bitwise_xor(self.seeds(ids).unsqueeze(-1), self.table, out=out)
        if poisoned:
            out.index_fill_(0, torch.tensor(poisoned, dtype=torch.int64).to(out.device), as_signed(POISON_DEV))
        return out

    def words(self, ids: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """Content of identities `ids` [N] into `out` [N, X, L, W]."""
        return self.expected(ids, [], out)

    def mismatches(self, actual: torch.Tensor, ids: torch.Tensor, poisoned: list[int], scratch: torch.Tensor) -> torch.Tensor:
        """[N] bool on the device: which pages of `actual` [N, X, L, W] differ from what
        identities `ids` make (the device poison for rows in `poisoned`). `scratch`
        holds at least `self.chunk` pages; generation and compare go a chunk at a time,
        and nothing comes back to the host here."""
        n = actual.shape[0]
        bad = torch.empty(n, dtype=torch.bool, device=actual.device)
        for i in range(0, n, self.chunk):
            j = min(n, i + self.chunk)
            exp = self.expected(ids[i:j], [p - i for p in poisoned if i <= p < j], scratch[: j - i])
            bad[i:j] = (actual[i:j] != exp).view(j - i, -1).any(1)
        return bad


def describe(actual_page: torch.Tensor, expected_page: torch.Tensor, names: tuple[str, ...]) -> str:
    """Where one page [X, L, W] first differs from its expectation, in words a person reads."""
    diff = (actual_page != expected_page).flatten().nonzero()
    if diff.numel() == 0:
        return "no difference"
    flat = int(diff[0])
    X, L, W = actual_page.shape
    x, rest = divmod(flat, L * W)
    layer, w = divmod(rest, W)
    got = int(actual_page.flatten()[flat]) & ((1 << 64) - 1)
    exp = int(expected_page.flatten()[flat]) & ((1 << 64) - 1)
    a = got.to_bytes(8, "little")
    e = exp.to_bytes(8, "little")
    k = next(i for i in range(8) if a[i] != e[i])
    what = POISON_NAMES.get(got)
    tail = f" (the word is the {what}: the page was read after it was freed)" if what else ""
    return (
        f"{int(diff.numel())} of {X * L * W} words differ; first at payload {names[x]!r} layer {layer} "
        f"byte {w * 8 + k}: 0x{a[k]:02x}, expected 0x{e[k]:02x}{tail}"
    )
