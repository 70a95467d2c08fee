"""CUDA graphs on the emulated device: `torch.cuda.CUDAGraph`, `torch.cuda.graph` and (torch's own code on top
of them) `make_graphed_callables`. A capture records the aten ops the captured code ran, below autograd (a
TorchDispatchMode: the forward, autograd's backward, the optimizer's update), and runs them as it goes, as a
GPU's capture does not; a replay runs them again on the tensors they were captured with and writes each result
into the tensor the capture made, as a GPU's replay writes into the graph's memory, so the script's static
inputs and outputs work as they do there. A replay is one range in the trace (probe_schema.GRAPH_RANGE): the
projection gives its kernels one launch; the ranges the capture saw (the optimizer's step) are opened in it
again. What a GPU's capture refuses (the host waiting for the device: an `.item()`, a synchronize) raises as it
does there."""
from __future__ import annotations

import itertools
from contextlib import ExitStack

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from ....probe_schema import ASIDE_RANGE, GRAPH_RANGE
from ...wrap import patch
from ..cuda_shim import gpu_error
from ..marks import span

# torch's words (cudaErrorStreamCaptureUnsupported) when a capture does what capture forbids
NOT_PERMITTED = "CUDA error: operation not permitted when stream is capturing"
_pools = itertools.count(1)
_RANGE_ENTER = torch.ops.profiler._record_function_enter_new.default
_RANGE_EXIT = torch.ops.profiler._record_function_exit._RecordFunction


class _Capture(TorchDispatchMode):
    """Runs each aten op and keeps it, its arguments and the tensors it returned."""

    def __init__(self):
        super().__init__()
        self.ops: list[tuple] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.namespace != "profiler":
            self.ops.append((func, args, kwargs, [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]))
        # a range (Optimizer.step#Adam.step, the script's record_function): its start (name) and end, opened
        # again around the same ops at each replay, so the trace tells the captured update apart
        elif func is _RANGE_ENTER and args and isinstance(args[0], str):
            self.ops.append((None, args[0], None, None))
        elif func is _RANGE_EXIT:
            self.ops.append((None, None, None, None))
        return out


_capturing: list[_Capture] = []   # the capture under way (one at a time, as torch allows)


def capturing() -> bool:
    """torch.cuda.is_current_stream_capturing()."""
    return bool(_capturing)


def refuse_a_wait_in_capture() -> None:
    """The host is about to wait for the device (a read of a device value, a synchronize): a GPU's capture
    fails there."""
    if _capturing:
        raise gpu_error(NOT_PERMITTED)


class CUDAGraph:
    """torch.cuda.CUDAGraph: the captured ops, replayed on the CPU."""

    def __init__(self, keep_graph: bool = False):
        self._ops: list[tuple] | None = None
        self._pool: object = None
        self._capture: _Capture | None = None

    def capture_begin(self, pool=None, capture_error_mode: str = "global", **_) -> None:
        if _capturing:
            raise gpu_error("CUDA error: operation not permitted when stream is capturing (a capture is under way)")
        self._pool = pool if pool is not None else pool_handle()
        self._capture = _Capture()
        self._capture.__enter__()
        _capturing.append(self._capture)

    def capture_end(self) -> None:
        capture, self._capture = self._capture, None
        if capture is None:
            raise RuntimeError("capture_end() without capture_begin()")
        _capturing.remove(capture)
        capture.__exit__(None, None, None)
        self._ops = capture.ops

    def replay(self) -> None:
        if self._ops is None:
            raise RuntimeError("Called CUDAGraph::replay without a preceding successful capture.")
        with span(GRAPH_RANGE), torch.no_grad(), torch._C.DisableTorchFunction(), ExitStack() as ranges:
            opened = []
            for func, args, kwargs, outs in self._ops:
                if func is None:  # a captured range's start (its name) or end
                    if args is not None:
                        opened.append(ranges.enter_context(ExitStack()))
                        opened[-1].enter_context(span(args))
                    elif opened:
                        opened.pop().close()
                    continue
                made = func(*args, **kwargs)
                if outs:
                    for captured, now in zip(outs, tree_leaves(made)):
                        if now is not captured:
                            _write(captured, now, func)

    def reset(self) -> None:
        self._ops = None

    def instantiate(self) -> None:
        pass

    def pool(self):
        return self._pool

    def enable_debug_mode(self) -> None:
        pass

    def debug_dump(self, debug_path: str) -> None:
        pass

    def raw_cuda_graph(self) -> int:
        return 0

    def raw_cuda_graph_exec(self) -> int:
        return 0


def _write(captured: torch.Tensor, now, func) -> None:
    """Put a replayed op's result where the capture's is (a view of the same memory is already there): a copy no
    GPU makes, set aside for the projection (probe_schema.ASIDE_RANGE)."""
    if not isinstance(now, torch.Tensor):
        return
    if captured.shape != now.shape:  # a shape that depends on the data: a GPU's capture would have refused it
        raise gpu_error(f"{NOT_PERMITTED} ({func.name()} made a tensor whose shape depends on its data)")
    if (captured.untyped_storage().data_ptr() == now.untyped_storage().data_ptr()
            and captured.storage_offset() == now.storage_offset() and captured.stride() == now.stride()):
        return
    with span(ASIDE_RANGE):
        captured.copy_(now)


class graph:
    """torch.cuda.graph(cuda_graph, pool=None, stream=None, capture_error_mode="global"): captures its block.
    (torch's also synchronizes and empties the cache first: calls a GPU makes once, for the capture.)"""
    default_capture_stream = None

    def __init__(self, cuda_graph: CUDAGraph, pool=None, stream=None, capture_error_mode: str = "global", **_):
        self.cuda_graph, self.pool, self.capture_error_mode = cuda_graph, pool, capture_error_mode

    def __enter__(self) -> None:
        self.cuda_graph.capture_begin(self.pool, capture_error_mode=self.capture_error_mode)

    def __exit__(self, *exc) -> None:
        self.cuda_graph.capture_end()


def pool_handle() -> tuple[int, int]:
    """torch.cuda.graph_pool_handle(): a token naming a memory pool."""
    return (0, next(_pools))


def serve_graphs() -> None:
    """torch.cuda's graph API as this module serves it; `make_graphed_callables` is torch's own, on top."""
    from torch.cuda import graphs as torch_graphs

    from ..cuda_shim import _Stream
    served = {"CUDAGraph": CUDAGraph, "graph": graph, "graph_pool_handle": pool_handle,
              "is_current_stream_capturing": capturing}
    for name, value in served.items():
        patch(torch.cuda, name, value)
        patch(torch_graphs, name, value)
    patch(torch.cuda, "make_graphed_callables", torch_graphs.make_graphed_callables)
    patch(_Stream, "is_capturing", lambda self: capturing())
