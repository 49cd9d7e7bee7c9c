"""Source context: only files under the configured log folders are read, and only a bounded part."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from faultlens.reports.source_context import (
    NO_ROOTS_MESSAGE,
    OUTSIDE_MESSAGE,
    Status,
    allowed_path,
    read_context,
    resolve_roots,
    root_of,
)

LINES = [f"line {i} NVRM: Xid 79 on gpu00{i % 8}" for i in range(1, 31)]


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    """``logs/`` (the root) with a log file, ``logs2/`` and ``secret/`` beside it."""
    logs, logs2, secret = tmp_path / "logs", tmp_path / "logs2", tmp_path / "secret"
    for d in (logs, logs2, secret):
        d.mkdir()
    (logs / "node1").mkdir()
    kern = logs / "node1" / "kern.log"
    kern.write_text("\n".join(LINES) + "\n")
    (logs2 / "kern.log").write_text("in logs2\n")
    (secret / "passwd").write_text("root:x:0:0\n")
    return {"base": tmp_path, "logs": logs, "logs2": logs2, "secret": secret, "kern": kern}


def _roots(tree: dict[str, Path]) -> tuple[Path, ...]:
    return resolve_roots([tree["logs"]])


def test_normal_file_returns_the_lines_around(tree: dict[str, Path]) -> None:
    ctx = read_context(str(tree["kern"]), 12, _roots(tree))
    assert ctx.status is Status.OK and ctx.target == 12
    assert [ln.number for ln in ctx.lines] == list(range(7, 18))
    assert [ln.text for ln in ctx.lines] == LINES[6:17]
    assert ctx.lines[5].text == "line 12 NVRM: Xid 79 on gpu004"


def test_window_is_clipped_at_both_ends(tree: dict[str, Path]) -> None:
    head = read_context(tree["kern"], 2, _roots(tree))
    assert [ln.number for ln in head.lines] == [1, 2, 3, 4, 5, 6, 7]
    tail = read_context(tree["kern"], 30, _roots(tree))
    assert [ln.text for ln in tail.lines] == LINES[24:30]
    gone = read_context(tree["kern"], 31, _roots(tree))
    assert gone.status is Status.NO_LINE and not gone.lines


def test_traversal_out_of_the_root_is_refused(tree: dict[str, Path]) -> None:
    sneaky = f"{tree['logs']}/node1/../../secret/passwd"
    ctx = read_context(sneaky, 1, _roots(tree))
    assert ctx.status is Status.OUTSIDE and ctx.message == OUTSIDE_MESSAGE and not ctx.lines
    assert read_context("/var/log/../../etc/passwd", 1, _roots(tree)).status is Status.OUTSIDE


def test_absolute_path_outside_is_refused_without_saying_whether_it_exists(
    tree: dict[str, Path],
) -> None:
    there = read_context(tree["secret"] / "passwd", 1, _roots(tree))
    absent = read_context(tree["secret"] / "nothing-here", 1, _roots(tree))
    assert there.status is absent.status is Status.OUTSIDE
    assert there.message == absent.message
    assert read_context("/etc/passwd", 1, _roots(tree)).status is Status.OUTSIDE


def test_root_prefix_is_not_a_parent(tree: dict[str, Path]) -> None:
    assert str(tree["logs2"]).startswith(str(tree["logs"]))
    ctx = read_context(tree["logs2"] / "kern.log", 1, _roots(tree))
    assert ctx.status is Status.OUTSIDE and not ctx.lines


def test_symlink_inside_the_root_pointing_outside_is_refused(tree: dict[str, Path]) -> None:
    link = tree["logs"] / "node1" / "innocent.log"
    link.symlink_to(tree["secret"] / "passwd")
    assert read_context(link, 1, _roots(tree)).status is Status.OUTSIDE
    dir_link = tree["logs"] / "elsewhere"
    dir_link.symlink_to(tree["secret"], target_is_directory=True)
    assert read_context(dir_link / "passwd", 1, _roots(tree)).status is Status.OUTSIDE


def test_symlink_inside_the_root_pointing_inside_is_read(tree: dict[str, Path]) -> None:
    link = tree["logs"] / "current.log"
    link.symlink_to(tree["kern"])
    ctx = read_context(link, 1, _roots(tree))
    assert ctx.status is Status.OK and ctx.lines[0].text == LINES[0]


def test_a_symlinked_root_admits_its_target(tree: dict[str, Path]) -> None:
    alias = tree["base"] / "alias"
    alias.symlink_to(tree["logs"], target_is_directory=True)
    roots = resolve_roots([alias])
    assert roots == (tree["logs"].resolve(),)
    assert read_context(tree["kern"], 3, roots).lines[0].text == LINES[0]


def test_no_roots_says_how_to_configure(tree: dict[str, Path]) -> None:
    ctx = read_context(tree["kern"], 3, ())
    assert ctx.status is Status.NO_ROOTS and ctx.message == NO_ROOTS_MESSAGE
    assert "--logs" in ctx.message and not ctx.lines


def test_missing_file_and_missing_line(tree: dict[str, Path]) -> None:
    assert read_context(tree["logs"] / "gone.log", 1, _roots(tree)).status is Status.NOT_FOUND
    assert read_context(tree["kern"], None, _roots(tree)).status is Status.NO_LINE
    assert read_context(None, 3, _roots(tree)).status is Status.NO_LINE


def test_fifo_and_directory_are_not_read(tree: dict[str, Path]) -> None:
    fifo = tree["logs"] / "pipe"
    os.mkfifo(fifo)
    assert read_context(fifo, 1, _roots(tree)).status is Status.NOT_FOUND  # no hang
    assert read_context(tree["logs"] / "node1", 1, _roots(tree)).status is Status.NOT_FOUND


def test_long_lines_are_cut_and_the_scan_is_bounded(tree: dict[str, Path]) -> None:
    big = tree["logs"] / "big.log"
    long_line = b"A" * (3 * 1024 * 1024)
    big.write_bytes(b"first\n" + long_line + b"\nthird\r\n<script>alert(1)</script>\n")
    ctx = read_context(big, 2, _roots(tree), max_line_bytes=100)
    assert [ln.number for ln in ctx.lines] == [1, 2, 3, 4]
    assert ctx.lines[1].text == "A" * 100 and ctx.lines[1].cut_bytes == len(long_line) - 100
    assert ctx.lines[2].text == "third"  # CR before LF dropped, as ingest does
    assert ctx.lines[3].text == "<script>alert(1)</script>"  # text: the caller shows it as text
    far = read_context(big, 4, _roots(tree), max_scan_bytes=1024 * 1024)
    assert far.status is Status.BEYOND_SCAN and not far.lines


def test_gzip_file_is_read_decompressed(tree: dict[str, Path]) -> None:
    gz = tree["logs"] / "kern.log.1.gz"
    gz.write_bytes(gzip.compress(("\n".join(LINES) + "\n").encode()))
    ctx = read_context(gz, 20, _roots(tree), before=1, after=1)
    assert [ln.text for ln in ctx.lines] == LINES[18:21]


def test_invalid_utf8_is_replaced(tree: dict[str, Path]) -> None:
    bad = tree["logs"] / "bad.log"
    bad.write_bytes(b"ok\nNVRM \xff\xfe Xid\n")
    assert read_context(bad, 2, _roots(tree)).lines[1].text == "NVRM \ufffd\ufffd Xid"


def test_roots_from_globs_and_files(tree: dict[str, Path]) -> None:
    assert root_of(f"{tree['logs']}/*/kern.log") == tree["logs"].resolve()
    assert root_of(tree["kern"]) == tree["kern"].resolve()
    one_file = resolve_roots([tree["kern"]])
    assert allowed_path(tree["kern"], one_file) == tree["kern"].resolve()
    assert allowed_path(tree["logs"] / "other.log", one_file) is None
    assert allowed_path("bad\x00name", _roots(tree)) is None
