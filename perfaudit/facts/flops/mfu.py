"""Model FLOPs utilisation and where the rest of the step went (tip T31): the measured GPU step as the ideal
time of the model's FLOPs at the device's 16-bit peak plus one bar per cause, each the part of the step
another rule measures, and a residual "kernel efficiency" (the matrix kernels slower than peak)."""
from __future__ import annotations

from ...projection import devices
from ..gpu import intervals as iv
from ..gpu.device_steps import per_step, traits
from ..registry import Context, Missing, fact
from .counted import counted_ops, device_name, device_peak, op_flops
from .split import worst_ops

# ledger bar -> the rule that measures (and fixes) that part of the step
BARS = (("host-bound idle", "UTIL001"), ("data wait", "DATA001"), ("sync wait", "SYNC001"),
        ("allocator wait", "MEM003"), ("exposed communication", "COMM001"), ("copies", "COPY001"),
        ("precision (FP32/TF32 matrix work)", "AMP001"), ("small kernels", "FUSE001"),
        ("kernel efficiency", None))


def _precision(ctx: Context) -> str:
    """The precision of most matrix-kernel time: bf16, fp16, tf32 or fp32."""
    time = ctx.get("gpu.precision")
    if not (time["half"] or time["tf32"] or time["fp32"]):
        return "bf16"  # no matrix kernels seen: the 16-bit peak is the yardstick
    kind = max(("half", "tf32", "fp32"), key=lambda k: time[k])
    return ("bf16" if time["bf16"] >= time["half"] / 2 else "fp16") if kind == "half" else kind


def _small_kernel_ms(ctx: Context) -> float:
    busy = []
    small_names = {name for name, t in traits(ctx).items() if t.small_elementwise}
    for step, inside in zip(ctx.steps, per_step(ctx)):
        small = [(e.ts, e.ts + e.dur) for e in inside if e.dur < 10 and e.name in small_names and e.kind == "kernel"]
        busy.append(iv.total(iv.union(iv.clip(small, step.ts, step.end))))
    return sum(busy) / len(busy) / 1000.0


def _best(tflops: dict) -> float:
    """The 16-bit dense peak: the yardstick of the ideal step."""
    return max(tflops.get("bf16", 0.0), tflops.get("fp16", 0.0)) or max(tflops.values())


def _ledger(ctx: Context, flops: float, tflops: dict | None) -> list[dict]:
    """Bars in ms per step that add up to the measured mean step: the GPU's idle time by cause and its
    copies as measured; kernel time split into the ideal (the FLOPs at the 16-bit peak), exposed
    communication, the FP32/TF32 premium (that matrix time less the same work at the 16-bit peak),
    small elementwise kernels, and the residual kernel efficiency. Each part taken from what is left.
    Without the device's peak (`tflops` None) the causes stand and the ideal, the premium and the kernels'
    efficiency are one bar: the kernel time the peak would split."""
    gpu = ctx.get("gpu.step_breakdown")
    if tflops is None:
        best, premium, ideal = 1.0, 0.0, 0.0
    else:
        best = _best(tflops)
        precision = ctx.get("gpu.precision")
        premium = (precision["fp32"] * (1 - tflops.get("fp32", best) / best)
                   + precision["tf32"] * (1 - tflops.get("tf32", tflops.get("fp32", best)) / best))
        ideal = flops / (best * 1e12) * 1000.0
    try:
        exposed = ctx.get("comm.exposed")["exposed_ms"]
    except Missing:
        exposed = 0.0
    left = gpu["compute"]
    parts = {}
    for name, wanted in (("ideal", ideal), ("exposed communication", exposed),
                         ("precision (FP32/TF32 matrix work)", premium), ("small kernels", _small_kernel_ms(ctx))):
        parts[name] = min(max(wanted, 0.0), left)
        left -= parts[name]
    parts["kernel efficiency"] = left
    parts.update({"host-bound idle": gpu["other_idle"], "data wait": gpu["data_wait"], "sync wait": gpu["sync_wait"],
                  "allocator wait": gpu["alloc_wait"], "copies": gpu["copies"]})
    if tflops is None:
        return [{"name": "kernel time (no peak to split it)" if name == "kernel efficiency" else name,
                 "ms_per_step": parts[name], "rule": rule} for name, rule in BARS if not name.startswith("precision")]
    return [{"name": "ideal at peak", "ms_per_step": parts["ideal"], "rule": None}] + \
        [{"name": name, "ms_per_step": parts[name], "rule": rule} for name, rule in BARS]


def _projected(ctx: Context, flops: float) -> dict | None:
    """MFU and its ledger on the projected step (a CPU run projected onto a GPU, facts.gpu.projection), at the
    target's 16-bit peak: the ideal step, then the GPU's time beyond it and what the GPU idles for. A model."""
    try:
        p = ctx.get("projection")
    except Missing:
        return None
    entry = devices.entry_for(p["target"]) or {}
    tflops = entry.get("tflops") or {}
    precision = "bf16" if "bf16" in tflops else "fp16"
    peak = tflops.get(precision)
    if not peak or not p["step_ms"]:
        return None
    ideal = flops / (peak * 1e12) * 1000.0
    ledger = [{"name": "ideal at peak", "ms_per_step": ideal, "rule": None},
              {"name": "GPU time beyond the ideal", "ms_per_step": max(p["busy_ms"]["compute"] - ideal, 0.0),
               "rule": "AMP002"},
              {"name": "host-bound idle", "ms_per_step": p["idle_ms"]["host"], "rule": "UTIL001"},
              {"name": "data wait", "ms_per_step": p["idle_ms"]["data"], "rule": "DATA001"},
              {"name": "sync wait", "ms_per_step": p["idle_ms"]["sync"], "rule": "SYNC001"},
              {"name": "copies", "ms_per_step": p["busy_ms"]["copies"], "rule": "COPY001"}]
    return {"target": p["target"], "precision": precision, "peak_tflops": peak, "step_ms": p["step_ms"],
            "mfu": flops / (p["step_ms"] / 1000.0) / (peak * 1e12), "error_pct": p["error_pct"], "ledger": ledger}


@fact("mfu", "Model FLOPs utilisation: FLOPs per step, achieved TFLOP/s, the device's peak at the precision the "
             "matrix kernels used (projection/devices.yaml) and MFU; on a GPU trace of a known device, the ledger from the "
             "ideal step to the measured one (bars in ms per step with the rule that measures each). On a CPU "
             "run or an unknown device, FLOPs and achieved TFLOP/s only, and why; a CPU run projected onto a GPU "
             "gets `projected`: MFU and the ledger on the projected step, at the target's 16-bit peak.",
      needs=("shapes",))
def model_flops_utilisation(ctx: Context) -> dict:
    counted = ctx.get("flops.per_step")
    flops, step_ms = counted["per_step"], ctx.step_ms
    out = {"flops_per_step": flops, "flops_source": counted["source"], "flops_from_shapes": counted.get("from_shapes"),
           "step_ms": step_ms,
           "achieved_tflops": flops / (step_ms / 1000.0) / 1e12 if step_ms else 0.0,
           "device": None, "precision": None, "peak_tflops": None, "peak_source": None, "mfu": None,
           "ledger": [], "modules": counted["modules"], "ops": counted["ops"], "worst_ops": [], "why_no_mfu": None}
    if not ctx.is_gpu:
        out["why_no_mfu"] = "a CPU run: MFU and its ledger need a GPU run or trace"
        out["worst_ops"] = worst_ops(ctx, counted_ops(ctx), op_flops, None)
        out["projected"] = _projected(ctx, flops)
        return out
    name = device_name(ctx)
    entry = device_peak(name) or devices.entry_by_architecture(ctx.need_trace().device_properties)
    out["device"] = name
    if entry is None:
        out["why_no_mfu"] = (f"the peak of {name!r} is not in perfaudit's table" if name else
                             "the trace does not name its GPU") + (
            ": achieved TFLOP/s, and the ledger without its ideal (the kernel time the peak would split is one bar)")
        out["worst_ops"] = worst_ops(ctx, counted_ops(ctx), op_flops, None)
        out["ledger"] = _ledger(ctx, flops, None)
        return out
    precision = _precision(ctx)
    tflops = entry["tflops"]
    peak = tflops.get(precision) or max(tflops.get("bf16", 0.0), tflops.get("fp16", 0.0))
    out.update({"device": entry["name"], "precision": precision, "peak_tflops": peak, "peak_source": entry["source"],
                "mfu": out["achieved_tflops"] / peak if peak else None, "ledger": _ledger(ctx, flops, tflops),
                "worst_ops": worst_ops(ctx, counted_ops(ctx), op_flops, _best(tflops))})
    return out
