"""Wrapping a torch entry point: note what the call says, then call through unchanged. A probe's own
error is recorded as perfaudit's (collect/internal.py) and never reaches the user's script."""
from __future__ import annotations

import functools

from .internal import record_internal_error


def wrap(owner, name: str, before, probe: str = "probes"):
    """Replace owner.name by a wrapper that calls before(args, kwargs) then the original."""
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        try:
            before(args, kwargs)
        except Exception as exc:  # a probe must never break the user's script
            record_internal_error(probe, exc)
        return original(*args, **kwargs)

    setattr(owner, name, wrapper)
    return original
