"""A CPU run's compiled graphs as a GPU runs them.

On the CPU, torch.compile's inductor generates C++ kernels that the compiled graph's Python wrapper calls: the
Python tracer records each as `<built-in function kernel>` inside the graph's `## Call CompiledFxGraph …` range,
between the graph's extern ops (its matmuls, which have shapes and are modelled as any op is). Their time was
read as the host's Python between ops: 42 ms of a compiled nanoGPT step on a 2-core CPU, projected as host time
on the GPU, where it is a few Triton kernels. Each is now one kernel launch: a launch's host time, and on the
GPU the time of the bytes it moved, estimated from its CPU time at the rate a CPU's generated loops move data
(calibration.yaml's `compiled_cpu_gbs`: a kernel's shapes are not recorded)."""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable

from ...trace.model import Trace
from ..kernels import Work
from ..plans import Item, Kernels

KERNEL_CALL = "<built-in function kernel>"
GRAPH_CALL = "## Call CompiledFxGraph"


def compiled_kernels(trace: Trace, host_us_per_launch: float, kernel_us: Callable[[Work], float],
                     cpu_gbs: float) -> Kernels | None:
    """(start, end, launch item) of each generated kernel run between two instants of a CPU trace, or None when
    the trace ran no compiled graph."""
    if trace.has_gpu:
        return None
    graphs = sorted((e.ts, e.end) for e in trace.host if e.name.startswith(GRAPH_CALL))
    if not graphs:
        return None
    graph_starts = [a for a, _ in graphs]

    def in_graph(ts: float, end: float) -> bool:
        i = bisect_right(graph_starts, ts) - 1
        return i >= 0 and end <= graphs[i][1]
    kernels = sorted((p.ts, p.end) for p in trace.python if p.name == KERNEL_CALL and in_graph(p.ts, p.end))
    if not kernels:
        return None
    starts = [a for a, _ in kernels]

    def within(a: float, b: float) -> list[tuple[float, float, Item]]:
        out, after = [], a
        for k0, k1 in kernels[bisect_left(starts, a):bisect_left(starts, b)]:
            if k1 > b or k0 < after:  # past the stretch, or inside the last one (nested calls count once)
                continue
            moved = (k1 - k0) * cpu_gbs * 1e3  # µs at GB/s: bytes
            out.append((k0, k1, Item("launch", host_us=host_us_per_launch, gpu_us=kernel_us(Work("memory", bytes=moved)),
                                     kernels=1)))
            after = k1
        return out
    return within
