"""The dashboard's pages, one thin module each, and the one query cache they share.

``query(fn, *args)`` runs a ``reports`` query function on the current snapshot; results are cached
per snapshot version and arguments (``st.cache_data``), so a filter change that returns to an
earlier choice costs nothing and a new snapshot invalidates everything at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import streamlit as st

from app.dashboard import ui


@st.cache_data(max_entries=512, show_spinner=False)
def _cached(version: int, source: str, name: str, args: tuple, kwargs: tuple,
            _fn: Callable[..., Any], _store: Any) -> Any:
    return _fn(_store, *args, **dict(kwargs))


def query(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    snap = ui.snapshot()
    name = f"{fn.__module__}.{fn.__qualname__}"
    return _cached(snap.version, str(snap.path), name, args, tuple(sorted(kwargs.items())), fn,
                   snap.store)
