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
  so the chunk is split with literal ``find`` / ``slice`` expressions in polars (name ``{`` labels
  ``} `` value [timestamp]); the label blocks, which repeat on every scrape, are validated and
  split once per distinct block. Any line this fast path does not fully validate (odd spacing, an
  escaped ``} `` inside a label value, ...) falls back to the reference parser, and what that
  rejects is quarantined with its reason (a truncated scrape's last line, for instance).
  tests/ingest/test_telemetry_dcgm.py proves both paths give the same rows on every real scrape
  and on generated ones.

Samples without a timestamp get the scrape time (``ctx.options['scrape_ts']``) or the file's
mtime, and Xid events carry ``ts_flag`` saying which.
"""

from __future__ import annotations

from typing import Any

import polars as pl
from prometheus_client.parser import text_string_to_metric_families

from ingest.base import ChunkResult, ParseContext, Parsed, Quarantined, numbered, quarantine_frame
from ingest.schema import TS, Source
from ingest.telemetry import (
    LABEL_SCHEMA,
    LABELS,
    conform_labels,
    conform_samples,
    empty_samples,
    label_dicts_to_frame,
    samples_to_tables,
)

_NAME_RE = r"^[a-zA-Z_:][a-zA-Z0-9_:]*$"
_LABEL_BLOCK_RE = r'^(?:[ ]*[a-zA-Z_][a-zA-Z0-9_]*[ ]*=[ ]*"(?:[^"\\]|\\.)*"[ ]*,?)*[ ]*$'


def _label_re(key: str) -> str:
    return r'(?:^|,)[ ]*' + key + r'[ ]*=[ ]*"((?:[^"\\]|\\.)*)"'


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
    items: list[tuple[int, dict[str, Any], dict[str, str]]]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(line, sample, labels) triples -> samples and labels frames (one label set per sample,
    with negative keys so that they never meet the hashed keys of the fast path)."""
    first_key = -len(items)
    if not items:
        return empty_samples(), conform_labels(pl.DataFrame(schema=LABEL_SCHEMA))
    samples = pl.DataFrame(
        [{**sample, "line": line, "key": first_key + i} for i, (line, sample, _) in
         enumerate(items)],
        infer_schema_length=None,
    ).with_columns(pl.from_epoch(pl.col("ts").cast(pl.Int64), time_unit="ms").cast(TS))
    labels = label_dicts_to_frame([lab for _, _, lab in items], first_key)
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
        dcgm = sum(1 for ln in lines if ln.startswith(("DCGM_FI_", "DCGM_EXP_", "# HELP DCGM_",
                                                       "# TYPE DCGM_")))
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
        return Parsed({k: v.to_dicts() for k, v in tables.items() if v.height})

    def new_state(self, ctx: ParseContext) -> Any:
        return {"xid": {}}

    def parse_chunk(
        self, lines: pl.Series, first_line: int, ctx: ParseContext, state: Any
    ) -> ChunkResult:
        frame = numbered(lines, first_line)
        samples, labels, slow = split_samples(frame)
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
            labels = pl.concat([labels, ref_labels])
        parsed = samples.get_column("line").n_unique() if samples.height else 0
        tables = samples_to_tables(samples, labels, ctx, source=self.source,
                                   xid_state=state["xid"])
        quarantine = quarantine_frame(qlines, qraws, qreasons) if qlines else None
        return ChunkResult(tables=tables, parsed=parsed, quarantine=quarantine)

    def finish(self, ctx: ParseContext, state: Any) -> ChunkResult:
        return ChunkResult()


def split_samples(frame: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Vectorized split of sample lines (columns line, raw).

    Returns (samples, labels, left over lines): the samples with a ``key`` into the distinct
    series heads (``name{labels}``, hashed), and the lines the fast path did not validate.
    Heads repeat on every scrape, so they are validated and split once per distinct head.
    """
    c = pl.col("raw").str.find("} ", literal=True)
    sp = pl.col("raw").str.find(" ", literal=True)
    head_end = pl.coalesce(c + 1, sp)  # past "}" of name{labels}, or the bare name's end
    split = (
        frame.lazy()
        .with_columns(head_end=head_end)
        .with_columns(
            head=pl.col("raw").str.slice(0, pl.col("head_end")),
            tail=pl.col("raw").str.slice(pl.col("head_end") + 1),
        )
        .with_columns(
            key=pl.col("head").hash().reinterpret(signed=True),
            parts=pl.col("tail").str.split_exact(" ", 1),
        )
        .with_columns(
            value=pl.col("parts").struct.field("field_0").cast(pl.Float64, strict=False),
            ts_s=pl.col("parts").struct.field("field_1"),
        )
        .with_columns(ts_ms=pl.col("ts_s").cast(pl.Int64, strict=False))
        .select("line", "raw", "head", "key", "value", "ts_s", "ts_ms")
        .collect()
    )
    heads = split.select("key", "head").unique("key")
    if heads.height != heads.unique().height:  # a hash collision: key by the text itself
        split = split.with_columns(key=pl.col("head").rank("dense").cast(pl.Int64))
        heads = split.select("key", "head").unique("key")
    heads = _parse_heads(heads)
    good = heads.filter(pl.col("ok"))
    ok = (
        pl.col("key").is_in(good.get_column("key").implode())
        & pl.col("value").is_not_null()
        & (pl.col("ts_s").is_null() | pl.col("ts_ms").is_not_null())
    ).fill_null(False)
    comment = pl.col("raw").is_null() | pl.col("raw").str.starts_with("#")
    split = split.with_columns(ok=ok, skip=comment)
    samples = split.filter(pl.col("ok")).select(
        "line",
        pl.col("key").replace_strict(good.get_column("key"), good.get_column("name"),
                                     return_dtype=pl.String).alias("metric"),
        "value",
        pl.from_epoch(pl.col("ts_ms"), time_unit="ms").cast(TS).alias("ts"),
        "key",
    )
    slow = split.filter(~pl.col("ok") & ~pl.col("skip")).select("line", "raw")
    return samples, conform_labels(good), slow


def _parse_heads(heads: pl.DataFrame) -> pl.DataFrame:
    """Distinct ``name{labels}`` heads -> name, validity and one column per known label."""
    o = pl.col("head").str.find("{", literal=True)
    heads = heads.with_columns(
        name=pl.when(o.is_not_null()).then(pl.col("head").str.slice(0, o)).otherwise("head"),
        labels=pl.when(o.is_not_null()).then(
            pl.col("head").str.slice(o + 1).str.strip_suffix("}")
        ),
    )
    lab = pl.col("labels")
    exprs = {
        col: lab.str.extract(_label_re(key))
        .str.replace_all(r"\\\\", "\x00")
        .str.replace_all(r'\"', '"', literal=True)
        .str.replace_all(r"\n", "\n", literal=True)
        .str.replace_all("\x00", "\\", literal=True)
        for key, col in LABELS.items()
    }
    ok = pl.col("name").str.contains(_NAME_RE) & (
        lab.is_null() | lab.str.contains(_LABEL_BLOCK_RE)
    )
    return heads.with_columns(ok=ok.fill_null(False), **exprs)


PARSERS = [DcgmExporterParser()]
