"""A distributed job's collectives on the target, from a CPU run of it (the emulated device's NCCL job runs on gloo).

Each collective the rank's training thread called (`c10d::allreduce_`, `c10d::broadcast_`, an all-gather or a
reduce-scatter, with the tensors' sizes) becomes a launch on the communication stream, timed as nccl-tests times
it: its bytes times the collective's bus factor (an all-reduce moves 2(n-1)/n of them over each GPU's link, an
all-gather or reduce-scatter (n-1)/n) over the target's bus bandwidth, plus a fixed latency. Where the training
thread sat idle, without Python, while gloo's thread ran a collective (DDP's reducer waiting for its buckets at the
end of backward), a GPU's host does not wait: the compute stream waits for the communication stream (a `join`),
and the host runs on. The gradients' dtype is not in a CPU trace's record of a bucket: float32, DDP's unless the
model is in 16 bits.
"""
from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from math import prod

from ...trace.model import Event, Trace
from ..devices import Device
from ..plans import Item

# c10d's op names (the dispatcher's, as torch.profiler records them) -> the bus factor's kind
_KINDS = {"allreduce_": "allreduce", "allreduce_coalesced_": "allreduce", "broadcast_": "broadcast",
          "allgather_": "gather", "_allgather_base_": "gather", "allgather_into_tensor_coalesced_": "gather",
          "reduce_scatter_": "scatter", "_reduce_scatter_base_": "scatter", "reduce_scatter_tensor_coalesced_": "scatter",
          "reduce_": "broadcast", "alltoall_": "gather", "alltoall_base_": "gather"}  # gather: the first argument whole
# the backend's own range of a collective on its thread (gloo's, on a CPU run)
BACKEND_RANGES = ("gloo:",)


def kind_of(name: str) -> str | None:
    """The collective a c10d op is (allreduce, broadcast, gather, scatter), else None."""
    return _KINDS.get(name.removeprefix("c10d::")) if name.startswith("c10d::") else None


def bus_factor(kind: str, ranks: int) -> float:
    """What share of a collective's bytes crosses each GPU's link (nccl-tests' bus bandwidth, PERFORMANCE.md)."""
    if ranks <= 1:
        return 0.0
    return {"allreduce": 2 * (ranks - 1) / ranks, "broadcast": 1.0}.get(kind, (ranks - 1) / ranks)


def payload_bytes(op: Event, kind: str, ranks: int, element_bytes: int = 4) -> int:
    """The bytes a collective moves, as nccl-tests counts them: its first argument's tensors (c10d's ops take the
    output first: an all-gather's is the whole, a reduce-scatter's one rank's shard of it)."""
    dims = op.args.get("Input Dims") if isinstance(op.args, dict) else None
    first = dims[0] if isinstance(dims, list) and dims and isinstance(dims[0], list) else []
    tensors = first if first and isinstance(first[0], list) else [first]  # a TensorList, or one tensor
    sizes = [prod(t) for t in tensors if isinstance(t, list) and t and all(_size(d) for d in t)]
    elements = sum(n for n in sizes if n < 1 << 48)  # a tensor no GPU holds: a corrupt record, left out
    return elements * element_bytes * (ranks if kind == "scatter" else 1)


def _size(d) -> bool:
    """A dimension as a trace records one (a non-negative int); anything else leaves its tensor out."""
    return isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 1 << 48


def bus_gbs(target: Device, cal: dict) -> float:
    """The target's collective bus bandwidth, GB/s: measured (nccl-tests) where the table has it, else its
    NVLink's rate times the share nccl-tests reaches of it, else its PCIe generation's."""
    if target.nccl_busbw_gbs:
        return target.nccl_busbw_gbs
    if target.nvlink_gbs:
        return target.nvlink_gbs * cal["nccl_nvlink_share"]
    return cal["nccl_pcie_busbw_gbs"][target.pcie]


def collective_timer(target: Device, cal: dict, ranks: int, host_us: float) -> Callable[[Event], Item | None]:
    """A c10d collective's item on the target: launched by the host (a kernel's launch), run on the communication
    stream. None for an op that is not a collective."""
    gbs, latency = bus_gbs(target, cal), cal["nccl_latency_us"]

    def item(op: Event) -> Item | None:
        kind = kind_of(op.name)
        if kind is None:
            return None
        moved = payload_bytes(op, kind, ranks) * bus_factor(kind, ranks)
        return Item("launch", host_us=host_us, gpu_us=latency + moved / (gbs * 1e3), stream="comm", kernels=1,
                    source=op)
    return item


def with_collectives(copy: Callable[[Event], Item | None] | None, collective: Callable[[Event], Item | None]
                     ) -> Callable[[Event], Item | None]:
    """timeline.from_shapes's `copy` (a marked copy's item) that also makes each collective's."""
    return lambda op: collective(op) if kind_of(op.name) else (copy(op) if copy is not None else None)


def nccl_kernel(name: str) -> bool:
    """Whether a GPU trace's kernel is a collective's (NCCL's, RCCL's)."""
    low = name.lower()
    return "nccl" in low or "rccl" in low


def ranks_of(trace: Trace) -> int:
    """The job's size as the trace's distributedInfo gives it (torch writes it under torch.distributed); 1 if none."""
    info = trace.meta.get("distributedInfo") if isinstance(trace.meta, dict) else None
    size = info.get("world_size") if isinstance(info, dict) else None
    return size if isinstance(size, int) and not isinstance(size, bool) and 0 < size < 1 << 20 else 1


def waits_for(trace: Trace) -> Callable[[float, float], list[tuple[float, float]]] | None:
    """`waits(a, b)`: the parts of a stretch of the training thread's time (between two of its ops) it spent
    waiting for a collective: inside a span of the backend's (gloo's ranges on its threads), with no Python call
    of that thread starting there. None for a trace without such spans."""
    spans: list[tuple[float, float]] = []  # their union: two threads' collectives overlap
    for a, b in sorted((e.ts, e.end) for e in trace.host if e.name.startswith(BACKEND_RANGES)):
        if spans and a <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(b, spans[-1][1]))
        else:
            spans.append((a, b))
    callers = {e.tid for e in trace.host if kind_of(e.name)}
    if not spans or not callers:
        return None
    python = [e.ts for e in trace.python if e.tid in callers]

    def waits(start: float, end: float) -> list[tuple[float, float]]:
        out: list[tuple[float, float]] = []
        for a, b in spans[max(bisect_left(spans, (start,)) - 1, 0):bisect_left(spans, (end,))]:
            a, b = max(a, start), min(b, end)
            if b > a and bisect_left(python, b) == bisect_left(python, a):
                out.append((a, b))
        return out
    return waits
