"""Step-level facts: how many steps, how long, and where the time goes."""
from __future__ import annotations

from ..trace.op_names import DATALOADER as DATALOADER_PREFIX
from .gpu import intervals as iv
from .registry import Context, Missing, fact, quartile

OPTIMIZER_STEP = "Optimizer.step#"
ZERO_GRAD = "Optimizer.zero_grad#"
BACKWARD_PREFIX = "autograd::engine::evaluate_function"


def data_ranges(ctx: Context) -> iv.Merged:
    """The host's DataLoader ranges, merged: where the host waits for data; worked out once."""
    cached = ctx.__dict__.get("_data_ranges")
    if cached is None:
        cached = ctx.__dict__["_data_ranges"] = iv.Merged(
            iv.union((e.ts, e.end) for e in ctx.need_trace().named(lambda name: name.startswith(DATALOADER_PREFIX))))
    return cached


@fact("step.count", "Number of measured (non-warm-up) steps in the trace.")
def step_count(ctx: Context) -> int:
    return len(ctx.steps)


@fact("step.mean_ms", "Mean wall time of a measured step, in ms.")
def step_mean_ms(ctx: Context) -> float:
    return ctx.step_ms


_PHASES: dict[str, str | None] = {}  # name -> phase: a name repeats in every step


def _phase(name: str) -> str | None:
    phase = _PHASES.get(name, _UNKNOWN)
    if phase is _UNKNOWN:
        phase = _phase_of(name)
        if len(_PHASES) < 200_000:  # bounded: a trace of unique names (rare) is classified as it goes
            _PHASES[name] = phase
    return phase


_UNKNOWN = "\0unknown"  # not a phase: a name not classified yet


def _phase_of(name: str) -> str | None:
    if name.startswith(DATALOADER_PREFIX):
        return "data"
    if name.startswith(BACKWARD_PREFIX):
        return "backward"
    if name.startswith(OPTIMIZER_STEP) or name.startswith(ZERO_GRAD):
        return "optimizer"
    if name.startswith("aten::"):
        return "forward"
    return None


def phase_times(ctx: Context, steps=None) -> list[dict]:
    """Per measured step (or the `steps` given), the µs spent in each host phase (top-level ranges
    only); computed once for the measured steps."""
    cached = ctx.__dict__.get("_phase_times") if steps is None else None
    if cached is not None:
        return cached
    out = []
    for step in steps if steps is not None else ctx.steps:
        times = {"data": 0.0, "forward": 0.0, "backward": 0.0, "optimizer": 0.0}
        covered_until = -1.0  # end of the phase range being counted; nested events are inside it
        step_end = step.end
        for ev in ctx.within(ctx.need_trace().host, step.ts, step_end):
            if ev.ts < covered_until:
                continue
            phase = _phase(ev.name)
            if phase is not None:
                covered_until = ev.ts + ev.dur
                end = covered_until if covered_until < step_end else step_end
                if phase == "optimizer" and ev.name.startswith(OPTIMIZER_STEP):
                    for name, us in _closure_split(ctx, ev, end).items():
                        times[name] += us
                else:
                    times[phase] += end - ev.ts
        out.append(times)
    if steps is None:
        ctx.__dict__["_phase_times"] = out
    return out


def _closure_parts(ctx: Context, step_range, end: float) -> tuple[float | None, float, float]:
    """(end of the closure, µs of backward, µs of zero_grad) inside one Optimizer.step range; the end is
    None when no backward ran inside it (a plain step, no closure). Worked out once per range: the host
    phases and the optimizer facts both ask."""
    memo = ctx.__dict__.setdefault("_closure_parts", {})
    key = (id(step_range), end)
    if key not in memo:
        memo[key] = _scan_closure(ctx, step_range, end)
    return memo[key]


def _scan_closure(ctx: Context, step_range, end: float) -> tuple[float | None, float, float]:
    backward = zero = 0.0
    closure_end = None
    covered = -1.0
    for ev in ctx.within(ctx.need_trace().host, step_range.ts, end):
        if ev is step_range or ev.ts < covered:
            continue
        if ev.name.startswith(BACKWARD_PREFIX):
            backward += min(ev.end, end) - ev.ts
            closure_end = max(closure_end or 0.0, min(ev.end, end))
            covered = ev.end
        elif ev.name.startswith(ZERO_GRAD):
            zero += min(ev.end, end) - ev.ts
            covered = ev.end
    return closure_end, backward, zero


def closure_end(ctx: Context, step_range, end: float | None = None) -> float | None:
    """Where the closure run inside an Optimizer.step range ended (its last backward), else None."""
    return _closure_parts(ctx, step_range, step_range.end if end is None else end)[0]


def _closure_split(ctx: Context, step_range, end: float) -> dict:
    """An optimizer step that ran its closure (Lightning's automatic optimization, LBFGS): the closure's
    forward and backward ran inside the Optimizer.step range. Up to the end of its last backward the
    range is the closure (backward ranges are backward, zero_grad is the optimizer's, the rest forward);
    after it, the optimizer's own update."""
    closure, backward, zero = _closure_parts(ctx, step_range, end)
    if closure is None:
        return {"optimizer": end - step_range.ts}
    forward = max(closure - step_range.ts - backward - zero, 0.0)
    return {"forward": forward, "backward": backward, "optimizer": zero + (end - closure)}


def typical_phases(ctx: Context) -> dict:
    """ms per step in each host phase: the mean over the measured steps; on a busy machine the
    undisturbed time of each phase (its first quartile over every recorded step, each step's phases
    shrunk by the share of it spent waiting for a CPU), scaled to add up to the undisturbed step
    (Context.step_ms)."""
    quiet = ctx.quiet_steps
    if not quiet:
        per_step = phase_times(ctx)
        n = len(ctx.steps)
        return {k: sum(t[k] for t in per_step) / n / 1000.0 for k in per_step[0]}
    per_step = [phases_less_waits(ctx, s, t) for s, t in zip(quiet, phase_times(ctx, quiet)) if s.dur > 0]
    phases = {k: quartile([t[k] for t in per_step]) / 1000.0 for k in per_step[0]}
    other = quartile([ctx.undisturbed_us(s) - sum(t.values()) for s, t in zip(quiet, per_step)]) / 1000.0
    scale = ctx.step_ms / max(sum(phases.values()) + max(other, 0.0), 1e-9)
    return {k: v * min(scale, 1.0) for k, v in phases.items()}


def phases_less_waits(ctx: Context, step, times: dict) -> dict:
    """A step's phases (µs) less its wait for a CPU: its fetches' own wait out of the data phase where the
    recording measured it, the rest in proportion to the other phases (each keeps its share)."""
    waited = step.dur - ctx.undisturbed_us(step)
    fetch = ctx.fetch_waited_us(step)
    if fetch is None or not times.get("data"):
        return {k: v * (step.dur - waited) / step.dur for k, v in times.items()}
    fetch = min(fetch, waited, times["data"])  # measured with the fetches: never more than they took
    rest = step.dur - times["data"]
    keep = max(1.0 - (waited - fetch) / rest, 0.0) if rest > 0 else 1.0
    return {k: v - fetch if k == "data" else v * keep for k, v in times.items()}


@fact("step.breakdown", "Where a step's host wall time goes: data loading, forward, backward, "
                        "optimizer, other (ms per step). An op outside the other phases counts as forward. On a "
                        "busy machine, the undisturbed times (see Context.step_ms).")
def step_breakdown(ctx: Context) -> dict:
    out = typical_phases(ctx)
    phases = sum(out.values())
    out["total"] = ctx.step_ms
    out["other"] = max(out["total"] - phases, 0.0)
    return out


@fact("step.per_step", "Each measured step's host wall time by phase (ms): data, forward, backward, "
                        "optimizer, other, total; so that an odd step shows.")
def step_per_step(ctx: Context) -> list[dict]:
    out = []
    for step, times in zip(ctx.steps, phase_times(ctx)):
        row = {k: v / 1000.0 for k, v in times.items()}
        row["total"] = step.dur / 1000.0
        row["other"] = max(row["total"] - sum(times.values()) / 1000.0, 0.0)
        out.append(row)
    return out


@fact("run.on_gpu", "Whether the trace holds GPU activity.")
def run_on_gpu(ctx: Context) -> bool:
    ctx.need_trace()
    return ctx.is_gpu


_TRAINING_MARKS = (BACKWARD_PREFIX, OPTIMIZER_STEP, ZERO_GRAD, "autograd::engine::")


@fact("run.training", "Whether the trace trains: a backward pass or an optimizer step in it (an inference "
                      "trace has neither, and gets no training advice).")
def run_training(ctx: Context) -> bool:
    trace = ctx.need_trace()
    if any(name.startswith(_TRAINING_MARKS) for name in trace.names()):
        return True
    source = (ctx.meta.get("window") or {}).get("step_source") if isinstance(ctx.meta.get("window"), dict) else None
    return source in ("optimizer", "closure", "backward")


@fact("run.framework", "The training framework whose loop drove the steps (Lightning, Hugging Face "
                       "Transformers), else an empty string.")
def run_framework(ctx: Context) -> str:
    framework = (ctx.meta.get("window") or {}).get("framework") if isinstance(ctx.meta.get("window"), dict) else None
    return str(framework.get("name") or "") if isinstance(framework, dict) else ""


@fact("run.has_stacks", "Whether the trace was recorded with Python stacks (with_stack=True).")
def run_has_stacks(ctx: Context) -> bool:
    return ctx.need_trace().has_stacks


def require_stacks(ctx: Context) -> None:
    if not ctx.need_trace().has_stacks:
        raise Missing("the trace has no Python stacks (record with with_stack=True)")
