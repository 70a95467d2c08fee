"""What torch.compile did while the script ran: every dynamo compile (its frame, its time, the step it
happened in), graph breaks (reason, the user's line), recompilations (the guard that failed) and
frames dynamo gave up on (recompile limit: that frame runs eagerly from then on).

Nothing is installed until the script calls `torch.compile` (or `torch._dynamo.optimize`): an
uncompiled script pays nothing. The sources, most stable first, each used where the torch version
has it (README, "torch.compile"):
- `torch._dynamo.callback.on_compile_start/on_compile_end` (torch >= 2.5): wall time of every
  compile, lazy backward compiles included, and the step it fell in;
- `torch._dynamo.utils.get_compilation_metrics()` (torch >= 2.1): one record per compiled frame
  with its code object, compile time, failure, `recompile_reason` (torch >= 2.6) and
  `restart_reasons` (a graph break's reason);
- the `graph_breaks` log artifact ("Graph break in user code at FILE:LINE", "Graph Break Reason:"),
  read by a handler of our own on that logger (nothing is printed);
- resume frames (`torch_dynamo_resume_in_FUNC_at_LINE`): where a frame was split.
"""
from __future__ import annotations

import functools
import logging
import re
import sys
import time

from ..userframes import is_user_file
from ..wrap import on_undo, patch

_BREAK_AT = re.compile(r"Graph break (?:\(.*?\) )?in user code at (.+):(\d+)")
_BREAK_REASON = re.compile(r"Graph Break Reason: (.+)")
_OLD_BREAK = re.compile(r"Graph break: (.+?) from user code at")
_FILE_LINE = re.compile(r'File "(.+?)", line (\d+), in (\S+)')
_RESUME = re.compile(r"torch_dynamo_resume_in_(\w+?)_at_(\d+)$")
_GUARD_SITE = re.compile(r"#\s*(\S+):(\d+) in (\w+)\s*$")
_LIMIT_WORDS = ("recompile_limit", "recompile limit", "cache_size_limit", "cache size limit")
MAX_RECORDS = 500  # compiles kept: a frame recompiling every step stops at dynamo's limit anyway


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0].strip() if (text or "").strip() else ""


class _BreakLog(logging.Handler):
    """Receives dynamo's graph-break log records (the logger does not propagate: nothing is shown)."""

    def __init__(self, probe: CompileProbe):
        super().__init__(logging.DEBUG)
        self.probe = probe

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.probe._break_logged(record.getMessage())
        except Exception:  # a probe must never break the user's script
            pass


class _LimitLog(logging.Handler):
    """dynamo's warning when a frame hits the recompile limit; it still reaches the user's stderr."""

    def __init__(self, probe: CompileProbe):
        super().__init__(logging.WARNING)
        self.probe = probe

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            if any(w in message for w in _LIMIT_WORDS):
                self.probe._limit_hit(message)
        except Exception:
            pass


class CompileProbe:
    def __init__(self):
        self.active = False
        self.where = lambda: ("startup", 0)     # (phase, step index): set by the session
        self.on_activate = lambda: None
        self.compiles: list[dict] = []            # from the compile callbacks: start/end, seconds, step
        self.frames: list[dict] = []              # from the compilation metrics, one per compiled frame
        self.breaks: dict[tuple, dict] = {}
        self.limit_messages: list[dict] = []
        self._open: dict | None = None
        self._seen = 0
        self._last_metric = None
        self._callbacks = False
        self._handlers: list[tuple[logging.Logger, logging.Handler]] = []

    # -- installation: wrap the entry points, activate on first use ---------------------------------
    def install(self) -> None:
        import torch
        self._wrap(torch, "compile")
        dynamo = sys.modules.get("torch._dynamo")
        if dynamo is not None and hasattr(dynamo, "optimize"):
            self._wrap(dynamo, "optimize")

    def _wrap(self, owner, name: str) -> None:
        original = getattr(owner, name)
        probe = self

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            try:
                probe.activate()
            except Exception:
                pass
            return original(*args, **kwargs)

        patch(owner, name, wrapper)

    def activate(self) -> None:
        if self.active:
            return
        self.active = True
        self.on_activate()
        import torch._dynamo  # noqa: F401  (the script is compiling: dynamo is being imported anyway)
        self._install_callbacks()
        self._install_log_handlers()

    def _install_callbacks(self) -> None:
        try:
            from torch._dynamo import callback
        except ImportError:  # torch < 2.5: compile times come from the compilation metrics
            return
        started, ended = getattr(callback, "on_compile_start", None), getattr(callback, "on_compile_end", None)
        if started is None or ended is None:
            return
        started(self._compile_started)
        ended(self._compile_ended)
        self._callbacks = True
        handler = getattr(callback, "callback_handler", None)
        if handler is not None and hasattr(handler, "remove_start_callback"):
            on_undo(lambda: (handler.remove_start_callback(self._compile_started),
                             handler.remove_end_callback(self._compile_ended)))

    def _install_log_handlers(self) -> None:
        try:
            from torch._logging._internal import log_registry
            names = [n for n in log_registry.artifact_log_qnames if n.endswith("__graph_breaks")]
        except Exception:
            names = ["torch._dynamo.symbolic_convert.__graph_breaks", "torch._dynamo.exc.__graph_breaks"]
        for name in names:
            logger = logging.getLogger(name)
            handler = _BreakLog(self)
            level, propagate = logger.level, logger.propagate
            logger.addHandler(handler)
            if logger.getEffectiveLevel() > logging.DEBUG:  # off (the default): on, for us only
                logger.setLevel(logging.DEBUG)
                logger.propagate = False
            self._handlers.append((logger, handler))

            def restore(logger=logger, handler=handler, level=level, propagate=propagate) -> None:
                logger.removeHandler(handler)
                logger.setLevel(level)
                logger.propagate = propagate
            on_undo(restore)
        for name in ("torch._dynamo.convert_frame", "torch._dynamo"):
            logger = logging.getLogger(name)
            limit = _LimitLog(self)
            logger.addHandler(limit)
            self._handlers.append((logger, limit))
            on_undo(lambda logger=logger, limit=limit: logger.removeHandler(limit))

    # -- what dynamo tells -----------------------------------------------------------------------
    def _compile_started(self, *args) -> None:
        phase, step = self.where()
        self._open = {"t0": time.time(), "phase": phase, "step": step,
                      "trigger": getattr(getattr(args[0], "callback_trigger", None), "name", None) if args else None}

    def _compile_ended(self, *args) -> None:
        entry, self._open = self._open, None
        if entry is None or len(self.compiles) >= MAX_RECORDS:
            return
        entry["seconds"] = time.time() - entry.pop("t0")
        if args and getattr(args[0], "compile_id", None) is not None:
            entry["id"] = str(args[0].compile_id)
        self.compiles.append(entry)

    def _break_logged(self, message: str) -> None:
        at, reason = _BREAK_AT.search(message), _BREAK_REASON.search(message)
        path = line = None
        why = _reason(message[reason.start(1):]) if reason else ""
        if at:
            path, line = at.group(1), int(at.group(2))
        else:  # torch < 2.4: "Graph break: REASON from user code at:\n File ..., line N, in f"
            old = _OLD_BREAK.search(message)
            frames = [m for m in _FILE_LINE.finditer(message) if is_user_file(m.group(1))]
            if old is None or not frames:
                return
            why = _reason(old.group(1))
            path, line = frames[-1].group(1), int(frames[-1].group(2))
        if path is None or not is_user_file(path):
            return
        key = (path, line, why)
        if key not in self.breaks:
            func = next((m.group(3) for m in _FILE_LINE.finditer(message)
                         if m.group(1) == path and int(m.group(2)) == line), None)
            self.breaks[key] = {"site": {"path": path, "line": line, "func": func}, "reason": why,
                                "compile_id": _current_compile_id(), "phase": self.where()[0]}

    def _limit_hit(self, message: str) -> None:
        phase, step = self.where()
        self.limit_messages.append({"message": _first_line(message)[:300], "phase": phase, "step": step,
                                    "compile_id": _current_compile_id()})

    # -- at each step boundary: the compiles of that step ---------------------------------------------
    def poll(self) -> None:
        """Copy the compilation records dynamo added since the last call, tagged with the step they
        belong to (called at every step boundary, so the tag is the step that just ended)."""
        if not self.active:
            return
        try:
            from torch._dynamo.utils import get_compilation_metrics
            records = list(get_compilation_metrics())
        except Exception:
            return
        if not records:
            return
        start = 0
        if self._last_metric is not None:  # records live in a bounded deque: find where we stopped
            start = next((i + 1 for i in range(len(records) - 1, -1, -1) if records[i] is self._last_metric), 0)
        self._last_metric = records[-1]
        phase, step = self.where()
        for record in records[start:]:
            if getattr(record, "co_name", None) is None and not getattr(record, "fail_reason", None):
                continue  # a lazily compiled backward: timed by the callbacks, no frame of its own
            if len(self.frames) < MAX_RECORDS:
                self.frames.append(_frame_record(record, phase, step))

    def compiled_since_last_check(self) -> bool:
        """Whether anything was compiled since the last call (the step that just ended)."""
        self.poll()
        count = len(self.compiles) + len(self.frames)
        changed, self._seen = count != self._seen, count
        return changed

    def snapshot(self) -> dict | None:
        if not self.active:
            return None
        self.poll()
        return {"compiles": self.compiles, "frames": self.frames, "graph_breaks": list(self.breaks.values()),
                "limit_hits": self.limit_messages, "timed_by_callbacks": self._callbacks}


def _reason(text: str) -> str:
    """dynamo's reason in one line: its title and explanation, without the generic opening line."""
    lines = [l.strip() for l in text.splitlines()]
    lines = [l for l in lines if l and not l.startswith("Encountered graph break when attempting")]
    if not lines:
        return ""
    title = lines[0]
    explanation = next((l[len("Explanation:"):].strip() for l in lines[1:4] if l.startswith("Explanation:")), "")
    if explanation and explanation not in title:
        title = f"{title.rstrip('.:')}: {explanation}"
    return title.rstrip(". ")[:300]


def _current_compile_id() -> str | None:
    try:
        from torch._guards import CompileContext
        cid = CompileContext.current_compile_id()
        return None if cid is None else str(cid)
    except Exception:
        return None


def _frame_record(m, phase: str, step) -> dict:
    """One compilation-metrics record, reduced to what the facts read (fields differ across torch)."""
    get = functools.partial(getattr, m)
    name, path = get("co_name", None), get("co_filename", None)
    out = {"id": str(get("compile_id", None) or get("frame_key", None) or ""), "func": name, "path": path,
           "line": get("co_firstlineno", None), "phase": phase, "step": step,
           "seconds": get("entire_frame_compile_time_s", None),
           "fail_type": get("fail_type", None), "fail_reason": _first_line(get("fail_reason", None))[:300] or None,
           "recompile_reason": None, "restart_reasons": [], "resume": None}
    if not isinstance(out["seconds"], (int, float)):
        out["seconds"] = None
    reason = get("recompile_reason", None)
    if isinstance(reason, str) and reason.strip():
        out["recompile_reason"] = _guard(reason)
    restarts = get("restart_reasons", None) or ()
    out["restart_reasons"] = sorted({_first_line(r)[:300] for r in restarts if isinstance(r, str) and r.strip()})
    resume = _RESUME.match(name or "")
    if resume and path:
        out["resume"] = {"path": path, "line": int(resume.group(2)), "func": resume.group(1)}
    out["fell_back"] = bool(out["fail_reason"] and any(w in out["fail_reason"].lower() for w in _LIMIT_WORDS))
    return out


def _guard(reason: str) -> dict:
    """'0/7: G['step'] == 7   # ...source...  # dir/train.py:12 in f' -> the guard and its user line."""
    first = _first_line(reason)
    first = re.sub(r"^\d+/\d+:\s*", "", first)
    guard, _, rest = first.partition("#")
    site = _GUARD_SITE.search(first)
    out: dict[str, str | int] = {"guard": guard.strip()[:200], "text": first[:400]}
    if site:
        out.update(path_tail=site.group(1), line=int(site.group(2)), func=site.group(3))
    return out
