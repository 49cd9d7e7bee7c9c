"""Slurm parsers: accounting (``sacct`` text and JSON), daemon logs, and node listings.

The formats live in their own modules; this one lists them for ``ingest.registry``:

- ``sacct``: ``--parsable2`` / ``--parsable`` / any ``--delimiter`` / fixed-width / ``--noheader``
  (``ingest.slurm.sacct``) -> ``jobs``, ``job_steps``, job events;
- ``sacct_json`` and ``slurmrestd_nodes``: ``sacct --json`` / slurmdbd REST jobs, and node lists of
  slurmrestd / ``sinfo --json`` (``ingest.slurm.json_docs``);
- ``slurmctld``: slurmctld / slurmd / slurmstepd logs, also in syslog or the journal
  (``ingest.slurm.daemon``) -> node and job events;
- ``sinfo`` (``ingest.slurm.nodes``) and ``scontrol_node`` (``ingest.slurm.scontrol``) -> node
  events with drain / down reasons, and the fleet (``nodes``, ``ingest.slurm.fleet_rows``);
- ``sinfo_json``: ``sinfo --json`` (``sinfo`` or ``nodes`` lists) and ``squeue --json``
  (``ingest.slurm.sinfo_json``), ``squeue`` text (``ingest.slurm.squeue``) -> the fleet;
- ``k8s_events``: ``kubectl describe`` event tables (accounted for, not modelled).
"""

from __future__ import annotations

from faultlens.ingest.slurm.daemon import DaemonParser
from faultlens.ingest.slurm.json_docs import SlurmJsonParser
from faultlens.ingest.slurm.nodes import SinfoParser
from faultlens.ingest.slurm.sacct import SacctParser
from faultlens.ingest.slurm.scontrol import K8sEventsParser, ScontrolNodeParser
from faultlens.ingest.slurm.sinfo_json import SlurmListJsonParser
from faultlens.ingest.slurm.squeue import SqueueParser

PARSERS = [
    SacctParser(),
    SlurmJsonParser("sacct_json", "jobs"),
    SlurmJsonParser("slurmrestd_nodes", "nodes"),
    SlurmListJsonParser(),
    SqueueParser(),
    DaemonParser(),
    SinfoParser(),
    ScontrolNodeParser(),
    K8sEventsParser(),
]

__all__ = ["PARSERS"]
