"""Every file kvsm writes for a user goes through here: transition logs, HTML reports and
viewers, plots, JSON files, campaign results and cases, corpus cases.

- A path is checked before the work that produces it starts (`check_output_file`): a
  directory, a symbolic link, a FIFO, a device or a socket at the path is refused (kvsm
  replaces only regular files: an atomic rename would swap a device node or a FIFO for a
  plain file, and a link for a copy), and so is a place where no file can be made (an
  ancestor that is a file, a directory that refuses new files, such as /proc).
- A file is written atomically: to a hidden temporary file beside its destination,
  renamed into place when complete; an error or an interruption removes the temporary
  file, so it never leaves a partial file nor replaces an existing one half-way.
- A file gets the permissions a plain `open` would give it: 0666 less the umask.

Errors are `OutputError`, whose message names the destination and the reason, never the
temporary file.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

FILE_MODE = 0o666  # less the umask, as `open` does
DIR_MODE = 0o777


class OutputError(ValueError):
    """A file that cannot be written where it was asked for."""

    def __init__(self, path: str | Path, reason: str) -> None:
        super().__init__(f"{path}: cannot write here: {reason}")
        self.path, self.reason = str(path), reason


def _kind(mode: int) -> str | None:
    """What a file of this mode is, when it is not a regular file."""
    if stat.S_ISDIR(mode):
        return "is a directory"
    if stat.S_ISLNK(mode):
        return "is a symbolic link (kvsm replaces only regular files; give the link's target)"
    for test, what in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return f"is {what}, not a regular file (kvsm replaces only regular files)"
    return None if stat.S_ISREG(mode) else "is not a regular file (kvsm replaces only regular files)"


def _refuse_special(path: Path) -> None:
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):  # an ancestor that is a file: said by the caller
        return
    except OSError as e:
        raise OutputError(path, e.strerror or str(e)) from None
    why = _kind(mode)
    if why:
        raise OutputError(path, why)


def _open_new(directory: Path, prefix: str) -> tuple[int, str]:
    """A new hidden file in `directory`, mode 0666 less the umask; its fd and path."""
    for _ in range(100):
        name = os.path.join(directory, f"{prefix}{secrets.token_hex(4)}.tmp")
        try:
            return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), FILE_MODE), name
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name in {directory}")  # pragma: no cover


def _probe(named: Path, places: Iterable[Path]) -> None:
    """Make and remove a file in the first of `places` that exists (OutputError naming
    `named` when it is not a directory or takes no file): the only sure test, since root
    passes every access check and /proc refuses anyway."""
    for d in places:
        if d.exists():
            if not d.is_dir():
                raise OutputError(named, f"{d} is not a directory")
            try:
                fd, name = _open_new(d, ".kvsm-probe.")
            except OSError as e:
                raise OutputError(named, e.strerror or str(e)) from None
            os.close(fd)
            os.unlink(name)
            return


def check_output_file(path: str | Path) -> None:
    """Raise OutputError now when a file cannot be made at `path`: something that is not
    a regular file is there, an ancestor is a file, or the nearest existing directory
    does not take new files. Missing parent directories are fine (they are created)."""
    p = Path(path)
    _refuse_special(p)
    _probe(p, p.parents)


def check_output_dir(path: str | Path) -> None:
    """Raise OutputError now when files cannot be made in the directory `path`."""
    p = Path(path)
    _refuse_special_dir(p)
    _probe(p, [p, *p.parents])


def make_dirs(path: str | Path) -> None:
    """Create `path` and its missing parents (OutputError naming `path` when it cannot)."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(path, e.strerror or str(e)) from None


class AtomicFile:
    """A file written beside `path` and renamed onto it by `commit()`; `discard()` (or an
    exception in a `with` block) removes it. `file` is the open file object."""

    def __init__(self, path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> None:
        self.path = Path(path)
        check_output_file(self.path)
        directory = self.path.parent if str(self.path.parent) else Path(".")
        make_dirs(directory)
        try:
            fd, self.tmp = _open_new(directory, f".{self.path.name}.")
        except OSError as e:
            raise OutputError(self.path, e.strerror or str(e)) from None
        self.file: IO[Any] = os.fdopen(fd, mode, encoding=None if "b" in mode else encoding)

    def commit(self) -> Path:
        """Flush, sync and rename into place; an error removes the temporary file."""
        try:
            self.file.flush()
            os.fsync(self.file.fileno())  # the renamed file is whole, even after a crash
            self.file.close()
            _refuse_special(self.path)  # something else may have appeared there meanwhile
            os.replace(self.tmp, self.path)
        except OSError as e:
            self.discard()
            raise OutputError(self.path, e.strerror or str(e)) from None
        except BaseException:
            self.discard()
            raise
        return self.path

    def discard(self) -> None:
        try:
            self.file.close()
        except OSError:
            pass
        try:
            os.unlink(self.tmp)
        except FileNotFoundError:
            pass

    def __enter__(self) -> IO[Any]:
        return self.file

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.discard()


def write_atomic(path: str | Path, data: str | bytes) -> Path:
    """Write `data` to `path` atomically (see the module's docstring); returns `path`."""
    with AtomicFile(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)
    return Path(path)


@contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """A directory filled under a hidden temporary name beside `path` and renamed onto it
    when the block ends without an exception (replacing a directory already there, as a
    resumed campaign's case does); otherwise removed."""
    final = Path(path)
    _refuse_special_dir(final)
    make_dirs(final.parent)
    tmp = final.parent / f".{final.name}.{secrets.token_hex(4)}.tmp"
    try:
        os.mkdir(tmp, DIR_MODE)
    except OSError as e:
        raise OutputError(final, e.strerror or str(e)) from None
    try:
        yield tmp
        if final.is_dir():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise OutputError(final, e.strerror or str(e)) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _refuse_special_dir(path: Path) -> None:
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return
    if not stat.S_ISDIR(mode):
        raise OutputError(path, "is not a directory" if stat.S_ISREG(mode) else (_kind(mode) or "is not a directory"))


# ---- outputs that would replace an input, or each other -----------------------------------------


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether the paths `a` and `b` name one file: `os.path.samefile` where both exist
    (a hard link, a symbolic link, `./x` and `x`), else their resolved paths are equal
    (an output not made yet)."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        pass
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except (OSError, ValueError):  # pragma: no cover - a path realpath cannot take
        return False


Named = Iterable[tuple[str, "str | Path | None"]]


def check_distinct(outputs: Named, inputs: Named = ()) -> None:
    """Raise OutputError, before any work, when an output would replace an input or
    another output: `outputs` and `inputs` are (what names it, path) pairs, such as
    ("--report", path) or ("-w/--workload", path); a None path is skipped. The error
    names the output, its path and the one it collides with."""
    outs = [(label, Path(p)) for label, p in outputs if p is not None]
    ins = [(label, Path(p)) for label, p in inputs if p is not None]
    for i, (label, path) in enumerate(outs):
        for in_label, in_path in ins:
            if same_file(path, in_path):
                raise OutputError(
                    f"{label} {path}",
                    f"it is the input {in_label} {in_path}, which would be replaced; give the output another path",
                )
        for other_label, other in outs[:i]:
            if same_file(path, other):
                raise OutputError(
                    f"{label} {path}",
                    f"{other_label} {other} writes the same file; give each output a path of its own",
                )


def write_csv_rows(rows: list[dict[str, Any]], path: Path) -> Path:
    """`rows` as a CSV file written atomically, the columns the union of the rows' names
    in the order they first appear (a name a row has not: an empty cell)."""
    import csv
    import io

    columns = list(dict.fromkeys(k for r in rows for k in r))
    buf = io.StringIO()
    w = csv.DictWriter(buf, columns, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    write_atomic(path, buf.getvalue().encode())
    return path
