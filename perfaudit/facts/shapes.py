"""Input shapes across steps: cudnn.benchmark advice and varying batch shapes (T08, T13)."""
from __future__ import annotations

from collections import Counter

from .registry import Context, Missing, fact

CONV_OPS = {"aten::convolution", "aten::cudnn_convolution", "aten::_convolution", "aten::mkldnn_convolution"}
SHAPED_OPS = CONV_OPS | {"aten::linear", "aten::addmm", "aten::mm", "aten::bmm", "aten::matmul", "aten::embedding"}


def _signature(ctx: Context, names: set[str]) -> list[tuple]:
    """Per measured step, the tuple of first-input shapes of the named ops, in order."""
    ops = [e for e in ctx.trace.host if e.kind == "op" and e.name in names]
    if ops and not any("Input Dims" in e.args for e in ops):
        raise Missing("the trace has no input shapes (record with record_shapes=True)")
    per_step: list[list] = [[] for _ in ctx.steps]
    for op in ops:
        step = ctx.step_of(op.ts)
        dims = op.args.get("Input Dims")
        if step is not None and isinstance(dims, list) and dims:
            per_step[step].append((op.name, str(dims[0])))
    return [tuple(s) for s in per_step]


@fact("shapes.conv", "Convolution input shapes across the measured steps: conv count per step, and "
                     "whether the shapes were the same in every step.", needs=("shapes",))
def conv_shapes(ctx: Context) -> dict:
    ctx.need_trace()
    signatures = _signature(ctx, CONV_OPS)
    convs = sum(len(s) for s in signatures) / len(signatures)
    if not convs:
        raise Missing("no convolutions in the measured steps")
    distinct = len(set(signatures))
    return {"per_step": convs, "distinct_signatures": distinct, "fixed": distinct == 1,
            "steps": len(signatures)}


@fact("shapes.varying", "How often the input shapes of matmul/conv/embedding ops changed between steps: "
                        "share of steps whose shapes differ from the most common step (%).", needs=("shapes",))
def varying_shapes(ctx: Context) -> dict:
    ctx.need_trace()
    signatures = _signature(ctx, SHAPED_OPS)
    if len(signatures) < 3 or not any(signatures):
        raise Missing("fewer than three measured steps with shaped ops")
    common, count = Counter(signatures).most_common(1)[0]
    differing = [s for s in signatures if s != common]
    example = ""
    if differing:
        for a, b in zip(common, differing[0]):
            if a != b:
                example = f"{a[0]} input {a[1]} vs {b[1]}"
                break
    return {"share_pct": 100.0 * len(differing) / len(signatures), "distinct": len(set(signatures)),
            "example": example}


@fact("env.cudnn_benchmark", "torch.backends.cudnn.benchmark as the script left it.")
def cudnn_benchmark(ctx: Context) -> bool:
    env = ctx.probes.get("environment")
    if not env or "cudnn_benchmark" not in env:
        raise Missing("no live-process probes (the cudnn.benchmark flag is only seen by `perfaudit run`)")
    return bool(env["cudnn_benchmark"])
