"""The run projected onto a named GPU (`--target`, issue 39): the projection model (perfaudit/projection/)
fed with what the run showed: the trace's steps, the TF32 flags, the DataLoader's workers and their time
per batch, the batch copied to the device each step and from what memory."""
from __future__ import annotations

from ...projection import devices
from ...projection.model import Inputs, Projector
from ..data import plain_timing
from ..distributed.ddp import bucket_copy_spans
from ..emulated import emulated
from ..model import bias_fix
from ..probed import segments_per_empty_cache
from ..registry import Context, Missing, fact
from ..shapes import search_marks
from ..training.grads import fill_spans
from ..training.optim import fused_updates
from .device_steps import traits

AUTO, OFF = "auto", "none"
DEFAULT_TARGET = "H100 SXM"   # a CPU run of a script with a CUDA path, when neither --target nor the config names one


def target_of(ctx: Context) -> tuple[devices.Device, str]:
    """The device to project onto and why that one: named (--target, the config), the GPU the trace was
    recorded on (a GPU run: an identity check), or the default for a CPU run of a script's CUDA path."""
    wanted = getattr(ctx, "target", AUTO) or AUTO
    if wanted.lower() == OFF:
        raise Missing("projection turned off (--target none)")
    trace = ctx.need_trace()
    if wanted.lower() != AUTO:
        try:
            return devices.target(wanted), "named"
        except ValueError as exc:
            raise Missing(str(exc)) from None
    if trace.has_gpu:
        name = trace.device_properties.get("name") or (ctx.probes.get("environment") or {}).get("device_name")
        device = devices.device_named(name)
        if device is None:
            raise Missing(f"the GPU this trace was recorded on ({name or 'unnamed'}) is not in perfaudit's table")
        return device, "recorded"
    if emulated(ctx):
        return devices.target(DEFAULT_TARGET), "default"
    raise Missing("a CPU run of a script with no CUDA path: nothing to project (--target NAME projects it anyway)")


def emulated_gpu(target: str) -> dict | None:
    """The GPU the emulated device presents itself as to the script (its name, memory, compute capability and
    SMs in torch.cuda's answers): the run's target, the default one when none is named; None for a name the
    table does not know (the run then says so; the device keeps its generic answers)."""
    wanted = target if target and target.lower() not in (AUTO, OFF) else DEFAULT_TARGET
    try:
        device = devices.target(wanted)
    except ValueError:
        return None
    gpu = {"name": f"{device.name} (emulated on the CPU by perfaudit)", "sms": device.sms}
    if device.memory_gib:
        gpu["total_memory"] = device.reported_memory
    if device.compute_capability:  # NVIDIA's: (9, 0) for 9.0
        major = int(device.compute_capability)
        gpu["capability"] = [major, round((device.compute_capability - major) * 10)]
    return gpu


def inputs_of(ctx: Context) -> Inputs:
    env = ctx.probes.get("environment") or {}
    trace = ctx.need_trace()
    if trace.has_gpu:  # the kernels say which math ran (each distinct name classified once, shared with other facts)
        tf32 = any(t.precision == "tf32" for t in traits(ctx).values())
    else:
        tf32 = bool(env.get("tf32_matmul")) or env.get("float32_matmul_precision") in ("high", "medium")
    inputs = Inputs(tf32_matmul=tf32, tf32_conv=env.get("tf32_cudnn", True) is not False)
    try:
        loader = ctx.get("data.loader")
    except Missing:
        loader = None
    if loader and loader.get("num_workers"):
        inputs.workers, inputs.worker_ms_per_batch = loader["num_workers"], loader.get("worker_ms_per_batch")
    elif loader and loader.get("num_workers") == 0 and not trace.has_gpu:
        plain = plain_timing(ctx)
        inputs.plain_fetch_ms = plain[0] if plain is not None else None
    inputs.optimizer_updates = fused_updates(ctx)
    inputs.grad_fills = fill_spans(ctx)
    inputs.bias_convs, inputs.bias_spans = bias_fix(ctx)
    inputs.segments_per_empty_cache = segments_per_empty_cache(ctx)
    inputs.searches = search_marks(ctx) if not trace.has_gpu else None
    inputs.syncs_per_step = _syncs_per_step(ctx)
    inputs.bucket_copies = bucket_copy_spans(ctx)
    if not trace.has_gpu and emulated(ctx):
        inputs.marked_syncs = True   # the emulated device marked its reads of device values (SYNC_RANGE)
        # the probe's shape is checked when the trace is read (probe_schema.py): rows of dicts, or no probe
        rows = (ctx.probes.get("cuda_emulation") or {}).get("autocast") or []
        regions = [e for e in rows if e["device_type"] == "cuda" and e.get("enabled")]
        # float16 regions whose ops the trace has in bfloat16: an older perfaudit's emulated run (it ran float16
        # autocast as bfloat16); today's records float16, and no bfloat16 op is left to read as float16
        if regions and all(e.get("dtype") in ("float16", None) for e in regions):
            inputs.bf16_as = "fp16"
        fed = [d for d in ctx.probes.get("dataloaders") or [] if isinstance(d, dict) and d.get("batch_bytes")]
        if fed:
            main = max(fed, key=lambda d: d.get("window_batches", 0))
            inputs.batch_bytes = int(main["batch_bytes"])
            inputs.pinned = bool(main.get("pin_memory") or main.get("batch_pinned"))
            try:
                sites = ctx.get("copy.pageable_sites")
            except Missing:
                sites = []
            inputs.blocking = any(s.extra.get("blocking", True) for s in sites) if sites else not inputs.pinned
    return inputs


def _syncs_per_step(ctx: Context) -> float:
    """The most all-reducing backwards any DDP model ran per optimizer step (1.0: one, or no DDP)."""
    try:
        sites = ctx.get("ddp.sync_per_step")
    except Missing:
        return 1.0
    return max((float(s.extra.get("syncs_per_step") or 1.0) for s in sites), default=1.0)


def projector(ctx: Context) -> Projector:
    """The projector of this trace onto its target, made once (the what-if replays reuse its plans)."""
    cached = ctx.__dict__.get("_projector")
    if cached is None:
        device, why = target_of(ctx)
        trace = ctx.need_trace()
        if not trace.has_gpu and not any("Input type" in e.args for e in trace.host if e.kind == "op"):
            raise Missing("the trace has no op shapes (record with record_shapes=True): nothing to model the "
                          "kernels from")
        recorded = devices.device_named(trace.device_properties.get("name")) if trace.has_gpu else None
        steps = ctx.quiet_steps or ctx.steps
        try:
            cached = Projector(trace, steps, device, inputs_of(ctx), recorded, ctx.undisturbed_us,
                               ctx.host_waited_us)
        except ValueError as exc:
            raise Missing(str(exc)) from None
        cached.why = why
        ctx.__dict__["_projector"] = cached
    return cached


@fact("projection", "The measured steps projected onto a named GPU (--target; on a GPU trace the GPU it was "
                    "recorded on; on a CPU run of a script's CUDA path H100 SXM): target, step_ms (projected) "
                    "beside measured_step_ms, data_share (0-1) and data_share_pct, data_wait_ms (the GPU idle "
                    "while the host waits for data), gpu_busy_share and gpu_busy_pct, host_idle_ms and "
                    "host_idle_share (GPU idle while the host runs Python and launches, of all idle), bottleneck "
                    "(data, host, sync, copies, gpu, communication), error_pct (the model's expected error), "
                    "method, shares; idle_pct (the GPU idle, % of the step); on a CPU run small_kernels: the "
                    "modelled kernels per step (kernels_per_step), the elementwise ones under 10 µs on the "
                    "target (per_step, share_pct) and the host's time launching them (launch_ms, "
                    "launch_share_pct).")
def projection(ctx: Context) -> dict:
    p = projector(ctx)
    result = p.run()
    proj = result.projection
    idle = sum(proj.idle_us.values())
    return {"target": result.target, "why_target": p.why, "method": result.method,
            "step_ms": proj.step_us / 1e3, "measured_step_ms": ctx.step_ms,
            "data_share_pct": 100.0 * proj.data_share, "gpu_busy_pct": 100.0 * proj.gpu_busy_share,
            "data_wait_ms": proj.idle_us["data"] / 1e3, "host_idle_ms": proj.idle_us["host"] / 1e3,
            "host_idle_share": proj.idle_us["host"] / idle if idle else 0.0,
            "data_share": proj.data_share, "gpu_busy_share": proj.gpu_busy_share, "bottleneck": proj.bottleneck,
            "error_pct": result.error_pct, "shares": dict(proj.shares),
            "busy_ms": {k: v / 1e3 for k, v in proj.busy_us.items()},
            "idle_ms": {k: v / 1e3 for k, v in proj.idle_us.items()},
            "identity": p.recorded_on is not None and p.recorded_on == p.target,
            "idle_pct": 100.0 * (1.0 - proj.gpu_busy_share), "small_kernels": p.small_kernels()}


def saving_ms(ctx: Context, kind: str, host_saved_ms: float = 0.0) -> float | None:
    """What one kind of fix saves per step on the target, by replaying the steps with it applied (ms); None
    where the fix's work is not in the trace (Projector.has_work)."""
    p = projector(ctx)
    if not p.has_work(kind):
        return None
    base = ctx.get("projection")["step_ms"]
    after = p.what_if(kind, host_saved_ms * 1e3).step_us / 1e3
    return max(base - after, 0.0)
