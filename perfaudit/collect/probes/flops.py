"""Model FLOPs counted in the live process (tip T31): torch's FlopCounterMode over one training step of the
eager model, forward and backward, per module.

The outermost module calls of one warm-up step are noted with their inputs (for a torch.compile'd model,
the call of the compiled module, whose eager forward is the same maths; a GAN's generator and critic, a
loss module called on the logits, each in turn). They are run again, counted, once the script has ended
and its window is saved, so the count never slows a measured step and no later step sees it: the inputs
are detached (nothing flows back into the step's graph) and the parameters' .grad are put back as they
were. A session in the user's own process (a callback, the magic) does not count: training goes on there;
its FLOPs come from the recorded op shapes, as for a trace recorded elsewhere.
"""
from __future__ import annotations

import torch

_MAX_MODULES = 12  # the modules by FLOPs kept in the record
MAX_CALLS = 16     # outermost module calls noted in the step (a GAN's generator and critic, a loss module …)


def flop_formulas() -> dict:
    """What torch's FlopCounterMode lacks. It counts scaled_dot_product_attention's CUDA kernels, not the CPU one
    it dispatches to here: the same formulas for it (its inputs are the query, key and value; its backward's first
    the gradient). And the recurrent layers (_rnn_formulas)."""
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count
    aten = torch.ops.aten
    formulas = {}
    if hasattr(aten, "_scaled_dot_product_flash_attention_for_cpu"):
        formulas[aten._scaled_dot_product_flash_attention_for_cpu] = (
            lambda q, k, v, *args, out_shape=None, **kwargs: sdpa_flop_count(q, k, v))
    if hasattr(aten, "_scaled_dot_product_flash_attention_for_cpu_backward"):
        formulas[aten._scaled_dot_product_flash_attention_for_cpu_backward] = (
            lambda grad, q, k, v, *args, out_shape=None, **kwargs: sdpa_backward_flop_count(grad, q, k, v))
    return formulas | _rnn_formulas()


def _rnn_tokens_weights(x, weights) -> int:
    """A recurrent layer's multiply-adds, doubled: every time step of every sequence (a padded [T, B, F] input's
    T x B, a packed [N, F] one's N) multiplies each of its weight matrices (w_ih, w_hh per layer and direction)."""
    tokens = 1
    for d in x[:-1]:
        tokens *= d
    return 2 * tokens * sum(w[0] * w[1] for w in weights if len(w) == 2)


def _rnn_formulas() -> dict:
    """torch counts no recurrent layer (cuDNN's on a GPU, oneDNN's LSTM on a CPU: the emulated device's): their
    GEMMs, forward, and twice them backward (the inputs' and the weights' gradients)."""
    aten = torch.ops.aten
    found = {name: getattr(aten, name) for name in ("_cudnn_rnn", "_cudnn_rnn_backward", "mkldnn_rnn_layer",
                                                     "mkldnn_rnn_layer_backward") if hasattr(aten, name)}
    forms = {"_cudnn_rnn": lambda x, weights, *a, out_shape=None, **k: _rnn_tokens_weights(x, weights),
             "_cudnn_rnn_backward": lambda x, weights, *a, out_shape=None, **k: 2 * _rnn_tokens_weights(x, weights),
             "mkldnn_rnn_layer": lambda x, w_ih, w_hh, *a, out_shape=None, **k: _rnn_tokens_weights(x, [w_ih, w_hh]),
             "mkldnn_rnn_layer_backward": lambda x, w_ih, w_hh, *a, out_shape=None, **k:
                 2 * _rnn_tokens_weights(x, [w_ih, w_hh])}
    return {op: forms[name] for name, op in found.items()}


def _eager(module):
    """The module torch.compile wrapped (OptimizedModule keeps it as _orig_mod), else the module."""
    return getattr(module, "_orig_mod", module)


def _scalar(output):
    """A scalar to run backward from: the loss the model returned (a tensor, or `.loss` / ["loss"] of a
    model output), else the sum of every floating tensor in the output that needs a gradient."""
    if isinstance(output, torch.Tensor):
        if not output.requires_grad:  # a loss module on detached inputs, a frozen model: no backward
            return None
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
        self.calls: list[tuple] = []  # (module, args, kwargs) of each outermost call in the noted step
        self.record: dict | None = None
        self.skipped: str | None = None
        self._hooks: list = []  # what undoes the capture's hooks
        self._depth = 0

    def install(self) -> None:
        pass

    # -- the model and its inputs, over one warm-up step --------------------------------------------
    def _note(self, module, args, kwargs) -> None:
        if torch.is_grad_enabled() and len(self.calls) < MAX_CALLS:
            self.calls.append((module, args, dict(kwargs)))

    def start_capture(self) -> None:
        if self.calls or self._hooks:
            return
        modules = torch.nn.modules.module

        def pre(module, args):
            self._depth += 1

        def post(module, args, kwargs, output):  # the outermost call ends last: depth back to 0
            self._depth = max(self._depth - 1, 0)
            if self._depth == 0:
                self._note(module, args, kwargs)

        # the pre-hook takes no kwargs when global: the call is noted when it returns
        self._hooks = [modules.register_module_forward_pre_hook(pre).remove,
                       modules.register_module_forward_hook(post, with_kwargs=True).remove]

    def start_compiled_capture(self) -> None:
        """Under torch.compile a global module hook would make the compiled code recompile: the compiled
        model's own call (OptimizedModule.__call__, outside the compiled frame) is noted instead."""
        if self.calls or self._hooks:
            return
        try:
            from torch._dynamo.eval_frame import OptimizedModule
        except ImportError:
            return
        had = "__call__" in OptimizedModule.__dict__
        original = OptimizedModule.__call__

        def __call__(module, *args, **kwargs):
            self._note(module, args, kwargs)
            return original(module, *args, **kwargs)

        setattr(OptimizedModule, "__call__", __call__)  # noqa: B010 (mypy forbids assigning a method)

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
        """Each outermost module call of the noted step again, under FlopCounterMode: its forward on the
        same inputs (detached: nothing flows back into the step's own graph; an input that needed a
        gradient still does), and its backward when its output needs a gradient."""
        self.stop_capture()
        if not self.calls:
            self.skipped = "no module was called with gradients on in the warm-up step"
            return
        models = [_eager(module) for module, _, _ in self.calls]
        params = list({id(p): p for m in models for p in m.parameters() if p.requires_grad}.values())
        saved = [p.grad for p in params]
        try:
            from torch.utils._pytree import tree_map
            from torch.utils.flop_counter import FlopCounterMode
            for p in params:
                p.grad = None
            # cut from the step's graph, but still needing a gradient where the input did (a critic on the
            # generator's output computes its input's gradient in the real step too)
            detach = (lambda x: x.detach().requires_grad_(x.requires_grad)  # noqa: E731
                      if isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex()) else x)
            total = forward = 0
            backward = False
            modules: dict[str, int] = {}
            for (module, args, kwargs), model in zip(self.calls, models):
                with FlopCounterMode(display=False, custom_mapping=flop_formulas()) as counter:
                    output = model(*tree_map(detach, args), **tree_map(detach, kwargs))
                    forward += counter.get_total_flops()
                    loss = _scalar(output)
                    if loss is not None:
                        loss.backward()
                        backward = True
                total += counter.get_total_flops()
                for entry in _top_modules(counter.get_flop_counts(), type(model).__name__):
                    modules[entry["name"]] = modules.get(entry["name"], 0) + entry["flops"]
            biggest = max(zip(self.calls, models), key=lambda cm: sum(p.numel() for p in cm[1].parameters()))
            self.record = {"flops": int(total), "forward_flops": int(forward), "backward": backward,
                           "model": type(biggest[1]).__name__, "calls": len(self.calls),
                           "compiled": any(m is not c[0] for c, m in zip(self.calls, models)),
                           "modules": [{"name": n, "flops": f} for n, f in
                                       sorted(modules.items(), key=lambda kv: -kv[1])[:_MAX_MODULES]]}
        except Exception as exc:  # noqa: BLE001 - extra evidence (a model that needs more than its inputs,
            # out of memory): the report counts from the op shapes instead, and says why
            self.skipped = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        finally:
            for p, grad in zip(params, saved):
                p.grad = grad
            self.calls = []

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
