"""What happened to the audited script: one vocabulary for the child process that records it, the
runner that collects it and the reporters that say it."""
from __future__ import annotations

import os
from enum import Enum


class Outcome(str, Enum):
    COMPLETED = "completed"              # ran to its end
    WINDOW_COMPLETE = "window_complete"  # perfaudit stopped it after the window (the usual case)
    EXITED = "exited"                    # sys.exit(code)
    OS_EXIT = "os_exit"                  # os._exit(code)
    RAISED = "raised"                    # an exception escaped the script
    INTERRUPTED = "interrupted"          # Ctrl-C, SIGTERM or SIGHUP
    TIMEOUT = "timeout"                  # stopped at --timeout
    CRASHED = "crashed"                  # died without a word (a signal, a segfault)
    SPAWNED = "spawned"                  # handed its training to torch.multiprocessing.spawn
    INTERNAL_ERROR = "internal_error"    # perfaudit's own code failed inside the audited process

    def __str__(self) -> str:
        return self.value

    @classmethod
    def of(cls, record: dict | None) -> Outcome | None:
        try:
            return cls((record or {}).get("outcome"))
        except ValueError:
            return None


def is_failure(record: dict | None) -> bool:
    """The script raised, exited non-zero, crashed or timed out."""
    if not isinstance(record, dict):
        return False
    kind = Outcome.of(record)
    if kind in (Outcome.EXITED, Outcome.OS_EXIT):
        return record.get("exit_code") not in (0, None)
    return kind in (Outcome.RAISED, Outcome.CRASHED, Outcome.TIMEOUT)


def describe(outcome: dict | None) -> str | None:
    """One line saying what happened to the script, or None when the window completed normally."""
    if not outcome or not isinstance(outcome, dict):  # a stored report's, as a hand-edit left it
        return None
    if outcome.get("rank") is not None and outcome.get("failed_ranks"):  # a torchrun job: the rank that failed
        inner = describe({k: v for k, v in outcome.items() if k not in ("rank", "failed_ranks")})
        return f"rank {outcome['rank']}: {inner}" if inner else None
    gpu_path = outcome.get("gpu_path")
    if isinstance(gpu_path, dict) and is_failure(gpu_path):  # the CUDA path failed; the CPU branch was reported
        rest = describe({k: v for k, v in outcome.items() if k != "gpu_path"})
        return "; ".join(filter(None, (on_the_gpu_path(gpu_path), rest)))
    kind = Outcome.of(outcome)
    steps, warmup = (v if type(v) is int else None for v in (outcome.get("steps_recorded"), outcome.get("warmup")))
    seen = f" after {steps} recorded step(s)" if steps is not None else ""
    if kind == Outcome.WINDOW_COMPLETE or outcome.get("outcome") is None:
        after = outcome.get("after_window")
        return describe(after) if after else None
    if kind == Outcome.COMPLETED:
        return f"the script finished{seen}" if steps is not None and steps < (warmup or 0) + 1 else None
    if kind == Outcome.EXITED:
        said = f": {outcome['message']}" if outcome.get("message") else ""
        return f"the script exited with code {outcome.get('exit_code')}{seen}{said}"
    if kind == Outcome.OS_EXIT:
        return f"the script called os._exit({outcome.get('exit_code')}){seen}"
    if kind == Outcome.RAISED:
        site = outcome.get("site")
        site = site if isinstance(site, dict) else {}
        where = f" at {shown(str(site['path']))}:{site.get('line')}" if site.get("path") else ""
        said = f"the script raised {outcome.get('exception')}: {outcome.get('message')}{where}{seen}"
        return said + (f"; {at_oom(outcome['oom'])}" if isinstance(outcome.get("oom"), dict) else "")
    if kind == Outcome.TIMEOUT:
        limit = outcome.get("timeout_s")
        limit = f" {limit:g} s" if isinstance(limit, (int, float)) and not isinstance(limit, bool) else ""
        return f"the script was stopped after the{limit} timeout{seen}"
    if kind == Outcome.INTERRUPTED:
        by = outcome.get("by")
        by = by if isinstance(by, str) else None
        return f"the run was stopped{' by ' + by if by and by != 'SIGINT' else ' (Ctrl-C)' if by else ''}{seen}"
    if kind == Outcome.SPAWNED:
        return f"the script started its training in other processes ({outcome.get('api')})"
    if kind == Outcome.INTERNAL_ERROR:
        site = outcome.get("site")  # the script's line that called into it
        where = f" at {shown(str(site['path']))}:{site.get('line')}" if isinstance(site, dict) and site.get("path") else ""
        return (f"perfaudit's own code failed inside the audited process ({outcome.get('exception')}: "
                f"{outcome.get('message')}{where}){seen}; this is a bug in perfaudit, not in the script")
    if kind == Outcome.CRASHED:
        why = outcome.get("signal") or f"exit code {outcome.get('exit_code')}"
        return f"the script crashed ({why}) before perfaudit could save its trace"
    return f"the script ended: {outcome.get('outcome')}"


def on_the_gpu_path(gpu_path: dict) -> str:
    """The error the script's CUDA path raised on the emulated device before its window, as a GPU raises it."""
    site = gpu_path.get("site")
    site = site if isinstance(site, dict) else {}
    where = f" at {shown(str(site['path']))}:{site.get('line')}" if site.get("path") else ""
    return (f"the script's CUDA path raised {gpu_path.get('exception')}: {gpu_path.get('message')}{where} before "
            "its first step (on the emulated device, as a GPU raises it); reported: its CPU branch")


def _gb(n) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def at_oom(oom: dict) -> str:
    """What held the GPU's memory when the script ran out of it (collect/probes/oom.py): the totals, what the
    live blocks were and the user's lines that allocated the most."""
    try:
        held = ", ".join(f"{'activations, batches, temporaries' if k == 'other' else k} {_gb(v)}"
                         for k, v in list(oom.get("by_category", {}).items())[:4])
        text = (f"at the OOM {_gb(oom['allocated_bytes'])} was allocated and {_gb(oom['reserved_bytes'])} reserved "
                f"of the GPU's {_gb(oom['device_total_bytes'])}, {_gb(oom['requested_bytes'])} more was asked for"
                + (f"; held by {held}" if held else ""))
        sites = oom.get("top_sites") or []
        if sites:
            text += "; allocated most at " + ", ".join(
                f"{shown(s['path'])}:{s['line']} ({_gb(s['bytes'])})" for s in sites[:3])
        unknown = oom.get("unattributed_bytes") or 0
        recorded = oom.get("lines_recorded")
        if not recorded:
            text += "; no lines: the allocator's history was off"
        elif unknown >= 0.1 * oom["allocated_bytes"]:
            text += f"; {_gb(unknown)} with no line of the script's (allocated "
            text += ("in the measured steps, whose allocations perfaudit does not locate (their cost), by backward "
                     "or by a library; the memory row names the lines that held the most in the warm-up steps)"
                     if recorded == "until the measured steps" else
                     "by backward, on autograd's own thread, or by a library)")
        return text
    except (KeyError, TypeError, ValueError, AttributeError):  # a hand-edited report: the error line alone
        return "at the OOM: figures unreadable"


def shown(path: str) -> str:
    """A path as ruff and pytest print it: relative to the working directory when inside it, and a
    newline or other control character in it written as an escape (`tr\\nain.py`), so that it never
    reads as two lines."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        rel = path
    chosen = path if rel.startswith("..") else rel
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in chosen)
