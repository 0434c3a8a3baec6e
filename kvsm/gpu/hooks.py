"""Test-only fault injection, to prove that the checks catch what they claim to.

Three faults, given as a parameter of `launch.replay` or, for a command line run (also
under torchrun), in the environment variable `KVSM_GPU_INJECT`, `;`-separated:

- `corrupt_slab:I:R[:H]`: after rank R executes the stores of transition I, flip one
  byte of host page H (default: the first page it stored there) in payload region 0.
  A later load of that page must fail verification, naming transition, rank and page.
- `corrupt_disk:I:R[:HASH]`: after rank R's spill write of transition I, flip byte 1
  of the record of page hash HASH (decimal or 0x-hex; default: the first page it wrote
  there) in rank R's disk store (payload 0, layer 0). A later reload of that page must
  fail verification, naming transition, rank and page hash.
- `tamper:I:R`: rank R applies, instead of transition I, the first transition enabled
  in its state that leads to another state (`Finish` and `Abort` of a decoding
  request lead to the same one), or nothing if none does. The digest agreement must
  name the rank.

Pure (no torch): the rank loop asks these values what to do.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

ENV = "KVSM_GPU_INJECT"


class InjectError(ValueError):
    pass


@dataclass(frozen=True)
class CorruptSlab:
    index: int
    rank: int
    host_page: int | None = None


@dataclass(frozen=True)
class CorruptDisk:
    index: int
    rank: int
    page_hash: int | None = None


@dataclass(frozen=True)
class Tamper:
    index: int
    rank: int


@dataclass(frozen=True)
class Hooks:
    corrupt: tuple[CorruptSlab, ...] = ()
    tamper: tuple[Tamper, ...] = ()
    corrupt_disk: tuple[CorruptDisk, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.corrupt or self.tamper or self.corrupt_disk)

    def corrupt_at(self, index: int, rank: int) -> CorruptSlab | None:
        return next((c for c in self.corrupt if c.index == index and c.rank == rank), None)

    def corrupt_disk_at(self, index: int, rank: int) -> CorruptDisk | None:
        return next((c for c in self.corrupt_disk if c.index == index and c.rank == rank), None)

    def tampered(self, index: int, rank: int, state: Any, t: Any, digest: str) -> Any:
        """The transition rank `rank` applies at `index`: `t`, or a substitute whose
        state's digest differs from `digest` (the logged one), or None (apply nothing)."""
        if not any(x.index == index and x.rank == rank for x in self.tamper):
            return t
        from ..transitions import successors  # noqa: PLC0415 - the model, pure

        return next((o for o, s in successors(state) if s.digest() != digest), None)

    def merge(self, other: "Hooks") -> "Hooks":
        return Hooks(self.corrupt + other.corrupt, self.tamper + other.tamper, self.corrupt_disk + other.corrupt_disk)


def parse(text: str, where: str = ENV) -> Hooks:
    corrupt: list[CorruptSlab] = []
    tamper: list[Tamper] = []
    disk: list[CorruptDisk] = []
    for item in filter(None, (s.strip() for s in text.split(";"))):
        parts = item.split(":")
        try:
            nums = [int(x, 0) for x in parts[1:]]  # base 0: a page hash may be given in hex
        except ValueError:
            raise InjectError(f"{where}: '{item}': arguments must be integers") from None
        if parts[0] == "corrupt_slab" and len(nums) in (2, 3):
            corrupt.append(CorruptSlab(*nums))
        elif parts[0] == "corrupt_disk" and len(nums) in (2, 3):
            disk.append(CorruptDisk(*nums))
        elif parts[0] == "tamper" and len(nums) == 2:
            tamper.append(Tamper(*nums))
        else:
            raise InjectError(f"{where}: '{item}': expected corrupt_slab:I:R[:H], corrupt_disk:I:R[:HASH] or tamper:I:R")
    return Hooks(tuple(corrupt), tuple(tamper), tuple(disk))


def from_env() -> Hooks:
    return parse(os.environ.get(ENV, ""))
