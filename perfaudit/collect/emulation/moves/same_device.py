"""An op that meets a device tensor and a host tensor raises on a GPU ("Expected all tensors to be on the same
device"): a window made with `torch.hann_window(400)` and multiplied into a batch on the device, a batch's labels
left on the host for the loss, class weights never moved. The emulated device computes everything on the CPU, so
it would run such a script on: it raises as a GPU raises instead (cuda_shim.gpu_error), at the user's line.

Only where the host side is known: a tensor a factory of the user's code made on the host, or a DataLoader's batch
(placement.py's `made` and `from_loader`), with at least one dimension (a 0-dim CPU tensor is a scalar to CUDA
kernels); and only for ops that take no tensor across devices (arithmetic, comparisons, products, concatenation,
losses, `where`, `index_select`, `gather` and `scatter`: "when checking argument for argument index in method
wrapper_gather", a one-hot scattered on the device from host labels): copies and `type_as`-like calls do, and a
device tensor takes host indices, but a host tensor indexed with device indices or a device mask raises ("indices
should be either on cpu or on the same device as the indexed tensor (cpu)", a RuntimeError, as YOLOv7's loss met
it).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ..cuda_shim import gpu_error

MESSAGE = "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"

# the methods as the mode sees them (`a * b` arrives as TensorBase.mul, `a < b` as TensorBase.lt, `a == b` as
# TensorBase.__eq__), on Tensor and TensorBase alike
_METHODS = ("add", "add_", "sub", "sub_", "rsub", "mul", "mul_", "div", "div_", "true_divide", "floor_divide", "where",
            "index_select", "gather", "scatter", "scatter_", "scatter_add", "scatter_add_", "scatter_reduce",
            "scatter_reduce_", "take_along_dim",
            "remainder", "pow", "matmul", "mm", "bmm", "addmm", "maximum", "minimum", "masked_fill", "masked_fill_",
            "eq", "ne", "lt", "le", "gt", "ge", "__eq__", "__ne__", "__and__", "__or__", "__xor__", "__floordiv__",
            "__rpow__", "__rtruediv__", "__rdiv__", "__rmatmul__", "__rsub__", "__mul__", "__add__", "__sub__",
            "__truediv__", "__matmul__", "__iadd__", "__isub__", "__imul__", "__itruediv__")
SAME_DEVICE = frozenset(
    [getattr(cls, n) for cls in (Tensor, torch._C.TensorBase) for n in _METHODS if hasattr(cls, n)]
    + [torch.add, torch.sub, torch.mul, torch.div, torch.matmul, torch.mm, torch.bmm, torch.addmm, torch.cat,
       torch.concat, torch.stack, torch.maximum, torch.minimum, torch.einsum, torch.eq, torch.ne, torch.lt, torch.le,
       torch.gt, torch.ge, torch.where, torch.index_select, torch.gather, torch.scatter, torch.scatter_add,
       torch.scatter_reduce, torch.take_along_dim, F.linear, F.cross_entropy, F.nll_loss, F.mse_loss,
       F.l1_loss, F.smooth_l1_loss, F.binary_cross_entropy, F.binary_cross_entropy_with_logits, F.kl_div, F.embedding,
       F.batch_norm, F.layer_norm, F.group_norm]) | frozenset(CONVOLUTIONS := (torch.conv1d, torch.conv2d, torch.conv3d,
                                                                 torch.conv_transpose1d, torch.conv_transpose2d,
                                                                 torch.conv_transpose3d))
INDEXING = frozenset(getattr(cls, "__getitem__") for cls in (Tensor, torch._C.TensorBase))
INDEX_MESSAGE = "indices should be either on cpu or on the same device as the indexed tensor (cpu)"
SAME_DEVICE = SAME_DEVICE | INDEXING


def _tensors(args, kwargs):
    for value in (*args, *kwargs.values()):
        if isinstance(value, Tensor):
            yield value
        elif isinstance(value, (list, tuple)):  # torch.cat([...]), einsum's operands
            yield from (v for v in value if isinstance(v, Tensor))


def raise_if_mixed(placement, args: tuple, kwargs: dict, func=None) -> None:
    """Raise as a GPU raises when a known host tensor of at least one dimension meets a device tensor; the
    message says where the host one came from (torch's own cannot). A convolution says it as cuDNN's does."""
    on_device, made, loaded = placement.on_device, placement.made, placement.from_loader
    if func in INDEXING:  # a host tensor indexed on the device; a device tensor takes host indices
        indexed = args[0] if args else None
        if isinstance(indexed, Tensor) and indexed.dim() and (made.has(indexed) or loaded.has(indexed)) and any(
                on_device.has(t) for t in _tensors(args[1:], {})):
            raise gpu_error(f"{INDEX_MESSAGE} ({_origin(placement, indexed)})")
        return
    device, host = False, None
    for t in _tensors(args, kwargs):
        if on_device.has(t):
            device = True
        elif t.dim() and (made.has(t) or loaded.has(t)):
            host = t
    if device and host is not None:
        if func in CONVOLUTIONS and args and args[0] is host:  # the input on the host, its weight on the device
            kind = host.type()   # torch.FloatTensor
            raise gpu_error(f"Input type ({kind}) and weight type ({kind.replace('torch.', 'torch.cuda.', 1)}) "
                            f"should be the same or input should be a MKLDNN tensor and weight is a dense tensor "
                            f"({_origin(placement, host)})")
        raise gpu_error(f"{MESSAGE} ({_origin(placement, host)})")


def _origin(placement, t: Tensor) -> str:
    if placement.from_loader.has(t):  # a batch the loop never moved (its dataset's tensors made at some line)
        return "the tensor on the host is a DataLoader batch"
    made = placement.made.get(t)
    site = made[0] if isinstance(made, tuple) and made else None
    if isinstance(site, dict) and site.get("path"):
        return f"the tensor on the host was made at {site['path'].replace(chr(92), '/').rsplit('/', 1)[-1]}:{site['line']}"
    return "a tensor on the host"
