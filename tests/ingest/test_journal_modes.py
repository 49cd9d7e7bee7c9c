"""Every ``journalctl -o`` output mode: the Xid event with its time (UTC) and node whenever the
entry carries them, the file sniffed as a known format, and every line accounted for.

The entries are written here from the documented formats (journalctl(1) and systemd's
``logs-show.c``), one Xid message and one noise message each; the expected values are computed
from the same constants.
"""

from __future__ import annotations

import json
import struct
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from faultlens.ingest import pipeline, registry
from faultlens.ingest.base import ParseContext
from faultlens.ingest.pipeline import parse_file, plan
from faultlens.ingest.store import Store

NOW = datetime(2027, 1, 1)
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
NOISE = "Started session-4.scope - Session 4 of User ops."
HOST = "gpu-b07.cluster.example"  # the node is the host without its domain
NODE = "gpu-b07"
T0 = datetime(2026, 12, 1, 6, 11, 2, 123456)  # the Xid entry's time, UTC
T1 = T0 + timedelta(seconds=1, microseconds=500)  # the noise entry's
UP0_US = 123_456_789  # the Xid entry's boot-relative microseconds
UP0 = UP0_US / 1e6
EPOCH = datetime(1970, 1, 1)
BOOT_ID = "fedcba9876543210fedcba9876543210"
CURSOR = "s=0123456789abcdef0123456789abcdef;i=1a2b;b=" + BOOT_ID + ";m=75bcd15;t=62f5a;x=1122"


def _us(ts: datetime) -> int:
    return (ts - EPOCH) // timedelta(microseconds=1)


def _full(ts: datetime, zone: str = "UTC", precise: bool = False) -> str:
    """``%a %Y-%m-%d %H:%M:%S[.usec] %Z`` of a UTC time shown in ``zone`` (UTC here)."""
    text = ts.strftime("%a %Y-%m-%d %H:%M:%S")
    return f"{text}.{ts.microsecond:06d} {zone}" if precise else f"{text} {zone}"


def _entries() -> list[dict[str, str]]:
    """The journal fields of the two entries (kernel Xid, then a systemd noise line)."""
    common = {"__CURSOR": CURSOR, "_BOOT_ID": BOOT_ID, "_HOSTNAME": HOST, "PRIORITY": "3"}
    return [
        {
            **common,
            "__REALTIME_TIMESTAMP": str(_us(T0)),
            "__MONOTONIC_TIMESTAMP": str(UP0_US),
            "_SOURCE_MONOTONIC_TIMESTAMP": str(UP0_US),
            "_TRANSPORT": "kernel",
            "SYSLOG_IDENTIFIER": "kernel",
            "MESSAGE": XID,
        },
        {
            **common,
            "__REALTIME_TIMESTAMP": str(_us(T1)),
            "__MONOTONIC_TIMESTAMP": str(UP0_US + 1_000_500),
            "_TRANSPORT": "journal",
            "SYSLOG_IDENTIFIER": "systemd",
            "_PID": "1",
            "_SYSTEMD_UNIT": "init.scope",
            "MESSAGE": NOISE,
        },
    ]


def _text(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode()


def _export(binary: bool = False) -> bytes:
    out = b""
    for i, entry in enumerate(_entries()):
        for key, value in entry.items():
            if key == "_BOOT_ID":
                continue  # export writes the boot id once, in its header fields
            if binary and i == 0 and key == "MESSAGE":  # binary-safe: name, LE64 length, bytes
                data = ("\x1b[31m" + value).encode()
                out += b"MESSAGE\n" + struct.pack("<Q", len(data)) + data + b"\n"
            else:
                out += f"{key}={value}\n".encode()
        out += b"\n"
    return out


def _json_lines(lead: str = "", sep: str = "") -> bytes:
    return "".join(lead + json.dumps(e) + "\n" + sep for e in _entries()).encode()


def _pretty() -> bytes:
    return "".join(
        json.dumps(e, indent="\t", separators=(",", " : ")) + "\n" for e in _entries()
    ).encode()


def _verbose(zone: str = "UTC") -> bytes:
    lines = []
    for entry, ts in zip(_entries(), (T0, T1), strict=True):
        lines.append(f"{_full(ts, zone, precise=True)} [{CURSOR}]")
        lines += [f"    {k}={v}" for k, v in entry.items() if not k.startswith("__")]
    return _text(lines)


def _short(stamp: tuple[str, str], tag: tuple[str, str] = ("kernel", "systemd[1]")) -> bytes:
    return _text([f"{stamp[0]} {HOST} {tag[0]}: {XID}", f"{stamp[1]} {HOST} {tag[1]}: {NOISE}"])


def _unix(ts: datetime) -> str:
    return f"{_us(ts) // 10**6:10d}.{_us(ts) % 10**6:06d}"


def _mono(delta: bool) -> tuple[str, str]:
    up1 = UP0 + 1.0005
    if not delta:
        return f"[{UP0:12.6f}]", f"[{up1:12.6f}]"
    return f"[{UP0:12.6f}                ]", f"[{up1:12.6f} <{1.0005:12.6f} >]"


# mode -> (file content, sniffed format, the Xid event's ts, ts_flag, uptime_s and node); its
# line is ``_event_line``'s
MODES: dict[str, tuple[bytes, str, datetime | None, str | None, float | None, str]] = {
    "short-full": (_short((_full(T0), _full(T1))), "lines", T0.replace(microsecond=0), None,
                   None, NODE),
    "short-full-numeric-zone": (
        _short((_full(T0 + timedelta(hours=5, minutes=30), "+0530"), _full(T1, "+00"))),
        "lines", T0.replace(microsecond=0), None, None, NODE,
    ),
    "short-full-cet": (_short((_full(T0, "CET"), _full(T1, "CET"))), "lines", None,
                       "tz_unknown", None, NODE),
    "with-unit": (
        _short((_full(T0), _full(T1)), ("kernel", "init.scope[1]")), "lines",
        T0.replace(microsecond=0), None, None, NODE,
    ),
    "short-unix": (
        _short((_unix(T0), _unix(T1))), "lines", T0, None, None, NODE,
    ),
    "short-monotonic": (_short(_mono(False)), "lines", None, "boot_relative", UP0, NODE),
    "short-delta": (_short(_mono(True)), "lines", None, "boot_relative", UP0, NODE),
    "export": (_export(), "journal_export", T0, None, UP0, NODE),
    "export-binary": (_export(binary=True), "journal_export", T0, None, UP0, NODE),
    "json-pretty": (_pretty(), "journal_json_pretty", T0, None, UP0, NODE),
    "json-seq": (_json_lines(lead="\x1e"), "journal_json", T0, None, UP0, NODE),
    "json-sse": (_json_lines(lead="data: ", sep="\n"), "journal_json", T0, None, UP0, NODE),
    "verbose": (_verbose(), "journal_verbose", T0, None, UP0, NODE),
    "verbose-est": (_verbose("EST"), "journal_verbose", None, "boot_relative", UP0, NODE),
}  # fmt: skip


def _event_line(data: bytes) -> int:
    """The Xid entry's line: its ``MESSAGE`` field's (a record format), else the Xid line."""
    lines = data.split(b"\n")
    for marker in (b"MESSAGE", XID.encode()):
        hit = [i for i, ln in enumerate(lines, 1) if marker in ln]
        if hit:
            return hit[0]
    raise AssertionError("no Xid line")


def _line_count(data: bytes) -> int:
    return data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)


def _ingest(data: bytes, tmp: Path) -> tuple[str, str | None, list[tuple], object, int, list]:
    path = tmp / "node-journal.txt"
    path.write_bytes(data)
    with Store(tmp / "j.duckdb") as store:
        task = plan(store, str(path), base_ctx=ParseContext(file=""))
        assert not isinstance(task, pipeline.FileReport), task
        fmt, warning = pipeline.sniff_format(task)
        pf = parse_file(task)
        report = pipeline.load(store, pf, now=NOW)
        assert report.lines == _line_count(data)
        assert report.parsed + report.noise + report.quarantined == report.lines
        events = store.query(
            "SELECT line, ts, ts_flag, uptime_s, node, kind, code FROM events ORDER BY line"
        ).rows()
        quarantined = store.query("SELECT line FROM quarantine ORDER BY line")["line"].to_list()
    return fmt, warning, events, pf.partition, report.lines, quarantined


@pytest.mark.parametrize("mode", sorted(MODES))
def test_each_journalctl_mode_gives_the_event_its_time_and_node(mode: str, tmp_path: Path):
    data, want_fmt, ts, flag, up, node = MODES[mode]
    line = _event_line(data)
    fmt, warning, events, part, n, quarantined = _ingest(data, tmp_path)
    assert (fmt, warning) == (want_fmt, None)
    assert events == [(line, ts, flag, up, node, "xid", 79)]
    # every line accounted: the Xid line parsed, nothing quarantined, the rest noise
    assert part is not None
    assert part.parsed.tolist() == [line]
    assert part.quarantined.tolist() == quarantined == []
    noise = sorted(set(range(1, n + 1)) - {line})
    assert np.setdiff1d(np.arange(1, n + 1), part.parsed).tolist() == noise
    assert part.noise == len(noise)


def test_the_modes_times_are_utc() -> None:
    """The expected times themselves: the Xid entry is at T0 UTC whatever the mode shows."""
    assert datetime.fromtimestamp(_us(T0) / 1e6, UTC).replace(tzinfo=None) == T0
    assert _full(T0 + timedelta(hours=5, minutes=30), "+0530").endswith("11:41:02 +0530")


@pytest.mark.parametrize("mode", ["export", "export-binary", "verbose", "json-pretty"])
def test_a_record_cut_by_a_chunk_boundary_is_read_whole(mode: str) -> None:
    """The record parsers' chunk path cut at every line gives the events of one chunk."""
    data, fmt, *_ = MODES[mode]
    parser = registry.get(fmt)
    lines = pl.Series(data.decode("utf-8", "replace").split("\n")[:-1], dtype=pl.String)
    lines = lines.replace("", None)  # the reader's blank lines are null
    ctx = ParseContext(file="f")

    def run(cuts: list[int]) -> list[tuple]:
        state = parser.new_state(ctx)
        results = [
            parser.parse_chunk(lines.slice(a, b - a), a + 1, ctx, state)
            for a, b in zip([0, *cuts], [*cuts, lines.len()], strict=True)
        ]
        out = results[0]
        for r in [*results[1:], parser.finish(ctx, state)]:
            out = out.merge(r)
        events = out.tables["events"]
        return events.select("line", "ts", "node", "code").rows() + [tuple(out.parsed_lines)]

    whole = run([])
    assert len(whole) == 2
    for cut in range(1, lines.len()):
        assert run([cut]) == whole, cut


def test_a_broken_pretty_record_is_quarantined_at_its_message(tmp_path: Path) -> None:
    lines = _pretty().decode().split("\n")
    at = next(i for i, ln in enumerate(lines) if ln.strip().startswith('"MESSAGE"'))
    lines[at] = lines[at].replace('" : "', '" : ', 1)  # the string's opening quote lost
    _, _, events, part, n, quarantined = _ingest("\n".join(lines).encode(), tmp_path)
    assert events == []
    assert quarantined == part.quarantined.tolist() == [at + 1]
    assert part.parsed.tolist() == []


@pytest.mark.parametrize(
    ("head", "ts", "host", "flag", "up"),
    [
        ("Tue 2026-12-01 06:11:02 UTC h1 kernel: ", T0.replace(microsecond=0), "h1", None, None),
        ("Tue 2026-12-01 06:11:02 GMT h1 kernel: ", T0.replace(microsecond=0), "h1", None, None),
        ("Tue 2026-12-01 03:11:02 -03 h1 kernel: ", T0.replace(microsecond=0), "h1", None, None),
        ("Tue 2026-12-01 11:41:02 +05:30 h1 x[2]: ", T0.replace(microsecond=0), "h1", None, None),
        ("Tue 2026-12-01 07:11:02 CET h1 kernel: ", None, "h1", "tz_unknown", None),
        ("Tue 2026-12-01 01:11:02 EST h1 kernel: ", None, "h1", "tz_unknown", None),
        ("Tue 2026-12-01 06:11:02 UTC kernel: ", T0.replace(microsecond=0), None, None, None),
        (f"{_unix(T0)} h1 kernel: ", T0, "h1", None, None),
        ("[  123.456789] h1 kernel: ", None, "h1", "boot_relative", 123.456789),
        ("[  123.456789] kernel: ", None, None, "boot_relative", 123.456789),
        ("[  123.456789 <    0.000001*>] h1 x[9]: ", None, "h1", "boot_relative", 123.456789),
        # a dmesg message whose first words look like a host and a tag stays a message
        ("[  123.456789] EDAC MC0: ", None, None, None, None),
    ],
)
def test_the_prefix_library_reads_the_line_oriented_modes(head, ts, host, flag, up) -> None:
    from faultlens.ingest.prefixes import prefix_frame

    out = prefix_frame(pl.DataFrame({"raw": [head + XID]}), ParseContext(file="f"))
    row = out.select("p_ts", "p_host", "p_flag", "p_up", "body").row(0)
    assert row == (ts, host, flag, up, XID if ts or flag else head + XID)
