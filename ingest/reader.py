"""Reading raw log files as chunks of lines, fast and without losing any.

Lines are split on ``\\n`` only (a bare ``\\r`` from a progress bar stays inside its line), invalid
UTF-8 is replaced rather than dropped, and ``.gz`` files (detected by magic, not name) are
decompressed on the fly. Chunks are cut on line boundaries and handed out as a polars ``String``
series, so parsers run vectorized expressions over them; empty lines come back as null.

polars' CSV reader is used as the line splitter (one column, a separator byte that never occurs,
no quoting, lossy UTF-8): it splits about 1 GB/s on this machine, 10x faster than ``str.split``.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import polars as pl

from ingest.errors import InputError

CHUNK_BYTES = 32 * 1024 * 1024
HEAD_BYTES = 4096  # bytes hashed into a file's fingerprint
MAX_LINE_BYTES = 1024 * 1024  # longer lines are quarantined, not parsed
GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class Chunk:
    lines: pl.Series  # String; null for empty lines
    first_line: int  # 1-based number of lines[0] in the file
    end_byte: int  # offset just past this chunk in the (decompressed) stream


@dataclass(frozen=True)
class FileHead:
    fingerprint: str
    head_len: int
    size: int  # raw file size in bytes
    gzipped: bool


def file_head(path: str | Path) -> FileHead:
    """Fingerprint of a file's first bytes, its size, and whether it is gzip-compressed."""
    p = Path(path)
    try:
        size = p.stat().st_size
        with p.open("rb") as f:
            head = f.read(HEAD_BYTES)
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror or e}") from e
    return FileHead(
        fingerprint=hashlib.sha256(head).hexdigest(),
        head_len=len(head),
        size=size,
        gzipped=head[:2] == GZIP_MAGIC,
    )


def prefix_fingerprint(path: str | Path, head_len: int) -> str:
    """sha256 of the first ``head_len`` bytes of ``path`` (to recognize a grown file)."""
    with Path(path).open("rb") as f:
        return hashlib.sha256(f.read(head_len)).hexdigest()


def _open_stream(path: str | Path, gzipped: bool) -> BinaryIO:
    try:
        raw = Path(path).open("rb")
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror or e}") from e
    return gzip.GzipFile(fileobj=raw, mode="rb") if gzipped else raw  # type: ignore[return-value]


def looks_binary(sample: bytes) -> bool:
    """True for content that is not a text log (many NULs or control bytes)."""
    if not sample:
        return False
    nul = sample.count(b"\x00")
    if nul > len(sample) // 100:
        return True
    ctrl = sum(sample.count(bytes([c])) for c in range(0, 32) if c not in (9, 10, 12, 13, 27))
    return ctrl > len(sample) // 10


def read_head_text(path: str | Path, gzipped: bool, max_bytes: int = 65536) -> str:
    """The first ``max_bytes`` of the (decompressed) file as text, for sniffing."""
    try:
        with _open_stream(path, gzipped) as f:
            data = f.read(max_bytes)
    except (OSError, EOFError, zlib.error) as e:
        raise InputError(f"cannot read {path}: {e}") from e
    if looks_binary(data[:8192]):
        raise InputError(f"{path} looks like a binary file, not a text log")
    return data.decode("utf-8", "replace")


def split_lines(block: bytes) -> pl.Series:
    """Split a block of bytes ending in ``\\n`` (or at EOF) into a String series of lines."""
    if not block:
        return pl.Series("line", [], dtype=pl.String)
    frame = pl.read_csv(
        io.BytesIO(block),
        has_header=False,
        separator="\x01",
        quote_char=None,
        schema={"line": pl.String},
        encoding="utf8-lossy",
        truncate_ragged_lines=True,
    )
    lines = frame.get_column("line")
    # The reader cuts a line at a \x01 byte; those rare lines are re-split by hand so that
    # nothing is lost. The count of \n is the truth for the number of lines.
    expected = block.count(b"\n") + (0 if block.endswith(b"\n") else 1)
    if lines.len() != expected or b"\x01" in block:
        text = block.decode("utf-8", "replace")
        parts = text.split("\n")
        if text.endswith("\n"):
            parts.pop()
        lines = pl.Series("line", [p.removesuffix("\r") or None for p in parts], dtype=pl.String)
    return lines


def iter_chunks(
    path: str | Path,
    *,
    gzipped: bool = False,
    start_byte: int = 0,
    start_line: int = 1,
    chunk_bytes: int = CHUNK_BYTES,
) -> Iterator[Chunk]:
    """Yield the lines of ``path`` from ``start_byte`` on, in chunks cut at line ends.

    Raises ``InputError`` for an unreadable file or a truncated / corrupt gzip stream.
    """
    line_no = start_line
    offset = start_byte
    carry = b""
    try:
        with _open_stream(path, gzipped) as f:
            if start_byte:
                if gzipped:
                    _skip(f, start_byte)
                else:
                    f.seek(start_byte)
            while True:
                block = f.read(chunk_bytes)
                if not block:
                    break
                block = carry + block
                cut = block.rfind(b"\n")
                if cut < 0:
                    carry = block
                    continue
                carry = block[cut + 1 :]
                body = block[: cut + 1]
                lines = split_lines(body)
                offset += len(body)
                yield Chunk(lines, line_no, offset)
                line_no += lines.len()
            if carry:
                lines = split_lines(carry)
                offset += len(carry)
                yield Chunk(lines, line_no, offset)
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise InputError(f"{path}: truncated or corrupt gzip stream ({e})") from e
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror or e}") from e


def _skip(f: BinaryIO, n: int) -> None:
    while n > 0:
        got = f.read(min(n, CHUNK_BYTES))
        if not got:
            break
        n -= len(got)
