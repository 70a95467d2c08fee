"""torch.compile in the step: graph breaks and recompilations (tips T25, T26).

The compile probe (collect/probes/compile.py) says what dynamo compiled, where it broke and why it
recompiled; the trace says what it cost: each call of a compiled frame is a `Torch-Compiled Region:
F/C` range, a frame split by a graph break calls its resume frame from inside its own range, and
the time of a region not spent in a compiled graph (`CompiledFunction`, `## Call CompiledFxGraph`)
or a nested region is Python, guards and eager ops between the graphs.
"""
from __future__ import annotations

import statistics
from bisect import bisect_left
from collections import defaultdict
from operator import attrgetter

from ..probe_schema import GRAPH_RANGE
from ..projection.host.overhead import EventCosts, event_costs, own_python_us
from ..trace.model import Event, Trace
from ..trace.nesting import innermost
from .registry import Context, Missing, fact
from .sites import Site, site_from_probe

REGION = "Torch-Compiled Region"
GRAPH_CALLS = ("CompiledFunction", "## Call CompiledFxGraph")
_TS = attrgetter("ts")


def _snapshot(ctx: Context) -> dict | None:
    """The compile probe's record; None when the script compiled nothing."""
    return ctx.probe("compile")


def _frame_of(compile_id: str | None) -> str | None:
    return compile_id.split("/")[0] if compile_id and "/" in compile_id else None


def _region_frame(name: str) -> str | None:
    """'Torch-Compiled Region: 1/0' -> '1' (older torch writes no id)."""
    _, _, cid = name.partition(": ")
    return _frame_of(cid.strip())


def regions(ctx: Context) -> dict:
    """Compiled regions in the measured steps: which frames ran, the nested (resumed) calls, and the
    host time of each frame spent outside its compiled graphs. Computed once."""
    cached = ctx.__dict__.get("_compiled_regions")
    if cached is not None:
        return cached
    trace = ctx.need_trace()
    regs = [e for e in trace.named(lambda name: name.startswith(REGION)) if ctx.step_of(e.ts) is not None]
    graph_calls = [e for e in trace.named(lambda name: name.startswith(GRAPH_CALLS))
                   if ctx.step_of(e.ts) is not None] if regs else []
    parent = innermost(regs, regs)  # a resumed frame's region sits inside the frame that broke
    inside = innermost(regs, graph_calls)  # each graph call's innermost region
    children: dict[int, list[Event]] = defaultdict(list)  # what each region ran in its graphs and resumed frames
    for r in regs:
        if id(r) in parent:
            children[id(parent[id(r)])].append(r)
    for g in graph_calls:
        if id(g) in inside:
            children[id(inside[id(g)])].append(g)

    def top(r):
        while id(r) in parent:
            r = parent[id(r)]
        return r
    frames_run = {_region_frame(r.name) for r in regs}
    nested = [(ctx.step_of(r.ts), _region_frame(parent[id(r)].name), _region_frame(r.name))
              for r in regs if id(r) in parent]
    eager: dict[tuple, float] = defaultdict(float)   # (top frame, step) -> µs
    python: dict[tuple, float] = defaultdict(float)
    costs = event_costs(trace)
    for r in regs:
        key = (_region_frame(top(r).name), ctx.step_of(r.ts))
        eager[key] += max(r.dur - sum(c.dur for c in children[id(r)]), 0.0)
        python[key] += _python_between_graphs(trace, costs, r, children[id(r)])
    out = {"frames_run": frames_run, "nested": nested, "has_graph_calls": bool(inside),
           "eager_us": _typical_total(eager), "python_us": _typical_total(python), "regions": len(regs)}
    ctx.__dict__["_compiled_regions"] = out
    return out


def _typical_total(per_step: dict[tuple, float]) -> dict[str | None, float]:
    """Each frame's time over the steps it ran in, as its median step times their number: a step the scheduler
    preempted inside a region (a busy machine: 4.5 ms in one of five steps' 0.4 ms gaps) weighs as a usual one."""
    steps: dict[str | None, list[float]] = defaultdict(list)
    for (frame, _), us in per_step.items():
        steps[frame].append(us)
    return {frame: statistics.median(values) * len(values) for frame, values in steps.items()}


def _python_between_graphs(trace: Trace, costs: EventCosts | None, region: Event, children: list[Event]) -> float:
    """The host time of a region outside its graphs and resumed frames less the eager torch ops there (their CPU
    compute; on a GPU kernels that stay once the graph is whole) and less what perfaudit's recording added
    (projection/host/overhead.py): the Python, guards and frame changes a graph break costs on any host (µs)."""
    stretches, at = [], region.ts
    for c in sorted(children, key=lambda e: e.ts):
        if c.ts > at:
            stretches.append((at, c.ts))
        at = max(at, c.end)
    if region.end > at:
        stretches.append((at, region.end))
    host, total = trace.host, 0.0
    for a, b in stretches:
        ops, reach = 0.0, a
        for e in host[bisect_left(host, a, key=_TS):bisect_left(host, b, key=_TS)]:
            if e.kind == "op" and e.tid == region.tid and e.ts >= reach and e.name.startswith("aten::"):
                ops += min(e.end, b) - e.ts
                reach = e.end
        own = own_python_us(trace, costs, a, b) if costs is not None else 0.0
        total += max(b - a - ops - own, 0.0)
    return total


@fact("compile.step_compiled", "Whether the measured steps ran compiled code (a Torch-Compiled Region "
                               "in the steps; a frame whose compile failed runs eagerly and has none).")
def step_compiled(ctx: Context) -> bool:
    return bool(regions(ctx)["regions"])


@fact("compile.cuda_graphs", "Whether the measured steps replay CUDA graphs: torch.compile's `reduce-overhead` or a "
                            "captured step (a graph launch in a GPU trace; on the emulated device, its replay ranges).")
def cuda_graphs(ctx: Context) -> bool:
    trace = ctx.need_trace()
    replays = trace.named(lambda name: name == GRAPH_RANGE or name.startswith(("cudaGraphLaunch", "hipGraphLaunch")))
    return any(ctx.step_of(e.ts) is not None for e in replays)


def _compile_seconds(snap: dict, phases: tuple[str, ...], frame: str | None = None) -> float:
    """Seconds spent compiling in the given phases (optionally one frame), from the compile callbacks
    when the torch version has them, else from the compilation metrics."""
    if snap.get("timed_by_callbacks"):
        items = snap.get("compiles") or []
    else:
        items = [f for f in snap.get("frames") or [] if f.get("func")]
    return sum(i.get("seconds") or 0.0 for i in items
               if i.get("phase") in phases and (frame is None or _frame_of(i.get("id")) == frame))


@fact("compile.summary", "torch.compile at a glance: compile seconds before and inside the measured "
                         "window, frames compiled, recompiles, warm-up steps added while it compiled.")
def compile_summary(ctx: Context) -> dict:
    snap = _snapshot(ctx)
    if not snap:
        raise Missing("nothing was compiled")
    frames = [f for f in snap.get("frames") or [] if f.get("func")]
    failed = [f for f in frames if f.get("fail_type")]  # compiling failed (suppress_errors): it runs eagerly
    window = _window if isinstance(_window := ctx.meta.get("window"), dict) else {}
    return {"before_s": _compile_seconds(snap, ("startup", "warmup")),
            "window_s": _compile_seconds(snap, ("window",)),
            "frames": len({_frame_of(f.get("id")) for f in frames}),
            "graphs": len(frames) - len(failed),
            "failed": len(failed),
            "failed_reason": (f"{failed[0].get('fail_type')}: {failed[0].get('fail_reason') or ''}".strip(": ")
                              if failed else None),
            "recompiles": sum(1 for f in frames if f.get("recompile_reason")),
            "graph_breaks": len(snap.get("graph_breaks") or []),
            "fell_back": sum(1 for f in snap.get("frames") or [] if f.get("fell_back")),
            "warmup_added": window.get("compile_warmup", 0) if isinstance(window.get("compile_warmup"), int) else 0}


def _breaks(snap: dict) -> list[dict]:
    """Graph breaks as dynamo logged them; else where resume frames show a frame was split."""
    logged = [b for b in snap.get("graph_breaks") or [] if isinstance(b.get("site"), dict)]
    if logged:
        return logged
    frames = snap.get("frames") or []
    reasons: dict[tuple, str] = {}
    for f in frames:
        if f.get("restart_reasons") and f.get("func"):
            reasons.setdefault((f.get("path"), f.get("func")), f["restart_reasons"][0])
    out, seen = [], set()
    for f in frames:
        site = f.get("resume")
        if site and (site["path"], site["line"]) not in seen:
            seen.add((site["path"], site["line"]))
            out.append({"site": site, "reason": reasons.get((site["path"], site["func"]), "graph break"),
                        "compile_id": None, "resume_frame": _frame_of(f.get("id"))})
    return out


@fact("compile.graph_breaks", "Graph breaks in compiled code that ran in the measured steps: the user's "
                              "line, dynamo's reason, resumed calls per step and the host time the split "
                              "frame spent outside its compiled graphs.")
def graph_breaks(ctx: Context) -> list[Site]:
    snap = _snapshot(ctx)
    if not snap:
        return []
    run = regions(ctx)
    breaks = _breaks(snap)
    resume_at = {}  # resume frame -> the (path, line) it resumes at
    for f in snap.get("frames") or []:
        if f.get("resume"):
            resume_at[_frame_of(f.get("id"))] = (f["resume"]["path"], f["resume"]["line"])
    ids_known = any(fr is not None for fr in run["frames_run"])
    counted: dict[int, int] = defaultdict(int)
    steps_of: dict[int, set] = defaultdict(set)
    for step, parent, child in run["nested"]:  # each resumed call: the break it resumes from
        at = resume_at.get(child)
        match = next((i for i, b in enumerate(breaks)
                      if at is not None and (b["site"].get("path"), b["site"].get("line")) == at), None)
        if match is None:
            match = next((i for i, b in enumerate(breaks) if _frame_of(b.get("compile_id")) == parent
                          or b.get("resume_frame") == child), None)
        if match is None and len(breaks) == 1:
            match = 0
        if match is not None:
            counted[match] += 1
            steps_of[match].add(step)
    per_frame_total: dict[str | None, int] = defaultdict(int)
    for i, b in enumerate(breaks):
        per_frame_total[_frame_of(b.get("compile_id"))] += counted[i]
    sites = []
    for i, b in enumerate(breaks):
        frame = _frame_of(b.get("compile_id"))
        if ids_known and not counted[i] and (frame is None or frame not in run["frames_run"]):
            continue  # a break in code that did not run in the measured steps
        site = site_from_probe(ctx, b["site"], b.get("reason") or "graph break")
        site.count = counted[i]
        site.steps_seen = steps_of[i] or set(range(len(ctx.steps)))
        eager = run["eager_us"].get(frame) if run["has_graph_calls"] else None
        if eager is not None and per_frame_total[frame]:
            site.ms = eager / 1000.0 * counted[i] / per_frame_total[frame]
            site.extra["host_ms"] = run["python_us"].get(frame, 0.0) / 1000.0 * counted[i] / per_frame_total[frame]
        site.extra.update(reason=b.get("reason") or "", frame=frame)
        sites.append(site)
    return sites


def _guard_site(first: dict, guard: dict | None) -> dict:
    """The user line a failing guard comes from (dynamo writes it, its path cut short), else the
    compiled function's first line."""
    where = {"path": first.get("path"), "line": first.get("line"), "func": first.get("func")}
    if guard and guard.get("line") and first.get("path") and first["path"].endswith(guard.get("path_tail", "\0")):
        where.update(line=guard["line"])
    return where


@fact("compile.recompiles", "Frames dynamo compiled again after the first step: how often, the guard "
                            "that failed and its line, compile seconds inside the window, and whether "
                            "dynamo hit its recompile limit and runs the frame eagerly.")
def recompiles(ctx: Context) -> list[Site]:
    snap = _snapshot(ctx)
    if not snap:
        return []
    n = len(ctx.steps)
    by_frame: dict[str, list[dict]] = defaultdict(list)
    for f in snap.get("frames") or []:
        if f.get("func") or f.get("fail_reason"):
            by_frame[_frame_of(f.get("id")) or "?"].append(f)
    limit_frames = {_frame_of(h.get("compile_id")) for h in snap.get("limit_hits") or []}
    sites = []
    for frame, records in by_frame.items():
        first = next((r for r in records if r.get("func")), None)
        if first is None:
            continue
        later = [r for r in records if r.get("recompile_reason") and r.get("func") and r.get("phase") != "startup"]
        fell_back = any(r.get("fell_back") for r in records) or frame in limit_frames
        if not later and not fell_back:
            continue
        guards = [r["recompile_reason"] for r in records if r.get("recompile_reason")]
        last = guards[-1] if guards else None
        in_window = [r for r in later if r.get("phase") == "window"]
        window_s = _compile_seconds(snap, ("window",), frame)
        training_s = _compile_seconds(snap, ("warmup", "window"), frame)
        fell_step = next((r.get("step") for r in records if r.get("fell_back")), None)
        site = site_from_probe(ctx, _guard_site(first, last),
                               _recompile_detail(first.get("func"), last, len(later), training_s, len(in_window),
                                                 window_s, fell_back, fell_step))
        site.count = len(in_window)
        site.steps_seen = set(range(min(len(in_window), n)))
        site.ms = window_s * 1000.0  # compiling inside the measured steps
        site.extra.update(recompiles=len(later) + (1 if fell_back else 0), window_recompiles=len(in_window),
                          window_s=window_s, training_s=training_s, fell_back=fell_back, fell_back_step=fell_step,
                          guard=(last or {}).get("guard", ""), function=first.get("func"))
        sites.append(site)
    return sites


def _recompile_detail(func, guard: dict | None, count: int, training_s: float, in_window: int,
                      window_s: float, fell_back: bool, fell_step) -> str:
    """One sentence: the guard, how often, what it cost, and whether dynamo gave up."""
    text = f"guard `{guard['guard']}` failed" if guard and guard.get("guard") else "guards failed"
    text += f": {func} recompiled {count} time(s) after the first step ({training_s:.2f} s compiling"
    text += f", {in_window} in the measured window: {window_s:.2f} s)" if in_window else ")"
    if fell_back:
        text += ("; dynamo hit its recompile limit" + (f" at step {fell_step + 1}" if isinstance(fell_step, int) else "")
                 + f" and runs {func} eagerly from then on")
    return text
