"""What a run writes to result.json after its trace (collect/window/records.py): the FLOPs counted once the
window closed and the steps timed without the profiler. A run's own report adds them to its trace, and so does
`analyze` (and `diff`, `history`) on the run's folder or trace, so one run states the same figures however it
is read. result.json beside a trace is a user's file like the trace: anything unreadable is left out."""
from __future__ import annotations

import json
import os

from .model import Trace

# result.json's key -> (the trace's perfaudit section, the field the facts read there)
LATE_ENTRIES = {"flops_counted": ("probes", "flops"), "plain_steps": ("window", "plain_steps")}
MAX_RECORD_BYTES = 16 << 20  # a run's result.json is a few kB; a larger file there is not one


def record_beside(trace_path: str) -> dict:
    """The result.json the run that wrote `trace_path` left beside it (`rank<R>.result.json` for a rank's
    trace), or {} when there is none, it names another trace, or it cannot be read."""
    folder, name = os.path.split(os.path.abspath(trace_path))
    if "trace.json" not in name:
        return {}
    prefix = name.split("trace.json", 1)[0]
    path = os.path.join(folder, prefix + "result.json")
    try:
        if os.path.getsize(path) > MAX_RECORD_BYTES:
            return {}
        with open(path, "rb") as f:
            record = json.loads(f.read())
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(record, dict):
        return {}
    named = record.get("trace")
    if named is not None and not (isinstance(named, str) and os.path.basename(named).startswith(prefix + "trace.json")):
        return {}  # another trace's record (a folder of files copied together)
    return record


def add_late_entries(trace: Trace, record: dict) -> None:
    """The late entries of a run's record put where the trace's readers look for them (the probes' schema
    check and the facts' own checks read them as they read the rest of the trace)."""
    probes = trace.probes
    for key, (section, field) in LATE_ENTRIES.items():
        value = record.get(key)
        if value and isinstance(probes.get(section), dict):
            probes[section][field] = value
