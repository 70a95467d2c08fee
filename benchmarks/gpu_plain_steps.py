"""Each script run plainly on a real GPU (no profiler, no perfaudit): its step time and device memory.

    python benchmarks/gpu_plain_steps.py OUT.json SCRIPT [SCRIPT ...]

The references that perfaudit's projection (a CPU run projected onto this GPU) and its emulated device memory
are checked against (docs/accuracy.md): a step is an optimizer step (a global post-hook counts them). After
WARMUP steps the GPU queue is drained and a clock started; after TIMED more it is drained again: the plain
step is the mean between. Memory: torch's peak allocated and reserved at the end of step 7 (perfaudit's
default window: 2 warm-up + 5 measured) and at the end, and what the device holds beyond torch's pool
(`mem_get_info`: the CUDA context and library workspaces outside the caching allocator). Each timed step's
host time between optimizer steps (`each_ms`, the queue not drained) and their median (`median_ms`): the
reference for host-bound steps, which a mean over epoch ends and logging steps overstates.
PLAIN_STEPS_RESET_AFTER_FIRST=1: the peaks from step 2 on (torch's counters reset after the first step);
PLAIN_STEPS_HISTORY=state|all: the allocator's history on from CUDA's start (what it costs a step).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

WARMUP, TIMED, WINDOW_END = 3, 20, 7


def child(script: str) -> None:
    import runpy

    import torch

    seen: dict = {"script": script, "steps": 0}
    state = {"t0": 0.0, "last": 0.0}

    def finish() -> None:
        if seen.get("done"):
            return
        seen["done"] = True
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
            free, total = torch.cuda.mem_get_info()
            seen.update(peak_allocated=torch.cuda.max_memory_allocated(), peak_reserved=torch.cuda.max_memory_reserved(),
                        device_used=total - free, reserved_now=torch.cuda.memory_reserved(), total=total)
        os.write(int(os.environ["PLAIN_STEPS_FD"]), (json.dumps(seen) + "\n").encode())

    def post_step(optimizer, args, kwargs) -> None:
        seen["steps"] += 1
        n = seen["steps"]
        now = time.perf_counter()
        if WARMUP < n <= WARMUP + TIMED:  # each step's host time, not drained (host-bound steps: their length)
            seen.setdefault("each_ms", []).append(round((now - state["last"]) * 1e3, 3))
        state["last"] = now
        if n == WINDOW_END and torch.cuda.is_initialized():
            seen["window_peak_allocated"] = torch.cuda.max_memory_allocated()
            seen["window_peak_reserved"] = torch.cuda.max_memory_reserved()
        if n == 1 and os.environ.get("PLAIN_STEPS_RESET_AFTER_FIRST") and torch.cuda.is_initialized():
            torch.cuda.synchronize()  # the peaks from step 2 on: without the first step's cudnn.benchmark search
            torch.cuda.reset_peak_memory_stats()
            seen["peaks_from"] = "step 2"
        if n == WARMUP:
            if torch.cuda.is_initialized():
                torch.cuda.synchronize()
            state["t0"] = time.perf_counter()
        elif n == WARMUP + TIMED:
            if torch.cuda.is_initialized():
                torch.cuda.synchronize()
            seen["step_ms"] = (time.perf_counter() - state["t0"]) / TIMED * 1e3
            seen["median_ms"] = sorted(seen["each_ms"])[len(seen["each_ms"]) // 2]
            finish()
            os._exit(0)

    from torch.optim.optimizer import register_optimizer_step_post_hook
    register_optimizer_step_post_hook(post_step)
    if os.environ.get("PLAIN_STEPS_HISTORY"):  # the allocator's history on from CUDA's start (its cost on the step)
        torch.cuda._lazy_call(lambda: torch.cuda.memory._record_memory_history(
            enabled=os.environ["PLAIN_STEPS_HISTORY"], context="alloc", stacks="python"))
        seen["history"] = os.environ["PLAIN_STEPS_HISTORY"]
    sys.argv = [script]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
    except BaseException as exc:  # noqa: BLE001 - a reference run reports how the script ended
        seen["ended"] = f"{type(exc).__name__}: {exc}"[:200]
    finish()
    os._exit(0)


def main() -> None:
    out, scripts = sys.argv[1], sys.argv[2:]
    results = []
    for script in scripts:
        read, write = os.pipe()
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, __file__, "--child", script], pass_fds=(write,),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                env={**os.environ, "PLAIN_STEPS_FD": str(write)})
        os.close(write)
        try:
            _, err = proc.communicate(timeout=150)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        line = os.read(read, 1 << 16).decode().strip()
        os.close(read)
        result = json.loads(line) if line else {"script": script, "failed": err.decode()[-300:]}
        result["wall_s"] = round(time.perf_counter() - t0, 1)
        results.append(result)
        print(json.dumps(result), flush=True)
    with open(out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    if sys.argv[1] == "--child":
        child(sys.argv[2])
    else:
        main()
