"""Input pipeline: time the step waits for the DataLoader, and what to do about it (T05, T06)."""
from __future__ import annotations

import math
import os
from statistics import median

from ..static.batch_option import loader_option
from ..trace.op_names import DATALOADER
from .registry import Context, Missing, fact
from .sites import Site
from .steps import phase_times, phases_less_waits, typical_phases


def _loader(ctx: Context) -> dict | None:
    """The DataLoader that fed the most batches in the measured steps (an evaluation loader that ran
    before training, or in a step left out of the figures, fed more batches overall, but not those
    steps), from the probes."""
    loaders = ctx.probes.get("dataloaders") or []
    measured = {str(s.number) for s in ctx.steps} if ctx.trace is not None else set()

    def fed(d: dict) -> int:
        by_step = d.get("window_batches_by_step")
        if isinstance(by_step, dict) and measured:
            return sum(int(n) for step, n in by_step.items() if step in measured)
        return d.get("window_batches", 0)
    return max(loaders, key=lambda d: (fed(d), d.get("window_batches", 0), d.get("batches_seen", 0))) if loaders else None


def _wait_ms(ctx: Context, step_ms: float) -> float:
    """The DataLoader wait per step: the mean over the measured steps; on a busy machine its typical share
    of each step (the median over every recorded step of wait / duration, each less its wait for a CPU: the
    fetches' own where the recording measured it, else in proportion) of the undisturbed step."""
    quiet = ctx.quiet_steps
    if not quiet:
        return typical_phases(ctx)["data"]
    shares = [min(phases_less_waits(ctx, s, t)["data"] / ctx.undisturbed_us(s), 1.0)
              for s, t in zip(quiet, phase_times(ctx, quiet)) if s.dur > 0]
    return median(shares) * step_ms if shares else typical_phases(ctx)["data"]


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def _timed_steps(ctx: Context) -> list[dict]:
    """The steps timed after the window with nothing recording them (collect/window/plain.py), past the settling
    ones; [] for a trace without them (recorded elsewhere or by an older perfaudit: the window's record is read
    as hostile input, each figure checked where it is used)."""
    window = ctx.trace.probes.get("window") if ctx.trace is not None else None
    steps = window.get("plain_steps") if isinstance(window, dict) else None
    return [s for s in steps if isinstance(s, dict) and s.get("settling") is not True] if isinstance(steps, list) else []


def _plain_rows(ctx: Context) -> list[tuple[float, float]]:
    """(fetch ms, step ms) of the timed steps (_timed_steps), where a busy machine left some alone those only, each
    less its own wait for a CPU held by other processes (a fetch's measured apart; where it was not, the step's in
    proportion)."""
    rows = []
    for step in _timed_steps(ctx):
        wall, fetch, waited = (_number(step.get(k)) for k in ("wall_ms", "fetch_ms", "waited_ms"))
        if wall is None or fetch is None or wall <= 0 or fetch > wall:
            continue
        keep = 1.0 - min(waited or 0.0, 0.9 * wall) / wall
        fetch_waited = _number(step.get("fetch_waited_ms"))
        fetch = fetch - min(fetch_waited, 0.9 * fetch) if fetch_waited is not None else fetch * keep
        rows.append((fetch, wall * keep, step.get("disturbed") is True))
    return [r[:2] for r in ([r for r in rows if not r[2]] or rows)]


def _unwaited_fetches(ctx: Context) -> list[float]:
    """The timed steps' fetches (ms) that waited for no CPU (their measured wait under 5 % of them), whatever the
    rest of their step waited: the cleanest measure of a fetch. A fetch's measured wait can hold one that ended
    just after it began (the scheduler books a wait when the thread runs again), even more than the fetch took (a
    3.0 ms fetch 'waited' 4.0 ms on a 2-core machine at load 3), so taking it off can leave next to nothing."""
    out = []
    for step in _timed_steps(ctx):
        wall, fetch, waited = (_number(step.get(k)) for k in ("wall_ms", "fetch_ms", "fetch_waited_ms"))
        if wall is not None and fetch is not None and waited is not None and 0 < fetch <= wall and waited <= 0.05 * fetch:
            out.append(fetch)
    return out


def plain_timing(ctx: Context) -> tuple[float, float, int] | None:
    """(fetch ms, step ms, steps): the medians over the steps timed without the profiler (_plain_rows), the fetch's
    over the fetches that waited for no CPU where there are any (_unwaited_fetches), or None."""
    rows = _plain_rows(ctx)
    if not rows:
        return None
    unwaited = _unwaited_fetches(ctx)
    fetch = median(unwaited) if unwaited else median(r[0] for r in rows)
    return fetch, median(r[1] for r in rows), len(rows)


@fact("step.unprofiled", "The steps timed after the window with nothing recording them, past the settling ones: "
                         "each one's wall time and its wait for a CPU held by other processes (ms), the step as the "
                         "script runs without perfaudit, which `verify` times too and `diff` compares.")
def unprofiled_steps(ctx: Context) -> list[dict]:
    out = []
    for step in _timed_steps(ctx):
        wall, waited = _number(step.get("wall_ms")), _number(step.get("waited_ms"))
        if wall is not None and wall > 0:
            out.append({"wall_ms": wall, "waited_ms": min(waited or 0.0, wall)})
    if not out:
        raise Missing("no steps were timed without the profiler (a trace alone, steps over 2 s, or a rank)")
    return out


PIPELINE_BOUND = 0.8  # the pipeline delivers a batch no faster than this share of the step's compute


@fact("data.loader", "The DataLoader wait per step (ms, the mean over the measured steps: two workers "
                     "that deliver together make every other step wait) and its share of the mean step "
                     "(the share every finding states); loading in the training process, both as timed "
                     "after the window without the profiler where the run did (basis says which), the "
                     "loader's settings, a worker count recommended from the measured load time and "
                     "the CPU count, and with workers their own time per batch (worker_ms_per_batch), the "
                     "pipeline's (pipeline_ms_per_batch: that over the workers) and whether it is slower "
                     "than the step needs (pipeline_bound).")
def data_loader(ctx: Context) -> dict:
    step_ms = ctx.step_ms
    iterators = {name for name in ctx.need_trace().names() if name.startswith(DATALOADER)}
    loader = _loader(ctx)
    if not iterators and loader is None:
        raise Missing("no DataLoader activity in the trace")
    cpus = (ctx.probes.get("environment") or {}).get("cpu_count")  # unknown for a foreign trace
    workers = loader.get("num_workers") if loader else None
    # in the training process a fetch is Python and ops, which recording slows several-fold: timed without it
    plain = plain_timing(ctx) if workers == 0 else None
    if plain is not None and plain[0] > 0:
        wait, step_ms = plain[0], plain[1]
        basis = f"timed over {plain[2]} step(s) run after the window without the profiler"
    else:
        wait, basis = _wait_ms(ctx, step_ms), "as recorded in the measured steps"
    compute = max(step_ms - wait, 1e-3)
    if workers is not None:
        uses_workers = workers > 0
    else:  # a foreign trace: the iterator's class says whether workers load the batches
        uses_workers = any("MultiProcessing" in name for name in iterators)
    # With w workers a batch takes load/w per step on average, and the step waits load/w - compute;
    # it no longer waits once load/w <= compute. In the main process the wait is the load itself.
    load = wait if not workers else workers * (wait + compute)
    needed = max(math.ceil(load / compute) + (0 if workers else 1), 2)
    recommended = min(needed, max(cpus, 2)) if cpus else needed
    site = (loader or {}).get("site") or {}
    # the workers' own time to make a batch (reading and waiting on storage included, waiting for a
    # CPU held by another process excluded), and how often the pipeline can deliver one with every
    # worker busy: slower than the step consumes them, the input pipeline is the bottleneck; faster,
    # and a wait comes from the machine (cores shared with the training, or other processes)
    worker_ms = (loader or {}).get("worker_ms_per_batch")
    pipeline_ms = worker_ms / workers if worker_ms is not None and workers else None
    worker_cpu = (loader or {}).get("worker_cpu_ms_per_batch")
    # workers that mostly wait on storage or the network, not on a CPU: more of them than CPUs help
    io_bound = worker_ms is not None and worker_cpu is not None and worker_cpu < 0.5 * worker_ms
    return {
        "wait_ms": wait, "compute_ms": compute, "share_pct": 100.0 * wait / step_ms if step_ms else 0.0,
        "basis": basis,
        "num_workers": workers, "workers": uses_workers, "cpu_count": cpus, "needed_workers": needed,
        "recommended_workers": recommended, "cpu_bound": bool(cpus) and needed > max(cpus or 0, 2),
        # with workers: would more of them help? not past the CPU count
        "more_workers_help": None if workers is None else
        bool(workers) and needed > workers and (not cpus or workers < cpus or io_bound),
        "io_bound": io_bound,
        # the workers and the training process need more cores than there are: on a CPU-only run they
        # compete for them, and part of the wait is that competition, not slow loading
        "oversubscribed": bool(cpus) and bool(workers) and (workers or 0) + 1 > (cpus or 0),
        "worker_ms_per_batch": worker_ms,
        "pipeline_ms_per_batch": pipeline_ms,
        "pipeline_bound": None if pipeline_ms is None else pipeline_ms >= PIPELINE_BOUND * compute,
        "persistent_workers": (loader or {}).get("persistent_workers"),
        "prefetch_factor": (loader or {}).get("prefetch_factor"),
        "path": ctx.source.display_path(site["path"]) if site.get("path") else None,
        "line": site.get("line"),
        # its Dataset returns tensors on the GPU: worker processes cannot make them, pinning cannot pin them
        "on_device": bool((loader or {}).get("batches_on_device")),
        **_workers_option(ctx, site, recommended),
    }


def _workers_option(ctx: Context, site: dict, workers: int) -> dict:
    """The script's own option that sets the loader's num_workers (`num_workers=args.workers` read back to its
    `add_argument("--workers", ...)`): the way to change it is to pass the option, not to edit the loader."""
    path = ctx.source.resolve(site["path"]) if isinstance(site.get("path"), str) else None
    found = loader_option(path, site["line"], "num_workers") if path and isinstance(site.get("line"), int) else None
    if path is None or found is None:
        return {"workers_option": "", "workers_option_at": "", "workers_option_run": ""}
    script = ctx.meta.get("script")
    name = os.path.basename(script if isinstance(script, str) else path)
    return {"workers_option": found[0], "workers_option_at": f"{ctx.source.display_path(path)}:{found[1]}",
            "workers_option_run": f"perfaudit run {name} -- {found[0]} {workers}"}


@fact("data.loader_sites", "The DataLoader construction line, as a site carrying the wait per step.")
def data_loader_sites(ctx: Context) -> list[Site]:
    info = ctx.get("data.loader")
    site = Site(info["path"], info["line"], None,
                ctx.source.line_text(info["path"], info["line"]) if info["path"] else "",
                f"DataLoader(num_workers={info['num_workers']})" if info["num_workers"] is not None else "DataLoader")
    n = len(ctx.steps)
    site.count, site.ms, site.steps_seen = n, info["wait_ms"] * n, set(range(n))
    return [site]
