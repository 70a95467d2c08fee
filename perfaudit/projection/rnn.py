"""A recurrent layer (nn.LSTM, nn.GRU, nn.RNN) as a GPU runs it: one cuDNN call per direction of a layer, not
the CPU's loop of small ops a CPU trace records (a GRU's forward there is thousands of ops a step, its backward
thousands of autograd nodes, which the per-op model would launch one kernel each). From the recorded shapes of
`aten::lstm` / `aten::gru` / `aten::rnn_tanh` / `aten::rnn_relu` (padded or packed): per layer and direction, one
GEMM over every time step's input, then, time step after time step, a small GEMM of the hidden state and the
gates' pointwise kernel; the backward the same recurrence back, and three GEMMs over the whole sequence (the
inputs' gradient, both weights' gradients). The autograd nodes the CPU made for the layer's inner ops are found
by their sequence numbers, which a backward node shares with the forward op that made it."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import isfinite

from ..trace.model import Event
from ..trace.op_names import RNN_OPS
from .kernels import PRECISION, Work

GATES = dict(zip(RNN_OPS, (4, 3, 1, 1)))   # aten::lstm, gru, rnn_tanh, rnn_relu: the gates' matrices
BACKWARD = "_backward"   # the name suffix of the stand-in for a layer's backward (`aten::lstm_backward`)
SEQUENCE = "Sequence number"


@dataclass(frozen=True)
class RnnShape:
    steps: int       # time steps (the recurrence's length)
    tokens: int      # time steps times batch rows (a packed sequence: its rows)
    batch: int
    features: int    # the first layer's input width
    hidden: int
    gates: int
    layers: int
    directions: int
    state: int       # the hidden state's width: what the recurrence multiplies, and the next layer's input per
                     # direction (the hidden size, or an LSTM's proj_size)


LARGEST = 1 << 40   # a dimension beyond this is no recorded tensor's (a hostile trace's): not modelled
MAX_LAYERS = 1024


def _dims(value) -> list[int] | None:
    ok = isinstance(value, list) and value and all(type(d) is int and 0 <= d < LARGEST for d in value)
    return value if ok else None


def rnn_shape(op: Event) -> RnnShape | None:
    """The layer's shape from its recorded arguments; None when they do not say (no shapes recorded, an
    unknown form)."""
    gates = GATES.get(op.name.removesuffix(BACKWARD))
    dims, types, concrete = op.args.get("Input Dims"), op.args.get("Input type"), op.args.get("Concrete Inputs")
    if gates is None or not (isinstance(dims, list) and isinstance(types, list) and isinstance(concrete, list)):
        return None
    # the weights are the last tensor list: (input, hx, params, …), (data, batch_sizes, hx, params, …)
    params = max((i for i, t in enumerate(types[:4]) if t == "TensorList"), default=None)
    if params not in (2, 3) or len(dims) <= params or len(concrete) < params + 6:
        return None
    weights, hx = dims[params], dims[params - 1]
    weight = _dims(weights[0]) if isinstance(weights, list) and weights else None
    hx = _dims(hx[0] if isinstance(hx, list) and hx and isinstance(hx[0], list) else hx)
    flags = [str(c) for c in concrete[params + 1:params + 7]]
    try:
        layers, bidirectional = int(flags[1]), flags[4] == "True"
    except ValueError:
        return None
    if (weight is None or len(weight) != 2 or hx is None or len(hx) != 3 or weight[0] % gates
            or not 1 <= layers <= MAX_LAYERS):
        return None
    hidden, batch = weight[0] // gates, hx[1]
    if params == 3:  # packed: (data, batch_sizes, hx, params, …)
        data, sizes = _dims(dims[0]), _dims(dims[1])
        if data is None or sizes is None or len(data) != 2 or len(sizes) != 1:
            return None
        steps, tokens = sizes[0], data[0]
    else:  # padded: (input, hx, params, …, batch_first)
        x = _dims(dims[0])
        if x is None or len(x) != 3:
            return None
        steps = x[1] if len(flags) > 5 and flags[5] == "True" else x[0]
        tokens = x[0] * x[1]
    if min(steps, tokens, batch, hidden, weight[1], hx[2]) <= 0:
        return None
    return RnnShape(steps, tokens, batch, weight[1], hidden, gates, layers, 2 if bidirectional else 1, hx[2])


def _precision(op: Event, tf32: bool) -> str:
    types = op.args.get("Input type") or []
    half = PRECISION.get(types[0]) if types and isinstance(types[0], str) else None
    return half or ("tf32" if tf32 else "fp32")


def rnn_us(op: Event, kernel_us: Callable[[Work], float], tf32: bool = True) -> tuple[float, int] | None:
    """The GPU time (µs) and kernel launches of the layer's forward, or of its backward for the stand-in
    `…_backward`; cuDNN's RNNs take TF32 where cuDNN may (torch.backends.cudnn.allow_tf32, on by default)."""
    shape = rnn_shape(op)
    if shape is None:
        return None
    backward = op.name.endswith(BACKWARD)
    precision, size = _precision(op, tf32), 2 if _precision(op, tf32) in ("fp16", "bf16") else 4
    s, width = shape, shape.gates * shape.hidden

    def gemm(m: int, n: int, k: int) -> float:
        return kernel_us(Work("matmul", flops=2.0 * m * n * k, bytes=float((m * k + k * n + m * n) * size),
                              precision=precision, gemm=(1, m, n, k)))
    rows = max(s.tokens // s.steps, 1)   # a time step's rows (a packed sequence's on average)
    step = gemm(rows, width, s.state) + kernel_us(Work("memory", bytes=float(3 * rows * width * size)))
    us, kernels = 0.0, 0
    for layer in range(s.layers):
        inputs = s.features if layer == 0 else s.directions * s.state
        whole = [gemm(s.tokens, width, inputs)] if not backward else [
            gemm(s.tokens, inputs, width), gemm(width, inputs, s.tokens), gemm(width, s.state, s.tokens)]
        us += s.directions * (sum(whole) + s.steps * step)
        kernels += s.directions * (len(whole) + 2 * s.steps)
    return us, kernels


def rnn_flops(op: Event) -> float:
    """FLOPs of a recurrent layer's op from its recorded shapes (torch's convention, a multiply-add two): every
    time step of every sequence multiplies each weight matrix, forward; twice that backward (cuDNN's or oneDNN's
    backward op, given its input and weights); 0 when the shapes do not say."""
    if op.name in GATES:
        s = rnn_shape(op)
        if s is None:
            return 0.0
        width = s.gates * s.hidden
        projected = s.hidden * s.state if s.state != s.hidden else 0   # an LSTM's proj_size: h = W_hr h
        return float(sum(2 * s.tokens * s.directions * (width * ((s.features if layer == 0 else s.directions * s.state)
                                                                 + s.state) + projected) for layer in range(s.layers)))
    dims = op.args.get("Input Dims")
    if not isinstance(dims, list) or len(dims) < 3:
        return 0.0
    x = _dims(dims[0])
    weights = dims[1] if op.name == "aten::_cudnn_rnn_backward" else dims[1:3]
    matrices = [w for w in (_dims(w) for w in (weights if isinstance(weights, list) else [])) if w and len(w) == 2]
    if x is None or len(x) < 2 or not matrices:
        return 0.0
    tokens = 1.0
    for d in x[:-1]:
        tokens *= d
    total = 4.0 * tokens * sum(w[0] * w[1] for w in matrices)
    return total if isfinite(total) else 0.0


def sequence_ranges(ops: list[Event]) -> dict[int, Event]:
    """Each sequence number the ops inside a recurrent layer's forward took -> that forward op: its backward
    nodes carry them. `ops` sorted by start; a layer op inside another's span on its thread is not one."""
    out: dict[int, Event] = {}
    ends: dict[tuple, float] = {}
    for i, op in enumerate(ops):
        thread = (op.pid, op.tid)
        if op.name not in GATES or op.ts < ends.get(thread, float("-inf")) or rnn_shape(op) is None:
            continue
        ends[thread] = op.end
        numbers = [n for e in _inside(ops, i) if type(n := e.args.get(SEQUENCE)) is int]
        if numbers and max(numbers) - min(numbers) <= 4 * len(numbers):  # contiguous, as one thread numbers them
            out.update(dict.fromkeys(range(min(numbers), max(numbers) + 1), op))
    return out


def _inside(ops: list[Event], i: int) -> list[Event]:
    op, out = ops[i], [ops[i]]
    for e in ops[i + 1:]:
        if e.ts >= op.end:
            break
        if (e.pid, e.tid) == (op.pid, op.tid):
            out.append(e)
    return out
