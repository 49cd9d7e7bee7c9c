"""The one exception hierarchy of faultlens; the CLI turns each into a message and exit code."""

from __future__ import annotations


class FaultlensError(Exception):
    """Base class of every error faultlens raises on purpose."""


class StoreError(FaultlensError):
    """The database could not be opened, read or written."""


class InputError(FaultlensError):
    """An input file is unreadable, binary, truncated or of no known format."""


class ConfigError(FaultlensError):
    """A configuration file or option is invalid."""


class ModelError(FaultlensError):
    """A model is missing, stale or cannot be trained on the data at hand."""


class LockedError(FaultlensError):
    """Another faultlens process holds the lock this one needs."""
