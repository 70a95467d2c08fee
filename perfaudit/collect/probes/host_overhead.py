"""What perfaudit's own instruments add to the host's time, measured in the run itself: a loop of tiny
torch calls timed bare (no profiler, the emulated device's mode set aside) just before the profiler starts,
and again under the profiler (the mode back, when the run emulates CUDA) inside a `perfaudit#calibration`
range; then a loop of Python calls alone, the same two ways (`perfaudit#calibration:python`). The analysis
counts the events each loop recorded in its range, and so has the cost of a recorded Python call and of a
recorded op on this machine, under this load: what a projection onto a GPU subtracts from the host's time
(projection/host/overhead.py), as the script's own Python runs there without perfaudit."""
from __future__ import annotations

import contextlib
from time import perf_counter

from ..internal import record_internal_error

CALIBRATION = "perfaudit#calibration"   # the range the loop runs in under the profiler
PYTHON_CALIBRATION = "perfaudit#calibration:python"   # and the loop of Python calls alone
# rounds of the loop, each way: the quickest of each is kept, what a round took beyond it being another
# process's or the scheduler's (one round of 100 calls gave 1.0-2.1 µs per event run to run); as many calls in
# all as that one round made, so the trace (and its budget) holds no more of the calibration than before
ROUNDS = 5
ITERATIONS = 20
PYTHON_ITERATIONS = 100   # a Python call records for a fifth of what an op does: more of them, as many events
FREED_MIB = 64      # a block well above any allocator's threshold for memory handed back to the OS


def _layer(torch, x, weight, bias):
    return torch.relu(torch.nn.functional.linear(x, weight, bias))


def _waited_s() -> float:
    """Seconds this thread has waited for a CPU so far (Linux's schedstat; 0 elsewhere)."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def _round(torch, n: int) -> float:
    """One round of the loop: its time less what this thread waited for a CPU meanwhile (a DataLoader's
    workers starting up, another process), at least a tenth of it."""
    waited = _waited_s()
    took = _loop(torch, n)
    return max(took - (_waited_s() - waited), 0.1 * took)


def _loop(torch, n: int) -> float:
    """A small layer's Python function called n times: a call, a matmul and a pointwise op, as a training
    step's Python is made of (bare builtin calls cost the Python tracer less per event). No nn.Module: a
    module call would count as the script's own model call (the inference step detection)."""
    weight, bias, x = torch.ones(8, 8, device="cpu"), torch.zeros(8, device="cpu"), torch.ones(2, 8, device="cpu")
    with torch.no_grad():
        start = perf_counter()
        for _ in range(n):
            x = _layer(torch, x, weight, bias)
        return perf_counter() - start


def _python_step(values):
    return len(values)


def _python_loop(n: int) -> float:
    """A Python function that calls a builtin, n times: the script's Python glue without torch (the tracer records
    a call for a fraction of what an op with its shapes costs, so the two are calibrated apart)."""
    values = [0, 1]
    start = perf_counter()
    for _ in range(n):
        _python_step(values)
    return perf_counter() - start


def _quickest(loop, n: int) -> float:
    """The quickest of ROUNDS rounds, each less what this thread waited for a CPU meanwhile."""
    best = float("inf")
    for _ in range(ROUNDS):
        waited = _waited_s()
        took = loop(n)
        best = min(best, max(took - (_waited_s() - waited), 0.1 * took))
    return best


def _free_us_per_mib(torch) -> float:
    """What freeing a large block the CPU has written costs here (µs per MiB, the median of three): glibc
    hands blocks of 32 MiB and more back to the OS, page by page. A step that frees the emulated device's
    large tensors (an LM's logits) pays it between ops, where a GPU's caching allocator pays nothing."""
    times = []
    for _ in range(3):
        block = torch.empty(FREED_MIB << 20, dtype=torch.uint8, device="cpu")
        block.fill_(1)
        start = perf_counter()
        del block
        times.append(perf_counter() - start)
    return sorted(times)[1] * 1e6 / FREED_MIB


class HostOverhead:
    """Probe: `bare()` before the profiler starts, `instrumented()` right after; snapshot() the two times."""

    def __init__(self, torch, placement=None):
        self.torch, self.placement = torch, placement
        self.bare_s: float | None = None
        self.instrumented_s: float | None = None
        self.free_us_per_mib: float | None = None
        self.python_bare_s: float | None = None
        self.python_instrumented_s: float | None = None

    def _mode_aside(self):
        mode = self.placement
        if mode is None or mode.aside:
            return contextlib.nullcontext()
        depth = getattr(self.torch._C, "_len_torch_function_stack", lambda: 0)()
        if not depth or self.torch._C._get_function_stack_at(depth - 1) is not mode:
            return contextlib.nullcontext()
        return self.torch.overrides._pop_mode_temporarily()

    def bare(self) -> None:
        with self._mode_aside():
            _loop(self.torch, 20)   # warm: the first calls allocate
            self.bare_s = min(_round(self.torch, ITERATIONS) for _ in range(ROUNDS))
            _python_loop(PYTHON_ITERATIONS)
            self.python_bare_s = _quickest(_python_loop, PYTHON_ITERATIONS)
            if self.placement is not None:  # the emulated device: its large frees are taken out (projection)
                self.free_us_per_mib = _free_us_per_mib(self.torch)

    def instrumented(self) -> None:
        with self.torch.profiler.record_function(CALIBRATION):
            self.instrumented_s = min(_round(self.torch, ITERATIONS) for _ in range(ROUNDS))
        with self.torch.profiler.record_function(PYTHON_CALIBRATION):
            self.python_instrumented_s = _quickest(_python_loop, PYTHON_ITERATIONS)

    def around(self, start_profiler, probes) -> None:
        """Time the loop bare, start the profiler, time it again inside; added to `probes` when both ran (a
        failure is perfaudit's own, recorded, and never stops the profiler from starting)."""
        try:
            self.bare()
        except Exception as exc:  # noqa: BLE001
            record_internal_error("host overhead calibration", exc)
        start_profiler()
        try:
            self.instrumented()
            probes.add("host_overhead", self)
        except Exception as exc:  # noqa: BLE001
            record_internal_error("host overhead calibration", exc)

    def snapshot(self) -> dict:
        return {"iterations": ITERATIONS, "rounds": ROUNDS, "bare_s": self.bare_s, "instrumented_s": self.instrumented_s,
                "free_us_per_mib": self.free_us_per_mib, "python_iterations": PYTHON_ITERATIONS,
                "python_bare_s": self.python_bare_s, "python_instrumented_s": self.python_instrumented_s}
