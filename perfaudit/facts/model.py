"""Facts about the model's structure, read from the live process (tip T03)."""
from __future__ import annotations

from ..projection.work import conv_key
from ..trace.nesting import enclosing
from .registry import Context, fact
from .sites import Site, site_from_probe


@fact("model.bias_before_norm", "Conv/Linear layers with a bias whose output feeds BatchNorm directly "
                                "(seen by forward hooks over one step), at the line that built them.")
def bias_before_norm(ctx: Context) -> list[Site]:
    sites: dict[tuple, Site] = {}
    for i, entry in enumerate(ctx.probe("bias_before_norm")):
        where = entry.get("site") or {}
        # a layer built before the session has no site: each is its own (the static pass may place them)
        key = (where.get("path"), where.get("line") if where.get("path") else i, entry["layer"], entry["norm"])
        if key not in sites:
            sites[key] = site_from_probe(ctx, where, f"{entry['layer']}(bias=True) -> {entry['norm']}",
                                         bias_params=0, layers=0)
            sites[key].over_steps = 1  # the layers seen running in the one step the hooks watched
        site = sites[key]
        site.count += 1
        site.extra["bias_params"] += entry.get("bias_params", 0)
        site.extra["layers"] += 1
    return list(sites.values())


@fact("model.bias_lines_without_norm", "The [path, line] of lines that built Conv/Linear layers with a bias "
                                       "that ran with no BatchNorm after them (a helper called with and without "
                                       "a norm, a model's head): bias=False there would change the model.")
def bias_lines_without_norm(ctx: Context) -> list[list]:
    entries = ctx.probe("bias_without_norm") if "bias_without_norm" in ctx.probes else []
    return [list(key) for key in sorted({(e["site"]["path"], e["site"]["line"]) for e in entries
                                         if isinstance(e.get("site"), dict) and e["site"].get("path")
                                         and e["site"].get("line")})]


ADDMM_BACKWARD = "autograd::engine::evaluate_function: AddmmBackward0"
_BIAS_OPS = {"aten::_convolution": "aten::add_", "aten::convolution_backward": "aten::sum", ADDMM_BACKWARD: "aten::sum"}


def bias_fix(ctx: Context) -> tuple[set[tuple], list[tuple[float, float]]]:
    """What BN001's fix takes off a GPU's step: the convolutions whose bias feeds a BatchNorm, by their
    (input, weight) sizes (a CPU run's modelled bias kernels: projection/work.py conv_bias), and the spans of the
    trace's own bias ops of those layers (µs): on a GPU trace the `add_` after each such convolution and the
    `sum` in its backward; in any trace a feeding Linear layer's bias gradient, the `sum` of its output's
    gradient in AddmmBackward0. Matched by the sizes the live process saw (a layer of the same sizes that feeds
    no BatchNorm is taken too)."""
    entries = ctx.probe("bias_before_norm") if "bias_before_norm" in ctx.probes else []
    convs, outputs = set(), set()
    for e in entries:
        weight, given, made = e.get("weight_shape"), e.get("input_shape"), e.get("output_shape")
        if weight and len(weight) >= 3 and given:  # a convolution's weight: out, in, kernel...
            convs.add((tuple(given), tuple(weight)))
        elif weight and len(weight) == 2 and made:
            outputs.add(tuple(made))
    trace = ctx.need_trace()
    if not (outputs or convs and trace.has_gpu):
        return convs, []
    containers = trace.named(lambda name: name in _BIAS_OPS and (name == ADDMM_BACKWARD or trace.has_gpu))
    queries = trace.named(lambda name: name in ("aten::add_", "aten::sum"), kind="op")
    spans = []
    for op, stack in enclosing(containers, queries):
        owner = stack[-1] if stack else None
        if owner is None or _BIAS_OPS[owner.name] != op.name:
            continue
        if owner.name == ADDMM_BACKWARD:
            dims = op.args.get("Input Dims") or []
            shape = tuple(dims[0]) if dims and isinstance(dims[0], list) else ()
            hit = all(type(n) is int for n in shape) and shape in outputs
        else:
            hit = conv_key(owner) in convs
        if hit:
            spans.append((op.ts, op.end))
    return convs, spans
