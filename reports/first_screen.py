"""The overview's first screen, computed once by the writer with each generation it publishes.

A dashboard that starts cold used to run the overview's default view (the data's span, the fleet
state, the open incidents, the failure rate and the other numbers, the ETTR: about 1.7 s at 50M
events, more on a busy machine) in the first visitor's page run, beside the browser loading
Streamlit's frontend on the same cores. The writer has just published the generation; it
computes those results there (``save``, registered by the command line as an ``ingest.hooks``
after-publish hook) on the published view itself, as a reader would, and stores them beside it.
A reader that opens the generation puts them in the snapshot's memo (``load``), under the keys
the page asks for (``snapshot.call_key``, ``snapshot.trace_key``), so the first run finds them
computed.

Results are kept only for the generation they were computed on, by the same code: the file names
the generation and a digest of the sources that compute them (another version of faultlens, or a
file edited since: the reader computes them itself, and the next writer stores them again). The
file is a pickle: it is written by the writer into the readers' folder beside the database, which
whoever can write there could change as well (the same trust as the database).
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
from collections.abc import Hashable
from functools import lru_cache
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

PREFIX = "first-screen-"
SUFFIX = ".pickle"
FORMAT = 1
OVERVIEW_INCIDENTS = 15  # the overview's open incidents: its first rows (the page's ``limit``)
ENV = "FAULTLENS_FIRST_SCREEN"  # "0": readers ignore what the writer stored (a baseline)
KEEP = 3  # as ``publish.KEEP``: a reader still on an older generation keeps its file


def compute(snap: Any) -> None:
    """The overview's default view on ``snap`` (a ``reports.snapshot.Snapshot``), in the order the
    page asks for it, each result in the snapshot's memo: the whole span, no other filter."""
    from faultlens.reports import q_fleet, q_state, sections
    from faultlens.reports.filters import Filters, default_range

    lo, hi = snap.call(q_fleet.data_range)
    nodes = snap.call(q_fleet.node_list)
    snap.call(q_state.data_span)
    if lo is None or hi is None:
        return
    since, until = default_range(lo, hi)
    f = Filters(since=since, until=until)
    snap.call(q_state.fleet_state, f, nodes)
    snap.call(q_fleet.episodes_in, since, until)
    overview_of(snap, f)
    # the ETTR metric (a replay of the range's interruption trace, read from the database: 0.9 s
    # at 50M events): a first visitor waits neither for it nor for the page's run once it is in
    snap.on_trace(sections.ettr_of, since, until)


def overview_of(snap: Any, f: Any) -> None:
    """The overview's queries that depend on the whole filter ``f`` (the fleet state and the
    episodes are the range's, shared by every node filter): its default view, and the view of
    a cluster the dashboard warms."""
    from faultlens.reports import q_fleet, q_state, reliability

    snap.call(q_state.incidents, f, limit=OVERVIEW_INCIDENTS)
    snap.call(reliability.window_rate, f)
    for fn in (q_fleet.jobs_lost, q_fleet.latest_predictions, q_fleet.top_xids):
        snap.call(fn, f)


@lru_cache(maxsize=1)
def code_digest() -> str:
    """A digest of the sources that compute the results (the reports, models, replay and ingest
    packages): results computed by other code are not used."""
    import faultlens.ingest
    import faultlens.models
    import faultlens.replay
    import faultlens.reports

    h = hashlib.sha256()
    for pkg in (faultlens.reports, faultlens.models, faultlens.replay, faultlens.ingest):
        root = Path(pkg.__file__).parent
        for path in sorted(root.rglob("*.py")):
            h.update(path.relative_to(root.parent).as_posix().encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def path_of(folder: Path, gen: int) -> Path:
    """The file of generation ``gen`` computed by this code (the name says both)."""
    return folder / f"{PREFIX}{gen}-{code_digest()}{SUFFIX}"


def save(folder: Path, manifest: dict[str, Any]) -> bool:
    """Compute the first screen on the generation ``manifest`` names (in ``folder``) and store it
    beside it; nothing to do if it is there already. True if it was computed now."""
    from faultlens.reports.snapshot import Snapshot, SnapshotStore

    gen = int(manifest["gen"])
    target = path_of(folder, gen)
    if target.exists():
        return False
    small = folder / manifest["small"]
    rollups = bool(manifest["rollups"])
    store = SnapshotStore(small, rollups=rollups)
    try:
        snap = Snapshot(store, small, (None, None), None, 0)  # type: ignore[arg-type]
        compute(snap)
        results = snap.memo.results()
    finally:
        store.close()
    doc = {
        "format": FORMAT,
        "gen": gen,
        "code": code_digest(),
        "rollups": rollups,
        "results": results,
    }
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_bytes(pickle.dumps(doc, protocol=pickle.HIGHEST_PROTOCOL))
    tmp.replace(target)  # a reader sees the whole file or none
    _collect(folder, gen)
    return True


def load(folder: Path, gen: int, rollups: bool) -> dict[Hashable, Any]:
    """The results stored for generation ``gen`` if they were computed by this code on the same
    view (with or without the rollups); else nothing (the reader computes them; also with
    ``FAULTLENS_FIRST_SCREEN=0``)."""
    if os.environ.get(ENV, "1") == "0":
        return {}
    path = path_of(folder, gen)
    try:
        doc = pickle.loads(path.read_bytes())  # noqa: S301 - the writer's own file (see above)
    except FileNotFoundError:
        return {}
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as e:
        log.warning("the first screen stored in %s is unreadable, computing it: %s", path, e)
        return {}
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        return {}
    if doc.get("gen") != gen or doc.get("rollups") != rollups or doc.get("code") != code_digest():
        return {}
    return dict(doc.get("results") or {})


def _collect(folder: Path, gen: int) -> None:
    """Remove the files of generations older than the kept ones."""
    for path in folder.glob(f"{PREFIX}*{SUFFIX}"):
        number = path.name[len(PREFIX) :].split("-", 1)[0]
        if number.isdigit() and int(number) <= gen - KEEP:
            path.unlink(missing_ok=True)
