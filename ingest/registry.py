"""The parsers, registered by name in one explicit dict, and format sniffing over them.

A parser module is imported the first time one of its parsers is asked for (an ingest with
``--format`` or of one format loads only that module); sniffing asks every parser, so it loads
them all.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping

from faultlens.ingest.base import Parser
from faultlens.ingest.errors import InputError

# Parser name -> the module that lists it in its ``PARSERS`` (checked when the module loads).
MODULE_OF: dict[str, str] = {
    **dict.fromkeys(
        ("kernel", "journal_json", "k8s_device_plugin"), "faultlens.ingest.kernel.parser"
    ),
    **dict.fromkeys(
        ("journal_export", "journal_verbose", "journal_json_pretty"),
        "faultlens.ingest.kernel.journal",
    ),
    **dict.fromkeys(
        (
            "sacct",
            "sacct_json",
            "slurmrestd_nodes",
            "slurmctld",
            "sinfo",
            "scontrol_node",
            "k8s_events",
            "sinfo_json",
            "squeue",
        ),
        "faultlens.ingest.slurm.parsers",
    ),
    **dict.fromkeys(("nccl", "pytorch"), "faultlens.ingest.nccl.parser"),
    "ncclras": "faultlens.ingest.nccl.ras",
    "dcgm_exporter": "faultlens.ingest.telemetry.dcgm",
    **dict.fromkeys(
        ("dcgmi", "nv_hostengine", "fabricmanager"), "faultlens.ingest.telemetry.dcgm_logs"
    ),
    **dict.fromkeys(("nvidia_smi_q", "nvidia_smi_xml"), "faultlens.ingest.telemetry.nvsmi"),
    **dict.fromkeys(
        ("nvidia_smi_csv", "nvidia_smi_table", "nvidia_smi_nvlink", "nvidia_smi_bundle"),
        "faultlens.ingest.telemetry.nvsmi_text",
    ),
    **dict.fromkeys(
        ("nvidia_smi_dmon", "nvidia_smi_pmon", "dcgmi_dmon"), "faultlens.ingest.telemetry.dmon"
    ),
    "prometheus_json": "faultlens.ingest.telemetry.prom",
    "training": "faultlens.ingest.training.parser",
    "incidents": "faultlens.ingest.traces.incidents",
    **dict.fromkeys(("unit_residency", "unit_lifetimes"), "faultlens.ingest.traces.lifetimes"),
    "lines": "faultlens.ingest.lines",
    "docker_json": "faultlens.ingest.containers",
    "torchelastic_error": "faultlens.ingest.nccl.elastic_file",
    **dict.fromkeys(
        (
            "alibaba2023_pods",
            "alibaba2023_nodes",
            "pai2020_job",
            "pai2020_task",
            "pai2020_instance",
            "pai2020_machine_spec",
            "pai2020_sensor",
            "pai2020_group_tag",
            "pai2020_machine_metric",
            "acme_jobs",
            "acme_summary",
            "alibaba_genai_duty_cycle",
        ),
        "faultlens.ingest.traces.public",
    ),
}


class _Registry(MutableMapping[str, Parser]):
    """Name -> parser; a module's parsers are created when the module is first needed. Entries
    set explicitly (a test, a benchmark) win over the module's."""

    def __init__(self, module_of: dict[str, str]) -> None:
        self._module_of = module_of
        self._parsers: dict[str, Parser] = {}
        self._removed: set[str] = set()
        self._loaded: set[str] = set()

    def _load(self, module_name: str) -> None:
        if module_name in self._loaded:
            return
        module = importlib.import_module(module_name)
        names = {p.name for p in module.PARSERS}
        mapped = {n for n, m in self._module_of.items() if m == module_name}
        if names != mapped:
            raise RuntimeError(
                f"{module_name} defines {sorted(names)}, registry maps {sorted(mapped)}"
            )
        for parser in module.PARSERS:
            self._parsers.setdefault(parser.name, parser)
        self._loaded.add(module_name)

    def __getitem__(self, name: str) -> Parser:
        if name in self._removed:
            raise KeyError(name)
        if name not in self._parsers and name in self._module_of:
            self._load(self._module_of[name])
        return self._parsers[name]

    def __setitem__(self, name: str, parser: Parser) -> None:
        self._removed.discard(name)
        self._parsers[name] = parser

    def __delitem__(self, name: str) -> None:
        if name not in self:
            raise KeyError(name)
        self._parsers.pop(name, None)
        self._removed.add(name)

    def __iter__(self) -> Iterator[str]:
        names = dict.fromkeys([*self._module_of, *self._parsers])
        return (n for n in names if n not in self._removed)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, name: object) -> bool:
        return name not in self._removed and (name in self._parsers or name in self._module_of)


REGISTRY: MutableMapping[str, Parser] = _Registry(MODULE_OF)


def names() -> list[str]:
    return sorted(REGISTRY)


def get(name: str) -> Parser:
    try:
        return REGISTRY[name]
    except KeyError:
        raise InputError(f"unknown format {name!r}; known: {', '.join(names())}") from None


# Sniffed formats that are line-oriented logs: such a file is read by ``lines``, which finds every
# family's lines in it (a node log holds kernel, NCCL / PyTorch and Slurm lines together).
LINE_FORMATS = frozenset({"kernel", "nccl", "pytorch", "slurmctld"})
# What a file of no known format is read with.
FALLBACK = "lines"


def reader_for(sniffed: str | None) -> str:
    """The parser that reads a file sniffed as ``sniffed`` (None: no format recognized)."""
    if sniffed is None or sniffed in LINE_FORMATS:
        return FALLBACK
    return sniffed


def sniff(head_lines: list[str], path: str) -> tuple[str | None, float]:
    """The best-scoring parser for a file's first lines, and its score (0 = nobody)."""
    best: tuple[str | None, float] = (None, 0.0)
    for name, parser in REGISTRY.items():
        score = parser.sniff(head_lines, path)
        if score > best[1]:
            best = (name, score)
    return best
