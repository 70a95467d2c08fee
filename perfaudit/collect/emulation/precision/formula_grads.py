"""A 16-bit op's input gradients from their formulas, in float32, for InFloat32's backward (half_math.py): the
kernels a GPU's backward runs (two products; a convolution's data and weight gradients), not the forward again
under autograd, which doubled a linear layer's or a convolution's time. The inputs kept by InFloat32.forward
are the ones these need; one no gradient needs stands as zeros of its shape."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ....probe_schema import ASIDE_RANGE as ASIDE
from ..marks import span
from .convolutions import CONVOLUTIONS, PARAMETERS, conv_options, per_dim

_PRODUCTS = {F.linear, torch.mm, Tensor.mm, torch.bmm, Tensor.bmm}


def formula_grads(ctx, grad: Tensor, needs) -> list | None:
    """The input gradients of ctx's op in its 16-bit type, or None where no formula here serves (another op,
    keyword arguments a product does not take, a convolution's padding given as 'same' or 'valid')."""
    if ctx.func in _PRODUCTS and not ctx.kwargs:
        return _product_grads(ctx, grad, needs)
    if ctx.func in CONVOLUTIONS:
        return _convolution_grads(ctx, grad, needs)
    return None


def _inputs(ctx, fill: bool) -> dict[int, Tensor]:
    """The op's tensor inputs in float32 by position: those kept, and with `fill` zeros of its shape for the
    others (a convolution's backward takes both operands, whichever gradients it makes)."""
    saved = dict(zip(ctx.kept, ctx.saved_tensors))
    with span(ASIDE):
        return {i: saved[i].float() if i in saved else torch.zeros(ctx.shapes[i], device="cpu")
                for i in ctx.at if fill or i in saved}


def _product_grads(ctx, grad: Tensor, needs) -> list:
    """A linear layer's or a (batched) matrix product's input gradients: two products, as a GPU's backward
    makes them."""
    with span(ASIDE):
        g = grad.float()
    wide = _inputs(ctx, fill=False)
    result: list = [None] * len(needs)
    if ctx.func is F.linear:
        rows = g.reshape(-1, g.shape[-1])
        if needs[0]:
            result[0] = g @ wide[1]
        if needs[1]:
            result[1] = rows.T @ wide[0].reshape(-1, wide[0].shape[-1])
        if len(needs) > 2 and needs[2]:
            result[2] = rows.sum(0)
    else:
        if needs[0]:
            result[0] = g @ wide[1].transpose(-1, -2)
        if needs[1]:
            result[1] = wide[0].transpose(-1, -2) @ g
    with span(ASIDE):
        return [r.to(ctx.dtype) if r is not None else None for r in result]


def _convolution_grads(ctx, grad: Tensor, needs) -> list | None:
    """A convolution's input, weight and bias gradients: aten's convolution_backward in float32, the one call a
    GPU's backward makes for them."""
    dims, transposed = CONVOLUTIONS[ctx.func]
    if set(ctx.kwargs) - set(PARAMETERS[transposed]) or any(isinstance(v, Tensor) for v in ctx.kwargs.values()):
        return None
    options = conv_options(tuple(ctx.others[2:]), ctx.kwargs, transposed)
    if isinstance(options.get("padding"), str):
        return None  # 'same' may pad one side more: the forward again under autograd serves it
    wide = _inputs(ctx, fill=True)
    x, w = wide[0], wide[1]
    with span(ASIDE):
        g = grad.float()
    unbatched = x.dim() == dims + 1
    if unbatched:
        x, g = x.unsqueeze(0), g.unsqueeze(0)
    groups = int(options.get("groups") or 1)
    bias = 2 in ctx.at
    bias_sizes = [w.shape[1] * groups if transposed else w.shape[0]] if bias else None
    data, weight, bias_grad = torch.ops.aten.convolution_backward(
        g, x, w, bias_sizes, per_dim(options.get("stride"), dims, 1), per_dim(options.get("padding"), dims, 0),
        per_dim(options.get("dilation"), dims, 1), transposed, per_dim(options.get("output_padding"), dims, 0),
        groups, [bool(needs[0]), bool(needs[1]), bias and bool(needs[2])])
    if unbatched and data is not None:
        data = data.squeeze(0)
    result: list = [None] * len(needs)
    for i, r in enumerate((data, weight, bias_grad)):
        if i < len(needs) and needs[i] and r is not None:
            with span(ASIDE):
                result[i] = r.to(ctx.dtype)
    return result

