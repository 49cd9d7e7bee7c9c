"""The lines around an event's (or a quarantined line's) source line, read from the log on disk.

Only files under the configured log folders are read. A path is allowed when its fully resolved
real path (``..`` and every symlink resolved) lies inside one of the resolved roots, compared by
path components (a root ``/logs`` does not admit ``/logs2/x``). The check happens before anything
is learnt about the file, so a refused path says "outside the configured log folders" whether it
exists or not. The file is then opened without following a final symlink, without blocking (a FIFO
never hangs the reader), must be a regular file, and the descriptor's own path (``/proc/self/fd``)
is checked again against the roots, so a link swapped in between the check and the open is caught.

Reading is bounded: at most ``max_scan_bytes`` of the file are scanned to reach the line (lines
are split on ``\\n`` and numbered from 1, as ``ingest.reader`` numbers them; ``.gz`` files are
recognized by their magic bytes and decompressed), and each line shown keeps at most
``max_line_bytes`` (10 MB log lines exist). Content is returned as text for the caller to show as
text, never as markup.
"""

from __future__ import annotations

import gzip
import logging
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import BinaryIO

log = logging.getLogger(__name__)

GZIP_MAGIC = b"\x1f\x8b"
READ_BYTES = 1024 * 1024
MAX_SCAN_BYTES = 256 * 1024 * 1024  # scanned to reach a line (bounded time and I/O)
MAX_LINE_BYTES = 4096  # kept of each line shown
BEFORE, AFTER = 5, 5
GLOB_CHARS = frozenset("*?[")
ROOTS_ENV = "FAULTLENS_LOG_ROOTS"  # how ``faultlens dashboard`` hands its roots to the app (JSON)


class Status(StrEnum):
    OK = "ok"
    NO_ROOTS = "no_roots"  # no log folder configured: nothing is read
    OUTSIDE = "outside"  # the resolved path is outside every configured folder
    NOT_FOUND = "not_found"  # inside a folder, but absent or not a regular file
    UNREADABLE = "unreadable"  # inside a folder, but opening or reading failed
    BEYOND_SCAN = "beyond_scan"  # the line is past the bytes we are willing to scan
    NO_LINE = "no_line"  # the file has fewer lines (it was rotated or truncated since)


@dataclass(frozen=True)
class Line:
    number: int  # 1-based
    text: str  # the line's first ``max_line_bytes`` bytes, UTF-8 decoded with replacement
    cut_bytes: int = 0  # bytes of the line not shown


@dataclass(frozen=True)
class SourceContext:
    status: Status
    message: str  # one sentence for the person looking, in every status
    target: int | None = None
    lines: list[Line] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status is Status.OK


NO_ROOTS_MESSAGE = (
    "No log folders are configured, so source lines are not read from disk. Start the dashboard "
    "with `faultlens dashboard --logs DIR` (repeatable) or `--config faultlens.toml` (its "
    "[ingest] paths)."
)
OUTSIDE_MESSAGE = "This file is outside the configured log folders: it is not read."


def root_of(entry: str | Path) -> Path:
    """The folder (or file) a configured path admits: a glob admits its fixed leading part
    (``/var/log/nodes/*/kern.log`` -> ``/var/log/nodes``)."""
    parts = Path(entry).expanduser().parts
    fixed: list[str] = []
    for part in parts:
        if GLOB_CHARS & set(part):
            break
        fixed.append(part)
    if not fixed:
        return Path(os.path.realpath("."))
    return Path(os.path.realpath(Path(*fixed)))


def resolve_roots(entries: Iterable[str | Path]) -> tuple[Path, ...]:
    """Resolved roots of configured paths (folders, files or globs), without duplicates."""
    seen: dict[Path, None] = {}
    for entry in entries:
        if str(entry).strip():
            seen.setdefault(root_of(str(entry).strip()), None)
    return tuple(seen)


def allowed_path(path: str | Path, roots: Iterable[Path]) -> Path | None:
    """The real path of ``path`` if it lies inside one of ``roots`` (already resolved), else
    None. Nothing about the file is learnt here beyond where its name resolves to."""
    if not str(path) or "\x00" in str(path):
        return None
    real = Path(os.path.realpath(path))
    for root in roots:
        if real == root or real.is_relative_to(root):
            return real
    return None


def read_context(
    path: str | Path | None,
    line: int | None,
    roots: Iterable[Path],
    *,
    before: int = BEFORE,
    after: int = AFTER,
    max_scan_bytes: int = MAX_SCAN_BYTES,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> SourceContext:
    """Lines ``line - before`` .. ``line + after`` of ``path``, if the configured ``roots``
    (resolved, see ``resolve_roots``) admit it."""
    roots = tuple(roots)
    if not roots:
        return SourceContext(Status.NO_ROOTS, NO_ROOTS_MESSAGE, line)
    if path is None or line is None or int(line) < 1:
        return SourceContext(Status.NO_LINE, "This row has no file and line to show.", line)
    real = allowed_path(path, roots)
    if real is None:
        return SourceContext(Status.OUTSIDE, OUTSIDE_MESSAGE, line)
    target = int(line)
    try:
        fh = _open_inside(real, roots)
    except FileNotFoundError:
        return SourceContext(
            Status.NOT_FOUND, "The file is no longer there (rotated or deleted?).", target
        )
    except _Refused as e:
        return SourceContext(e.status, e.message, target)
    except OSError as e:
        log.warning("cannot open %s: %s", real, e)
        return SourceContext(Status.UNREADABLE, f"The file cannot be read: {e.strerror}.", target)
    first = max(1, target - before)
    try:
        with fh:
            lines, cut_short = _window(
                _maybe_gunzip(fh), first, target + after, max_scan_bytes, max_line_bytes
            )
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        log.warning("cannot read %s: %s", real, e)
        return SourceContext(Status.UNREADABLE, f"The file cannot be read: {e}.", target)
    if not any(ln.number == target for ln in lines):
        if cut_short:
            return SourceContext(
                Status.BEYOND_SCAN,
                f"Line {target:,} is past the first "
                f"{max_scan_bytes // (1024 * 1024):,} MB of the file: not "
                "shown.",
                target,
            )
        return SourceContext(
            Status.NO_LINE,
            f"The file has fewer than {target:,} lines now "
            "(rotated or truncated since it was ingested).",
            target,
        )
    return SourceContext(
        Status.OK, f"{real} lines {lines[0].number:,}-{lines[-1].number:,}", target, lines
    )


class _Refused(Exception):
    def __init__(self, status: Status, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def _open_inside(real: Path, roots: tuple[Path, ...]) -> BinaryIO:
    """Open ``real`` for reading: no final symlink, no blocking, regular files only, and the
    opened descriptor itself still inside a root."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(real, flags)
    except OSError as e:
        if isinstance(e, FileNotFoundError):
            raise
        if real.is_symlink():  # swapped for a link after the check
            raise _Refused(Status.OUTSIDE, OUTSIDE_MESSAGE) from e
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _Refused(Status.NOT_FOUND, "This path is not a regular file: not read.")
        proc = Path(f"/proc/self/fd/{fd}")
        if proc.exists() and allowed_path(os.readlink(proc), roots) is None:
            raise _Refused(Status.OUTSIDE, OUTSIDE_MESSAGE)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise


def _maybe_gunzip(fh: BinaryIO) -> BinaryIO:
    """``fh`` itself, or its decompressed stream when it starts with the gzip magic."""
    head = fh.read(2)
    fh.seek(0)
    if head == GZIP_MAGIC:
        return gzip.GzipFile(fileobj=fh, mode="rb")  # type: ignore[return-value]
    return fh


def _window(
    fh: BinaryIO, first: int, last: int, max_scan_bytes: int, max_line_bytes: int
) -> tuple[list[Line], bool]:
    """Lines ``first``..``last`` (1-based) of ``fh``, each cut to ``max_line_bytes``; and whether
    the byte budget ran out before the window was complete (the file may have more)."""
    out: list[Line] = []
    number, kept, size = 1, bytearray(), 0
    scanned = 0
    while scanned < max_scan_bytes:
        chunk = fh.read(min(READ_BYTES, max_scan_bytes - scanned))
        if not chunk:
            break
        scanned += len(chunk)
        pos = 0
        if number < first:  # skip whole lines before the window: count newlines only
            newlines = chunk.count(b"\n")
            if number + newlines < first:
                number += newlines
                continue
            while number < first:
                pos = chunk.index(b"\n", pos) + 1
                number += 1
        while pos < len(chunk):
            nl = chunk.find(b"\n", pos)
            end = nl if nl >= 0 else len(chunk)
            room = max_line_bytes - len(kept)
            if room > 0:
                kept += chunk[pos : min(end, pos + room)]
            size += end - pos
            if nl < 0:
                break
            out.append(_line(number, kept, size))
            number, kept, size = number + 1, bytearray(), 0
            pos = nl + 1
            if number > last:
                return out, False
    else:  # the budget ran out: the line being read may be incomplete, it is not shown
        return out, True
    if size and first <= number <= last:  # a last line without a newline
        out.append(_line(number, kept, size))
    return out, False


def _line(number: int, kept: bytearray, size: int) -> Line:
    data = bytes(kept)
    if data.endswith(b"\r") and size == len(data):
        data = data[:-1]
        size -= 1
    return Line(number, data.decode("utf-8", "replace"), max(size - len(data), 0))
