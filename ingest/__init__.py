"""Ingest: one module per log source, format sniffing, the normalized schema and the DuckDB store."""
