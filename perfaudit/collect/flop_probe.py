"""Model FLOPs counted in the live process (tip T31): torch's FlopCounterMode over one training step of the
eager model, forward and backward, per module.

The model and its inputs are noted over one warm-up step (the outermost module called with gradients
on: for a torch.compile'd model, the module it compiled, whose eager forward is the same maths). The count
itself runs once the window is written and the script is about to end (`perfaudit run` without --full),
so it never slows a measured step and nothing the script does afterwards sees it: the parameters' .grad
are put back as they were. A run that goes on after the window (--full, a callback, the magic) is not
counted here; its FLOPs come from the recorded op shapes, as for a trace recorded elsewhere.
"""
from __future__ import annotations

import torch

_MAX_MODULES = 12  # the modules by FLOPs kept in the record


def _cpu_attention_formulas() -> dict:
    """torch counts scaled_dot_product_attention's CUDA kernels, not the CPU one it dispatches to here:
    the same formulas for it (its inputs are the query, key and value; its backward's first the gradient)."""
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count
    aten = torch.ops.aten
    formulas = {}
    if hasattr(aten, "_scaled_dot_product_flash_attention_for_cpu"):
        formulas[aten._scaled_dot_product_flash_attention_for_cpu] = (
            lambda q, k, v, *args, out_shape=None, **kwargs: sdpa_flop_count(q, k, v))
    if hasattr(aten, "_scaled_dot_product_flash_attention_for_cpu_backward"):
        formulas[aten._scaled_dot_product_flash_attention_for_cpu_backward] = (
            lambda grad, q, k, v, *args, out_shape=None, **kwargs: sdpa_backward_flop_count(grad, q, k, v))
    return formulas


def _eager(module):
    """The module torch.compile wrapped (OptimizedModule keeps it as _orig_mod), else the module."""
    return getattr(module, "_orig_mod", module)


def _scalar(output):
    """A scalar to run backward from: the loss the model returned (a tensor, or `.loss` / ["loss"] of a
    model output), else the sum of every floating tensor in the output that needs a gradient."""
    if isinstance(output, torch.Tensor):
        return output if output.numel() == 1 else output.float().sum()
    loss = getattr(output, "loss", None)
    if loss is None and isinstance(output, dict):
        loss = output.get("loss")
    if isinstance(loss, torch.Tensor) and loss.requires_grad:
        return loss
    items = output.values() if isinstance(output, dict) else output if isinstance(output, (list, tuple)) else ()
    parts = [t.float().sum() for t in items if isinstance(t, torch.Tensor) and t.requires_grad and t.is_floating_point()]
    return sum(parts) if parts else None


class FlopProbe:
    def __init__(self):
        self.root = None
        self.args: tuple = ()
        self.kwargs: dict = {}
        self.record: dict | None = None
        self.skipped: str | None = None
        self._hooks: list = []  # what undoes the capture's hooks
        self._depth = 0

    def install(self) -> None:
        pass

    # -- the model and its inputs, over one warm-up step --------------------------------------------
    def start_capture(self) -> None:
        if self.root is not None or self._hooks:
            return
        modules = torch.nn.modules.module

        def pre(module, args):
            self._depth += 1

        def post(module, args, kwargs, output):  # the outermost call ends last: depth back to 0
            self._depth = max(self._depth - 1, 0)
            if self._depth == 0 and self.root is None and torch.is_grad_enabled():
                self.root, self.args, self.kwargs = module, args, dict(kwargs)

        # the pre-hook takes no kwargs when global: the call is noted when it returns
        self._hooks = [modules.register_module_forward_pre_hook(pre).remove,
                       modules.register_module_forward_hook(post, with_kwargs=True).remove]

    def start_compiled_capture(self) -> None:
        """Under torch.compile a global module hook would make the compiled code recompile: the compiled
        model's own call (OptimizedModule.__call__, outside the compiled frame) is noted instead."""
        if self.root is not None or self._hooks:
            return
        try:
            from torch._dynamo.eval_frame import OptimizedModule
        except ImportError:
            return
        had = "__call__" in OptimizedModule.__dict__
        original = OptimizedModule.__call__

        def __call__(module, *args, **kwargs):
            if self.root is None and torch.is_grad_enabled():
                self.root, self.args, self.kwargs = module, args, dict(kwargs)
            return original(module, *args, **kwargs)

        OptimizedModule.__call__ = __call__

        def restore():
            if had:
                OptimizedModule.__call__ = original
            else:
                del OptimizedModule.__call__
        self._hooks = [restore]

    def stop_capture(self) -> None:
        for undo in self._hooks:
            undo()
        self._hooks = []
        self._depth = 0

    # -- the count, after the window -----------------------------------------------------------------
    def count(self) -> None:
        """One forward and backward of the noted model on its noted inputs under FlopCounterMode."""
        self.stop_capture()
        if self.root is None:
            self.skipped = "no module was called with gradients on in the warm-up step"
            return
        model = _eager(self.root)
        params = [p for p in model.parameters() if p.requires_grad]
        saved = [p.grad for p in params]
        try:
            from torch.utils.flop_counter import FlopCounterMode
            for p in params:
                p.grad = None
            with FlopCounterMode(display=False, custom_mapping=_cpu_attention_formulas()) as counter:
                output = model(*self.args, **self.kwargs)
                forward = counter.get_total_flops()
                loss = _scalar(output)
                if loss is not None:
                    loss.backward()
            total = counter.get_total_flops()
            by_module = counter.get_flop_counts()
            self.record = {"flops": int(total), "forward_flops": int(forward), "backward": loss is not None,
                           "model": type(model).__name__, "compiled": model is not self.root,
                           "modules": _top_modules(by_module, type(model).__name__)}
        except Exception as exc:  # noqa: BLE001 - extra evidence (a model that needs more than its inputs,
            # out of memory): the report counts from the op shapes instead, and says why
            self.skipped = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        finally:
            for p, grad in zip(params, saved):
                p.grad = grad
            self.root, self.args, self.kwargs = None, (), {}

    def snapshot(self) -> dict | None:
        if self.record is None:
            return {"skipped": self.skipped} if self.skipped else None
        return self.record


def _top_modules(counts: dict, root: str) -> list[dict]:
    """The direct children of the model by FLOPs ("GPT.blocks", "GPT.head"), from FlopCounterMode's
    per-module counts (its keys are dotted paths from the model, "Global" the whole)."""
    out = []
    for name, ops in counts.items():
        if name == "Global" or name.count(".") != 1 or not name.startswith(root + "."):
            continue
        out.append({"name": name.split(".", 1)[1], "flops": int(sum(ops.values()))})
    out.sort(key=lambda m: -m["flops"])
    return out[:_MAX_MODULES]
