"""Failure records: public cluster traces, a site's incident records (tickets, repair logs) and
unit lifetimes (per-GPU install / removal histories)."""
