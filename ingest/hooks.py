"""What other layers ask the writer to do after it publishes for readers (``ingest.publish``).

Kept free of imports so that registering a hook costs nothing at a command's start: ingest imports
no layer above it, so the command line (``app.cli``) registers the reports layer's work here.
A hook is called as ``hook(folder, manifest)`` after every publish, with the generation readers
now see (also when nothing changed: a hook whose work for that generation is missing does it
then); it must not raise (``publish.now`` logs what it raises, the writer's work stands).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

AfterPublish = Callable[[Path, dict[str, Any]], None]
AFTER_PUBLISH: list[AfterPublish] = []


def after_publish(hook: AfterPublish) -> None:
    """Register ``hook`` once (registering it again changes nothing)."""
    if hook not in AFTER_PUBLISH:
        AFTER_PUBLISH.append(hook)
