"""What the script does before its training starts (tip T29), sampled without the profiler: every
10 ms of the process's CPU time (SIGPROF), the user line running is noted. Sampling stops at the
first sign of training (a DataLoader batch, backward(), an optimizer step): the first step's own work
(compiling, autotuning, the first batch) is never counted as start-up. CPU time, not wall time, so
other processes on a busy machine do not inflate it."""
from __future__ import annotations

import signal
import time

from ..internal import guarded, record_internal_error
from ..userframes import is_user_file

TOP_LINES = 10


class StartupProbe:
    def __init__(self):
        self.counts: dict = {}      # (path, line, func) | "model" | "import" | None -> samples
        self.summary: dict | None = None
        self._interval: float | None = None
        self._t0 = 0.0
        self._cpu0 = 0.0

    def start(self, interval: float = 0.01) -> None:
        self._t0, self._cpu0 = time.time(), time.process_time()
        try:
            signal.signal(signal.SIGPROF, self._sample)
            signal.setitimer(signal.ITIMER_PROF, interval, interval)
            self._interval = interval
        except (ValueError, OSError, AttributeError):  # not the main thread, or no SIGPROF here
            self._interval = None

    @guarded("start-up sampler")
    def _sample(self, signum, frame) -> None:
        in_model = False   # inside a module's forward: the model computing, not preparation
        importing = False  # a module being imported (often lazily, by torch itself): not preparation
        while frame is not None and not is_user_file(frame.f_code.co_filename):
            in_model = in_model or frame.f_code.co_name in ("_call_impl", "_wrapped_call_impl")
            importing = importing or frame.f_code.co_filename.startswith("<frozen importlib")
            frame = frame.f_back
        counts = self.counts
        key: str | tuple | None
        if frame is not None and importing:
            key = "import"
        elif frame is not None and in_model:
            key = "model"
        elif frame is not None:
            code = frame.f_code
            line = frame.f_lineno if frame.f_lineno is not None else code.co_firstlineno
            key = (code.co_filename, line, code.co_name)
        else:
            key = None
        counts[key] = counts.get(key, 0) + 1

    def stop(self, why: str = "training started") -> None:
        """Start-up is over (the first training activity, or the script ended): summarise it."""
        if self._interval is None or self.summary is not None:
            return
        try:
            signal.setitimer(signal.ITIMER_PROF, 0, 0)
            signal.signal(signal.SIGPROF, signal.SIG_DFL)
        except (ValueError, OSError):
            pass
        try:
            self.summary = self._summarise(why)
        except Exception as exc:  # perfaudit's own error: no start-up figures, the run goes on
            record_internal_error("start-up sampler", exc)

    def _summarise(self, why: str) -> dict:
        counts = self.counts
        total = sum(counts.values())
        lines = [(n, k) for k, n in counts.items() if isinstance(k, tuple)]
        # by samples, then by place: a line number is never compared with None
        top = sorted(lines, key=lambda item: (-item[0], str(item[1][0]), item[1][1] or 0, str(item[1][2])))[:TOP_LINES]
        return {"seconds": time.time() - self._t0, "cpu_seconds": total * self._interval,
                "process_cpu_seconds": time.process_time() - self._cpu0, "samples": total,
                "model_samples": counts.get("model", 0), "import_samples": counts.get("import", 0),
                "ended_by": why,
                "lines": [{"path": p, "line": int(l or 0), "func": f, "samples": n} for n, (p, l, f) in top]}

    def snapshot(self) -> dict | None:
        return self.summary
