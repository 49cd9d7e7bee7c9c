"""The parsers, registered by name in one explicit dict, and format sniffing over them."""

from __future__ import annotations

from ingest import (
    dcgm,
    dcgm_logs,
    kernel,
    nccl,
    nvsmi,
    nvsmi_text,
    prom,
    slurm,
    traces,
    training,
)
from ingest.base import Parser
from ingest.errors import InputError

# Every parser module lists its parsers in ``PARSERS``; the modules are named here, explicitly.
_MODULES = (kernel, slurm, nccl, dcgm, dcgm_logs, nvsmi, nvsmi_text, prom, training, traces)

REGISTRY: dict[str, Parser] = {p.name: p for m in _MODULES for p in m.PARSERS}


def names() -> list[str]:
    return sorted(REGISTRY)


def get(name: str) -> Parser:
    try:
        return REGISTRY[name]
    except KeyError:
        raise InputError(f"unknown format {name!r}; known: {', '.join(names())}") from None


def sniff(head_lines: list[str], path: str) -> tuple[str | None, float]:
    """The best-scoring parser for a file's first lines, and its score (0 = nobody)."""
    best: tuple[str | None, float] = (None, 0.0)
    for name, parser in REGISTRY.items():
        score = parser.sniff(head_lines, path)
        if score > best[1]:
            best = (name, score)
    return best
