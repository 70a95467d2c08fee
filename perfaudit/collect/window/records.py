"""What a window writes to the run folder: result.json (the outcome, and the probes), written before the
profiler stops so that a crash in its stop loses neither, and again once the trace is written; the trace with
the probes and the window's record embedded (export.py); the model's FLOPs once the script has ended. Mixed
into the Session (session.py), which holds the state these read."""
from __future__ import annotations

import gc
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from ...files import CANNOT_WRITE
from ..internal import internal_errors
from .export import export_trace, write_json


class WindowRecords:
    """Mixed into Session: what it writes."""

    if TYPE_CHECKING:  # what the session (session.py) gives it
        from ..clock import OwnClock
        from ..probes.flops import FlopProbe
        from ..probes.live import Probes
        from ..torch_types import Profiler
        from .parts import WindowProfilers
        from .plain import PlainSteps
        from .selection import StepMarks
        from .steps import StepDetector
        config: dict
        script: str
        probes: Probes
        flops: FlopProbe
        marks: StepMarks
        detector: StepDetector
        profilers: WindowProfilers
        prof: Profiler | None
        plain: PlainSteps
        clock: OwnClock
        rank: int | None
        warmup: int
        steps: int
        wanted_steps: int
        step_index: int
        restarts: list[str]
        budget_s: float | None
        budget_hit: bool
        trimmed: dict
        compile_warmup: int
        optimizer_counts: dict[str, int]
        optimizer_order: list[str]
        threads: dict | None
        framework: dict | None
        trace_path: str | None
        export_error: str | None
        write_error: OSError | None

        def signals_held(self) -> Any: ...
        def _say(self, phase: str, **extra) -> None: ...
        def _path(self, name: str) -> str: ...

    def _write_plain(self) -> None:
        """The steps timed after the window without the profiler (plain.py), added to result.json, from which
        the report takes them (the trace was written before them: a step that never ends loses nothing)."""
        self.plain.stop()
        try:
            self._add_to_result("plain_steps", self.plain.summary())
        except (OSError, ValueError) as exc:  # a full disk, say: the report goes without them
            self.write_error = self.write_error or (exc if isinstance(exc, OSError) else None)

    def _stop_and_write(self, result: dict) -> None:
        collecting = gc.isenabled()  # off as the window closes, maybe inside the script's range (see _count_flops)
        gc.disable()
        try:
            self._close_and_write(result)
        finally:
            gc.enable() if collecting else None

    def _close_and_write(self, result: dict) -> None:
        self.marks.settle(self.warmup, self.wanted_steps)
        self.trace_path = None
        # result.json first: a trace lost in export (or the profiler's stop) leaves the outcome and probes on disk
        self._write_result(result, None, with_probes=True, profiling=self.prof is not None)
        if self.prof is None:
            return
        self._say("exporting")
        self.profilers.stop(self.prof)
        try:
            self.trace_path = export_trace(self.prof, self._path("trace.json"), self._meta(result),
                                           self.profilers.earlier_parts(), self.profilers.with_stack[-1])
        except Exception as exc:  # nothing recorded, or the exporter failed (a full disk, say)
            self.export_error = f"{type(exc).__name__}: {exc}"[:300]
            if isinstance(exc, OSError) and exc.errno in CANNOT_WRITE:
                self.write_error = self.write_error or exc
            self._say("export_failed", error=str(exc))
        self._write_result(result, self.trace_path, with_probes=self.trace_path is None)

    def _count_flops(self) -> None:
        """The model's FLOPs, counted once the script has ended and the window is saved (no torch context
        of the script is open any more, and a crash in torch here loses nothing): added to result.json,
        from which the report takes them."""
        self._say("counting_flops")
        # no cycle collection from here to the process's exit: collecting the stopped window's leftovers (a
        # RecordFunction of the step the window closed in, held by WindowDone's traceback) crashes torch
        gc.disable()
        self.flops.count()
        self._add_to_result("flops_counted", self.flops.snapshot())

    def _add_to_result(self, key: str, value) -> None:
        """result.json with one more entry, worked out after it was written (the report takes it from there)."""
        path = self._path("result.json")
        with open(path) as f:
            recorded = json.load(f)
        recorded[key] = value
        write_json(path, recorded)

    def _meta(self, result: dict) -> dict:
        return {
            "version": 1,
            "rank": self.rank,
            "world_size": int(os.environ["WORLD_SIZE"]) if self.rank is not None and "WORLD_SIZE" in os.environ else None,
            "script": os.path.abspath(self.script),
            "argv": sys.argv[1:],
            "cwd": os.getcwd(),
            "source_roots": [os.path.dirname(os.path.abspath(self.script)), os.getcwd()],
            "path_aliases": self.config.get("path_aliases") or {},
            "window": self._window(),
            "outcome": result,
            "probes": self.probes.snapshot(),
        }

    def _window(self) -> dict:
        return {"warmup": self.warmup, "steps": self.steps, "recorded": self.step_index,
                "step_source": self.detector.source, "restarts": self.restarts,
                "budget_s": self.budget_s, "budget_hit": self.budget_hit, "trimmed": self.trimmed,
                "compile_warmup": self.compile_warmup, "clock": self.clock.summary(),
                "optimizer_steps": self.optimizer_counts, "threads": self.threads, "framework": self.framework,
                "optimizer_order": self.optimizer_order if len(set(self.optimizer_order)) > 1 else [],
                **self.marks.summary()}

    def _write_result(self, result: dict, trace_path: str | None, with_probes: bool = False,
                      profiling: bool = False) -> None:
        out = {**result, "trace": trace_path, "steps_recorded": self.step_index,
               "warmup": self.warmup, "step_source": self.detector.source,
               "profiling_started": self.prof is not None, "budget_hit": self.budget_hit,
               "trimmed": self.trimmed, "window": self._window(),
               "optimizers_built": self.detector.optimizers_built, "internal_errors": internal_errors()}
        if self.export_error:
            out["export_error"] = self.export_error
        if with_probes:
            out["probes"] = self.probes.snapshot(profiling)
        try:
            write_json(self._path("result.json"), out)
        except OSError as exc:  # a full disk, say: the earlier result.json stands; the run stops and says why
            self.write_error = self.write_error or exc

    def result_extra(self, result: dict) -> dict:
        """More for result.json once the script has ended (the timing session's exercise run)."""
        return {}
