"""The ``faultlens`` command line: a thin layer over the library (Typer).

stdout is data, stderr is diagnostics; exit codes are ``app.common.ExitCode``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from faultlens.app import (
    cmd_ingest,
    cmd_lake,
    cmd_models,
    cmd_reliability,
    cmd_replay,
    cmd_report,
    cmd_run,
    cmd_stragglers,
    cmd_synth,
)
from faultlens.app.common import setup_logging
from faultlens.ingest import hooks

app = typer.Typer(
    name="faultlens",
    help="Reliability toolkit for GPU training clusters: ingest, predict, replay, report.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain click help: prose rewrapped to the terminal, no markup
    context_settings={"max_content_width": 120},
)


@app.callback()
def _root(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logs on stderr.")] = False,
) -> None:
    setup_logging(verbose)
    hooks.after_publish(save_first_screen)  # a command that writes computes the overview ahead


def save_first_screen(folder: Path, manifest: dict[str, Any]) -> None:
    """After a publish: the overview's first screen on the published generation
    (``reports.first_screen``; imported here, on a write, not at every command's start)."""
    from faultlens.reports import first_screen

    first_screen.save(folder, manifest)


# Each command module registers its commands here, explicitly.
for _module in (
    cmd_ingest,
    cmd_synth,
    cmd_models,
    cmd_stragglers,
    cmd_replay,
    cmd_reliability,
    cmd_run,
    cmd_report,
    cmd_lake,
):
    _module.register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
