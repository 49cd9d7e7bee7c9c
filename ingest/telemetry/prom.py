"""Prometheus: ``query_range`` JSON exports (files) and the live pull from a server's HTTP API.

An SRE's GPU history usually lives in Prometheus, scraped from dcgm-exporter. Two ways in:

- ``prometheus_json`` parses a saved API answer (``curl .../api/v1/query_range?... > x.json``):
  ``{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {...},
  "values": [[1721000000, "41"], ...]}]}}`` (``vector`` answers too). A whole document: a
  half-written or invalid export quarantines all its lines with the JSON error, never a crash.
  Two paths: ``fast_frames`` reads the usual layouts (Prometheus' compact answer, one series per
  line as ``jq -c`` or the demo's synthetic cluster write it) with vectorized string expressions
  and polars' CSV reader (over a million points per second here), with no Python object per point;
  anything it does not fully validate goes to the reference path (``json.loads`` +
  ``parse_export``), which gives the same rows or the exact error
  (tests/ingest/telemetry/test_telemetry_fastpaths.py).
  An export of ``STREAM_MIN_BYTES`` or more is not read whole: ``parse_stream`` runs the fast
  path's checks over windows of ``WINDOW_CHARS`` cut at series boundaries (``stream_fast``), and
  any layout those checks refuse is read with ijson (yajl2 in C) a series at a time
  (``stream_results``), so peak memory stays flat whatever the file size
  (``bench/bench_prom_stream.py``); the rows are those of the whole-document read
  (tests/ingest/telemetry/test_prom_stream.py).
- ``pull`` asks the server itself: ``/api/v1/label/__name__/values`` for the ``DCGM_*`` series,
  then ``/api/v1/query_range`` per metric in time windows. Each window is written in one
  transaction together with the metric's high-water mark (table ``prom_marks``: server, metric,
  end of the last pulled window, samples so far), so an interrupted pull resumes where it stopped
  and a second pull only fetches what is new.

Series labels are dcgm-exporter's (gpu, UUID, pci_bus_id, device, Hostname, modelName, MIG's
GPU_I_ID / GPU_I_PROFILE, the workload's pod / namespace / container) plus Prometheus' own
``instance``; the node is ``Hostname``, else the instance host. A Prometheus that scraped the
exporter's pod renames the workload's labels ``exported_pod`` / ...: those win
(``common.LABEL_ALIASES``).
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, BinaryIO

import polars as pl

from faultlens.ingest.base import ChunkResult, ParseContext, Parsed, Quarantined, quarantine_frame
from faultlens.ingest.errors import InputError
from faultlens.ingest.schema import TS, Source, conform
from faultlens.ingest.store import Store
from faultlens.ingest.telemetry.common import (
    conform_samples,
    label_dicts_to_frame,
    samples_to_tables,
)

log = logging.getLogger(__name__)

MAX_POINTS = 10_000  # Prometheus refuses more than 11,000 points per series per query


def result_to_frames(result: list[dict[str, Any]], line: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A ``data.result`` list -> samples and labels frames (key = series position).

    The reference path (and the live pull): the points of each series become columns through one
    list comprehension per series, not one Python call per point.
    """
    label_sets, ts, values, counts = [], [], [], []
    for series in result:
        label_sets.append(dict(series.get("metric") or {}))
        points = series.get("values")
        if points is None:
            points = [series["value"]] if "value" in series else []
        ts.append([p[0] for p in points])
        values.append([p[1] for p in points])
        counts.append(len(points))
    samples = pl.DataFrame(
        {
            "ts_s": [float(t) for seq in ts for t in seq],
            "value": [float(v) for seq in values for v in seq],
            "key": pl.Series(range(len(counts)), dtype=pl.Int64)
            .repeat_by(pl.Series(counts, dtype=pl.UInt32))
            .explode()
            .drop_nulls()
            if counts
            else pl.Series([], dtype=pl.Int64),
        },
        schema={"ts_s": pl.Float64, "value": pl.Float64, "key": pl.Int64},
    )
    return _samples(samples, line), label_dicts_to_frame(label_sets)


def _samples(frame: pl.DataFrame, line: int) -> pl.DataFrame:
    """(ts_s Float64 Unix seconds, value, key) -> ``SAMPLE_SCHEMA`` rows of ``line``."""
    return conform_samples(
        frame.with_columns(
            ts=pl.from_epoch((pl.col("ts_s") * 1000).round().cast(pl.Int64), time_unit="ms").cast(
                TS
            ),
            line=pl.lit(line, pl.Int64),
        )
    )


# -- the fast path: the export's text split with vectorized string expressions ---------------------

_SERIES = '{"metric":'
_WS = r"[ \t\r\n]*"
_HEADER_RE = (
    rf'^{_WS}\{{{_WS}"status"{_WS}:{_WS}"success"{_WS},{_WS}"data"{_WS}:{_WS}\{{{_WS}"resultType"'
    rf'{_WS}:{_WS}"matrix"{_WS},{_WS}"result"{_WS}:{_WS}\[{_WS}$'
)
_PREFIX_RE = rf'^(\{{"metric":)?(\{{[^{{}}]*\}})({_WS},{_WS}"values"{_WS}:{_WS}\[)'
_NUM = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
_POINT = rf'\[{_NUM},"[^"\\]*"\]'
_POINTS_RE = rf"^(?:{_POINT}(?:,{_POINT})*)?$"
_END_RE = rf"(\]\}}{_WS},?{_WS})$"  # a series' end: `]}` and a comma (not after the last)
_TRAILER_RE = re.compile(rf"\]\}}({_WS}\]{_WS}\}}{_WS}\}}{_WS})$")
_WS_CHARS = " \t\r\n"


def fast_frames(lines: pl.Series, line: int) -> tuple[pl.DataFrame, pl.DataFrame] | None:
    """``result_to_frames`` of a ``matrix`` export, without building a Python object per point.

    The text is cut at each ``{"metric":`` (a literal that can only be structure: a quote inside
    a JSON string is escaped); each piece must be a label object, ``"values":[``, points that are
    exactly ``[number,"string"]`` (checked by one regex per series), ``]}`` and a comma (the last
    one: the closing brackets). Series labels (few) go through ``json.loads``; the points are
    split, exploded and cast as columns. Anything else (another layout, pretty-printed points,
    ``vector`` answers, warnings, invalid JSON) returns None: the caller then takes the
    reference path, which gives the same rows or the exact error.
    """
    pieces = _line_pieces(lines.drop_nulls())
    if pieces is None:
        text = lines.drop_nulls().str.join("\n")
        end = _TRAILER_RE.search(text.str.tail(200).item() or "")
        if end is None:
            return None
        text = text.str.head(text.str.len_chars().item() - len(end.group(1)))
        pieces = text.str.split(_SERIES, literal=True).explode()
        del text
        if pieces.len() < 2 or not pieces.slice(0, 1).str.contains(_HEADER_RE).item():
            return None
        pieces = pieces.slice(1)
    body = _series_pieces(pieces)
    del pieces
    if body is None:
        return None
    labels = _labels_frame(body.get_column("labels"))
    if labels is None:
        return None
    body = body.filter(pl.col("pts") != "").select("key", "pts")
    points = _points(body)
    del body
    if points is None:
        return None
    return _samples(points, line), labels


CSV_BATCH_CHARS = 32_000_000  # points text turned into CSV and parsed at once (bounds memory)


def _points(body: pl.DataFrame) -> pl.DataFrame | None:
    """Validated points blocks (``[t,"v"],[t,"v"]``, per series ``key``) -> ts_s, value, key.

    The blocks become CSV text (``],[`` -> newline) read by polars' CSV reader, which parses
    the numbers (quoted values included) in bulk, a batch of series at a time; None if a number
    does not parse.
    """
    schema = {"ts_s": pl.Float64, "value": pl.Float64, "key": pl.Int64}
    body = body.with_columns(
        batch=(pl.col("pts").str.len_bytes().cum_sum() // CSV_BATCH_CHARS).cast(pl.Int64)
    )
    parts = []
    for _, part in body.group_by("batch", maintain_order=True):
        blocks = part.select(
            "key",
            n=pl.col("pts").str.count_matches("],[", literal=True) + 1,
            csv=pl.col("pts")
            .str.strip_prefix("[")
            .str.strip_suffix("]")
            .str.replace_all("],[", "\n", literal=True),
        )
        data = blocks.get_column("csv").str.join("\n").cast(pl.Binary).item()
        blocks = blocks.drop("csv")
        points = pl.read_csv(
            data, has_header=False, quote_char='"', schema={"ts_s": pl.Float64, "value": pl.Float64}
        )
        del data
        keys = blocks.get_column("key").repeat_by(blocks.get_column("n")).explode()
        if points.height != keys.len() or points.null_count().sum_horizontal().item():
            return None  # a value the reference parser reads differently (never valid JSON)
        parts.append(points.with_columns(key=keys))
    return pl.concat(parts, rechunk=False) if parts else pl.DataFrame(schema=schema)


def _line_pieces(lines: pl.Series) -> pl.Series | None:
    """The series lines of an export written one series per line (header line, series lines,
    closing line), as they are: no copy of the text; None for any other layout."""
    if lines.len() < 3 or not re.match(_HEADER_RE, lines[0]):
        return None
    if not re.fullmatch(rf"{_WS}\]{_WS}\}}{_WS}\}}{_WS}", lines[-1]):
        return None
    mid = lines.slice(1, lines.len() - 2)
    return mid if mid.str.starts_with(_SERIES).all() else None


def _series_pieces(pieces: pl.Series, *, final: bool = True) -> pl.DataFrame | None:
    """Pieces ``[{"metric":]{labels},"values":[<points>]}`` + ``,`` (all but the last) -> key,
    labels (JSON text), pts (``[t,"v"],...`` checked by ``_POINTS_RE``); None if one does not
    fit."""
    last = pieces.len() - 1 if final else -1  # not final: every piece ends with its comma
    g = pl.col("p").str.extract_groups(_PREFIX_RE)
    head = pl.concat_str(
        g.struct.field("1").fill_null(""), g.struct.field("2"), g.struct.field("3")
    ).str.len_chars()
    end = pl.col("p").str.extract(_END_RE, 1)
    body = (
        pl.DataFrame({"p": pieces})
        .lazy()
        .with_row_index("key")
        .with_columns(labels=g.struct.field("2"), head=head, end=end)
        .select(  # one slice: the points between the head and the end (no copy chain)
            pl.col("key").cast(pl.Int64),
            "labels",
            pts=pl.col("p").str.slice(
                pl.col("head"),
                pl.col("p").str.len_chars() - pl.col("head") - pl.col("end").str.len_chars(),
            ),
            ok=pl.col("labels").is_not_null()
            & pl.col("end").is_not_null()
            & (pl.col("end").str.contains(",", literal=True) == (pl.col("key") != last)),
        )
        .with_columns(ok=pl.col("ok") & pl.col("pts").str.contains(_POINTS_RE))
        .collect()
    )
    if not body.get_column("ok").fill_null(False).all():
        return None
    return body.drop("ok")


def _labels_frame(texts: pl.Series) -> pl.DataFrame | None:
    """The label objects of the series (JSON text, one per series) -> labels frame; None if one
    is not a valid JSON object. Each distinct text is decoded once."""
    decoded: dict[str, Any] = {}
    for t in texts.unique().to_list():
        try:
            decoded[t] = json.loads(t)
        except (ValueError, TypeError):
            return None
        if not isinstance(decoded[t], dict):
            return None
    return label_dicts_to_frame([dict(decoded[t]) for t in texts.to_list()])


def parse_export(text: str) -> list[dict[str, Any]]:
    """The ``result`` list of a saved API answer; raises ValueError with a clear reason."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"invalid JSON (half-written export?): {e}") from e
    if not isinstance(doc, dict):
        raise ValueError("not a Prometheus API answer (top level is not an object)")
    if doc.get("status") not in (None, "success"):
        raise ValueError(f"Prometheus answered {doc.get('status')}: {doc.get('error')}")
    data = doc.get("data", doc)
    result = data.get("result") if isinstance(data, dict) else None
    if not isinstance(result, list):
        raise ValueError("no data.result list in this JSON document")
    for series in result:
        if not isinstance(series, dict) or not isinstance(series.get("metric", {}), dict):
            raise ValueError("a data.result entry is not a {metric, values} object")
        points = series.get("values", [series.get("value")] if "value" in series else [])
        for p in points:
            if not (isinstance(p, list) and len(p) == 2):
                raise ValueError(f"a sample is not a [timestamp, value] pair: {p!r:.80}")
            float(p[0])
            float(p[1])
    return result


def _fast_or_none(
    lines: pl.Series, first_line: int
) -> tuple[pl.DataFrame, pl.DataFrame, int] | None:
    """``fast_frames`` plus the accounting of the reference path (every non-empty line is
    parsed; samples carry the first one's number), or None to take the reference path."""
    present = (lines.is_not_null() & (lines != "")).fill_null(False)
    idx = present.arg_true()
    if idx.len() == 0:
        return None
    try:
        frames = fast_frames(lines.filter(present), first_line + int(idx[0]))
    except pl.exceptions.PolarsError:  # the reference path decides (and gives the reason)
        log.debug("fast JSON path failed; using the reference parser", exc_info=True)
        return None
    return None if frames is None else (*frames, idx.len())


# -- the streamed path: big exports a series at a time ---------------------------------------------

STREAM_MIN_BYTES = 8 << 20  # smaller exports are read whole (the vectorized fast path)
BATCH_POINTS = 100_000  # points turned into rows at once when streaming
# Only Prometheus' own answer layout is streamed (status first, then data.result); any other
# document is read whole, where the reference path gives the exact reason for a rejection.
_STREAM_HEAD = re.compile(
    rb'^\s*\{\s*"status"\s*:\s*"success"\s*,\s*"data"\s*:\s*\{\s*"resultType"\s*:\s*'
    rb'"(?:matrix|vector)"\s*,\s*"result"\s*:\s*\['
)


# Text cut into series and parsed at once by the vectorized stream. Each window's text is copied a
# few times on its way to rows (pieces, points CSV, samples, tables): at 4 MiB those copies were
# about 60 MiB of a 200 MB export's peak, at 1 MiB a quarter of that, at the same speed.
WINDOW_CHARS = 1 << 20


class LayoutChanged(Exception):
    """The vectorized stream met text it does not fully validate: read the file with ijson."""


def _window_tables(
    pieces: pl.Series, final: bool, line: int, ctx: ParseContext, source: Source, xid: dict
) -> dict[str, pl.DataFrame]:
    try:
        body = _series_pieces(pieces, final=final)
        labels = None if body is None else _labels_frame(body.get_column("labels"))
        points = (
            None
            if body is None or labels is None
            else _points(body.filter(pl.col("pts") != "").select("key", "pts"))
        )
    except pl.exceptions.PolarsError:  # the exact stream decides (and gives the reason)
        raise LayoutChanged from None
    if body is None or labels is None or points is None:
        raise LayoutChanged
    return samples_to_tables(_samples(points, line), labels, ctx, source=source, xid_state=xid)


def stream_fast(
    stream: BinaryIO, line: int, ctx: ParseContext, source: Source = Source.DCGM
) -> Iterator[dict[str, pl.DataFrame]]:
    """``fast_frames`` over windows of ``WINDOW_CHARS``: each window is cut after its last
    complete series (at the next ``{"metric":``), its series parsed as columns, the rest carried
    into the next window. Raises ``LayoutChanged`` where ``fast_frames`` would return None (the
    caller then streams the file with ijson, which gives the same rows or the exact error)."""
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")(errors="strict")
    carry, first, gpus, xid = "", True, [], {}
    while True:
        raw = stream.read(WINDOW_CHARS)
        try:
            text = carry + decoder.decode(raw, final=not raw)
        except UnicodeDecodeError:
            raise LayoutChanged from None
        cut = text.rfind(_SERIES) if raw else -1
        if raw and cut <= 0:
            carry = text  # no series ends in this window yet
            continue
        body, carry = (text[:cut], text[cut:]) if raw else (text, "")
        del text
        if not raw:
            end = _TRAILER_RE.search(body[-200:])
            if end is None:
                raise LayoutChanged
            body = body[: len(body) - len(end.group(1))]
        pieces = pl.Series([body]).str.split(_SERIES, literal=True).explode()
        del body
        # before the first series: the header, then (the carry starts with a series) nothing
        if (first and not re.match(_HEADER_RE, pieces[0])) or (not first and pieces[0] != ""):
            raise LayoutChanged
        pieces, first = pieces.slice(1), False
        if pieces.len() == 0:
            if not raw:
                raise LayoutChanged  # no series at all: the exact read decides
            continue
        out = _window_tables(pieces, not raw, line, ctx, source, xid)
        if out.get("gpus") is not None and out["gpus"].height:
            gpus.append(out.pop("gpus"))
        yield out
        if not raw:
            break
    if gpus:
        yield {"gpus": _merge_gpus(pl.concat(gpus, how="vertical_relaxed"))}


def streamable(head: bytes) -> bool:
    """Whether a document starting with ``head`` is a Prometheus answer that can be streamed."""
    return _STREAM_HEAD.match(head) is not None


def _checked_series(series: Any) -> list[Any]:
    """The points of one ``data.result`` entry, checked as ``parse_export`` checks them."""
    if not isinstance(series, dict) or not isinstance(series.get("metric", {}), dict):
        raise ValueError("a data.result entry is not a {metric, values} object")
    points = series.get("values", [series.get("value")] if "value" in series else [])
    if not isinstance(points, list):
        raise ValueError("a data.result entry is not a {metric, values} object")
    for p in points:
        if not (isinstance(p, list) and len(p) == 2):
            raise ValueError(f"a sample is not a [timestamp, value] pair: {p!r:.80}")
    return points


def stream_results(
    stream: BinaryIO, line: int, ctx: ParseContext, source: Source = Source.DCGM
) -> Iterator[dict[str, pl.DataFrame]]:
    """The tables of a streamed export, a batch of series at a time (the GPU inventory, merged
    over the whole document, comes last). Raises ValueError with the reason for a document the
    whole-document read rejects (invalid JSON anywhere, a malformed series or point)."""
    import ijson

    xid_state: dict = {}
    gpus: list[pl.DataFrame] = []
    batch: list[dict[str, Any]] = []
    points = 0

    def tables() -> dict[str, pl.DataFrame]:
        samples, labels = result_to_frames(batch, line)
        out = samples_to_tables(samples, labels, ctx, source=source, xid_state=xid_state)
        if out.get("gpus") is not None and out["gpus"].height:
            gpus.append(out.pop("gpus"))
        return out

    try:
        for series in ijson.items(stream, "data.result.item", use_float=True):
            points += len(_checked_series(series))
            batch.append(series)
            if points >= BATCH_POINTS:
                yield tables()
                batch, points = [], 0
    except ijson.JSONError as e:
        raise ValueError(f"invalid JSON (half-written export?): {e}") from e
    if batch:
        yield tables()
    if gpus:
        yield {"gpus": _merge_gpus(pl.concat(gpus, how="vertical_relaxed"))}


def _merge_gpus(frame: pl.DataFrame) -> pl.DataFrame:
    """The inventory rows of several batches as the whole document gives them: one row per GPU
    identity, first and last sighting over all batches."""
    keys = ["node", "gpu_index", "pci_bus_id", "uuid", "model", "driver_version", "source", "file"]
    merged = frame.group_by(keys, maintain_order=True).agg(
        pl.col("first_seen").min(), pl.col("last_seen").max()
    )
    return conform("gpus", merged.sort("node", "gpu_index", nulls_last=True, maintain_order=True))


class PrometheusJsonParser:
    name = "prometheus_json"
    source = Source.DCGM
    whole_file = True
    max_line_bytes = 1 << 30  # a one-line `curl` / REST export is one document
    stream_min_bytes = STREAM_MIN_BYTES
    rejected = "Prometheus JSON export rejected"  # the quarantine reason's start

    def streams(self, size: int, head: bytes) -> bool:
        """Whether a file of ``size`` bytes starting with ``head`` is parsed by ``parse_stream``."""
        return size >= self.stream_min_bytes and streamable(head)

    stream_restart = LayoutChanged  # raised by the vectorized stream: start again, exact=True

    def parse_stream(
        self, path: str, gzipped: bool, first_line: int, ctx: ParseContext, exact: bool = False
    ) -> Iterator[ChunkResult]:
        """Rows of the document at ``path``: the vectorized windows of ``stream_fast``, or with
        ``exact`` ijson's series (``stream_results``), which validates every value. The samples
        carry ``first_line``, the document's first non-empty line, as in the whole-document
        read. The caller accounts for the lines; ValueError rejects the document."""
        from faultlens.ingest.reader import _open_stream

        if exact:
            with _open_stream(path, gzipped) as stream:
                for tables in stream_results(stream, first_line, ctx, self.source):
                    yield ChunkResult(tables=tables)
            return
        with _open_stream(path, gzipped) as stream:
            for tables in stream_fast(stream, first_line, ctx, self.source):
                yield ChunkResult(tables=tables)

    def sniff(self, head_lines: list[str], path: str) -> float:
        text = "\n".join(head_lines[:50])[:20000]
        if text.lstrip().startswith("{") and '"resultType"' in text:
            return 0.95
        if text.lstrip().startswith("{") and '"result"' in text and '"metric"' in text:
            return 0.8
        return 0.0

    def parse_line(self, line: str, ctx: ParseContext) -> Parsed | Quarantined | None:
        if line is None or not line.strip():
            return None
        r = self.parse_chunk(pl.Series([line], dtype=pl.String), 1, ctx, None)
        if r.quarantined:
            return Quarantined(r.quarantine["reason"][0])
        return Parsed({k: v.to_dicts() for k, v in r.tables.items() if v.height})

    def new_state(self, ctx: ParseContext) -> Any:
        return None

    def parse_chunk(
        self, lines: pl.Series, first_line: int, ctx: ParseContext, state: Any
    ) -> ChunkResult:
        frames = _fast_or_none(lines, first_line)
        if frames is not None:
            samples, labels, parsed = frames
        else:
            content = [(i, t) for i, t in enumerate(lines.to_list(), start=first_line) if t]
            if not content:
                return ChunkResult()
            try:
                result = parse_export("\n".join(t for _, t in content))
            except (ValueError, TypeError, KeyError, OverflowError) as e:
                reason = f"{self.rejected}: {e}"[:500]
                nos, raws = zip(*content, strict=True)
                return ChunkResult(
                    quarantine=quarantine_frame(list(nos), list(raws), [reason] * len(nos))
                )
            samples, labels = result_to_frames(result, content[0][0])
            parsed = len(content)
        tables = samples_to_tables(samples, labels, ctx, source=self.source)
        return ChunkResult(tables=tables, parsed=parsed)

    def finish(self, ctx: ParseContext, state: Any) -> ChunkResult:
        return ChunkResult()


PARSERS = [PrometheusJsonParser()]


# -- the live pull --------------------------------------------------------------------------------


@dataclass
class PullReport:
    url: str
    metrics: list[str] = field(default_factory=list)
    windows: int = 0
    samples: int = 0
    rows: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "metrics": self.metrics,
            "windows": self.windows,
            "samples": self.samples,
            "rows": self.rows,
        }


def parse_duration(text: str) -> timedelta:
    """``30s`` / ``30m`` / ``12h`` / ``7d`` / ``2w`` -> timedelta (InputError otherwise)."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    t = text.strip().lower()
    try:
        if t and t[-1] in units:
            return timedelta(seconds=float(t[:-1]) * units[t[-1]])
        return timedelta(seconds=float(t))
    except ValueError:
        raise InputError(f"bad duration {text!r} (use e.g. 30m, 12h, 7d)") from None


def _get(session: Any, url: str, params: dict[str, Any], timeout_s: float) -> Any:
    import requests

    from faultlens.ingest.http_config import explain_status, request_error

    try:
        resp = session.get(url, params=params, timeout=timeout_s)
    except requests.RequestException as e:
        raise request_error("Prometheus", url, e) from e
    if resp.status_code in (401, 403):
        hint = explain_status(resp.status_code, getattr(session, "http_config", None))
        raise InputError(f"Prometheus {url}: HTTP {resp.status_code}, {hint}")
    try:
        doc = resp.json()
    except ValueError:
        raise InputError(f"{url}: HTTP {resp.status_code}, not a Prometheus answer") from None
    if resp.status_code != 200 or doc.get("status") != "success":
        raise InputError(f"{url}: HTTP {resp.status_code}: {doc.get('error', doc)}")
    return doc["data"]


def _epoch_s(ts: datetime) -> float:
    return ts.replace(tzinfo=UTC).timestamp()


def _pulled_from(base: str) -> str:
    """The ``file`` that ``event_summary`` files a server's pulled rows under."""
    return f"prometheus:{base}"


def pull(
    store: Store,
    url: str,
    *,
    since: timedelta,
    now: datetime,
    metrics: list[str] | None = None,
    step_s: float = 15.0,
    chunk: timedelta = timedelta(hours=6),
    node: str | None = None,
    session: Any = None,
    timeout_s: float = 30.0,
) -> PullReport:
    """Pull DCGM series from a Prometheus server into ``store`` (see the module docstring)."""
    import requests

    session = session or requests.Session()
    base = url.rstrip("/")
    if metrics is None:
        names = _get(session, f"{base}/api/v1/label/__name__/values", {}, timeout_s)
        metrics = sorted(n for n in names if n.startswith(("DCGM_FI_", "DCGM_EXP_")))
    report = PullReport(url=base, metrics=list(metrics))
    window = min(chunk.total_seconds(), step_s * MAX_POINTS)
    end_s = _epoch_s(now)
    for metric in metrics:
        mark = store.prom_mark(base, metric)
        total = 0 if mark is None else mark[1]
        start_s = _epoch_s(now - since) if mark is None else _epoch_s(mark[0]) + step_s
        start_s = math.ceil(start_s / step_s) * step_s  # aligned, so windows never overlap
        while start_s <= end_s:
            stop_s = min(start_s + window, end_s)
            stop_s = start_s + math.floor((stop_s - start_s) / step_s) * step_s
            data = _get(
                session,
                f"{base}/api/v1/query_range",
                {"query": metric, "start": start_s, "end": stop_s, "step": step_s},
                timeout_s,
            )
            key = (base, metric, total)
            n = _load_window(store, data.get("result", []), key, stop_s, now, node, report)
            total += n
            report.windows += 1
            report.samples += n
            start_s = stop_s + step_s
    return report


def _load_window(
    store: Store,
    result: list[dict[str, Any]],
    key: tuple[str, str, int],
    stop_s: float,
    now: datetime,
    node: str | None,
    report: PullReport,
) -> int:
    """One window's samples and the metric's new high-water mark, in one transaction."""
    base, metric, before = key
    path = _pulled_from(base)
    ctx = ParseContext(file=path, node=node, mtime=now)
    samples, labels = result_to_frames(result, 0)
    tables = samples_to_tables(samples, labels, ctx, source=Source.DCGM) if samples.height else {}
    until = datetime.fromtimestamp(stop_s, UTC).replace(tzinfo=None)
    with store.transaction():
        for table, frame in tables.items():
            n = store.insert_summarized(table, frame, path)
            report.rows[table] = report.rows.get(table, 0) + n
        store.record_prom_mark(base, metric, until, before + samples.height, now)
    return samples.height
