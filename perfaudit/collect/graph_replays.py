"""A CUDA graph's replay is the training step its capture was. A captured step (the PyTorch docs' whole-network
capture: forward, backward and `optimizer.step()` inside `torch.cuda.graph`) never calls the optimizer again:
each replay tells the session's step hooks that the optimizers its capture stepped step again, on a GPU and on
the emulated device alike, so the window counts replays as steps. No step boundary falls inside a capture: the
window's profiler and the device memory's tracking start and stop between steps, never in a captured block."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .wrap import patch

StepHook = Callable[[object, tuple, dict], None]
_capturing: list[int] = []   # the graphs whose capture is under way (their ids)


def in_capture() -> bool:
    return bool(_capturing)


def watch_graph_replays(torch, before_step: StepHook, after_step: StepHook) -> None:
    graph: Any = getattr(getattr(torch, "cuda", None), "CUDAGraph", None)
    if not all(hasattr(graph, m) for m in ("capture_begin", "capture_end", "replay")):
        return
    from torch.optim.optimizer import register_optimizer_step_post_hook
    begin, end, replay = graph.capture_begin, graph.capture_end, graph.replay
    captures: dict[int, tuple] = {}   # id(graph) -> (the optimizers its capture stepped, the hook's handle)

    def capture_begin(self, *args, **kwargs):
        stepped: list = []
        handle = register_optimizer_step_post_hook(lambda opt, a, k: stepped.append(opt))
        captures[id(self)] = (stepped, handle)
        try:
            out = begin(self, *args, **kwargs)
        except BaseException:
            handle.remove()
            raise
        _capturing.append(id(self))
        return out

    def capture_end(self, *args, **kwargs):
        try:
            return end(self, *args, **kwargs)
        finally:
            if id(self) in _capturing:
                _capturing.remove(id(self))
            if id(self) in captures:
                captures[id(self)][1].remove()

    def replayed(self, *args, **kwargs):
        stepped = captures[id(self)][0] if id(self) in captures else ()
        for opt in stepped:
            before_step(opt, (), {})
        out = replay(self, *args, **kwargs)
        for opt in stepped:
            after_step(opt, (), {})
        return out

    patch(graph, "capture_begin", capture_begin)
    patch(graph, "capture_end", capture_end)
    patch(graph, "replay", replayed)
