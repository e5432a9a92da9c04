"""Structured logging: one logger per module, ``key=value`` pairs after the message."""

from __future__ import annotations

import logging
import sys
from typing import Any

from controlplane.core.config import load_settings
from controlplane.core.errors import ConfigError

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def get_logger(name: str) -> logging.Logger:
    """The logger of a module (pass ``__name__``)."""
    return logging.getLogger(name)


def kv(message: str, **fields: Any) -> str:
    """Render a log line with structured fields: ``kv("launched", zone="us-west-2a")``."""
    if not fields:
        return message
    return message + " " + " ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in fields.items())


def configure(level: str | int | None = None) -> None:
    """Set up root logging once, from ``level`` or ``SPOTPLANE_LOG_LEVEL`` (default WARNING)."""
    if level is None:
        try:
            level = load_settings().log_level
        except ConfigError:  # reported, with its fix, where the settings are loaded for use
            level = "WARNING"
    chosen = level
    logging.basicConfig(stream=sys.stderr, level=chosen, format=_FORMAT, force=True)
