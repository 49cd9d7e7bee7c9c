"""Slurm: accounting (``sacct`` text and JSON), daemon logs, and node listings; ``parsers`` lists
them for ``ingest.registry``."""
