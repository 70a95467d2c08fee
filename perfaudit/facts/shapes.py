"""Input shapes across steps: cudnn.benchmark advice and varying batch shapes (T08, T13)."""
from __future__ import annotations

from bisect import bisect_right
from collections import Counter

from ..projection.work import op_flops
from .flops.counted import counted_ops
from .registry import Context, Missing, fact
from .sites import Site, site_from_probe

CONV_OPS = {"aten::convolution", "aten::cudnn_convolution", "aten::_convolution", "aten::mkldnn_convolution"}
SHAPED_OPS = CONV_OPS | {"aten::linear", "aten::addmm", "aten::mm", "aten::bmm", "aten::matmul", "aten::embedding"}


def _signature(ctx: Context, names: set[str]) -> list[tuple]:
    """Per step, the tuple of first-input shapes of the named ops, in order: over every recorded step but
    warm-up and steps unlike the others (an evaluation pass), a step delayed by a busy CPU included
    (its shapes are the script's, however long it took)."""
    ops = ctx.need_trace().named(names.__contains__, kind="op")
    if ops and not any("Input Dims" in e.args for e in ops):
        raise Missing("the trace has no input shapes (record with record_shapes=True)")
    steps = ctx.load_independent_steps
    starts = [s.ts for s in steps]
    per_step: list[list] = [[] for _ in steps]
    for op in ops:
        i = bisect_right(starts, op.ts) - 1
        dims = op.args.get("Input Dims")
        if i >= 0 and op.ts <= steps[i].end and isinstance(dims, list) and dims:
            per_step[i].append((op.name, str(dims[0])))
    return [tuple(s) for s in per_step]


@fact("shapes.conv", "Convolution input shapes across the recorded steps (one a busy CPU delayed too): "
                     "conv count per step, whether the shapes were the same in every step, and the "
                     "convolutions' share of the step's matrix FLOPs (flops_share_pct, from the shapes).",
      needs=("shapes",))
def conv_shapes(ctx: Context) -> dict:
    ctx.need_trace()
    signatures = _signature(ctx, CONV_OPS)
    convs = sum(len(s) for s in signatures) / len(signatures)
    if not convs:
        raise Missing("no convolutions in the measured steps")
    distinct = len(set(signatures))
    return {"per_step": convs, "distinct_signatures": distinct, "fixed": distinct == 1,
            "steps": len(signatures), "flops_share_pct": _conv_flops_share(ctx)}


def _conv_flops_share(ctx: Context) -> float | None:
    """The convolutions' share of the FLOPs the measured steps' matrix, convolution and attention ops carry (%):
    a patch embedding in a transformer is about 1 %, a ResNet's convolutions all of it."""
    flops = [(op.name in CONV_OPS, op_flops(op)) for op in counted_ops(ctx)]
    total = sum(f for _, f in flops)
    return 100.0 * sum(f for conv, f in flops if conv) / total if total else None


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


@fact("cudnn.flag_sites", "Where torch.backends.cudnn.benchmark is set in the script's source (True "
                          "anywhere: `set_true`), else where it should go: before the optimizer is built.")
def cudnn_flag_sites(ctx: Context) -> list[Site]:
    script = ctx.meta.get("script")
    assigned = ctx.source.attribute_assignments(script, "cudnn.benchmark") if isinstance(script, str) else []
    set_true = any(value is True for _, value in assigned)
    ran = [f for f in ctx.probes.get("flag_sets", []) if f.get("flag") == "cudnn.benchmark" and f.get("site")]
    if "flag_sets" in ctx.probes:  # `perfaudit run` saw which assignments ran: a branch not taken is not a site
        n = len(ctx.steps)
        if ran:
            last = ran[-1]  # the value the script trained with was set here
            site = site_from_probe(ctx, last["site"], "cudnn.benchmark set here", set_true=set_true)
            site.count, site.steps_seen = n, set(range(n))
            return [site]
        if assigned and isinstance(script, str):  # set only on paths this run did not take (a determinism block)
            block = ctx.source.enclosing_block_line(script, assigned[0][0])  # ... the flag goes before that block
            site = site_from_probe(ctx, {"path": script, "line": block}, "cudnn.benchmark set only on a path "
                                   "this run did not take: set it before that block", set_true=set_true)
            site.count, site.steps_seen = n, set(range(n))
            return [site]
    if assigned:
        line = next((line for line, value in assigned if value is not True), assigned[0][0])
        site = site_from_probe(ctx, {"path": script, "line": line}, "cudnn.benchmark set here", set_true=set_true)
    else:
        built = next((o.get("site") for o in ctx.probes.get("optimizers", []) if o.get("site")), None)
        site = site_from_probe(ctx, built, "set cudnn.benchmark before training (here the optimizer is built)",
                               set_true=False)
    n = len(ctx.steps)
    site.count, site.steps_seen = n, set(range(n))
    return [site]


@fact("cudnn.set_true_in_source", "Whether the script's source sets cudnn.benchmark = True somewhere "
                                  "(under `if torch.cuda.is_available():`, say), whatever this run did.")
def cudnn_set_true_in_source(ctx: Context) -> bool:
    return bool(ctx.get("cudnn.flag_sites")[0].extra.get("set_true"))


@fact("env.cudnn_benchmark", "torch.backends.cudnn.benchmark as the script left it.")
def cudnn_benchmark(ctx: Context) -> bool:
    env = ctx.probes.get("environment")
    if not env or "cudnn_benchmark" not in env:
        raise Missing("no live-process probes (the cudnn.benchmark flag is only seen by `perfaudit run`)")
    return bool(env["cudnn_benchmark"])
