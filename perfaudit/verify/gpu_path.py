"""verify on a machine without a GPU: the A/B rounds time the script's CPU path, but a fix's code on the
script's GPU branch (a pinning DataLoader over a Dataset of CUDA tensors, say) runs only there. Each fixed
script runs once more on the emulated CUDA device, after the script as it is ran there: a fix that fails
there, where the script as it is did not, fails verify, as it would on a GPU."""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace

from ..collect.run.runner import RunOptions, RunResult, run_script
from ..outcome import describe, is_failure


def run_failure(result: RunResult) -> str | None:
    """What went wrong in a run that failed (outcome.describe), or None."""
    outcome = result.outcome or {}
    if is_failure(outcome):
        return describe(outcome) or f"it ended: {outcome.get('outcome')}"
    return None


def check_on_the_gpu_path(script: str, args: list[str], variants: list, served: dict, folder: str,
                          options: RunOptions, verdicts: list,
                          say: Callable[[str], None]) -> tuple[str | None, int | None]:
    """Each B whose verdict stands, run once on the emulated CUDA device; a failure there is its verdict's
    `broke`. Returns the note for the report (which fixes ran there, or why none could be checked: the
    script as it is fails there too, or the emulation cannot serve it) and the signal that stopped verify
    meanwhile, if one did (no more runs start)."""
    def run(name: str, patched: dict, init_draws=None) -> RunResult:
        return run_script(script, args, replace(options, out_dir=os.path.join(folder, f"{name}-gpu-path"),
                                                patched=patched, mode="timing", device="emulate-cuda",
                                                seed=options.seed if options.seed is not None else 0,
                                                init_draws=init_draws))
    say("running the script as it is on the emulated CUDA path")
    a = run("A", {})
    if a.stop_signal is not None:
        return None, a.stop_signal
    if a.emulation_failed:
        return ("the fixes were not run on the script's GPU path: the emulated CUDA device could not serve it "
                f"({a.emulation_failed})"), None
    failed = run_failure(a)
    if failed:
        return f"the fixes were not run on the script's GPU path: the script as it is fails there too ({failed})", None
    ran, stopped = [], None
    for v, verdict in zip(variants[1:], verdicts):
        if verdict.broke is not None:
            continue
        say(f"running {'the fixed script' if v.name == 'B' else v.name} on the emulated CUDA path")
        b = run(v.name, served[v.name], v.init_draws)
        if b.stop_signal is not None:
            stopped = b.stop_signal
            break
        failed = run_failure(b) or (f"the emulated CUDA device could not serve it ({b.emulation_failed})"
                                 if b.emulation_failed else None)
        if failed:
            verdict.broke = (f"on the script's GPU path (the emulated CUDA device) {failed}, where the script as "
                             "it is ran: a GPU fails the same way")
        else:
            ran.append("the fixed script" if v.name == "B" else v.name)
    return (f"{', '.join(ran)} also ran on the script's GPU path (the emulated CUDA device) without failing"
            if ran else None), stopped
