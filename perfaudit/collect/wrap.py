"""Wrapping a torch entry point: note what the call says, then call through unchanged. A probe's own
error is recorded as perfaudit's (collect/internal.py) and never reaches the user's script.

Every replacement goes through `patch` and every hook handle through `on_undo`, into one journal, so
that a session inside the user's own process (the callbacks, the notebook magic) can give the process
back as it found it (`undo_patches`); the child process of `perfaudit run` never needs to."""
from __future__ import annotations

import functools

from .internal import record_internal_error

_MISSING = object()
_JOURNAL: list = []  # (owner, name, previous own attribute or _MISSING), or a callable undoing a hook


def patch(owner, name: str, value) -> None:
    """owner.name = value, noted so that undo_patches() puts the previous attribute back."""
    own = getattr(owner, "__dict__", {})
    _JOURNAL.append((owner, name, own.get(name, _MISSING) if hasattr(own, "get") else getattr(owner, name)))
    setattr(owner, name, value)


def on_undo(undo) -> None:
    """A hook's removal (a handle's .remove), run by undo_patches()."""
    _JOURNAL.append(undo)


def undo_patches() -> None:
    """Every patch and hook since the process started, undone, newest first."""
    while _JOURNAL:
        entry = _JOURNAL.pop()
        try:
            if callable(entry):
                entry()
                continue
            owner, name, previous = entry
            if previous is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, previous)
        except Exception as exc:  # noqa: BLE001 - the rest must still be undone
            record_internal_error("restoring torch after the window", exc)


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

    patch(owner, name, wrapper)
    return original
