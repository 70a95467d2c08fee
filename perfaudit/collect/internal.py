"""perfaudit's own errors inside the audited process. A probe or a step hook that fails must never
unwind the user's script: the error is recorded here (the first few, with where they happened), the
failing part is switched off, and the run goes on. The report then says so and `perfaudit` exits 4."""
from __future__ import annotations

import functools
import traceback

MAX_KEPT = 10
_errors: list[dict] = []
_disabled: set[str] = set()


def record_internal_error(part: str, exc: BaseException) -> None:
    """Note an error of perfaudit's own `part` (a probe's name); that part is then disabled."""
    _disabled.add(part)
    error = f"{type(exc).__name__}: {exc}"[:300]
    if len(_errors) < MAX_KEPT and not any(e["part"] == part and e["error"] == error for e in _errors):
        frames = traceback.extract_tb(exc.__traceback__)
        where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        _errors.append({"part": part, "error": error, "where": where})


def disabled(part: str) -> bool:
    return part in _disabled


def internal_errors() -> list[dict]:
    return list(_errors)


def guarded(part: str, default=None):
    """A hook that runs inside the user's script: an Exception in it is recorded and swallowed (and
    the hook does nothing from then on); BaseExceptions (the window's own WindowDone, Ctrl-C) pass."""
    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if part in _disabled:
                return default
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                record_internal_error(part, exc)
                return default
        return wrapper
    return decorate
