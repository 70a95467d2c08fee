"""Which of a few lines of the user's files ran: `verify`'s exercise run watches the lines a fix edited
and the later uses of the names they assign (`json.dumps(total)` after the loop), to prove the fixed
script runs past them, or to say it did not. Line tracing is switched on only for the code objects
that hold a watched line, and off once every one was seen; the script can then be stopped."""
from __future__ import annotations

import os
import sys


class LineWatcher:
    def __init__(self, lines: dict[str, list[int]], on_all_seen=None):
        self.wanted = {os.path.realpath(p): set(ls) for p, ls in lines.items() if ls}
        self.seen: dict[str, set[int]] = {p: set() for p in self.wanted}
        self.on_all_seen = on_all_seen
        self._codes: dict = {}
        self._done = False
        self._last_seen = False  # every line seen: stop at the next line, once the last one has run
        self._raising = False

    def start(self) -> None:
        if self.wanted:
            sys.settrace(self._global)

    def stop(self) -> None:
        sys.settrace(None)

    def _watched(self, code):
        known = self._codes.get(code)
        if known is None:
            wanted = self.wanted.get(os.path.realpath(code.co_filename))
            lines = {line for _, _, line in code.co_lines() if line is not None} if wanted else set()
            known = self._codes[code] = (os.path.realpath(code.co_filename), wanted & lines) if wanted else False
        return known

    def _global(self, frame, event, arg):
        if self._done:
            return None
        watched = self._watched(frame.f_code)
        return self._local if watched and watched[1] else None

    def _local(self, frame, event, arg):
        if self._done:
            return None
        if event == "exception":  # the line is failing: let the exception go where it goes
            self._raising = True
            return self._local
        if event == "line":
            self._raising = False
        if self._last_seen and (event == "line" or (event == "return" and not self._raising)):
            # the last watched line ran to its end
            self._done = True
            sys.settrace(None)
            frame.f_trace = None
            if self.on_all_seen is not None:
                self.on_all_seen()
            return None
        if event == "line":
            path, lines = self._watched(frame.f_code)
            if frame.f_lineno in lines:
                self.seen[path].add(frame.f_lineno)
                self._last_seen = all(self.seen[p] >= w for p, w in self.wanted.items())
        return self._local

    def report(self) -> dict[str, dict]:
        """path -> {"seen": [...], "missed": [...]} for every watched file."""
        return {p: {"seen": sorted(self.seen[p]), "missed": sorted(w - self.seen[p])} for p, w in self.wanted.items()}
