"""What the host did in each recorded step, as the simulation replays it: a list of `Item`s in order (Python
and dispatch time, kernels queued, syncs, DataLoader fetches, host-to-device copies), the GPU time of each
kernel taken either from the kernels the trace measured (`from_kernels`, a GPU trace) or from what each op
does (`from_shapes`, a CPU trace: the ops' recorded shapes through the kernel model)."""
from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable
from copy import copy
from dataclasses import dataclass, field
from operator import attrgetter

import msgspec

from ..probe_schema import ASIDE_RANGE, CUDNN_SEARCH_MARK, EMPTY_CACHE_MARK, GRAPH_RANGE, H2D_RANGE, HALF_MATH_RANGE, SYNC_RANGE
from ..trace.model import Event, Step, Trace
from ..trace.op_names import DATALOADER
from .host.overhead import OwnCost
from .kernels import Work
from .plans import (
    Freed,
    Item,
    Kernels,
    StepPlan,
    Waits,
    clip_outliers,
    gap_items,
    take_out,
    take_out_own_rest,
    take_out_usual_own,
    take_out_waits,
)
from .rnn import BACKWARD, GATES, SEQUENCE, rnn_shape, rnn_us, sequence_ranges
from .transfers.collectives import kind_of, nccl_kernel
from .work import FOREACH, GROUP_OPS, SYNC_OPS, launches, with_bias, work_of

WAIT_RUNTIME = ("Synchronize", "cudaMemcpy", "hipMemcpy")   # a runtime call the host waits in
PRICED_MARKS = (H2D_RANGE, EMPTY_CACHE_MARK, CUDNN_SEARCH_MARK)   # the run's marks the projection prices (`copy`)
_TS = attrgetter("ts")
SMALL_KERNEL_US = 10.0   # an elementwise kernel this short is launch-bound: what fusing saves (FUSE001's bound)


@dataclass(slots=True)
class _Node:
    op: Event
    children: list = field(default_factory=list)
    rnn: Event | None = None   # a backward node of a recurrent layer's inner ops: the layer's backward, once
    quiet: bool = False        # … and its other nodes: no kernels of their own on a GPU (rnn.py)


def _forest(ops: list[Event]) -> list[_Node]:
    """The ops of one thread as trees (sorted by start, enclosing first): only namespaced ops (`aten::…`,
    `autograd::…`) nest; a profiler annotation recorded as an op (older traces' `ProfilerStep#3`) is passed
    through, its ops becoming roots."""
    roots: list[_Node] = []
    stack: list[_Node] = []
    for op in ops:
        if "::" not in op.name:
            continue
        while stack and stack[-1].op.end <= op.ts:
            stack.pop()
        node = _Node(op)
        (stack[-1].children if stack else roots).append(node)
        stack.append(node)
    return roots


def _groups(node: _Node, half: str | None = None) -> list[Event]:
    """The ops of a tree that each stand for the kernels of their subtree: a matrix, convolution or attention
    op as a whole; otherwise the leaves that launch a kernel. Inside the emulated device's float32 math for a
    16-bit op (probe_schema.HALF_MATH_RANGE) the matrix ops are of `half`, its type, and what it set aside (its
    float32 copies, the backward's recomputation) is no GPU's work."""
    name = node.op.name
    if node.rnn is not None:
        return [node.rnn]
    if node.quiet:
        return []
    if name in GATES and rnn_shape(node.op) is not None:  # one cuDNN call (a CPU's: not its loop of small ops)
        return [_typed(node.op, half) if half is not None else node.op]
    if name.startswith(HALF_MATH_RANGE):
        half = "c10::Half" if "float16" in name and "bfloat16" not in name else "c10::BFloat16"
    elif name in (ASIDE_RANGE, SYNC_RANGE):
        return []
    if name in GROUP_OPS or kind_of(name):  # a collective: DDP's, inside the gradient's accumulation
        return [_typed(node.op, half) if half is not None else node.op]
    if name.startswith(FOREACH):  # a GPU's few launches, not the CPU's loop of per-tensor ops below it
        return [node.op]
    below = [g for child in node.children for g in _groups(child, half)]
    if below:
        return below
    return [node.op] if launches(name) else []


def _typed(op: Event, half: str) -> Event:
    """The op as the 16-bit op it stands for: its float32 inputs of type `half`."""
    types = [half if t == "float" else t for t in op.args.get("Input type") or []]
    return msgspec.structs.replace(op, args={**op.args, "Input type": types})


def _has_sync(node: _Node, marked: bool = False) -> bool:
    """Whether the host waits for the GPU in this tree: an op that reads a value back, or only its marked waits (SYNC_RANGE)."""
    if node.op.name == SYNC_RANGE or (not marked and node.op.name in SYNC_OPS):
        return True
    return any(_has_sync(c, marked) for c in node.children)


MAX_EVENTS = 30_000   # host events replayed at most: every measured step, or a run of them that holds this many


def window(trace: Trace, steps: list[Step]) -> tuple[Trace, list[Step]]:
    """The measured steps, or in a large trace the contiguous run of them that holds about MAX_EVENTS host
    events and whose mean duration is nearest the mean of them all (steps vary: one that waited for a new
    epoch's workers is no typical step); and the trace cut to them: its host and Python events in their span,
    its device events up to one span later (a GPU runs behind). The projection then costs what those steps
    hold, whatever the size of the trace."""
    events = bisect_left(trace.host, steps[-1].end, key=_TS) - bisect_left(trace.host, steps[0].ts, key=_TS)
    if events > MAX_EVENTS:
        k = max(1, int(len(steps) * MAX_EVENTS / events))
        mean = sum(s.dur for s in steps) / len(steps)
        first = min(range(len(steps) - k + 1), key=lambda i: abs(sum(s.dur for s in steps[i:i + k]) / k - mean))
        steps = steps[first:first + k]
    start, end = steps[0].ts, steps[-1].end
    cut = copy(trace)
    cut.host, cut.python = _between(trace.host, start, end), _between(trace.python, start, end)
    cut.device = _between(trace.device, start, end + (end - start))
    cut._host_by_name = None
    return cut, steps


def _between(events: list[Event], start: float, end: float) -> list[Event]:
    return events[bisect_left(events, start, key=_TS):bisect_left(events, end, key=_TS)]


class _Index:
    """The trace's ops and DataLoader ranges, sorted by start once: a step's are found by bisection."""

    def __init__(self, trace: Trace):
        self.ops = [e for e in trace.host if e.kind == "op" or (e.kind == "annotation" and e.name.startswith(
                    (HALF_MATH_RANGE, ASIDE_RANGE, SYNC_RANGE, GRAPH_RANGE, *PRICED_MARKS)))]
        self.op_starts = [e.ts for e in self.ops]
        self.data = [e for e in trace.host if e.name.startswith(DATALOADER)]
        self.data_starts = [e.ts for e in self.data]
        # a CPU trace's recurrent layers (a GPU trace records cuDNN's one call and its one backward node)
        self.rnn = sequence_ranges(self.ops) if not trace.has_gpu and any(e.name in GATES for e in self.ops) else {}
        self.rnn_backward: set[int] = set()   # the layers whose backward a node already stands for

    def roots(self, step: Step) -> list[_Node]:
        """The root ops of every thread that start in the step, in time order."""
        by_thread: dict = defaultdict(list)
        for ev in self.ops[bisect_left(self.op_starts, step.ts):bisect_left(self.op_starts, step.end)]:
            by_thread[(ev.pid, ev.tid)].append(ev)
        roots = [r for ops in by_thread.values() for r in _forest(ops)]
        roots.sort(key=lambda n: n.op.ts)
        for root in roots if self.rnn else ():
            number = root.op.args.get(SEQUENCE) if root.op.name.startswith("autograd::") else None
            layer = self.rnn.get(number) if type(number) is int else None
            if layer is not None:
                root.quiet = id(layer) in self.rnn_backward
                root.rnn = None if root.quiet else msgspec.structs.replace(layer, name=layer.name + BACKWARD)
                self.rnn_backward.add(id(layer))
        return roots

    def data_ranges(self, step: Step) -> list[tuple[float, float]]:
        i, j = bisect_left(self.data_starts, step.ts), bisect_left(self.data_starts, step.end)
        return [(e.ts, e.end) for e in self.data[i:j]]


def plan(trace: Trace, steps: list[Step], expand: Callable[[_Node], list[Item]],
         own_cost: OwnCost | None = None,
         undisturbed: Callable[[Step], float] | None = None, freed: Freed | None = None,
         host_waited: Callable[[Step], tuple[float | None, float | None]] | None = None,
         waits: Waits | None = None, compiled: Kernels | None = None) -> list[StepPlan]:
    """Each step as items: the gaps between root ops (Python, DataLoader fetches) and each root op as
    `expand` turns it into host time, kernels and syncs. Roots that overlap (two threads) count once.
    `own_cost`: what perfaudit's recording added to the host's time (µs), taken out of the Python gaps and
    of each fetch, each its own (in a fetch the tracer records every call: in a small model's step over half
    of the step's calls are the DataLoader's).
    `undisturbed(step)`: the step's duration less its wait for a CPU held by other processes (µs), taken
    out of the host's measured time (plans.take_out_waits), so a busy machine does not make the host look slow;
    `host_waited(step)`: the training thread's own wait and its fetches', where the recording measured them (µs).
    `freed(a, b)`: the host's time between a and b spent freeing what a GPU would keep (frees.py); `waits(a, b)`:
    the training thread's waits for a collective there (transfers/collectives.py); `compiled(a, b)`: the kernels a
    compiled graph ran there (host/compiled_kernels.py)."""
    plans, step_roots, index = [], [], _Index(trace)
    if own_cost is not None and steps:
        own_cost.prepare(steps[0].ts, steps[-1].end, index.data_starts)
    for step in steps:
        items, cursor = [], step.ts
        data = index.data_ranges(step)
        roots = _outside(index.roots(step), data)  # a fetch's own ops are the host's work: the data item
        for root in roots:
            op = root.op
            if op.ts > cursor and not root.quiet:  # between a recurrent layer's backward nodes: the CPU's engine
                items.extend(gap_items(cursor, op.ts, data, freed, own_cost, waits, compiled))
            expanded = expand(root)  # and a compiled graph's generated kernels in it (a backward node's)
            expanded += [launch for _, _, launch in compiled(op.ts, op.end)] if compiled is not None else []
            if op.ts < cursor:  # inside what was already counted (another thread): no host time of its own
                overlap = min(cursor, op.end) - op.ts
                for item in expanded:
                    item.host_us = max(0.0, item.host_us - overlap) if item.kind == "host" else item.host_us
            items.extend(expanded)
            cursor = max(cursor, op.end)
        if step.end > cursor:
            items.extend(gap_items(cursor, step.end, data, freed, own_cost, waits, compiled))
        plans.append(StepPlan(step.number, step.dur, items))
        step_roots.append([r.op for r in roots])
    take_out_usual_own(plans)
    before = {id(i): i.host_us for p in plans for i in p.items if i.kind == "host"}
    if undisturbed is not None:  # first: perfaudit's own cost is a share of the host's undisturbed time
        take_out_waits(plans, [max(s.dur - undisturbed(s), 0.0) for s in steps],
                       [host_waited(s) for s in steps] if host_waited is not None else None)
    clip_outliers(plans)
    if own_cost is not None:
        take_out_own_rest(plans, before)
        fetches = [[(max(a, s.ts), min(b, s.end)) for a, b in index.data_ranges(s)] for s in steps]
        for p, s, ops, f in zip(plans, steps, step_roots, fetches):
            take_out(p.items, own_cost.in_gaps(s, ops, f)[0])   # the calls and ops the tracer recorded
    return plans


def _outside(roots: list[_Node], ranges: list[tuple[float, float]]) -> list[_Node]:
    """The roots that do not start inside a DataLoader fetch (a Dataset's transforms run on the host, on host
    tensors, whatever the training does on the GPU), and the copies a fetch made (a sample moved to the device)."""
    if not ranges:
        return roots
    out, i = [], 0
    for root in roots:  # both sorted by start
        while i < len(ranges) and ranges[i][1] <= root.op.ts:
            i += 1
        if i < len(ranges) and ranges[i][0] <= root.op.ts < ranges[i][1] and not root.op.name.startswith(H2D_RANGE):
            continue
        out.append(root)
    return out


# -- a CPU trace: each op's kernels from its shapes ---------------------------------------------------------------
def from_shapes(kernel_us: Callable[[Work], float], host_us_per_launch: float, tf32_matmul: bool = False,
                tf32_conv: bool = True, bf16_as: str = "bf16", read_us: float | None = None,
                launch_us: float = 0.0, copy: Callable[[Event], Item | None] | None = None
                ) -> Callable[[_Node], list[Item]]:
    """A root op on the GPU: the host dispatches and launches each kernel (`host_us_per_launch`, not the CPU's
    compute, which the op's recorded time is), the kernels run for what the model says, and an op that reads a
    device value on the host waits for the queue. `read_us`: where the run marked its reads of device values (the
    emulated device), only those wait, then this long for the value to come back; unmarked (a plain CPU run), every
    op that would read a value back waits, for the queue alone. A recurrent layer is one op dispatched, whose
    kernels cuDNN launches (`launch_us` each); a CUDA graph's replay (GRAPH_RANGE), one launch of all its kernels.
    `copy`: a marked copy's item, or a collective's."""
    def expand(root: _Node) -> list[Item]:
        if copy is not None and root.op.name.startswith(PRICED_MARKS):
            return [item for item in (copy(root.op),) if item is not None]
        graph = any(n.op.name == GRAPH_RANGE for n in (root, *root.children))  # a backward node's is below it
        out = [Item("host", host_us=host_us_per_launch)] if graph else []
        per_launch = 0.0 if graph else host_us_per_launch
        for op in (kernel for group in _groups(root) for kernel in with_bias(group)):  # a GPU's bias kernels too
            if copy is not None and kind_of(op.name):
                out.extend(item for item in (copy(op),) if item is not None)
                continue
            layer = rnn_us(op, kernel_us, tf32_conv) if op.name.removesuffix(BACKWARD) in GATES else None
            if layer is not None:
                out.append(Item("launch", host_us=per_launch + launch_us * (layer[1] - 1) * (not graph),
                                gpu_us=layer[0], kernels=layer[1], source=op))
                continue
            work = work_of(op, tf32_matmul, tf32_conv, bf16_as)
            us = kernel_us(work)
            small = work.kernels if work.kind == "memory" and us < SMALL_KERNEL_US * work.kernels else 0
            out.append(Item("launch", host_us=per_launch * work.kernels, gpu_us=us, kernels=work.kernels,
                            small=small, source=op))
        if not out and launches(root.op.name):
            out.append(Item("host", host_us=host_us_per_launch))
        if _has_sync(root, read_us is not None):
            out.append(Item("sync", round_trip_us=read_us or 0.0))
        return out
    return expand


def shapes_retimed(kernel_us: Callable[[Work], float], tf32_matmul: bool = False, tf32_conv: bool = True,
                   bf16_as: str = "bf16") -> Callable[[Item], float]:
    """A modelled launch's GPU time again (from_shapes's, under another `kernel_us`: a what-if's precision),
    from the op it was modelled on."""
    def gpu_us(item: Item) -> float:
        op = item.source
        assert isinstance(op, Event)
        layer = rnn_us(op, kernel_us, tf32_conv) if op.name.removesuffix(BACKWARD) in GATES else None
        return layer[0] if layer is not None else kernel_us(work_of(op, tf32_matmul, tf32_conv, bf16_as))
    return gpu_us


# -- a GPU trace: the kernels it measured -------------------------------------------------------------------------
class Launched:
    """The device events each runtime call launched (by correlation id), and the runtime calls per thread."""

    def __init__(self, trace: Trace):
        by_corr: dict = defaultdict(list)
        for ev in trace.device:
            corr = ev.args.get("correlation")
            if corr is not None and ev.kind != "gpu_annotation":
                by_corr[corr].append(ev)
        self.by_corr = by_corr
        runtime: dict = defaultdict(list)
        for ev in trace.host:
            if ev.kind == "runtime":
                runtime[(ev.pid, ev.tid)].append(ev)
        self.runtime = runtime
        self.starts = {k: [e.ts for e in v] for k, v in runtime.items()}

    def inside(self, op: Event) -> list[Event]:
        key = (op.pid, op.tid)
        calls = self.runtime.get(key)
        if not calls:
            return []
        i = bisect_left(self.starts[key], op.ts)
        out = []
        while i < len(calls) and calls[i].ts < op.end:
            out.append(calls[i])
            i += 1
        return out


OpRatio = Callable[[Event, float], float | None]


def _ratios(launched: Launched, op_ratio: OpRatio | None, root: _Node) -> dict[int, float]:
    """id(runtime call) -> the ratio of the op group that made it."""
    out: dict[int, float] = {}
    if op_ratio is None:
        return out
    for group in _groups(root):
        calls = launched.inside(group)
        us = sum(ev.dur for call in calls for ev in launched.by_corr.get(call.args.get("correlation"), ())
                 if ev.kind == "kernel")
        ratio = op_ratio(group, us) if us > 0 else None
        if ratio is not None:
            for call in calls:
                out[id(call)] = ratio
    return out


def from_kernels(launched: Launched, scale: Callable[[Event], float], copy_scale: float = 1.0,
                 op_ratio: OpRatio | None = None) -> Callable[[_Node], list[Item]]:
    """A root op as the GPU trace measured it: its host time less the time it waited (syncs, blocking
    copies), each kernel it launched with its measured time times its op's factor onto the target
    (`op_ratio(op, its kernels' µs)`, when the op's shapes were recorded), else `scale(kernel)` (1 on the GPU
    it was recorded on); copies times `copy_scale`."""
    def expand(root: _Node) -> list[Item]:
        out, waited = [], 0.0
        by_call = _ratios(launched, op_ratio, root)
        for call in launched.inside(root.op):
            made = launched.by_corr.get(call.args.get("correlation"), ())
            # a copy within the device never holds the host ("no host-side synchronization", CUDA's memcpy docs)
            waits = any(w in call.name for w in WAIT_RUNTIME) and not (made and all(_on_device(ev) for ev in made))
            ratio = by_call.get(id(call))
            for ev in made:
                if ev.kind == "kernel":
                    stream = "comm" if nccl_kernel(ev.name) else "compute"
                    out.append(Item("launch", gpu_us=ev.dur * (ratio if ratio is not None else scale(ev)),
                                    stream=stream, source=(ev, call, root)))
                else:  # memcpy / memset
                    out.append(Item("copy", gpu_us=ev.dur * copy_scale, stream="copy", blocking=waits,
                                    pageable="Pageable" in ev.name, source=(ev, call, root)))
            if waits:
                waited += call.dur
                if "Synchronize" in call.name:
                    out.append(Item("sync"))
        host = max(root.op.dur - waited, 0.0)
        n = sum(1 for i in out if i.kind in ("launch", "copy")) or 1
        for item in out:  # the host's own time spread over the launches, so the queue fills as it did
            if item.kind in ("launch", "copy"):
                item.host_us = host / n
        if not any(i.kind in ("launch", "copy") for i in out):
            out.insert(0, Item("host", host_us=host))
        return out
    return expand


def _on_device(ev: Event) -> bool:
    """A device-to-device memcpy (CUDA's "Memcpy DtoD", ROCm's "CopyDeviceToDevice")."""
    return ev.kind != "kernel" and ("DtoD" in ev.name or "DeviceToDevice" in ev.name)


def kernels_retimed(launched: Launched, scale: Callable[[Event], float],
                    op_ratio: OpRatio | None = None) -> Callable[[Item], float]:
    """A measured kernel's time again (from_kernels's, under another scale and op ratio: a what-if's
    precision), its op group's ratio taken once per root op."""
    by_root: dict[int, dict[int, float]] = {}

    def gpu_us(item: Item) -> float:
        source = item.source
        assert isinstance(source, tuple)
        ev, call, root = source
        by_call = by_root.get(id(root))
        if by_call is None:
            by_call = by_root[id(root)] = _ratios(launched, op_ratio, root)
        ratio = by_call.get(id(call))
        return ev.dur * (ratio if ratio is not None else scale(ev))
    return gpu_us

