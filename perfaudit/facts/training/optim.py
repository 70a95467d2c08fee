"""Optimizers: implementation (single-tensor loop, foreach, fused) and training advice (T10, T24)."""
from __future__ import annotations

from ...calls import FOREACH_OPTIMIZERS, FRAMEWORK_OPTIMIZER_OPTIONS, FUSABLE_OPTIMIZERS
from ...projection.whatifs.fused_optimizer import Update, passes
from ...static.cuda_path import CUDA_PATH
from ..registry import Context, Missing, fact
from ..sites import Site, site_from_probe
from ..steps import OPTIMIZER_STEP, closure_end


def _step_ops(ctx: Context) -> dict[str, dict]:
    """Per optimizer class (from the Optimizer.step#Class.step annotations): ms per step, ops per step,
    and which implementation the ops show."""
    trace = ctx.need_trace()
    out: dict[str, dict] = {}
    ops = ctx.host_of("op")
    first, last = ctx.steps[0].ts, ctx.steps[-1].end
    for ann in trace.named(lambda name: name.startswith(OPTIMIZER_STEP)):
        if ann.end < first or ann.ts > last:
            continue  # overlapping the window counts: an LBFGS step can hold all of it
        cls = ann.name[len(OPTIMIZER_STEP):].split(".")[0]
        entry = out.setdefault(cls, {"ms": 0.0, "ops": 0, "fused": False, "foreach": False})
        # a closure (Lightning, LBFGS) ran forward and backward in the range: the update is what follows it
        start = max(ann.ts, closure_end(ctx, ann) or 0.0)
        # only inside the steps the figures are made of: a step left out (it waited for a CPU held by
        # other processes) between two measured ones adds nothing (its time made OPT001 read 132 %)
        seen: set[int] = set()  # an op at the boundary of two adjacent steps counts once
        for step in ctx.steps:
            begin, end = max(start, step.ts), min(ann.end, step.end)
            if end <= begin:
                continue
            entry["ms"] += (end - begin) / 1000.0
            for op in ctx.within(ops, begin, end):
                if op.end > ann.end or id(op) in seen:
                    continue
                seen.add(id(op))
                entry["ops"] += 1
                entry["fused"] |= "_fused_" in op.name
                entry["foreach"] |= "_foreach_" in op.name
    n = len(ctx.steps)
    for entry in out.values():
        entry["mode"] = "fused" if entry["fused"] else "foreach" if entry["foreach"] else "single_tensor"
        entry["ms_per_step"] = entry.pop("ms") / n
        entry["ops_per_step"] = entry.pop("ops") / n
    return out


def fused_updates(ctx: Context) -> list[Update]:
    """Each optimizer update in the measured steps that torch's fused kernel could do (the range after its
    closure's backward, if it ran one), with what that kernel would move: the parameters and state of the
    optimizer the run built of that class (the first, where several were)."""
    built = [o for o in ctx.probes.get("optimizers") or [] if isinstance(o, dict)
             and (o.get("param_bytes") or o.get("param_numel"))]  # float32 where the bytes were not recorded
    first, last = ctx.steps[0].ts, ctx.steps[-1].end
    out = []
    for ann in ctx.need_trace().named(lambda name: name.startswith(OPTIMIZER_STEP)):
        cls = ann.name[len(OPTIMIZER_STEP):].split(".")[0]
        probe = next((o for o in built if o.get("class") == cls), None)
        if probe is None or ann.end < first or ann.ts > last:
            continue
        n = passes(cls, probe.get("options") or {})
        if n is not None:
            size = probe.get("param_bytes") or 4 * probe["param_numel"]
            out.append(Update(max(ann.ts, closure_end(ctx, ann) or 0.0), ann.end, float(n * size),
                              int(probe.get("param_tensors") or 1)))
    return out


@fact("optim.single_tensor_sites", "Optimizers stepping parameter by parameter (no foreach, no fused) "
                                   "that have a fused or foreach implementation, and on the CUDA path (a GPU or "
                                   "the emulated device) foreach where fused exists; ms is their step time.")
def single_tensor_sites(ctx: Context) -> list[Site]:
    ctx.need_trace()
    measured = _step_ops(ctx)
    if not measured:
        built = ctx.probes.get("optimizers") or []
        if built and not any(o["class"] in FOREACH_OPTIMIZERS for o in built):
            return []  # LBFGS and the like: no foreach or fused implementation to suggest
        raise Missing("no Optimizer.step ranges in the measured steps")
    sites = []
    n = len(ctx.steps)
    for cls, probe, m in _per_optimizer(ctx, measured):
        options = probe.get("options", {})
        on_device = probe.get("on_emulated_device") is True  # torch took its CUDA choice: the trace shows it
        if (on_device or ctx.is_gpu) and m["mode"] == "foreach" and cls in FUSED_ADVICE \
                and options.get("fused") is not True:
            sites.append(_foreach_site(ctx, cls, m, probe))  # the GPU's default where a fused kernel exists
            continue
        if m["mode"] != "single_tensor" or cls not in FOREACH_OPTIMIZERS:
            continue
        cuda_path = False
        if not ctx.is_gpu and not on_device and not (options.get("foreach") is False and not options.get("fused")):
            # on the CPU torch defaults to the loop; on CUDA the same defaults pick foreach, so a CPU
            # run shows a problem the script asked for explicitly (foreach=False), or, for Adam and
            # AdamW in a script that runs on CUDA when it can, the fused kernel it would miss there
            cuda_path = (cls in FUSED_ADVICE and options.get("fused") is not True
                         and options.get("foreach") is not True and _script_runs_on_cuda(ctx)
                         and _asks_for_fused(ctx, probe.get("site"), cls) is False)
            if not cuda_path:
                continue
        params = probe.get("param_tensors")
        if params is not None and params < 4:
            continue  # a handful of tensors: nothing to batch
        where, option = _built_at(ctx, probe)
        site = site_from_probe(ctx, where,
                               f"{cls} single-tensor loop ({m['ops_per_step']:.0f} ops per step"
                               + (f" over {params} parameter tensors)" if params else ")") + option,
                               **{"class": cls, "fusable": cls in FUSABLE_OPTIMIZERS, "cuda_path": cuda_path})
        site.count, site.ms, site.steps_seen = n, m["ms_per_step"] * n, set(range(n))
        sites.append(site)
    return sites




def _per_optimizer(ctx: Context, measured: dict) -> list[tuple[str, dict, dict]]:
    """(class, its probe, its step figures) per optimizer the script built. The trace names a step's range by
    class only: two of one class (a GAN's generator and discriminator) share the class's figures in proportion
    to their parameter tensors, each at the line that built it."""
    built: dict[str, list[dict]] = {}
    for probe in ctx.probes.get("optimizers", []):
        built.setdefault(probe.get("class"), []).append(probe)
    out = []
    for cls, m in measured.items():
        probes = built.get(cls) or [{}]
        weights = [p.get("param_tensors") or 0 for p in probes]
        total = sum(weights)
        for probe, weight in zip(probes, weights):
            share = weight / total if total else 1 / len(probes)
            out.append((cls, probe, {**m, "ms_per_step": m["ms_per_step"] * share,
                                     "ops_per_step": m["ops_per_step"] * share}))
    return out


# the optimizers whose CUDA default (foreach) OPT001 weighs against the fused kernel, on the emulated CUDA
# path as on a CPU run of a script with a CUDA path (cuda_path below): the same script gets the same
# finding in both modes (Adam and AdamW, whose fused kernel torch recommends; SGD's is newer and its gain
# over foreach small)
FUSED_ADVICE = ("Adam", "AdamW")


def _foreach_site(ctx: Context, cls: str, m: dict, probe: dict) -> Site:
    """On the CUDA path (a GPU, or the emulated device), torch's default for an optimizer built without
    foreach= or fused= is foreach: a few launches per op over all tensors; the fused kernel does the whole
    update in one. (A GPU run and the emulated run of one script report the same: checked on an H100.)"""
    n = len(ctx.steps)
    params = probe.get("param_tensors")
    where, option = _built_at(ctx, probe)
    site = site_from_probe(ctx, where,
                           f"{cls} foreach on the CUDA path, fused available ({m['ops_per_step']:.0f} ops per step"
                           + (f" over {params} parameter tensors" if params else "")
                           + f", {probe.get('param_numel', 0) / 1e6:.1f}M parameters)" + option,
                           **{"class": cls, "fusable": True, "cuda_path": False, "foreach_not_fused": True})
    site.count, site.ms, site.steps_seen = n, m["ms_per_step"] * n, set(range(n))
    return site


def _built_at(ctx: Context, probe: dict) -> tuple[dict | None, str]:
    """Where the fix goes: the line that built the optimizer, or, for one a framework built from an option
    the user's code names (`optim="adamw_torch"`), that option's line; and the detail that says so."""
    option = _framework_option(ctx, probe)
    if option is None:
        return probe.get("site"), ""
    return ({"path": option["path"], "line": option["line"], "func": None},
            f", built by {option['framework']} from {option['option']}")


def _framework_option(ctx: Context, probe: dict) -> dict | None:
    from ...static.uses import option_literals
    framework = probe.get("built_in")
    if framework not in FRAMEWORK_OPTIMIZER_OPTIONS:
        return None
    key, fused = FRAMEWORK_OPTIMIZER_OPTIONS[framework]
    script = ctx.meta.get("script")
    for path in dict.fromkeys(([script] if isinstance(script, str) else []) + list(ctx.probes.get("user_files") or [])):
        tree = ctx.source.tree(path)
        for line, value in option_literals(tree, key, set(fused)) if tree is not None else []:
            return {"framework": framework, "path": path, "line": line, "option": f'{key}="{value}"',
                    "fused": f'{key}="{fused[value]}"'}
    return None


@fact("optim.framework_option", "For an optimizer a framework built from an option the user's code names "
                                "(`optim=\"adamw_torch\"` for the Hugging Face Trainer): framework, option, "
                                "fused (the option that picks the fused kernel), path, line.")
def framework_option(ctx: Context) -> dict:
    for probe in ctx.probes.get("optimizers") or []:
        option = _framework_option(ctx, probe)
        if option is not None:
            return option
    raise Missing("no optimizer built by a framework from an option in the source")


def _script_runs_on_cuda(ctx: Context) -> bool:
    """Whether the audited script's code has a CUDA path (`"cuda" if torch.cuda.is_available()`,
    `.cuda()`, `torch.accelerator.current_accelerator()`), in the script or in a module of the user's it
    imported (a helper that picks the device): it will run on a GPU where there is one."""
    script = ctx.meta.get("script")
    files = ([script] if isinstance(script, str) else []) + list(ctx.probes.get("user_files") or [])
    return any(CUDA_PATH.search(ctx.source.text(path)) for path in dict.fromkeys(files))


def _asks_for_fused(ctx: Context, site: dict | None, cls: str) -> bool | None:
    """Whether the optimizer's construction asks for fused= on some path (a kwarg, or `**kwargs` its scope
    fills with it); None when its `**kwargs` cannot be read: then the run cannot say it does not."""
    from ...static.uses import call_requests
    if not site or not site.get("path"):
        return None
    tree = ctx.source.tree(site["path"])
    if tree is None:
        return None
    return call_requests(tree, site["line"], "fused", {cls, "Adam", "AdamW", "SGD", "Adagrad"})


@fact("optim.cuda_path_only", "On a CPU run, whether every single-tensor optimizer reported is one the "
                              "script would run on CUDA (its source has a CUDA path) without fused=True.")
def cuda_path_only(ctx: Context) -> bool:
    sites = ctx.get("optim.single_tensor_sites")
    return not ctx.is_gpu and bool(sites) and all(s.extra.get("cuda_path") for s in sites)


@fact("optim.foreach_only", "On the CUDA path, whether every optimizer reported already takes "
                            "foreach (torch's CUDA default) where a fused kernel exists: a smaller, estimated gain.")
def foreach_only(ctx: Context) -> bool:
    sites = ctx.get("optim.single_tensor_sites")
    return bool(sites) and all(s.extra.get("foreach_not_fused") for s in sites)


@fact("optim.advice_sites", "Optimizer choices that affect convergence rather than speed: Adam with "
                            "weight_decay (L2) instead of AdamW, no learning-rate schedule.")
def advice_sites(ctx: Context) -> list[Site]:
    sites = []
    for opt in ctx.probe("optimizers"):
        decay = opt.get("options", {}).get("weight_decay") or 0
        if opt["class"] == "Adam" and decay > 0:
            sites.append(site_from_probe(ctx, opt.get("site"), f"Adam(weight_decay={decay}) couples L2 with "
                                                               "the adaptive step; AdamW decouples it"))
    return sites


@fact("optim.has_scheduler", "Whether the script built a learning-rate scheduler.")
def has_scheduler(ctx: Context) -> bool:
    return bool(ctx.probe("schedulers"))
