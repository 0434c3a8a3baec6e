"""Compact TLA+ text of the values a trace module holds, each checked to denote
exactly the model's value: runs of integers as arithmetic progressions (`Ar`, `ArS`),
and page contents and page hashes as prefixes of the token sequences of the log's
arrivals (`Tokens`: `Cnt(j, k)` is the first `k` symbols of `Tok[j]`), node keys as
slices of them, and the page contents of a run of pages as one run (`Fill`). The
operators named here are defined by the trace module (`kvsm.tla.trace`)."""

from __future__ import annotations

from typing import Iterable

from .. import content
from .canon import MappingError


def tla_bool(x: bool) -> str:
    return "TRUE" if x else "FALSE"


def _runs(xs: list[int], min_run: int = 3) -> list[tuple[int, int, int]]:
    """Maximal arithmetic runs (first, stride, count) of a list of integers, greedily;
    a run shorter than `min_run` is split into single elements (stride 1)."""
    out: list[tuple[int, int, int]] = []
    i, n = 0, len(xs)
    while i < n:
        if i + 1 < n:
            s = xs[i + 1] - xs[i]
            j = i + 1
            while j + 1 < n and xs[j + 1] - xs[j] == s:
                j += 1
            if s != 0 and j - i + 1 >= min_run:
                out.append((xs[i], s, j - i + 1))
                i = j + 1
                continue
        out.append((xs[i], 1, 1))
        i += 1
    return out


def ints(xs: Iterable[int]) -> str:
    """A sequence of integers: literal elements and arithmetic runs `Ar(first, stride, n)`."""
    xs = list(xs)
    if len(xs) < 3:
        return "<<" + ", ".join(map(str, xs)) + ">>"
    pieces: list[str] = []
    lit: list[str] = []
    for a, s, n in _runs(xs):
        if n == 1:
            lit.append(str(a))
            continue
        if lit:
            pieces.append("<<" + ", ".join(lit) + ">>")
            lit = []
        pieces.append(f"Ar({a}, {s}, {n})")
    if lit:
        pieces.append("<<" + ", ".join(lit) + ">>")
    return pieces[0] if len(pieces) == 1 else "(" + " \\o ".join(pieces) + ")"


def intset(xs: Iterable[int]) -> str:
    """A set of integers: intervals `a..b`, progressions `ArS(first, stride, n)` and a
    literal set of the rest."""
    xs = sorted(xs)
    if not xs:
        return "{}"
    pieces: list[str] = []
    lit: list[str] = []
    for a, s, n in _runs(xs, min_run=4):
        if n == 1:
            lit.append(str(a))
        elif s == 1:
            pieces.append(f"{a}..{a + n - 1}")
        else:
            pieces.append(f"ArS({a}, {s}, {n})")
    if lit:
        pieces.append("{" + ", ".join(lit) + "}")
    return pieces[0] if len(pieces) == 1 else "(" + " \\cup ".join(pieces) + ")"


class Tokens:
    """The token sequences of the log's arrivals (`Tok[j]`, j from 1, numbered over the
    whole log) and, for every content identity that is a prefix of one of them, where
    it first occurs: `(j, k)`, the first k symbols of `Tok[j]`. A module defines `Tok`
    with only the sequences it uses (`used`)."""

    def __init__(self) -> None:
        self.seqs: list[tuple[int, ...]] = []
        self.index: dict[tuple[int, ...], int] = {}
        self.at: dict[int, tuple[int, int]] = {}
        self.used: set[int] = set()

    def add(self, tokens: tuple[int, ...]) -> int:
        j = self.index.get(tokens)
        if j is None:
            self.seqs.append(tokens)
            j = self.index[tokens] = len(self.seqs)
            for k, c in enumerate(content.prefix_content(tokens), start=1):
                self.at.setdefault(c, (j, k))
        return j

    def add_ns(self, tokens: tuple[int, ...], ns: int) -> int:
        """An arrival of namespace `ns` > 0: its tokens after the virtual symbol -ns (the
        spec's content of its pages), the contents of the prefixes of `tokens` in `ns`."""
        seq = (-ns,) + tuple(tokens)
        j = self.index.get(seq)
        if j is None:
            self.seqs.append(seq)
            j = self.index[seq] = len(self.seqs)
            for k, c in enumerate(content.prefix_content_in(ns, tokens), start=2):
                self.at.setdefault(c, (j, k))
        return j

    def ref(self, tokens: tuple[int, ...]) -> str:
        """The arrival's token sequence itself."""
        j = self.index.get(tokens)
        if j is None:
            return ints(tokens)
        self.used.add(j)
        return f"Tok[{j}]"

    def where(self, c: int) -> tuple[int, int]:
        try:
            j, k = self.at[c]
        except KeyError:
            raise MappingError(f"content {c:#x} is not the identity of any prefix of the log's arrivals") from None
        self.used.add(j)
        return j, k

    def content(self, c: int | None) -> str:
        """A page content (or page hash): the prefix whose identity it is, `<<>>` for none."""
        if c is None:
            return "<<>>"
        j, k = self.where(c)
        return f"Cnt({j}, {k})"

    def hashes(self, cs: tuple[int, ...]) -> str:
        """A sequence of page hashes: runs of consecutive prefixes of one sequence as
        `Pre(j, k, n)` (the prefixes of Tok[j] of lengths k .. k+n-1)."""
        if not cs:
            return "<<>>"
        pieces: list[str] = []
        run: list[int] = []  # j, k0, n

        def flush() -> None:
            if run:
                j, k0, n = run
                pieces.append(f"<<Cnt({j}, {k0})>>" if n == 1 else f"Pre({j}, {k0}, {n})")

        for c in cs:
            j, k = self.where(c)
            if run and run[0] == j and run[1] + run[2] == k:
                run[2] += 1
            else:
                flush()
                run = [j, k, 1]
        flush()
        return pieces[0] if len(pieces) == 1 else "(" + " \\o ".join(pieces) + ")"

    def prefix_of(self, c: int) -> tuple[int, ...] | None:
        """The prefix whose identity is `c`, if it is a prefix of an arrival."""
        jk = self.at.get(c)
        return None if jk is None else self.seqs[jk[0] - 1][: jk[1]]

    def slice(self, last: int, symbols: tuple[int, ...]) -> str:
        """`symbols`, which end the prefix whose identity is `last`, as a slice of the
        sequence that holds that prefix (checked to be these symbols)."""
        if not symbols:
            return "<<>>"
        j, k = self.at.get(last, (0, 0))
        n = len(symbols)
        if j and k >= n and self.seqs[j - 1][k - n : k] == symbols:
            self.used.add(j)
            return f"SubSeq(Tok[{j}], {k - n + 1}, {k})"
        return ints(symbols)

    def tokens_of(self, tokens: tuple[int, ...]) -> str:
        """A token sequence that is a prefix or a suffix slice of an arrival's (a
        candidate's or a reload's tokens), as a slice when one is found."""
        if tokens in self.index:
            return self.ref(tokens)
        return ints(tokens)

    def fill(self, items: list[tuple[int, int | None]], lanes: int = 1) -> str:
        """Page contents of `(page, content)` pairs, for `Fill`: `<<runs, poisoned
        pages>>`, a run `<<first page, stride, n, j, k, k stride>>` holding the prefixes
        of Tok[j] of lengths k, k + k stride, ... The pages are taken lane by lane (page
        mod `lanes`), where consecutive positions of a run of pages usually are."""
        pts: list[tuple[int, int, int]] = []
        poisoned: list[int] = []
        for p, c in sorted(items, key=lambda pc: (pc[0] % lanes, pc[0])):
            if c is None:
                poisoned.append(p)
            else:
                j, k = self.where(c)
                pts.append((p, j, k))
        runs: list[str] = []
        i, n = 0, len(pts)
        while i < n:
            p0, j0, k0 = pts[i]
            m = 1
            if i + 1 < n and pts[i + 1][1] == j0:
                s, t = pts[i + 1][0] - p0, pts[i + 1][2] - k0
                if s > 0:
                    m = 2
                    while i + m < n and pts[i + m][1] == j0 and pts[i + m][0] - pts[i + m - 1][0] == s and pts[i + m][2] - pts[i + m - 1][2] == t:
                        m += 1
            if m == 1:
                s, t = 1, 0
            runs.append(f"<<{p0}, {s}, {m}, {j0}, {k0}, {t}>>")
            i += m
        return "<<<<" + ", ".join(runs) + f">>, {intset(poisoned)}>>"

    def module_text(self, used: set[int] | None = None) -> str:
        """`Tok`: the sequences of `used` (default: those used since `used` was reset)."""
        used = self.used if used is None else used
        if not used:
            return "<<>>"
        return "(" + " @@ ".join(f"{j} :> {ints(self.seqs[j - 1])}" for j in sorted(used)) + ")"
