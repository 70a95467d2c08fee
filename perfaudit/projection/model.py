"""A recorded run projected onto a named GPU: the steps replayed through the simulation with each kernel's
time on the target, from the kernels a GPU trace measured (scaled by the two devices' peaks) or from the
ops' shapes (a CPU trace); and what a fix would save there, by replaying the steps again with the fix
applied (`what_if`)."""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ..trace.model import Event, Step, Trace
from .allocator import with_emptied_cache, without_emptied_cache
from .devices import Device
from .host.compiled_kernels import compiled_kernels
from .host.cudnn_search import any_search, per_step_us, with_searches, without_marks, without_searches
from .host.frees import freed_in
from .host.overhead import in_python_time
from .kernels import MATH_KINDS, Work, calibration, kernel_us, retargeted_us
from .plans import fetch_at_most
from .simulate import Pipeline, Projection, scaled, simulate, sync_idle_capped
from .timeline import Item, Launched, StepPlan, from_kernels, from_shapes, kernels_retimed, plan, shapes_retimed, window
from .transfers.collectives import collective_timer, ranks_of, waits_for, with_collectives
from .transfers.copies import copy_timer, made_on_device, marked, pinned_and_batched
from .whatifs.fused_optimizer import Update, fused
from .whatifs.in_spans import without_work_in
from .whatifs.no_bias import any_bias, without_bias
from .whatifs.no_sync import any_collective, one_sync_per_step
from .work import work_of

HALF = "bf16"   # what autocast's matrix math runs in, for the precision what-if
WHAT_IFS = ("data", "sync", "copies", "precision", "host", "optimizer", "grads", "created", "bias", "cache", "search",
            "no_sync", "bucket_view")


@dataclass
class Inputs:
    """What the projection needs beyond the trace, read from the run (facts)."""
    tf32_matmul: bool = False      # torch.backends.cuda.matmul.allow_tf32 (off by default since 1.12)
    tf32_conv: bool = True         # torch.backends.cudnn.allow_tf32 (on by default)
    bf16_as: str = "bf16"          # "fp16": a float16 autocast an older perfaudit's emulated run recorded in
                                   # bfloat16 (today's records float16 itself)
    workers: int = 0               # the DataLoader's workers, and each one's time per batch (ms)
    worker_ms_per_batch: float | None = None
    plain_fetch_ms: float | None = None  # loading in the training process: a step's fetches, timed without
                                         # the profiler (facts/data.py plain_timing)
    batch_bytes: int = 0           # a CPU run: the batch copied to the device each step
    pinned: bool = False
    blocking: bool = True
    marked_syncs: bool = False     # the run marked where the host waits for the device (the emulated device)
    optimizer_updates: list[Update] = field(default_factory=list)  # what a fused optimizer would do (OPT001)
    grad_fills: list[tuple[float, float]] = field(default_factory=list)  # gradient zero-fills and the first
                                                                         # accumulations into them (GRAD001)
    segments_per_empty_cache: float | None = None  # what each empty_cache() gives back (MEM001; None: not known)
    bias_convs: set[tuple] = field(default_factory=set)  # the convolutions (work.conv_key) whose bias feeds a
    bias_spans: list[tuple[float, float]] = field(default_factory=list)  # BatchNorm, and the trace's bias ops of
                                                                         # such layers (BN001)
    searches: tuple[list[str], int] | None = None  # cuDNN's searches the emulated device marked, the steps counted
    syncs_per_step: float = 1.0    # DDP's backwards per optimizer step that all-reduced the gradients (DDP002)
    bucket_copies: list[tuple[float, float]] = field(default_factory=list)  # DDP's copies of its buckets back
                                                                            # into the gradients (DDP003)


@dataclass
class Result:
    target: str
    method: str                    # how the kernels' times were had
    projection: Projection
    measured_step_ms: float
    error_pct: float = 0.0

    @property
    def step_ms(self) -> float:
        return self.projection.step_us / 1e3


def _copy_item(inputs: Inputs, target: Device, pinned: bool | None = None, blocking: bool | None = None) -> Item:
    pinned = inputs.pinned if pinned is None else pinned
    rates = calibration()["pcie_gbs"][target.pcie]
    gbs = rates["pinned" if pinned else "pageable"]
    return Item("copy", gpu_us=inputs.batch_bytes / (gbs * 1e3), stream="copy",
                blocking=(inputs.blocking if blocking is None else blocking) or not pinned, pageable=not pinned)


def _with_copies(plans: list[StepPlan], item: Callable[[], Item]) -> list[StepPlan]:
    """A CPU run's batch copy, placed after each step's first fetch (or at its start)."""
    out = []
    for p in plans:
        items = list(p.items)
        at = next((i + 1 for i, it in enumerate(items) if it.kind == "data"), 0)
        items.insert(at, item())
        out.append(StepPlan(p.number, p.measured_us, items))
    return out


def _hand_off_only(plans: list[StepPlan]) -> None:
    """Workers whose own time per batch was not measured: each step's wait for data is taken as the least any
    step waited, the hand-off of a batch that was ready. What a step waited beyond it on this machine is its
    workers competing with the training for its cores, not what a GPU host would see."""
    waits = [sum(i.host_us for i in p.items if i.kind == "data") for p in plans]
    least = min(waits, default=0.0)
    for p, wait in zip(plans, waits):
        for item in p.items:
            if item.kind == "data" and wait > 0:
                item.host_us *= least / wait


def _pipeline(inputs: Inputs) -> Pipeline | None:
    if inputs.workers > 0 and inputs.worker_ms_per_batch:
        return Pipeline(inputs.workers, inputs.worker_ms_per_batch * 1e3)
    return None


class Projector:
    """One trace's steps on one target: the plans made once, replayed as they are and with each fix."""

    why = ""  # why this target (facts/gpu/projection.py): named, the trace's own GPU, or the default

    def __init__(self, trace: Trace, steps: list[Step], target: Device, inputs: Inputs,
                 recorded_on: Device | None = None, undisturbed: Callable[[Step], float] | None = None,
                 host_waited: Callable[[Step], tuple[float | None, float | None]] | None = None):
        self.own_cost = in_python_time(trace)   # measured on the whole trace (its calibration precedes the steps)
        self.on_gpu = trace.has_gpu
        self.measured_ms = sum(s.dur for s in steps) / max(len(steps), 1) / 1e3
        self.freed = None if self.on_gpu else freed_in(trace)   # a CPU run: its frees a GPU would not make
        self.marked_copies = not self.on_gpu and marked(trace)  # the emulated device's copies, each where it ran
        trace, steps = window(trace, steps)
        # a large trace replays a run of its steps: what it projects is scaled to the mean measured step
        self.scale = self.measured_ms / (sum(s.dur for s in steps) / len(steps) / 1e3)
        self.trace, self.steps, self.target, self.inputs = trace, steps, target, inputs
        self.recorded_on, self.undisturbed, self.host_waited = recorded_on, undisturbed, host_waited
        self.cal = calibration()
        if self.on_gpu:
            if recorded_on is None:
                raise ValueError("the GPU this trace was recorded on is not in perfaudit's table")
            self.method = (f"the kernels measured on {recorded_on.name}" + ("" if recorded_on == target else
                           f", scaled to {target.name} by peak math and memory bandwidth"))
        else:
            self.method = "each op's kernels modelled from its recorded shapes (a CPU run)"
        self.plans = self._plans()
        self._result: Result | None = None
        self._replays: dict[tuple, Projection] = {}

    # -- the plans ---------------------------------------------------------------------------------------------
    def _plans(self, precision: str | None = None) -> list[StepPlan]:
        own_cost = self.own_cost
        if self.on_gpu:
            return plan(self.trace, self.steps, from_kernels(self._launched, self._kernel_scale(precision),
                                                             self._copy_scale(), self._op_ratio(precision)), own_cost,
                        self.undisturbed, host_waited=self.host_waited)
        cal, model = self.cal, self._model(precision)
        host_us = self._host_us_per_launch
        read_us = cal.get("read_round_trip_us", 0.0) if self.inputs.marked_syncs else None
        copy = without_marks(with_emptied_cache(copy_timer(cal["pcie_gbs"][self.target.pcie], host_us,
                                                           cal["copy_floor_us"]) if self.marked_copies else None,
                                                self._release_us))
        ranks = ranks_of(self.trace)  # a distributed job's rank: its collectives on the target's links
        if ranks > 1:
            copy = with_collectives(copy, collective_timer(self.target, cal, ranks, host_us))
        plans = plan(self.trace, self.steps, from_shapes(model, host_us, self.inputs.tf32_matmul,
                                                         self.inputs.tf32_conv, self.inputs.bf16_as, read_us,
                                                         cal.get("launch_us", 0.0), copy),
                     own_cost, self.undisturbed, self.freed, self.host_waited, waits_for(self.trace) if ranks > 1 else None,
                     compiled_kernels(self.trace, host_us, model, cal["compiled_cpu_gbs"]))
        plans = with_searches(plans, per_step_us(self.inputs.searches, self._model(None), cal))
        if self.inputs.workers and not self.inputs.worker_ms_per_batch:
            _hand_off_only(plans)
        if self.inputs.plain_fetch_ms is not None:
            fetch_at_most(plans, self.inputs.plain_fetch_ms * 1e3)
        if self.inputs.batch_bytes and not self.marked_copies:  # a plain CPU run: its batch, copied once a step
            plans = _with_copies(plans, lambda: _copy_item(self.inputs, self.target))
        return plans

    def _plans_in(self, precision: str) -> list[StepPlan]:
        """The plans with their float32 matrix math in `precision`: what `_plans(precision)` makes, each launch
        timed again from what it was timed from rather than every step planned again."""
        if self.on_gpu:
            gpu_us = kernels_retimed(self._launched, self._kernel_scale(precision), self._op_ratio(precision))
        else:
            gpu_us = shapes_retimed(self._model(precision), self.inputs.tf32_matmul, self.inputs.tf32_conv,
                                    self.inputs.bf16_as)
        return [StepPlan(p.number, p.measured_us, [i.timed(gpu_us(i)) if i.kind == "launch" and i.source is not None
                                                   else i for i in p.items]) for p in self.plans]

    def _model(self, precision: str | None) -> Callable[[Work], float]:
        """A modelled op's kernels' time on the target, its float32 matrix math in `precision` if given."""
        target, cal = self.target, self.cal

        def model(work: Work) -> float:
            if precision and work.kind in MATH_KINDS and work.precision in ("fp32", "tf32"):
                work = replace(work, precision=precision)
            return kernel_us(work, target, cal)
        return model

    @functools.cached_property
    def _launched(self) -> Launched:
        """A GPU trace's kernels by the runtime call that launched them (built once for every plan)."""
        return Launched(self.trace)

    @property
    def _host_us_per_launch(self) -> float:
        """The host's time per modelled kernel launch: with perfaudit's own cost taken out of the Python between
        ops, or (no calibration in the trace) one that holds the profiler's cost too, as that Python does."""
        return self.cal["host_us_per_kernel" if self.own_cost is not None else "host_us_per_kernel_profiled"]

    @property
    def _recorded(self) -> Device:
        if self.recorded_on is None:
            raise ValueError("the GPU this trace was recorded on is not in perfaudit's table")
        return self.recorded_on

    def _kernel_scale(self, precision: str | None) -> Callable[[Event], float]:
        src, dst, floor = self._recorded, self.target, self.cal["kernel_floor_us"]
        memory = src.memory_gbs / dst.memory_gbs
        cache: dict[str, float] = {}

        def scale(ev: Event) -> float:
            ratio = cache.get(ev.name)
            if ratio is None:
                kind = kernel_precision(ev.name)
                if kind is None:
                    ratio = memory
                else:
                    after = precision if precision and kind in ("fp32", "tf32") else kind
                    ratio = src.peak_flops(kind) / dst.peak_flops(after)
                cache[ev.name] = ratio
            if ev.dur <= floor:  # latency, not throughput: the same on any GPU
                return 1.0
            return (floor + (ev.dur - floor) * ratio) / ev.dur
        return scale

    def _op_ratio(self, precision: str | None) -> Callable[[Event, float], float | None] | None:
        """With recorded shapes: the factor on an op's kernels (measured at `us` in all) that makes them its time
        on the target (kernels.retargeted_us: the model's time there, with a damped share of how far the op
        ran from the model on the GPU it was recorded on)."""
        if self.recorded_on == self.target and not precision:
            return None
        src, dst, cal = self._recorded, self.target, self.cal
        tf32 = self.inputs.tf32_matmul, self.inputs.tf32_conv

        def ratio(op: Event, us: float) -> float | None:
            if "Input Dims" not in op.args or "Input type" not in op.args:
                return None
            work = work_of(op, *tf32)
            after = work
            if precision and work.kind in MATH_KINDS and work.precision in ("fp32", "tf32"):
                after = replace(work, precision=precision)
            elif src == dst:  # on the GPU it ran on, an op the precision leaves alone keeps its measured time
                return None
            there = retargeted_us(us, work, after, src, dst, cal)
            return there / us if there is not None else None
        return ratio

    def _copy_scale(self) -> float:
        src = self.cal["pcie_gbs"][self._recorded.pcie]["pinned"]
        dst = self.cal["pcie_gbs"][self.target.pcie]["pinned"]
        return src / dst

    # -- replays -----------------------------------------------------------------------------------------------
    def run(self) -> Result:
        if self._result is None:
            projection = simulate(self.plans, _pipeline(self.inputs))
            if projection.idle_us.get("sync"):
                projection = sync_idle_capped(projection, self._replayed("sync"))
            self._result = Result(self.target.name, self.method, scaled(projection, self.scale), self.measured_ms,
                                  error_pct=self.cal["expected_error_pct"][self._error_kind()])
        return self._result

    def small_kernels(self) -> dict | None:
        """A CPU run's modelled kernels per step, the short elementwise ones among them (fusion's candidates, as
        FUSE001 counts them on a GPU trace) and the host's time launching those (ms), as a share of the projected
        step; None for a GPU trace (its kernels were measured)."""
        if self.on_gpu or not self.plans:
            return None
        launches = [i for p in self.plans for i in p.items if i.kind == "launch"]
        n = len(self.plans)
        kernels, small = sum(i.kernels for i in launches) / n, sum(i.small for i in launches) / n
        launch_ms = small * self._host_us_per_launch / 1e3
        step_ms = self.run().projection.step_us / 1e3
        return {"per_step": small, "kernels_per_step": kernels, "share_pct": 100.0 * small / kernels if kernels else 0.0,
                "launch_ms": launch_ms, "launch_share_pct": 100.0 * launch_ms / step_ms if step_ms else 0.0}

    def _error_kind(self) -> str:
        if not self.on_gpu:
            return "cpu_run"
        return "gpu_trace" if self.recorded_on == self.target else "gpu_trace_other_gpu"

    @property
    def _release_us(self) -> float | None:
        """What one empty_cache() costs the host on a GPU: a cudaFree and a cudaMalloc a segment it gives back."""
        segments = self.inputs.segments_per_empty_cache
        return None if segments is None else segments * (self.cal["cuda_free_us"] + self.cal["cuda_malloc_us"])

    def has_work(self, kind: str) -> bool:
        """Whether a what-if has anything to take away in these steps (else it has no figure to give, rather than
        0): bias kernels of the layers that feed a BatchNorm (bias), an emptied cache whose release is known
        (cache), cuDNN's benchmark searches (search), collectives of a job whose DDP all-reduced more than once a
        step (no_sync), DDP's copies of its buckets back into the gradients (bucket_view); the other kinds always
        replay."""
        if kind == "bias":
            return any_bias(self.plans, self.inputs.bias_convs, self.inputs.bias_spans)
        if kind == "cache":
            return self.inputs.segments_per_empty_cache is not None
        if kind == "search":
            return any_search(self.plans)
        if kind == "no_sync":
            return self.inputs.syncs_per_step > 1.0 and any_collective(self.plans)
        if kind == "bucket_view":
            return bool(self.inputs.bucket_copies)
        return True

    def savings(self) -> dict[str, float]:
        """Each kind of fix's projected saving per step (ms)."""
        base = self.run().projection.step_us
        return {kind: max(base - self.what_if(kind).step_us, 0.0) / 1e3 for kind in WHAT_IFS}

    def what_if(self, kind: str, host_saved_us: float = 0.0) -> Projection:
        """The projection with one kind of fix applied: DataLoader waits hidden by workers (data), host reads
        of device values gone (sync), batches copied from pinned memory without blocking (copies), matrix
        math in half precision (precision), `host_saved_us` of the host's own time per step gone (host),
        each optimizer update the fused kernel (optimizer), gradients set to None, not zero-filled (grads),
        the tensors a step makes on the host and copies made on the device (created), no bias kernels for the
        layers that feed a BatchNorm (bias), no empty_cache() giving cached segments back (cache), no cuDNN
        benchmark searches (search), gradient accumulation under no_sync(): one round of DDP's all-reduces
        a step (no_sync), or DDP's gradients as views into its buckets: no copy back after the all-reduces
        (bucket_view)."""
        return scaled(self._replayed(kind, host_saved_us), self.scale)

    def _replayed(self, kind: str, host_saved_us: float = 0.0) -> Projection:
        """what_if's replay, before the scaling to the mean step (once per kind: run() and savings() ask
        for the syncs' alike)."""
        key = (kind, host_saved_us)
        if key not in self._replays:
            self._replays[key] = self._replay(kind, host_saved_us)
        return self._replays[key]

    def _replay(self, kind: str, host_saved_us: float) -> Projection:
        if kind == "precision":  # autocast's 16-bit type: bf16 where the target has it, else fp16
            half = HALF if HALF in self.target.tflops else "fp16"
            return simulate(self._plans_in(half), _pipeline(self.inputs))
        pipeline = _pipeline(self.inputs)
        if kind == "data":
            return simulate(self.plans, None, without=frozenset({"data"}))
        if kind == "sync":
            return simulate(self.plans, pipeline, without=frozenset({"sync"}))
        if kind == "host":
            totals = [sum(i.host_us for i in p.items if i.kind == "host") or 1.0 for p in self.plans]
            return simulate(self.plans, pipeline, host_scale=[max(1 - host_saved_us / t, 0.0) for t in totals])
        if kind == "grads":
            return simulate(without_work_in(self.plans, self.inputs.grad_fills), pipeline)
        if kind == "bucket_view":  # the copies' kernels and their dispatch, as a fill's
            return simulate(without_work_in(self.plans, self.inputs.bucket_copies), pipeline)
        if kind == "cache":
            return simulate(without_emptied_cache(self.plans), pipeline)
        if kind == "search":
            return simulate(without_searches(self.plans), pipeline)
        if kind == "no_sync":
            return simulate(one_sync_per_step(self.plans, self.inputs.syncs_per_step), pipeline)
        if kind == "bias":
            return simulate(without_bias(self.plans, self.inputs.bias_convs, self.inputs.bias_spans), pipeline)
        if kind == "optimizer":
            updates = fused(self.plans, self.inputs.optimizer_updates, self._model(None), self._host_us_per_launch)
            return simulate(updates, pipeline)
        if kind == "created":
            fill = lambda nbytes: Item("launch", host_us=self._host_us_per_launch, kernels=1,  # noqa: E731
                                       gpu_us=self._model(None)(Work("memory", bytes=nbytes)))
            return simulate(made_on_device(self.plans, fill), pipeline)
        if kind != "copies":
            raise ValueError(f"no what-if named {kind!r} (one of {', '.join(WHAT_IFS)})")
        rates = self.cal["pcie_gbs"][self.target.pcie]
        return simulate(pinned_and_batched(self.plans, rates, self.cal["copy_floor_us"]), pipeline)


def kernel_precision(name: str) -> str | None:
    """A matrix or convolution kernel's precision from its name (None: not a matrix kernel)."""
    low = name.lower()
    if not any(k in low for k in ("gemm", "xmma", "cutlass", "nvjet", "cudnn", "conv", "wgrad", "dgrad",
                                  "fmha", "flash", "h884", "h1688", "s1688", "s884", "implicit")):
        return None
    if any(k in low for k in ("bf16", "fp16", "f16", "h884", "h1688", "half", "_h_")):
        return "bf16" if "bf16" in low else "fp16"
    if "tf32" in low or "s1688" in low or "s884" in low:
        return "tf32"
    return "fp32"
