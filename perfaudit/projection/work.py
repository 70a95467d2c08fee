"""What each recorded op would make the GPU do (`Work`): the FLOPs of matrix, convolution and attention
ops from their recorded input shapes (torch's conventions: a multiply-add is two FLOPs, a bias add and
causal masking are not counted, attention's backward recomputes its scores), the bytes every other op moves,
and which ops launch kernels at all (a view, an allocation or a wrapper launches none of its own)."""
from __future__ import annotations

from math import ceil, prod

import msgspec

from ..trace.model import Event
from ..trace.op_names import ATTENTION_BACKWARD_OPS, ATTENTION_OPS, CONV_OPS, MM_OPS, RNN_BACKWARD_OPS, RNN_OPS
from .kernels import PRECISION, Work
from .rnn import rnn_flops

# ops whose whole subtree is one piece of math on the GPU (a CPU convolution's slow path calls matmuls)
SDPA = "aten::scaled_dot_product_attention"
GROUP_OPS = MM_OPS | CONV_OPS | ATTENTION_OPS | ATTENTION_BACKWARD_OPS | {SDPA}
# ops that launch no kernel: views, allocations, metadata
NO_KERNEL = frozenset(f"aten::{n}" for n in (
    "empty", "empty_like", "empty_strided", "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided",
    "expand", "expand_as", "t", "transpose", "permute", "select", "slice", "narrow", "unsqueeze", "squeeze",
    "flatten", "unflatten", "alias", "detach", "detach_", "lift_fresh", "resize_", "set_", "split", "chunk",
    "unbind", "split_with_sizes", "view_as", "numpy_T", "size", "stride", "is_same_size", "result_type",
    "to", "_to_copy", "contiguous", "lift_fresh_copy", "is_nonzero", "item", "_local_scalar_dense",
    "record_stream", "zeros_like", "ones_like", "new_empty", "new_empty_strided", "_has_compatible_shallow_copy_type",
    "requires_grad_", "retain_grad", "pin_memory", "_pin_memory", "is_pinned", "clone", "_lazy_clone"))
# a foreach op is one kernel per group of tensors on a GPU (ATen's multi_tensor_apply: at most this many tensors a
# launch, by how many tensor lists it passes), where a CPU runs it as a loop of per-tensor ops
FOREACH = "aten::_foreach_"
FOREACH_TENSORS_PER_LAUNCH = (110, 64, 48, 36, 30)
# a CPU read of a device value: the host waits for the GPU's queue to drain
SYNC_OPS = frozenset({"aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero", "aten::masked_select",
                      "aten::unique", "aten::_unique2", "aten::equal", "aten::allclose"})
REDUCTIONS = ("sum", "mean", "amax", "amin", "max", "min", "norm", "var", "std", "argmax", "argmin", "all", "any",
              "nll_loss", "linalg_vector_norm", "_foreach_norm", "prod", "logsumexp")
ELEMENT_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "int": 4,
                 "short int": 2, "bool": 1, "unsigned char": 1, "signed char": 1, "c10::Float8_e4m3fn": 1,
                 "c10::Float8_e5m2": 1, "c10::complex<float>": 8, "c10::complex<double>": 16}


def _attention(q, k, v) -> float:
    """QK^T and PV of scaled dot-product attention; key/value may have fewer heads (GQA)."""
    b, h, lq, e = q
    s, ev = k[-2], v[-1]
    return 2.0 * b * h * lq * s * e + 2.0 * b * h * lq * s * ev


def _conv_out(x: list, w: list, concrete: list | None) -> list:
    """The output's spatial size, from stride, padding and dilation when the trace kept them (else the
    input's: stride 1 and same padding)."""
    spatial = list(x[2:])
    if concrete is None:
        return spatial
    try:
        stride, padding, dilation = (_ints(concrete[i], len(spatial)) for i in (3, 4, 5))
    except (TypeError, ValueError, IndexError):
        return spatial
    return [(n + 2 * p - d * (kernel - 1) - 1) // s + 1
            for n, kernel, s, p, d in zip(spatial, w[2:], stride, padding, dilation)]


def _conv_output(x: list, w: list, concrete: list | None) -> tuple:
    """A convolution's output channels and spatial size; a transposed one's (its weight is in, out, ...) as its
    input's spatial size (a close bound)."""
    transposed = isinstance(concrete, list) and len(concrete) > 6 and str(concrete[6]) in ("True", "1")
    return (w[1], x[2:]) if transposed else (w[0], _conv_out(x, w, concrete))


def _ints(text, n: int) -> list[int]:
    values = [int(v) for v in str(text).strip("[]() ").split(",") if v.strip()]
    if len(values) == 1:
        values *= n
    if len(values) != n:
        raise ValueError(text)
    return values


def op_flops(op) -> float:
    """FLOPs of one recorded op from its input shapes; 0 when they are missing or not understood."""
    dims = op.args.get("Input Dims") or []
    name = op.name
    try:
        if name == "aten::mm":
            (m, k), (_, n) = dims[0], dims[1]
            return 2.0 * m * k * n
        if name == "aten::addmm":
            (m, k), (_, n) = dims[1], dims[2]
            return 2.0 * m * k * n
        if name == "aten::bmm":
            (b, m, k), (_, _, n) = dims[0], dims[1]
            return 2.0 * b * m * k * n
        if name == "aten::baddbmm":
            (b, m, k), (_, _, n) = dims[1], dims[2]
            return 2.0 * b * m * k * n
        if name == "aten::convolution":
            x, w = dims[0], dims[1]
            _, spatial = _conv_output(x, w, op.args.get("Concrete Inputs"))
            return 2.0 * x[0] * prod(w) * prod(spatial)
        if name == "aten::convolution_backward":  # grad_output holds the output's size: input and weight grads
            grad, x, w = dims[0], dims[1], dims[2]
            concrete = op.args.get("Concrete Inputs")
            mask = str(concrete[10]) if isinstance(concrete, list) and len(concrete) > 10 else ""
            wanted = sum(1 for flag in mask.strip("[]() ").split(",")[:2] if flag.strip() == "True") if mask else 2
            return wanted * 2.0 * x[0] * prod(w) * prod(grad[2:])
        if name in ATTENTION_OPS:
            return _attention(dims[0], dims[1], dims[2])
        if name in ATTENTION_BACKWARD_OPS:  # scores recomputed, then four products: 2.5x the forward
            return 2.5 * _attention(dims[1], dims[2], dims[3])
        if name in RNN_OPS or name in RNN_BACKWARD_OPS:
            return rnn_flops(op)
    except (TypeError, ValueError, IndexError):
        return 0.0
    return 0.0


def _numel(dims) -> int:
    """Elements of one input's recorded dims; a tensor list's dims are a list of lists."""
    if not isinstance(dims, list) or not dims:
        return 0
    if isinstance(dims[0], list):
        return sum(_numel(d) for d in dims)
    if not all(type(d) is int and 0 <= d < 1 << 40 for d in dims):  # a trace's numbers: hostile until checked
        return 0
    return prod(dims)


def input_bytes(op: Event) -> list[int]:
    """Bytes of each tensor input (0 for scalars and inputs of an unknown type)."""
    dims, types = op.args.get("Input Dims") or [], op.args.get("Input type") or []
    out = []
    for d, t in zip(dims, types):
        size = ELEMENT_BYTES.get(t) if isinstance(t, str) else None
        if size is None and isinstance(t, str) and t.startswith("TensorList"):
            size = 4
        out.append(_numel(d) * size if size else 0)
    return out


def precision(op: Event, tf32: bool, bf16_as: str = "bf16") -> str:
    """The math's precision from the op's input types; `bf16_as`: what a bfloat16 op stands for ("fp16" in a
    trace an older perfaudit's emulated run recorded, which ran float16 autocast as bfloat16)."""
    types = [t for t in (op.args.get("Input type") or [])[:3] if isinstance(t, str)]
    for t in types:
        if t in PRECISION:
            return bf16_as if t == "c10::BFloat16" else PRECISION[t]
    return "tf32" if tf32 else "fp32"


def _gemm(op: Event) -> tuple:
    """A matrix op's (batch, m, n, k); a convolution's implicit GEMM (a row per output pixel, a column per
    output channel, the reduction over input channels and the kernel window); attention's score product.
    () when the recorded dims are not four sizes (a hostile or odd trace)."""
    shape = _gemm_dims(op)
    return shape if all(type(d) is int and 0 < d < 1 << 40 for d in shape) else ()


def _gemm_dims(op: Event) -> tuple:
    dims = op.args.get("Input Dims") or []
    name = op.name
    try:
        if name == "aten::mm":
            return 1, dims[0][0], dims[1][1], dims[0][1]
        if name == "aten::addmm":
            return 1, dims[1][0], dims[2][1], dims[1][1]
        if name == "aten::bmm":
            return dims[0][0], dims[0][1], dims[1][2], dims[0][2]
        if name == "aten::baddbmm":
            return dims[1][0], dims[1][1], dims[2][2], dims[1][2]
        if name in CONV_OPS:
            x, w = (dims[1], dims[2]) if name.endswith("backward") else (dims[0], dims[1])
            return 1, x[0] * prod(x[2:]), w[0], prod(w[1:])
        if name in ATTENTION_OPS or name == SDPA:
            q, k = dims[0], dims[1]
            return q[0] * q[1], q[2], k[2], q[3]
        if name in ATTENTION_BACKWARD_OPS:
            q, k = dims[1], dims[2]
            return q[0] * q[1], q[2], k[2], q[3]
    except (TypeError, ValueError, IndexError):
        return ()
    return ()


def work_of(op: Event, tf32_matmul: bool = False, tf32_conv: bool = True, bf16_as: str = "bf16") -> Work:
    """What `op` (a kernel group: see `groups`) makes the GPU do. TF32: torch's defaults (off for matmuls
    since 1.12, on for cuDNN convolutions) unless the run said otherwise."""
    name = op.name
    sizes = input_bytes(op)
    if name.endswith(BIAS):
        return Work("memory", bytes=float(_bias_bytes(op, sizes)))
    if name in GROUP_OPS:
        kind = "conv" if name in CONV_OPS else "matmul" if name in MM_OPS else "attention"
        flops = op_flops(op) if name != SDPA else _sdpa_flops(op)
        return Work(kind, flops=flops, bytes=float(sum(sizes) + _output_bytes(op, sizes)),
                    precision=precision(op, tf32_conv if kind == "conv" else tf32_matmul, bf16_as), gemm=_gemm(op),
                    kernels=2 if name.endswith("backward") else 1)
    if name.startswith(FOREACH):
        return _foreach_work(op, sizes)
    short = name.split("::", 1)[-1]
    total, largest = sum(sizes), max(sizes, default=0)
    if short in ("fill_", "zero_", "zeros", "ones", "full", "normal_", "uniform_", "bernoulli_", "randn", "rand"):
        moved = largest
    elif short.startswith(REDUCTIONS) or short.endswith("_backward") and "loss" in short:
        moved = total
    elif short in ("_softmax", "_log_softmax", "softmax", "log_softmax") and sizes:
        moved = (1 if _row(op) <= 1024 else 2) * sizes[0] + sizes[0]  # a long row is read again for its sums
    elif short in ("native_layer_norm", "layer_norm") and sizes:
        moved = 3 * sizes[0] + sum(sizes[1:])  # read for its statistics, read again to normalise, written
    elif short == "embedding" and len(sizes) > 1:  # the rows looked up, read and written, and the indices
        moved = 2 * _embedding_out(op) + sizes[1]
    else:
        moved = total + largest
    return Work("memory", bytes=float(moved))


# a convolution's bias on a GPU, a kernel of its own: cuDNN's convolution has no bias, torch adds it after it with
# an elementwise kernel and sums the output's gradient for the bias's in backward (the A100 AlexNet trace of
# tests/data/gpu_traces: an elementwise kernel under each aten::_convolution with a bias); a CPU's oneDNN
# convolution folds both into its own. Modelled as an op of the convolution's name with this mark.
BIAS = " bias"


def conv_bias(op: Event) -> Event | None:
    """The bias kernel a GPU runs beside this convolution (forward or backward) as an op for the model to time,
    its inputs the convolution's; None where it has no bias (or the backward does not want its gradient)."""
    dims = op.args.get("Input Dims") or []
    if op.name == "aten::convolution":
        bias = dims[2] if len(dims) > 2 else None
        if not (isinstance(bias, list) and len(bias) == 1):
            return None
    elif op.name == "aten::convolution_backward":
        concrete = op.args.get("Concrete Inputs")
        mask = str(concrete[10]) if isinstance(concrete, list) and len(concrete) > 10 else ""
        flags = [flag.strip() for flag in mask.strip("[]() ").split(",")]
        if len(flags) != 3 or flags[2] != "True":
            return None
    else:
        return None
    return msgspec.structs.replace(op, name=op.name + BIAS)


def with_bias(op: Event) -> list[Event]:
    """An op group of a CPU trace and, for a convolution with a bias, the bias kernel a GPU runs beside it."""
    bias = conv_bias(op) if op.name in CONV_OPS else None
    return [op] if bias is None else [op, bias]


def conv_key(op: Event) -> tuple | None:
    """A convolution's (input dims, weight dims), forward or backward (or its bias kernel): which layer it is."""
    dims = op.args.get("Input Dims") or []
    at = 1 if op.name.removesuffix(BIAS) == "aten::convolution_backward" else 0
    try:
        x, w = tuple(dims[at]), tuple(dims[at + 1])
    except (TypeError, IndexError):
        return None
    return (x, w) if all(type(n) is int for n in (*x, *w)) else None  # a trace's numbers: hostile until checked


def _bias_bytes(op: Event, sizes: list[int]) -> int:
    """A bias kernel's bytes: forward, the output read and written (the bias itself is small); backward, the
    output's gradient read."""
    if op.name.startswith("aten::convolution_backward"):
        return sizes[0] if sizes else 0
    dims, types = op.args.get("Input Dims") or [], op.args.get("Input type") or []
    try:
        x, w = dims[0], dims[1]
        channels, spatial = _conv_output(x, w, op.args.get("Concrete Inputs"))
        out = [x[0], channels, *spatial]
    except (TypeError, ValueError, IndexError):
        return 0
    size = ELEMENT_BYTES.get(types[0], 4) if types and isinstance(types[0], str) else 4
    return 2 * _numel(out) * size + (sizes[2] if len(sizes) > 2 else 0)


def _foreach_work(op: Event, sizes: list[int]) -> Work:
    """A foreach op's kernels: its lists read, the first written (a norm writes scalars), one launch per group."""
    dims, types = op.args.get("Input Dims") or [], op.args.get("Input type") or []
    lists = [d for d, t in zip(dims, types) if isinstance(t, str) and t.startswith("TensorList") and isinstance(d, list)]
    tensors = max((len(d) for d in lists), default=1)
    depth = min(max(len(lists) + (0 if op.name.endswith("_") else 1), 1), len(FOREACH_TENSORS_PER_LAUNCH))
    written = 0 if "norm" in op.name else (sizes[0] if sizes else 0)
    return Work("memory", bytes=float(sum(sizes) + written),
                kernels=max(ceil(tensors / FOREACH_TENSORS_PER_LAUNCH[depth - 1]), 1))


def _row(op: Event) -> int:
    try:
        row = (op.args.get("Input Dims") or [[0]])[0][-1]
    except (TypeError, IndexError, KeyError):
        return 0
    return row if type(row) is int else 0


def _output_bytes(op: Event, sizes: list[int]) -> int:
    """A matrix op's output (m x n per batch), a convolution's or attention's the size of its largest
    input (a close bound); the element size of the first input."""
    types = op.args.get("Input type") or []
    size = ELEMENT_BYTES.get(types[0], 4) if types and isinstance(types[0], str) else 4
    gemm = _gemm(op) if op.name in MM_OPS else ()
    if gemm:
        batch, m, n, _ = gemm
        return batch * m * n * size
    return max(sizes, default=0)


def _embedding_out(op: Event) -> int:
    dims, types = op.args.get("Input Dims") or [], op.args.get("Input type") or []
    try:
        width = dims[0][-1]
        return _numel(dims[1]) * width * ELEMENT_BYTES.get(types[0], 4) if type(width) is int and width >= 0 else 0
    except (TypeError, IndexError):
        return 0


def _sdpa_flops(op: Event) -> float:
    dims = op.args.get("Input Dims") or []
    try:
        return _attention(dims[0], dims[1], dims[2])
    except (TypeError, ValueError, IndexError):
        return 0.0


def launches(name: str) -> bool:
    """Whether an op of this name can launch a kernel of its own (a leaf that is no view or allocation)."""
    return "::" in name and not name.startswith(("autograd::", "perfaudit::")) and name not in NO_KERNEL
