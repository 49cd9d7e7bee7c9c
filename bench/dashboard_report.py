"""The Markdown summary of ``bench.bench_dashboard``'s results (copy reader against published)."""

from __future__ import annotations

from typing import Any


def _max(values: Any) -> float:
    return max((float(v) for v in values), default=float("nan"))


def summary(mode: dict) -> dict[str, float]:
    """A run's headline figures: first load, the slowest page's first render / filter change,
    the slowest page after a write (first and second visit)."""
    pages = mode["pages"].values()
    written = mode.get("after_write") or {}
    return {
        "first load (s)": mode["startup"]["first_load_s"],
        "first render, slowest page (s)": _max(p["first_render_s"] for p in pages),
        "filter change, slowest page, cluster (s)": _max(p["filter_change_s"] for p in pages),
        "filter change, slowest page, one node (s)": _max(p["node_filter_change_s"] for p in pages),
        "page after a write, slowest, 1st visit (s)": _max(written.get("round_1", {}).values()),
        "page after a write, slowest, 2nd visit (s)": _max(written.get("round_2", {}).values()),
    }


def _table(results: dict[str, dict]) -> list[str]:
    lines = [
        "| page | first render (s) | filter change: cluster, median / min (s) | browser "
        "busy: cluster, all / script+layout+style (s) | filter change: one node, median / "
        "min (s) | browser busy: one node, all / script+layout+style (s) | elements |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for page, r in results.items():
        cells = [page, f"{r['first_render_s']:.2f}"]
        for wall, tries, busy in (
            ("filter_change_s", "filter_change_tries_s", "browser_cluster"),
            ("node_filter_change_s", "node_filter_change_tries_s", "browser_node"),
        ):
            b = r.get(busy, {})
            main = sum(b.get(k, 0.0) for k in ("script_s", "layout_s", "style_s"))
            cells += [
                f"{r[wall]:.2f} / {min(r[tries]):.2f}",
                f"{b.get('task_s', float('nan')):.2f} / {main:.2f}",
            ]
        cells.append(str(r.get("browser_cluster", {}).get("elements", "-")))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def report(doc: dict) -> list[str]:
    load = doc["load_average_1_5_15"]
    base, copy, pub = doc["baseline_reader"], doc["copy_reader"], doc["reader"]
    modes = doc["modes"]
    lines = [
        f"# Dashboard latency, {doc['events']:,} events (from Chromium)",
        "",
        f"{doc['label']}  ",
        f"Load average (1/5/15 min) before {load['before']}, after "
        f"{load['after']}, on {load['cores']} cores.  ",
        f"Opening a view in the reader: published {pub['seconds']:.3f} s; the copy reader in the "
        f"same run {copy['seconds']:.2f} s (copy {copy.get('copy_s')} s; ratio "
        f"{copy['seconds'] / pub['seconds']:.0f}x); copy + every rollup rebuilt "
        f"{base['seconds']:.2f} s. After the writes: published "
        f"{doc['reader_after_write']['seconds']:.3f} s.",
        "",
        "| figure | " + " | ".join(modes) + " |",
        "|---|" + "---:|" * len(modes),
    ]
    sums = {m: summary(r) for m, r in modes.items()}
    for key in next(iter(sums.values()), {}):
        lines.append(f"| {key} | " + " | ".join(f"{sums[m][key]:.2f}" for m in modes) + " |")
    for mode, r in modes.items():
        lines += [
            "",
            f"## Reader: {mode}",
            "",
            f"Filter changes: median of {doc['repeat']} tries each. Browser busy: the "
            "browser's own counters over the change (Chrome DevTools Performance.getMetrics): "
            "all tasks of the page / main-thread JavaScript + layout + style.",
            "",
            *_table(r["pages"]),
        ]
        written = r.get("after_write")
        if written and written.get("write"):
            w = written["write"]
            pub_w = w.get("published") or {}
            lines += [
                "",
                f"After a write of {w['events']:,} events (load {w['load_s']} s; the writer's "
                f"incremental rollups {w['rollups']['seconds']} s, after a relink "
                f"{w['relinked_s']} s; publish for readers {pub_w.get('seconds')} s, "
                f"{pub_w.get('rows_written')} rows written): each page's first render, twice.",
                "",
                "| page | " + " | ".join(written["round_1"]) + " |",
                "|---|" + "---:|" * len(written["round_1"]),
            ]
            for k in ("round_1", "round_2"):
                cells = " | ".join(f"{v:.2f}" for v in written[k].values())
                lines.append(f"| {k} | {cells} |")
    return lines
