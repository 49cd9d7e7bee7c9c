"""Ingest: one module per log source, format sniffing, the normalized schema, the DuckDB store."""
