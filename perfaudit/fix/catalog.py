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
    looks_for: str = ""  # the code the edit changes, as a reader would name it (said when it finds none)


FIX_KINDS: dict[str, FixKind] = {
    "set_to_none": FixKind("zero_grad(set_to_none=True); `p.grad.zero_()` becomes `p.grad = None`", True,
                           "a zero_grad() call or a `p.grad.zero_()`"),
    # verify's B still draws the removed biases' initial values (collect/run/init_draws.py): every other weight
    # starts as A's, and a bias a BatchNorm in training subtracts again changes no loss
    "conv_bias_off": FixKind("bias=False on the layers that feed a BatchNorm", True, "a Conv or Linear constructor"),
    "pin_memory": FixKind("pin_memory=True on the DataLoader and non_blocking=True on the copies (where "
                          "Accelerate moves the batches, on its Accelerator's DataLoaderConfiguration)", True,
                          "a DataLoader(...) call, a `.to(device)` / `.cuda()` copy or an Accelerator(...)"),
    "loader_workers": FixKind("num_workers=<measured recommendation> and persistent_workers=True on the "
                              "DataLoader", False, "a DataLoader(...) call"),
    "debug_off": FixKind("remove set_detect_anomaly(True) and _record_memory_history(...), unwrap `with "
                         "detect_anomaly()` and the autograd profiler/emit_nvtx blocks", True,
                         "a set_detect_anomaly(True) or _record_memory_history(...) call or a debug `with` block"),
    "cudnn_benchmark_on": FixKind("torch.backends.cudnn.benchmark = True before training", True,
                                  "a statement to put `torch.backends.cudnn.benchmark = True` before"),
    "cudnn_benchmark_off": FixKind("torch.backends.cudnn.benchmark = False", True,
                                   "an assignment to torch.backends.cudnn.benchmark"),
    "optimizer_multi_tensor": FixKind("fused=True where the CUDA path ran (a GPU, or emulated), foreach=True otherwise, "
                                      "on the optimizer", True,
                                      "an optimizer constructor"),
    "remove_empty_cache": FixKind("remove torch.cuda.empty_cache() from the step", True, "an empty_cache() call"),
    # a random tensor drawn on the GPU comes from another generator: the same maths, other numbers
    "create_on_device": FixKind("create the tensor with device=… instead of copying it after", False,
                                "a tensor created on the host and moved to the device"),
    "accumulate_detached": FixKind("accumulate `loss.detach()` instead of `loss.item()`: the value is read "
                                   "once, where it is printed or logged; torch's own per-step checks off "
                                   "(clip_grad_norm_'s error_if_nonfinite, torch.distributions' validate_args)",
                                   True, "an `x += t.item()` accumulation, a clip_grad_norm_(error_if_nonfinite=True) "
                                   "or a torch.distributions constructor"),
}
