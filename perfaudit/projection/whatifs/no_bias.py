"""BN001's fix as a what-if: bias=False on the layers that feed a BatchNorm. A GPU then runs no bias kernel for
them: after a convolution, no elementwise add (cuDNN's convolution has no bias: torch adds it with a kernel of its
own) and in backward no sum of the output's gradient for the bias's; after a Linear layer, no such sum in backward
(cuBLAS adds its bias in the matrix product's epilogue)."""
from __future__ import annotations

from ..plans import StepPlan, item_op
from ..work import BIAS, conv_key
from .in_spans import without_work_in


def without_bias(plans: list[StepPlan], convs: set[tuple], spans: list[tuple[float, float]]) -> list[StepPlan]:
    """The plans without the modelled bias kernels of the convolutions in `convs` (a CPU run's: work.conv_bias,
    by work.conv_key) and without the kernels launched inside `spans` (µs of the trace: a GPU trace's bias ops,
    a Linear layer's bias gradient sums; facts/gpu/projection.py bias_fix)."""
    out = []
    for p in plans:
        items = [item for item in p.items if not _modelled_bias(item, convs)]
        out.append(StepPlan(p.number, p.measured_us, items))
    return without_work_in(out, spans) if spans else out


def any_bias(plans: list[StepPlan], convs: set[tuple], spans: list[tuple[float, float]]) -> bool:
    """Whether the what-if has anything to take away (else it has no figure to give, rather than 0)."""
    return bool(spans) or any(_modelled_bias(item, convs) for p in plans for item in p.items)


def _modelled_bias(item, convs: set[tuple]) -> bool:
    op = item_op(item) if item.kind == "launch" else None
    return op is not None and op.name.endswith(BIAS) and conv_key(op) in convs
