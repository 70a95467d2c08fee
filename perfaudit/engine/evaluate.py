"""Evaluate rules against the facts of one trace: conditions, evidence, cost, severity, message."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..facts import Context, Missing, Site
from ..findings import UNKNOWN_WHERE, Cost, Finding, Location, Skipped
from .loader import Rule
from .ops import OPS as _OPS
from .template import PLACEHOLDER, format_value

FEW_STEPS = 3  # a cost measured over fewer steps says so


class _Evaluation:
    def __init__(self, rule: Rule, ctx: Context):
        self.rule, self.ctx = rule, ctx
        self.aggregates: dict = {}

    def fact(self, name: str):
        if name.startswith("evidence."):
            return self.aggregates.get(name.split(".", 1)[1])
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            head = ".".join(parts[:i])
            try:
                value = self.ctx.get(head)
            except KeyError:
                continue
            for key in parts[i:]:
                value = value.get(key) if isinstance(value, dict) else None
            return value
        raise KeyError(name)

    def value(self, spec):
        if isinstance(spec, dict):
            return self.rule.thresholds[spec["threshold"]]
        return spec

    def holds_optional(self, cond) -> bool:
        """For notes, escalations and the estimate flag: missing data means the condition is false."""
        try:
            return self.holds(cond)
        except Missing:
            return False

    def holds(self, cond) -> bool:
        if "all" in cond:
            return all(self.holds(c) for c in cond["all"])
        if "any" in cond:
            return any(self.holds(c) for c in cond["any"])
        if "not" in cond:
            return not self.holds(cond["not"])
        left = self.fact(cond["fact"])
        if left is None and cond["op"] not in ("==", "!=", "in", "not in", "contains"):
            return False  # an unknown value is neither above nor below a threshold
        try:
            return bool(_OPS[cond["op"]](left, self.value(cond["value"])))
        except TypeError:
            return False

    def render(self, template: str, known_only: bool = False) -> str | None:
        """The template with its values; with `known_only`, None when a value it names is unknown (a
        note about a worker count a foreign trace does not carry is left out, never shown as n/a)."""
        unknown = []

        def sub(match):
            name, spec = match.group(1), match.group(2) or ""
            if name in self.aggregates:
                value = self.aggregates[name]
            elif name in self.rule.thresholds:
                value = self.rule.thresholds[name]
            else:
                try:
                    value = self.fact(name)
                except Missing:
                    value = None
            if value is None:
                unknown.append(name)
            return format_value(value, spec)
        text = PLACEHOLDER.sub(sub, template)
        return None if known_only and unknown else text


def _site_passes(ev: _Evaluation, site_values: dict, site: Site) -> bool:
    for clause in ev.rule.spec.get("evidence", {}).get("where", []):
        field = clause["field"]
        if field == "exact":
            left: Any = site.exact
        elif field.startswith("extra."):  # a figure of the fact's own (compile.recompiles: recompiles)
            left = site.extra.get(field[len("extra."):])
            if left is None:
                return False
        else:
            left = site_values[field]
        if not _OPS[clause["op"]](left, ev.value(clause["value"])):
            return False
    return True


def _aggregate(ev: _Evaluation, sites: list[Site], n_steps: int, step_ms: float) -> None:
    per_step = [s.per_step(n_steps) for s in sites]
    ms = sum(p["ms_per_step"] for p in per_step)
    located = [s for s in sites if s.path]
    ev.aggregates.update(
        count_per_step=sum(p["count_per_step"] for p in per_step),
        ms_per_step=ms,
        share_pct=100.0 * ms / step_ms if step_ms else 0.0,
        n_sites=len(sites),
        details=", ".join(dict.fromkeys(s.detail for s in sites)),
        where=", ".join(f"{s.path}:{s.line}" for s in located[:3]) or UNKNOWN_WHERE,
        lines=", ".join(str(s.line) for s in located),
    )
    host = [s.extra["host_ms"] / (s.over_steps or n_steps) for s in sites if isinstance(s.extra.get("host_ms"), float)]
    if host:  # the host's own part of the cost (no CPU compute, no recording): what a --target projection removes
        ev.aggregates["host_ms_per_step"] = sum(host)


def evaluate(rule: Rule, ctx: Context) -> Finding | Skipped | None:
    ev = _Evaluation(rule, ctx)
    spec = rule.spec
    try:
        n_steps = ctx.get("step.count")
        step_ms = ctx.get("step.mean_ms")
    except Missing as exc:
        n_steps, step_ms = 1, 0.0
        if "evidence" in spec and rule.scope == "trace":
            return Skipped(rule.id, str(exc))
    ev.aggregates.update(step_ms=step_ms, n_steps=n_steps, device="GPU" if ctx.is_gpu else "CPU")
    if rule.scope == "job":
        ev.aggregates.update(step_ms=None, n_steps=None)
    sites: list[Site] = []
    try:
        if "evidence" in spec:
            for site in ctx.get(spec["evidence"]["sites"]):
                if _site_passes(ev, site.per_step(n_steps), site):
                    sites.append(site)
            if not sites:
                return None
            _aggregate(ev, sites, n_steps, step_ms)
        projected = False
        if "when" in spec and not _holds_measured(ev, spec):
            if "projected" not in spec or not ev.holds_optional(spec["projected"]["when"]):
                return None
            projected = True  # the GPU-only pattern, seen on the projection only
        severity = spec["projected"].get("severity", rule.severity) if projected else rule.severity
        for item in [] if projected else spec.get("escalate", []):  # escalations weigh what was measured
            if ev.holds_optional(item["when"]):
                severity = item["severity"]
        cost = Cost(None, None, True) if projected else _cost(ev, step_ms)
        notes = tuple(text for n in spec.get("notes", []) if "when" not in n or ev.holds_optional(n["when"])
                      for text in [ev.render(n["text"], known_only=True)] if text is not None)
        message = ev.render(spec["projected"]["message"] if projected else rule.message) or ""  # known_only off: a text
        variant = next((v["text"] for v in spec.get("fixes", []) if ev.holds_optional(v["when"])), rule.fix)
        fix = ev.render(variant) or ""
    except Missing as exc:
        return Skipped(rule.id, str(exc))
    if n_steps < FEW_STEPS and cost.ms_per_step is not None and ctx.trace is not None and rule.scope == "trace":
        notes += (f"Measured over {n_steps} step(s) only: a figure from so few steps may not be a typical "
                  "step's; more steps make it firmer (`perfaudit run --steps`, `--max-trace-mb` when the trace "
                  "budget cut the window; a profiler schedule with more active steps).",)
    locations = tuple(_locations(sites, n_steps))
    evidence = {k: v for k, v in ev.aggregates.items()}
    if projected:
        evidence["projected"] = True
    return Finding(rule.id, rule.title, rule.tips, severity, message, fix, cost, locations, notes,
                   evidence=evidence, trace=ctx.trace.path if ctx.trace else None, autofix=_autofix(ev))


def _holds_measured(ev: _Evaluation, spec: dict) -> bool:
    """The rule's condition on what was measured; a rule with a projected form that lacks the measured data
    (a GPU-only fact on a CPU run) has it looked for on the projection instead of being skipped."""
    try:
        return ev.holds(spec["when"])
    except Missing:
        if "projected" in spec and ev.holds_optional(spec["projected"]["when"]):
            return False
        raise


def _autofix(ev: _Evaluation) -> dict | None:
    """The rule's edit with its parameters read from this run's facts (None where the run lacks one)."""
    spec = ev.rule.autofix
    if spec is None:
        return None
    params = {}
    for name, fact_name in spec.get("params", {}).items():
        try:
            params[name] = ev.fact(fact_name)
        except (Missing, KeyError):
            params[name] = None
    return {"kind": spec["kind"], "params": params}


def _cost(ev: _Evaluation, step_ms: float) -> Cost:
    spec = ev.rule.spec["cost"]
    ms = None
    if spec.get("from") == "evidence":
        ms = ev.aggregates.get("ms_per_step")
        if ms is not None and "scale" in spec:
            ms *= ev.value(spec["scale"])
    elif "fact" in spec:
        value = ev.fact(spec["fact"])
        if isinstance(value, (int, float)):
            ms = value * ev.value(spec["per_unit_us"]) / 1000.0 if "per_unit_us" in spec else float(value)
            ms *= ev.value(spec.get("scale", 1.0))
    if spec.get("unknown_when_zero") and not ms:
        ms = None
    estimated = spec.get("estimated", False)
    if isinstance(estimated, dict):
        estimated = ev.holds_optional(estimated)
    share = ms / step_ms if ms is not None and step_ms else None
    if ms is not None and "share_pct" in spec:  # timed against another step than the recorded one
        try:
            pct = ev.fact(spec["share_pct"])
        except Missing:
            pct = None
        share = pct / 100.0 if isinstance(pct, (int, float)) else share
    return Cost(ms, share, bool(estimated))


def _locations(sites: list[Site], n_steps: int) -> list[Location]:
    """One location per line and detail: two sites that share a line (a `.item()` and an `if` on a tensor the
    run placed there) add up."""
    out: dict[tuple, Location] = {}
    for site in sites:
        if not site.path:
            continue
        per_step = site.per_step(n_steps)
        code_of = {c.line: c.code for c in site.extra.get("calls", [])}
        share = site.extra.get("line_share") or {}  # a site of several lines: each line's own part
        for line in site.extra.get("lines") or [site.line]:
            code = site.code if line == site.line else code_of.get(line, "")
            part = share.get(line, 1.0)
            here = Location(site.path, line, code, site.detail, per_step["count_per_step"] * part,
                            per_step["ms_per_step"] * part, site.exact)
            key = (site.path, line, site.detail)
            seen = out.get(key)
            out[key] = here if seen is None else replace(
                seen, code=seen.code or code, count_per_step=_add(seen.count_per_step, here.count_per_step),
                ms_per_step=_add(seen.ms_per_step, here.ms_per_step), exact=seen.exact and here.exact)
    return list(out.values())


def _add(a: float | None, b: float | None) -> float | None:
    return None if a is None and b is None else (a or 0.0) + (b or 0.0)
