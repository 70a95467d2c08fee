"""The fixed set of automatic fixes a rule file may name (`autofix: {kind: …}`), as data: what each
changes, and whether it must leave the training maths as it is (then `verify` demands the same loss,
step for step, within float tolerance) or may change it (initialisation, data order: a statistical
tolerance). The edits themselves are in edits.py, one per kind."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FixKind:
    description: str
    same_maths: bool     # True: the loss must not change; False: it may, within a statistical tolerance


FIX_KINDS: dict[str, FixKind] = {
    "set_to_none": FixKind("zero_grad(set_to_none=True); `p.grad.zero_()` becomes `p.grad = None`", True),
    "conv_bias_off": FixKind("bias=False on the layers that feed a BatchNorm", False),
    "pin_memory": FixKind("pin_memory=True on the DataLoader and non_blocking=True on the copies", True),
    "loader_workers": FixKind("num_workers=<measured recommendation> and persistent_workers=True on the "
                              "DataLoader", False),
    "debug_off": FixKind("remove set_detect_anomaly(True), unwrap `with detect_anomaly()` and the autograd "
                         "profiler/emit_nvtx blocks", True),
    "cudnn_benchmark_on": FixKind("torch.backends.cudnn.benchmark = True before training", True),
    "cudnn_benchmark_off": FixKind("torch.backends.cudnn.benchmark = False", True),
    "optimizer_multi_tensor": FixKind("fused=True on a CUDA run, foreach=True otherwise, on the optimizer", True),
    "remove_empty_cache": FixKind("remove torch.cuda.empty_cache() from the step", True),
    # a random tensor drawn on the GPU comes from another generator: the same maths, other numbers
    "create_on_device": FixKind("create the tensor with device=… instead of copying it after", False),
    "accumulate_detached": FixKind("accumulate `loss.detach()` instead of `loss.item()`: the value is read "
                                   "once, where it is printed or logged", True),
}
