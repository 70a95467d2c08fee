"""Whether an emulated run's failure is the emulation's or the script's (runner.py reruns the script on
its CPU path for the first, and for the second when it ended the CUDA path before its window): an error
that names CUDA, or the emulation's code on its traceback, may be the emulated device's; one the CPU path
raises at the same line too is the script's own."""
from __future__ import annotations

import os
import re

from ...outcome import Outcome
from .options import RunOptions, RunResult


def same_failure(emulated: dict, plain: dict) -> bool:
    """Whether the CPU path's run failed as the emulated one did (same exception at the same line)."""
    return (plain.get("outcome") == emulated.get("outcome") and plain.get("exception") == emulated.get("exception")
            and (plain.get("site") or {}).get("line") == (emulated.get("site") or {}).get("line"))


# an op's error that is the CPU's, not the script's: a kernel or a type the CPU build lacks
_CPU_LIMITS = re.compile(r"not implemented for|Could not run|No available kernel|No viable backend|\bcpu\b|CPU", re.I)
# ... or a CUDA class a CPU build stubs out (torch._utils._dummy_type: "Tried to instantiate dummy base class MemPool")
_CUDA_WORDS = re.compile(r"cuda|cudnn|nccl|nvidia|gpu|torch\.backends|emulat|dummy base class", re.I)
_EMULATION_FRAMES = re.compile(r"perfaudit[/\\]collect[/\\]emulation[/\\](?:placement|tensor_registry|cuda_shim|emulate)\.py"
                               r"|torch[/\\]cuda[/\\]")  # torch's CUDA package, which a CPU build stubs out


def emulation_may_cause(outcome: dict) -> bool:
    """Whether the emulated device may be what failed: the error names CUDA (a call it does not serve),
    or the emulation's own code or torch's CUDA package is on the traceback. Otherwise the error is the
    script's own."""
    if outcome.get("as_on_a_gpu"):  # raised as a GPU raises it (cuda_shim.gpu_error): the script's
        return False
    text = f"{outcome.get('exception') or ''} {outcome.get('message') or ''}"
    if outcome.get("op_error") and not _CPU_LIMITS.search(text):  # a torch op refused the script's arguments (a
        return False  # shape that does not match): as on a GPU; not a kernel the CPU lacks
    return bool(_CUDA_WORDS.search(text) or _EMULATION_FRAMES.search(outcome.get("traceback") or "")
                or outcome.get("outcome") != Outcome.RAISED)


def emulation_failure(result: RunResult, options: RunOptions) -> str | None:
    """Why an emulated run is not to be reported (it failed before its window was recorded), in one
    line naming the exception and where it was raised; None when it is."""
    if options.device != "emulate-cuda" or result.stop_signal is not None or result.outcome.get("write_error"):
        return None
    outcome = result.outcome
    if outcome.get("outcome") not in (Outcome.RAISED, Outcome.INTERNAL_ERROR, Outcome.CRASHED):
        return None
    if (outcome.get("steps_recorded") or 0) > (outcome.get("warmup") or 0):
        return None  # measured steps were recorded: they are reported, with the failure
    if not emulation_may_cause(outcome):
        return None  # the script's own error (a ValueError in its code): reported as the script's
    site = outcome.get("site") or {}
    where = f" at {os.path.basename(site['path'])}:{site['line']}" if site.get("path") else ""
    what = outcome.get("exception") or outcome.get("signal") or outcome.get("outcome")
    message = f": {outcome['message']}" if outcome.get("message") else ""
    return f"{what}{message}{where}"


def gpu_path_error(result: RunResult, options: RunOptions) -> bool:
    """Whether the script's CUDA path raised its own error (as a GPU raises it: an op refusing a float16 value
    under autocast) before any step was measured: its CPU branch may still run and have a report to give."""
    outcome = result.outcome
    return (options.device == "emulate-cuda" and options.mode == "profile" and result.stop_signal is None
            and not result.emulation_failed and outcome.get("outcome") == Outcome.RAISED
            and (outcome.get("steps_recorded") or 0) <= (outcome.get("warmup") or 0)
            and not emulation_may_cause(outcome))


GPU_PATH_KEYS = ("outcome", "exception", "message", "site", "steps_recorded", "warmup", "as_on_a_gpu", "op_error")
