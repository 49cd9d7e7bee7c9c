"""dcgm-exporter ``/metrics`` scrapes (Prometheus text exposition) -> telemetry, gpus, Xid events.

Format (one sample per line, ``# HELP`` / ``# TYPE`` comments between families)::

    # TYPE DCGM_FI_DEV_GPU_TEMP gauge
    DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-...",pci_bus_id="00000000:19:00.0",device="nvidia0",
        modelName="NVIDIA H100 80GB HBM3",Hostname="node1",DCGM_FI_DRIVER_VERSION="535.161.08"} 41
    DCGM_FI_DEV_XID_ERRORS{gpu="0",...,err_code="79",err_msg="GPU has fallen off the bus"} 79 17...

Two paths, as everywhere in ``ingest``:

- ``parse_line`` is the reference: it hands the line to ``prometheus_client``'s own parser
  (``prometheus_client.parser.text_string_to_metric_families``), so the format is defined by the
  Prometheus project's code, not ours.
- ``parse_chunk`` is the volume path. ``prometheus_client`` parses one line at a time in Python
  (about 100k lines/s), far from the million samples per second a multi-GB scrape archive needs,
  so each line is split once with literal ``find`` / ``head`` / ``slice`` expressions in polars
  (head ``name{labels}``, then value [timestamp]) and its head is hashed. The heads repeat on every
  scrape (one per metric per GPU), so they are validated and split into labels once per file
  (``SeriesCache``, in the parser state): after the first chunk a line costs two finds, three
  slices, two hashes, two casts and an integer join. Any line this fast path does not fully
  validate (odd spacing, an escaped ``} `` inside a label value, non-ASCII before the value, ...)
  falls back to the reference parser, and what that rejects is quarantined with its reason (a
  truncated scrape's last line, for instance). tests/ingest/telemetry/test_telemetry_dcgm.py
  proves both paths give the same rows on every real scrape and on generated ones.

Samples without a timestamp get the scrape time (``ctx.options['scrape_ts']``: with an offset,
that instant; without, the site zone's wall clock, ``tz``, else UTC) or the file's mtime, and Xid
events carry ``ts_flag`` saying which.
"""

from __future__ import annotations

from typing import Any

import polars as pl
from prometheus_client.parser import text_string_to_metric_families

from faultlens.ingest.base import (
    ChunkResult,
    ParseContext,
    Parsed,
    Quarantined,
    numbered,
    quarantine_frame,
)
from faultlens.ingest.schema import TS, Source, conform
from faultlens.ingest.telemetry.common import (
    LABEL_ALIASES,
    LABEL_SCHEMA,
    LABELS,
    conform_labels,
    conform_samples,
    derive_labels,
    empty_samples,
    label_dicts_to_frame,
    samples_to_tables,
)

_NAME_RE = r"^[a-zA-Z_:][a-zA-Z0-9_:]*$"
_LABEL_BLOCK_RE = r'^(?:[ ]*[a-zA-Z_][a-zA-Z0-9_]*[ ]*=[ ]*"(?:[^"\\]|\\.)*"[ ]*,?)*[ ]*$'


def _label_re(key: str) -> str:
    return r"(?:^|,)[ ]*" + key + r'[ ]*=[ ]*"((?:[^"\\]|\\.)*)"'


def reference_samples(line: str) -> list[tuple[dict[str, Any], dict[str, str]]]:
    """(sample, labels) pairs of one exposition line via prometheus_client.

    Raises ``ValueError`` (or another parser exception) if the line is malformed.
    """
    out = []
    for family in text_string_to_metric_families(line + "\n"):
        for s in family.samples:
            ts_ms = None if s.timestamp is None else int(round(float(s.timestamp) * 1000))
            out.append(({"metric": s.name, "value": float(s.value), "ts": ts_ms}, s.labels))
    return out


def reference_frames(
    items: list[tuple[int, dict[str, Any], dict[str, str]]],
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(line, sample, labels) triples -> samples and labels frames (one series per sample,
    with negative keys so that they never meet the keys of the fast path)."""
    first_key = -len(items)
    if not items:
        return empty_samples(), conform_labels(pl.DataFrame(schema=LABEL_SCHEMA))
    samples = pl.DataFrame(
        {
            "line": [line for line, _, _ in items],
            "value": [smp["value"] for _, smp, _ in items],
            "ts": [smp["ts"] for _, smp, _ in items],
            "key": list(range(first_key, 0)),
        },
        schema={"line": pl.Int64, "value": pl.Float64, "ts": pl.Int64, "key": pl.Int64},
    ).with_columns(pl.from_epoch(pl.col("ts"), time_unit="ms").cast(TS))
    labels = label_dicts_to_frame(
        [lab for _, _, lab in items],
        first_key,
        metrics=[smp["metric"] for _, smp, _ in items],
    )
    return conform_samples(samples), labels


def _is_noise(line: str) -> bool:
    s = line.strip()
    return not s or s.startswith("#")


class DcgmExporterParser:
    name = "dcgm_exporter"
    source = Source.DCGM
    whole_file = False

    def sniff(self, head_lines: list[str], path: str) -> float:
        lines = [ln for ln in head_lines if ln and ln.strip()]
        if not lines:
            return 0.0
        dcgm = sum(
            1
            for ln in lines
            if ln.startswith(("DCGM_FI_", "DCGM_EXP_", "# HELP DCGM_", "# TYPE DCGM_"))
        )
        if dcgm and dcgm >= len(lines) // 2:
            return 0.95
        prom = sum(1 for ln in lines if ln.startswith(("# HELP ", "# TYPE ")))
        return 0.4 if prom >= 2 and dcgm else 0.0

    def parse_line(self, line: str, ctx: ParseContext) -> Parsed | Quarantined | None:
        if line is None or _is_noise(line):
            return None
        try:
            rows = reference_samples(line)
        except Exception as e:  # prometheus_client raises ValueError, IndexError, ...
            return Quarantined(f"malformed Prometheus sample (truncated scrape?): {e}")
        if not rows:
            return None
        samples, labels = reference_frames([(0, smp, lab) for smp, lab in rows])
        tables = samples_to_tables(samples, labels, ctx, source=self.source)
        return Parsed({k: conform(k, v).to_dicts() for k, v in tables.items() if v.height})

    def new_state(self, ctx: ParseContext) -> Any:
        # "series": every series head seen in this file so far, parsed once (see SeriesCache)
        return {"xid": {}, "series": SeriesCache(ctx)}

    def parse_chunk(
        self, lines: pl.Series, first_line: int, ctx: ParseContext, state: Any
    ) -> ChunkResult:
        state = state if state is not None else self.new_state(ctx)
        samples, labels, slow = split_samples(numbered(lines, first_line), state["series"])
        items: list[tuple[int, dict[str, Any], dict[str, str]]] = []
        qlines: list[int] = []
        qraws: list[str] = []
        qreasons: list[str] = []
        for line_no, text in slow.select("line", "raw").iter_rows():
            if _is_noise(text):
                continue
            try:
                rows = reference_samples(text)
            except Exception as e:
                qlines.append(line_no)
                qraws.append(text)
                qreasons.append(f"malformed Prometheus sample (truncated scrape?): {e}")
                continue
            items.extend((line_no, smp, lab) for smp, lab in rows)
        if items:
            ref_samples, ref_labels = reference_frames(items)
            samples = pl.concat([samples, ref_samples])
            labels = pl.concat([labels, derive_labels(ref_labels, ctx)], how="vertical_relaxed")
        parsed = samples.get_column("line").n_unique() if samples.height else 0
        tables = samples_to_tables(samples, labels, ctx, source=self.source, xid_state=state["xid"])
        quarantine = quarantine_frame(qlines, qraws, qreasons) if qlines else None
        return ChunkResult(tables=tables, parsed=parsed, quarantine=quarantine)

    def finish(self, ctx: ParseContext, state: Any) -> ChunkResult:
        return ChunkResult()


# -- the vectorized split --------------------------------------------------------------------------

_SEEDS = (0, 0x5EED)  # two independent 64-bit hashes of a series head: key and check


def _head_hashes(head: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """(key, check) of a series head: two independent hashes (a module function so that tests
    can force collisions)."""
    key, check = (head.hash(seed).reinterpret(signed=True) for seed in _SEEDS)
    return key, check


def _split_rows(frame: pl.DataFrame) -> pl.DataFrame:
    """Lines (line, raw) -> line, raw, he (end of the series head), key, check, value, ts_ms, ok.

    A sample line is ``head value [timestamp]``; the head ends at the first ``} `` (or, for a
    metric without labels, at the first space). Only literal finds, slices, two hashes of the
    head and two casts run on every line.
    """
    raw = pl.col("raw")
    he = pl.coalesce(raw.str.find("} ", literal=True) + 1, raw.str.find(" ", literal=True))
    key, check = _head_hashes(raw.str.head(pl.col("he")))
    sp = pl.col("tail").str.find(" ", literal=True)
    return (
        frame.lazy()
        .with_columns(he=he)
        .with_columns(key=key, check=check, tail=raw.str.slice(pl.col("he") + 1))
        .with_columns(
            value=pl.coalesce(pl.col("tail").str.head(sp), pl.col("tail")).cast(
                pl.Float64, strict=False
            ),
            ts_s=pl.col("tail").str.slice(sp + 1),
        )
        .with_columns(ts_ms=pl.col("ts_s").cast(pl.Int64, strict=False))
        .select(
            "line",
            "raw",
            "he",
            "key",
            "check",
            "value",
            "ts_ms",
            ok=(
                pl.col("value").is_not_null()
                & (pl.col("ts_s").is_null() | pl.col("ts_ms").is_not_null())
            ).fill_null(False),
        )
        .collect()
    )


def split_samples(
    frame: pl.DataFrame, cache: SeriesCache
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Vectorized split of sample lines (columns line, raw).

    Returns (samples, series, left over lines): the samples with a ``key`` into the series
    (one per distinct head ``name{labels}``, parsed once per file in ``cache``), and the lines
    the fast path did not validate (comments included; the caller sorts them out).
    """
    rows = _split_rows(frame)
    series = cache.resolve(rows)
    if series is None:  # a hash collision: key this chunk's heads by their text instead
        rows = rows.with_columns(
            key=pl.col("raw").str.head(pl.col("he")).rank("dense").cast(pl.Int64)
        )
        heads = (
            rows.filter(pl.col("key").is_not_null())
            .unique("key", keep="any")
            .select("key", head=pl.col("raw").str.head(pl.col("he")))
        )
        series = derive_labels(
            _parse_heads(heads).filter(pl.col("ok")).drop("head", "ok"), cache.ctx
        )
    ok = pl.col("ok") & pl.col("key").is_in(series.get_column("key").implode()).fill_null(False)
    rows = rows.with_columns(ok=ok)
    samples = rows.filter(pl.col("ok")).select(
        "line",
        "value",
        pl.from_epoch(pl.col("ts_ms"), time_unit="ms").cast(TS).alias("ts"),
        "key",
    )
    slow = rows.filter(~pl.col("ok") & pl.col("raw").is_not_null()).select("line", "raw")
    slow = slow.filter(~pl.col("raw").str.starts_with("#"))  # comments: noise
    return samples, series, slow


class SeriesCache:
    """The series heads of one file, each parsed once: a scrape repeats the same few thousand
    heads (one per metric per GPU) on every scrape, so after the first chunk a chunk only looks
    its keys up here.

    A head is known by two independent 64-bit hashes (``key`` and ``check``); two heads with the
    same key but a different check are a collision, and the chunk falls back to keying by text.
    """

    def __init__(self, ctx: ParseContext) -> None:
        self.ctx = ctx
        self.known = pl.DataFrame(schema={"key": pl.Int64, "check": pl.Int64, "ok": pl.Boolean})
        self.good: pl.DataFrame | None = None  # the valid series, derived (derive_labels)

    def resolve(self, rows: pl.DataFrame) -> pl.DataFrame | None:
        """The valid series (derived labels) for ``rows``' keys; None on a hash collision."""
        pairs = rows.group_by("key").agg(check=pl.col("check").min(), hi=pl.col("check").max())
        if pairs.filter(pl.col("check") != pl.col("hi")).height:
            return None
        seen = pairs.join(self.known.select("key", known=pl.col("check")), on="key", how="left")
        if seen.filter(pl.col("known").is_not_null() & (pl.col("known") != pl.col("check"))).height:
            return None
        new = seen.filter(pl.col("known").is_null()).get_column("key")
        if new.len():
            heads = rows.filter(pl.col("key").is_in(new.implode())).unique("key", keep="any")
            heads = _parse_heads(
                heads.select("key", "check", head=pl.col("raw").str.head(pl.col("he")))
            )
            self.known = pl.concat([self.known, heads.select("key", "check", "ok")])
            good = derive_labels(heads.filter(pl.col("ok")).drop("head", "ok", "check"), self.ctx)
            self.good = good if self.good is None else pl.concat([self.good, good])
        if self.good is None:
            return derive_labels(conform_labels(pl.DataFrame(schema=LABEL_SCHEMA)), self.ctx)
        return self.good


def _parse_heads(heads: pl.DataFrame) -> pl.DataFrame:
    """Distinct ``name{labels}`` heads -> name (metric), validity and one column per label."""
    o = pl.col("head").str.find("{", literal=True)
    heads = heads.with_columns(
        metric=pl.when(o.is_not_null()).then(pl.col("head").str.slice(0, o)).otherwise("head"),
        labels=pl.when(o.is_not_null()).then(pl.col("head").str.slice(o + 1).str.strip_suffix("}")),
    )
    lab = pl.col("labels")

    def value(key: str) -> pl.Expr:
        return (
            lab.str.extract(_label_re(key))
            .str.replace_all(r"\\\\", "\x00")
            .str.replace_all(r"\"", '"', literal=True)
            .str.replace_all(r"\n", "\n", literal=True)
            .str.replace_all("\x00", "\\", literal=True)
        )

    # each spelling read once; a label is the first of its spellings that is set
    spellings = dict.fromkeys(k for key in LABELS for k in (*LABEL_ALIASES.get(key, ()), key))
    heads = heads.with_columns(**{f"_l_{k}": value(k) for k in spellings})

    def read(k: str) -> pl.Expr:
        return pl.col(f"_l_{k}")

    exprs = {
        col: pl.coalesce(
            [pl.when(read(k) != "").then(read(k)) for k in LABEL_ALIASES.get(key, ())] + [read(key)]
        )
        for key, col in LABELS.items()
    }
    ok = pl.col("metric").str.contains(_NAME_RE) & (
        lab.is_null() | lab.str.contains(_LABEL_BLOCK_RE)
    )
    heads = heads.with_columns(ok=ok.fill_null(False), **exprs)
    return heads.select(
        *[
            c
            for c in heads.columns
            if c not in LABEL_SCHEMA and c != "labels" and not c.startswith("_l_")
        ],
        *LABEL_SCHEMA,
    )


PARSERS = [DcgmExporterParser()]
