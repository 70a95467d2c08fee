"""cuDNN's flags (T08): torch.backends.cudnn.benchmark and .deterministic as the script left them, and where
the script sets benchmark, or where it should go."""
from __future__ import annotations

import ast

from ...calls import call_name
from ..registry import Context, Missing, fact
from ..sites import Site, site_from_probe


@fact("cudnn.flag_sites", "Where torch.backends.cudnn.benchmark is set in the script's source (True "
                          "anywhere: `set_true`), else where it should go: the Lightning Trainer that drove the "
                          "steps, or before the optimizer is built.")
def cudnn_flag_sites(ctx: Context) -> list[Site]:
    script = ctx.meta.get("script")
    assigned = ctx.source.attribute_assignments(script, "cudnn.benchmark") if isinstance(script, str) else []
    set_true = any(value is True for _, value in assigned)
    ran = [f for f in ctx.probes.get("flag_sets", []) if f.get("flag") == "cudnn.benchmark" and f.get("site")]
    if "flag_sets" in ctx.probes:  # `perfaudit run` saw which assignments ran: a branch not taken is not a site
        n = len(ctx.steps)
        if ran:
            last = ran[-1]  # the value the script trained with was set here
            site = site_from_probe(ctx, last["site"], "cudnn.benchmark set here", set_true=set_true)
            site.count, site.steps_seen = n, set(range(n))
            return [site]
        if assigned and isinstance(script, str):  # set only on paths this run did not take (a determinism block)
            block = ctx.source.enclosing_block_line(script, assigned[0][0])  # ... the flag goes before that block
            site = site_from_probe(ctx, {"path": script, "line": block}, "cudnn.benchmark set only on a path "
                                   "this run did not take: set it before that block", set_true=set_true)
            site.count, site.steps_seen = n, set(range(n))
            return [site]
    if assigned:
        line = next((line for line, value in assigned if value is not True), assigned[0][0])
        site = site_from_probe(ctx, {"path": script, "line": line}, "cudnn.benchmark set here", set_true=set_true)
    elif (trainer := _lightning_trainer_line(ctx, script)) is not None:
        site = site_from_probe(ctx, {"path": script, "line": trainer}, "pass benchmark=True to the Trainer",
                               set_true=False)
    else:
        built = next((o.get("site") for o in ctx.probes.get("optimizers", []) if o.get("site")), None)
        site = site_from_probe(ctx, built, "set cudnn.benchmark before training (here the optimizer is built)",
                               set_true=False)
    n = len(ctx.steps)
    site.count, site.steps_seen = n, set(range(n))
    return [site]


def _lightning_trainer_line(ctx: Context, script) -> int | None:
    """Where the script builds the Lightning Trainer that drove the steps (its `benchmark=` sets the flag)."""
    if ctx.get("run.framework") != "Lightning" or not isinstance(script, str):
        return None
    tree = ctx.source.tree(script)
    calls = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and call_name(n) == "Trainer"] if tree else []
    return min(calls, default=None)


@fact("cudnn.set_true_in_source", "Whether the script's source sets cudnn.benchmark = True somewhere "
                                  "(under `if torch.cuda.is_available():`, say), whatever this run did.")
def cudnn_set_true_in_source(ctx: Context) -> bool:
    return bool(ctx.get("cudnn.flag_sites")[0].extra.get("set_true"))


def _flag(ctx: Context, name: str) -> bool:
    env = ctx.probes.get("environment")
    if not env or name not in env:
        raise Missing(f"no live-process probes (the {name.replace('_', '.')} flag is only seen by `perfaudit run`)")
    return bool(env[name])


@fact("env.cudnn_deterministic", "torch.backends.cudnn.deterministic as the script left it (True: it asks for "
                                 "reproducible convolutions).")
def cudnn_deterministic(ctx: Context) -> bool:
    return _flag(ctx, "cudnn_deterministic")


@fact("env.cudnn_benchmark", "torch.backends.cudnn.benchmark as the script left it.")
def cudnn_benchmark(ctx: Context) -> bool:
    return _flag(ctx, "cudnn_benchmark")
