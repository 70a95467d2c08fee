"""Small traces derived from the real ones in tests/data/gpu_traces, each showing one case no shared trace
shows as it is. The outputs in tests/data/derived/ are committed; this script says exactly how each
was made (run it again to rebuild them: `python tests/data/derive_fixtures.py`).

Every fixture keeps the source trace's own events (trimmed to its first steps to stay small) and
changes one thing:

- alloc_churn_mi250: AMD MI250 training (hta/amd_mi250_minitoy_train); 40 hipMalloc/hipFree pairs
  inserted in each step inside `aten::empty` ops, later events shifted by the time they take (the
  caching allocator switched off).
- no_profilerstep_autotune_v100: V100 training (hta/ns_resolution_v100_rank0) without its ProfilerStep
  annotations, and 5 s of cudnn autotuning (a `cudnn_autotune` op with a benchmark kernel) inserted in
  the first iteration: steps must come from the optimizer steps, the autotuning left out.
- no_device_props_v100: the same V100 trace, two steps, its deviceProperties dropped: the kernel names
  (volta_*) still say it has tensor cores.
- deepep_ampere: a rank of a 128-GPU job with NCCL (hta/sampled_rank0), the NCCL kernels renamed to the
  expert-parallel all-to-all kernels DeepEP launches (dispatch/combine).
- small_kernel_flood_a100: the same A100 trace, two steps, every short elementwise kernel (and its
  launch) repeated five more times right after it, later events shifted: a flood of tiny kernels that
  are still under 30 % of all kernels while the GPU idles waiting for their launches.
"""
from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHARED = HERE / "gpu_traces"
OUT = HERE / "derived"


def _load(rel: str) -> dict:
    with gzip.open(SHARED / rel) as f:
        return json.load(f)


def _save(name: str, data: dict) -> None:
    OUT.mkdir(exist_ok=True)
    with gzip.open(OUT / f"{name}.json.gz", "wt", compresslevel=9) as f:
        json.dump(data, f, separators=(",", ":"))
    print(f"{name}: {(OUT / f'{name}.json.gz').stat().st_size // 1024} KiB")


def _steps(events: list[dict]) -> list[dict]:
    return sorted((e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")),
                  key=lambda e: e["ts"])


def _trim(data: dict, steps: int) -> dict:
    """The events up to the end of the first `steps` ProfilerSteps (metadata events kept)."""
    marks = _steps(data["traceEvents"])
    start, end = marks[0]["ts"], marks[steps - 1]["ts"] + marks[steps - 1]["dur"]
    data["traceEvents"] = [e for e in data["traceEvents"] if e.get("ph") != "X" and e.get("ph") != "f"
                           and e.get("ph") != "s" or (isinstance(e.get("ts"), (int, float)) and start <= e["ts"] <= end)]
    return data


def _shift_after(events: list[dict], t: float, by: float, keep: tuple = ()) -> None:
    for e in events:
        if any(e is k for k in keep):
            continue
        if isinstance(e.get("ts"), (int, float)) and e["ts"] >= t:
            e["ts"] += by
        elif e.get("ph") == "X" and isinstance(e.get("ts"), (int, float)) and e["ts"] < t < e["ts"] + e.get("dur", 0):
            e["dur"] += by  # an enclosing range grows by what was put inside it


def alloc_churn() -> None:
    data = _load("hta/amd_mi250_minitoy_train.json.gz")
    events = data["traceEvents"]
    host = next(e for e in events if e.get("cat") == "cpu_op")
    pid, tid = host["pid"], host["tid"]
    for step in _steps(events):
        t = step["ts"] + 1.0
        inserted = []
        for i in range(40):
            corr = 900000 + int(t) % 100000 + i
            op = {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": pid, "tid": tid, "ts": t, "dur": 260.0,
                  "args": {}}
            inserted += [op,
                         {"ph": "X", "cat": "cuda_runtime", "name": "hipMalloc", "pid": pid, "tid": tid, "ts": t + 5,
                          "dur": 60.0, "args": {"correlation": corr}},
                         {"ph": "X", "cat": "cuda_runtime", "name": "hipFree", "pid": pid, "tid": tid, "ts": t + 70,
                          "dur": 180.0, "args": {"correlation": corr + 1}}]
            t += 261.0
        _shift_after(events, step["ts"] + 1.0, t - step["ts"] - 1.0)
        events.extend(inserted)
    _save("alloc_churn_mi250", data)


def no_profilerstep_autotune() -> None:
    data = _trim(_load("hta/ns_resolution_v100_rank0.json.gz"), 4)
    events = [e for e in data["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")]
    data["traceEvents"] = events
    first = min(e["ts"] for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op")
    host = next(e for e in events if e.get("cat") == "cpu_op")
    kernel = next(e for e in events if e.get("cat") == "kernel")
    _shift_after(events, first + 0.5, 5_000_000.0)
    events.append({"ph": "X", "cat": "cpu_op", "name": "cudnn_autotune", "pid": host["pid"], "tid": host["tid"],
                   "ts": first + 1.0, "dur": 4_999_000.0, "args": {}})
    events.append({**copy.deepcopy(kernel), "name": "cudnn::benchmark_kernel (inserted)", "ts": first + 2.0,
                   "dur": 4_990_000.0, "args": {}})
    _save("no_profilerstep_autotune_v100", data)


def no_device_props() -> None:
    data = _trim(_load("hta/ns_resolution_v100_rank0.json.gz"), 2)
    data.pop("deviceProperties", None)
    _save("no_device_props_v100", data)


def deepep() -> None:
    data = _load("hta/sampled_rank0.json.gz")
    for i, e in enumerate(e for e in data["traceEvents"] if "nccl" in str(e.get("name", "")).lower()):
        e["name"] = ("void deep_ep::intranode::dispatch<8, 768, 8192>(void*, float*, int*, int)" if i % 2 == 0 else
                     "void deep_ep::intranode::combine<nv_bfloat16, 8, 768>(void*, float*, int*)")
    _save("deepep_ampere", data)


def small_kernel_flood() -> None:
    data = _trim(_load("hta/nccl_data_a100_rank0.json.gz"), 2)
    events = data["traceEvents"]
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") == "cuda_runtime" and "LaunchKernel" in e.get("name", "") and "correlation" in e.get("args", {})}
    small = sorted((e for e in events if e.get("cat") == "kernel" and e.get("dur", 99) < 10
                    and "elementwise" in e.get("name", "") and e.get("args", {}).get("correlation") in launches),
                   key=lambda e: e["ts"], reverse=True)  # from the end: each shift leaves earlier ones in place
    next_corr = 10_000_000
    for kernel in small:
        launch = launches[kernel["args"]["correlation"]]
        gap = launch["dur"] + 2.0
        copies = []
        for k in range(1, 6):
            next_corr += 1
            copies.append({**launch, "ts": launch["ts"] + k * gap, "args": {**launch["args"], "correlation": next_corr}})
            copies.append({**kernel, "ts": max(kernel["ts"] + k * (kernel["dur"] + 1.0), launch["ts"] + k * gap + 3.0),
                           "args": {**kernel["args"], "correlation": next_corr}})
        _shift_after(events, launch["ts"] + launch["dur"] + 0.1, 5 * gap, keep=(kernel,))
        events.extend(copies)
    _save("small_kernel_flood_a100", data)


if __name__ == "__main__":
    alloc_churn()
    no_profilerstep_autotune()
    no_device_props()
    deepep()
    small_kernel_flood()
