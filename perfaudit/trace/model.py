"""The normalised trace model: what every analysis reads, whatever Kineto generation wrote it."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import compress, islice
from operator import attrgetter, eq
from typing import Any

import msgspec

# Kineto categories, old (capitalised) and new, mapped to one vocabulary.
KIND_BY_CATEGORY = {
    "cpu_op": "op", "operator": "op",
    "cuda_runtime": "runtime", "runtime": "runtime", "cuda_driver": "runtime",
    "kernel": "kernel",
    "gpu_memcpy": "memcpy", "memcpy": "memcpy",
    "gpu_memset": "memset", "memset": "memset",
    "user_annotation": "annotation", "gpu_user_annotation": "gpu_annotation",
    "python_function": "python", "python": "python",
}
DEVICE_KINDS = frozenset({"kernel", "memcpy", "memset", "gpu_annotation"})
# perfaudit's own ranges in a trace it recorded (probe_schema's "perfaudit::…"): written by a fast record function,
# which Kineto files as an op, they are marks, not the script's ops
OWN_RANGES = "perfaudit::"


class Event(msgspec.Struct, gc=False):
    """One complete ('X') event. Times are microseconds. A msgspec struct: made in C (the parser makes
    millions), and never in a reference cycle, so the cycle collector does not track them."""

    kind: str
    name: str
    ts: float
    dur: float
    pid: Any
    tid: Any
    args: dict

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass(slots=True)
class Step:
    number: int
    ts: float
    end: float
    warmup: bool = False
    excluded: str | None = None   # why this step is unlike the others (an evaluation pass, a busy CPU)

    @property
    def dur(self) -> float:
        return self.end - self.ts


@dataclass(slots=True)
class Frame:
    """A Python frame from the trace's python_function events."""

    path: str
    line: int  # the function's first line, as Kineto records it
    func: str
    user: bool


@dataclass
class Trace:
    path: str
    meta: dict
    host: list[Event] = field(default_factory=list)     # ops, runtime calls, annotations
    device: list[Event] = field(default_factory=list)   # kernels, copies, memsets
    python: list[Event] = field(default_factory=list)   # python_function events
    steps: list[Step] = field(default_factory=list)
    step_source: str = "none"   # how steps were found: ProfilerStep, optimizer, dataloader, whole-trace
    skipped_events: int = 0     # malformed events that were ignored
    repaired_names: int = 0     # event names that were not valid JSON strings, read with their bad bytes escaped
    dropped_events: int = 0     # events beyond the most perfaudit keeps (parser.MAX_EVENTS), not read
    unreadable_meta: list[str] = field(default_factory=list)  # metadata parts left out, and why
    memory: dict = field(default_factory=dict)  # "cuda:0" -> peak allocated/reserved bytes ([memory] events)
    # the CPU's allocations (+bytes) and frees (-bytes) of 1 MiB or more: (ts, bytes, address), in file order
    host_blocks: list[tuple[float, int, int]] = field(default_factory=list)
    # an emulated CUDA run: the outermost frames of perfaudit's device mode around the script's torch calls,
    # (start, end), by start; taken out of `python` (without_emulation_frames), kept for what they cost
    emulation_frames: list[tuple[float, float]] = field(default_factory=list)
    _host_by_name: dict | None = field(default=None, init=False, repr=False, compare=False)

    def names(self) -> dict[str, list[Event]]:
        """Each distinct host event name, with its events in trace order (indexed once)."""
        by_name = self._host_by_name
        if by_name is None:
            by_name = self._host_by_name = {}
            for ev in self.host:
                bucket = by_name.get(ev.name)
                if bucket is None:
                    bucket = by_name[ev.name] = []
                bucket.append(ev)
        return by_name

    def named(self, test: Callable[[str], bool], kind: str | None = None) -> list[Event]:
        """The host events (of `kind`, when given) whose name passes `test`, in trace order. `test` is asked
        once per distinct name, not once per event: a trace repeats a few thousand names a million times."""
        picked = [events for name, events in self.names().items() if test(name)]
        out = list(picked[0]) if len(picked) == 1 else [e for events in picked for e in events]
        if len(picked) > 1:
            sort_by_start(out)
        return out if kind is None else [e for e in out if e.kind == kind]

    @property
    def probes(self) -> dict:
        """Facts perfaudit read from the live process (embedded by `perfaudit run`)."""
        return self.meta.get("perfaudit", {}) if isinstance(self.meta.get("perfaudit"), dict) else {}

    @property
    def device_properties(self) -> dict:
        """The first GPU's entry of the trace's deviceProperties (name, computeMajor, totalGlobalMem…),
        or {} when the trace does not say."""
        props = self.meta.get("deviceProperties")
        return props[0] if isinstance(props, list) and props and isinstance(props[0], dict) else {}

    @property
    def measured_steps(self) -> list[Step]:
        """The steps every figure is computed over: not warm-up, and not left out by the recording
        (unless every step was: then all of them, rather than none)."""
        kept = [s for s in self.steps if not s.warmup and not s.excluded]
        return kept or [s for s in self.steps if not s.warmup]

    @property
    def excluded_steps(self) -> list[Step]:
        if not any(not s.warmup and not s.excluded for s in self.steps):
            return []
        return [s for s in self.steps if not s.warmup and s.excluded]

    @property
    def has_gpu(self) -> bool:
        return bool(self.device)

    @property
    def has_stacks(self) -> bool:
        return bool(self.python)

    @property
    def rank(self) -> int | None:
        info = self.meta.get("distributedInfo")
        if isinstance(info, dict) and isinstance(info.get("rank"), int):
            return info["rank"]
        rank = self.probes.get("rank") if isinstance(self.probes, dict) else None  # perfaudit run under torchrun
        return rank if isinstance(rank, int) and not isinstance(rank, bool) else None


_START, _DURATION = attrgetter("ts"), attrgetter("dur")


def sort_by_start(events: list[Event]) -> None:
    """By start, the enclosing event first of two that start together (the longer): one sort by start
    (a trace holds its events nearly in that order already), then each run of equal starts by duration,
    longest first; stable, as sorting by duration and then by start would be, at a third of the cost."""
    events.sort(key=_START)
    starts = [e.ts for e in events]
    ties = list(compress(range(len(starts) - 1), map(eq, starts, islice(starts, 1, None))))
    i = 0
    while i < len(ties):
        j = i
        while j + 1 < len(ties) and ties[j + 1] == ties[j] + 1:
            j += 1
        first, last = ties[i], ties[j] + 2
        events[first:last] = sorted(events[first:last], key=_DURATION, reverse=True)
        i = j + 1


# the emulated CUDA device's mode (collect/emulation/placement.py) and the registries it reads
# (collect/emulation/tensor_registry.py)
EMULATION_FRAMES = ("perfaudit/collect/emulation/placement.py",
                    "perfaudit/collect/emulation/tensor_registry.py")
DISPATCH_FRAME = "torch/overrides.py"  # torch's dispatch to that mode from its Python functions


def emulated_run(trace: Trace) -> bool:
    """Whether perfaudit recorded this trace on the emulated CUDA device (its embedded environment says)."""
    probes = trace.probes.get("probes")
    env = probes.get("environment") if isinstance(probes, dict) else None
    return isinstance(env, dict) and env.get("emulated_cuda") is True


def without_emulation_frames(python: list[Event], outermost: list[tuple[float, float]] | None = None) -> list[Event]:
    """The Python events as the script made them: an emulated CUDA run (`--device emulate-cuda`) records
    the mode's frames (and torch's dispatch to it) around every torch call, and the torch call they make
    (a builtin, so `bool(t)` would show as a `__bool__` call there). Events sorted by start, enclosing first.
    `outermost`: given a list, the spans of the mode's outermost frames are added to it."""
    kept: list[Event] = []
    # (pid, tid) -> [open frames' (end, own)], [own frames among them]
    open_by_thread: dict[tuple, tuple[list[tuple[float, bool]], list[int]]] = {}
    kinds: dict[str, tuple[bool, bool]] = {}  # name -> (the mode's own frame, a builtin): names repeat
    for ev in python:
        name, ts = ev.name, ev.ts
        kind = kinds.get(name)
        if kind is None:
            kind = kinds[name] = (DISPATCH_FRAME in name or any(frame in name for frame in EMULATION_FRAMES),
                                  name.startswith("<built-in"))
        own, builtin = kind
        opened = open_by_thread.get((ev.pid, ev.tid))
        if opened is None:
            opened = open_by_thread[(ev.pid, ev.tid)] = ([], [0])
        stack, owns = opened
        while stack and stack[-1][0] <= ts:
            owns[0] -= stack.pop()[1]
        if not own and not (builtin and stack and stack[-1][1]):
            kept.append(ev)
        elif own and outermost is not None and not owns[0]:
            outermost.append((ts, ev.end))
        end = ev.end
        stack.append((end, own))
        owns[0] += own
    return kept
