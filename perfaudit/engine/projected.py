"""Each finding's saving on the projection's target GPU: the steps replayed with the rule's fix applied
(the rule's `cost.projects`: data, sync, copies, precision, host, …). Findings of one kind share that kind's
saving in proportion to their measured cost; a host-side fix removes its measured host time."""
from __future__ import annotations

from dataclasses import replace

from ..facts import Context, Missing
from ..facts.gpu.projection import saving_ms
from ..findings import Finding
from .loader import Rule


def with_projected_costs(findings: list[Finding], rules: list[Rule], ctx: Context) -> list[Finding]:
    try:
        projection = ctx.get("projection")
    except Missing:
        return findings
    step, target = projection["step_ms"], projection["target"]
    rules_by_id = {r.id: r for r in rules}
    kind_of = {r.id: r.spec.get("cost", {}).get("projects") for r in rules}
    by_kind: dict[str, list[int]] = {}
    for i, f in enumerate(findings):
        kind = kind_of.get(f.rule)
        if kind:
            by_kind.setdefault(kind, []).append(i)
    out = list(findings)
    for kind, indices in by_kind.items():
        if kind == "host":
            for i in indices:  # the host's own part of the measured cost where the evidence tells it apart
                host_ms = findings[i].evidence.get("host_ms_per_step")
                measured = host_ms if isinstance(host_ms, float) else findings[i].cost.ms_per_step
                if measured is None and findings[i].evidence.get("projected"):  # seen on the projection only:
                    measured = _projected_host_ms(rules_by_id[findings[i].rule].spec, projection)
                saving = saving_ms(ctx, "host", measured) if measured else None
                if saving is not None:
                    out[i] = _with(findings[i], saving, step, target)
            continue
        total = saving_ms(ctx, kind)
        if total is None:  # the fix's work was not found in the trace: no projected figure, rather than 0
            continue
        weights = [findings[i].cost.ms_per_step or 0.0 for i in indices]
        whole = sum(weights)
        for i, w in zip(indices, weights):
            part = w / whole if whole else 1.0 / len(indices)
            out[i] = _with(findings[i], total * part, step, target)
    return out


def _projected_host_ms(spec: dict, projection: dict) -> float | None:
    """The host time a fix seen on the projection alone removes: the projection's figure the rule names
    (`projected.host_ms`), else its host-bound idle times the rule's `cost.scale`."""
    key = spec.get("projected", {}).get("host_ms")
    if key:
        value: object = projection
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return float(value) if isinstance(value, (int, float)) else None
    scale = spec.get("cost", {}).get("scale", 1.0)
    return projection["host_idle_ms"] * (scale if isinstance(scale, (int, float)) else 1.0)


def _with(f: Finding, ms: float, step_ms: float, target: str) -> Finding:
    return replace(f, cost=replace(f.cost, projected_ms=ms, projected_share=ms / step_ms if step_ms else None,
                                   projected_on=target))
