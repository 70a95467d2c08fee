"""What a child process left in its run folder, read after it ended: a trace cut off in its export
(salvaged or removed), and how far the progress file says it got."""
from __future__ import annotations

import json
import os


def salvage_trace(run_dir: str, prefix: str = "") -> None:
    """A child killed while exporting leaves temporary files (Kineto's, the gzipped trace's, result.json's) and
    the parts of a trace recorded in several profiler sessions, or an unzipped trace: remove the former; keep
    the latter, gzipped, when it is complete (a usable trace, without perfaudit's probes)."""
    for leftover in ("trace.json.tmp", "trace.json.gz.tmp", "result.json.tmp"):
        path = os.path.join(run_dir, prefix + leftover)
        if os.path.exists(path):
            os.remove(path)
    for name in os.listdir(run_dir):  # export.py's trace.json.partN (and their own .tmp)
        if name.startswith(prefix + "trace.json.part"):
            os.remove(os.path.join(run_dir, name))
    plain, final = os.path.join(run_dir, prefix + "trace.json"), os.path.join(run_dir, prefix + "trace.json.gz")
    if not os.path.exists(plain):
        return
    if not os.path.exists(final) and _complete_json(plain):
        import gzip
        import shutil
        try:
            with open(plain, "rb") as src, gzip.open(final, "wb", compresslevel=3) as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except OSError:  # no room for the gzipped copy: the plain trace is kept, whole and readable
            if os.path.exists(final):
                os.remove(final)
            return
    os.remove(plain)


def _complete_json(path: str) -> bool:
    with open(path, "rb") as f:
        f.seek(max(os.path.getsize(path) - 64, 0))
        return f.read().rstrip().endswith(b"}")


def phase_reached(run_dir: str, phase: str, prefix: str = "") -> bool:
    try:
        with open(os.path.join(run_dir, prefix + "progress.jsonl")) as f:
            return any(f'"phase": "{phase}"' in line for line in f)
    except OSError:
        return False


def progress_record(run_dir: str, prefix: str = "") -> dict:
    """What the progress file says was reached, for a child that died before writing result.json."""
    seen: dict = {}
    try:
        with open(os.path.join(run_dir, prefix + "progress.jsonl")) as f:
            for line in f:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if event.get("phase") == "profiling":
                    seen["profiling_started"] = True
                elif event.get("phase") == "step":
                    seen["steps_recorded"], seen["warmup"] = event.get("step"), event.get("warmup")
    except OSError:
        pass
    return seen
