"""The console report: header (what ran, where the step goes), then ranked findings with fixes."""
from __future__ import annotations

import os
import re
import statistics

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..findings import Finding, Report
from ..outcome import describe as describe_outcome
from ..outcome import shown

_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
_PHASES = ("data", "forward", "backward", "optimizer", "other")
_GPU_PHASES = (("compute", "compute"), ("copies", "copies"), ("sync_wait", "sync wait"),
               ("alloc_wait", "allocator wait"), ("data_wait", "data wait"), ("other_idle", "idle (host-bound)"))


def device_note(device: str) -> str:
    """What a CPU run's device line must add: its GPU costs are estimates (and what emulation saw)."""
    if device == "cpu":
        return "  (CPU only: GPU costs are estimates)"
    if device.startswith("cpu, CUDA path offered"):
        return ("  (a CUDA device was offered, but the script trained on its CPU branch: a CPU report, GPU costs "
                "estimated)")
    if device.startswith("cpu, CUDA"):
        return "  (the script's GPU branch ran on the CPU: placements and copies seen, GPU costs estimated)"
    return ""


def unprofiled_note(t) -> str | None:
    """The step as timed after the window without the profiler (the median of the steps a busy machine left
    alone, as `verify` and `diff` count them), where the run timed such steps: what the script takes without
    perfaudit, beside the recorded mean, which carries the profiler's cost per Python call and op."""
    from ..verify.stats import undisturbed_unprofiled_s
    kept = undisturbed_unprofiled_s(t.unprofiled)
    if not kept:
        return None
    return f"{1000.0 * statistics.median(kept):.2f} ms timed without the profiler ({len(kept)} step(s) after the window)"


def _header(report: Report) -> Panel:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    if report.script:
        grid.add_row("script", shown(report.script))
    if report.files is not None:
        grid.add_row("lint", f"{report.files} file(s) read, no run (the static pass: no torch import)")
        grid.add_row("rules", f"{len(report.static_rules)} with a static check: {', '.join(report.static_rules)}")
    for t in report.traces[:8]:
        label = "trace" if len(report.traces) == 1 else f"rank {t.rank}" if t.rank is not None else "trace"
        grid.add_row(label, shown(t.path))
        grid.add_row("device", t.device + device_note(t.device))
        step = f"{t.step_ms:.2f} ms mean" if t.step_ms is not None else "n/a"
        others = [e for e in t.excluded if "waited" not in str(e.get("why")) and not e.get("kept")]
        left = f"; {len(others)} left out ({others[0]['why']})" if others else ""
        plain = unprofiled_note(t)
        grid.add_row("steps", f"{t.steps} measured ({t.step_source}), {step}{'; ' + plain if plain else ''}{left}")
        if t.training is False:
            grid.add_row("workload", "inference: no backward and no optimizer step in the trace (training advice "
                                     "left out)")
        if t.breakdown and t.breakdown.get("total"):
            total = t.breakdown["total"]
            parts = [f"{p} {t.breakdown[p]:.2f} ms ({100 * t.breakdown[p] / total:.0f}%)"
                     for p in _PHASES if t.breakdown.get(p, 0) > 0.005 * total]
            grid.add_row("host time", ", ".join(parts))
        gpu = t.gpu_breakdown
        if gpu and gpu.get("step"):
            parts = [f"{label} {gpu[key]:.2f} ms ({100 * gpu[key] / gpu['step']:.0f}%)"
                     for key, label in _GPU_PHASES if gpu.get(key, 0) > 0.005 * gpu["step"]]
            grid.add_row("GPU time", ", ".join(parts) + f"; busy {gpu['busy_pct']:.0f}%")
        if t.projection:
            grid.add_row("projected", projection_text(t.projection))
        if t.memory:
            grid.add_row("memory", memory_text(t.memory))
        if t.mfu:
            grid.add_row("FLOPs", mfu_text(t.mfu))
            if t.mfu.get("modules"):
                grid.add_row("by module", modules_text(t.mfu["modules"]))
            if t.mfu.get("worst_ops"):
                grid.add_row("slowest ops", worst_ops_text(t.mfu["worst_ops"]))
        if t.compile:
            grid.add_row("compile", compile_text(t.compile))
        if t.busy_machine:
            grid.add_row("machine", Text(t.busy_machine, style="yellow"))
        env = t.environment
        if env:
            grid.add_row("environment", f"torch {env.get('torch')}, CUDA {env.get('cuda') or '-'}, "
                                        f"cuDNN {env.get('cudnn') or '-'}, {env.get('cpu_count')} CPUs, "
                                        f"cudnn.benchmark={env.get('cudnn_benchmark')}")
    if len(report.traces) > 8:
        grid.add_row("", f"… and {len(report.traces) - 8} more traces")
    outcome = describe_outcome(report.outcome)
    if outcome:
        grid.add_row("outcome", Text(outcome, style="bold red"))
    return Panel(grid, title="perfaudit", title_align="left")


BOTTLENECK_WORDS = {"data": "waiting for the DataLoader", "host": "the host (Python, launches)",
                    "sync": "host-device syncs", "copies": "host-to-device copies", "gpu": "GPU compute",
                    "communication": "communication"}


def projection_text(p: dict) -> str:
    """The projected step on the target GPU beside the measured one, with its bottleneck; said to be a model."""
    if p.get("identity"):
        head = (f"{p['step_ms']:.2f} ms on {p['target']} (the GPU it ran on: a check of the model against the "
                f"{p['measured_step_ms']:.2f} ms measured)")
    else:
        head = (f"{p['step_ms']:.2f} ms/step on {p['target']} (±{p['error_pct']:.0f}%, projected; "
                f"{p['measured_step_ms']:.2f} ms measured here)")
    return (f"{head}; bottleneck {BOTTLENECK_WORDS.get(p['bottleneck'], p['bottleneck'])}, data wait "
            f"{100 * p['data_share']:.0f}%, GPU busy {100 * p['gpu_busy_share']:.0f}%")


def _bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def _article(name: str) -> str:
    """'an' before a GPU name read letter by letter from a vowel sound (an H100, an L4, an MI300X), else 'a'."""
    return "an" if name[:1].upper() in "AEFHILMNORSX" else "a"


def memory_text(m: dict) -> str:
    """Device memory of one step (emulated CUDA path, or measured on a GPU): the peak, what held it, the top line."""
    held = ", ".join(f"{k} {_bytes(v)}" for k, v in list(m["by_category"].items())[:4])
    top = m["top_sites"][0] if m.get("top_sites") else None
    line = f"; most from {top['file']}:{top['line']} ({_bytes(top['bytes'])})" if top else ""
    free = 100 * m["headroom_bytes"] / m["device_total_bytes"]
    measured = m.get("measured")
    context = (f" (after {_bytes(m['cuda_context_bytes'])} used outside torch's pool: the CUDA context, libraries)"
               if measured else f" (after about {_bytes(m['cuda_context_bytes'])} of CUDA context)") \
        if m.get("cuda_context_bytes") else ""
    how = "measured on this GPU" if measured else "estimated on the emulated device"
    how += f": {m['peak_scope']}" if m.get("peak_scope") else " over two warm-up steps"
    return (f"peak {_bytes(m['peak_allocated_bytes'])} allocated, {_bytes(m['peak_reserved_bytes'])} reserved "
            f"({how}); {free:.0f}% of {_article(m['target'])} "
            f"{m['target']} free{context}; "
            f"at the peak: {held}{line}" + "".join(f"; not counted: {n}" for n in m.get("not_counted") or []))


def mfu_text(m: dict) -> str:
    """MFU with its peak, or the achieved rate and why there is no MFU; the ledger's largest bars."""
    achieved = m["achieved_tflops"]
    rate = f"{achieved:.1f} TFLOP/s" if achieved >= 1 else f"{achieved * 1000:.1f} GFLOP/s"
    flops = f"{m['flops_per_step'] / 1e9:.2f} GFLOP/step ({m['flops_source']})"
    if m.get("mfu") is None:
        text = f"{flops}, {rate} achieved; no MFU: {m['why_no_mfu']}"
        if m.get("ledger") and m["step_ms"]:  # a GPU the peak table does not know: the causes still stand
            text += "; the step: " + ", ".join(
                f"{b['name']} {b['ms_per_step']:.2f} ms ({100 * b['ms_per_step'] / m['step_ms']:.0f}%)"
                for b in sorted(m["ledger"], key=lambda b: -b["ms_per_step"])[:3])
        p = m.get("projected")
        if p:
            lost = sorted(p["ledger"][1:], key=lambda b: -b["ms_per_step"])[:3]
            text += (f"; projected on {p['target']} (±{p['error_pct']:.0f}%): MFU {100 * p['mfu']:.1f} % of its "
                     f"{p['precision'].upper()} peak, the step beyond the ideal " + ", ".join(
                         f"{b['name']} {b['ms_per_step']:.2f} ms ({100 * b['ms_per_step'] / p['step_ms']:.0f}%)"
                         for b in lost))
        return text
    text = (f"MFU {100 * m['mfu']:.1f} % ({m['precision'].upper()} peak {m['peak_tflops']:.0f} TFLOP/s of "
            f"{m['device']}, {rate} achieved); {flops}")
    lost = sorted((b for b in m["ledger"] if b["rule"] or b["name"] == "kernel efficiency"),
                  key=lambda b: -b["ms_per_step"])[:3]
    step = m["step_ms"] or 1.0
    return text + "; the step beyond the ideal: " + ", ".join(
        f"{b['name']} {b['ms_per_step']:.2f} ms ({100 * b['ms_per_step'] / step:.0f}%)" for b in lost)


def modules_text(modules: list[dict]) -> str:
    """The top modules' shares of the forward FLOPs and time."""
    def one(m: dict) -> str:
        name = f"{m['name']} ×{m['instances']}" if m["instances"] > 1 else m["name"]
        return f"{name} {m['flops_share_pct']:.0f}% of forward FLOPs, {m['time_share_pct']:.0f}% of time"
    return ", ".join(one(m) for m in modules[:3])


def worst_ops_text(ops: list[dict]) -> str:
    """The op shapes furthest from the peak (GPU), or with the most compute time (CPU), with their rate."""
    def one(o: dict) -> str:
        rate = o["achieved_tflops"]
        rate = f"{rate:.1f} TFLOP/s" if rate >= 1 else f"{rate * 1000:.1f} GFLOP/s"
        lost = (f", {100 * o['share_of_peak']:.0f}% of the 16-bit peak, {o['lost_ms_per_step']:.2f} ms/step over the ideal"
                if o.get("share_of_peak") is not None else f", {o['ms_per_step']:.2f} ms/step")
        return f"{o['name']} [{o['shapes']}] {rate}{lost}"
    return "; ".join(one(o) for o in ops[:3])


def compile_text(c: dict) -> str:
    """torch.compile's time, kept apart from the step time."""
    text = (f"{c['before_s']:.2f} s compiling before the window ({c['graphs']} graph(s) in {c['frames']} "
            f"frame(s)), {c['window_s']:.2f} s inside it")
    if c.get("warmup_added"):
        text += f"; warm-up ran {c['warmup_added']} more step(s) until compiling stopped"
    if c.get("failed"):
        text += (f"; {c['failed']} compile(s) FAILED and run eagerly ({c.get('failed_reason') or 'no reason given'}: "
                 "suppress_errors hid it)")
    return text


def verified_text(v: dict) -> str:
    """`perfaudit verify`'s figures for a finding's fix, in one sentence."""
    low, high = v["interval_ms"] or (None, None)
    interval = f" (95% interval {low:.2f} to {high:.2f})" if low is not None else ""
    with_ = f", measured together with {', '.join(v['together'])}" if v.get("together") else ""
    return (f"{v['saved_ms']:.2f} ms/step saved{interval} ({v['speedup_pct']:+.1f}%, {v['verdict']}) on "
            f"{v['device']}{with_}; loss {v['loss']}")


def without_listed_locations(message: str, locations) -> str:
    """The message without the `at file:line, …` it repeats from the locations printed above it."""
    listed = [re.escape(f"{loc.path}:{loc.line}") for loc in locations]
    if not listed:
        return message
    one = "(?:" + "|".join(listed) + ")"
    text = re.sub(rf"\s*\bat {one}(?:,\s*{one})*(?=[\s.,;:)]|$)", "", message)
    text = re.sub(rf"\s*\({one}(?:,\s*{one})*\)", "", text)
    return text


def _finding(i: int, f: Finding) -> Group:
    head = Text()
    head.append(f"{i}. ", style="bold")
    head.append(f"[{f.severity.upper()}] ", style=_STYLE[f.severity])
    head.append(f"{f.rule} ", style="bold")
    head.append(f.title)
    if f.cost.ms_per_step is not None:
        est = "est. " if f.cost.estimated else ""
        share = f", {100 * f.cost.share_of_step:.1f}% of step" if f.cost.share_of_step is not None else ""
        head.append(f"  ({est}{f.cost.ms_per_step:.3f} ms/step{share})", style="dim")
    if f.cost.projected_ms is not None:
        share = f", {100 * f.cost.projected_share:.0f}%" if f.cost.projected_share is not None else ""
        head.append(f"  [projected on {f.cost.projected_on}: {f.cost.projected_ms:.2f} ms/step{share}]", style="cyan")
    lines = [head]
    for loc in f.locations[:5]:
        where = Text(f"   {shown(loc.path)}:{loc.line}", style="bold magenta", no_wrap=True, overflow="ellipsis")
        if not loc.exact:
            where.append("  (enclosing function)", style="dim")
        if len(f.locations) > 1 and loc.count_per_step is not None:  # each line its own count
            where.append(f"  ({loc.count_per_step:.1f}/step)", style="dim")
        if loc.code:  # a code line is cut, not wrapped mid-expression
            where.append(f"  {loc.code}", style="dim")
        lines.append(where)
    if len(f.locations) > 5:
        lines.append(Text(f"   … {len(f.locations) - 5} more locations", style="dim"))
    lines.append(Text("   " + without_listed_locations(f.message, f.locations[:5])))
    if f.verified:
        lines.append(Text("   verified: ", style="bold green").append(verified_text(f.verified), style="default"))
    for note in f.notes:
        lines.append(Text("   note: " + note, style="dim"))
    lines.append(Text("   fix: ", style="green").append(f.fix, style="default"))
    if f.trace and not f.locations:
        lines.append(Text(f"   in {f.trace}", style="dim"))
    return Group(*lines, Text(""))


def render(report: Report, console: Console, verbose: bool = False) -> None:
    console.print(_header(report))
    if report.findings:
        target = next((f.cost.projected_on for f in report.findings if f.cost.projected_on), None)
        saving = f"biggest saving on {target} (projected)" if target else "biggest saving"
        console.print(Text(f"{len(report.findings)} finding(s), most severe first, then {saving}:\n", style="bold"))
        for i, f in enumerate(report.findings, 1):
            console.print(_finding(i, f))
    elif report.files is not None:  # lint: no run, no window
        console.print(Text("No findings: the source shows none of the patterns the static checks look for.\n",
                           style="green"))
    else:
        console.print(Text("No findings: nothing in the recorded window matched a rule.\n", style="green"))
    if report.skipped:
        if verbose:
            for s in report.skipped:
                console.print(Text(f"skipped {s.rule}: {s.reason}", style="dim"))
        else:
            reasons = sorted({s.reason for s in report.skipped})
            console.print(Text(f"{len(report.skipped)} rule(s) not applicable or lacking data ({'; '.join(reasons)}); "
                               "--verbose lists them.", style="dim"))
    for note in report.notes:
        console.print(Text(f"note: {note}", style="dim"))
    if report.run_dir:
        run_dir = shown(report.run_dir)
        console.print(Text(f"run folder: {run_dir}  (report.html to open{_reanalyse(report)})", style="dim"))


def _reanalyse(report: Report) -> str:
    """The command that gives this report again from what the run folder holds; nothing when it holds
    no trace."""
    if not report.run_dir:
        return ""
    job = len(report.traces) > 1 or bool((report.outcome or {}).get("ranks"))
    target = report.run_dir if job else os.path.join(report.run_dir, "trace.json.gz")
    if not report.traces or not os.path.exists(target):
        return ""
    extra = ""
    if report.script:  # its source is read only under trusted folders: name the script's when it is elsewhere
        folder = os.path.dirname(os.path.abspath(report.script))
        if os.path.relpath(folder).startswith(".."):
            extra = f" --source-root {shown(folder)}"
    return f"; re-analyse: perfaudit analyze {shown(target)}{extra}"
